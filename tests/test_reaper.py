"""Issue 35: nothing an engine's tools start escapes (``bridge/live/reaper.py``).

A ``--`` engine is not confined, so what its tools start -- a ``setsid`` child, a double-forked
daemon, a ``nohup … &`` -- left its process group and outlived the bridge. The engine now
runs under a child subreaper that kills and reaps all of it when the engine ends. Each test
checks ``/proc/PID`` for every pid the engine started: gone, not a zombie.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import trio

from bridge.core.framing import Oversize, UpdateRun
from bridge.live import api
from bridge.live.engine import Engine, under_reaper
from bridge.profiles.command import CommandProfile, Launch, filtered_env
from tests.helpers_live import fake_engine_argv, read_journal

#: Three ways a tool's process leaves the engine's process group (or outlives its parent),
#: each writing its own pid to a file in the current folder.
ESCAPERS = (
    "setsid sleep 1000 & echo $! > setsid.pid; "
    "( setsid sh -c 'echo $$ > daemon.pid; exec sleep 1000' </dev/null >/dev/null 2>&1 & ); "
    "nohup setsid sleep 1000 >/dev/null 2>&1 & echo $! > nohup.pid; "
    "while [ ! -s daemon.pid ]; do sleep 0.01; done; "
)
NAMES = ("setsid", "daemon", "nohup")


def alive(pid: int) -> bool:
    """``/proc/PID`` is there (running, stopped or a zombie nobody reaped)."""
    return os.path.exists(f"/proc/{pid}")


async def pids_in(folder: Path) -> dict[str, int]:
    """The escapers' pids, once each has written its file (bounded)."""
    with trio.fail_after(10):
        while not all((folder / f"{n}.pid").exists() and (folder / f"{n}.pid").read_text().strip() for n in NAMES):
            await trio.sleep(0.02)
    return {n: int((folder / f"{n}.pid").read_text()) for n in NAMES}


async def gone(pids: Sequence[int]) -> list[int]:
    """The pids still there after a bounded wait (the kernel's exit is not instant)."""
    with trio.move_on_after(5):
        while any(alive(p) for p in pids):
            await trio.sleep(0.02)
    return [p for p in pids if alive(p)]


def kill_all(pids: Sequence[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_the_control_these_processes_do_escape_a_plain_parent(tmp_path: Path):
    """Without a reaper, the three outlive the process that started them (the issue's bug)."""
    subprocess.run(["sh", "-c", ESCAPERS + "sleep 0.1"], cwd=tmp_path, start_new_session=True, check=True, timeout=10)
    pids = trio.run(pids_in, tmp_path)
    try:
        assert all(alive(p) for p in pids.values()), pids
    finally:
        kill_all(list(pids.values()))


async def test_what_a_command_engines_tools_start_ends_with_the_bridge(tmp_path: Path):
    script = ESCAPERS + 'exec "$@"'
    profile = CommandProfile(["sh", "-c", script, "engine", *fake_engine_argv()], cwd=str(tmp_path))
    pids: dict[str, int] = {}
    try:
        with trio.fail_after(60):
            async with api.open_bridge(profile, journal=tmp_path / "j.jsonl") as bridge:
                assert (await bridge.prompt("hi")).state == "finished"
                pids = await pids_in(tmp_path)
                assert all(alive(p) for p in pids.values()), pids
                engine = bridge.engine
                assert engine is not None and engine.reaper and engine.pid is not None
                pids["reaper"] = engine.pid
            assert await gone(list(pids.values())) == [], pids
    finally:
        kill_all(list(pids.values()))
    # The exit the journal records is the engine's own (stdin EOF: 0), not the reaper's.
    exits = [e["exit"] for e in read_journal(tmp_path / "j.jsonl") if "exit" in e]
    assert exits == [{"code": 0, "signal": None}]


class Sink:
    """An :class:`~bridge.live.engine.EngineSink` that keeps the exit and the stderr."""

    def __init__(self) -> None:
        self.exit: tuple[int | None, int | None] | None = None
        self.errors: list[str] = []

    def lines(self, engine: Engine, lines: Sequence[bytes | Oversize | UpdateRun]) -> None:
        pass

    def stderr(self, engine: Engine, text: str) -> None:
        self.errors.append(text)

    def stdout_closed(self, engine: Engine) -> None:
        pass

    def exited(self, engine: Engine, code: int | None, sig: int | None) -> None:
        self.exit = (code, sig)


def launch(*argv: str, cwd: Path | None = None) -> Launch:
    return Launch(argv=list(argv), env=filtered_env(None), cwd=str(cwd) if cwd else None)


async def test_an_engine_deaf_to_eof_and_sigterm_is_ended_with_all_it_started(tmp_path: Path):
    """stdin closed, SIGTERM ignored: the ladder's reaper rung SIGKILLs it and the rest."""
    script = "trap '' TERM; " + ESCAPERS + "exec sleep 1000"
    sink = Sink()
    pids: dict[str, int] = {}
    try:
        with trio.fail_after(30):
            async with trio.open_nursery() as nursery:
                engine = await Engine.start(nursery, launch("sh", "-c", script, cwd=tmp_path), 1, sink)
                assert engine.pid is not None
                pids = {**await pids_in(tmp_path), "reaper": engine.pid}
                await engine.aclose(stdin_grace=0.2, term_grace=0.2)
        assert sink.exit == (None, signal.SIGKILL)
        assert await gone(list(pids.values())) == [], pids
    finally:
        kill_all(list(pids.values()))


async def test_the_engines_exit_status_passes_through_the_reaper(tmp_path: Path):
    for script, expected in (("exit 7", (7, None)), ("kill -TERM $$", (None, signal.SIGTERM)), ("exit 0", (0, None))):
        sink = Sink()
        with trio.fail_after(30):
            async with trio.open_nursery() as nursery:
                engine = await Engine.start(nursery, launch("sh", "-c", ESCAPERS + script, cwd=tmp_path), 1, sink)
                await engine.exited.wait()
        assert sink.exit == expected, script
        pids = await pids_in(tmp_path)
        try:
            assert await gone(list(pids.values())) == [], (script, pids)
        finally:
            kill_all(list(pids.values()))
        for n in NAMES:
            (tmp_path / f"{n}.pid").unlink()


async def test_an_engine_that_cannot_be_started_raises_as_without_the_reaper(tmp_path: Path):
    missing = str(tmp_path / "no-such-engine")
    not_executable = tmp_path / "plain.txt"
    not_executable.write_text("hi")
    for argv, error in ((missing, FileNotFoundError), (str(not_executable), PermissionError)):
        async with trio.open_nursery() as nursery:
            try:
                await Engine.start(nursery, launch(argv), 1, Sink())
            except OSError as e:
                assert isinstance(e, error) and e.filename == argv, e
            else:
                raise AssertionError(f"{argv} started")


def test_a_contained_launch_does_not_run_under_the_reaper():
    plain = launch(sys.executable)
    assert under_reaper(plain)
    plain.contained = True
    assert not under_reaper(plain)


#: A stand-in for a bridge, run as its own process: it spawns the reaper as the bridge does, from
#: a thread that then ends (trio spawns from a worker thread, and PR_SET_PDEATHSIG fires when
#: the spawning thread ends), says so, and waits to be killed.
BRIDGE = """
import os, subprocess, sys, threading, time
status_r, status_w = os.pipe()
def spawn():
    subprocess.Popen([sys.executable, "-I", "-S", sys.argv[1], str(status_w), "--", "sh", "-c", sys.argv[2]],
                     stdin=subprocess.PIPE, start_new_session=True, pass_fds=(status_w,))
    os.close(status_w)
    assert os.read(status_r, 100) == b""  # the engine started: the reaper asked for the signal
thread = threading.Thread(target=spawn)
thread.start()
thread.join()
print("spawned", flush=True)
time.sleep(1000)
"""


def test_a_sigkilled_bridges_engine_deaf_to_eof_is_ended_with_all_it_started(tmp_path: Path):
    """The bridge is SIGKILLed, and its engine ignores the EOF and SIGTERM: the reaper hears of
    its parent's death and ends the engine and what it started (the spawning thread's end
    before that is not the bridge's death: the engine lives on through it)."""
    from bridge.live.engine import REAPER

    script = "trap '' TERM; echo $$ > engine.pid; " + ESCAPERS + "exec sleep 1000 </dev/null"
    proc = subprocess.Popen(
        [sys.executable, "-c", BRIDGE, str(REAPER), script], cwd=tmp_path, stdout=subprocess.PIPE, text=True
    )
    pids: dict[str, int] = {}
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "spawned\n"
        pids = trio.run(pids_in, tmp_path)
        pids["engine"] = int((tmp_path / "engine.pid").read_text())
        assert all(alive(p) for p in pids.values()), pids  # the spawning thread has ended
        proc.kill()
        proc.wait()
        assert trio.run(gone, list(pids.values())) == [], pids
    finally:
        proc.kill()
        proc.wait()
        kill_all(list(pids.values()))
