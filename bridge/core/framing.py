"""Strict JSONL framing: bytes from the engine in, one observation per line out.

The rules (SPEC §3):

- Records are split on LF (``\\n``) only; one trailing CR is stripped. U+2028,
  U+2029 and U+0085 are characters inside JSON strings, never separators, so
  nothing here uses ``str.splitlines()`` -- the split is on bytes.
- A final line without LF is still a line: :meth:`LineSplitter.close` flushes it.
- A line longer than the maximum (default 64 MiB, :data:`DEFAULT_MAX_LINE`) is
  reported as :class:`Oversize` without being held in memory: the splitter keeps
  a short head for the journal, counts the rest, and resynchronises at the next
  LF.
- Every line, good or bad, is one observation. :func:`parse_line` turns a line
  into a JSON object or a :class:`RawLine` (malformed JSON, invalid UTF-8, JSON
  that is not an object, oversize); it never raises.

Pi writes one ``JSON.stringify`` result per line, so the parser accepts exactly
what ``JSON.parse`` does: orjson first, and for the rare line orjson refuses but
JavaScript reads (a lone surrogate escape such as ``"\\ud83d"``, a number beyond
a double's range) the standard library's strict decoder, with ``NaN`` and
``Infinity`` refused as JavaScript refuses them.

Splitting is linear in the input: chunks without an LF are kept in a list and
joined once, so a 64 MiB line arriving in 64 KiB reads is not copied over and
over.

The fast path (SPEC §8 "Speed") lives here too, as pure functions over a batch of
lines: nearly every line Pi writes is a ``message_update`` (a streamed delta), an
event the tracker never reads. :func:`update_runs` finds the runs of such lines in
one read's batch with C-level maps (no per-line Python), and :class:`JsonCheck`
makes sure each of them is one well-formed JSON text (simdjson: UTF-8 and grammar, no
objects built); a line of such a run still takes its observation index
(:meth:`bridge.core.session.Session.observe_batch`), it is just not parsed. The
same classifier finds the journal's ``recv`` lines of ``message_update`` for
replay (:data:`JOURNAL_UPDATE`). Long lines (the older engines' whole partials) are not
even cut out of the read: :meth:`LineSplitter.feed_runs` hands a run of them on as one
:class:`UpdateRun`, the read and the lines' offsets in it, checked there in place.

The same holds for every line whose contents nothing reads (:data:`CONTENTS_READ` lists the
types read deeper than their top-level scalars: ``response``, ``message_update``,
``message_start``, ``message_end``, ``queue_update``, ``compaction_end`` (its usage counts
toward the budgets), ``extension_ui_request``, ``extension_error``; and the event lines,
:data:`bridge.core.progress.EVENT_LINES`, while the held prompt asked for its events): ``agent_start``, ``agent_end``, ``agent_settled``,
``turn_start``/``turn_end``, ``tool_execution_*``, ``auto_retry_*``, ``compaction_*`` and types
the bridge does not know are checked and stand as their top-level scalars
(:meth:`JsonCheck.top_scalars`), never built (from :data:`LEAN_MIN` bytes, below which orjson
builds faster than simdjson checks). At any size under the limit: a line simdjson's DOM
would cost too much for (:data:`WHOLE_MAX`) is checked in pieces (:func:`_pieces`), so a 60 MB
line of ``{}`` objects costs ~90 MB of peak RSS, not orjson's 1.8 GB.
"""

from __future__ import annotations

import collections
import itertools
import json
import operator
import re
from collections.abc import Iterator, Sequence
from io import BytesIO  # a buffer in memory, no I/O: its readlines finds LFs with memchr
from typing import Any, Final, Literal, get_args, overload

import attrs
import orjson
import simdjson

#: Lines longer than this are reported as oversize. Pi's ``tool_execution_update``
#: carries a tool's accumulated output and ``agent_end`` the run's whole message
#: list, so lines of several MiB are normal; 64 MiB leaves room for those while
#: still bounding what one line can make us hold.
DEFAULT_MAX_LINE = 64 * 1024 * 1024


def prompt_room(max_line: int) -> int:
    """The most bytes a prompt may take (its text JSON-escaped, with its images' data) under a
    line limit of ``max_line``: half of it. Pi writes a prompt back on lines of its own: the user
    message's ``message_start`` and ``message_end`` (the prompt and ~200 bytes) and the run's
    ``agent_end`` (the prompt with the reply and every tool call and result of the run). A
    prompt near the limit was accepted and written, and its own echo came back oversize: a gap,
    ``outcome-unknown`` (issue 42). Half the line leaves the other half for the rest of
    ``agent_end``; a run whose messages fill that too still ends in a gap, as any oversize line
    does."""
    return max_line // 2


#: The control characters, which JSON escapes: ``\n``, ``\t``, ``\r``, ``\b`` and ``\f`` take two
#: bytes on the wire, the others six (``\u0001``).
_SHORT_ESCAPES: Final = "\b\f\n\r\t"
_LONG_ESCAPES: Final = "".join(chr(code) for code in range(32) if chr(code) not in _SHORT_ESCAPES)


def prompt_bytes(message: str, images: Sequence[Any] | None = None) -> int:
    """What a prompt's text (and its images' base64 data) takes on a line, JSON-escaped: the
    bytes :func:`prompt_room` bounds and the queue's byte bound counts. Reads the text without
    copying an ASCII one (the common case: ``isascii`` is a flag on CPython's ``str``)."""
    size = len(message) if message.isascii() else len(message.encode("utf-8", "surrogatepass"))
    size += message.count('"') + message.count("\\")
    if not message.isprintable():
        size += sum(map(message.count, _SHORT_ESCAPES)) + 5 * sum(map(message.count, _LONG_ESCAPES))
    for image in images or ():
        data = image.get("data") if isinstance(image, dict) else None
        size += len(data) if isinstance(data, str) else 0
    return size


#: How much of an oversize line is kept for the journal and for people.
OVERSIZE_HEAD = 1024

RawWhy = Literal["malformed", "invalid-utf8", "not-object", "oversize"]
RAW_WHYS: Final[frozenset[str]] = frozenset(get_args(RawWhy))


@attrs.frozen
class Oversize:
    """A line longer than the maximum; only its head was kept."""

    length: int
    head: bytes


@attrs.frozen
class RawLine:
    """One line that is not a JSON object: it opens a gap (SPEC §3)."""

    why: RawWhy
    text: str
    #: The line's length in bytes (for an oversize line, the whole length).
    length: int


_LF = itertools.repeat(b"\n")

#: From this length on a line is found with its own ``find`` and checked where it lies in the
#: read (:class:`UpdateRun`); shorter ones are cut out by ``readlines`` (C-level, per line
#: cheaper below ~4 KiB here). The older engines' whole partials are ~13 KB a line, Pi 1.6's
#: deltas ~330 B.
LONG_LINE: Final = 4096


class UpdateRun(Sequence[bytes]):
    """Consecutive candidate ``message_update`` lines of one read (:meth:`LineSplitter.feed_runs`:
    each starts with a prefix), handed on as one item, in one of two
    forms. Nothing more is copied unless a line is asked for (indexing, iterating), so a run
    the session takes in bulk costs no copy beyond its form's:

    - long lines (:data:`LONG_LINE` on) that also end with a suffix, left where they lie:
      ``data`` and each line's start and end offset (the older engines' whole partials: not
      even cut out);
    - a read's short lines, every one starting with the prefix (:data:`BULK_MIN_LINES` of them or more:
      Pi 1.6's deltas), cut out by ``readlines`` with their LF kept (``cut``, built by
      :meth:`of_cut`): no LF stripped, no batch joined to classify them.
    """

    __slots__ = ("cut", "data", "ends", "nbytes", "starts")

    def __init__(self, data: bytes, starts: list[int], ends: list[int]) -> None:
        self.data = data
        self.starts = starts
        self.ends = ends
        self.cut: list[bytes] | None = None
        #: The lines' bytes together (no separators).
        self.nbytes = sum(ends) - sum(starts)

    @classmethod
    def of_cut(cls, cut: list[bytes], nbytes: int) -> UpdateRun:
        """A run of lines each ending with its LF, ``nbytes`` together without them."""
        run = cls.__new__(cls)
        run.data, run.starts, run.ends = b"", [], []
        run.cut = cut
        run.nbytes = nbytes
        return run

    def __len__(self) -> int:
        return len(self.ends) if self.cut is None else len(self.cut)

    @overload
    def __getitem__(self, k: int) -> bytes: ...

    @overload
    def __getitem__(self, k: slice) -> list[bytes]: ...

    def __getitem__(self, k: int | slice) -> bytes | list[bytes]:
        if self.cut is not None:
            if isinstance(k, slice):
                return [line[:-1] for line in self.cut[k]]
            return self.cut[k][:-1]
        if isinstance(k, slice):
            return [self.data[a:b] for a, b in zip(self.starts[k], self.ends[k])]
        return self.data[self.starts[k] : self.ends[k]]

    def __iter__(self) -> Iterator[bytes]:
        if self.cut is not None:
            return map(bytes.removesuffix, self.cut, _LF)
        data = self.data
        return (data[a:b] for a, b in zip(self.starts, self.ends))

    def __repr__(self) -> str:
        return f"UpdateRun({len(self)} lines, {self.nbytes} bytes)"


def _all_start_with(lines: list[bytes], prefix: bytes) -> bool:
    """Does every line start with ``prefix``? Two C-level passes, one comparison a line: the
    lines that start with ``prefix`` are exactly those from ``prefix`` (included) up to
    ``prefix`` with its last byte one higher (excluded), in bytes order, so the least line and
    the greatest settle it. A comparison reads only up to the first byte where two lines
    differ (Pi 1.6's deltas: ~70 B in), where finding each ``LF + prefix`` in the read looked at
    every byte (~120 ns a line against ~85). The suffix is not looked at: a line that starts
    with the prefix and that :class:`JsonCheck` finds to be one JSON text is a
    ``message_update`` object whatever its last byte."""
    if min(lines) < prefix:
        return False
    head = prefix.rstrip(b"\xff")  # (a prefix of 0xFF bytes only: no line past it lacks it)
    return not head or max(lines) < head[:-1] + bytes((head[-1] + 1,))


class LineSplitter:
    """Incremental LF splitter. Feed it chunks; it returns complete lines.

    Lines are ``bytes`` (CR stripped) or :class:`Oversize`, and from :meth:`feed_runs` also
    :class:`UpdateRun`: consecutive lines of at least :data:`LONG_LINE` bytes that start with
    a prefix and end with a suffix, not cut out (each such line is one of the run's lines, in
    order). Every byte fed lands in exactly one line or separator.
    """

    def __init__(self, max_line: int = DEFAULT_MAX_LINE) -> None:
        if max_line < 1:
            raise ValueError("max_line must be at least 1")
        self.max_line = max_line
        self._pending: list[bytes] = []
        self._pending_len = 0
        # While discarding an oversize line: its head and its length so far.
        self._discarding = False
        self._head = b""
        self._dropped = 0
        self._cr = False

    def feed(self, data: bytes) -> list[bytes | Oversize]:
        out: list[bytes | Oversize] = []
        self._feed(data, out, None)
        return out

    def feed_runs(self, data: bytes, prefix: bytes, suffix: bytes) -> list[bytes | Oversize | UpdateRun]:
        """:meth:`feed`, with runs of long lines that start with ``prefix`` and end with
        ``suffix`` left in the read as :class:`UpdateRun` (the engine's stdout: the older
        engines' whole partials, each a ``message_update`` of ~13 KB)."""
        out: list[bytes | Oversize | UpdateRun] = []
        self._feed(data, out, (prefix, suffix))
        return out

    def _feed(self, data: bytes, out: list[Any], runs: tuple[bytes, bytes] | None) -> None:
        if not data:
            return
        nl = data.find(b"\n")
        if nl < 0:
            self._hold(data)
            return
        # The first LF ends whatever was pending.
        self._hold(data[:nl])
        out.append(self._take())
        start = nl + 1
        last = data.rfind(b"\n")
        if last > nl:
            max_line = self.max_line
            if last - start <= max_line and data.find(b"\r", start, last) < 0:
                # The common case: no CR to strip, no line can be oversize. Long lines first,
                # found in place (feed_runs); the rest all in C: BytesIO shares ``data`` and finds
                # each LF with memchr (bytes.split(b"\n") looks at every byte in a loop of its
                # own: 5x the instructions on Pi's short lines).
                if runs is not None:
                    start = self._long_lines(data, start, last, out, *runs)
                if start <= last:
                    whole = BytesIO(data)
                    whole.seek(start)
                    cut = whole.readlines(last + 1 - start)
                    if runs is not None and len(cut) >= BULK_MIN_LINES and _all_start_with(cut, runs[0]):
                        self._short_run(cut, last + 1 - start - len(cut), out, *runs)
                    else:
                        out += map(bytes.removesuffix, cut, _LF)
            else:
                for line in data[start:last].split(b"\n"):
                    if line[-1:] == b"\r":
                        line = line[:-1]
                    if len(line) > max_line:
                        out.append(Oversize(len(line), line[:OVERSIZE_HEAD]))
                    else:
                        out.append(line)
            start = last + 1
        if start < len(data):
            self._hold(data[start:])

    @staticmethod
    def _long_lines(data: bytes, start: int, last: int, out: list[Any], prefix: bytes, suffix: bytes) -> int:
        """The lines from ``start`` on while they are long (``data[last]`` is an LF and no line
        up to it has a CR or is oversize): those that start with ``prefix`` and end with
        ``suffix`` as runs left in place, the others cut out. Returns where the first short line
        starts (``last + 1``: none)."""
        find = data.find
        starts: list[int] = []
        ends: list[int] = []
        pos = start
        while pos <= last:
            end = find(b"\n", pos, last + 1)
            if end - pos < LONG_LINE:
                break
            if data.startswith(prefix, pos) and data.endswith(suffix, pos, end):
                starts.append(pos)
                ends.append(end)
            else:
                if ends:
                    out.append(UpdateRun(data, starts, ends))
                    starts, ends = [], []
                out.append(data[pos:end])
            pos = end + 1
        if ends:
            out.append(UpdateRun(data, starts, ends))
        return pos

    @staticmethod
    def _short_run(cut: list[bytes], nbytes: int, out: list[Any], prefix: bytes, suffix: bytes) -> None:
        """A read's short lines, all candidates, as one run; the line the read's first LF ended
        (pieced together from earlier reads, just before them in ``out``) joins it when it is
        one too, so a read of Pi 1.6's deltas is one item and one journal entry."""
        first = out[-1]
        if type(first) is bytes and first.startswith(prefix) and first.endswith(suffix):
            out[-1] = UpdateRun.of_cut([first + b"\n", *cut], nbytes + len(first))
        else:
            out.append(UpdateRun.of_cut(cut, nbytes))

    def close(self) -> list[bytes | Oversize]:
        """End of stream: a final line without LF is still a line."""
        if self._discarding or self._pending:
            return [self._take()]
        return []

    @property
    def buffered(self) -> int:
        """Bytes held for an unfinished line (bounded by the maximum)."""
        return self._pending_len

    def _hold(self, chunk: bytes) -> None:
        if not chunk:
            return
        if self._discarding:
            if len(self._head) < OVERSIZE_HEAD:
                self._head += chunk[: OVERSIZE_HEAD - len(self._head)]
            self._dropped += len(chunk)
            self._cr = chunk[-1:] == b"\r"
            return
        self._pending.append(chunk)
        self._pending_len += len(chunk)
        # One byte of slack: a trailing CR is stripped before the length counts.
        if self._pending_len > self.max_line + 1:
            # Keep the head without joining everything (that would cost a
            # second copy of the whole line at the worst moment).
            head = b""
            for piece in self._pending:
                head += piece[: OVERSIZE_HEAD - len(head)]
                if len(head) >= OVERSIZE_HEAD:
                    break
            self._head = head
            self._dropped = self._pending_len
            self._cr = self._pending[-1][-1:] == b"\r"
            self._pending = []
            self._pending_len = 0
            self._discarding = True

    def _take(self) -> bytes | Oversize:
        if self._discarding:
            self._discarding = False
            # The same line split in one chunk has its CR stripped first.
            length = self._dropped - 1 if self._cr else self._dropped
            line: bytes | Oversize = Oversize(length, self._head[:length])
            self._head = b""
            self._dropped = 0
            return line
        data = self._pending[0] if len(self._pending) == 1 else b"".join(self._pending)
        self._pending = []
        self._pending_len = 0
        if data[-1:] == b"\r":
            data = data[:-1]
        if len(data) > self.max_line:
            return Oversize(len(data), data[:OVERSIZE_HEAD])
        return data


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def js_int(text: str) -> int | float:
    """An integer as ``JSON.parse`` reads it, past CPython's 4,300-digit limit too: a number
    that long is past any double, so JavaScript reads it as ``Infinity`` (so does this)."""
    try:
        return int(text)
    except ValueError:
        return float(text)


_strict_decoder = json.JSONDecoder(parse_constant=_refuse_constant, parse_int=js_int)


def parse_line(line: bytes | Oversize) -> dict[str, Any] | RawLine:
    """Classify one line: a JSON object, or a raw line that opens a gap."""
    if isinstance(line, Oversize):
        text = line.head.decode("utf-8", "replace")
        return RawLine("oversize", text, line.length)
    try:
        value = orjson.loads(line)
    except orjson.JSONDecodeError:
        try:
            text = line.decode("utf-8")
        except UnicodeDecodeError:
            return RawLine("invalid-utf8", line.decode("utf-8", "replace"), len(line))
        try:
            value = _strict_decoder.decode(text)
        except (ValueError, RecursionError):
            return RawLine("malformed", text, len(line))
    if type(value) is not dict:
        return RawLine("not-object", line.decode("utf-8", "replace"), len(line))
    return value


def raw_text(raw: RawLine) -> str:
    """The journal's text for a raw line (an oversize line says so and shows its head)."""
    if raw.why == "oversize":
        return f"[oversize line: {raw.length} bytes, first {OVERSIZE_HEAD} kept] {raw.text}"
    return raw.text


#: The journal's note before a ``recv_raw`` entry whose text cannot tell the line's kind and
#: length: ``{"note": {"event": "raw-line", "why": WHY, "bytes": N}}`` (replay reads it).
RAW_LINE_NOTE: Final = "raw-line"

_OVERSIZE_MARK = re.compile(r"[\[<]oversize line: (\d+) bytes")


def raw_from_text(text: str) -> RawLine:
    """A raw line as a journal's ``recv_raw`` text tells it, when nothing else does (the
    journal notes ``raw-line`` before an entry whose text cannot tell, :func:`text_tells`): an
    oversize marker with the length it gives; U+FFFD, which replaced invalid UTF-8 (an
    approximate length: each replacement is 3 bytes of text); JSON that is not an object;
    else malformed JSON, whose text is the line."""
    size = len(text.encode("utf-8", "surrogatepass"))
    mark = _OVERSIZE_MARK.match(text)
    if mark:
        return RawLine("oversize", text, int(mark.group(1)))
    if "\ufffd" in text:
        return RawLine("invalid-utf8", text, size)
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        return RawLine("malformed", text, size)
    return RawLine("malformed" if isinstance(value, dict) else "not-object", text, size)


def text_tells(raw: RawLine) -> bool:
    """Does the journal's text for ``raw`` give back its kind and length (:func:`raw_from_text`)?"""
    again = raw_from_text(raw_text(raw))
    return (again.why, again.length) == (raw.why, raw.length)


# --------------------------------------------------------------------------
# The fast path: runs of message_update lines, found and checked in bulk

#: An engine line that starts so is a ``message_update`` event (Pi writes ``type`` first);
#: with a closing ``}`` and valid UTF-8 it is a JSON object the tracker never reads.
MESSAGE_UPDATE: Final = b'{"type":"message_update",'
#: A journal ``recv`` entry of a ``message_update`` (lean or full), as journals write it.
JOURNAL_UPDATE: Final = b'{"recv":' + MESSAGE_UPDATE
AGENT_END: Final = b'{"type":"agent_end",'
#: The engine lines something reads deeper than their top-level scalars: responses (their
#: ``data``), updates (streamed text, events; :data:`MESSAGE_UPDATE` has its own path),
#: ``message_start`` (the role), ``message_end`` (the reply, the usage, the stop reason),
#: ``queue_update`` (its queues) and the extensions' ``extension_ui_request`` (a dialog's
#: fields) and ``extension_error``. Of every other line nothing but the type and the top-level
#: scalars is read (the tracker: ``agent_start``, ``agent_end``, ``agent_settled``'s
#: ``aborted``; the run: ``tool_execution_*``'s ``toolCallId``, ``auto_retry_start``'s
#: ``delayMs``; the lean journal: ``tool_execution_update``'s ids), types unknown to the bridge
#: included, unless the held prompt asked for its events and the line can be one
#: (:data:`bridge.core.progress.EVENT_LINES`: ``turn_end``, the tools', the retries' and the
#: compactions' lines): such a line (from :data:`LEAN_MIN` bytes) is checked
#: (:meth:`JsonCheck.top_scalars`), not built, and stands as its top-level scalars
#: (``Session._receive_line``). :func:`lean_kind` says which.
CONTENTS_READ: Final = frozenset(
    {
        "response",
        "message_update",
        "message_start",
        "message_end",
        "queue_update",
        "compaction_end",
        "extension_ui_request",
        "extension_error",
    }
)
_KIND: Final = re.compile(rb'\{"type":"([A-Za-z0-9_]+)",')
#: From this length on such a line is checked rather than built: below it orjson builds a line
#: faster than simdjson checks it and hands its scalars over (the two meet at ~8 KB, a tool's
#: line). ``agent_end`` and ``turn_end`` are checked at any length (on the settle's path).
LEAN_MIN: Final = 8192
_LEAN_ALWAYS: Final = (AGENT_END, b'{"type":"turn_end",')


def lean_kind(line: bytes) -> str | None:
    """The type a line's first bytes give (Pi writes ``type`` first) when the line is one to
    check rather than build: not of :data:`CONTENTS_READ`, and :data:`LEAN_MIN` long or an
    ``agent_end`` or ``turn_end``; else None."""
    if len(line) < LEAN_MIN and not line.startswith(_LEAN_ALWAYS):
        return None
    found = _KIND.match(line)
    if found is None:
        return None
    kind = found.group(1).decode()
    return None if kind in CONTENTS_READ else kind


def update_runs(
    lines: Sequence[bytes | Oversize], prefix: bytes, suffix: bytes = b""
) -> Iterator[tuple[int, int, bool]]:
    """Split a batch into runs: ``(start, end, is_update)`` for ``lines[start:end]``, in order,
    covering the batch. A line is an update when it is bytes starting with ``prefix`` and
    ending with ``suffix``. The classification is two C-level maps; an :class:`Oversize` in
    the batch makes it go line by line (it is never an update)."""
    count = len(lines)
    try:
        starts = map(bytes.startswith, lines, itertools.repeat(prefix))  # type: ignore[arg-type]
        if suffix:
            flags = list(map(operator.and_, starts, map(bytes.endswith, lines, itertools.repeat(suffix))))  # type: ignore[arg-type]
        else:
            flags = list(starts)
    except TypeError:  # an Oversize line in the batch
        flags = [type(x) is bytes and x.startswith(prefix) and x.endswith(suffix) for x in lines]
    pos = 0
    while pos < count:
        flag = flags[pos]
        try:
            end = flags.index(not flag, pos)
        except ValueError:
            end = count
        yield pos, end, flag
        pos = end


#: From this many lines on, a read's short lines are first checked in bulk to be all candidate
#: ``message_update`` lines (:meth:`LineSplitter.feed_runs`: one run, no line classified on its
#: own; :func:`_all_start_with`, ~85 ns a line against the per-line path's maps, ~280 ns, and
#: a copy without the LF): Pi 1.6's deltas (~330 B, ~780 lines in a 256 KiB read), not the
#: older engines' whole partials (~13 KB, ~20 lines a read, :data:`LONG_LINE`) nor a slow
#: stream's few lines a read. A full read of 128 lines averages 2 KiB a line.
BULK_MIN_LINES: Final = 128


def sized_update_runs(
    lines: Sequence[bytes | Oversize], prefix: bytes, suffix: bytes
) -> Iterator[tuple[int, int, bool, int]]:
    """:func:`update_runs` with each update run's bytes together (0 for the other runs): a
    batch the splitter did not take as one run (it holds other lines, or few)."""
    for start, end, is_update in update_runs(lines, prefix, suffix):
        yield start, end, is_update, sum(map(len, lines[start:end])) if is_update else 0  # type: ignore[arg-type]


#: The biggest line :class:`JsonCheck` parses: its parser keeps the capacity of the biggest
#: document it was given, so this bounds what a session holds (memory flat as a stream grows,
#: SPEC §8). Older engines' whole partials are ~13 KB a line; a longer line takes the exact path.
CHECK_MAX: Final = 256 * 1024


_CONTAINERS: Final = (simdjson.Object, simdjson.Array)


class JsonCheck:
    """Is a line one well-formed JSON text? Even a line nobody parses must be (SPEC §3: a line
    that is not valid UTF-8 or not one JSON object opens a gap), so the fast path asks this of
    every ``message_update`` it skips; the prefix and the suffix only say which lines those are.

    ``True`` is certain: simdjson (its DOM parser: every byte validated as UTF-8 with SIMD, the
    whole grammar of RFC 8259, nothing kept) accepted the line, and what it accepts
    ``JSON.parse`` accepts. ``False`` is "don't know": simdjson also refuses what JavaScript
    reads (a lone surrogate escape, ``1e999``, an integer beyond 64 bits, nesting deeper than
    1,024) and lines over :data:`CHECK_MAX`, so such a line goes to :func:`parse_line`, which
    decides exactly. One per session: a parser is not shared between threads."""

    __slots__ = ("_parse",)

    def __init__(self) -> None:
        self._parse = simdjson.Parser(max_capacity=CHECK_MAX).parse

    def line(self, line: bytes | memoryview) -> bool:
        if len(line) > CHECK_MAX:
            return self._big(bytes(line), scalars=False) is not None
        try:
            # One JSON *object* (SPEC §3): a line of another JSON text (a string, ``"type"``,
            # which the property test's cuts made) is a gap, and ``parse_line`` says so. The
            # document is let go at once, so the parser can be reused.
            return isinstance(self._parse(line), simdjson.Object)
        except (ValueError, RuntimeError):  # UnicodeDecodeError is a ValueError
            return False

    def top_scalars(self, line: bytes) -> dict[str, Any] | None:
        """A line that is one JSON object whose top-level keys are all different: those of its
        members whose values are not objects or arrays (``type``, ``willRetry``), as
        ``JSON.parse`` gives them, without building the rest; None: not so, or "don't know" (as
        for :meth:`line`). A key given twice (which ``JSON.stringify`` never writes, and where
        ``JSON.parse`` keeps the last one) is a None, so the caller parses the line and gets
        the same.

        A line longer than :data:`CHECK_MAX` (a long run's ``agent_end``: every tool output
        again) is checked by :meth:`_big`, so the shared parser's memory stays bounded: 0.7 ms
        for a 2 MB ``agent_end`` where orjson builds it in 4.8 ms."""
        if len(line) > CHECK_MAX:
            return self._big(line, scalars=True)
        return self._whole(line, self._parse, True)

    def _big(self, line: bytes, *, scalars: bool) -> dict[str, Any] | None:
        """:meth:`top_scalars` (or, ``scalars`` off, any JSON text: ``{}`` for yes) of a line
        longer than :data:`CHECK_MAX`. simdjson's DOM costs ~13 bytes a structural character
        (its index and its tape), so a line whose estimate (:data:`WHOLE_MAX`) allows it gets a
        parser of its own, dropped with it; a denser one is checked in pieces
        (:meth:`_in_pieces`), each with the shared parser, whatever the line's size."""
        if len(line) * 17 > WHOLE_MAX and len(line) + 16 * _structurals(line) > WHOLE_MAX:
            return self._in_pieces(line, scalars)
        return self._whole(line, simdjson.Parser(max_capacity=len(line)).parse, scalars)

    @staticmethod
    def _whole(
        line: bytes, parse: Any, scalars: bool, skip_first: bool = False, keys: set[str] | None = None
    ) -> dict[str, Any] | None:
        try:
            doc = parse(line)
        except (ValueError, RuntimeError):  # UnicodeDecodeError is a ValueError
            return None
        try:
            if not scalars:
                return {}
            if type(doc) is not simdjson.Object:
                return None
            out: dict[str, Any] = {}
            return out if _scalars_of(doc, skip_first, out, set() if keys is None else keys) else None
        finally:
            del doc  # (simdjson's parser is reused only once its documents are gone)

    def _in_pieces(self, line: bytes, scalars: bool) -> dict[str, Any] | None:
        """:func:`_pieces`, each checked; the top-level scalars are those of all pieces (a
        piece that starts deeper than the top opens with a made-up member, not the line's)."""
        out: dict[str, Any] = {}
        keys: set[str] = set()
        for before, text in _pieces(line):
            parse = self._parse if len(text) <= CHECK_MAX else simdjson.Parser(max_capacity=len(text)).parse
            found = self._whole(text, parse, scalars, len(before) > 1, keys)
            if found is None:
                return None
            out.update(found)
        return out

    def lines(self, lines: Sequence[bytes] | Sequence[memoryview]) -> bool:
        """:meth:`line` for every line of a batch: one C-level map, the documents dropped."""
        try:
            collections.deque(map(self._parse, lines), maxlen=0)
        except (ValueError, RuntimeError):
            return False
        return True

    def run(self, run: UpdateRun) -> bool:
        """:meth:`lines` for an :class:`UpdateRun`: its cut lines as they are (an LF after a JSON
        text is whitespace, which JSON allows), or each line as a view of the read."""
        if run.cut is not None:
            return self.lines(run.cut)
        view = memoryview(run.data)
        try:
            return self.lines([view[a:b] for a, b in zip(run.starts, run.ends)])
        finally:
            view.release()


def _scalars_of(doc: Any, skip_first: bool, out: dict[str, Any], keys: set[str]) -> bool:
    """Put a simdjson object's members whose values are no objects or arrays in ``out`` and its
    keys in ``keys`` (but the first member, ``skip_first``: a piece's made-up one); False: a key
    given twice, or one with a NUL (simdjson looks a key up as a C string, cut at its NUL; the
    made-up key is one). By key: ``items()`` would build the values."""
    names = list(doc.keys())
    if skip_first:
        del names[0]
    before = len(keys)
    keys.update(names)
    if len(keys) - before != len(names) or any("\x00" in key for key in names):
        return False
    for key in names:
        value = doc[key]
        if type(value) not in _CONTAINERS:
            out[key] = value
        del value
    return True


#: Up to this estimate of simdjson's memory for a line (:func:`_structurals`), a line longer
#: than :data:`CHECK_MAX` is parsed whole by a parser of its own; past it, in pieces.
WHOLE_MAX: Final = 64 * 1024 * 1024
#: How much of a line a piece takes (:func:`_pieces`), before its made-up context: the piece
#: and that context fit the shared parser's :data:`CHECK_MAX`.
PIECE: Final = CHECK_MAX // 2


def _structurals(line: bytes) -> int:
    """About how many tape entries and structural indexes simdjson makes of ``line``."""
    return line.count(b",") + line.count(b":") + 2 * (line.count(b"{") + line.count(b"["))


#: A string once all but its quotes and brackets are gone (:func:`_open_after`).
_QUOTED: Final = re.compile(rb'"[^"]*"')
_NOT_QUOTES_OR_BRACKETS: Final = bytes(sorted(set(range(256)) - set(b'"[]{}')))
_CLOSES_OPENS: Final = re.compile(rb"([\]}]*)([\[{]*)")
_CLOSER: Final = bytes.maketrans(b"{[", b"}]")
_WS: Final = b" \t\n\r"
#: A piece that cannot be one (:func:`_pieces`) is handed on as this, which no parser takes.
_NOT_JSON: Final = b"]"


def _pieces(line: bytes) -> Iterator[tuple[bytes, bytes]]:
    """``line`` cut at commas into pieces of about :data:`PIECE` bytes, each made one JSON text
    of its own by the containers open where it starts (``{"\\u0000":`` or ``[`` for each but the
    innermost, ``{`` or ``[``) and the closers of those open where it ends: ``(open before,
    text)`` for each. When every text is one JSON text, the line is one (and the top-level
    members of the texts, but the made-up first one of a text that starts deeper than the
    top, are the line's): a text parses only when its piece takes the parser from "after a
    comma" inside what was open before (a piece never starts with a closer, nor is empty) to
    "after a value" inside what is open after (it never ends with an opener), and so, from
    one comma outside strings to the next, does the line.

    What is open at a cut is a guess (strings removed, brackets paired), made on the premise
    that the cut is outside strings; a wrong guess makes a text fail to parse (a "don't know"),
    never a wrong yes. A cut is the last comma in the reach from the previous cut that an even
    number of unescaped quotes precede (:func:`_cut`); the reach doubles until one is found or
    the line ends.
    The pieces are yielded as they are made (the first failure stops the caller)."""
    size, start, opened = len(line), 0, b""
    while True:
        cut, reach = -1, PIECE
        while start + reach < size:
            cut = _cut(line, start, start + reach)
            if cut > start:
                break
            reach *= 2
        piece = line[start:] if cut < 0 else line[start:cut]
        head, tail = piece.lstrip(_WS)[:1], piece.rstrip(_WS)[-1:]
        if start and head in (b"", b"]", b"}"):
            yield opened, _NOT_JSON
            return
        if cut < 0:
            yield opened, _opener(opened) + piece
            return
        after = _open_after(opened, piece)
        if not after or tail in (b"", b"[", b"{"):
            yield opened, _NOT_JSON
            return
        yield opened, _opener(opened) + piece + after[::-1].translate(_CLOSER)
        start, opened = cut + 1, after


def _cut(line: bytes, start: int, end: int) -> int:
    """The last comma of ``line[start:end]`` outside strings as the quotes before it tell
    (``start`` being outside strings), or -1 (a few tries, then none)."""
    cut = line.rfind(b",", start, end)
    for _ in range(8):
        if cut <= start:
            return -1
        if line.find(b"\\", start, cut) < 0:
            quotes = line.count(b'"', start, cut)
        else:
            quotes = line[start:cut].replace(b"\\\\", b"").replace(b'\\"', b"").count(b'"')
        if quotes % 2 == 0:
            return cut
        quote = line.rfind(b'"', start, cut)  # (inside a string: the comma before it opened)
        cut = line.rfind(b",", start, quote) if quote > start else -1
    return -1


def _opener(opened: bytes) -> bytes:
    return opened[:-1].replace(b"{", b'{"\\u0000":') + opened[-1:]


def _open_after(opened: bytes, piece: bytes) -> bytes:
    """What is open after ``piece`` (which starts outside strings) when ``opened`` was before
    it; empty when that cannot be (a closer that does not match)."""
    # Escaped backslashes, then escaped quotes, go; then all but quotes and brackets; then the
    # strings, the empty ones first (two quotes side by side: an empty string, or one string's
    # end and the next one's start, which leaves the same bytes inside strings).
    if b"\\" in piece:
        piece = piece.replace(b"\\\\", b"").replace(b'\\"', b"")
    brackets = piece.translate(None, _NOT_QUOTES_OR_BRACKETS)
    if b'"' in brackets:
        brackets = _QUOTED.sub(b"", brackets.replace(b'""', b""))
    while True:
        paired = brackets.replace(b"[]", b"").replace(b"{}", b"")
        if len(paired) == len(brackets):
            break
        brackets = paired
    found = _CLOSES_OPENS.fullmatch(brackets)
    if found is None:
        return b""
    closes, opens = found.groups()
    if len(closes) > len(opened) or opened[len(opened) - len(closes) :][::-1].translate(_CLOSER) != closes:
        return b""
    return opened[: len(opened) - len(closes)] + opens
