"""What the controller sees of the engine's work (docs: guide/events.md): a prompt's
events, the usage and cost on its receipt, and the stall timeout -- against the real pinned Pi
and the scripted model server, read exactly as a controller reads them (``bridge serve``'s stdout,
or the API's ``PromptHandle.events()``).

Every wait is bounded; every process is killed in a ``finally``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import trio

from bridge.core.progress import PROGRESS_TYPES, RESULT_CHARS, UPDATE_CHARS, ToolEnd, ToolUpdate, translate
from bridge.core.receipts import Usage
from bridge.core.session import Session
from bridge.demo.model_server import start_server
from bridge.live.api import open_bridge
from bridge.live.supervisor import BridgeConfig
from bridge.profiles.pi import scripted_profile
from bridge.readers.replay import replay
from tests.helpers_live import ROOT, ServeProc, read_journal

#: Prices per million tokens for the scripted model (Pi computes each message's cost from them).
PRICES = {"input": 3.0, "output": 15.0, "cacheRead": 0.3, "cacheWrite": 3.75}


def scripted(tmp_path: Path, steps: list[dict[str, Any]]) -> Any:
    server = start_server(steps)
    server.models = server.write_models(str(tmp_path / "models"), cost=PRICES)
    return server


async def start_serve(tmp_path: Path, server: Any, *args: str) -> ServeProc:
    """``bridge serve`` with the sealed, pinned Pi against ``server``."""
    stderr_path = tmp_path / "serve.stderr"
    argv = [sys.executable, "-m", "bridge", "serve", "--journal", str(tmp_path / "j.jsonl")]
    argv += ["--models-json", server.models, "--provider", "scripted", "--model", "scripted-model", *args]
    with open(stderr_path, "wb") as err:
        proc = await trio.lowlevel.open_process(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, cwd=str(ROOT)
        )
    sp = ServeProc(proc, stderr_path)
    ready = await sp.next(timeout=30)
    assert ready is not None and ready["type"] == "ready", (ready, sp.stderr)
    return sp


async def serve_one(tmp_path: Path, steps: list[dict[str, Any]], prompt: dict[str, Any], *args: str) -> ServeProc:
    """One prompt through ``bridge serve``, read to its end (EOF after the drain)."""
    server = scripted(tmp_path, steps)
    sp = await start_serve(tmp_path, server, *args)
    try:
        await sp.send({"type": "prompt", "id": "p", "message": "go", **prompt})
        await sp.close_stdin()
        await sp.read_all(timeout=90)
        assert await sp.wait() == 0, sp.stderr
        return sp
    finally:
        await sp.kill()
        server.close()


def events_of(sp: ServeProc, kind: str | None = None) -> list[dict[str, Any]]:
    return [x for x in sp.lines if x["type"] == "event" and (kind is None or x["event"] == kind)]


def receipt_of(sp: ServeProc) -> dict[str, Any]:
    (r,) = [x["receipt"] for x in sp.receipts()]
    return r


TOOL_COMMAND = "for i in 1 2 3; do echo line$i; sleep 0.4; done"


async def test_a_tool_calling_run_with_thinking_as_a_controller_reads_it(pinned_pi: Any, tmp_path: Path) -> None:
    """Thinking, a real ``bash`` tool call (start, updates, end), the reply, the turns -- each
    event tagged with the prompt and its observation index, in the order Pi wrote them -- and
    the receipt's usage: the two scripted ``usage`` chunks summed, costed at the model's prices."""
    steps = [
        {
            "reasoning": "The user wants lines; bash can print them.",
            "tool_call": {"name": "bash", "arguments": {"command": TOOL_COMMAND}},
            "usage": {"prompt_tokens": 1000, "completion_tokens": 50, "cached_tokens": 200},
        },
        {"text": "Printed three lines.", "usage": {"prompt_tokens": 1200, "completion_tokens": 30}},
    ]
    with trio.fail_after(120):
        sp = await serve_one(tmp_path, steps, {"events": True})
    events = events_of(sp)
    assert events and all(e["id"] == "p" and isinstance(e["i"], int) for e in events)
    assert [e["i"] for e in events] == sorted(e["i"] for e in events)
    kinds = [e["event"] for e in events]
    # The shape of the run, consecutive duplicates (deltas, updates) collapsed.
    collapsed = [k for n, k in enumerate(kinds) if n == 0 or kinds[n - 1] != k]
    assert collapsed == [
        "turn-start",
        "thinking",
        "usage",
        "turn-end",
        "tool-start",
        "tool-update",
        "tool-end",
        "turn-start",
        "text",
        "usage",
        "turn-end",
    ] or collapsed == [
        "turn-start",
        "thinking",
        "usage",
        "tool-start",
        "tool-update",
        "tool-end",
        "turn-end",
        "turn-start",
        "text",
        "usage",
        "turn-end",
    ], collapsed
    assert "".join(e["delta"] for e in events_of(sp, "thinking")) == steps[0]["reasoning"]
    assert "".join(e["delta"] for e in events_of(sp, "text")) == "Printed three lines."
    (start,) = events_of(sp, "tool-start")
    assert start["tool"] == "bash" and start["args"] == {"command": TOOL_COMMAND} and start["argsTruncated"] == 0
    updates = events_of(sp, "tool-update")
    assert updates and all(u["callId"] == start["callId"] and u["tool"] == "bash" for u in updates)
    assert updates[-1]["output"].startswith("line1") and len(updates) >= 2
    (end,) = events_of(sp, "tool-end")
    assert end["callId"] == start["callId"] and end["isError"] is False and end["truncated"] == 0
    assert end["result"].split() == ["line1", "line2", "line3"]
    assert isinstance(end["durationMs"], (int, float)) and end["durationMs"] >= 800
    turn_ends = events_of(sp, "turn-end")
    assert [(t["stopReason"], t["toolResults"]) for t in turn_ends] == [("toolUse", 1), ("stop", 0)]
    r = receipt_of(sp)
    assert r["state"] == "finished" and r["reply"] == "Printed three lines."
    u = r["usage"]
    assert {k: u[k] for k in ("input", "output", "cacheRead", "cacheWrite", "totalTokens", "messages")} == {
        "input": 800 + 1200,
        "output": 50 + 30,
        "cacheRead": 200,
        "cacheWrite": 0,
        "totalTokens": (800 + 50 + 200) + (1200 + 30),
        "messages": 2,
    }
    cost = (2000 * PRICES["input"] + 80 * PRICES["output"] + 200 * PRICES["cacheRead"]) / 1e6
    assert u["cost"] == pytest.approx(cost, rel=1e-9)
    assert (u["provider"], u["model"]) == ("scripted", "scripted-model")
    # Usage as the run goes: one ``usage`` event per assistant message, as Pi ended it; they
    # sum to the receipt's, and the last one's running total is the receipt's.
    usages = events_of(sp, "usage")
    assert [(e["stopReason"], e["usage"]["input"], e["usage"]["output"]) for e in usages] == [
        ("toolUse", 800, 50),
        ("stop", 1200, 30),
    ]
    summed = Usage()
    for e in usages:
        summed = summed.plus(Usage.from_json(e["usage"]))
        assert Usage.from_json(e["total"]) == summed
    assert summed == Usage.from_json(u)
    # Nothing else streams: no ``text`` notifications without "stream", and no events for a
    # prompt that did not ask (the journal replays to the same usage).
    assert not [x for x in sp.lines if x["type"] == "text"]
    (again,) = replay(str(tmp_path / "j.jsonl")).receipts
    assert again.usage == Usage.from_json(u)
    report = diagnose(tmp_path / "j.jsonl")
    assert (
        "usage: 1 run(s), 2000 in / 80 out tokens, cache 200 read / 0 written, cost 0.00726 over 2 model calls"
        in report
    )


def diagnose(journal: Path) -> str:
    p = subprocess.run(
        [sys.executable, "-m", "bridge", "diagnose", str(journal)], capture_output=True, text=True, timeout=60
    )
    assert p.returncode in (0, 1), p.stderr
    return p.stdout


async def test_a_500_then_a_retry_shows_its_retry_events_and_counts_both_attempts(
    pinned_pi: Any, tmp_path: Path
) -> None:
    steps = [
        {"status": 500, "body": "boom"},
        {"text": "recovered", "usage": {"prompt_tokens": 10, "completion_tokens": 2}},
    ]
    with trio.fail_after(120):
        sp = await serve_one(tmp_path, steps, {"events": True})
    (start,) = events_of(sp, "retry-start")
    assert start["attempt"] == 1 and start["delayMs"] > 0 and "500" in start["error"]
    (end,) = events_of(sp, "retry-end")
    assert end["success"] is True and end["i"] > start["i"]
    r = receipt_of(sp)
    assert r["state"] == "finished" and r["reply"] == "recovered"
    # Both attempts' assistant messages are summed: the failed one reported no tokens.
    assert (r["usage"]["messages"], r["usage"]["input"], r["usage"]["output"]) == (2, 10, 2)


async def test_a_model_that_accepts_and_goes_silent_is_stopped_as_stalled(pinned_pi: Any, tmp_path: Path) -> None:
    """The provider takes the request and never answers: no event at all from Pi. With
    ``"stallTimeout": 2`` the controller gets a ``stalled`` signal, then the receipt
    ``failed``/``stalled`` within the stall timeout plus the stop's grace."""
    with trio.fail_after(120):
        sp = await serve_one(tmp_path, [{"hang": True}], {"events": True, "stallTimeout": 2})
    r = receipt_of(sp)
    assert (r["state"], r["reason"]) == ("failed", "stalled"), r
    (signal,) = [x for x in sp.lines if x["type"] == "signal" and x["signal"] == "stalled"]
    assert signal["request"] == "p" and signal["after"] == 2 and signal["stop"] == r["stop"]
    took = r["times"]["settled"] - r["times"]["sent"]
    assert 2 <= took < 2 + 5 + 3, took  # the stall, the stop's grace (5 s), slack for a loaded machine
    notes = [e["note"] for e in read_journal(tmp_path / "j.jsonl") if isinstance(e.get("note"), dict)]
    assert [(n["by"], n["stop"]) for n in notes if n.get("event") == "stop"] == [("stall", r["stop"])]
    assert [(x.state, x.reason) for x in replay(str(tmp_path / "j.jsonl")).receipts] == [("failed", "stalled")]
    report = diagnose(tmp_path / "j.jsonl")
    assert "receipt: p: failed (stalled): stopped by the bridge, not the controller" in report
    assert "--stall-timeout" in report and "showed nothing for 2 s" in report


async def test_a_tool_that_runs_longer_than_the_stall_timeout_is_not_a_stall(pinned_pi: Any, tmp_path: Path) -> None:
    """The stall timeout counts only while the run waits on the model: a silent 3 s ``sleep``
    under a 1.5 s stall timeout finishes."""
    steps = [{"tool_call": {"name": "bash", "arguments": {"command": "sleep 3; echo done"}}}, {"text": "slept"}]
    with trio.fail_after(120):
        sp = await serve_one(tmp_path, steps, {"stallTimeout": 1.5}, "--stall-timeout", "1.5")
    r = receipt_of(sp)
    assert (r["state"], r["reply"]) == ("finished", "slept"), r
    assert not [x for x in sp.lines if x["type"] == "signal"], sp.lines
    assert not events_of(sp), "events without asking for them"


async def test_the_api_gives_a_prompts_events_on_its_handle(pinned_pi: Any, tmp_path: Path) -> None:
    """``submit(..., events=True)`` and ``PromptHandle.events()``: the same records, ending at the receipt."""
    server = scripted(tmp_path, [{"reasoning": "hmm", "text": "hello there"}])
    try:
        with trio.fail_after(60):
            async with open_bridge(scripted_profile(server.models), journal=tmp_path / "j.jsonl") as bridge:
                handle = await bridge.submit("hi", events=True)
                seen = [event.to_json() async for event in handle.events()]
                receipt = await handle.receipt()
    finally:
        server.close()
    assert receipt.state == "finished" and receipt.usage is not None and receipt.usage.messages == 1
    assert "".join(e["delta"] for e in seen if e["event"] == "thinking") == "hmm"
    assert "".join(e["delta"] for e in seen if e["event"] == "text") == "hello there"
    assert seen[0]["event"] == "turn-start" and seen[-1]["event"] == "turn-end"


async def test_the_api_refuses_events_it_was_not_asked_for(tmp_path: Path) -> None:
    from bridge.profiles.command import CommandProfile
    from tests.helpers_live import fake_engine_argv

    async with open_bridge(CommandProfile(fake_engine_argv({})), journal=None, config=BridgeConfig()) as bridge:
        handle = await bridge.submit("hi")
        with pytest.raises(RuntimeError, match="events=True"):
            async for _ in handle.events():
                pass
        with pytest.raises(ValueError, match="stall_timeout"):
            await bridge.submit("again", stall_timeout=-1)
        with pytest.raises(TypeError, match="events must be True or False"):
            await bridge.submit("again", events="yes")  # type: ignore[arg-type]
        await handle.receipt()


# -- the pure parts -----------------------------------------------------------------------------


def test_tool_output_is_bounded() -> None:
    """A tool update carries the tail of the latest output; a result its head; a long
    argument is cut, and each says how much it left out."""
    big = "x" * (UPDATE_CHARS + 10) + "END"
    update = translate(
        {
            "type": "tool_execution_update",
            "toolCallId": "c",
            "toolName": "bash",
            "partialResult": {"content": [{"type": "text", "text": big}]},
        },
        7,
        "p",
    )
    assert isinstance(update, ToolUpdate) and update.output.endswith("END") and len(update.output) == UPDATE_CHARS
    assert update.truncated == len(big) - UPDATE_CHARS
    result = "r" * (RESULT_CHARS + 5)
    end = translate(
        {
            "type": "tool_execution_end",
            "toolCallId": "c",
            "toolName": "bash",
            "result": {"content": [{"type": "text", "text": result}, {"type": "image", "data": "..."}]},
            "isError": True,
        },
        8,
        "p",
    )
    assert isinstance(end, ToolEnd) and len(end.result) == RESULT_CHARS and end.truncated == 5 + len("[image]")
    assert end.is_error and end.to_json()["isError"] is True and end.to_json()["event"] == "tool-end"
    start = translate(
        {
            "type": "tool_execution_start",
            "toolCallId": "c",
            "toolName": "write",
            "args": {"path": "a", "content": "y" * 5000},
        },
        9,
        "p",
    )
    assert start is not None
    j = start.to_json()
    assert j["args"]["path"] == "a" and len(j["args"]["content"]) == 2001 and j["argsTruncated"] == 3000
    assert translate({"type": "agent_start"}, 1, "p") is None


def test_events_follow_the_slots_own_run_only_while_sealed() -> None:
    """A session asked for events gives them for its own run's lines, and none once unsealed."""
    s = Session(("clear_queue",))
    s.send({"type": "prompt", "id": "p", "message": "m"}, events=True)
    seen: list[dict[str, Any]] = []
    objs: list[Any] = [
        {"type": "response", "id": "p", "command": "prompt", "success": True, "data": {"disposition": "started"}},
        {"type": "agent_start"},
        {"type": "turn_start"},
        {"type": "message_update", "assistantMessageEvent": {"type": "text_delta", "delta": "hi"}},
        ["not", "an", "object"],  # a gap: the engine is unsealed
        {"type": "message_update", "assistantMessageEvent": {"type": "text_delta", "delta": "whose?"}},
    ]
    for obj in objs:
        seen += [e.to_json() for e in s.observe(obj)[1] if type(e) in PROGRESS_TYPES]  # type: ignore[union-attr]
    assert [(e["event"], e.get("delta")) for e in seen] == [("turn-start", None), ("text", "hi")]


def test_serve_refuses_bad_events_and_stall_fields() -> None:
    from bridge.controller.messages import ControllerError, parse_command

    for bad, word in (
        ({"events": "yes"}, '"events"'),
        ({"stallTimeout": -1}, '"stallTimeout"'),
        ({"stallTimeout": True}, '"stallTimeout"'),
        ({"stallTimeout": "2"}, '"stallTimeout"'),
    ):
        with pytest.raises(ControllerError, match=word):
            parse_command(json.dumps({"type": "prompt", "id": "a", "message": "m", **bad}).encode())
    ok = parse_command(b'{"type":"prompt","id":"a","message":"m","events":true,"stallTimeout":0}')
    assert ok.events is True and ok.stall_timeout == 0  # type: ignore[union-attr]


async def test_deltas_read_together_are_one_event_and_nothing_changes_order(tmp_path: Path) -> None:
    """A tool call, then 1,000 text deltas: the text events join what one read brought
    (``lines`` counts them, ``i`` is the first's), the tool's events keep their place before
    them, and every delta is accounted for once."""
    from bridge.profiles.command import CommandProfile
    from tests.helpers_live import fake_engine_argv

    reply = "".join(f"{n:04d} " for n in range(1000))  # 1,000 deltas of five characters
    behaviour = {"reply": reply, "deltas": 1000, "tools": 1, "update_shape": "delta"}
    profile = CommandProfile(fake_engine_argv({"prompts": [behaviour]}))
    with trio.fail_after(30):
        async with open_bridge(profile, journal=tmp_path / "j.jsonl", config=BridgeConfig()) as bridge:
            handle = await bridge.submit("go", events=True)
            seen = [e.to_json() async for e in handle.events()]
            receipt = await handle.receipt()
    assert receipt.state == "finished"
    texts = [e for e in seen if e["event"] == "text"]
    assert "".join(e["delta"] for e in texts) == reply
    assert sum(e["lines"] for e in texts) == 1000 and len(texts) < 1000
    deltas = [
        e.i
        for e in read_journal_entries(tmp_path / "j.jsonl")
        if e.kind in ("recv", "recv_elided") and e.value.get("type") == "message_update"
    ]
    assert [e["i"] for e in texts] == sorted(e["i"] for e in texts) and texts[0]["i"] == deltas[0]
    kinds = [e["event"] for e in seen]
    assert kinds.index("tool-end") < max(n for n, k in enumerate(kinds) if k == "text")
    assert [e["i"] for e in seen] == sorted(e["i"] for e in seen)


def read_journal_entries(path: Path) -> list[Any]:
    from bridge.transcript import open_transcript

    stream, reader = open_transcript(str(path))
    with stream:
        return list(reader)


def test_compaction_and_retry_lines_become_their_events() -> None:
    """Pi's compaction and retry lines (docs/json.md's examples), in the bridge's words."""
    start = translate({"type": "compaction_start", "reason": "threshold"}, 4, "p")
    end = translate(
        {"type": "compaction_end", "reason": "overflow", "aborted": False, "willRetry": True, "result": {}}, 5, "p"
    )
    failed = translate({"type": "compaction_end", "reason": "manual", "errorMessage": "x" * 900}, 6, "p")
    retry = translate(
        {"type": "auto_retry_start", "attempt": 1, "maxAttempts": 3, "delayMs": 2000, "errorMessage": "529"}, 7, "p"
    )
    gave_up = translate({"type": "auto_retry_end", "success": False, "attempt": 3, "finalError": "boom"}, 8, "p")
    assert [e.to_json() if e is not None else None for e in (start, end, failed, retry, gave_up)] == [
        {"type": "event", "event": "compaction-start", "id": "p", "i": 4, "reason": "threshold"},
        {
            "type": "event",
            "event": "compaction-end",
            "id": "p",
            "i": 5,
            "reason": "overflow",
            "aborted": False,
            "willRetry": True,
            "error": None,
        },
        {
            "type": "event",
            "event": "compaction-end",
            "id": "p",
            "i": 6,
            "reason": "manual",
            "aborted": False,
            "willRetry": False,
            "error": "x" * 500,
        },
        {
            "type": "event",
            "event": "retry-start",
            "id": "p",
            "i": 7,
            "attempt": 1,
            "maxAttempts": 3,
            "delayMs": 2000,
            "error": "529",
        },
        {"type": "event", "event": "retry-end", "id": "p", "i": 8, "success": False, "attempt": 3, "error": "boom"},
    ]


def test_a_retrys_wait_and_a_running_tool_pause_the_stall_clock() -> None:
    """What the session tells the stall timeout: a tool running pauses it; the retry's
    announced wait is added until the next line; anything else resumes it."""
    s = Session(())
    s.send({"type": "prompt", "id": "p", "message": "m"})
    for obj in (
        {"type": "response", "id": "p", "command": "prompt", "success": True, "data": {"disposition": "started"}},
        {"type": "agent_start"},
    ):
        s.observe(obj)
    assert s.stall_pause("p") == 0
    s.observe({"type": "auto_retry_start", "attempt": 1, "maxAttempts": 3, "delayMs": 2500})
    assert s.stall_pause("p") == 2.5
    s.observe({"type": "agent_start"})
    assert s.stall_pause("p") == 0
    s.observe({"type": "tool_execution_start", "toolCallId": "c1", "toolName": "bash", "args": {}})
    assert s.stall_pause("p") == float("inf")
    s.observe({"type": "tool_execution_update", "toolCallId": "c1", "toolName": "bash", "partialResult": {}})
    assert s.stall_pause("p") == float("inf")
    s.observe({"type": "tool_execution_end", "toolCallId": "c1", "toolName": "bash", "result": {}})
    assert s.stall_pause("p") == 0
    assert s.stall_pause("unknown") == 0


def test_a_read_of_streamed_deltas_ends_a_retrys_wait() -> None:
    """For a prompt that reads its events, a read of its deltas (taken as one run) ends the
    retry's wait as a line of them taken alone does."""
    from unittest import mock

    from bridge.core import framing
    from bridge.core.framing import MESSAGE_UPDATE, LineSplitter

    update = MESSAGE_UPDATE + b'"assistantMessageEvent":{"type":"text_delta","delta":"x"}}\n'
    s = Session(())
    s.send({"type": "prompt", "id": "p", "message": "m"}, events=True)
    for obj in (
        {"type": "response", "id": "p", "command": "prompt", "success": True, "data": {"disposition": "started"}},
        {"type": "agent_start"},
        {"type": "auto_retry_start", "attempt": 1, "maxAttempts": 3, "delayMs": 2500},
    ):
        s.observe(obj)
    assert s.stall_pause("p") == 2.5
    with mock.patch.object(framing, "BULK_MIN_LINES", 1):
        batch = LineSplitter().feed_runs(b"\n" + update * 3, MESSAGE_UPDATE, b"}")[1:]
    seen = list(s.observe_batch(batch))
    assert [type(x).__name__ for x in seen] == ["Streamed"] and s.stall_pause("p") == 0


async def test_answers_to_the_bridges_questions_do_not_keep_a_stalled_run_alive(tmp_path: Path) -> None:
    """The stall timeout counts from the engine's own lines: a controller asking for the models
    every half second while the run is silent does not put the stall off (found by trying it)."""
    from bridge.profiles.command import CommandProfile
    from tests.helpers_live import fake_engine_argv

    profile = CommandProfile(fake_engine_argv({"prompts": [{"hang": True}]}))
    with trio.fail_after(30):
        async with open_bridge(profile, journal=None, config=BridgeConfig()) as bridge:
            handle = await bridge.submit("quiet", stall_timeout=1.5)
            for _ in range(16):  # 8 s of questions, unless the receipt comes first
                if handle.receipt_nowait is not None:
                    break
                await bridge.models()
                await trio.sleep(0.5)
            r = await handle.receipt()
    assert (r.state, r.reason) == ("failed", "stalled")
    assert r.times.sent is not None and r.times.settled is not None
    assert r.times.settled - r.times.sent < 5.0, r.times
