"""The pool (issue 32: bridge/live/pool.py) with real engine processes: the fake engine for
routing, affinity, spares, reaping, the caps and closing (fast, and able to hang a run until it
is stopped), and one test through the real pinned Pi and the scripted model server. The rules
themselves are tests/test_pool_rules.py's, without processes."""

from __future__ import annotations

import asyncio
import json
import os
import signal
from pathlib import Path
from typing import Any

import pytest
import trio

from bridge import CommandProfile, ProfileError, Reason, State, open_pool
from bridge.core.receipts import Receipt
from bridge.demo.model_server import start_server
from bridge.demo.model_server.server import models_json
from bridge.live.pool import Pool
from bridge.live.pool_aio import AsyncioPool
from bridge.profiles.command import Launch
from bridge.profiles.pi import scripted_profile
from bridge.readers.replay import replay
from tests.helpers_live import ROOT, ServeProc, carried, fake_engine_argv, fast_config, leftovers, read_journal

HANG = CommandProfile(fake_engine_argv({"defaults": {"hang": True}}))
QUICK = CommandProfile(fake_engine_argv({}))


def pids(pool: Pool) -> list[int]:
    return [b.engine.pid for b in pool.engines.values() if b.engine is not None]


def sends(journal: Path) -> list[dict[str, Any]]:
    return [e["send"] for e in read_journal(journal) if "send" in e]


async def next_event(channel: trio.MemoryReceiveChannel[dict[str, Any]], event: str) -> dict[str, Any]:
    """The next pool notice ``event``; bounded, so a pool that never says it fails the test."""
    with trio.fail_after(30):
        async for note in channel:
            if note.get("type") == "pool" and note.get("event") == event:
                return note
    raise AssertionError(f"the pool closed without {event!r}")


def test_prompts_go_to_idle_engines_wait_when_all_are_busy_and_a_stop_frees_one() -> None:
    async def main() -> tuple[list[Receipt], dict[str, Any], list[int], list[str]]:
        async with open_pool(HANG, engines=2, journal=False, config=fast_config()) as pool:
            assert isinstance(pool, Pool) and sorted(pool.engines) == [1, 2], "both started at open"
            engine_pids = pids(pool)
            hs = [await pool.submit(f"task {k}", events=k == 2) for k in range(4)]
            status = pool.status()["pool"]
            assert await pool.stop("p4") is None, "a waiting prompt is cancelled by the pool"
            assert await pool.stop("p1") is not None, "a running one by its engine's bridge"
            r1 = await hs[0].receipt()
            with trio.fail_after(30):  # until p3 runs on the engine p1's stop freed
                async for _ in hs[2].events():
                    break
            taken = [h.engine for h in hs]
            for h in hs[1:3]:
                await h.stop()
            receipts = [await h.receipt() for h in hs]
            assert receipts[0] is r1
            return receipts, status, engine_pids, [str(t) for t in taken]

    receipts, status, engine_pids, taken = trio.run(main)
    assert sorted(status["running"].values()) == [1, 2] and status["waiting"] == ["p3", "p4"]
    assert [(r.state, r.reason) for r in receipts] == [
        (State.FAILED, Reason.INTERRUPTED),
        (State.FAILED, Reason.INTERRUPTED),
        (State.FAILED, Reason.INTERRUPTED),
        (State.REJECTED, Reason.CANCELLED),
    ]
    assert taken[2] == taken[0], "p3 went to the engine p1's stop freed"
    assert taken[3] == "None" and receipts[3].pid is None, "p4 never reached an engine"
    assert all(leftovers(pid) == [] for pid in engine_pids)


def test_a_conversation_keeps_its_engine_and_a_stranger_never_reads_it(tmp_path: Path) -> None:
    async def main() -> tuple[list[Any], dict[int, Path]]:
        async with open_pool(QUICK, engines=2, journal=tmp_path, config=fast_config()) as pool:
            out = []
            for k, conversation in enumerate(["a", None, "a", "b", None, "a", "b"]):
                handle = await pool.submit(f"m{k}", conversation=conversation)
                receipt = await handle.receipt()
                out.append((conversation, handle.engine, receipt.state, receipt.pid))
            return out, dict(pool.journals)

    seen, journals = trio.run(main)
    assert all(state is State.FINISHED for _, _, state, _ in seen)
    engine_of = {c: {e for cc, e, _, _ in seen if cc == c} for c in ("a", "b")}
    assert len(engine_of["a"]) == 1 and len(engine_of["b"]) == 1 and engine_of["a"] != engine_of["b"]
    assert len({pid for c, _, _, pid in seen if c == "a"}) == 1, "one engine process for all of a"
    assert sorted(journals) == [1, 2]
    for number, path in journals.items():
        assert path.name.endswith(f"-pool-engine-{number}.jsonl") and path.parent == tmp_path
        assert read_journal(path)[0]["pool"] == {"engine": number}


def test_a_stranger_on_a_used_engine_starts_afresh_and_a_conversation_goes_on(tmp_path: Path) -> None:
    async def main() -> dict[int, Path]:
        async with open_pool(QUICK, engines=1, journal=tmp_path, config=fast_config()) as pool:
            for text, conversation in [("a1", "a"), ("a2", "a")]:
                assert (await pool.prompt(text, conversation=conversation)).state is State.FINISHED
            pool.end_conversation("a")
            for text in ("x1", "x2"):
                assert (await pool.prompt(text)).state is State.FINISHED
            return dict(pool.journals)

    journals = trio.run(main)
    order = [s.get("message", s["type"]) for s in sends(journals[1]) if s["type"] in ("prompt", "new_session")]
    assert order == ["a1", "a2", "new_session", "x1", "new_session", "x2"]


def test_spares_are_kept_warm_and_idle_engines_beyond_them_are_reaped() -> None:
    async def main() -> tuple[list[int], list[int], list[int]]:
        async with open_pool(QUICK, engines=3, spares=1, idle_timeout=0.2, journal=False, config=fast_config()) as pool:
            heard = pool.signals()
            at_open = sorted(pool.engines)
            hs = [await pool.submit(f"t{k}", timeout=30) for k in range(3)]
            for h in hs:
                assert (await h.receipt()).state is State.FINISHED
            used = sorted({h.engine for h in hs if h.engine is not None})
            before = pids(pool)
            reaped = [(await next_event(heard, "engine-reaped"))["engine"]]
            while sum(e.state != "stopping" for e in pool.rules.engines.values()) > 1:
                reaped.append((await next_event(heard, "engine-reaped"))["engine"])
            with trio.fail_after(30):
                while len(pool.engines) > 1:
                    await trio.sleep(0.01)
            assert len(pool.engines) == 1, "one spare stays"
            return at_open, used, [p for p in before if p not in pids(pool)]

    at_open, used, gone = trio.run(main)
    assert at_open == [1], "spares=1: one engine at open"
    assert len(used) >= 2, "a busy spare is replaced, and the next prompt takes the new one"
    assert gone and all(leftovers(pid) == [] for pid in gone)


def test_the_queue_cap_rejects_and_closing_settles_every_prompt_and_reaps_every_engine() -> None:
    async def main() -> tuple[list[Receipt], list[int], Receipt]:
        async with open_pool(HANG, engines=1, queue_max=1, journal=False, config=fast_config()) as pool:
            hs = [await pool.submit(f"t{k}") for k in range(3)]
            engine_pids = pids(pool)
            assert (await hs[2].receipt()).reason is Reason.QUEUE_FULL
        late = await pool.prompt("after close")
        return [await h.receipt() for h in hs], engine_pids, late

    receipts, engine_pids, late = trio.run(main)
    assert [(r.state, r.reason) for r in receipts] == [
        (State.FAILED, Reason.CLOSING),
        (State.REJECTED, Reason.CLOSING),
        (State.REJECTED, Reason.QUEUE_FULL),
    ]
    assert (late.state, late.reason) == (State.REJECTED, Reason.CLOSING)
    assert engine_pids and all(leftovers(pid) == [] for pid in engine_pids)


def test_a_drain_runs_every_accepted_prompt_before_the_pool_closes() -> None:
    async def main() -> list[Receipt]:
        async with open_pool(QUICK, engines=2, spares=0, journal=False, drain_on_exit=True) as pool:
            hs = [await pool.submit(f"t{k}") for k in range(5)]
        return [await h.receipt() for h in hs]

    assert [r.state for r in trio.run(main)] == [State.FINISHED] * 5


def test_an_engine_down_for_its_crash_limit_leaves_the_pool_and_then_the_pool_rejects() -> None:
    crashing = CommandProfile(fake_engine_argv({"defaults": {"crash_at": 1}}))

    async def main() -> tuple[list[Receipt], Receipt, list[dict[str, Any]], list[int]]:
        async with open_pool(crashing, engines=2, journal=False, config=fast_config(crash_limit=1)) as pool:
            heard = pool.signals()
            engine_pids = pids(pool)
            receipts = [await pool.prompt(f"t{k}") for k in range(4)]
            assert pool.rules.down is not None
            last = await pool.prompt("none left")
            notes = []
            while True:
                try:
                    notes.append(heard.receive_nowait())
                except trio.WouldBlock:
                    break
            return receipts, last, notes, engine_pids

    receipts, last, notes, engine_pids = trio.run(main)
    # Each engine: its first prompt crashes it; its bridge finds itself down at the next one.
    assert sorted((r.state, r.reason) for r in receipts) == [
        (State.DELIVERY_UNKNOWN, Reason.ENGINE_EXITED),
        (State.DELIVERY_UNKNOWN, Reason.ENGINE_EXITED),
        (State.REJECTED, Reason.ENGINE_DOWN),
        (State.REJECTED, Reason.ENGINE_DOWN),
    ]
    assert (last.state, last.reason, last.pid) == (State.REJECTED, Reason.ENGINE_DOWN, None), "the pool's own"
    assert "went down" in (last.native_error or "")
    downs = sorted(n["engine"] for n in notes if n.get("type") == "pool" and n.get("event") == "engine-down")
    assert downs == [1, 2]
    assert all(leftovers(pid) == [] for pid in engine_pids)


class Refused:
    """A profile whose engines cannot be prepared."""

    name = "refused"

    def prepare(self) -> Launch:
        raise ProfileError("no engine here")


def test_an_engine_that_cannot_be_prepared_is_an_error_at_open_or_a_receipt_later() -> None:
    async def at_open() -> None:
        async with open_pool(Refused(), engines=2, journal=False):
            raise AssertionError("the block does not run")

    with pytest.raises(ProfileError, match="no engine here"):
        trio.run(at_open)

    async def later() -> Receipt:
        async with open_pool(Refused(), engines=2, spares=0, journal=False) as pool:
            return await pool.prompt("hi")

    receipt = trio.run(later)
    assert (receipt.state, receipt.reason, receipt.native_error) == (
        State.REJECTED,
        Reason.ENGINE_DOWN,
        "no engine here",
    )


def test_the_pool_under_asyncio_streams_and_settles_every_prompt(tmp_path: Path) -> None:
    async def main() -> tuple[str, list[Receipt], list[int]]:
        async with open_pool(QUICK, engines=2, journal=tmp_path) as pool:
            assert isinstance(pool, AsyncioPool)
            first = await pool.submit("streamed", stream=True)
            rest = [await pool.submit(f"t{k}", conversation="c") for k in range(3)]
            text = "".join([piece async for piece in first.text()])
            receipts = [await first.receipt()] + [await h.receipt() for h in rest]
            return text, receipts, sorted({h.engine for h in rest if h.engine is not None})

    text, receipts, conversation_engines = asyncio.run(main())
    assert text == "ok: streamed"
    assert [r.state for r in receipts] == [State.FINISHED] * 4
    assert len(conversation_engines) == 1
    assert len(list(tmp_path.glob("*-pool-engine-*.jsonl"))) == 2


def test_four_prompts_over_two_real_pinned_pis_get_four_finished_receipts(pinned_pi: object, tmp_path: Path) -> None:
    server = start_server([])
    models = tmp_path / "models.json"
    models.write_text(json.dumps(models_json(server.base_url)))

    async def main() -> tuple[list[Receipt], dict[int, Path]]:
        async with open_pool(scripted_profile(str(models)), engines=2, journal=tmp_path / "journals") as pool:
            hs = [await pool.submit(f"prompt {k}") for k in range(4)]
            return [await h.receipt() for h in hs], dict(pool.journals)

    try:
        receipts, journals = trio.run(main)
    finally:
        server.close()
    assert [(r.request, r.state) for r in receipts] == [(f"p{k}", State.FINISHED) for k in range(1, 5)]
    assert all(r.reply for r in receipts)
    assert sorted(journals) == [1, 2] and len({r.pid for r in receipts}) == 2
    replayed = {}
    for path in journals.values():
        for r in replay(str(path)).receipts:
            replayed[r.request] = r.state
    assert replayed == {f"p{k}": State.FINISHED for k in range(1, 5)}, "each journal holds its engine's receipts"


#: A run that calls a tool (its assistant message reports 12 + k tokens), then streams its reply
#: slowly enough for the bridge's stop to come first.
TOOL_THEN_SLOW = CommandProfile(fake_engine_argv({"defaults": {"tools": 1, "deltas": 8, "delta_delay": 0.25}}))
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"


def test_budgets_and_traces_reach_the_engine_s_bridge_and_bad_ones_are_refused_at_the_door() -> None:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from bridge.live.otel import use_tracer_provider

    async def main() -> tuple[Receipt, Receipt, list[str]]:
        async with open_pool(TOOL_THEN_SLOW, engines=1, journal=False) as pool:
            refused = []
            for bad in ({"budget_tokens": 2.5}, {"budget_usd": -1}, {"trace": "00-ab"}):
                with pytest.raises((TypeError, ValueError)) as e:
                    pool.submit_nowait("m", **bad)  # type: ignore[arg-type]
                refused.append(str(e.value))
            trace = {"traceparent": f"00-{TRACE_ID}-00f067aa0ba902b7-01"}
            over = await pool.prompt("spend", budget_tokens=1, trace=trace, request="over")
            within = await pool.prompt("spend", budget_tokens=10_000, request="within")
            assert pool.status()["pool"]["waiting"] == [], "nothing refused was accepted"
            return over, within, refused

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    try:
        with use_tracer_provider(provider):
            over, within, refused = trio.run(main)
    finally:
        provider.shutdown()
    assert (over.state, over.reason) == (State.FAILED, Reason.BUDGET), over
    assert over.usage is not None and over.usage.total_tokens > 1
    assert within.state is State.FINISHED, within
    assert "budget_tokens" in refused[0] and "usd" in refused[1] and "trace" in refused[2]
    finished = exporter.get_finished_spans()
    spans = {s.attributes["pi_bridge.request"]: s for s in finished if s.name.startswith("invoke_agent")}  # type: ignore[index]
    assert sorted(spans) == ["over", "within"]
    assert format(spans["over"].context.trace_id, "032x") == TRACE_ID, "the prompt's span continues its trace"
    assert format(spans["within"].context.trace_id, "032x") != TRACE_ID


def test_a_pool_prompt_past_its_budget_on_a_real_pinned_pi_is_stopped_failed_budget(
    pinned_pi: object, tmp_path: Path
) -> None:
    tool = {
        "tool_call": {"name": "bash", "arguments": {"command": "echo again"}},
        "usage": {"prompt_tokens": 1000, "completion_tokens": 50},
    }
    server = start_server([], default=tool)  # the model never stops calling tools
    models = tmp_path / "models.json"
    models.write_text(json.dumps(models_json(server.base_url, cost={"input": 10.0, "output": 30.0})))

    async def main() -> Receipt:
        async with open_pool(scripted_profile(str(models)), engines=1, journal=False) as pool:
            return await pool.prompt("keep going", budget_usd=0.02, conversation="c")

    try:
        receipt = trio.run(main)
    finally:
        server.close()
    per_message = 1000 * 10.0 / 1e6 + 50 * 30.0 / 1e6
    assert (receipt.state, receipt.reason) == (State.FAILED, Reason.BUDGET), receipt
    assert receipt.usage is not None and 2 * per_message - 1e-9 <= receipt.usage.cost <= 3 * per_message + 1e-9


def test_serve_with_engines_routes_conversations_and_names_each_line_s_engine(tmp_path: Path) -> None:
    async def main() -> tuple[list[dict[str, Any]], int | None, list[dict[str, Any]]]:
        sp = await ServeProc.start(tmp_path, fake_engine_argv({}), "--engines", "2", "--no-journal")
        for line in [
            {"type": "prompt", "id": "a1", "message": "one", "conversation": "a"},
            {"type": "prompt", "id": "x1", "message": "two"},
            {"type": "prompt", "id": "a2", "message": "three", "conversation": "a"},
            {"type": "configure", "thinking": "low"},
            {"type": "status"},
        ]:
            await sp.send(line)
        await sp.close_stdin()
        while await sp.next(timeout=30) is not None:
            pass
        with trio.fail_after(30):
            await sp.proc.wait()
        single = await ServeProc.start(tmp_path, fake_engine_argv({}), "--no-journal")
        await single.send({"type": "prompt", "id": "c1", "message": "hi", "conversation": "a"})
        await single.close_stdin()
        while await single.next(timeout=30) is not None:
            pass
        with trio.fail_after(30):
            await single.proc.wait()
        return sp.lines, sp.proc.returncode, single.lines

    lines, status, single = trio.run(main)
    assert status == 0 and lines[0]["type"] == "ready" and lines[-1] == {"type": "bye", "receipts": 3}
    receipts = {line["id"]: line for line in lines if line["type"] == "receipt"}
    assert sorted(receipts) == ["a1", "a2", "x1"]
    assert all(line["receipt"]["state"] == "finished" for line in receipts.values())
    assert receipts["a1"]["engine"] == receipts["a2"]["engine"] in (1, 2)
    assert receipts["a1"]["receipt"]["pid"] == receipts["a2"]["receipt"]["pid"]
    errors = [line for line in lines if line["type"] == "error"]
    assert len(errors) == 1 and errors[0]["line"] == 4 and "--engines" in errors[0]["error"]
    assert [line["type"] for line in lines if line["type"] == "status"] == ["status"]
    assert [line["event"] for line in lines if line["type"] == "pool"] == ["engine-stopped"] * 2, (
        "(started before ready)"
    )
    refused = [line for line in single if line["type"] == "error"]
    assert len(refused) == 1 and "--engines" in refused[0]["error"]
    assert not [line for line in single if line["type"] == "receipt"], "not accepted: no receipt owed"


def test_serve_with_engines_carries_a_prompt_s_budget_and_trace_to_its_engine(tmp_path: Path) -> None:
    argv = fake_engine_argv({"defaults": {"tools": 1, "deltas": 8, "delta_delay": 0.25}})

    async def main() -> list[dict[str, Any]]:
        sp = await ServeProc.start(tmp_path, argv, "--engines", "1", "--no-journal")
        trace = {"traceparent": f"00-{TRACE_ID}-00f067aa0ba902b7-01"}
        await sp.send({"type": "prompt", "id": "b", "message": "spend", "budgetTokens": 1, "trace": trace})
        await sp.send({"type": "prompt", "id": "bad", "message": "m", "budgetTokens": 1.5})
        await sp.close_stdin()
        while await sp.next(timeout=30) is not None:
            pass
        with trio.fail_after(30):
            await sp.proc.wait()
        return sp.lines

    lines = trio.run(main)
    [receipt] = [line for line in lines if line["type"] == "receipt"]
    assert receipt["id"] == "b" and receipt["engine"] == 1
    assert (receipt["receipt"]["state"], receipt["receipt"]["reason"]) == ("failed", "budget"), receipt
    [error] = [line for line in lines if line["type"] == "error"]
    assert error["line"] == 2 and "budgetTokens" in error["error"]


@pytest.mark.parametrize(
    "options, words",
    [
        (["--spares", "1"], "--spares and --idle-timeout go with --engines N"),
        (["--engines", "2", "--spares", "3"], "--spares must be from 0 to --engines (2), not 3"),
        (["--engines", "2", "--conversation", "c"], "with --engines each prompt names its own"),
    ],
)
def test_serve_pool_options_that_do_not_go_together_are_one_line_and_exit_2(options: list[str], words: str) -> None:
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "bridge", "serve", *options, "--", *fake_engine_argv()],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 2 and done.stdout == "", done
    [line] = done.stderr.splitlines()
    assert line.startswith("bridge serve: ") and words in line and line.endswith("(see bridge serve --help)"), line


def chats(server: Any) -> list[dict[str, Any]]:
    return [r for r in server.requests if r["path"].endswith("/chat/completions")]


async def requests_reach(server: Any, n: int) -> None:
    with trio.fail_after(60):
        while len(chats(server)) < n:
            await trio.sleep(0.05)


def test_a_conversation_moves_to_another_engine_when_its_own_is_busy_and_the_model_reads_its_history(
    pinned_pi: object, tmp_path: Path
) -> None:
    """R12 through two real pinned Pis: a's first prompt runs on engine X; a stranger at the cap
    takes X (busy); a's second prompt runs on the other engine, which takes a up (switch_session
    to the pool's stored copy, checked), and the model's request carries a's first exchange and
    nothing of the others."""
    server = start_server([{"text": "first reply"}, {"hang": True}, {"hang": True}, {"text": "second reply"}])
    models = tmp_path / "models.json"
    models.write_text(json.dumps(models_json(server.base_url)))

    async def main() -> tuple[list[Receipt], list[int | None], list[dict[str, Any]]]:
        async with open_pool(scripted_profile(str(models)), engines=2, journal=tmp_path / "journals") as pool:
            heard = pool.signals()
            a1 = await pool.submit("My name is Ada.", conversation="a")
            r1 = await a1.receipt()
            b1 = await pool.submit("hold on", conversation="b")
            await requests_reach(server, 2)
            s = await pool.submit("a stranger")  # every idle engine held, at the cap: a's is taken
            await requests_reach(server, 3)
            a2 = await pool.submit("What is my name?", conversation="a")
            assert a2.engine is None, "no engine idle: a2 waits"
            await b1.stop()  # b's engine is idle: a moves there
            r2 = await a2.receipt()
            await s.stop()
            receipts = [r1, await b1.receipt(), await s.receipt(), r2]
        with trio.fail_after(60):
            notes = [note async for note in heard]  # every one, to the pool's close
        return receipts, [a1.engine, b1.engine, s.engine, a2.engine], notes

    try:
        receipts, engines, notes = trio.run(main)
    finally:
        server.close()
    assert [r.state for r in receipts] == [State.FINISHED, State.FAILED, State.FAILED, State.FINISHED], receipts
    assert receipts[3].reply == "second reply"
    a1_engine, b1_engine, s_engine, a2_engine = engines
    assert s_engine == a1_engine and a2_engine == b1_engine != a1_engine, engines
    requests = chats(server)
    assert carried(requests[3]) == [
        ("user", "My name is Ada."),
        ("assistant", "first reply"),
        ("user", "What is my name?"),
    ], "engine 2's model request carries a's first exchange, and nothing of b's or the stranger's"
    recorded = [n["request"] for n in notes if n.get("type") == "pool" and n.get("event") == "conversation-recorded"]
    assert recorded[0] == receipts[0].request and receipts[3].request in recorded
    assert not [n for n in notes if n.get("event") in ("conversation-lost", "take-up-failed")]


def test_an_ended_conversation_s_key_starts_afresh_its_stored_history_gone(pinned_pi: object, tmp_path: Path) -> None:
    """end_conversation under R12: the pool's stored copy of the key is removed, so the key's
    next prompt -- on the same engine -- is a new conversation: the model reads nothing of the
    first exchange."""
    server = start_server([{"text": "first reply"}, {"text": "second reply"}])
    models = tmp_path / "models.json"
    models.write_text(json.dumps(models_json(server.base_url)))

    async def main() -> tuple[Receipt, Receipt]:
        async with open_pool(scripted_profile(str(models)), engines=1, journal=False) as pool:
            r1 = await pool.prompt("My name is Ada.", conversation="a")
            pool.end_conversation("a")  # (its recording may still be under way: removed as it ends)
            r2 = await pool.prompt("What is my name?", conversation="a")
            return r1, r2

    try:
        r1, r2 = trio.run(main)
    finally:
        server.close()
    assert (r1.state, r2.state) == (State.FINISHED, State.FINISHED), (r1, r2)
    assert carried(chats(server)[1]) == [("user", "What is my name?")], "nothing of the ended conversation"


def test_status_shows_a_conversation_s_prompt_done_once_its_receipt_is_out(pinned_pi: object, tmp_path: Path) -> None:
    """Issue 42: right after a conversation's receipt came, ``status()`` still said its prompt
    was running (R12's recording holds the engine). Now the prompt is no longer running and its
    engine says ``recording`` until the exchange is kept, then ``idle``."""
    server = start_server([{"text": "first reply"}])
    models = tmp_path / "models.json"
    models.write_text(json.dumps(models_json(server.base_url)))

    async def main() -> tuple[Receipt, dict[str, Any], dict[str, Any]]:
        async with open_pool(scripted_profile(str(models)), engines=1, journal=False) as pool:
            r1 = await pool.prompt("My name is Ada.", conversation="a")
            at_receipt = pool.status()["pool"]
            channel = pool.signals()
            while pool.status()["pool"]["engines"][0]["state"] != "idle":
                with trio.move_on_after(5):
                    await channel.receive()  # (conversation-recorded is told as it is kept)
            return r1, at_receipt, pool.status()["pool"]

    try:
        r1, at_receipt, later = trio.run(main)
    finally:
        server.close()
    assert r1.state == State.FINISHED, r1
    assert r1.request not in at_receipt["running"], at_receipt
    assert at_receipt["engines"][0]["request"] is None, at_receipt
    assert at_receipt["engines"][0]["state"] in ("recording", "idle"), at_receipt
    assert later["engines"][0]["state"] == "idle" and later["running"] == {}, later


def test_serve_with_engines_ends_a_key_s_conversation_on_new_conversation_with_the_key(
    pinned_pi: object, tmp_path: Path
) -> None:
    """serve --engines: ``{"type": "new_conversation", "conversation": KEY}`` ends the key's
    conversation (the real Pi: its next prompt's model request carries nothing of the first
    exchange); without a key it is an error line, and plain serve refuses the key."""
    import subprocess
    import sys

    server = start_server([{"text": "first reply"}, {"text": "second reply"}])
    models = tmp_path / "models.json"
    models.write_text(json.dumps(models_json(server.base_url)))
    pi = ["--models-json", str(models), "--provider", "scripted", "--model", "scripted-model", "--no-journal"]
    lines = [
        {"type": "prompt", "id": "a1", "message": "My name is Ada.", "conversation": "a"},
        {"type": "new_conversation", "conversation": "a"},
        {"type": "new_conversation"},
        {"type": "prompt", "id": "a2", "message": "What is my name?", "conversation": "a"},
    ]
    stdin = "".join(json.dumps(line) + "\n" for line in lines)
    try:
        pooled = subprocess.run(
            [sys.executable, "-m", "bridge", "serve", "--engines", "1", *pi],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=120,
            cwd=ROOT,
        )
        single = subprocess.run(
            [sys.executable, "-m", "bridge", "serve", "--no-journal", "--", *fake_engine_argv()],
            input=json.dumps(lines[1]) + "\n",
            capture_output=True,
            text=True,
            timeout=60,
            cwd=ROOT,
        )
    finally:
        server.close()
    out = [json.loads(line) for line in pooled.stdout.splitlines()]
    assert pooled.returncode == 0, pooled.stderr
    receipts = {line["id"]: line["receipt"]["state"] for line in out if line["type"] == "receipt"}
    assert receipts == {"a1": "finished", "a2": "finished"}, out
    [error] = [line for line in out if line["type"] == "error"]
    assert error["line"] == 3 and '"conversation"' in error["error"], error
    assert carried(chats(server)[1]) == [("user", "What is my name?")], "a's conversation was ended"
    [refused] = [json.loads(line) for line in single.stdout.splitlines() if '"error"' in line]
    assert refused["line"] == 1 and "--engines" in refused["error"], single.stdout


def test_a_conversation_whose_engine_was_reaped_goes_on_on_another_engine(pinned_pi: object, tmp_path: Path) -> None:
    server = start_server([{"text": "first reply"}, {"text": "second reply"}])
    models = tmp_path / "models.json"
    models.write_text(json.dumps(models_json(server.base_url)))

    async def main() -> tuple[Receipt, Receipt, int | None, int | None]:
        async with open_pool(
            scripted_profile(str(models)), engines=2, spares=1, idle_timeout=1.0, journal=False
        ) as pool:
            heard = pool.signals()
            a1 = await pool.submit("My name is Ada.", conversation="a")
            r1 = await a1.receipt()
            while (await next_event(heard, "engine-reaped"))["engine"] != a1.engine:
                pass
            a2 = await pool.submit("What is my name?", conversation="a")
            return r1, await a2.receipt(), a1.engine, a2.engine

    try:
        r1, r2, e1, e2 = trio.run(main)
    finally:
        server.close()
    assert (r1.state, r2.state) == (State.FINISHED, State.FINISHED), (r1, r2)
    assert e1 != e2
    assert carried(chats(server)[1]) == [
        ("user", "My name is Ada."),
        ("assistant", "first reply"),
        ("user", "What is my name?"),
    ]


#: A tool that counts, in its engine's private config folder, the session files holding the
#: secret (the pattern is bracketed so the tool call's own words, in the stranger's session, do
#: not match it).
COUNT_SECRET = 'cat "$PI_CODING_AGENT_DIR"/sessions/* 2>/dev/null | grep -c "SECRET-[A]LPHA" || true'


def test_a_later_prompt_s_tools_on_the_engine_find_no_session_file_of_another_conversation(
    pinned_pi: object, tmp_path: Path
) -> None:
    """R12's copies are files in the engine's private config folder, which its tools may read:
    once the engine is another's (a key taking it up, a stranger starting afresh) no session
    file of the conversation before is left there (a stranger's prompt never reads another's)."""
    tool = {"tool_call": {"name": "bash", "arguments": {"command": COUNT_SECRET}}}
    server = start_server([{"text": "noted"}, tool, {"text": "b done"}, tool, {"text": "x done"}])
    models = tmp_path / "models.json"
    models.write_text(json.dumps(models_json(server.base_url)))

    async def main() -> list[Receipt]:
        async with open_pool(scripted_profile(str(models)), engines=1, journal=False) as pool:
            return [
                await pool.prompt("My password is SECRET-ALPHA.", conversation="a"),
                await pool.prompt("count them", conversation="b"),  # at the cap: takes a's engine up
                await pool.prompt("count them"),  # a stranger: afresh on b's engine
            ]

    try:
        receipts = trio.run(main)
    finally:
        server.close()
    assert [r.state for r in receipts] == [State.FINISHED] * 3, receipts
    requests = chats(server)
    assert "SECRET-ALPHA" in json.dumps(requests[0]["body"]["messages"])
    for seen in (requests[2], requests[4]):
        assert carried(seen)[0] != ("user", "My password is SECRET-ALPHA.")
        result = seen["body"]["messages"][-1]
        assert result["role"] == "tool" and str(result["content"]).strip() == "0", result


def test_a_conversation_whose_engine_was_killed_between_prompts_is_taken_up_again(
    pinned_pi: object, tmp_path: Path
) -> None:
    """R12 after the engine process ended between two of a key's prompts: its bridge starts a new
    Pi, which holds nothing of the conversation, so the key's next prompt takes the stored copy
    up there (the model reads the first exchange) and its exchange is recorded."""
    server = start_server([{"text": "first reply"}, {"text": "second reply"}])
    models = tmp_path / "models.json"
    models.write_text(json.dumps(models_json(server.base_url)))

    async def main() -> tuple[list[Receipt], list[dict[str, Any]]]:
        async with open_pool(scripted_profile(str(models)), engines=1, journal=False) as pool:
            heard = pool.signals()
            r1 = await pool.prompt("My name is Ada.", conversation="a")
            [pid] = pids(pool)
            os.kill(pid, signal.SIGKILL)
            notes = []
            with trio.fail_after(30):
                async for note in heard:
                    notes.append(note)
                    if note.get("type") == "engine" and note.get("event") == "exited":
                        break
            r2 = await pool.prompt("What is my name?", conversation="a")
        with trio.fail_after(60):
            notes += [note async for note in heard]
        return [r1, r2], notes

    try:
        receipts, notes = trio.run(main)
    finally:
        server.close()
    assert [r.state for r in receipts] == [State.FINISHED] * 2, receipts
    assert carried(chats(server)[1]) == [
        ("user", "My name is Ada."),
        ("assistant", "first reply"),
        ("user", "What is my name?"),
    ], "the new Pi took a's stored copy up"
    recorded = [n["request"] for n in notes if n.get("event") == "conversation-recorded"]
    assert recorded == [receipts[0].request, receipts[1].request]
