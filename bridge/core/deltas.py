"""A run of ``message_update`` lines read for what an event needs of each line, nothing more.

While the held prompt reads its ``message_update`` lines (its text streamed, its events:
:meth:`bridge.core.session.Session._stream_run`), a line is worth three strings: its ``type``,
and its ``assistantMessageEvent``'s ``type`` and ``delta`` (:func:`bridge.core.progress.delta_of`
reads no more; ``contentIndex``, ``usage`` and a partial message are read by nobody here). Pi
1.6 writes ~300 B a line, ~220 of them the ``usage`` object, and building every line with
orjson was most of what events cost (issue 35: 0.47x an orjson loop's obs/s). So
:func:`read_run` decodes each line with msgspec into :class:`Update`, a ``Struct`` that
declares only those fields: every other member is skipped, not built.

Exact all the same (SPEC §3: a line that is not valid UTF-8 or not one JSON object opens a
gap, and the framing accepts what ``JSON.parse`` accepts):

- **Grammar**: msgspec checks all of RFC 8259 in what it skips too (its ``json_skip``: the
  literals, numbers with their leading-zero and digit rules, strings with their escapes and no
  raw control character, commas and colons, no trailing content); what it accepts
  ``JSON.parse`` accepts. It refuses some of what JavaScript reads (a lone surrogate escape,
  ``1e999`` where a field is read, nesting deeper than the interpreter's recursion limit).
- **UTF-8**: msgspec validates the strings it decodes, not those it skips, so each line that is
  not ASCII is decoded once more (:func:`_utf8`); an ASCII line (Pi's ``usage``, English text)
  is valid as it is.
- **Keys**: like orjson and ``JSON.parse``, msgspec keeps the last of a key given twice and
  reads escaped keys as their text; a line whose last ``type`` is not ``message_update`` is
  refused (``Literal``).

Whatever it refuses takes the exact path the bridge had before, and so gives what it gave:
each line built by orjson (:func:`_built`), and where that fails, None: the session observes
the run line by line (:func:`~bridge.core.framing.parse_line` decides each exactly). That the
two paths agree is tested on generated and recorded lines (tests/test_deltas.py).

A long line read on its own (the session's line-by-line path, from
:data:`~bridge.core.framing.LEAN_MIN` bytes: a line too long to join a run) is read the same way
by :func:`lean_update`, its event's two strings kept as their JSON text until they are known to be
strings, so a line of millions of small objects builds none of them (issue 42); the exact path
(:func:`_built`) never takes such a line whole.

What comes of a run is its deltas, joined as a read's are (:func:`run_deltas`). A run of one
kind of non-empty text deltas (nearly every read of a Pi 1.6 flood) is joined with C-level maps,
no Python per line. Pure: no I/O.
"""

from __future__ import annotations

import collections
import itertools
import operator
from codecs import getincrementaldecoder  # a decoder in memory, no I/O
from collections.abc import Sequence
from typing import Any, Final, Literal

import msgspec
import orjson

from bridge.core.events import Event, TextDelta
from bridge.core.framing import LEAN_MIN, UpdateRun
from bridge.core.progress import TextEvent, ThinkingEvent
from bridge.core.words import RequestId


class Delta(msgspec.Struct, gc=False):
    """An ``assistantMessageEvent`` as a delta needs it (``gc=False``: decoded JSON holds no
    cycle, so the garbage collector need not track a line's objects)."""

    type: Any = None
    delta: Any = None


class Update(msgspec.Struct, gc=False):
    """A ``message_update`` line as an event needs it: every other member is skipped. Its
    ``type`` must be that (a second ``type`` key that is not: msgspec refuses the line)."""

    type: Literal["message_update"]
    assistantMessageEvent: Delta | None = None  # (Pi's key)


_decode: Final = msgspec.json.Decoder(Update).decode
_type: Final = operator.attrgetter("type")
_delta_of: Final = operator.attrgetter("assistantMessageEvent")
_piece: Final = operator.attrgetter("delta")

#: A run's deltas: each line's kind and its piece (None, None: a line with no delta object).
Read = tuple[list[Any], list[Any]]


def read_run(run: UpdateRun | Sequence[bytes]) -> Read | None:
    """Each line's ``assistantMessageEvent`` ``type`` and ``delta`` (as ``JSON.parse`` gives
    them; a line whose event is no object gives None for both) when every line of ``run`` (a
    splitter's :class:`~bridge.core.framing.UpdateRun`, or lines) is a JSON object whose
    ``type`` is ``message_update``; None: the caller takes the run line by line. Decoded for
    only that when it can be, else built (the module's comment)."""
    if type(run) is UpdateRun:
        lines: Sequence[bytes] = run.cut if run.cut is not None else list(run)
    else:
        lines = run
    return _lean(lines) or _built(lines)


def _lean(lines: Sequence[bytes]) -> Read | None:
    """The lines' deltas, each line decoded as an :class:`Update`, when all are UTF-8."""
    if not lines or not _utf8(lines):
        return None
    try:
        updates = list(map(_decode, lines))
    except (msgspec.DecodeError, RecursionError):  # (a ValidationError is a DecodeError)
        return None
    deltas = list(map(_delta_of, updates))
    if None in deltas:  # (a Struct is never equal to None)
        return [None if d is None else d.type for d in deltas], [None if d is None else d.delta for d in deltas]
    return list(map(_type, deltas)), list(map(_piece, deltas))


#: A line longer than this that is not ASCII is checked as UTF-8 a piece at a time, so that
#: checking it never holds more than a piece's text (a whole 60 MB line of non-ASCII text
#: decoded at once would be up to 240 MB of ``str``).
UTF8_PIECE: Final = 1 << 20


def _utf8(lines: Sequence[bytes]) -> bool:
    """Is every line valid UTF-8? An ASCII line (most of Pi's: its ``usage`` and, in English,
    its text) settles it without decoding; the others are decoded, in C-level maps."""
    wide = list(itertools.filterfalse(bytes.isascii, lines))
    try:
        if max(map(len, wide), default=0) <= UTF8_PIECE:
            collections.deque(map(bytes.decode, wide), maxlen=0)
            return True
        for line in wide:  # (a long line: a piece at a time)
            decode = getincrementaldecoder("utf-8")().decode
            for start in range(0, len(line), UTF8_PIECE):
                decode(line[start : start + UTF8_PIECE])
            decode(b"", True)
    except UnicodeDecodeError:
        return False
    return True


def _built(lines: Sequence[bytes]) -> Read | None:
    """The exact path: each line built by orjson (a line it refuses: None). Not for a run with
    a line longer than :data:`~bridge.core.framing.LEAN_MIN` (None): such a line is read on its
    own (:func:`lean_update`), never built whole."""
    if max(map(len, lines), default=0) > LEAN_MIN:
        return None
    try:
        values = list(map(orjson.loads, lines))
        if list(map(dict.get, values, itertools.repeat("type"))).count("message_update") != len(values):
            return None
    except (orjson.JSONDecodeError, TypeError):  # TypeError: a value that is not a dict
        return None
    kinds: list[Any] = []
    pieces: list[Any] = []
    for value in values:
        delta = value.get("assistantMessageEvent")
        if type(delta) is dict:
            kinds.append(delta.get("type"))
            pieces.append(delta.get("delta"))
        else:
            kinds.append(None)
            pieces.append(None)
    return kinds, pieces


class _RawDelta(msgspec.Struct, gc=False):
    """An ``assistantMessageEvent`` whose members are kept as their JSON text, never built."""

    type: msgspec.Raw = msgspec.Raw(b"null")
    delta: msgspec.Raw = msgspec.Raw(b"null")


class _RawUpdate(msgspec.Struct, gc=False):
    """A ``message_update`` line whose event is kept as its JSON text, the rest skipped."""

    type: Literal["message_update"]
    assistantMessageEvent: msgspec.Raw = msgspec.Raw(b"null")  # (Pi's key)


_decode_raw_update: Final = msgspec.json.Decoder(_RawUpdate).decode
_decode_raw_delta: Final = msgspec.json.Decoder(_RawDelta).decode
_decode_str: Final = msgspec.json.Decoder(str).decode


def _first(raw: msgspec.Raw) -> bytes:
    """A member's first byte (msgspec's ``Raw`` is the member's text alone), not copied whole."""
    with memoryview(raw) as view:
        return bytes(view[:1])


def lean_update(line: bytes) -> dict[str, Any] | None:
    """One ``message_update`` line as :func:`~bridge.core.progress.delta_of` reads it, built no
    further: ``{"type": "message_update", "assistantMessageEvent": {"type": KIND, "delta":
    PIECE}}`` (a member that is not a string stands as None: ``delta_of`` and the session read
    strings only; no event object: no ``assistantMessageEvent``). For a long line the held
    prompt streams (issue 42: a 60 MB line of ``{}`` objects built whole peaked the bridge at
    1.9 GB): every member is checked by msgspec's grammar and skipped, nothing but those two
    strings is built, so the line costs its own bytes and msgspec's fixed state. None: msgspec
    refuses the line (not UTF-8, not one object whose last ``type`` is ``message_update``, a
    lone surrogate escape where a string is read...): the caller decides it exactly
    (:func:`~bridge.core.framing.parse_line`)."""
    if not _utf8((line,)):
        return None
    try:
        update = _decode_raw_update(line)
        event = update.assistantMessageEvent
        if _first(event) != b"{":
            return {"type": "message_update"}
        delta = _decode_raw_delta(event)
        kind = _decode_str(delta.type) if _first(delta.type) == b'"' else None
        piece = _decode_str(delta.delta) if _first(delta.delta) == b'"' else None
    except (msgspec.DecodeError, RecursionError):
        return None
    return {"type": "message_update", "assistantMessageEvent": {"type": kind, "delta": piece}}


def run_deltas(read: Read, first: int, request: RequestId | None, events: bool, stream: bool) -> list[Event]:
    """What :meth:`~bridge.core.session.Session._update` makes of each of a run's lines (indices
    ``first`` on), as the live bridge hands a read's deltas on: consecutive text (or thinking)
    deltas as one event (``idx`` the first one's, ``lines`` their count,
    :func:`~bridge.core.progress.join_deltas`) when the prompt asked for its events, and its
    text deltas as one :class:`TextDelta` (last) when it streams its text. A line's delta is
    its piece when that is a non-empty string (:func:`~bridge.core.progress.delta_of`)."""
    kinds, pieces = read
    if pieces and kinds.count(kinds[0]) == len(kinds) and set(map(type, pieces)) == {str} and "" not in pieces:
        return _one_kind(kinds[0], "".join(pieces), len(pieces), first, request, events, stream)
    out: list[Event] = []
    text: list[str] = []
    kind_now: Any = None
    joined: list[str] = []
    start = first
    for idx, (kind, piece) in enumerate(zip(kinds, pieces), first):
        if type(piece) is not str or not piece:
            continue
        if kind == "text_delta":
            if stream:
                text.append(piece)
            if not events:
                continue
        elif kind != "thinking_delta" or not events:
            continue
        if kind != kind_now:
            if joined:
                out.append(_DELTA_EVENTS[kind_now](request, start, "".join(joined), len(joined)))
            kind_now, joined, start = kind, [], idx
        joined.append(piece)
    if joined:
        out.append(_DELTA_EVENTS[kind_now](request, start, "".join(joined), len(joined)))
    if text:
        out.append(TextDelta(request, "".join(text)))
    return out


def _one_kind(
    kind: Any, text: str, count: int, first: int, request: RequestId | None, events: bool, stream: bool
) -> list[Event]:
    """:func:`run_deltas` of ``count`` lines whose deltas are all of ``kind``, ``text`` joined."""
    out: list[Event] = []
    if kind == "text_delta":
        if events:
            out.append(TextEvent(request, first, text, count))
        if stream:
            out.append(TextDelta(request, text))
    elif kind == "thinking_delta" and events:
        out.append(ThinkingEvent(request, first, text, count))
    return out


#: The event a run's deltas of one kind join into (``_update``'s, joined as ``join_deltas`` does).
_DELTA_EVENTS: Final[dict[str, type[TextEvent] | type[ThinkingEvent]]] = {
    "text_delta": TextEvent,
    "thinking_delta": ThinkingEvent,
}
