"""SPEC §5: the receipt rows through the live bridge and a real engine process.

The engine here is ``tools/fake_engine.py`` (a real subprocess over real pipes,
scripted to misbehave); the real Pi is in ``test_pi_live.py``. Every test also
checks that the journal replays to the receipts and signals the live bridge gave.
A row whose decision ``tests/test_supervision.py`` takes with nothing a process adds
(pipes, signals, the kill ladder, the clock, the journal on disk) is tested there only.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
import trio

from bridge.core.receipts import Receipt
from bridge.live.api import open_bridge
from bridge.live.supervisor import Bridge, BridgeConfig
from bridge.profiles.command import CommandProfile
from bridge.readers.replay import replay
from tests.conftest import TOOLS

FAST = dict(
    ack_timeout=5.0,  # none of these waits it out but the no-ack test, which sets its own
    taint_grace=1.0,
    stop_grace=1.0,
    restart_backoff=(0.0,),
    close_grace=2.0,
    stdin_grace=1.0,
    term_grace=1.0,
)


def fake(scenario: dict[str, Any] | None = None, *extra: str) -> CommandProfile:
    argv = [sys.executable, str(TOOLS / "fake_engine.py")]
    if scenario is not None:
        argv += ["--scenario-json", json.dumps(scenario)]
    return CommandProfile(argv + list(extra))


class Run:
    """One bridge session: its receipts, notifications and journal."""

    def __init__(self, tmp_path: Path) -> None:
        self.journal = tmp_path / "journal.jsonl"
        self.notes: list[dict[str, Any]] = []

    def check_journal(self, receipts: list[Receipt]) -> None:
        """The journal replays to what the live bridge reported."""
        result = replay(str(self.journal))
        live = sorted((r.request, r.state, r.reason) for r in receipts)
        replayed = sorted((r.request, r.state, r.reason) for r in result.receipts)
        assert replayed == live
        # And the evidence the receipts carry: a gap's kind and bytes included (the journal
        # notes what its recv_raw text cannot tell).
        signals = {r.request: r.to_json()["signals"] for r in result.receipts}
        assert {r.request: r.to_json()["signals"] for r in receipts} == signals
        live_overlaps = [
            {k: v for k, v in n.items() if k not in ("type", "generation")}
            for n in self.notes
            if n["type"] == "signal" and n.get("signal", "").startswith(("O", "aborted-without-stop"))
        ]
        assert result.overlaps == live_overlaps
        assert (os.stat(self.journal).st_mode & 0o777) == 0o600


async def session(
    tmp_path: Path,
    profile: CommandProfile,
    body: Any,
    *,
    bound: float = 30,
    start_engine: bool = True,
    **config: Any,
) -> tuple[Run, list[Receipt]]:
    run = Run(tmp_path)
    receipts: list[Receipt] = []
    cfg = BridgeConfig(**{**FAST, **config})
    with trio.fail_after(bound):
        async with open_bridge(profile, journal=run.journal, config=cfg, start_engine=start_engine) as bridge:
            bridge.listeners.append(run.notes.append)
            receipts = await body(bridge)
    assert_no_zombies()
    run.check_journal(receipts)
    return run, receipts


async def one(
    tmp_path: Path, scenario: dict[str, Any] | None, message: str = "hi", **config: Any
) -> tuple[Run, Receipt]:
    async def body(bridge: Bridge) -> list[Receipt]:
        return [await bridge.prompt(message)]

    run, receipts = await session(tmp_path, fake(scenario), body, **config)
    return run, receipts[0]


def assert_no_zombies() -> None:
    me = os.getpid()
    zombies = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if fields[0] == "Z" and int(fields[1]) == me:
            zombies.append(entry)
    assert zombies == [], f"zombie children: {zombies}"


def journal_sends(run: Run) -> list[dict[str, Any]]:
    # Split on LF only: a journal line may hold U+2028, which splitlines() splits on.
    lines = run.journal.read_bytes().split(b"\n")
    return [json.loads(line)["send"] for line in lines if line.startswith(b'{"send"')]


async def until(predicate: Any, timeout: float = 10.0) -> None:
    with trio.fail_after(timeout):
        while not predicate():
            await trio.sleep(0.01)


def signals(run: Run) -> list[str]:
    return [n["signal"] for n in run.notes if n["type"] == "signal"]


# -- finished / failed -----------------------------------------------------------------------


async def test_finished_carries_reply_indices_times_pid_and_generation(tmp_path: Path):
    run, r = await one(tmp_path, {"prompts": [{"reply": "hello world"}]})
    assert (r.state, r.reason) == ("finished", None)
    assert r.reply == "hello world" and r.run == "run-1"
    assert (r.ack_idx, r.working_idx, r.settle_idx) == (1, 4, 14)
    assert r.disposition == "started" and r.generation == 1 and isinstance(r.pid, int)
    t = r.times
    assert t.submitted <= t.sent <= t.acked <= t.working <= t.settled  # type: ignore[operator]
    assert Receipt.from_json(json.loads(json.dumps(r.to_json()))) == r


async def test_a_lean_journal_is_version_2_with_one_entry_per_run_of_deltas(tmp_path: Path):
    """The deltas nobody streams are one ``updates`` entry per run (count, first index, their
    bytes); every index is still accounted for, and the journal replays to the receipt."""
    run, r = await one(tmp_path, {"prompts": [{"reply": "x" * 400, "deltas": 40, "update_shape": "delta"}]})
    assert r.state == "finished"
    lines = [json.loads(line) for line in run.journal.read_bytes().split(b"\n") if line]
    assert lines[0]["version"] == 2
    runs = [e for e in lines if "updates" in e]
    assert runs and sum(e["updates"]["count"] for e in runs) >= 40
    assert all(e["updates"]["elided"] > 100 * e["updates"]["count"] for e in runs)
    assert not [e for e in lines if e.get("recv", {}).get("type") == "message_update"]
    indices = sorted(
        i
        for e in lines
        for i in ([e["i"]] if "recv" in e else range(e["i"], e["i"] + e["updates"]["count"]) if "updates" in e else [])
    )
    assert indices == list(range(1, len(indices) + 1))


@pytest.mark.parametrize("full", [False, True])
async def test_a_lean_journal_keeps_agent_ends_scalars_not_its_message_list(tmp_path: Path, full: bool):
    """``agent_end`` repeats the run's messages, each journaled whole as its ``message_end``:
    a lean journal keeps its type and ``willRetry`` and the bytes it dropped (a full journal
    keeps every byte), and either replays to the receipt (checked by ``session``)."""
    run, r = await one(tmp_path, {"prompts": [{"reply": "z" * 3000}]}, journal_full=full)
    assert r.state == "finished"
    lines = [json.loads(line) for line in run.journal.read_bytes().split(b"\n") if line]
    (end,) = [e["recv"] for e in lines if e.get("recv", {}).get("type") == "agent_end"]
    replies = [e["recv"]["message"] for e in lines if e.get("recv", {}).get("type") == "message_end"]
    if full:
        assert end["messages"][-1] == replies[-1] and "elided" not in end
    else:
        assert set(end) == {"type", "willRetry", "elided"} and end["willRetry"] is False
        assert end["elided"] > 3000 and "z" * 3000 in replies[-1]["content"][0]["text"]


async def test_a_streamed_prompts_deltas_are_journaled_as_runs_too(tmp_path: Path):
    """A prompt whose events are read has every delta parsed, but a lean journal keeps no text
    of them either: each read's run of them is one ``updates`` entry, written before what
    follows it, and the journal replays to the receipt (checked by ``session``)."""
    scenario = {"prompts": [{"reply": "y" * 400, "deltas": 40, "update_shape": "delta"}]}
    seen: list[Any] = []

    async def body(bridge: Bridge) -> list[Receipt]:
        handle = await bridge.submit("hi", events=True)
        seen.extend([e async for e in handle.events()])
        return [await handle.receipt()]

    run, (r,) = await session(tmp_path, fake(scenario), body)
    assert r.state == "finished" and r.reply == "y" * 400
    assert "".join(e.delta for e in seen if type(e).__name__ == "TextEvent") == "y" * 400
    lines = [json.loads(line) for line in run.journal.read_bytes().split(b"\n") if line]
    runs = [e for e in lines if "updates" in e]
    assert runs and sum(e["updates"]["count"] for e in runs) >= 40
    assert not [e for e in lines if e.get("recv", {}).get("type") == "message_update"]
    indices = sorted(
        i
        for e in lines
        for i in ([e["i"]] if "recv" in e else range(e["i"], e["i"] + e["updates"]["count"]) if "updates" in e else [])
    )
    assert indices == list(range(1, len(indices) + 1))


async def test_a_full_journal_stays_version_1(tmp_path: Path):
    run, r = await one(tmp_path, {"prompts": [{"reply": "hello", "deltas": 5}]}, journal_full=True)
    lines = [json.loads(line) for line in run.journal.read_bytes().split(b"\n") if line]
    assert r.state == "finished" and lines[0]["version"] == 1 and not [e for e in lines if "updates" in e]


async def test_finished_after_length_and_tool_use(tmp_path: Path):
    for n, stop in enumerate(("length", "toolUse")):
        _, r = await one(tmp_path / str(n), {"prompts": [{"stopReason": stop}]})
        assert r.state == "finished", stop


# -- rejected ----------------------------------------------------------------------------------


async def test_queue_full_cancelled_and_closing(tmp_path: Path):
    async def body(bridge: Bridge) -> list[Receipt]:
        first = await bridge.submit("hang")
        await until(lambda: bridge.status()["held"] == first.request)
        queued = await bridge.submit("queued")
        extra = await bridge.submit("one too many")
        assert (await extra.receipt()).reason == "queue-full"
        assert await queued.stop() is None
        assert (await queued.receipt()).reason == "cancelled"
        last = await bridge.submit("waits")
        await trio.sleep(0.2)
        await bridge.aclose()
        late = await bridge.submit("after close")
        # Refused at once; the journal is closed by then, so it is not journaled.
        assert ((await late.receipt()).state, (await late.receipt()).reason) == ("rejected", "closing")
        return [await h.receipt() for h in (first, queued, extra, last)]

    _, rs = await session(tmp_path, fake({"prompts": [{"hang": True}]}), body, queue_max=1)
    assert [(r.state, r.reason) for r in rs] == [
        ("failed", "closing"),  # the bridge's own stop, not the controller's (SPEC §5)
        ("rejected", "cancelled"),
        ("rejected", "queue-full"),
        ("rejected", "closing"),
    ]
    assert rs[0].stop is not None


async def test_engine_down_when_it_cannot_be_started(tmp_path: Path):
    async def body(bridge: Bridge) -> list[Receipt]:
        return [await bridge.prompt("a"), await bridge.prompt("b")]

    # Started by the first prompt, as under bridge run (at open it is a ProfileError:
    # tests/test_open_check.py).
    run, rs = await session(tmp_path, CommandProfile(["/nonexistent/engine-binary"]), body, start_engine=False)
    assert [(r.state, r.reason) for r in rs] == [("rejected", "engine-down")] * 2
    assert "/nonexistent/engine-binary" in (rs[0].native_error or "")
    assert "engine-down" in signals(run)


async def test_engine_down_after_repeated_crashes_names_the_last_stderr(tmp_path: Path):
    async def body(bridge: Bridge) -> list[Receipt]:
        return [await bridge.prompt(f"p{n}") for n in range(5)]

    _, rs = await session(tmp_path, fake({"defaults": {"crash_at": 0}}), body, crash_limit=3)
    states = [(r.state, r.reason) for r in rs]
    assert states[:3] == [("delivery-unknown", "engine-exited")] * 3
    assert states[3:] == [("rejected", "engine-down")] * 2
    assert "3 engine failures" in (rs[3].native_error or "")


# -- delivery-unknown -----------------------------------------------------------------------------


async def test_a_prompt_whose_write_failed_before_any_byte_went_in_is_rejected_never_sent(tmp_path: Path):
    """The engine is dying: it closed its stdin (and exits soon after) while its first prompt
    ran. The next prompt is journaled as sent, but its write fails at once (EPIPE), not one byte
    in: the engine never read it, so it is rejected/engine-down (SPEC 5: never sent), not
    delivery-unknown; an ``unsent`` note says so, and replay agrees (session() checks). The
    next prompt runs on a fresh engine."""
    scenario = {"prompts": [{"close_stdin": True, "exit_after_close": 3.0}]}

    async def body(bridge: Bridge) -> list[Receipt]:
        a = await bridge.submit("a", request="a")
        b = await bridge.submit("b", request="b")
        done = [await a.receipt(), await b.receipt()]
        done.append(await bridge.prompt("c", request="c"))
        assert len(bridge.supervision.lifecycle.state.crashes) == 1  # the broken engine's exit, once
        return done

    run, (a, b, c) = await session(tmp_path, fake(scenario), body)
    assert (a.state, a.reason, a.generation) == ("finished", None, 1)
    assert (b.state, b.reason) == ("rejected", "engine-down"), b
    assert b.native_error is not None and b.native_error.startswith("never written: the engine's stdin closed")
    assert "EPIPE" in b.native_error
    assert (c.state, c.reason, c.generation) == ("finished", None, 2)
    assert [s["id"] for s in journal_sends(run) if s["type"] == "prompt"] == ["a", "b", "c"]
    lines = [json.loads(x) for x in run.journal.read_bytes().split(b"\n") if x.startswith(b'{"note"')]
    (unsent,) = [x["note"] for x in lines if x["note"].get("event") == "unsent"]
    assert unsent["request"] == "b" and unsent["why"] == b.native_error
    (replayed,) = [r for r in replay(str(run.journal)).receipts if r.request == "b"]
    assert replayed.native_error == b.native_error


async def test_a_write_counts_the_bytes_the_pipe_took_before_it_failed() -> None:
    """What tells "never sent" from "maybe delivered": a write that failed before its first
    byte went in says 0; one cut short (the engine read some, then closed its stdin) says how
    much went in -- the bridge keeps that prompt delivery-unknown."""
    from bridge.live.engine import Engine, EngineGone

    class Sink:
        def __init__(self) -> None:
            self.said: list[bytes] = []

        def lines(self, engine: Any, lines: Any) -> None:
            self.said.extend(bytes(x) for x in lines)

        def stderr(self, engine: Any, text: str) -> None:
            pass

        def stdout_closed(self, engine: Any) -> None:
            pass

        def exited(self, engine: Any, code: Any, sig: Any) -> None:
            pass

    script = (
        "import os, sys, time; n = int(sys.argv[1]); got = 0\n"
        "while got < n:\n    got += len(os.read(0, n - got))\n"
        "os.close(0); print('closed', flush=True); time.sleep(30)"
    )

    async def write(first: int, size: int) -> EngineGone:
        """``size`` bytes to an engine that reads ``first`` of them, then closes its stdin
        (waited for when it reads none). Ends with the write's failure."""
        sink = Sink()
        launch = CommandProfile([sys.executable, "-c", script, str(first)]).prepare()
        try:
            with trio.fail_after(20):
                async with trio.open_nursery() as nursery:
                    engine = await Engine.start(nursery, launch, 1, sink)  # type: ignore[arg-type]
                    if first == 0:
                        await until(lambda: sink.said == [b"closed"])
                    with pytest.raises(EngineGone) as gone:
                        await engine.send_bytes(b"x" * size)
                    assert engine.writing is None
                    await engine.aclose(0.5, 0.5)
        finally:
            launch.run_cleanup()
        return gone.value

    never = await write(0, 1000)
    assert never.written == 0 and "EPIPE" in str(never)
    cut = await write(1000, 4 << 20)
    assert 1000 <= cut.written < 4 << 20


# -- outcome-unknown ------------------------------------------------------------------------------


async def test_unrecognised_stop_reason(tmp_path: Path):
    _, r = await one(tmp_path, {"prompts": [{"stopReason": "weird"}]})
    assert (r.state, r.reason) == ("outcome-unknown", "unrecognised-stop-reason")


async def test_no_final_assistant_message(tmp_path: Path):
    story = tmp_path / "story.jsonl"
    lines = [
        {"transcript": "pi-bridge", "version": 1},
        {"send": {"type": "prompt", "id": "p1", "message": "hi"}},
        {
            "recv": {
                "type": "response",
                "id": "p1",
                "command": "prompt",
                "success": True,
                "data": {"disposition": "started"},
            }
        },
        {"recv": {"type": "agent_start"}},
        {"recv": {"type": "message_start", "message": {"role": "user", "content": "hi"}}},
        {"recv": {"type": "agent_end", "willRetry": False}},
        {"recv": {"type": "agent_settled", "aborted": False}},
    ]
    story.write_text("\n".join(json.dumps(x) for x in lines) + "\n")

    async def body(bridge: Bridge) -> list[Receipt]:
        return [await bridge.prompt("hi")]

    _, (r,) = await session(tmp_path, fake(None, "--transcript", str(story)), body)
    assert (r.state, r.reason) == ("outcome-unknown", "no-final-assistant-message")


async def test_overlap_taints_the_slot_and_the_engine_is_recycled(tmp_path: Path):
    queue = {"type": "queue_update", "steering": ["someone else"], "followUp": []}

    async def body(bridge: Bridge) -> list[Receipt]:
        return [await bridge.prompt("a"), await bridge.prompt("b")]

    run, rs = await session(tmp_path, fake({"prompts": [{"insert_at": {"6": queue}}]}), body)
    assert (rs[0].state, rs[0].reason) == ("outcome-unknown", "overlap")
    assert [s["signal"] for s in rs[0].signals] == ["O5"]
    # A fresh engine and a fresh tracker: run ids start over, indices carry on.
    assert (rs[1].state, rs[1].generation, rs[1].run) == ("outcome-unknown", 2, "run-1")
    assert rs[1].ack_idx is not None and rs[0].settle_idx is not None and rs[1].ack_idx > rs[0].settle_idx
    assert "unsealed" in signals(run)


async def test_oversize_and_invalid_utf8_lines_are_gaps(tmp_path: Path):
    """Each a gap, of its own kind, which replay tells as the live bridge did (check_journal:
    the journal notes the kind and length that its recv_raw text cannot tell)."""
    faults = (
        ({"oversize_at": 6, "oversize_bytes": 5000}, "oversize"),
        ({"invalid_utf8_at": 6}, "invalid-utf8"),
        ({"array_at": 6}, "not-object"),
    )
    for n, (fault, why) in enumerate(faults):
        _, r = await one(tmp_path / str(n), {"prompts": [fault]}, max_line=4096)
        assert (r.state, r.reason) == ("outcome-unknown", "gap"), fault
        assert [(s["signal"], s["why"]) for s in r.to_json()["signals"] if s["signal"] == "gap"] == [("gap", why)]


async def test_engine_exits_mid_run_then_restarts(tmp_path: Path):
    async def body(bridge: Bridge) -> list[Receipt]:
        return [await bridge.prompt("a"), await bridge.prompt("b")]

    _, rs = await session(tmp_path, fake({"prompts": [{"crash_at": 6}]}), body)
    assert (rs[0].state, rs[0].reason) == ("outcome-unknown", "engine-exited")
    assert (rs[1].state, rs[1].reason, rs[1].generation) == ("outcome-unknown", "engine-exited", 2)


async def test_engine_closing_stdout_mid_run(tmp_path: Path):
    _, r = await one(tmp_path, {"prompts": [{"close_stdout_at": 6}]})
    assert (r.state, r.reason) == ("outcome-unknown", "engine-exited")


async def test_a_controllers_stop_the_engine_does_not_obey_is_given_up(tmp_path: Path):
    """No timeout, and the engine obeys no abort ("hang": "forever" writes nothing more after
    the run's start): the controller's stop held the slot, and the prompt queued behind it,
    until the bridge closed (here: the session's bound). Now: the stop's grace, then
    settle-timeout, and the next prompt on a fresh engine."""

    async def body(bridge: Bridge) -> list[Receipt]:
        first = await bridge.submit("never ends")
        second = await bridge.submit("next", timeout=0.5)  # (the fresh engine hangs too)
        await until(lambda: (bridge.status()["held"], len(journal_sends(run))) == (first.request, 1))
        stop = await first.stop()
        r = await first.receipt()
        assert r.stop == stop and stop is not None
        return [r, await second.receipt()]

    run = Run(tmp_path)  # its journal path, for journal_sends above (session writes the same)
    _, rs = await session(tmp_path, fake({"prompts": [{"hang": "forever"}]}), body)
    assert (rs[0].state, rs[0].reason, rs[0].ack_idx) == ("outcome-unknown", "settle-timeout", 1)
    assert (rs[1].reason, rs[1].generation) == ("settle-timeout", 2)


async def test_settle_timeout_honoured_by_the_engine_is_failed_timeout(tmp_path: Path):
    run, r = await one(tmp_path, {"prompts": [{"hang": True}]}, settle_timeout=0.3)
    assert (r.state, r.reason) == ("failed", "timeout") and r.stop is not None
    notes = [json.loads(line)["note"] for line in run.journal.read_bytes().split(b"\n") if line.startswith(b'{"note"')]
    assert {
        "event": "stop",
        "stop": r.stop,
        "request": r.request,
        "by": "timeout",
        "why": "the prompt's timeout (0.3 s) passed",
    } in notes


# -- seal diagnostics -------------------------------------------------------------------------------


async def test_extension_dialog_is_answered_cancelled_at_once(tmp_path: Path):
    dialog = {"method": "select", "title": "Pick", "options": ["a", "b"]}
    run, r = await one(tmp_path, {"prompts": [{"extension_ui": dialog}]})
    assert r.state == "finished"
    diag = [n for n in run.notes if n.get("signal") == "seal-diagnostic"]
    assert diag and diag[0]["method"] == "select"
    sends = journal_sends(run)
    assert {"type": "extension_ui_response", "id": "ui-1", "cancelled": True} in sends


async def test_a_run_the_engine_starts_by_itself_is_an_o1(tmp_path: Path):
    async def body(bridge: Bridge) -> list[Receipt]:
        seen: list[dict[str, Any]] = []
        bridge.listeners.append(seen.append)
        r = await bridge.prompt("a")
        await until(lambda: any(n.get("signal") == "O1" for n in seen))  # the engine's own run began
        return [r, await bridge.prompt("b")]

    run, rs = await session(tmp_path, fake({"prompts": [{"self_start_after": True}]}), body)
    assert rs[0].state == "finished"
    o1 = [n for n in run.notes if n.get("signal") == "O1"]
    assert o1 and o1[0]["why"] == "no slot held"
    assert rs[1].state == "finished" and rs[1].generation == 2


# -- the process ------------------------------------------------------------------------------------


async def test_an_engine_that_ignores_eof_and_sigterm_is_killed_and_reaped(tmp_path: Path):
    scenario = {"on_start": {"ignore_sigterm": True}, "prompts": [{"ignore_stdin": True}]}
    run, r = await one(tmp_path, scenario)
    assert r.state == "finished"
    exits = [n for n in run.notes if n.get("type") == "engine" and n["event"] == "exited"]
    assert exits and exits[0]["signal"] == 9


def _gone(pid: int) -> bool:
    """No such process, or only its zombie (reparented: init reaps it)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z"


@pytest.mark.parametrize("how", ["stopped", "crashed"])
async def test_what_an_engine_leaves_in_its_process_group_ends_with_it(tmp_path: Path, how: str):
    """A ``--`` engine started a grandchild in its process group (a tool's ``sleep &``; here it
    holds the engine's stdout and stderr too) and then ended: stopped by the bridge at close,
    or crashed mid-run. The grandchild was left running (reparented to init) after the bridge
    had closed: the close ladder signalled the group only while the engine itself lived."""
    pidfile = tmp_path / "grandchild.pid"
    script = tmp_path / "engine.py"
    script.write_text(f"""
import os, subprocess, sys
child = subprocess.Popen(["sleep", "300"])  # same process group, inherits stdout and stderr
with open({str(pidfile)!r}, "w") as f:
    f.write(str(child.pid))
os.execv(sys.executable, [sys.executable, {str(TOOLS / "fake_engine.py")!r}, *sys.argv[1:]])
""")
    argv = [sys.executable, str(script)]
    if how == "crashed":
        argv += ["--scenario-json", json.dumps({"prompts": [{"crash_at": 4}]})]

    async def body(bridge: Bridge) -> list[Receipt]:
        r = await bridge.prompt("hi")
        if how == "crashed":
            # The engine is gone and the bridge still runs: the grandchild is gone already.
            await until(lambda: _gone(int(pidfile.read_text())))
        return [r]

    _, rs = await session(tmp_path, CommandProfile(argv), body)
    assert rs[0].state == ("finished" if how == "stopped" else "outcome-unknown"), rs[0]
    grandchild = int(pidfile.read_text())
    await until(lambda: _gone(grandchild))  # SIGKILLed before the close ended: only its delivery is awaited


async def test_prompt_text_arrives_intact(tmp_path: Path):
    text = "line1\nline2\r\u2028\u2029\x00 emoji \U0001f600 " + "x" * 1_000_000

    async def body(bridge: Bridge) -> list[Receipt]:
        return [await bridge.prompt(text)]

    run, (r,) = await session(tmp_path, fake(), body)
    assert r.state == "finished" and r.reply == "ok: " + text[:40]
    sent = journal_sends(run)
    assert sent[0]["message"] == text


async def test_streamed_text_concatenates_to_the_reply(tmp_path: Path):
    """And each of the text and the events is read once: a second read says so."""

    async def body(bridge: Bridge) -> list[Receipt]:
        h = await bridge.submit("stream it", stream=True, events=True)
        pieces = [p async for p in h.text()]
        events = [e async for e in h.events()]
        r = await h.receipt()
        assert "".join(pieces) == r.reply == "a fairly long streamed reply" and events
        with pytest.raises(RuntimeError, match="text is read once"):
            [p async for p in h.text()]
        with pytest.raises(RuntimeError, match="events are read once"):
            [e async for e in h.events()]
        return [r]

    await session(tmp_path, fake({"prompts": [{"reply": "a fairly long streamed reply", "deltas": 5}]}), body)


async def test_drain_waits_for_a_prompt_whose_engine_is_still_starting(tmp_path: Path):
    class SlowSealCheck(CommandProfile):
        def prepare(self):  # type: ignore[no-untyped-def]
            launch = super().prepare()
            launch.startup = [{"id": "seal-state", "type": "get_state"}]
            launch.check = lambda answers: []
            return launch

    profile = SlowSealCheck(
        [sys.executable, str(TOOLS / "fake_engine.py"), "--scenario-json", json.dumps({"on_start": {"delay": 0.5}})]
    )

    async def body(bridge: Bridge) -> list[Receipt]:
        handle = await bridge.submit("hi")
        await trio.sleep(0.1)  # the dispatcher has taken it and waits for the seal check
        await bridge.drain()
        r = handle.receipt_nowait
        assert r is not None and r.state == "finished"
        return [r]

    await session(tmp_path, profile, body)


def pid_gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


async def test_cancelling_the_bridge_mid_prompt_stops_and_reaps_the_engine(tmp_path: Path):
    notes: list[dict[str, Any]] = []
    handle = None
    with trio.move_on_after(1.0):
        async with open_bridge(
            fake({"prompts": [{"hang": "forever"}]}),
            journal=tmp_path / "j.jsonl",
            config=BridgeConfig(**FAST),
            start_engine=False,  # the engine's start is heard by the listener
        ) as bridge:
            bridge.listeners.append(notes.append)
            handle = await bridge.submit("never settles")
            await handle.receipt()
    assert handle is not None and handle.receipt_nowait is not None
    assert handle.receipt_nowait.state == "outcome-unknown"  # stopped, no settle: the engine was stopped
    pids = [n["pid"] for n in notes if n.get("type") == "engine" and n["event"] == "started"]
    assert pids and all(pid_gone(pid) for pid in pids)
    assert_no_zombies()
    assert [r.state for r in replay(str(tmp_path / "j.jsonl")).receipts] == ["outcome-unknown"]


@pytest.mark.parametrize("signame", ["SIGINT", "SIGHUP", "SIGTERM"])
def test_a_signal_on_bridge_run_stops_the_prompt_and_exits_128_plus_n(tmp_path: Path, signame: str):
    import signal
    import subprocess
    import time

    signum = getattr(signal, signame)

    journal = tmp_path / "j.jsonl"
    scenario = json.dumps({"prompts": [{"deltas": 1000, "delta_delay": 0.05}]})
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "bridge",
            "run",
            "long",
            "--journal",
            str(journal),
            "--",
            sys.executable,
            str(TOOLS / "fake_engine.py"),
            "--scenario-json",
            scenario,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        proc.stdout.read1(1)  # the reply has started streaming
        time.sleep(0.2)
        proc.send_signal(signum)
        out, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 128 + signum, err
    assert b"failed (closing)" in err  # a signal closes the bridge: its stop, not the user's (SPEC §5)
    receipts = replay(str(journal)).receipts
    assert [(r.state, r.reason) for r in receipts] == [("failed", "closing")]
    starts = [line for line in journal.read_bytes().split(b"\n") if b'"engine-start"' in line]
    pid = json.loads(starts[0])["note"]["pid"]
    assert pid_gone(pid)


# -- the lifecycle's clock ----------------------------------------------------------------------


async def test_a_settle_timeout_fires_on_the_bridges_clock_not_the_wall(tmp_path: Path, mock_clock: Any):
    """The 600 s timeout fires when trio's clock is jumped, not after 600 s of waiting:
    the trio layer only sleeps until the lifecycle's next deadline."""
    mock_clock.rate = 1.0  # time passes as usual (the engine is a real process); 600 s are jumped

    async def body(bridge: Bridge) -> list[Receipt]:
        handle = await bridge.submit("hang on", timeout=600, stall_timeout=0)  # (no stall first)
        while not (
            handle.request == bridge.supervision.lifecycle.state.held
            and bridge.supervision.lifecycle.state.prompts[handle.request].acked
        ):
            await bridge._wait_change()
        assert (
            bridge.supervision.lifecycle.next_deadline() is not None
            and bridge.supervision.lifecycle.next_deadline() > 500
        )
        mock_clock.jump(600)
        return [await handle.receipt()]

    # The bound is in the mock clock's seconds: 600 of them are jumped, 30 remain.
    run, rs = await session(tmp_path, fake({"prompts": [{"hang": True}]}), body, bound=630)
    assert (rs[0].state, rs[0].reason) == ("failed", "timeout")
    assert rs[0].times.settled is not None and rs[0].times.settled >= 600


async def test_a_stall_fires_on_the_bridges_clock_from_the_runs_last_line(tmp_path: Path, mock_clock: Any):
    """A run that goes quiet after its ack is stopped one stall timeout after its last line:
    a ``stalled`` signal, the bridge's stop (``by: stall``), ``failed``/``stalled``."""
    mock_clock.rate = 1.0
    signals: list[dict[str, Any]] = []

    async def body(bridge: Bridge) -> list[Receipt]:
        bridge.listeners.append(lambda note: signals.append(note) if note.get("type") == "signal" else None)
        handle = await bridge.submit("hang on", stall_timeout=400)
        while not (
            handle.request == bridge.supervision.lifecycle.state.held
            and bridge.supervision.lifecycle.state.prompts[handle.request].acked
        ):
            await bridge._wait_change()
        assert bridge.supervision.lifecycle.state.deadlines["stall"] > 390
        mock_clock.jump(401)
        return [await handle.receipt()]

    run, rs = await session(tmp_path, fake({"prompts": [{"hang": True}]}), body, bound=430)
    assert (rs[0].state, rs[0].reason) == ("failed", "stalled")
    assert rs[0].times.settled is not None and 400 <= rs[0].times.settled < 420
    assert [(s["signal"], s["request"], s["after"], s["stop"]) for s in signals] == [
        ("stalled", rs[0].request, 400, rs[0].stop)
    ]
    assert [(r.state, r.reason) for r in replay(str(run.journal)).receipts] == [("failed", "stalled")]


async def test_an_engine_dying_while_a_grandchild_holds_its_stdout_never_gets_the_next_prompt(tmp_path: Path):
    """The exit is seen before stdout's EOF (a grandchild holds the pipe): the receipt it
    decides must not let the queued prompt be written to the dead engine."""
    script = tmp_path / "engine.py"
    script.write_text(f"""
import json, os, subprocess, sys
marker = {str(tmp_path / "ran")!r}
if os.path.exists(marker):
    os.execv(sys.executable, [sys.executable, {str(TOOLS / "fake_engine.py")!r}])
open(marker, "w").close()
cmd = json.loads(sys.stdin.readline())
def emit(o):
    sys.stdout.write(json.dumps(o) + "\\n")
    sys.stdout.flush()
emit({{"type": "response", "id": cmd["id"], "command": "prompt", "success": True, "data": {{"disposition": "started"}}}})
emit({{"type": "agent_start"}})
emit({{"type": "message_start", "message": {{"role": "user", "content": [{{"type": "text", "text": "x"}}]}}}})
subprocess.Popen(["sleep", "5"])  # inherits stdout: the pipe stays open after this process dies
os._exit(1)
""")

    async def body(bridge: Bridge) -> list[Receipt]:
        h1 = await bridge.submit("first")
        h2 = await bridge.submit("second")
        return [await h1.receipt(), await h2.receipt()]

    run, rs = await session(tmp_path, CommandProfile([sys.executable, str(script)]), body)
    assert (rs[0].state, rs[0].reason, rs[0].generation) == ("outcome-unknown", "engine-exited", 1)
    assert (rs[1].state, rs[1].generation) == ("finished", 2), rs[1]
    sends = [s for s in journal_sends(run) if s.get("type") == "prompt"]
    assert [s["id"] for s in sends] == [rs[0].request, rs[1].request]  # each written once
