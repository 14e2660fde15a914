"""The scenarios on a sealed Pi: only the bridge writes to it.

One prompt streamed, Pi's bash tool, thinking with tool events and priced usage, a stalled
provider, two prompts on one engine, a stop mid-stream, a retry after HTTP 500 and retries
running out. None of them raises the ``unsealed`` signal.
"""

from __future__ import annotations

import json

import trio

from tests.shared.pi_scenarios.expects import count_types, expect_overlaps, expect_receipt, first_index
from tests.shared.pi_scenarios.outcome import Outcome, expect, known
from tests.shared.pi_scenarios.runner import Ctx, load_model_server, scenario

PLAIN_REPLY = "Hello from the scripted model, through the sealed Pi."
TOOL_COMMAND = "echo tool says hi"
TOOL_REPLY = "The command printed: tool says hi"


@scenario("plain", "one prompt, one streamed text reply", script=[{"text": PLAIN_REPLY, "chunk": 8}])
async def plain(ctx: Ctx) -> None:
    """One prompt; ends at its receipt."""
    await ctx.prompt("Say hello.")


@plain.check
def _check_plain(o: Outcome) -> None:
    r = expect_receipt(o, "p1", "finished", reply=PLAIN_REPLY)
    expect(o.texts["p1"] == PLAIN_REPLY, f"plain: streamed {o.texts['p1']!r}")
    expect(r.run == "run-1" and r.generation == 1 and r.disposition == "started", f"plain: {r!r}")
    indices = f"plain: indices {r.ack_idx} {r.working_idx} {r.settle_idx}"
    ack_idx, working_idx, settle_idx = (known(i, indices) for i in (r.ack_idx, r.working_idx, r.settle_idx))
    expect(ack_idx < working_idx < settle_idx, indices)
    expect_overlaps(o)
    expect(o.signal_names() == [], f"plain: signals {o.signal_names()}")
    # SPEC §2: the ack comes right before its agent_start.
    ack = o.recv(start=ack_idx - 1, end=ack_idx + 1)
    expect([v.get("type") for _, v in ack] == ["response", "agent_start"], f"plain: around the ack {ack}")
    events = o.run_events("p1")
    expect(count_types(events, "agent_start") == 1 and count_types(events, "agent_end") == 1, "plain: one run")
    expect(events[-1] == {"type": "agent_settled", "aborted": False}, f"plain: last event {events[-1]}")
    expect(len(o.requests) == 1, f"plain: {len(o.requests)} model requests")


@scenario(
    "tool_use",
    "the model calls Pi's bash tool (echo), then replies with text",
    script=[{"tool_call": {"name": "bash", "arguments": {"command": TOOL_COMMAND}}}, {"text": TOOL_REPLY}],
)
async def tool_use(ctx: Ctx) -> None:
    """One prompt; ends at its receipt."""
    await ctx.prompt("Run the echo command and tell me what it printed.")


@tool_use.check
def _check_tool_use(o: Outcome) -> None:
    expect_receipt(o, "p1", "finished", reply=TOOL_REPLY)
    expect_overlaps(o)
    events = o.run_events("p1")
    expect(count_types(events, "agent_start") == 1, "tool_use: the tool call and the reply are one run")
    expect(count_types(events, "turn_start") == 2, "tool_use: two turns")
    starts = [e for e in events if e.get("type") == "tool_execution_start"]
    ends = [e for e in events if e.get("type") == "tool_execution_end"]
    expect(
        len(starts) == 1 and starts[0].get("toolName") == "bash" and starts[0].get("args") == {"command": TOOL_COMMAND},
        f"tool_use: tool start {starts}",
    )
    expect(len(ends) == 1 and ends[0].get("isError") is False, f"tool_use: tool end {ends}")
    output = ((ends[0].get("result") or {}).get("structuredContent") or {}).get("output")
    expect(output == "tool says hi\n", f"tool_use: bash output {output!r}")
    stops = [
        e["message"].get("stopReason")
        for e in events
        if e.get("type") == "message_end" and e["message"].get("role") == "assistant"
    ]
    expect(stops == ["toolUse", "stop"], f"tool_use: assistant stop reasons {stops}")
    expect(len(o.requests) == 2, f"tool_use: {len(o.requests)} model requests")
    tool_msgs = [m for m in o.requests[1]["body"]["messages"] if m.get("role") == "tool"]
    expect(tool_msgs and "tool says hi" in json.dumps(tool_msgs), "tool_use: the tool result went back to the model")


THINK_TEXT = "Three lines are wanted; bash can print them."
EVENTS_COMMAND = "for i in 1 2 3; do echo line$i; sleep 0.3; done"
EVENTS_REPLY = "It printed line1, line2 and line3."
PRICES = {"input": 3.0, "output": 15.0, "cacheRead": 0.3, "cacheWrite": 3.75}


@scenario(
    "thinking_tool_usage",
    "thinking, then a bash call that prints three lines over 0.9 s, then a reply; the prompt asks for its "
    "events, and the model reports usage (with cached tokens) at priced rates",
    script=[
        {
            "reasoning": THINK_TEXT,
            "tool_call": {"name": "bash", "arguments": {"command": EVENTS_COMMAND}},
            "usage": {"prompt_tokens": 1000, "completion_tokens": 50, "cached_tokens": 200},
        },
        {"text": EVENTS_REPLY, "usage": {"prompt_tokens": 1200, "completion_tokens": 30}},
    ],
    prices=PRICES,
)
async def thinking_tool_usage(ctx: Ctx) -> None:
    """One prompt, its events kept in ``facts["events"]``; ends at its receipt."""
    handle = await ctx.bridge.submit("Print three lines with bash.", events=True)
    ctx.submitted.append(handle.request)
    ctx.facts["events"] = [e.to_json() async for e in handle.events()]
    await handle.receipt()


@thinking_tool_usage.check
def _check_thinking_tool_usage(o: Outcome) -> None:
    name = o.name
    r = expect_receipt(o, "p1", "finished", reply=EVENTS_REPLY)
    events = o.facts["events"]
    kinds = [e["event"] for e in events]
    expect(all(e["id"] == "p1" for e in events), f"{name}: events of another prompt")
    expect("".join(e["delta"] for e in events if e["event"] == "thinking") == THINK_TEXT, f"{name}: thinking")
    expect("".join(e["delta"] for e in events if e["event"] == "text") == EVENTS_REPLY, f"{name}: text")
    expect(kinds.count("tool-start") == 1 and kinds.count("tool-end") == 1, f"{name}: tool events {kinds}")
    expect(kinds.count("tool-update") >= 2, f"{name}: tool updates {kinds.count('tool-update')}")
    end = next(e for e in events if e["event"] == "tool-end")
    expect(end["result"].split() == ["line1", "line2", "line3"] and not end["isError"], f"{name}: {end}")
    expect(kinds.count("turn-start") == 2 and kinds.count("turn-end") == 2, f"{name}: turns {kinds}")
    u = r.usage
    expect(u is not None, f"{name}: no usage")
    assert u is not None
    got = (u.input, u.output, u.cache_read, u.cache_write, u.total_tokens, u.messages)
    expect(got == (2000, 80, 200, 0, 2280, 2), f"{name}: usage {got}")
    cost = (2000 * PRICES["input"] + 80 * PRICES["output"] + 200 * PRICES["cacheRead"]) / 1e6
    expect(abs(u.cost - cost) < 1e-12, f"{name}: cost {u.cost} != {cost}")
    expect((u.provider, u.model) == ("scripted", "scripted-model"), f"{name}: answered by {u.provider}/{u.model}")
    expect_overlaps(o)
    expect(o.signal_names() == [], f"{name}: signals {o.signal_names()}")


@scenario(
    "stalled",
    "the provider accepts the request and never answers: the stall timeout (1.5 s) stops the run",
    script=[{"hang": True}],
    config={"stall_timeout": 1.5},
)
async def stalled(ctx: Ctx) -> None:
    """One prompt; ends at its receipt (the stall timeout's)."""
    await ctx.prompt("Anyone there?")


@stalled.check
def _check_stalled(o: Outcome) -> None:
    name = o.name
    notes = [e.value for e in o.entries if e.kind == "note" and e.value.get("event") == "stop"]
    expect([n["by"] for n in notes] == ["stall"], f"{name}: stop notes {notes}")
    r = expect_receipt(o, "p1", "failed", "stalled", stop=notes[0]["stop"])
    signals = [n for n in o.signals if n["signal"] == "stalled"]
    expect(
        len(signals) == 1 and signals[0]["request"] == "p1" and signals[0]["stop"] == r.stop,
        f"{name}: stalled signals {signals}",
    )
    assert r.times.sent is not None and r.times.settled is not None
    took = r.times.settled - r.times.sent
    expect(1.5 <= took < 1.5 + 5.0, f"{name}: settled {took:.2f} s after the send")
    expect(len(o.requests) == 1, f"{name}: {len(o.requests)} model requests")


@scenario(
    "two_prompts", "two prompts in a row on one engine", script=[{"text": "first reply"}, {"text": "second reply"}]
)
async def two_prompts(ctx: Ctx) -> None:
    """Two prompts at once; ends at the second one's receipt."""
    h1 = await ctx.submit("first prompt")
    h2 = await ctx.submit("second prompt")  # waits in the FIFO while p1 holds the slot
    await ctx.stream(h1)
    await ctx.stream(h2)
    await h2.receipt()


@two_prompts.check
def _check_two_prompts(o: Outcome) -> None:
    r1 = expect_receipt(o, "p1", "finished", reply="first reply")
    r2 = expect_receipt(o, "p2", "finished", reply="second reply")
    expect((r1.run, r2.run) == ("run-1", "run-2"), f"two_prompts: runs {r1.run}, {r2.run}")
    expect(r1.pid == r2.pid and r1.generation == r2.generation == 1, "two_prompts: one engine")
    sent, settled = known(r2.times.sent, "two_prompts: p2 unsent"), known(r1.times.settled, "two_prompts: p1 unsettled")
    expect(sent >= settled, "two_prompts: p2 was sent before p1 settled")
    ack, settle = known(r2.ack_idx, "two_prompts: p2 unacked"), known(r1.settle_idx, "two_prompts: p1 unsettled")
    expect(ack > settle, "two_prompts: p2's ack before p1's settle")
    expect_overlaps(o)
    expect(o.signal_names() == [], f"two_prompts: signals {o.signal_names()}")


@scenario(
    "stopped_mid_stream",
    "a slow stream stopped after its first text",
    script=[{"words": 200, "delay": 0.02, "chunk": 8}],
)
async def stopped_mid_stream(ctx: Ctx) -> None:
    """One slow prompt, stopped after its first text; ends at its receipt."""
    handle = await ctx.submit("Write a long answer.")

    async def stop() -> None:
        """Stop the prompt; ends when the stop is answered."""
        ctx.facts["stop"] = await handle.stop()
        ctx.facts["stop_at"] = trio.current_time()

    await ctx.stream(handle, on_first=stop)
    await handle.receipt()
    expect("stop_at" in ctx.facts, "stopped_mid_stream: no text was streamed before the receipt: nothing to stop")
    ctx.facts["settled_after_stop_s"] = trio.current_time() - ctx.facts["stop_at"]


@stopped_mid_stream.check
def _check_stopped(o: Outcome) -> None:
    stop = o.facts.get("stop")
    expect(stop, "stopped_mid_stream: stop() returned no stop id")
    r = expect_receipt(o, "p1", "failed", "interrupted", stop=stop)
    expect(
        o.facts["settled_after_stop_s"] < 2.0,
        f"stopped_mid_stream: settled {o.facts['settled_after_stop_s']:.2f}s after the stop",
    )
    expect_overlaps(o)  # the bridge's clear_queue before the abort: its empty queue_update is caused
    sends = [c.get("type") for c in o.sends("clear_queue", "abort")]
    expect(sends == ["clear_queue", "abort"], f"stopped_mid_stream: stop commands {sends}")
    events = o.run_events("p1")
    last_asst = [e for e in events if e.get("type") == "message_end" and e["message"].get("role") == "assistant"][-1]
    expect(
        last_asst["message"].get("stopReason") == "aborted",
        f"stopped_mid_stream: {last_asst['message'].get('stopReason')}",
    )
    settled = first_index(o, lambda v: v.get("type") == "agent_settled", "agent_settled")
    expect(
        o.recv(start=settled - 1, end=settled)[0][1].get("aborted") is True, "stopped_mid_stream: agent_settled.aborted"
    )
    # SPEC §2: the abort response comes after agent_settled(aborted:true).
    abort_resp = first_index(o, lambda v: v.get("type") == "response" and v.get("id") == stop, "abort response")
    expect(abort_resp > settled, f"stopped_mid_stream: abort response at {abort_resp}, settled at {settled}")
    expect(r.reply is not None and o.texts["p1"].startswith(r.reply[:8]), "stopped_mid_stream: partial reply")
    expect(len(o.texts["p1"]) < len(load_model_server().make_words(200)), "stopped_mid_stream: the whole text streamed")


@scenario(
    "retry_after_500",
    "HTTP 500, then success: one run, two attempts, one settle",
    script=[{"status": 500}, {"text": "recovered after a 500"}],
)
async def retry_after_500(ctx: Ctx) -> None:
    """One prompt; ends at its receipt."""
    await ctx.prompt("Try again if it fails.")


@retry_after_500.check
def _check_retry(o: Outcome) -> None:
    r = expect_receipt(o, "p1", "finished", reply="recovered after a 500")
    expect(r.run == "run-1", f"retry_after_500: run {r.run}")
    events = o.run_events("p1")
    expect(
        count_types(events, "agent_start") == 2 and count_types(events, "agent_end") == 2,
        "retry_after_500: two agent_start…agent_end pairs",
    )
    expect(count_types(events, "agent_settled") == 1, "retry_after_500: one agent_settled")
    will = [e.get("willRetry") for e in events if e.get("type") == "agent_end"]
    expect(will == [True, False], f"retry_after_500: willRetry {will}")
    retry = [e for e in events if e.get("type", "").startswith("auto_retry")]
    expect(
        [(e["type"], e.get("success")) for e in retry] == [("auto_retry_start", None), ("auto_retry_end", True)],
        f"retry_after_500: {retry}",
    )
    users = [e for e in events if e.get("type") == "message_start" and e["message"].get("role") == "user"]
    expect(len(users) == 1, "retry_after_500: the retried attempt has no user message")
    expect_overlaps(o)
    expect(len(o.replay.settled) == 1 and len(o.replay.working) == 1, "retry_after_500: one working, one settled")
    expect(len(o.requests) == 2, f"retry_after_500: {len(o.requests)} model requests")


@scenario(
    "retries_exhausted",
    "HTTP 500 until Pi gives up (maxRetries 2)",
    script=[{"status": 500}, {"status": 500}, {"status": 500}],
)
async def retries_exhausted(ctx: Ctx) -> None:
    """One prompt; ends at its receipt."""
    await ctx.prompt("This will keep failing.")


@retries_exhausted.check
def _check_exhausted(o: Outcome) -> None:
    r = expect_receipt(o, "p1", "failed", None)
    expect(
        r.native_error and "500" in r.native_error and "scripted error 500" in r.native_error,
        f"retries_exhausted: nativeError {r.native_error!r}",
    )
    events = o.run_events("p1")
    will = [e.get("willRetry") for e in events if e.get("type") == "agent_end"]
    expect(
        count_types(events, "agent_start") == 3 and will == [True, True, False],
        f"retries_exhausted: attempts {count_types(events, 'agent_start')}, willRetry {will}",
    )
    end = [e for e in events if e.get("type") == "auto_retry_end"]
    expect(len(end) == 1 and end[0].get("success") is False, f"retries_exhausted: {end}")
    expect(events[-1] == {"type": "agent_settled", "aborted": False}, f"retries_exhausted: {events[-1]}")
    expect_overlaps(o)
    expect(len(o.requests) == 3, f"retries_exhausted: {len(o.requests)} model requests")
