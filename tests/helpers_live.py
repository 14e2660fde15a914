"""Shared helpers for the live tests (real subprocesses over real pipes).

- :func:`fake_engine_argv`: the argv of ``tools/fake_engine.py`` with a scenario.
- :class:`SeededFakeProfile` / :class:`SequenceProfile`: an engine profile that gives every engine process it
  prepares a fresh ``--seed`` (so a recycled engine does not replay the same faults).
- :func:`zombie_children` / :func:`process_gone`: /proc checks for zombies and leftovers.
- :func:`compare_journal`: a journal against what the live bridge reported.
- :class:`ServeProc`: ``bridge serve`` as a subprocess, every read bounded.
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any, Callable

import attrs
import trio

from bridge.profile import Launch, filtered_env
from bridge.replay import replay

ROOT = Path(__file__).resolve().parent.parent
FAKE = ROOT / "tools" / "fake_engine.py"

#: The overlap signals the tracker raises (SPEC §4); everything else the bridge
#: signals (gap, unsealed, disposition, seal-diagnostic, engine-down) is its own.
TRACKER_SIGNALS = frozenset({"O1", "O2", "O3", "O4", "O5", "O6", "aborted-without-stop"})


def fake_engine_argv(scenario: dict[str, Any] | None = None, seed: int | None = None) -> list[str]:
    """``python tools/fake_engine.py --scenario-json … [--seed N]``."""
    argv = [sys.executable, str(FAKE), "--scenario-json", json.dumps(scenario or {})]
    if seed is not None:
        argv += ["--seed", str(seed)]
    return argv


@attrs.define
class SeededFakeProfile:
    """Like ``CommandProfile(fake_engine_argv(scenario))`` but each engine gets its own seed."""

    scenario: dict[str, Any]
    rng: random.Random
    name: str = "fake-seeded"
    seeds: list[int] = attrs.field(factory=list)

    def prepare(self) -> Launch:
        seed = self.rng.randrange(1 << 30)
        self.seeds.append(seed)
        argv = fake_engine_argv(self.scenario, seed)
        return Launch(argv=argv, env=filtered_env(None), clearing=("clear_queue",),
                      header={"engine": "command", "argv": argv})


@attrs.define
class SequenceProfile:
    """The n-th engine this profile prepares runs ``scenarios[n]`` (the last one repeats).

    The fake engine counts prompts per process, so a recycled engine would start its
    scenario over; this gives each generation its own story.
    """

    scenarios: list[dict[str, Any]]
    name: str = "fake-sequence"
    launches: int = 0

    def prepare(self) -> Launch:
        scenario = self.scenarios[min(self.launches, len(self.scenarios) - 1)]
        self.launches += 1
        argv = fake_engine_argv(scenario)
        return Launch(argv=argv, env=filtered_env(None), clearing=("clear_queue",),
                      header={"engine": "command", "argv": argv})


# -- /proc -----------------------------------------------------------------------------


def _stat(pid: int) -> tuple[str, int, int, int] | None:
    """(state, ppid, pgrp, session) of ``pid``, or None when it does not exist."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read().decode("ascii", "replace")
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    rest = data[data.rfind(")") + 2 :].split()
    return rest[0], int(rest[1]), int(rest[2]), int(rest[3])


def _all_pids() -> list[int]:
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def zombie_children(parent: int | None = None) -> list[int]:
    """Children of ``parent`` (default: this process) in state Z."""
    parent = os.getpid() if parent is None else parent
    out = []
    for pid in _all_pids():
        st = _stat(pid)
        if st is not None and st[1] == parent and st[0] == "Z":
            out.append(pid)
    return out


def leftovers(pid: int, parent: int | None = None) -> list[str]:
    """What is left of an engine process ``pid`` (and its own group/session): [] when gone.

    ``parent`` given: only a process that is still ``parent``'s child counts as the
    engine (a pid reused by an unrelated process is not a leftover). ``parent``
    None: any live process with that pid counts (its parent may have died).
    """
    found = []
    for other in _all_pids():
        st = _stat(other)
        if st is None:
            continue
        state, ppid, pgrp, sid = st
        if other == pid:
            if parent is None or ppid == parent:
                found.append(f"engine pid {pid} still there (state {state}, parent {ppid})")
        elif pgrp == pid or sid == pid:
            found.append(f"pid {other} left in the engine's group {pid} (state {state})")
    return found


async def wait_gone(pid: int, parent: int | None = None, timeout: float = 3.0) -> list[str]:
    """Poll until the engine ``pid`` is gone; return what is left after ``timeout``."""
    with trio.move_on_after(timeout):
        while leftovers(pid, parent):
            await trio.sleep(0.02)
    return leftovers(pid, parent)


# -- journals ---------------------------------------------------------------------------


def read_journal(path: str | Path) -> list[dict[str, Any]]:
    """Every entry of a journal (header first); a cut-off last line is dropped."""
    entries = []
    with open(path, "rb") as f:
        for raw in f.read().split(b"\n"):
            if raw.strip():
                try:
                    entries.append(json.loads(raw))
                except ValueError:
                    pass
    return entries


FAULT_RE = re.compile(r"fake-engine: fault (\S+) at (\d+)")


def faults_in_journal(entries: list[dict[str, Any]]) -> Counter[str]:
    """The fake engine's ``fault KIND at STEP`` stderr lines, counted by kind."""
    c: Counter[str] = Counter()
    for e in entries:
        text = e.get("stderr")
        if isinstance(text, str):
            m = FAULT_RE.search(text)
            if m:
                c[m.group(1)] += 1
    return c


def sent_after_receipt(entries: list[dict[str, Any]]) -> dict[Any, str]:
    """Prompts the journal shows written to the engine after their receipt was settled."""
    settled: dict[Any, str] = {}
    out: dict[Any, str] = {}
    for e in entries:
        if isinstance(e.get("receipt"), dict):
            r = e["receipt"]
            settled[r.get("request")] = f"{r.get('state')}/{r.get('reason')}"
        elif isinstance(e.get("send"), dict) and e["send"].get("type") == "prompt":
            rid = e["send"].get("id")
            if rid in settled:
                out[rid] = settled[rid]
    return out


def compare_journal(
    path: str | Path,
    live_receipts: dict[str, Any],
    live_notes: list[dict[str, Any]],
) -> list[str]:
    """Problems (empty: none) between a closed bridge's journal and what it reported live.

    ``live_receipts``: request -> Receipt from the handles. ``live_notes``: every
    notification the bridge emitted (a ``listeners`` callback).
    """
    problems: list[str] = []
    entries = read_journal(path)
    journaled = [e["receipt"] for e in entries if "receipt" in e]
    counts = Counter(r.get("request") for r in journaled)
    dups = {k: n for k, n in counts.items() if n > 1}
    if dups:
        problems.append(f"duplicate receipt entries in the journal: {dups}")
    if set(counts) != set(live_receipts):
        problems.append(f"journal receipts {sorted(map(str, counts))} != live {sorted(live_receipts)}")
    for r in journaled:
        live = live_receipts.get(r.get("request"))
        if live is not None and (r.get("state"), r.get("reason")) != (live.state, live.reason):
            problems.append(f"journal receipt {r.get('request')}: {r.get('state')}/{r.get('reason')} "
                            f"!= live {live.state}/{live.reason}")
    for rid, what in sent_after_receipt(entries).items():
        problems.append(f"prompt {rid} was sent to the engine after its receipt ({what})")
    sends = Counter(e["send"].get("id") for e in entries
                    if isinstance(e.get("send"), dict) and e["send"].get("type") == "prompt")
    releases = Counter(e["release"] for e in entries if "release" in e)
    for rid in sends:
        if releases.get(rid) != 1:
            problems.append(f"prompt {rid} was sent but released {releases.get(rid, 0)} times")
    note_receipts = Counter(n["id"] for n in live_notes if n.get("type") == "receipt")
    if note_receipts != Counter({k: 1 for k in live_receipts}):
        problems.append(f"receipt notifications {dict(note_receipts)} != one per prompt")
    result = replay(str(path))
    replayed = {r.request: (r.state, r.reason) for r in result.receipts}
    live = {k: (v.state, v.reason) for k, v in live_receipts.items()}
    twice = [k for k, n in Counter(r.request for r in result.receipts).items() if n > 1]
    if twice:
        problems.append(f"replay lists a prompt twice: {twice}")
    for k in sorted(set(live) | set(replayed), key=str):
        if live.get(k) != replayed.get(k):
            problems.append(f"replay receipt {k}: {replayed.get(k)} != live {live.get(k)}")
    live_overlaps = [
        {k: v for k, v in n.items() if k not in ("type", "generation")}
        for n in live_notes
        if n.get("type") == "signal" and n.get("signal") in TRACKER_SIGNALS
    ]
    if result.overlaps != live_overlaps:
        problems.append(f"replay overlaps {result.overlaps} != live overlap signals {live_overlaps}")
    return problems


# -- bridge serve as a subprocess -----------------------------------------------------------


class ServeProc:
    """``python -m bridge serve [ARGS] -- ENGINE…`` with every read bounded by a timeout."""

    def __init__(self, proc: trio.Process, stderr_path: Path) -> None:
        self.proc = proc
        self.stderr_path = stderr_path
        self._buf = b""
        self._eof = False
        #: Every stdout line read so far (raw bytes) and its parsed form.
        self.raw: list[bytes] = []
        self.lines: list[dict[str, Any]] = []
        self._pos = 0

    @classmethod
    async def start(cls, tmp_path: Path, engine_argv: list[str], *args: str) -> ServeProc:
        stderr_path = tmp_path / "serve.stderr"
        with open(stderr_path, "wb") as err:
            proc = await trio.lowlevel.open_process(
                [sys.executable, "-m", "bridge", "serve", *args, "--", *engine_argv],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, cwd=str(ROOT),
            )
        return cls(proc, stderr_path)

    @property
    def stderr(self) -> str:
        try:
            return self.stderr_path.read_text("utf-8", "replace")
        except FileNotFoundError:
            return ""

    async def send(self, obj: Any) -> None:
        data = obj if isinstance(obj, bytes) else json.dumps(obj).encode()
        if not data.endswith(b"\n"):
            data += b"\n"
        assert self.proc.stdin is not None
        with trio.fail_after(10):
            await self.proc.stdin.send_all(data)

    async def close_stdin(self) -> None:
        assert self.proc.stdin is not None
        await self.proc.stdin.aclose()

    async def _fill(self) -> None:
        assert self.proc.stdout is not None
        data = await self.proc.stdout.receive_some(1 << 20)
        if not data:
            self._eof = True
            if self._buf:
                self._take(self._buf)
                self._buf = b""
            return
        self._buf += data
        *done, self._buf = self._buf.split(b"\n")
        for line in done:
            self._take(line)

    def _take(self, line: bytes) -> None:
        self.raw.append(line)
        try:
            value = json.loads(line)
        except ValueError as e:
            raise AssertionError(f"bridge serve wrote a line that is not JSON: {line[:200]!r}") from e
        if not isinstance(value, dict):
            raise AssertionError(f"bridge serve wrote a non-object line: {line[:200]!r}")
        self.lines.append(value)

    async def next(self, timeout: float = 10.0) -> dict[str, Any] | None:
        """The next unread line (None at EOF)."""
        with trio.fail_after(timeout):
            while self._pos >= len(self.lines):
                if self._eof:
                    return None
                await self._fill()
        line = self.lines[self._pos]
        self._pos += 1
        return line

    async def until(self, pred: Callable[[dict[str, Any]], bool], timeout: float = 10.0) -> dict[str, Any]:
        """Read until a line matches ``pred``; fail on timeout or EOF."""
        with trio.fail_after(timeout):
            while True:
                line = await self.next(timeout=timeout + 1)
                if line is None:
                    raise AssertionError(f"EOF before the expected line; read: {self.lines}\nstderr: {self.stderr}")
                if pred(line):
                    return line

    async def read_all(self, timeout: float = 15.0) -> list[dict[str, Any]]:
        """Read to EOF; return the lines not read before."""
        start = self._pos
        with trio.fail_after(timeout):
            while await self.next(timeout=timeout + 1) is not None:
                pass
        return self.lines[start:]

    async def wait(self, timeout: float = 15.0) -> int:
        with trio.fail_after(timeout):
            return await self.proc.wait()

    def receipts(self) -> list[dict[str, Any]]:
        return [line for line in self.lines if line.get("type") == "receipt"]

    def engine_pids(self) -> list[int]:
        return [line["pid"] for line in self.lines if line.get("type") == "engine" and line.get("event") == "started"]

    async def kill(self) -> None:
        if self.proc.returncode is None:
            try:
                self.proc.send_signal(signal.SIGKILL)
            except ProcessLookupError:
                pass
            with trio.move_on_after(5):
                await self.proc.wait()
