"""The live checks that ``tools/soak/soak`` and the live tests share (real subprocesses over real pipes).

- :func:`generations_argv`: one engine argv for a whole ``bridge serve`` session whose n-th
  engine process runs its own fake-engine scenario (a tiny ``sh`` shim picks the n-th scenario
  and execs ``tools/fake_engine.py``, :data:`FAKE`).
- :func:`zombie_children`: no zombie is left (/proc); :func:`proc_stat` / :func:`all_pids`, what
  the soak's and the tests' own /proc checks are built on.
- :func:`compare_journal`: a journal against what the live bridge reported (``Receipt`` objects
  from the Python API or the JSON receipts of ``bridge serve``): one receipt per prompt, each
  journaled once, nothing sent after its receipt, and ``replay(journal)`` giving the live
  receipts and overlap signals. :func:`read_journal` reads one (a cut-off last line dropped).
- :func:`failing_journal` / :class:`FailingFile`: a journal whose disk fills up after N bytes
  (ENOSPC), in-process; :func:`check_journal_readable` reads a failed journal back.
- :class:`ServeProc`: ``bridge serve`` as a subprocess, every read bounded.
- :func:`fast_config`, :data:`STOP_PLANS`, :func:`controller_action`, :func:`check_receipt`: a
  controller that misbehaves through the Python API (stops at random moments), with short
  timeouts; who stopped a run is never guessed (:func:`check_stop_reason`).
- :func:`leaves`: the leaf exceptions of an exception group, as text.

What only the soak uses stays in ``tools/soak/soaklib.py``; what only the tests use, in
``tests/helpers_live.py``.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import random
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import trio

import bridge.live.journal
from bridge.core.receipts import Receipt
from bridge.live.api import PromptHandle
from bridge.live.supervisor import BridgeConfig
from bridge.readers.replay import replay
from bridge.transcript import TranscriptError, open_transcript

#: The checkout (these checks run from one: they start its fake engine and its ``bridge``).
ROOT = Path(__file__).resolve().parents[2]
FAKE = ROOT / "tools" / "fake_engine.py"

#: The overlap signals the tracker raises (SPEC §4); everything else the bridge
#: signals (gap, unsealed, disposition, seal-diagnostic, engine-down) is its own.
TRACKER_SIGNALS = frozenset({"O1", "O2", "O3", "O4", "O5", "O6", "aborted-without-stop"})


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


# -- /proc -----------------------------------------------------------------------------


def proc_stat(pid: int) -> tuple[str, int, int, int] | None:
    """(state, ppid, pgrp, session) of ``pid``, or None when it does not exist."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read().decode("ascii", "replace")
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    rest = data[data.rfind(")") + 2 :].split()
    return rest[0], int(rest[1]), int(rest[2]), int(rest[3])


def all_pids() -> list[int]:
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def zombie_children(parent: int | None = None) -> list[int]:
    """Children of ``parent`` (default: this process) in state Z."""
    parent = os.getpid() if parent is None else parent
    out = []
    for pid in all_pids():
        st = proc_stat(pid)
        if st is not None and st[1] == parent and st[0] == "Z":
            out.append(pid)
    return out


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
    replayed: dict[Any, tuple[str, str | None]] = {r.request: (r.state, r.reason) for r in result.receipts}
    live: dict[Any, tuple[str, str | None]] = {k: (v.state, v.reason) for k, v in live_receipts.items()}
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


def receipts_disagree(journaled: list[dict[str, Any]], live: dict[Any, Any], what: str) -> list[str]:
    """Each journaled receipt whose state or reason differs from the controller's receipt."""
    return [
        f"{what} {r.get('request')}: {r.get('state')}/{r.get('reason')} != live {got.state}/{got.reason}"
        for r in journaled
        if (got := live.get(r.get("request"))) is not None
        and (r.get("state"), r.get("reason")) != (got.state, got.reason)
    ]


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

    bridge.live.journal.open_private = open_failing
    try:
        yield made
    finally:
        bridge.live.journal.open_private = real


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
        """Start ``bridge serve`` (its stderr into ``tmp_path/serve.stderr``); ends once the
        process is spawned, before it has read or written anything."""
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
        """Write one line (an object as JSON, or bytes as given) to the bridge's stdin; returns
        once it is in the pipe, raises ``trio.TooSlowError`` after 10 s."""
        data = obj if isinstance(obj, bytes) else json.dumps(obj).encode()
        if not data.endswith(b"\n"):
            data += b"\n"
        assert self.proc.stdin is not None
        with trio.fail_after(10):
            await self.proc.stdin.send_all(data)

    async def close_stdin(self) -> None:
        """Close the bridge's stdin (EOF for its controller loop); returns at once."""
        assert self.proc.stdin is not None
        await self.proc.stdin.aclose()

    async def _fill(self) -> None:
        """One read of the bridge's stdout into :attr:`lines`: ends when some bytes (or EOF) came."""
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
        """The next unread line (None at EOF); raises ``trio.TooSlowError`` after ``timeout``."""
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
        """Read until EOF; return the lines not read before (``trio.TooSlowError`` after ``timeout``)."""
        start = self._pos
        with trio.fail_after(timeout):
            while await self.next(timeout=timeout + 1) is not None:
                pass
        return self.lines[start:]

    async def wait(self, timeout: float = 15.0) -> int:
        """The bridge's exit status: ends when it exits, raises ``trio.TooSlowError`` after ``timeout``."""
        with trio.fail_after(timeout):
            return await self.proc.wait()

    def receipts(self) -> list[dict[str, Any]]:
        return [line for line in self.lines if line.get("type") == "receipt"]

    def engine_pids(self) -> list[int]:
        return [line["pid"] for line in self.lines if line.get("type") == "engine" and line.get("event") == "started"]

    async def kill(self) -> None:
        """SIGKILL the bridge if it still runs; ends when it is reaped (at most 5 s) and its
        stderr is in the file."""
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
    """Stop ``h`` as ``plan`` says; the stop ids returned go into ``stops[request]``. Ends when
    the plan's stops returned (``after-settle``: until ``h``'s receipt, then one stop)."""
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
      ``stop`` note says (the soak checks it: ``check_journal_story`` in ``tools/soak/soaklib.py``).
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
