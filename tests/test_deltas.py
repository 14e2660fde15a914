"""bridge.core.deltas: a run of message_update lines decoded for its deltas only (msgspec) gives
what the exact path gives (each line as ``JSON.parse`` reads it: framing.parse_line), or refuses
the run, which then takes the exact path. On generated lines (odd shapes, duplicate keys,
escapes, JavaScript-only JSON, malformed JSON, invalid UTF-8) and on recorded ones: Pi 1.6.0's
own stdout (tools/pi/captures), the core fixtures' journals and the bench's Pi 1.6 stream."""

from __future__ import annotations

import functools
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bridge.core import deltas, progress
from bridge.core.events import TextDelta
from bridge.core.framing import MESSAGE_UPDATE, LineSplitter, UpdateRun, parse_line
from bridge.core.progress import TextEvent, ThinkingEvent

ROOT = Path(__file__).resolve().parent.parent


def exact(line: bytes) -> tuple[Any, Any] | None:
    """A line as the exact path reads it: None when it is no ``message_update`` object, else its
    event's ``type`` and ``delta`` (None, None: no event object)."""
    value = parse_line(line)
    if type(value) is not dict or value.get("type") != "message_update":
        return None
    event = value.get("assistantMessageEvent")
    return (event.get("type"), event.get("delta")) if type(event) is dict else (None, None)


def seen(kind: Any, piece: Any) -> tuple[Any, str] | None:
    """What anything downstream can tell of a line's kind and piece (progress.delta_of): its
    non-empty text and its kind when that is a string (a number's type, int or float, is what
    no reader looks at: JavaScript has one number type)."""
    if type(piece) is not str or not piece:
        return None
    return (kind if type(kind) is str else "(not a string)"), piece


def reference(found: list[tuple[Any, Any]], first: int, events: bool, stream: bool) -> list[Any]:
    """The events line-by-line observation makes of those lines (Session._update), joined as
    the live bridge joins a read's deltas."""
    out: list[Any] = []
    text = ""
    for idx, (kind, piece) in enumerate(found, first):
        if seen(kind, piece) is None:
            continue
        kind = seen(kind, piece)[0]  # type: ignore[index]  # not None
        if kind == "text_delta":
            text += piece
        cls = {"text_delta": TextEvent, "thinking_delta": ThinkingEvent}.get(kind) if events else None
        if cls is None:
            continue
        if out and type(out[-1]) is cls:
            out[-1] = cls("p", out[-1].idx, out[-1].delta + piece, out[-1].lines + 1)
        else:
            out.append(cls("p", idx, piece, 1))
    if stream and text:
        out.append(TextDelta("p", text))
    return out


def check_line(line: bytes) -> None:
    """A line the lean path reads is an update object read exactly; one it refuses is left to
    the exact path, whatever it is."""
    got = deltas._lean([line])
    if got is None:
        return
    want = exact(line)
    assert want is not None, line
    (kind,), (piece,) = got
    assert seen(kind, piece) == seen(*want), line


def check_run(lines: list[bytes], events: bool, stream: bool) -> None:
    read = deltas.read_run(lines)
    found = [exact(line) for line in lines]
    if read is None:
        return
    assert None not in found, lines
    assert deltas.run_deltas(read, 7, "p", events, stream) == reference(found, 7, events, stream)  # type: ignore[arg-type]


# -- generated lines ---------------------------------------------------------------------------

scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text()
json_values = st.recursive(
    scalars,
    lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=5), kids, max_size=3),
    max_leaves=8,
)
kinds = st.sampled_from(["text_delta", "thinking_delta", "toolcall_delta", "text_start", "text_end", "x"])


def members(pairs: list[tuple[str, Any]], ascii_only: bool) -> bytes:
    """An object written member by member (a key may come twice, as JSON.stringify never
    writes but a line may hold)."""
    return b"{" + b",".join(json.dumps(k).encode() + b":" + dump(v, ascii_only) for k, v in pairs) + b"}"


def dump(value: Any, ascii_only: bool) -> bytes:
    if isinstance(value, bytes):  # already written
        return value
    return json.dumps(value, ensure_ascii=ascii_only, separators=(",", ":")).encode("utf-8", "surrogatepass")


event_objects = st.builds(
    lambda kind, piece, extra, twice, ascii_only: members(
        [("type", kind), ("contentIndex", 0), ("delta", piece), *extra, *([("delta", twice)] if twice else [])],
        ascii_only,
    ),
    kinds | json_values,
    st.text() | json_values,
    st.lists(st.tuples(st.sampled_from(["partial", "content", "type", "\u00e9"]), json_values), max_size=2),
    st.none() | st.text(min_size=1),
    st.booleans(),
)


@st.composite
def update_lines(draw: st.DrawFn) -> bytes:
    ascii_only = draw(st.booleans())
    pairs: list[tuple[str, Any]] = [("usage", draw(json_values))]
    for _ in range(draw(st.integers(0, 2))):
        pairs.append(("assistantMessageEvent", draw(event_objects | json_values)))
    pairs += draw(st.lists(st.tuples(st.sampled_from(["type", "message", "x"]), json_values), max_size=2))
    draw(st.randoms()).shuffle(pairs)
    body = members(pairs, ascii_only)
    line = MESSAGE_UPDATE + body[1:] if body != b"{}" else MESSAGE_UPDATE[:-1] + b"}"
    # Now and then an escaped key, or a line broken on purpose.
    if draw(st.booleans()):
        line = line.replace(b'"assistantMessageEvent"', b'"\\u0061ssistantMessageEvent"', 1)
    cut = draw(st.integers(0, len(line)))
    mutate = draw(st.sampled_from(["none", "none", "byte", "drop", "cut"]))
    if mutate == "byte":
        line = (
            line[:cut]
            + draw(st.sampled_from([b"\xff", b"\xed\xa0\x80", b"\x01", b",", b"}", b'"', b"\\"]))
            + line[cut:]
        )
    elif mutate == "drop":
        line = line[:cut] + line[cut + 1 :]
    elif mutate == "cut":
        line = line[:cut]
    return line


ODD = [
    b'{"type":"message_update","assistantMessageEvent":{"type":"text_delta","delta":"\\ud83d"}}',  # JS only
    b'{"type":"message_update","d":"\\ud83d","assistantMessageEvent":{"type":"text_delta","delta":"a"}}',
    b'{"type":"message_update","n":1e999,"assistantMessageEvent":{"type":"text_delta","delta":"a"}}',
    b'{"type":"message_update","assistantMessageEvent":{"type":"text_delta","delta":1e999}}',
    b'{"type":"message_update","n":123456789012345678901234567890,"assistantMessageEvent":{"type":"text_delta","delta":"a"}}',
    b'{"type":"message_update","u":"\xff","assistantMessageEvent":{"type":"text_delta","delta":"a"}}',  # skipped by msgspec
    b'{"type":"message_update","u":"\xed\xa0\x80","assistantMessageEvent":{"type":"text_delta","delta":"a"}}',
    b'{"type":"message_update","\xff":1,"assistantMessageEvent":{"type":"text_delta","delta":"a"}}',
    b'{"type":"message_update","u":"\x01","assistantMessageEvent":{"type":"text_delta","delta":"a"}}',
    b'{"type":"message_update","u":01,"assistantMessageEvent":{"type":"text_delta","delta":"a"}}',
    b'{"type":"message_update","u":[1,],"assistantMessageEvent":{"type":"text_delta","delta":"a"}}',
    b'{"type":"message_update","u":NaN,"assistantMessageEvent":{"type":"text_delta","delta":"a"}}',
    b'{"type":"message_update","u":tru,"assistantMessageEvent":{"type":"text_delta","delta":"a"}}',
    b'{"type":"message_update","u":"\\x","assistantMessageEvent":{"type":"text_delta","delta":"a"}}',
    b'{"type":"message_update","type":"agent_end","assistantMessageEvent":{"type":"text_delta","delta":"a"}}',
    b'{"type":"message_update","type":"message_update","assistantMessageEvent":{"type":"text_delta","delta":"a"}}',
    b'{"type":"message_update","assistantMessageEvent":{"type":"text_delta","delta":"a"},"assistantMessageEvent":null}',
    b'{"type":"message_update","assistantMessageEvent":null,"assistantMessageEvent":{"type":"text_delta","delta":"b"}}',
    b'{"type":"message_update","assistantMessageEvent":{"type":"text_delta","delta":"a","delta":"b","type":"thinking_delta"}}',
    b'{"type":"message_update","assistantMessageEvent":[{"type":"text_delta","delta":"a"}]}',
    b'{"type":"message_update","assistantMessageEvent":"text_delta"}',
    b'{"type":"message_update","assistantMessageEvent":{"type":"text_delta","delta":"\\u0000\\u2028\xe2\x80\xa8"}}',
    b'{"type":"message_update","assistantMessageEvent":{"type":"text_delta","delta":"a"}} ',
    b'{"type":"message_update","assistantMessageEvent":{"type":"text_delta","delta":"a"}} x',
    b'{"type":"message_update","assistantMessageEvent":{"type":"text_delta","delta":"a"}}{}',
    b'{"type":"message_update","a":' + b"[" * 2000 + b"]" * 2000 + b"}",  # deeper than msgspec goes
    b'{"type":"message_update","assistantMessageEvent":{"type":"text_delta","delta":"a"}',
]


@given(update_lines())
@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_a_line_read_for_its_delta_is_read_as_json_parse_reads_it(line: bytes) -> None:
    check_line(line)


def test_odd_lines_are_read_exactly_or_left_to_the_exact_path() -> None:
    for line in ODD:
        check_line(line)
    # What must be refused, not read: invalid UTF-8 where msgspec does not look, not JSON.
    assert deltas._lean([ODD[5]]) is None and deltas._lean([ODD[6]]) is None and deltas._lean([ODD[7]]) is None
    assert all(deltas._lean([line]) is None for line in ODD[8:14])
    # And what is read: the last of a key given twice, as JSON.parse keeps.
    assert deltas._lean([ODD[16]]) == ([None], [None])
    assert deltas._lean([ODD[18]]) == (["thinking_delta"], ["b"])


@given(
    st.lists(st.sampled_from(ODD) | update_lines(), min_size=1, max_size=8),
    st.booleans(),
    st.booleans(),
)
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_a_run_read_for_its_deltas_gives_the_events_line_by_line_gives(
    lines: list[bytes], events: bool, stream: bool
) -> None:
    check_run(lines, events, stream)


# -- recorded lines ----------------------------------------------------------------------------


@functools.cache
def recorded() -> list[bytes]:
    """Pi 1.6.0's own message_update lines (its captured stdout), the core fixtures' (their
    journals' ``recv`` entries, written back as JSON.stringify writes them) and the bench's."""
    out = [
        line
        for path in sorted((ROOT / "tools" / "pi" / "captures").glob("*.jsonl"))
        for line in path.read_bytes().split(b"\n")
        if line.startswith(MESSAGE_UPDATE)
    ]
    for path in sorted((ROOT / "fixtures" / "core").glob("*.jsonl")):
        for line in path.read_bytes().split(b"\n"):
            if line.startswith(b'{"recv":' + MESSAGE_UPDATE):
                out.append(json.dumps(orjson.loads(line)["recv"], ensure_ascii=False, separators=(",", ":")).encode())
    with tempfile.TemporaryDirectory() as tmp:  # the bench's engine, run as the tool it is
        stream = Path(tmp) / "pi16.jsonl"
        argv = [sys.executable, str(ROOT / "tools" / "bench" / "bench_engine.py"), "--gen", "pi16", "--lines", "3000"]
        subprocess.run([*argv, "--deltas-per-turn", "400", "--write", str(stream)], check=True, capture_output=True)
        out += [line for line in stream.read_bytes().split(b"\n") if line.startswith(MESSAGE_UPDATE)]
    return out


def test_recorded_lines_are_read_by_the_lean_path_exactly() -> None:
    lines = recorded()
    assert len(lines) > 2500
    for line in lines:
        assert deltas._lean([line]) is not None, line  # every one of them: none goes the slow way
        check_line(line)
    for events in (False, True):
        for stream in (False, True):
            check_run(lines, events, stream)


def test_a_run_left_in_the_read_is_read_like_its_lines() -> None:
    """A splitter's runs, both forms: short lines cut out with their LF, long ones in place."""
    lines = recorded()
    long = (
        b'{"type":"message_update","pad":"'
        + b"\xc3\xa9" * 3000
        + b'","assistantMessageEvent":{"type":"text_delta","delta":"z"}}'
    )
    for data in (b"\n" + b"\n".join(lines[:400]) + b"\n", b"\n" + b"\n".join([long] * 5 + [ODD[5]] + [long]) + b"\n"):
        for item in LineSplitter().feed_runs(data, MESSAGE_UPDATE, b"}"):
            if type(item) is UpdateRun:
                assert deltas.read_run(item) == deltas.read_run(list(item))
                check_run(list(item), True, True)


def valid_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


@given(st.text(), st.integers(0, 400), st.sampled_from([b"", b"\xff", b"\x80", b"\xed\xa0\x80", b"\xf0\x9f"]))
@settings(max_examples=300, deadline=None)
def test_utf8_is_checked_exactly_whole_or_a_piece_at_a_time(text: str, at: int, odd: bytes) -> None:
    good = text.encode("utf-8")
    line = good[:at] + odd + good[at:]
    for piece in (deltas.UTF8_PIECE, 1, 2, 3, 5):
        old, deltas.UTF8_PIECE = deltas.UTF8_PIECE, piece  # type: ignore[misc]  # (a Final, set for the test)
        try:
            assert deltas._utf8([b"{}", line]) == valid_utf8(line)
            assert deltas._utf8([line[: at // 2]]) == valid_utf8(line[: at // 2])
        finally:
            deltas.UTF8_PIECE = old  # type: ignore[misc]


def test_a_long_update_read_alone_gives_what_the_exact_path_gives() -> None:
    """Issue 42: a long ``message_update`` the held prompt reads is read for its delta alone
    (:func:`~bridge.core.deltas.lean_update`), never built; what ``delta_of`` makes of it is
    what it makes of the line built whole, and a line msgspec refuses is left to the exact path."""
    pad = b',"x":[' + b"{}," * 4000 + b'{}],"s":"\\u00e9\xc3\xa9"'
    lines = [
        b'{"type":"message_update","assistantMessageEvent":{"type":"text_delta","delta":"h\\u00e9 \\"x\\""}'
        + pad
        + b"}",
        b'{"type":"message_update","assistantMessageEvent":{"type":"thinking_delta","delta":"t"}' + pad + b"}",
        b'{"type":"message_update","assistantMessageEvent":{"type":"text_delta","delta":[{}]}' + pad + b"}",
        b'{"type":"message_update","assistantMessageEvent":{"type":5,"delta":"x"}' + pad + b"}",
        b'{"type":"message_update","assistantMessageEvent":[{}]' + pad + b"}",
        b'{"type":"message_update","assistantMessageEvent" : { "delta" : "d" , "type" : "text_delta" } ' + pad + b"}",
        b'{"type":"message_update"' + pad + b"}",
        b'{"type":"message_update","assistantMessageEvent":{"type":"text_delta","delta":"a","delta":"b"}' + pad + b"}",
    ]
    for line in lines:
        lean = deltas.lean_update(line)
        built = parse_line(line)
        assert lean is not None and isinstance(built, dict), line[:80]
        assert _kind_read(progress.delta_of(lean)) == _kind_read(progress.delta_of(built)), line[:80]
    for refused in (
        b'{"type":"message_update","assistantMessageEvent":{"type":"text_delta","delta":"\\ud83d"}' + pad + b"}",
        b'{"type":"message_update","type":"agent_end"' + pad + b"}",
        b'{"type":"message_update"' + pad + b"} x",
        b'{"type":"message_update","s":"\xff"' + pad + b"}",
    ):
        assert deltas.lean_update(refused) is None, refused[:80]


def _kind_read(found: tuple[Any, str] | None) -> tuple[str | None, str] | None:
    """A delta as the session reads it: its kind is compared with strings only."""
    return None if found is None else (found[0] if isinstance(found[0], str) else None, found[1])
