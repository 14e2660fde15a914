"""A named conversation's files and lock (issue 31; the rules: :mod:`bridge.core.conversation`).

A conversation ``NAME`` lives in ``ROOT/NAME/`` (0700, and ``ROOT`` and every parent it needs made
0700, ``pi-bridge/`` tightened: :func:`~bridge.profiles.orphans.private_tree`; ``ROOT`` is
``$PI_BRIDGE_CONVERSATION_DIR``, else ``$XDG_STATE_HOME/pi-bridge/conversations``, else
``~/.local/state/pi-bridge/conversations``: next to the journals, never in the engine's working
folder, hidden from the confined engine as the journals are):

- ``session.jsonl`` (0600): the Pi session file, as far as the bridge vouches for it;
- ``conversation.json`` (0600): the :class:`~bridge.core.conversation.Record` (the cursor);
- ``lock``: held (``flock``, exclusive, not waiting) by the one bridge that has the
  conversation open. flock(2) locks live with the open file, so a bridge killed by SIGKILL lets
  go of it; a second live bridge on the name is refused, not interleaved.

Each engine gets a copy (:meth:`Conversation.place`) in its own private config folder, the only
place a confined Pi writes besides its working folder; the bridge copies it back
(:meth:`Conversation.vouch`) by write-to-temporary, fsync, rename, so a full disk or a crash
mid-copy leaves the last recorded copy whole. The engine's file is read as the receipt is
delivered (:meth:`EngineConversation.settled`); the writes are left to a worker thread
(:meth:`bridge.live.launches.Launches.settled`).
"""

from __future__ import annotations

import datetime
import fcntl
import os
import shutil
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import attrs
import orjson

from bridge import __version__
from bridge.core.conversation import (
    ConversationError,
    Record,
    entries_problems,
    history,
    name_problem,
    own_part,
    read_record,
    title_of,
    vouches,
    with_cwd,
)
from bridge.core.receipts import Receipt
from bridge.profiles.command import ProfileError
from bridge.profiles.orphans import private_tree, state_folder
from bridge.profiles.seal import STATE_ID

#: The session file's name inside an engine's config folder.
ENGINE_FILE = "sessions/conversation.jsonl"


def default_conversation_dir() -> Path:
    """Where named conversations live (the module's docstring says the order)."""
    return state_folder("PI_BRIDGE_CONVERSATION_DIR", "conversations")


def _default_layout(store: Path) -> bool:
    """The store is ``.../pi-bridge/conversations`` (its parent is the bridge's own folder)."""
    return store.name == "conversations" and store.parent.name == "pi-bridge"


def _private_dir(folder: Path) -> None:
    private_tree(folder)


def _write_atomic(path: Path, data: bytes) -> None:
    """``data`` at ``path`` whole or not at all (0600): a temporary, fsync, rename."""
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _lines(path: Path) -> list[bytes]:
    return path.read_bytes().split(b"\n")


@attrs.define(eq=False)
class Conversation:
    """One named conversation, open (locked) in this bridge. Make it with :meth:`open`."""

    name: str
    folder: Path
    record: Record
    _lock: int | None = None

    @property
    def session(self) -> Path:
        return self.folder / "session.jsonl"

    @property
    def record_path(self) -> Path:
        return self.folder / "conversation.json"

    @classmethod
    def open(cls, name: str, root: Path | None = None) -> Conversation:
        """Open (lock) ``name`` under ``root`` (default :func:`default_conversation_dir`), made
        if new. :class:`ProfileError` (one line): a bad name, one another bridge holds, a damaged
        or newer one."""
        problem = name_problem(name)
        if problem is not None:
            raise ProfileError(problem)
        store = root or default_conversation_dir()
        try:
            # The store and every parent it needs, 0700 (the parents were 0755); the store's own
            # ``pi-bridge/conversations`` tightened if looser (orphans.private_tree says why not more).
            private_tree(store, ours=2 if root is None and _default_layout(store) else 1)
        except OSError as e:
            raise ProfileError(f"conversation {name!r} cannot be opened in {store}: {e}") from None
        folder = store / name
        fd = _take_lock(folder, name)
        try:
            conv = cls(name, folder, _read(folder, name), fd)
        except BaseException:
            os.close(fd)
            raise
        return conv

    def close(self) -> None:
        """Let go of the lock (the files stay)."""
        if self._lock is not None:
            fd, self._lock = self._lock, None
            os.close(fd)

    def place(self, config_dir: Path, cwd: str) -> Path:
        """Copy the recorded session into an engine's ``config_dir`` (its working folder set to
        ``cwd``); the path Pi is given (``--session``). Nothing recorded yet: Pi makes it there."""
        target = config_dir / ENGINE_FILE
        _private_dir(target.parent)
        if self.session.exists():
            try:
                lines = with_cwd(_lines(self.session), cwd, self.name)
            except ConversationError as e:
                raise ProfileError(str(e)) from None
            _write_atomic(target, b"\n".join(lines) + b"\n")
        return target

    def vouch(self, engine_file: Path, engine_version: str | None, cwd: str | None = None) -> Record:
        """Take back the engine's session file up to the run's end (rule 2) and record it (``cwd``:
        the engine's working folder, if one was given). Raises OSError (a full disk: the last
        recorded copy stays whole) or ConversationError."""
        return self.record_lines(_lines(engine_file), engine_version, cwd)

    def record_lines(self, engine_lines: list[bytes], engine_version: str | None, cwd: str | None = None) -> Record:
        """:meth:`vouch` on the engine file's lines, read already (blocking: the writes, fsynced)."""
        lines, cursor = own_part(engine_lines, self.name)
        session_id = orjson.loads(lines[0]).get("id")
        fresh = session_id != self.record.session_id  # the first save, or a new conversation
        record = attrs.evolve(
            self.record,
            cursor=cursor,
            session_id=session_id,
            cwd=cwd or self.record.cwd,
            title=title_of(history(lines, self.name)) if fresh or not self.record.title else self.record.title,
            entries=len(lines) - 1,
            prompts=self.record.prompts + 1,
            bridge=__version__,
            engine_version=engine_version,
            saved=datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        )
        _write_atomic(self.session, b"\n".join(lines) + b"\n")
        _write_atomic(self.record_path, orjson.dumps(record.to_json(), option=orjson.OPT_INDENT_2))
        self.record = record
        return record


def _take_lock(folder: Path, name: str) -> int:
    """The conversation's lock, held (its folder made if new); ProfileError if another bridge has it."""
    try:
        _private_dir(folder)
        fd = os.open(folder / "lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    except OSError as e:
        raise ProfileError(f"conversation {name!r} cannot be opened in {folder.parent}: {e}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise ProfileError(f"conversation {name!r} is open in another bridge (one bridge at a time)") from None
    return fd


def _read(folder: Path, name: str) -> Record:
    """The record in ``folder`` (a new one if there is none), checked with its session file."""
    path = folder / "conversation.json"
    try:
        record = read_record(path.read_bytes(), name) if path.exists() else Record(name)
        session = folder / "session.jsonl"
        if session.exists():
            _, cursor = own_part(_lines(session), name)
            if cursor != record.cursor:
                raise ConversationError(
                    f"conversation {name!r} is damaged: its session file ends at entry {cursor!r}, "
                    f"its record at {record.cursor!r}"
                )
        elif record.cursor is not None:
            raise ConversationError(f"conversation {name!r} is damaged: its session file is missing")
    except ConversationError as e:
        raise ProfileError(str(e)) from None
    except OSError as e:
        raise ProfileError(f"conversation {name!r} cannot be read: {e}") from None
    return record


def read_conversation(name: str, root: Path | None = None) -> tuple[Record, list[bytes]]:
    """``name``'s record and its session file's lines, read without the lock (for ``show`` and
    ACP's ``session/load``, whose bridge then takes it). ProfileError: damaged, newer."""
    folder = (root or default_conversation_dir()) / name
    record = _read(folder, name)
    try:
        return record, _lines(folder / "session.jsonl") if record.cursor is not None else []
    except OSError as e:
        raise ProfileError(f"conversation {name!r} cannot be read: {e}") from None


def list_conversations(root: Path | None = None) -> list[Record | str]:
    """Every conversation under ``root``: its record, or a one-line problem for one that is not
    usable. Read without taking the lock (a record is replaced whole, never half-written)."""
    root = root or default_conversation_dir()
    out: list[Record | str] = []
    try:
        names = sorted(p.name for p in root.iterdir() if p.is_dir() and name_problem(p.name) is None)
    except OSError:
        return out
    for name in names:
        try:
            out.append(_read(root / name, name))
        except ProfileError as e:
            out.append(str(e))
    return out


def remove_conversation(name: str, root: Path | None = None) -> None:
    """Remove ``name`` (under its lock: refused while a bridge has it open)."""
    problem = name_problem(name)
    if problem is not None:
        raise ProfileError(problem)
    folder = (root or default_conversation_dir()) / name
    if not folder.is_dir():
        raise ProfileError(f"there is no conversation {name!r}")
    fd = _take_lock(folder, name)  # a damaged one can be removed too
    try:
        shutil.rmtree(folder)
    finally:
        os.close(fd)


#: The start-up command that reads the entries since the recorded cursor (rule 4).
ENTRIES_ID = "__startup_entries"


@attrs.define(eq=False)
class EngineConversation:
    """One engine's part in a conversation: what its launch adds (``--session``, a start-up
    command, a check) and the hook the bridge calls with each of its receipts."""

    conversation: Conversation
    file: Path
    engine_version: str | None
    #: The cursor this engine was given (its start-up check expects Pi to resume at it).
    cursor: str | None
    #: The engine's working folder when it was given (recorded), else None (a private one).
    cwd: str | None = None

    @classmethod
    def place(
        cls, conversation: Conversation, config_dir: Path, cwd: str, engine_version: str, *, given: bool = False
    ) -> EngineConversation:
        """Copy the conversation into an engine's config folder; ``given``: ``cwd`` is the user's."""
        file = conversation.place(config_dir, cwd)
        return cls(conversation, file, engine_version, conversation.record.cursor, cwd if given else None)

    @property
    def argv(self) -> list[str]:
        return ["--session", str(self.file)]

    @property
    def startup(self) -> dict[str, object]:
        return {"type": "get_entries", "id": ENTRIES_ID, **({"since": self.cursor} if self.cursor else {})}

    def problems(self, responses: Mapping[str, Mapping[str, Any]]) -> list[str]:
        """Rule 4 on the start-up answers (:func:`~bridge.profiles.seal.check_seal` reads the rest)."""
        state = (responses.get(STATE_ID) or {}).get("data")
        if not isinstance(state, Mapping):
            return []  # the seal check says why already
        answer = responses.get(ENTRIES_ID) or {}
        data = answer.get("data") if answer.get("success") else None
        return entries_problems(state, data if isinstance(data, Mapping) else None, str(self.file))

    def current_file(self) -> Path:
        """The session file Pi writes now: the one it was given, unless a new conversation
        (Pi's ``new_session``) made it switch to a new file, which Pi 1.6.0 makes beside it
        (``sessions/DATE_ID.jsonl``; seen here): the newest there."""
        try:
            files = [p for p in self.file.parent.glob("*.jsonl") if p.is_file()]
            return max(files, key=lambda p: p.stat().st_mtime_ns) if files else self.file
        except OSError:
            return self.file

    def settled(self, receipt: Receipt) -> Callable[[], dict[str, Any]] | None:
        """A receipt of this engine's: if the bridge vouches for it (rule 1), the engine's file is
        read now (as the run's ``agent_settled`` is read: rule 2), and what is returned records
        it -- blocking work (writes, fsyncs) for a worker thread, which returns the journal note.
        None: nothing to record."""
        if not vouches(receipt):
            return None
        try:
            lines: list[bytes] | OSError = _lines(self.current_file())
        except OSError as e:
            lines = e
        return lambda: self._record(receipt, lines)

    def _record(self, receipt: Receipt, lines: list[bytes] | OSError) -> dict[str, Any]:
        name = self.conversation.name
        try:
            if isinstance(lines, OSError):
                raise lines
            record = self.conversation.record_lines(lines, self.engine_version, self.cwd)
        except (OSError, ConversationError) as e:
            return {
                "event": "conversation-not-recorded",
                "conversation": name,
                "request": receipt.request,
                "why": f"conversation {name!r}: the session could not be recorded ({e}); the last recorded one stays",
            }
        return {
            "event": "conversation-recorded",
            "conversation": name,
            "request": receipt.request,
            "cursor": record.cursor,
            "entries": record.entries,
        }
