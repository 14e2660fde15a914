"""The live journal: a transcript v1 file written as the bridge works (SPEC §6).

Rules:

- Private: the file is created 0600 (``O_EXCL``: never appended to or followed
  through a symlink) in a directory created 0700; journals hold prompts.
- Complete: every send, every observation with its ``i`` and ``t``, releases,
  stderr lines, exits, signals, receipts, engine starts (``note``).
- Lean by default: the bulky payload of ``message_update`` and
  ``tool_execution_update`` is elided and the entry marked
  ``"elided": <bytes>`` (the tracker never reads those events, so a lean
  journal replays exactly like a full one); a run of ``message_update`` lines
  the session did not parse is one ``updates`` entry (transcript version 2:
  count, first index, bytes). ``full=True`` keeps every byte (version 1).
- Durable at each receipt: flushed to the OS before the controller is told
  (a crash of the bridge loses nothing it was told), then fsynced by a worker
  thread off the event loop (a crash of the machine right after may lose the
  last receipts, never corrupt a line). Between receipts writes are buffered.
- Closed last: once the bridge has closed it, nothing more is written (a
  prompt refused after close still gets its receipt, just not in the journal).
- Failing loudly, losing nothing else: a write, flush or fsync that fails (a
  full disk, an I/O error, a file size limit) closes the journal, tries one last
  ``journal-failed`` note straight to the file, and reports the failure once
  (``on_failure``); the bridge then tells the controller and closes, and every
  accepted prompt still gets its receipt on the controller's side.
- Safe: every entry is serialised by orjson (control characters escaped), or
  is a line the engine wrote that parsed as one JSON object, embedded as is
  (it contains no LF). Nothing the engine prints can start a journal line.

Default location: ``$PI_BRIDGE_JOURNAL_DIR``, else
``$XDG_STATE_HOME/pi-bridge/journals``, else ``~/.local/state/pi-bridge/journals``;
one file per bridge session, named for its start time, pid and this process's count of
journals (``YYYYmmdd-HHMMSS-PID-N.jsonl``: :func:`default_journal_path`), so any number of
bridges a process opens in one second get a file each; a name another process took already
is passed over for the next (:data:`FRESH_ATTEMPTS` of them at most). Opening one there
removes the old ones past the retention bounds (:mod:`bridge.live.retention`).
"""

from __future__ import annotations

import datetime
import itertools
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

from bridge.core.framing import AGENT_END, MESSAGE_UPDATE, RAW_LINE_NOTE, RawLine, raw_text, text_tells
from bridge.core.receipts import Receipt
from bridge.live.retention import Keep, hold, keep_from, sweep
from bridge.profiles.orphans import private_tree, state_folder
from bridge.transcript import VERSION, TranscriptWriter, dumps

#: Buffered bytes between flushes (each receipt flushes and fsyncs anyway).
JOURNAL_BUFFER = 1 << 20

#: The lean form of one ``message_update`` (its byte count), for a line the session parsed.
LEAN_UPDATE = MESSAGE_UPDATE + b'"elided":%d}'
#: A run of them the session did not parse: one transcript version 2 ``updates`` entry.
UPDATES_ENTRY = b'{"updates":{"count":%d,"elided":%d},"i":%d,"t":%s}\n'

_ELIDED_TYPES = (MESSAGE_UPDATE, b'{"type":"tool_execution_update",', AGENT_END)


class JournalError(Exception):
    """The journal cannot be created where asked; the message names the file and the problem."""


def default_journal_dir() -> Path:
    return state_folder("PI_BRIDGE_JOURNAL_DIR", "journals")


#: This process's journals named so far (:func:`default_journal_path`): each name its own.
_named = itertools.count(1)
_naming = threading.Lock()

#: How many default names a journal tries, each taken already (by another process: one with
#: our pid in another pid namespace, or before a reboot), before it gives up.
FRESH_ATTEMPTS = 100


def default_journal_path() -> Path:
    """A new name in the default folder, another at each call: ``YYYYmmdd-HHMMSS-PID-N.jsonl``,
    the time to the second (local), the pid and this process's count of names (from 1)."""
    with _naming:
        n = next(_named)
        stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    return default_journal_dir() / f"{stamp}-{os.getpid()}-{n}.jsonl"


class _Taken(JournalError):
    """The path exists already (a file, a folder, a symbolic link)."""


def open_private(path: Path) -> BinaryIO:
    """Create ``path`` 0600 (refusing an existing file) in a 0700 directory.
    Raises :class:`JournalError` (one line: the file and the problem)."""
    try:
        return _open_private(path)
    except FileExistsError:
        if path.is_dir():
            what = "is a folder (give a file's path in it"
        elif path.is_symlink():
            what = "is a symbolic link (a journal is never written through one: give a new path"
        else:
            what = "already exists (journals are never appended to: give a new path"
        raise _Taken(f"the journal {path} {what}, or the default location for a fresh one)") from None
    except OSError as e:
        raise JournalError(f"cannot create the journal {path}: {e.strerror or e}") from None


def open_fresh() -> tuple[Path, BinaryIO]:
    """Create a new journal in the default folder (:func:`open_private`), passing over the names
    other processes took already (at most :data:`FRESH_ATTEMPTS`). Returns its path and file."""
    folder = default_journal_dir()
    for _ in range(FRESH_ATTEMPTS):
        path = default_journal_path()
        try:
            return path, open_private(path)
        except _Taken:
            continue
    raise JournalError(
        f"cannot create a journal in {folder}: {FRESH_ATTEMPTS} new names in a row were taken already "
        "(give the journal a path)"
    )


def private_dir(folder: Path) -> None:
    """Create a journal folder 0700 when it does not exist, and every parent it needs 0700 too (an
    existing one is left as it is: a folder the user chose)."""
    if not folder.exists():
        private_tree(folder)


def _open_private(path: Path) -> BinaryIO:
    private_dir(path.parent)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    return os.fdopen(fd, "wb", buffering=JOURNAL_BUFFER)


class Journal:
    """A journal at ``path``, refused if it exists; ``path=None``: a new file in the default
    location (:func:`open_fresh`), its name in :attr:`path`."""

    def __init__(
        self, path: Path | None, *, clearing: tuple[str, ...], full: bool = False, keep: Keep | None = None, **meta: Any
    ) -> None:
        fresh = path is None
        if path is None:
            path, self._stream = open_fresh()
        else:
            self._stream = open_private(path)
        self.path = path
        # Held until the file is closed: retention passes over a journal a bridge has open.
        hold(self._stream.fileno())
        if fresh:
            # A new journal in the default folder: the old ones past ``keep`` go (retention.py).
            sweep(path.parent, keep or keep_from(), spare=path)
        self.full = full
        # The last entry time written and its text: a read's lines share one clock read.
        self._t: float | None = None
        self._t_text = b""
        try:
            # A full journal never holds an ``updates`` entry: it stays version 1, which
            # older readers read too.
            version = 1 if full else VERSION
            self._writer = TranscriptWriter(self._stream, clearing=clearing, version=version, **meta)
            # The header is on disk before any prompt is written: a bridge killed
            # (SIGKILL) before its first receipt leaves a readable journal, not 0 bytes.
            self._stream.flush()
            os.fsync(self._stream.fileno())
        except OSError as e:
            try:
                self._stream.close()
            except OSError:
                pass
            # Ours (O_EXCL) and holding no prompt: left behind, it would make the same command
            # fail again with "already exists" once the disk has room.
            try:
                path.unlink()
            except OSError:
                pass
            raise JournalError(f"cannot write the journal {path}: {e.strerror or e}") from None
        self.closed = False
        #: Why the journal could not be written, once it could not.
        self.failed: str | None = None
        #: Called once with :attr:`failed` when a write fails.
        self.on_failure: Callable[[str], None] | None = None

    def fail(self, error: BaseException) -> None:
        """A write, flush or fsync failed: stop writing, say so once."""
        if self.failed is not None:
            return
        why = error.strerror if isinstance(error, OSError) and error.strerror else str(error)
        self.failed = f"the journal {self.path} could not be written: {why}"
        self.closed = True
        try:
            os.write(self._stream.fileno(), b"\n" + dumps({"note": {"event": "journal-failed", "error": why}}) + b"\n")
        except (OSError, ValueError):
            pass
        try:
            self._stream.close()
        except (OSError, ValueError):
            pass
        if self.on_failure is not None:
            self.on_failure(self.failed)

    # -- entries -------------------------------------------------------------------

    def _write(self, kind: str, value: Any, t: float, i: int | None = None) -> None:
        if not self.closed:
            try:
                self._writer.write(kind, value, t=t, i=i)
            except OSError as e:
                self.fail(e)

    def send(self, cmd: dict[str, Any], t: float) -> None:
        """A command, written and flushed to the OS before it goes to the engine: a bridge
        killed while the engine works leaves a journal that says what was sent, and every line
        before it (a write per command; the stream's lines wait for the next receipt)."""
        self._write("send", cmd, t)
        if not self.closed:
            try:
                self._writer.flush()
            except OSError as e:
                self.fail(e)

    def recv(self, idx: int, line: bytes, parsed: dict[str, Any] | None, t: float) -> None:
        """A line that is (or, for a skipped ``message_update``, starts like) a JSON object."""
        if self.closed:
            return
        tail = b',"i":%d,"t":%s}\n' % (idx, self._time(t))
        if not self.full and line.startswith(_ELIDED_TYPES):
            line = _elided(line, parsed)
        elif parsed is None:
            # Unparsed lines are only ever elided message_updates; in full mode
            # the session parses everything.
            raise AssertionError("an unparsed line reached a full journal")
        try:
            self._stream.write(b'{"recv":' + line + tail)
        except OSError as e:
            self.fail(e)

    def recv_elided_updates(self, count: int, nbytes: int, first: int, t: float) -> None:
        """A run of ``count`` ``message_update`` lines (``nbytes`` together), indices ``first``
        on: one version 2 ``updates`` entry, whatever the run's length."""
        if self.closed:
            return
        entry = UPDATES_ENTRY % (count, nbytes, first, self._time(t))
        try:
            self._stream.write(entry)
        except OSError as e:
            self.fail(e)

    def _time(self, t: float) -> bytes:
        """An entry's ``t`` as written (to the microsecond), made once for a read's lines."""
        if t != self._t:
            self._t = t
            self._t_text = repr(round(t, 6)).encode()
        return self._t_text

    def recv_raw(self, idx: int, raw: RawLine, t: float) -> None:
        """The line as text; before it, when the text cannot tell its kind and length (invalid
        UTF-8 replaced, JSON that is not an object), a ``raw-line`` note with them, for replay."""
        if not text_tells(raw):
            self._write("note", {"event": RAW_LINE_NOTE, "why": raw.why, "bytes": raw.length}, t)
        self._write("recv_raw", raw_text(raw), t, idx)

    def release(self, request: Any, t: float) -> None:
        self._write("release", request, t)

    def stderr(self, text: str, t: float) -> None:
        self._write("stderr", text, t)

    def exit(self, code: int | None, sig: int | None, t: float) -> None:
        self._write("exit", {"code": code, "signal": sig}, t)

    def note(self, value: Any, t: float) -> None:
        self._write("note", value, t)

    def signal(self, value: dict[str, Any], t: float) -> None:
        self._write("signal", value, t)

    def receipt(self, receipt: Receipt, t: float) -> None:
        """A receipt: written and flushed to the OS at once (a crash of the bridge
        loses nothing from here). The fsync that makes it survive a crash of the
        machine is the caller's: the live bridge runs it in a worker thread."""
        if not self.closed:
            try:
                self._writer.write("receipt", receipt.to_json(), t=t)
                self._writer.flush()
            except OSError as e:
                self.fail(e)

    # -- durability ------------------------------------------------------------------

    def carriers(self) -> dict[type, Callable[[Any], None]]:
        """The carrier of each of the supervision's journal actions (``Record*``: one entry
        each), for the bridge's drive loop (:meth:`Bridge._carrying
        <bridge.live.supervisor.Bridge._carrying>`, which makes a receipt durable besides)."""
        from bridge.core.supervision import (  # (the whole core: not for a journal opened alone)
            RecordExit,
            RecordNote,
            RecordRaw,
            RecordReceipt,
            RecordRecv,
            RecordRelease,
            RecordSend,
            RecordSignal,
            RecordStderr,
            RecordUpdates,
        )

        return {
            RecordSend: lambda a: self.send(a.cmd, a.t),
            RecordRecv: lambda a: self.recv(a.idx, a.line, a.parsed, a.t),
            RecordRaw: lambda a: self.recv_raw(a.idx, a.raw, a.t),
            RecordUpdates: lambda a: self.recv_elided_updates(a.count, a.nbytes, a.first, a.t),
            RecordRelease: lambda a: self.release(a.request, a.t),
            RecordStderr: lambda a: self.stderr(a.text, a.t),
            RecordExit: lambda a: self.exit(a.code, a.signal, a.t),
            RecordNote: lambda a: self.note(a.payload, a.t),
            RecordSignal: lambda a: self.signal(a.payload, a.t),
            RecordReceipt: lambda a: self.receipt(a.receipt, a.t),
        }

    def fileno(self) -> int:
        return self._stream.fileno()

    def close(self) -> None:
        if not self.closed:
            try:
                self._writer.flush()
                os.fsync(self._stream.fileno())
                self._writer.close()
            except OSError as e:
                self.fail(e)
            self.closed = True


def _elided(line: bytes, parsed: dict[str, Any] | None) -> bytes:
    """The lean form of a bulky line: its type and ids (an update) or its top-level scalars
    (``agent_end``: ``willRetry``; its message list is the run's ``message_end`` lines again,
    each journaled whole), and how many bytes were dropped."""
    if line.startswith(MESSAGE_UPDATE):
        return LEAN_UPDATE % len(line)
    if line.startswith(AGENT_END):
        if parsed is None or parsed.get("type") != "agent_end":
            return line  # (a second type key made it another event: kept as it is)
        lean = {key: value for key, value in parsed.items() if not isinstance(value, (dict, list))}
        lean["elided"] = len(line)
        return dumps(lean)
    keep: dict[str, Any] = {"type": "tool_execution_update"}
    if parsed is not None:
        for key in ("toolCallId", "toolName"):
            if key in parsed:
                keep[key] = parsed[key]
    keep["elided"] = len(line)
    return dumps(keep)
