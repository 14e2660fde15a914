"""Shared code for the live checks: ``tools/soak`` and the live tests (``tests/``).

Real subprocesses over real pipes:

- :func:`fake_engine_argv`: the argv of ``tools/fake_engine.py`` with a scenario.
- :class:`SeededFakeProfile` / :class:`SequenceProfile`: an engine profile that gives every engine
  process it prepares a fresh ``--seed`` / its own scenario (so a recycled engine does not replay
  the same faults); :func:`generations_argv`: the same for ``bridge serve -- ENGINE…`` (one argv
  for the whole session; a tiny ``sh`` shim picks the n-th scenario and execs the fake engine).
- :func:`zombie_children` / :func:`leftovers` / :func:`wait_gone`: /proc checks for zombies and
  leftovers; :func:`start_time` / :func:`same_process`: a pid plus its start time names one process
  even when pids are reused (a long soak spawns more processes than ``pid_max``).
- :func:`compare_journal`: a journal against what the live bridge reported (``Receipt`` objects
  from the Python API or the JSON receipts of ``bridge serve``).
- :class:`ServeProc`: ``bridge serve`` as a subprocess, every read bounded.
- :func:`fast_config`, :data:`STOP_PLANS`, :func:`controller_action`, :func:`check_receipt`: a
  controller that misbehaves through the Python API (stops at random moments), with short timeouts.
- :class:`StartupCheckProfile`: a command engine with a start-up (seal) check, so closing can
  land while the check is awaited; :func:`generations_profile`: the API twin of
  :func:`generations_argv`.
- :func:`failing_journal` / :class:`FailingFile`: a journal whose disk fills up after N bytes
  (ENOSPC), in-process; ``bridge serve`` gets the real thing from ``RLIMIT_FSIZE``
  (:func:`fsize_limit`). :func:`check_journal_readable` reads a failed journal back.
- :func:`check_journal_story`: what the journal must show about sends, stops and closing.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import random
import re
import resource
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import attrs
import trio

import bridge.live.journal
from bridge.core.receipts import Receipt
from bridge.live.api import PromptHandle
from bridge.live.supervisor import BridgeConfig
from bridge.profiles.command import CommandProfile, Launch, filtered_env
from bridge.readers.replay import replay
from bridge.transcript import TranscriptError, open_transcript

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
        return Launch(
            argv=argv, env=filtered_env(None), clearing=("clear_queue",), header={"engine": "command", "argv": argv}
        )


@attrs.define
class SequenceProfile:
    """The n-th engine this profile prepares runs ``scenarios[n]`` (the last one repeats).

    The fake engine counts prompts per process, so a recycled engine would start its
    scenario over; this gives each generation its own story.
    """

    scenarios: list[dict[str, Any]]
    name: str = "fake-sequence"
    launches: int = 0
    #: ``--seed`` of the n-th engine (its generation) instead of none.
    seed_by_generation: bool = False

    def prepare(self) -> Launch:
        scenario = self.scenarios[min(self.launches, len(self.scenarios) - 1)]
        self.launches += 1
        argv = fake_engine_argv(scenario, self.launches if self.seed_by_generation else None)
        return Launch(
            argv=argv, env=filtered_env(None), clearing=("clear_queue",), header={"engine": "command", "argv": argv}
        )


#: The ``sh`` shim behind :func:`generations_argv`: the n-th start runs ``engine-N.json`` (else
#: ``engine-default.json``) with ``--seed N``; ``exec`` keeps the pid the bridge spawned.
_GENERATIONS_SH = r"""
d=$1; py=$2; fake=$3
n=0
[ -f "$d/generation" ] && read n < "$d/generation"
n=$((n+1))
echo "$n" > "$d/generation"
f="$d/engine-$n.json"
[ -f "$f" ] || f="$d/engine-default.json"
exec "$py" "$fake" --scenario "$f" --seed "$n"
"""


def generations_argv(
    folder: str | Path, scenarios: list[dict[str, Any]], default: dict[str, Any] | None = None
) -> list[str]:
    """One engine argv for a whole ``bridge serve`` session whose n-th engine process (its
    generation n, counted from 1) runs ``scenarios[n-1]`` and, past the list, ``default``
    (a well-behaved fake engine unless given). Written into ``folder``."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    for n, scenario in enumerate(scenarios, start=1):
        (folder / f"engine-{n}.json").write_text(json.dumps(scenario))
    (folder / "engine-default.json").write_text(json.dumps(default or {}))
    return ["/bin/sh", "-c", _GENERATIONS_SH, "fake-generations", str(folder), sys.executable, str(FAKE)]


#: The start-up command :class:`StartupCheckProfile` sends (Pi's seal check asks the same).
STARTUP_CHECK: list[dict[str, Any]] = [{"id": "seal-state", "type": "get_state"}]


@attrs.define
class StartupCheckProfile(CommandProfile):
    """A command engine with a start-up check: ``get_state`` is written at spawn and every
    prompt waits for its answer (the check itself finds nothing). With the fake engine's
    ``{"on_start": {"delay": S}}`` the check stays open for S seconds: a window in which
    closing meets prompts that are queued and an engine that is not yet ready."""

    name: str = "command-checked"

    def prepare(self) -> Launch:
        launch = super().prepare()
        launch.startup = [dict(cmd) for cmd in STARTUP_CHECK]
        launch.check = lambda answers: []
        return launch


def generations_profile(
    folder: str | Path,
    scenarios: list[dict[str, Any]],
    default: dict[str, Any] | None = None,
    *,
    startup_check: bool = False,
) -> CommandProfile:
    """:func:`generations_argv` as a profile for the Python API (with a start-up check if asked)."""
    argv = generations_argv(folder, scenarios, default)
    return StartupCheckProfile(argv) if startup_check else CommandProfile(argv)


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


def start_time(pid: int) -> int | None:
    """The process's start time (clock ticks since boot; /proc/PID/stat field 22), or None
    when there is no such process. With the pid it names one process for good."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read().decode("ascii", "replace")
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    return int(data[data.rfind(")") + 2 :].split()[19])


def same_process(pid: int, started: int | None) -> str | None:
    """The state letter of process ``pid`` if it is still the one that started at ``started``
    (``R``, ``S``, ``Z``, …), else None (gone, or the pid now names another process)."""
    if started is None:
        return None
    st = _stat(pid)
    if st is None or start_time(pid) != started:
        return None
    return st[0]


async def wait_same_gone(procs: list[tuple[int, int | None]], timeout: float = 3.0) -> list[str]:
    """Poll until none of ``(pid, start time)`` is alive (or a zombie); what is left after ``timeout``."""

    def left() -> list[str]:
        out = []
        for pid, started in procs:
            state = same_process(pid, started)
            if state is not None:
                out.append(f"engine pid {pid} still there (state {state})")
        return out

    with trio.move_on_after(timeout):
        while left():
            await trio.sleep(0.02)
    return left()


def kill_same(procs: list[tuple[int, int | None]]) -> None:
    """SIGKILL each ``(pid, start time)`` that is still that process, and its process group."""
    for pid, started in procs:
        if same_process(pid, started) is None:
            continue
        for kill in (os.killpg, os.kill):
            try:
                kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


def orphan_engines(pids: list[int]) -> list[str]:
    """Fake engines among ``pids`` left running with no parent of their own (re-parented to
    init): for engines whose start time was never seen, so a reused pid is not mistaken."""
    out = []
    for pid in pids:
        st = _stat(pid)
        if st is None or st[1] != 1:
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read()
        except OSError:
            continue
        if b"fake_engine" in cmd:
            out.append(f"engine pid {pid} orphaned (state {st[0]})")
    return out


def vm_hwm(pid: int) -> int | None:
    """Peak resident set size of ``pid`` in bytes (/proc/PID/status ``VmHWM``), None when gone."""
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            for line in f:
                if line.startswith(b"VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (FileNotFoundError, ProcessLookupError):
        return None
    return None


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

    ``live_receipts``: request -> Receipt from the handles, or its JSON form (``bridge serve``'s
    ``receipt`` lines). ``live_notes``: every notification the bridge emitted (a ``listeners``
    callback, or every line ``bridge serve`` wrote).
    """
    problems: list[str] = []
    live_receipts = {k: (Receipt.from_json(v) if isinstance(v, dict) else v) for k, v in live_receipts.items()}
    entries = read_journal(path)
    journaled = [e["receipt"] for e in entries if "receipt" in e]
    counts = Counter(r.get("request") for r in journaled)
    dups = {k: n for k, n in counts.items() if n > 1}
    if dups:
        problems.append(f"duplicate receipt entries in the journal: {dups}")
    if set(counts) != set(live_receipts):
        problems.append(f"journal receipts {sorted(map(str, counts))} != live {sorted(live_receipts)}")
    problems += receipts_disagree(journaled, live_receipts, "journal receipt")
    for rid, what in sent_after_receipt(entries).items():
        problems.append(f"prompt {rid} was sent to the engine after its receipt ({what})")
    sends = Counter(
        e["send"].get("id") for e in entries if isinstance(e.get("send"), dict) and e["send"].get("type") == "prompt"
    )
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


def check_journal_story(path: str | Path, live_receipts: dict[str, Any]) -> list[str]:
    """What a complete journal must show beside its receipts (SPEC §5, §7):

    - nothing is written to the engine once closing has begun: no ``send`` of a prompt after
      the ``{"note":{"event":"closing"…}}`` line;
    - a prompt never written (no ``send``) is ``rejected`` for a reason of its own (queue-full,
      cancelled, closing, engine-down: never ``engine``), and a written one is never rejected
      for those reasons, unless an ``unsent`` note says none of it went in (``engine-down``);
    - whose stop ended a run is on record: a ``failed`` receipt with reason ``interrupted`` /
      ``timeout`` / ``closing`` names a stop whose ``stop`` note says ``by`` ``controller`` /
      ``timeout`` / ``closing``.
    """
    problems: list[str] = []
    live = {k: (Receipt.from_json(v) if isinstance(v, dict) else v) for k, v in live_receipts.items()}
    entries = read_journal(path)
    closing_at: int | None = None
    sent: set[Any] = set()
    owners: dict[Any, Any] = {}
    unsent: set[Any] = set()
    for n, e in enumerate(entries):
        note = e.get("note")
        if isinstance(note, dict):
            if note.get("event") == "closing" and closing_at is None:
                closing_at = n
            elif note.get("event") == "stop":
                owners[note.get("stop")] = note.get("by")
            elif note.get("event") == "unsent":
                unsent.add(note.get("request"))
        send = e.get("send")
        if isinstance(send, dict) and send.get("type") == "prompt":
            sent.add(send.get("id"))
            if closing_at is not None:
                problems.append(
                    f"prompt {send.get('id')} was sent to the engine after closing began "
                    f"({entries[closing_at]['note']})"
                )
    for rid, r in live.items():
        if rid not in sent and (r.state != "rejected" or r.reason == "engine"):
            problems.append(f"{rid}: never written to the engine, but its receipt is {r.state}/{r.reason}")
        if (
            rid in sent
            and r.state == "rejected"
            and r.reason != "engine"
            and not (rid in unsent and r.reason == "engine-down")
        ):
            problems.append(f"{rid}: written to the engine, but its receipt is {r.state}/{r.reason}")
        want = {"interrupted": "controller", "timeout": "timeout", "closing": "closing"}.get(r.reason or "")
        if r.state == "failed" and want is not None:
            if r.stop is None:
                problems.append(f"{rid}: failed/{r.reason} names no stop")
            elif owners.get(r.stop) != want:
                problems.append(
                    f"{rid}: failed/{r.reason} by stop {r.stop!r}, whose note says by "
                    f"{owners.get(r.stop)!r}, not {want!r}"
                )
    return problems


def check_journal_readable(path: str | Path) -> tuple[list[str], int]:
    """A journal that could not be written to its end must still read back, up to its last
    complete line, through ``bridge.transcript``'s reader (a cut-off last line is dropped).
    Returns (problems, entries read)."""
    count = 0
    with open(path, "rb") as f:
        if b"\n" not in f.read(1 << 20):
            return [], 0  # not even the header is complete: the one cut line is the last line
    try:
        stream, reader = open_transcript(str(path))
    except TranscriptError as e:
        return [f"the failed journal does not read back: {e}"], 0
    try:
        with stream:
            for _ in reader:
                count += 1
    except TranscriptError as e:
        return [f"the failed journal does not read back past entry {count}: {e}"], count
    return [], count


def receipts_disagree(journaled: list[dict[str, Any]], live: dict[str, Any], what: str) -> list[str]:
    """Each journaled receipt whose state or reason differs from the controller's receipt."""
    return [
        f"{what} {r.get('request')}: {r.get('state')}/{r.get('reason')} != live {got.state}/{got.reason}"
        for r in journaled
        if (got := live.get(r.get("request"))) is not None
        and (r.get("state"), r.get("reason")) != (got.state, got.reason)
    ]


def check_failed_journal(path: str | Path, live_receipts: dict[str, Any]) -> list[str]:
    """A journal that failed: readable up to its last complete line, and what it holds agrees
    with the live bridge (each receipt it recorded once, as reported live)."""
    problems, _ = check_journal_readable(path)
    live = {k: (Receipt.from_json(v) if isinstance(v, dict) else v) for k, v in live_receipts.items()}
    journaled = [e["receipt"] for e in read_journal(path) if isinstance(e.get("receipt"), dict)]
    counts = Counter(r.get("request") for r in journaled)
    for rid, n in counts.items():
        if n > 1:
            problems.append(f"the failed journal records {rid}'s receipt {n} times")
        if rid not in live:
            problems.append(f"the failed journal records a receipt for {rid!r}, which the controller never got")
    problems += receipts_disagree(journaled, live, "the failed journal's receipt")
    return problems


# -- a journal that cannot be written ------------------------------------------------------------


class FailingFile:
    """A journal file on a disk that fills up: the first write is the header (not counted);
    after ``limit`` more bytes a write stores what fits and raises ``OSError(ENOSPC)``, and so
    does every write and flush after it. Once full, the descriptor it reports is a read-only
    one, so the journal's last-ditch ``os.write`` of a ``journal-failed`` note fails too, as on
    a full disk (the real descriptor stays open for a fsync already in flight)."""

    def __init__(self, inner: Any, limit: int) -> None:
        self._inner = inner
        self._limit = limit
        self._used = 0
        self._first = True
        self.full = False
        self._dead: int | None = None

    def _enospc(self) -> OSError:
        return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    def write(self, data: bytes) -> int:
        if self.full:
            raise self._enospc()
        if self._first:
            self._first = False
            return int(self._inner.write(data))
        room = self._limit - self._used
        if len(data) <= room:
            self._used += len(data)
            return int(self._inner.write(data))
        if room > 0:
            self._inner.write(bytes(data[:room]))
        self._used = self._limit
        self._inner.flush()
        self.full = True
        self._dead = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
        raise self._enospc()

    def flush(self) -> None:
        if self.full:
            raise self._enospc()
        self._inner.flush()

    def fileno(self) -> int:
        return self._dead if self._dead is not None else int(self._inner.fileno())

    def close(self) -> None:
        if self._dead is not None:
            os.close(self._dead)
            self._dead = None
        self._inner.close()

    @property
    def closed(self) -> bool:
        return bool(self._inner.closed)


@contextlib.contextmanager
def failing_journal(limit: int) -> Iterator[list[FailingFile]]:
    """While open, every journal the bridge creates in this process is a :class:`FailingFile`
    that fills up after ``limit`` bytes past its header. Yields the files made."""
    made: list[FailingFile] = []
    real = bridge.live.journal.open_private

    def open_failing(path: Path) -> Any:
        f = FailingFile(real(path), limit)
        made.append(f)
        return f

    bridge.live.journal.open_private = open_failing  # type: ignore[assignment]
    try:
        yield made
    finally:
        bridge.live.journal.open_private = real  # type: ignore[assignment]


def fsize_limit(limit: int) -> Callable[[], None]:
    """A ``preexec_fn`` that caps every file the child writes at ``limit`` bytes
    (``RLIMIT_FSIZE``: past it a write fails with EFBIG; Python ignores SIGXFSZ)."""

    def preexec() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return preexec


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
        #: The ``cat`` that copies the bridge's stderr into its file, when one does.
        self.cat: trio.Process | None = None

    @classmethod
    async def start(
        cls, tmp_path: Path, engine_argv: list[str], *args: str, preexec_fn: Callable[[], None] | None = None
    ) -> ServeProc:
        stderr_path = tmp_path / "serve.stderr"
        with open(stderr_path, "wb") as err:
            if preexec_fn is None:
                proc = await trio.lowlevel.open_process(
                    [sys.executable, "-m", "bridge", "serve", *args, "--", *engine_argv],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=err,
                    cwd=str(ROOT),
                )
                return cls(proc, stderr_path)
            # a preexec_fn may limit what the bridge writes to files (RLIMIT_FSIZE): its stderr
            # goes through a pipe to a `cat` outside the limit, so it is kept whole
            r, w = os.pipe()
            try:
                cat = await trio.lowlevel.open_process(["cat"], stdin=r, stdout=err)  # ends at the bridge's exit
                proc = await trio.lowlevel.open_process(
                    [sys.executable, "-m", "bridge", "serve", *args, "--", *engine_argv],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=w,
                    cwd=str(ROOT),
                    preexec_fn=preexec_fn,
                )
            finally:
                os.close(r)
                os.close(w)
        sp = cls(proc, stderr_path)
        sp.cat = cat
        return sp

    async def stderr_done(self, timeout: float = 5.0) -> None:
        """Wait until everything the bridge wrote to stderr is in the file (and its ``cat``, if
        any, is reaped); call after the bridge has exited."""
        if self.cat is None:
            return
        with trio.move_on_after(timeout):
            await self.cat.wait()
        if self.cat.returncode is None:
            self.cat.kill()
            await self.cat.wait()

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
        await self.stderr_done()


# -- a controller that misbehaves through the Python API ----------------------------------------


def fast_config(**kw: Any) -> BridgeConfig:
    """Short timeouts and graces, so faults cost fractions of a second; a 64 KiB line limit."""
    base: dict[str, Any] = dict(
        queue_max=6,
        ack_timeout=1.0,
        settle_timeout=1.5,
        stop_grace=0.5,
        taint_grace=0.5,
        write_timeout=2.0,
        startup_timeout=2.0,
        restart_backoff=(0.0,),
        crash_limit=100_000,
        crash_window=60.0,
        close_grace=1.0,
        stdin_grace=0.5,
        term_grace=0.5,
        max_line=64 * 1024,
    )
    base.update(kw)
    return BridgeConfig(**base)


#: When the controller stops a prompt (``none`` most of the time).
STOP_PLANS = ["none"] * 10 + ["before-send", "during-ack", "mid-run", "mid-run", "after-settle", "twice"]


async def controller_action(
    bridge: Any, h: PromptHandle, plan: str, rng: random.Random, stops: dict[str, list[str | None]], problems: list[str]
) -> None:
    """Stop ``h`` as ``plan`` says; the stop ids returned go into ``stops[request]``."""
    rid = h.request
    got: list[str | None] = stops.setdefault(rid, [])
    if plan == "before-send":
        got.append(await bridge.stop(rid))
    elif plan == "during-ack":
        await trio.sleep(rng.uniform(0, 0.01))
        got.append(await bridge.stop(rid))
    elif plan == "mid-run":
        await trio.sleep(rng.uniform(0.01, 0.3))
        got.append(await bridge.stop(rid))
    elif plan == "after-settle":
        await h.receipt()
        s = await bridge.stop(rid)
        if s is not None:
            problems.append(f"{rid}: stop after the receipt returned {s!r}, not None")
    elif plan == "twice":
        await trio.sleep(rng.uniform(0, 0.2))
        s1 = await bridge.stop(rid)
        got.append(s1)  # at once: the controller may be cancelled before the second
        await trio.sleep(rng.uniform(0, 0.05))
        s2 = await bridge.stop(rid)
        got.append(s2)
        if s1 is not None and s2 is not None and s1 != s2:
            problems.append(f"{rid}: a second stop made a second abort ({s1!r}, {s2!r})")


async def collect_text(h: PromptHandle, out: dict[str, str]) -> None:
    """The streamed text of ``h`` into ``out[request]`` (ends at its receipt)."""
    pieces = []
    async for piece in h.text():
        pieces.append(piece)
    out[h.request] = "".join(pieces)


def check_stop_reason(
    rid: str, state: str | None, reason: str | None, stop: Any, stopped: bool, mine: list[Any], problems: list[str]
) -> None:
    """Who stopped a run is never guessed (SPEC §5). ``stopped``: the controller sent a stop for
    ``rid``; ``mine``: the stop ids its stops were answered with (None answers left out: a queued,
    settled or given-up prompt gets no stop of its own).

    - ``cancelled`` only after a controller stop;
    - ``failed``/``interrupted`` only for a prompt the controller stopped before its receipt,
      by the very stop its stop was answered with;
    - ``failed``/``timeout`` and ``failed``/``closing`` name a stop (the bridge's own). It may be
      the id the controller's stop was answered with: a stop of a prompt that is already being
      stopped is answered with the stop in flight, whoever sent it; whose it is, the journal's
      ``stop`` note says (:func:`check_journal_story`).
    """
    if reason == "cancelled" and not stopped:
        problems.append(f"{rid}: cancelled without a controller stop")
    if state != "failed" or reason not in ("interrupted", "timeout", "closing"):
        return
    if stop is None:
        problems.append(f"{rid}: failed/{reason} with no stop id")
    if reason == "interrupted":
        if not mine:
            problems.append(
                f"{rid}: interrupted, but the controller's stops got no stop id "
                f"({'stopped' if stopped else 'never stopped'}): the bridge's own stop reported as the controller's"
            )
        elif stop not in mine:
            problems.append(f"{rid}: interrupted by {stop!r}, but our stop returned {mine}")


def check_receipt(r: Receipt, rid: str, stops: list[str | None], problems: list[str]) -> None:
    """What any receipt must satisfy given the controller's stops (``stops``: their return values)."""
    if r.request != rid:
        problems.append(f"{rid}: receipt names {r.request!r}")
    check_stop_reason(rid, r.state, r.reason, r.stop, bool(stops), [s for s in stops if s is not None], problems)


def leaves(e: BaseException) -> list[str]:
    """The leaf exceptions of a (nested) exception group, as ``Type: message``."""
    if isinstance(e, BaseExceptionGroup):
        return [x for sub in e.exceptions for x in leaves(sub)]
    return [f"{type(e).__name__}: {e}"]
