"""Regression tests for five contract breaks (SPEC §5, §7), through real processes.

1. Closing while the engine answers its start-up (seal) check writes nothing:
   the prompt waiting on the check is ``rejected``/``closing`` and no ``prompt``
   command reaches the engine (SIGTERM on ``bridge serve``; leaving the API's
   ``async with``) -- on the fake engine with a slow start-up check
   (deterministic) and on the sealed, pinned Pi (the case as reported).
2. After ``shutdown``, ``bridge serve`` keeps reading its stdin: ``status`` is
   answered, a new ``prompt`` is ``rejected``/``closing``, a second ``shutdown``
   changes nothing, ``stop`` is honoured; the bridge then exits 0 by itself.
   A drain bound that passes stops the running prompt: ``failed``/``timeout``.
3. A timeout is not the controller's stop: ``failed``/``timeout`` with the
   bridge's stop id, a ``stop`` note ``"by": "timeout"``, replay and diagnose agree.
4. An engine that dies at start says why: ``nativeError`` carries its stderr
   (the fake engine, and the real Pi with a bad ``--provider``); a death during
   the start-up check counts once toward the crash limit.
5. A journal that cannot be written (a file size limit) loses no receipt: every
   receipt reaches the controller, a ``journal-failed`` signal, exit 1, one
   clear line on stderr.

Around them, found while writing these: SIGHUP/SIGINT close like SIGTERM; a stop after
``shutdown`` cancels a queued prompt; a start-up check that fails by its deadline counts
once too; the seal-check signal names the engine it is about; a prompt queued when the
journal fails is never written; a journal that cannot even be created is one clear line.

Every wait is bounded; every process started here is killed in a ``finally``.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import trio

from bridge.core.receipts import Receipt
from bridge.live.api import open_bridge
from bridge.live.supervisor import BridgeConfig
from bridge.profiles.command import CommandProfile
from bridge.profiles.pi import scripted_profile
from bridge.readers.replay import replay
from tests.helpers_live import (
    ROOT,
    ServeProc,
    fake_engine_argv,
    leftovers,
    read_journal,
    wait_gone,
    zombie_children,
)

FAST: dict[str, Any] = {
    "ack_timeout": 5.0,
    "taint_grace": 1.0,
    "stop_grace": 1.0,
    "restart_backoff": (0.0,),
    "close_grace": 2.0,
    "stdin_grace": 1.0,
    "term_grace": 1.0,
}

#: An engine that says why it cannot run and exits 3 at once.
DIES_AT_ONCE = [
    sys.executable,
    "-c",
    "import sys; sys.stderr.write('fatal: licence file expired\\n'); sys.stderr.flush(); sys.exit(3)",
]
#: The same, after it has read the first command (the start-up check's get_state).
DIES_IN_CHECK = [
    sys.executable,
    "-c",
    (
        "import sys; sys.stdin.readline(); sys.stderr.write('fatal: licence file expired\\n'); "
        "sys.stderr.flush(); sys.exit(3)"
    ),
]
FATAL = "fatal: licence file expired"


# -- helpers ---------------------------------------------------------------------------------


@pytest.fixture
def model_server(tmp_path: Path) -> Any:
    """The scripted model server on 127.0.0.1 and its models.json (as test_pi_live uses them)."""
    from bridge.demo.model_server import start_server

    server = start_server([{"text": "should never be asked"}])
    try:
        server.models = server.write_models(str(tmp_path / "models"))
        yield server
    finally:
        server.close()


class SlowCheck(CommandProfile):
    """A ``--`` engine with a start-up check like Pi's (one ``get_state``), always passing."""

    def prepare(self):  # type: ignore[no-untyped-def]
        launch = super().prepare()
        launch.startup = [{"id": "seal-state", "type": "get_state"}]
        launch.check = lambda answers: []
        return launch


#: ``bridge serve`` (main_serve, the CLI's own code) on a SlowCheck profile: argv[1] is the
#: engine argv as JSON, argv[2] the journal. A real process, so it can be signalled.
SERVE_SLOW_CHECK = """
import json, sys
from bridge.profiles.command import CommandProfile
from bridge.controller.serve import main_serve
from bridge.live.supervisor import BridgeConfig

class SlowCheck(CommandProfile):
    def prepare(self):
        launch = super().prepare()
        launch.startup = [{"id": "seal-state", "type": "get_state"}]
        launch.check = lambda answers: []
        return launch

sys.exit(main_serve(SlowCheck(json.loads(sys.argv[1])), journal=sys.argv[2], config=BridgeConfig(),
                    drain_timeout=None))
"""


async def start_serve(
    tmp_path: Path, argv: list[str], *, preexec_fn: Callable[[], None] | None = None, name: str = "serve"
) -> ServeProc:
    """``argv`` (a bridge serve command line) as a ServeProc, stderr to a file."""
    stderr_path = tmp_path / f"{name}.stderr"
    with open(stderr_path, "wb") as err:
        proc = await trio.lowlevel.open_process(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=err,
            cwd=str(ROOT),
            preexec_fn=preexec_fn,
        )
    sp = ServeProc(proc, stderr_path)
    try:
        ready = await sp.next(timeout=20)
        assert ready is not None and ready["type"] == "ready", (ready, sp.stderr)
    except BaseException:
        await sp.kill()
        raise
    return sp


def serve_argv(*args: str, engine: list[str] | None = None) -> list[str]:
    argv = [sys.executable, "-m", "bridge", "serve", *args]
    return argv + (["--", *engine] if engine is not None else [])


def by_id(sp: ServeProc) -> dict[str, dict[str, Any]]:
    counts = Counter(r["id"] for r in sp.receipts())
    assert all(n == 1 for n in counts.values()), f"more than one receipt for an id: {counts}"
    return {r["id"]: r["receipt"] for r in sp.receipts()}


def assert_bye_last(sp: ServeProc) -> None:
    byes = [i for i, line in enumerate(sp.lines) if line["type"] == "bye"]
    assert byes == [len(sp.lines) - 1], f"bye must be the last line, once: {sp.lines[-5:]}"
    assert sp.lines[-1]["receipts"] == len(sp.receipts())


def prompt_sends(journal: Path) -> list[dict[str, Any]]:
    return [
        e["send"]
        for e in read_journal(journal)
        if isinstance(e.get("send"), dict) and e["send"].get("type") == "prompt"
    ]


def notes(journal: Path, event: str) -> list[dict[str, Any]]:
    return [
        e["note"] for e in read_journal(journal) if isinstance(e.get("note"), dict) and e["note"].get("event") == event
    ]


def check_answered_before_closing(journal: Path) -> bool:
    """True when the engine answered its start-up check before closing began (the
    test then missed the window it is about: the attempt proves nothing)."""
    for e in read_journal(journal):
        if isinstance(e.get("note"), dict) and e["note"].get("event") == "closing":
            return False
        if (
            isinstance(e.get("recv"), dict)
            and e["recv"].get("type") == "response"
            and str(e["recv"].get("id", "")).startswith("seal-")
        ):
            return True
    return False


class EngineStarts:
    """A bridge listener: the pids of the engines started, and an event set at the first."""

    def __init__(self) -> None:
        self.pids: list[int] = []
        self.first = trio.Event()

    def __call__(self, note: dict[str, Any]) -> None:
        if note.get("type") == "engine" and note.get("event") == "started":
            self.pids.append(note["pid"])
            self.first.set()


async def engines_gone(pids: list[int]) -> None:
    for pid in pids:
        assert await wait_gone(pid, timeout=5) == [], f"engine {pid} left behind"


def run_cli(
    *args: str, timeout: float = 60, preexec_fn: Callable[[], None] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bridge", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=str(ROOT),
        preexec_fn=preexec_fn,
        check=False,
    )


def json_lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def replayed(journal: Path) -> dict[str, Receipt]:
    return {r.request: r for r in replay(str(journal)).receipts}


def same_story(live: dict[str, Any], again: Receipt) -> None:
    """A replayed receipt tells the live receipt's story (times and pids aside)."""
    keys = ("request", "state", "reason", "stop", "run", "nativeError", "ackIdx", "workingIdx", "settleIdx")
    j = again.to_json()
    assert {k: j[k] for k in keys} == {k: live[k] for k in keys}


# ===========================================================================================
# 1. Closing during the engine's start-up check sends nothing
# ===========================================================================================


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT], ids=lambda s: s.name)
async def test_closing_during_startup_check_sends_nothing_serve_fake(tmp_path: Path, signum: signal.Signals) -> None:
    """A signal to ``bridge serve`` while a (fake) engine takes 2 s to answer its start-up check."""
    journal = tmp_path / "j.jsonl"
    engine = fake_engine_argv({"on_start": {"delay": 2}})
    sp = await start_serve(tmp_path, [sys.executable, "-c", SERVE_SLOW_CHECK, json.dumps(engine), str(journal)])
    try:
        with trio.fail_after(30):
            await sp.send({"type": "prompt", "id": "a", "message": "must not be sent"})
            started = await sp.until(lambda line: line["type"] == "engine" and line["event"] == "started")
            sp.proc.send_signal(signum)
            await sp.read_all(timeout=20)
            code = await sp.wait()
        assert code == 128 + signum, sp.stderr
        r = by_id(sp)["a"]
        assert (r["state"], r["reason"]) == ("rejected", "closing"), r
        assert_bye_last(sp)
        assert not check_answered_before_closing(journal), "the fake engine answered its 2 s check early?"
        assert prompt_sends(journal) == [], "a prompt was written to the engine after closing began"
        await engines_gone([started["pid"]])
    finally:
        await sp.kill()


async def test_closing_during_startup_check_sends_nothing_api_fake(tmp_path: Path) -> None:
    journal = tmp_path / "j.jsonl"
    profile = SlowCheck(fake_engine_argv({"on_start": {"delay": 2}}))
    starts = EngineStarts()
    with trio.fail_after(30):
        async with open_bridge(profile, journal=journal, config=BridgeConfig(**FAST), start_engine=False) as bridge:
            bridge.listeners.append(starts)
            handle = await bridge.submit("must not be sent")
            await starts.first.wait()
            assert bridge.status()["held"] is None
        r = handle.receipt_nowait
    assert r is not None and (r.state, r.reason) == ("rejected", "closing"), r
    assert not check_answered_before_closing(journal)
    assert prompt_sends(journal) == []
    assert {x.request: (x.state, x.reason) for x in replay(str(journal)).receipts} == {
        r.request: ("rejected", "closing")
    }
    await engines_gone(starts.pids)
    assert zombie_children() == []


async def test_closing_during_startup_check_sends_nothing_serve_pi(
    pinned_pi: Any, model_server: Any, tmp_path: Path
) -> None:
    """The case as reported: SIGTERM right after the sealed Pi started, before it answered its check.
    Pi answers in ~0.2-1 s; an attempt where it answered first proves nothing and is repeated."""
    for attempt in range(3):
        folder = tmp_path / f"attempt-{attempt}"
        folder.mkdir()
        journal = folder / "j.jsonl"
        sp = await start_serve(
            folder,
            serve_argv(
                "--journal",
                str(journal),
                "--models-json",
                model_server.models,
                "--provider",
                "scripted",
                "--model",
                "scripted-model",
            ),
        )
        try:
            with trio.fail_after(40):
                await sp.send({"type": "prompt", "id": "a", "message": "must not be sent"})
                started = await sp.until(
                    lambda line: line["type"] == "engine" and line["event"] == "started", timeout=20
                )
                sp.proc.send_signal(signal.SIGTERM)
                await sp.read_all(timeout=30)
                code = await sp.wait()
        finally:
            await sp.kill()
        if check_answered_before_closing(journal):
            continue  # Pi was quicker than our signal: the window was missed
        assert code == 128 + signal.SIGTERM, sp.stderr
        r = by_id(sp)["a"]
        assert (r["state"], r["reason"]) == ("rejected", "closing"), r
        assert_bye_last(sp)
        assert prompt_sends(journal) == [], "a prompt was written to Pi after closing began"
        await engines_gone([started["pid"]])
        assert model_server.requests == [], "Pi asked the model: a prompt got through"
        return
    pytest.fail("Pi answered its start-up check before SIGTERM in every attempt: the window was never hit")


async def test_closing_during_startup_check_sends_nothing_api_pi(
    pinned_pi: Any, model_server: Any, tmp_path: Path
) -> None:
    for attempt in range(3):
        journal = tmp_path / f"j{attempt}.jsonl"
        starts = EngineStarts()
        with trio.fail_after(40):
            async with open_bridge(
                scripted_profile(model_server.models),
                journal=journal,
                config=BridgeConfig(**FAST),
                start_engine=False,
            ) as bridge:
                bridge.listeners.append(starts)
                handle = await bridge.submit("must not be sent")
                await starts.first.wait()  # Pi is up; its answers to get_state/get_commands are due
            r = handle.receipt_nowait
        if check_answered_before_closing(journal):
            continue
        assert r is not None and (r.state, r.reason) == ("rejected", "closing"), r
        assert prompt_sends(journal) == []
        await engines_gone(starts.pids)
        assert zombie_children() == []
        assert model_server.requests == []
        return
    pytest.fail("Pi answered its start-up check before the close in every attempt: the window was never hit")


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP], ids=lambda s: s.name)
async def test_signal_stops_the_running_prompt_as_closing(tmp_path: Path, signum: signal.Signals) -> None:
    """The running prompt is stopped by the bridge (``failed``/``closing``, a ``closing`` stop
    note), the queued one never written; SIGHUP closes like SIGTERM."""
    journal = tmp_path / "j.jsonl"
    sp = await start_hanging_serve(tmp_path, journal)
    try:
        with trio.fail_after(30):
            await sp.send({"type": "prompt", "id": "a", "message": "runs"})
            await sp.send({"type": "prompt", "id": "b", "message": "waits"})
            await wait_held(sp, "a")
            pids = sp.engine_pids()
            sp.proc.send_signal(signum)
            await sp.read_all(timeout=20)
            code = await sp.wait()
        assert code == 128 + signum, sp.stderr
        got = by_id(sp)
        assert (got["a"]["state"], got["a"]["reason"]) == ("failed", "closing"), got["a"]
        assert (got["b"]["state"], got["b"]["reason"]) == ("rejected", "closing"), got["b"]
        assert_bye_last(sp)
        stops = notes(journal, "stop")
        assert [(n["stop"], n["request"], n["by"]) for n in stops] == [(got["a"]["stop"], "a", "closing")], stops
        assert [s["id"] for s in prompt_sends(journal)] == ["a"]
        again = replayed(journal)
        same_story(got["a"], again["a"])
        diag = run_cli("diagnose", str(journal), timeout=30)
        assert "not the controller" in diag.stdout, diag.stdout
        await engines_gone(pids)
    finally:
        await sp.kill()


# ===========================================================================================
# 2. After shutdown, bridge serve still answers
# ===========================================================================================


async def wait_held(sp: ServeProc, rid: str, timeout: float = 15.0) -> dict[str, Any]:
    with trio.fail_after(timeout):
        while True:
            await sp.send({"type": "status"})
            st = await sp.until(lambda line: line["type"] == "status")
            if st["held"] == rid:
                return st
            await trio.sleep(0.02)


#: An engine that hangs on its first prompt: it runs until stopped.
HANG = fake_engine_argv({"prompts": [{"hang": True}]})


async def start_hanging_serve(tmp_path: Path, journal: Path, *args: str) -> ServeProc:
    return await start_serve(tmp_path, serve_argv("--journal", str(journal), *args, engine=HANG))


async def held_and_queued_then_shutdown(sp: ServeProc) -> None:
    """Prompt ``a`` held (it runs until stopped), ``q`` queued behind it, then ``shutdown``."""
    await sp.send({"type": "prompt", "id": "a", "message": "runs until stopped"})
    await sp.send({"type": "prompt", "id": "q", "message": "queued"})
    await wait_held(sp, "a")
    await sp.send({"type": "shutdown"})


async def test_after_shutdown_serve_still_answers(tmp_path: Path) -> None:
    journal = tmp_path / "j.jsonl"
    sp = await start_hanging_serve(tmp_path, journal)
    try:
        with trio.fail_after(40):
            await sp.send({"type": "prompt", "id": "a", "message": "runs until stopped"})
            await wait_held(sp, "a")
            pids = sp.engine_pids()
            await sp.send({"type": "shutdown"})
            # status is answered, and says so
            await sp.send({"type": "status"})
            st = await sp.until(lambda line: line["type"] == "status")
            assert st["shutdown"] is True and st["held"] == "a", st
            # a new prompt is refused with its receipt
            await sp.send({"type": "prompt", "id": "late", "message": "too late"})
            late = await sp.until(lambda line: line["type"] == "receipt")
            assert late["id"] == "late"
            assert (late["receipt"]["state"], late["receipt"]["reason"]) == ("rejected", "closing"), late
            # a second shutdown changes nothing
            await sp.send({"type": "shutdown"})
            await sp.send({"type": "status"})
            st2 = await sp.until(lambda line: line["type"] == "status")
            assert st2["shutdown"] is True and st2["held"] == "a" and st2["closing"] is None, st2
            assert st2["engine"]["alive"] is True
            # stop is honoured
            await sp.send({"type": "stop", "id": "a"})
            stopping = await sp.until(lambda line: line["type"] in ("stopping", "error"))
            assert stopping["type"] == "stopping" and stopping["id"] == "a", stopping
            assert isinstance(stopping["stop"], str) and stopping["stop"]
            ra = await sp.until(lambda line: line["type"] == "receipt")
            assert ra["id"] == "a"
            assert (ra["receipt"]["state"], ra["receipt"]["reason"]) == ("failed", "interrupted"), ra
            assert ra["receipt"]["stop"] == stopping["stop"]
            # the bridge ends by itself, stdin still open
            await sp.read_all(timeout=20)
            code = await sp.wait()
        assert code == 0, sp.stderr
        assert set(by_id(sp)) == {"a", "late"}
        assert_bye_last(sp)
        assert [n["event"] for n in notes(journal, "shutdown")] == ["shutdown"], "the second shutdown was journaled"
        stops = notes(journal, "stop")
        assert [(n["stop"], n["request"], n["by"]) for n in stops] == [(stopping["stop"], "a", "controller")]
        assert {r.request: (r.state, r.reason) for r in replay(str(journal)).receipts} == {
            "a": ("failed", "interrupted"),
            "late": ("rejected", "closing"),
        }
        await engines_gone(pids)
    finally:
        await sp.kill()


async def test_after_shutdown_steering_is_an_error_and_models_is_answered(tmp_path: Path) -> None:
    """docs: guide/serve.md: configure, new_conversation and compact steer the prompts submitted
    after them, and after shutdown none can be: each is an error line (configure used to answer
    ``configured`` with a model no prompt would ever use); models is still answered, and the
    prompt queued before the shutdown runs as it was submitted."""
    journal = tmp_path / "j.jsonl"
    sp = await start_hanging_serve(tmp_path, journal)
    try:
        with trio.fail_after(40):
            await held_and_queued_then_shutdown(sp)
            steering = [
                {"type": "configure", "provider": "fake", "model": "other-model", "thinking": "high"},
                {"type": "new_conversation"},
                {"type": "compact", "instructions": "keep it short"},
            ]
            for cmd in steering:
                await sp.send(cmd)
                err = await sp.until(lambda line: line["type"] in ("error", "configured"))
                assert err["type"] == "error", err
                assert err["error"].startswith(f"{cmd['type']} after shutdown changes nothing"), err
            await sp.send({"type": "models"})
            models = await sp.until(lambda line: line["type"] in ("models", "error"))
            assert models["type"] == "models" and models["models"], models
            await sp.send({"type": "stop", "id": "a"})
            await sp.read_all(timeout=20)
            code = await sp.wait()
        assert code == 0, sp.stderr
        got = by_id(sp)
        assert got["q"]["state"] == "finished", got["q"]
        sent = [e["send"]["type"] for e in read_journal(journal) if "send" in e]
        assert not {"set_model", "set_thinking_level", "new_session", "compact"} & set(sent), sent
        assert_bye_last(sp)
    finally:
        await sp.kill()


async def test_after_shutdown_a_stop_cancels_a_queued_prompt(tmp_path: Path) -> None:
    journal = tmp_path / "j.jsonl"
    sp = await start_hanging_serve(tmp_path, journal)
    try:
        with trio.fail_after(30):
            await held_and_queued_then_shutdown(sp)
            await sp.send({"type": "stop", "id": "q"})
            rq = await sp.until(lambda line: line["type"] == "receipt")
            assert rq["id"] == "q" and (rq["receipt"]["state"], rq["receipt"]["reason"]) == ("rejected", "cancelled"), (
                rq
            )
            await sp.send({"type": "stop", "id": "a"})
            await sp.read_all(timeout=20)
            code = await sp.wait()
        assert code == 0, sp.stderr
        got = by_id(sp)
        assert (got["a"]["state"], got["a"]["reason"]) == ("failed", "interrupted"), got["a"]
        assert [s["id"] for s in prompt_sends(journal)] == ["a"]
        assert_bye_last(sp)
    finally:
        await sp.kill()


async def test_drain_timeout_stops_the_running_prompt_as_a_timeout(tmp_path: Path) -> None:
    """--drain-timeout 1, an engine that honours aborts but never ends a run on its own."""
    journal = tmp_path / "j.jsonl"
    sp = await start_serve(
        tmp_path,
        serve_argv(
            "--journal", str(journal), "--drain-timeout", "1", engine=fake_engine_argv({"prompts": [{"hang": True}]})
        ),
    )
    try:
        with trio.fail_after(40):
            await sp.send({"type": "prompt", "id": "a", "message": "never ends by itself"})
            await sp.send({"type": "prompt", "id": "b", "message": "queued behind it"})
            await wait_held(sp, "a")
            pids = sp.engine_pids()
            await sp.send({"type": "shutdown"})
            await sp.read_all(timeout=30)
            code = await sp.wait()
        assert code == 0, sp.stderr
        got = by_id(sp)
        assert (got["a"]["state"], got["a"]["reason"]) == ("failed", "timeout"), got["a"]
        assert got["a"]["stop"]
        # b was still queued when the bound passed: never written
        assert (got["b"]["state"], got["b"]["reason"]) == ("rejected", "closing"), got["b"]
        assert [s["id"] for s in prompt_sends(journal)] == ["a"]
        assert_bye_last(sp)
        stops = notes(journal, "stop")
        assert [(n["stop"], n["request"], n["by"]) for n in stops] == [(got["a"]["stop"], "a", "timeout")]
        assert "drain" in stops[0]["why"]
        again = replayed(journal)
        same_story(got["a"], again["a"])
        await engines_gone(pids)
    finally:
        await sp.kill()


# ===========================================================================================
# 3. A timeout is not the controller's stop
# ===========================================================================================


def check_timeout_journal(journal: Path, live: dict[str, Any]) -> None:
    assert (live["state"], live["reason"]) == ("failed", "timeout"), live
    assert isinstance(live["stop"], str) and live["stop"]
    stops = notes(journal, "stop")
    assert [(n["stop"], n["request"], n["by"]) for n in stops] == [(live["stop"], live["request"], "timeout")], stops
    same_story(live, replayed(journal)[live["request"]])
    out = run_cli("replay", "--json", str(journal), timeout=30)
    assert out.returncode == 0, out.stderr
    receipts = json.loads(out.stdout)["receipts"]
    assert [(r["request"], r["state"], r["reason"], r["stop"]) for r in receipts] == [
        (live["request"], "failed", "timeout", live["stop"])
    ]
    diag = run_cli("diagnose", str(journal), timeout=30)
    assert diag.returncode in (0, 1), diag.stderr
    text = diag.stdout.lower()
    assert "timeout" in text and "not the controller" in text, diag.stdout
    assert live["stop"] in diag.stdout


def test_timeout_is_not_the_controllers_stop_run(tmp_path: Path) -> None:
    journal = tmp_path / "j.jsonl"
    out = run_cli("run", "hi", "--timeout", "1", "--journal", str(journal), "--", *HANG)
    assert out.returncode == 1, out.stderr
    assert "p1: failed (timeout)" in out.stderr, out.stderr
    assert "interrupted" not in out.stderr

    journal2 = tmp_path / "j2.jsonl"
    out2 = run_cli("run", "hi", "--timeout", "1", "--json", "--journal", str(journal2), "--", *HANG)
    assert out2.returncode == 1, out2.stderr
    [live] = json_lines(out2.stdout)
    assert live["reason"] == "timeout" and live["stop"], live
    check_timeout_journal(journal2, live)


async def test_timeout_is_not_the_controllers_stop_serve(tmp_path: Path) -> None:
    journal = tmp_path / "j.jsonl"
    sp = await start_serve(tmp_path, serve_argv("--journal", str(journal), engine=HANG))
    try:
        with trio.fail_after(30):
            await sp.send({"type": "prompt", "id": "t", "message": "slow", "timeout": 1})
            r = await sp.until(lambda line: line["type"] == "receipt", timeout=15)
            await sp.close_stdin()
            await sp.read_all()
            code = await sp.wait()
        assert code == 0, sp.stderr
        assert r["id"] == "t"
        check_timeout_journal(journal, r["receipt"])
    finally:
        await sp.kill()


# ===========================================================================================
# 4. An engine that dies at start says why
# ===========================================================================================


async def test_engine_dying_at_start_says_why_serve(tmp_path: Path) -> None:
    """Each prompt meets a fresh engine that dies at once; after the crash limit (5) the
    bridge is down. Every receipt quotes the engine's own last words, and serve exits 1 with
    one stderr line saying the engine went down (docs: guide/exit-codes.md; it exited 0, as after a
    drain that went well)."""
    journal = tmp_path / "j.jsonl"
    sp = await start_serve(tmp_path, serve_argv("--journal", str(journal), engine=DIES_AT_ONCE))
    try:
        with trio.fail_after(40):
            ids = [f"p{n}" for n in range(1, 7)]
            for rid in ids:
                await sp.send({"type": "prompt", "id": rid, "message": "hi"})
            for _ in ids:
                await sp.until(lambda line: line["type"] == "receipt", timeout=30)
            await sp.close_stdin()
            await sp.read_all()
            code = await sp.wait()
        assert code == 1, sp.stderr
        (line,) = sp.stderr.splitlines()
        assert line.startswith("bridge serve: the engine went down: 5 engine failures in 60s") and FATAL in line, line
        got = by_id(sp)
        assert set(got) == set(ids)
        for rid in ids:
            r = got[rid]
            assert r["reason"] in ("engine-exited", "engine-down"), (rid, r)
            assert r["nativeError"] and FATAL in r["nativeError"], (rid, r)
        assert (got["p6"]["state"], got["p6"]["reason"]) == ("rejected", "engine-down"), got["p6"]
        down = [line for line in sp.lines if line["type"] == "signal" and line["signal"] == "engine-down"]
        assert len(down) == 1 and FATAL in down[0]["why"], down
        assert len(sp.engine_pids()) == 5
        await engines_gone(sp.engine_pids())
    finally:
        await sp.kill()


def test_engine_dying_at_start_says_why_run(tmp_path: Path) -> None:
    out = run_cli("run", "hi", "--json", "--journal", str(tmp_path / "j.jsonl"), "--", *DIES_AT_ONCE)
    assert out.returncode == 1, out.stderr
    [r] = json_lines(out.stdout)
    assert r["reason"] in ("engine-exited", "engine-down"), r
    assert r["nativeError"] and FATAL in r["nativeError"], r
    out = run_cli("run", "hi", "--journal", str(tmp_path / "j2.jsonl"), "--", *DIES_AT_ONCE)
    assert out.returncode == 1
    assert FATAL in out.stderr, out.stderr


# (`--provider nosuch` alone never reaches Pi any more: the bridge refuses it
# first, one line and exit 2, tests/test_cli.py.)
@pytest.mark.parametrize(
    "engine_args, pi_says",
    [
        (["--provider", "nosuch", "--model", "nosuch-model"], 'Unknown provider "nosuch"'),
    ],
)
def test_pi_dying_at_start_says_why(pinned_pi: Any, tmp_path: Path, engine_args: list[str], pi_says: str) -> None:
    """Pi 1.6.0 prints its complaint on stderr and exits 1 about 1 s after start, before it
    answers the seal check: the receipt must quote Pi, not the unanswered check. A complaint
    about the model or provider asked for is Pi refusing the launch (a restart repeats it):
    one Pi, down at once, exit 2 with the one line (docs: guide/exit-codes.md)."""
    journal = tmp_path / "j.jsonl"
    out = run_cli("run", "hi", "--json", "--journal", str(journal), *engine_args, timeout=90)
    assert out.returncode == 2, out.stderr
    [r] = json_lines(out.stdout)
    assert (r["state"], r["reason"]) == ("rejected", "engine-down"), r
    assert r["nativeError"] and pi_says in r["nativeError"], r
    assert "did not answer" not in r["nativeError"]
    assert out.stderr.strip().splitlines()[-1].startswith("bridge run: the engine cannot be set up: Pi refused")
    exits = [e["exit"] for e in read_journal(journal) if "exit" in e]
    assert exits == [{"code": 1, "signal": None}], exits
    assert prompt_sends(journal) == []
    starts = notes(journal, "engine-start")
    assert len(starts) == 1, starts
    (check,) = notes(journal, "seal-check")
    assert pi_says in check["problems"][0] and "start-up check" in check["problems"][1], check
    for n in starts:
        assert leftovers(n["pid"]) == [], n


#: Engines whose start-up check fails, and what the check's note must say.
STARTUP_FAILURES = {
    # dies after reading get_state (its exit is seen after its stdout closed)
    "dies-in-check": (DIES_IN_CHECK, FATAL),
    # dies before reading anything (the bridge's get_state write may break first)
    "dies-at-once": (DIES_AT_ONCE, FATAL),
    # stays up, never answers: the check's deadline; its requested stop is no second crash
    "never-answers": (fake_engine_argv({"on_start": {"delay": 30}}), "did not answer"),
}


@pytest.mark.parametrize("limit", [1, 3])
@pytest.mark.parametrize("how", list(STARTUP_FAILURES))
async def test_startup_death_counts_once_toward_the_crash_limit(tmp_path: Path, limit: int, how: str) -> None:
    """An engine that fails its start-up check: N failures, N crashes (one note each), then down."""
    argv, says = STARTUP_FAILURES[how]
    journal = tmp_path / "j.jsonl"
    config = BridgeConfig(**{**FAST, "crash_limit": limit, "crash_window": 60.0, "startup_timeout": 0.5})
    with trio.fail_after(40):
        async with open_bridge(SlowCheck(argv), journal=journal, config=config, start_engine=False) as bridge:
            seen: list[dict[str, Any]] = []
            bridge.listeners.append(seen.append)
            r = await bridge.prompt("hi")
            crashes = list(bridge.supervision.lifecycle.state.crashes)
    assert (r.state, r.reason) == ("rejected", "engine-down"), r
    assert r.native_error and says in r.native_error, r
    starts = notes(journal, "engine-start")
    assert len(starts) == limit, f"{len(starts)} engines for a crash limit of {limit}: a failure counted twice?"
    assert len(crashes) == limit, crashes
    checks = notes(journal, "seal-check")
    assert [c["generation"] for c in checks] == list(range(1, limit + 1)), checks
    for c in checks:
        assert len(c["problems"]) == 1 and says in c["problems"][0], c
    assert prompt_sends(journal) == []
    check_signals = [n for n in seen if n.get("type") == "signal" and n.get("signal") == "seal-check"]
    assert len(check_signals) == limit, check_signals
    await engines_gone([n["pid"] for n in starts])
    assert zombie_children() == []


class RefusingCheck(CommandProfile):
    """A ``--`` engine with Pi's seal check (``get_state``): a session that already holds
    messages is refused, as :func:`bridge.profiles.seal.check_seal` does."""

    def prepare(self):  # type: ignore[no-untyped-def]
        from bridge.profiles.seal import STARTUP, check_seal

        launch = super().prepare()
        launch.startup = [dict(c) for c in STARTUP]
        launch.check = check_seal
        return launch


async def test_a_startup_check_the_engine_answered_with_a_refusal_is_not_retried(tmp_path: Path) -> None:
    """The engine answered its check and the answers fail it: a fresh engine would answer the
    same, so the bridge goes down after that one engine (no crash counted, no backoff), every
    prompt rejected engine-down with the problem, as a set-up failure
    (docs: guide/timeouts.md); replay of the journal agrees."""
    argv = fake_engine_argv({"state": {"messageCount": 3}})
    journal = tmp_path / "j.jsonl"
    with trio.fail_after(30):
        async with open_bridge(
            RefusingCheck(argv), journal=journal, config=BridgeConfig(**FAST), start_engine=False
        ) as bridge:
            first = await bridge.submit("hi")
            second = await bridge.submit("again")
            r1, r2 = await first.receipt(), await second.receipt()
            state = bridge.supervision.lifecycle.state
            assert state.setup_failed and state.crashes == []
    problem = "Pi's session already held 3 message(s) at start-up"
    for r in (r1, r2):
        assert (r.state, r.reason) == ("rejected", "engine-down"), r
        assert r.native_error is not None and r.native_error.startswith(f"seal check failed: {problem}"), r
    assert len(notes(journal, "engine-start")) == 1
    [check] = notes(journal, "seal-check")
    assert check["problems"][0].startswith(problem)
    assert prompt_sends(journal) == []
    assert [(x.state, x.reason) for x in replay(str(journal)).receipts] == [("rejected", "engine-down")] * 2


async def test_startup_failure_signals_name_the_engine_they_are_about(tmp_path: Path) -> None:
    """Each failed start-up check is signalled once, labelled with the generation of the engine
    that failed -- also when the next engine is spawned at once (restart backoff 0)."""
    journal = tmp_path / "j.jsonl"
    config = BridgeConfig(**{**FAST, "crash_limit": 3, "restart_backoff": (0.0,)})
    seen: list[dict[str, Any]] = []
    with trio.fail_after(30):
        async with open_bridge(SlowCheck(DIES_IN_CHECK), journal=journal, config=config, start_engine=False) as bridge:
            bridge.listeners.append(seen.append)
            r = await bridge.prompt("hi")
    assert (r.state, r.reason) == ("rejected", "engine-down"), r
    checks = [n["generation"] for n in notes(journal, "seal-check")]
    assert checks == [1, 2, 3]
    live = [n["generation"] for n in seen if n.get("type") == "signal" and n.get("signal") == "seal-check"]
    journaled = [
        e["signal"]["generation"]
        for e in read_journal(journal)
        if isinstance(e.get("signal"), dict) and e["signal"].get("signal") == "seal-check"
    ]
    assert live == journaled == checks, f"seal-check signals labelled {live} (journal {journaled}), notes {checks}"


# ===========================================================================================
# 5. A full disk loses no receipt
# ===========================================================================================

LIMIT = 300 * 1024


def small_files() -> None:
    resource.setrlimit(resource.RLIMIT_FSIZE, (LIMIT, LIMIT))


def check_failed_journal_stderr(stderr: str, journal: Path) -> None:
    assert "Traceback" not in stderr, stderr
    last = stderr.strip().splitlines()[-1]
    assert str(journal) in last, stderr
    assert "too large" in last.lower() or "could not be written" in last.lower(), last


def check_told_before_unjournaled(sp: ServeProc, journal: Path) -> None:
    """No receipt reaches the controller before ``journal-failed`` unless the journal holds it:
    docs: guide/journals.md#what-is-durable-when-the-controller-gets-a-receipt."""
    held = {e["receipt"]["request"] for e in read_journal(journal) if "receipt" in e}
    for line in sp.lines:
        if line["type"] == "signal" and line["signal"] == "journal-failed":
            return
        if line["type"] == "receipt":
            assert line["id"] in held, f"{line['id']}'s receipt came before journal-failed but is not in the journal"
    raise AssertionError("no journal-failed signal")


async def test_full_disk_loses_no_receipt_serve(tmp_path: Path) -> None:
    journal = tmp_path / "j.jsonl"
    sp = await start_serve(
        tmp_path, serve_argv("--journal", str(journal), engine=fake_engine_argv({})), preexec_fn=small_files
    )
    try:
        ids = [f"big{n}" for n in range(5)]
        with trio.fail_after(60):
            for n, rid in enumerate(ids):
                await sp.send({"type": "prompt", "id": rid, "message": str(n) * (100 * 1024)})
            await sp.read_all(timeout=50)
            code = await sp.wait()
        got = by_id(sp)
        assert set(got) == set(ids), sorted(got)
        failed = [line for line in sp.lines if line["type"] == "signal" and line["signal"] == "journal-failed"]
        assert len(failed) == 1, failed
        check_told_before_unjournaled(sp, journal)
        assert code == 1, sp.stderr
        assert_bye_last(sp)
        check_failed_journal_stderr(sp.stderr, journal)
        assert os.path.getsize(journal) <= LIMIT
        await engines_gone(sp.engine_pids())
    finally:
        await sp.kill()


async def test_full_disk_closes_a_pool_with_one_line_and_exit_1(tmp_path: Path) -> None:
    """Issue 42: ``serve --engines`` whose journals' disk filled exited 0 with nothing on stderr,
    rejecting every later prompt ``engine-down`` one engine at a time. Now, as plain ``serve``:
    every prompt still gets its receipt, the pool closes (what waited is rejected ``closing``,
    none ``engine-down``), one line on stderr naming the failure, exit 1."""
    folder = tmp_path / "journals"
    argv = serve_argv("--engines", "2", "--journal", str(folder), engine=fake_engine_argv({}))
    sp = await start_serve(tmp_path, argv, preexec_fn=small_files)
    try:
        ids = [f"big{n}" for n in range(12)]
        with trio.fail_after(90):
            for n, rid in enumerate(ids):
                await sp.send({"type": "prompt", "id": rid, "message": str(n % 10) * (100 * 1024)})
            await sp.read_all(timeout=80)
            code = await sp.wait()
        got = by_id(sp)
        assert set(got) == set(ids), sorted(got)
        assert not [r for r in got.values() if r["reason"] == "engine-down"], got
        assert code == 1, sp.stderr
        last = sp.stderr.strip().splitlines()[-1]
        assert last.startswith("bridge serve: ") and "every receipt went to the controller" in last, sp.stderr
        assert "Traceback" not in sp.stderr
        await engines_gone(sp.engine_pids())
    finally:
        await sp.kill()


def test_full_disk_loses_no_receipt_run(tmp_path: Path) -> None:
    journal = tmp_path / "j.jsonl"
    prompts = [str(n) * (100 * 1024) for n in range(5)]
    out = run_cli(
        "run",
        *prompts,
        "--json",
        "--journal",
        str(journal),
        "--",
        *fake_engine_argv({}),
        preexec_fn=small_files,
        timeout=60,
    )
    assert out.returncode != 0
    receipts = [json.loads(line) for line in out.stdout.splitlines() if line.startswith('{"request"')]
    assert [r["request"] for r in receipts] == ["p1", "p2", "p3", "p4", "p5"], out.stdout[-2000:]
    check_failed_journal_stderr(out.stderr, journal)


async def test_full_disk_writes_nothing_queued_after_the_failure(tmp_path: Path) -> None:
    """The journal fails at the first receipt (a 1 KiB file size limit) while a second prompt
    waits in the queue: closing begins at once, as for a signal, so the waiting prompt is
    never written (``rejected``/``closing``) -- it would run with no journal at all."""
    journal = tmp_path / "j.jsonl"

    def tiny_files() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (1024, 1024))

    engine = fake_engine_argv({"prompts": [{"deltas": 10, "delta_delay": 0.05}]})
    sp = await start_serve(tmp_path, serve_argv("--journal", str(journal), engine=engine), preexec_fn=tiny_files)
    try:
        with trio.fail_after(30):
            await sp.send({"type": "prompt", "id": "a", "message": "first"})
            await sp.send({"type": "prompt", "id": "b", "message": "waiting"})
            st = await wait_held(sp, "a")
            assert st["queued"] == ["b"], st
            await sp.read_all(timeout=20)
            code = await sp.wait()
        got = by_id(sp)
        assert set(got) == {"a", "b"}
        assert code == 1, sp.stderr
        assert [line["signal"] for line in sp.lines if line["type"] == "signal"] == ["journal-failed"]
        check_told_before_unjournaled(sp, journal)
        assert got["a"]["state"] == "finished", got["a"]
        assert (got["b"]["state"], got["b"]["reason"]) == ("rejected", "closing"), (
            f"b was queued when the journal failed, yet it was written to the engine: {got['b']}"
        )
        assert_bye_last(sp)
        check_failed_journal_stderr(sp.stderr, journal)
    finally:
        await sp.kill()


@pytest.mark.parametrize("command", ["serve", "run"])
@pytest.mark.parametrize("where", ["existing-file", "under-a-file"])
def test_journal_that_cannot_be_created_is_one_clear_line(tmp_path: Path, command: str, where: str) -> None:
    """The journal cannot even be created (a file is in the way: refused, never appended to;
    its folder cannot be made): one line naming the journal and the problem, a non-zero
    status, no traceback -- before any prompt is accepted."""
    blocker = tmp_path / "blocker.jsonl"
    blocker.write_text("someone else's file\n")
    journal = blocker if where == "existing-file" else blocker / "j.jsonl"
    args = ["serve", "--journal", str(journal)] if command == "serve" else ["run", "hi", "--journal", str(journal)]
    out = subprocess.run(
        [sys.executable, "-m", "bridge", *args, "--", *fake_engine_argv({})],
        input='{"type":"prompt","id":"a","message":"x"}\n',
        capture_output=True,
        text=True,
        timeout=30,
        cwd=str(ROOT),
        check=False,
    )
    assert out.returncode != 0
    assert blocker.read_text() == "someone else's file\n"
    assert "Traceback" not in out.stderr, out.stderr[-3000:]
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and str(journal) in lines[0], out.stderr
    assert '"receipt"' not in out.stdout, "a prompt was accepted though the bridge could not start"


def _run_until(journal: Path, needle: bytes, argv: list[str]) -> subprocess.Popen[str]:
    """``bridge run`` started, returned once its journal holds ``needle`` (bounded: 30 s)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "bridge", "run", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    deadline = time.monotonic() + 30
    while not (journal.exists() and needle in journal.read_bytes()):
        assert proc.poll() is None and time.monotonic() < deadline, "never reached " + needle.decode()
        time.sleep(0.02)
    return proc


@pytest.mark.parametrize(
    "signum, status", [(signal.SIGTERM, 143), (signal.SIGINT, 130), (signal.SIGHUP, 129)], ids=lambda x: str(x)
)
def test_a_signal_while_run_closes_still_prints_every_receipt(tmp_path: Path, signum: int, status: int) -> None:
    """The prompt has its receipt and the bridge is stopping an engine slow to go (it reads no
    more stdin and ignores SIGTERM: seconds of the kill ladder) when the signal comes: it was
    the process's death (SIGTERM/SIGHUP) or a KeyboardInterrupt that printed nothing (a
    new-user trial). Now: 128+N, the receipt printed, no engine left."""
    journal = tmp_path / "j.jsonl"
    engine = fake_engine_argv({"prompts": [{"ignore_stdin": True}], "on_start": {"ignore_sigterm": True}})
    proc = _run_until(journal, b'{"receipt"', ["hello", "--json", "--journal", str(journal), "--", *engine])
    proc.send_signal(signum)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == status, err
    [r] = json_lines(out)
    assert (r["request"], r["state"]) == ("p1", "finished"), r
    for n in notes(journal, "engine-start"):
        assert leftovers(n["pid"]) == [], n


def test_two_signals_mid_stream_print_every_receipt_with_the_first_ones_status(tmp_path: Path) -> None:
    """SIGINT, then SIGTERM 50 ms later, while one of three prompts streams (the journal, which
    says when, is written in blocks: the first or the second): exit 130 (the first signal's),
    every receipt printed -- those before it finished, it failed/closing, the rest
    rejected/closing."""
    journal = tmp_path / "j.jsonl"
    engine = fake_engine_argv({"defaults": {"deltas": 200, "delta_delay": 0.02}})
    argv = ["a", "b", "c", "--json", "--journal", str(journal), "--", *engine]
    proc = _run_until(journal, b'"agent_start"', argv)
    proc.send_signal(signal.SIGINT)
    time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    got = [(r["request"], r["state"], r["reason"]) for r in json_lines(out)]
    n = next(k for k, g in enumerate(got) if g[1] != "finished")
    want = [("finished", None)] * n + [("failed", "closing")] + [("rejected", "closing")] * (2 - n)
    # The journal is written in blocks, so under load the block holding a prompt's agent_start
    # can land after that prompt has finished: then the signal falls between two prompts, and
    # the next one is refused, not stopped (CI, stop 37). That is the same rule, seen later.
    between = [("finished", None)] * n + [("rejected", "closing")] * (3 - n)
    assert [g[0] for g in got] == ["p1", "p2", "p3"], got
    assert [g[1:] for g in got] == want or (n >= 1 and [g[1:] for g in got] == between), got
