"""The live journal: a transcript v1 file written as the bridge works (SPEC §6).

Rules:

- Private: the file is created 0600 (``O_EXCL``: never appended to or followed
  through a symlink) in a directory created 0700; journals hold prompts.
- Complete: every send, every observation with its ``i`` and ``t``, releases,
  stderr lines, exits, signals, receipts, engine starts (``note``).
- Lean by default: the bulky payload of ``message_update`` and
  ``tool_execution_update`` is elided and the entry marked
  ``"elided": <bytes>`` (the tracker never reads those events, so a lean
  journal replays exactly like a full one). ``full=True`` keeps every byte.
- Durable at each receipt: flushed to the OS before the controller is told
  (a crash of the bridge loses nothing it was told), then fsynced by a worker
  thread off the event loop (a crash of the machine right after may lose the
  last receipts, never corrupt a line). Between receipts writes are buffered.
- Closed last: once the bridge has closed it, nothing more is written (a
  prompt refused after close still gets its receipt, just not in the journal).
- Safe: every entry is serialised by orjson (control characters escaped), or
  is a line the engine wrote that parsed as one JSON object, embedded as is
  (it contains no LF). Nothing the engine prints can start a journal line.

Default location: ``$PI_BRIDGE_JOURNAL_DIR``, else
``$XDG_STATE_HOME/pi-bridge/journals``, else ``~/.local/state/pi-bridge/journals``;
one file per bridge session, named for its start time and pid.
"""

from __future__ import annotations

import datetime
import os
from pathlib import Path
from typing import Any

from bridge.framing import RawLine, raw_text
from bridge.receipts import Receipt
from bridge.transcript import TranscriptWriter, dumps

#: Buffered bytes between flushes (each receipt flushes and fsyncs anyway).
JOURNAL_BUFFER = 1 << 20

#: The lean form of a ``message_update`` (its byte count), in both write paths.
LEAN_UPDATE = b'{"type":"message_update","elided":%d}'

_ELIDED_TYPES = (b'{"type":"message_update",', b'{"type":"tool_execution_update",')


def default_journal_dir() -> Path:
    env = os.environ.get("PI_BRIDGE_JOURNAL_DIR")
    if env:
        return Path(env)
    state = os.environ.get("XDG_STATE_HOME")
    base = Path(state) if state else Path.home() / ".local" / "state"
    return base / "pi-bridge" / "journals"


def default_journal_path() -> Path:
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    return default_journal_dir() / f"{stamp}-{os.getpid()}.jsonl"


def open_private(path: Path) -> Any:
    """Create ``path`` 0600 (refusing an existing file) in a 0700 directory."""
    parent = path.parent
    if not parent.exists():
        parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(parent, 0o700)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    return os.fdopen(fd, "wb", buffering=JOURNAL_BUFFER)


class Journal:
    def __init__(self, path: Path, *, clearing: tuple[str, ...], full: bool = False, **meta: Any) -> None:
        self.path = path
        self.full = full
        self._stream = open_private(path)
        self._writer = TranscriptWriter(self._stream, clearing=clearing, **meta)
        self.closed = False

    # -- entries -------------------------------------------------------------------

    def send(self, cmd: dict[str, Any], t: float) -> None:
        if not self.closed:
            self._writer.write("send", cmd, t=t)

    def recv(self, idx: int, line: bytes, parsed: dict[str, Any] | None, t: float) -> None:
        """A line that is (or, for a skipped ``message_update``, starts like) a JSON object."""
        if self.closed:
            return
        tail = b',"i":%d,"t":%s}\n' % (idx, repr(round(t, 6)).encode())
        if not self.full and line.startswith(_ELIDED_TYPES):
            self._stream.write(b'{"recv":' + _elided(line, parsed) + tail)
            return
        if parsed is None:
            # Unparsed lines are only ever elided message_updates; in full mode
            # the session parses everything.
            raise AssertionError("an unparsed line reached a full journal")
        self._stream.write(b'{"recv":' + line + tail)

    def recv_elided_updates(self, lines: list[bytes], first: int, t: float) -> None:
        """A run of ``message_update`` lines, indices ``first`` on, in their lean form."""
        if self.closed:
            return
        template = b'{"recv":' + LEAN_UPDATE + b',"i":%d,"t":' + repr(round(t, 6)).encode() + b"}\n"
        self._stream.write(b"".join(map(template.__mod__, zip(map(len, lines), range(first, first + len(lines))))))

    def recv_raw(self, idx: int, raw: RawLine, t: float) -> None:
        if not self.closed:
            self._writer.write("recv_raw", raw_text(raw), t=t, i=idx)

    def release(self, request: Any, t: float) -> None:
        if not self.closed:
            self._writer.write("release", request, t=t)

    def stderr(self, text: str, t: float) -> None:
        if not self.closed:
            self._writer.write("stderr", text, t=t)

    def exit(self, code: int | None, sig: int | None, t: float) -> None:
        if not self.closed:
            self._writer.write("exit", {"code": code, "signal": sig}, t=t)

    def note(self, value: Any, t: float) -> None:
        if not self.closed:
            self._writer.write("note", value, t=t)

    def signal(self, value: dict[str, Any], t: float) -> None:
        if not self.closed:
            self._writer.write("signal", value, t=t)

    def receipt(self, receipt: Receipt, t: float) -> None:
        """A receipt: written and flushed to the OS at once (a crash of the bridge
        loses nothing from here). The fsync that makes it survive a crash of the
        machine is the caller's: the live bridge runs it in a worker thread."""
        if not self.closed:
            self._writer.write("receipt", receipt.to_json(), t=t)
            self._writer.flush()

    # -- durability ------------------------------------------------------------------

    def fileno(self) -> int:
        return self._stream.fileno()

    def sync(self) -> None:
        """Flush and fsync here and now."""
        if not self.closed:
            self._writer.sync()

    def close(self) -> None:
        if not self.closed:
            self._writer.sync()
            self._writer.close()
            self.closed = True


def _elided(line: bytes, parsed: dict[str, Any] | None) -> bytes:
    """The lean form of a bulky update: its type and ids, and how many bytes were dropped."""
    if line.startswith(b'{"type":"message_update",'):
        return LEAN_UPDATE % len(line)
    keep: dict[str, Any] = {"type": "tool_execution_update"}
    if parsed is not None:
        for key in ("toolCallId", "toolName"):
            if key in parsed:
                keep[key] = parsed[key]
    keep["elided"] = len(line)
    return dumps(keep)
