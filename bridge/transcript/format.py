"""Transcript format v1 and v2: the journal, the fixtures and what replay reads (SPEC §6).

UTF-8 JSONL. Line 1 is the header::

    {"transcript": "pi-bridge", "version": 2, "clearing": [...], ...free metadata}

Every later line is one object with exactly one *kind* key, plus an optional
``"t"`` (seconds since start) and, on ``recv`` / ``recv_raw``, an optional
``"i"`` (the observation index; when present it must match the count):

=========  =================================================================
send       a command the bridge wrote to the engine
recv       one engine line that parsed as a JSON object
recv_raw   one engine line that did not (text; invalid UTF-8 replaced; when the text
           cannot tell the line's kind and length, a ``raw-line`` note before it does:
           :data:`bridge.core.framing.RAW_LINE_NOTE`)
release    the bridge released slot R
stderr     a line the engine wrote to stderr
exit       the engine exited: ``{"code": ..., "signal": ...}``
note       anything for people and tools (engine starts, seal checks, ...)
receipt    a receipt the bridge settled
signal     a signal the bridge raised
updates    (version 2) a run of ``message_update`` lines the bridge did not parse:
           ``{"updates": {"count": N, "elided": BYTES}, "i": FIRST, "t": T}`` --
           ``N`` observations, indices ``FIRST`` to ``FIRST + N - 1``, ``BYTES``
           the lines' bytes together (LFs not counted)
=========  =================================================================

Version 2 (seed ``001``'s rule: a change an old reader would misread is a version bump it
refuses politely) adds only ``updates``: a lean journal writes one entry per run of streamed
deltas instead of one ``recv`` per line (``{"recv": {"type": "message_update", "elided":
BYTES}}``, which version 1 journals hold and this reader still reads). A version 1 reader
refuses a version 2 file by its header ("newer than this pi-bridge reads"), never by
miscounting indices; a journal that cannot hold an ``updates`` entry (``--journal-full``) is
written as version 1. ``updates`` in a version 1 file is an unknown kind.

The reader is strict where misreading would be silent: a newer version, an
unknown kind, two kinds on one line or a mismatched ``i`` are errors naming the
file and line. It is lenient where a crash leaves its mark: a last line cut off
without its LF (the bridge died mid-write) is dropped, so a journal reads back
up to its last complete line. It streams: memory does not grow with the file.

Writing goes through :func:`dumps`: orjson, which escapes every control
character, so nothing inside a string can start a new journal line.
"""

from __future__ import annotations

import json
import re
from typing import Any, Final

import attrs
import orjson

from bridge.core.framing import js_int

#: The newest version this code reads and writes.
VERSION: Final = 2
MAGIC: Final = "pi-bridge"
#: Version 1's kinds.
KINDS_V1: Final = frozenset({"send", "recv", "recv_raw", "release", "stderr", "exit", "note", "receipt", "signal"})
#: Every kind (version 2 adds ``updates``).
KINDS: Final = KINDS_V1 | {"updates"}
#: The kinds each version may hold.
KINDS_BY_VERSION: Final = {1: KINDS_V1, 2: KINDS}
#: Keys an entry may carry beside its kind.
EXTRA_KEYS: Final = frozenset({"t", "i"})


class TranscriptError(Exception):
    """The file is not a transcript this reader can read. The message names the line."""

    def __init__(self, path: str, line: int, message: str) -> None:
        # Line 0: the file as a whole (it cannot be opened), no line to name.
        shown = shown_path(path)
        super().__init__(f"{shown}:{line}: {message}" if line else f"{shown}: {message}")
        self.path = path
        self.line = line


@attrs.frozen
class Header:
    version: int
    clearing: tuple[str, ...] = ()
    meta: dict[str, Any] = attrs.field(factory=dict)

    @property
    def dialogs(self) -> bool:
        """The engine ran extensions the user allowed (``"dialogs": true``): their UI
        requests were the controller's, not seal diagnostics."""
        return self.meta.get("dialogs") is True


@attrs.frozen
class Entry:
    kind: str
    value: Any
    t: float | None = None
    i: int | None = None
    line: int = 0


def dumps(obj: Any) -> bytes:
    """One JSON line's bytes (no LF). Lone surrogates fall back to ``\\u`` escapes."""
    try:
        return orjson.dumps(obj)
    except TypeError:
        pass
    try:
        # A dict keyed by the vocabulary's words (a StrEnum is a str subclass, which orjson
        # takes as a value but not, by default, as a key): the same bytes as bare words.
        return orjson.dumps(obj, option=orjson.OPT_NON_STR_KEYS)
    except TypeError:
        # orjson refuses str with lone surrogates (which JSON.parse accepts and
        # the framing's fallback parser keeps), and values nested past 254 levels;
        # json writes the first as escapes, and the second up to the interpreter's
        # recursion limit.
        pass
    try:
        return json.dumps(obj, ensure_ascii=True, separators=(",", ":")).encode()
    except RecursionError:
        # An engine's line may nest 1,024 deep (orjson reads that far), and a
        # journal's entry or a controller's event holds it a level or two deeper.
        return _dumps_nested(obj)


_SCALAR: Final = json.JSONEncoder(ensure_ascii=True, separators=(",", ":"))
_END: Final = object()


def _dumps_nested(obj: Any) -> bytes:
    """:func:`json.dumps` without recursion (the same bytes): a stack of the open containers'
    iterators stands for the call stack, so no depth is too deep."""
    parts: list[str] = []
    # Each open container: its items, its closing bracket, whether it is an object, and
    # whether an item has been written yet.
    stack: list[list[Any]] = []
    value = obj
    while True:
        if isinstance(value, dict):
            parts.append("{")
            stack.append([iter(value.items()), "}", True, False])
        elif isinstance(value, (list, tuple)):
            parts.append("[")
            stack.append([iter(value), "]", False, False])
        else:
            parts.append(_SCALAR.encode(value))
        while stack:
            frame = stack[-1]
            item: Any = next(frame[0], _END)
            if item is _END:
                parts.append(frame[1])
                stack.pop()
                continue
            if frame[3]:
                parts.append(",")
            frame[3] = True
            if frame[2]:
                key, value = item
                if not isinstance(key, str):
                    raise TypeError(f"keys must be str, not {type(key).__name__}")
                parts.append(_SCALAR.encode(key))
                parts.append(":")
            else:
                value = item
            break
        else:
            return "".join(parts).encode()


#: The end of a ``recv`` entry as the live journal writes it, after the engine's line: its
#: index and its time (``bridge/live/journal.py``, ``Journal.recv``).
_RECV_TAIL: Final = re.compile(
    rb',"i":(0|[1-9][0-9]*),"t":(-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?)\}\s*\Z'
)


_decoder: Final = json.JSONDecoder(parse_int=js_int)


def loads(data: bytes) -> Any:
    """One entry's JSON value. What orjson refuses (a lone surrogate escape, nesting past its
    1,024 levels) the standard library reads; a ``ValueError`` says it is not JSON.

    The live bridge reads an engine line nested 1,024 deep (orjson's limit), and its ``recv``
    entry holds the line one level deeper, past both parsers; SPEC §6 wants the journal a
    live bridge writes to be a valid transcript, so a ``recv`` entry in the writer's shape has
    its line read on its own (``{"recv":LINE,"i":N,"t":T}`` is JSON exactly when LINE is)."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        pass
    if data.startswith(b'{"recv":'):
        tail = _RECV_TAIL.search(data)
        if tail is not None:
            try:
                line = orjson.loads(data[8 : tail.start()])
            except orjson.JSONDecodeError:
                pass
            else:
                return {"recv": line, "i": int(tail[1]), "t": float(tail[2])}
    try:
        return _decoder.decode(data.decode("utf-8"))
    except RecursionError:
        raise ValueError("nested too deep to read") from None


def shown(value: Any) -> str:
    """A value from a file, as JSON (how the user wrote it), cut short: never a Python repr."""
    try:
        text = json.dumps(value, ensure_ascii=False, default=str)
    except RecursionError:
        return "(a value nested too deep to show)"
    return text if len(text) <= 80 else text[:79] + "…"


def shown_path(path: str) -> str:
    """A file's name for a one-line message: as given, unless it holds a line break or another
    character that is not printable; then quoted as JSON (a newline as ``\\n``), so the message
    stays one line."""
    if path.isprintable():
        return path
    return json.dumps(path, ensure_ascii=False).encode("utf-8", "backslashreplace").decode("utf-8")
