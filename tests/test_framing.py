"""SPEC §3: framing. One test per rule, then properties over arbitrary bytes."""

from __future__ import annotations

import itertools

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bridge.core.framing import OVERSIZE_HEAD, LineSplitter, Oversize, RawLine, parse_line, raw_text


def split(data: bytes, max_line: int = 1 << 20, chunks: list[int] | None = None) -> list[bytes | Oversize]:
    s = LineSplitter(max_line)
    out: list[bytes | Oversize] = []
    if chunks is None:
        out += s.feed(data)
    else:
        pos = 0
        for size in chunks:
            out += s.feed(data[pos : pos + size])
            pos += size
        out += s.feed(data[pos:])
    return out + s.close()


def test_lines_split_on_lf_only():
    assert split(b'{"a":1}\n{"b":2}\n') == [b'{"a":1}', b'{"b":2}']


def test_trailing_cr_is_stripped():
    assert split(b'{"a":1}\r\n{"b":2}\r\n') == [b'{"a":1}', b'{"b":2}']


def test_only_one_trailing_cr_is_stripped_and_inner_cr_kept():
    assert split(b"a\rb\r\r\n") == [b"a\rb\r"]


def test_unicode_line_separators_inside_strings_are_not_separators():
    line = '{"text":"a\u2028b\u2029c\u0085d"}'.encode()
    assert split(line + b"\n") == [line]
    assert parse_line(line) == {"text": "a\u2028b\u2029c\u0085d"}


def test_final_line_without_lf_is_still_a_line():
    assert split(b'{"a":1}\n{"b":2}') == [b'{"a":1}', b'{"b":2}']


def test_empty_stream_yields_no_line():
    assert split(b"") == []


def test_blank_line_is_an_observation():
    assert split(b"\n\n") == [b"", b""]
    assert isinstance(parse_line(b""), RawLine)


def test_oversize_line_is_reported_without_holding_it_and_reading_resumes():
    s = LineSplitter(max_line=100)
    out = s.feed(b"x" * 60)
    for _ in range(100):
        out += s.feed(b"y" * 1000)
        assert s.buffered <= 101  # never holds the long line
    out += s.feed(b'tail\n{"ok":1}\n')
    out += s.close()
    assert len(out) == 2
    big = out[0]
    assert isinstance(big, Oversize)
    assert big.length == 60 + 100 * 1000 + 4
    assert big.head == (b"x" * 60 + b"y" * 1000)[:OVERSIZE_HEAD]
    assert out[1] == b'{"ok":1}'


def test_oversize_within_one_chunk():
    out = split(b"z" * 50 + b"\nok\n", max_line=10)
    assert isinstance(out[0], Oversize) and out[0].length == 50
    assert out[1] == b"ok"


def test_line_of_exactly_the_maximum_is_not_oversize():
    assert split(b"a" * 10 + b"\r\n", max_line=10) == [b"a" * 10]
    assert isinstance(split(b"a" * 11 + b"\n", max_line=10)[0], Oversize)


def test_unterminated_oversize_line_is_flushed_at_eof():
    out = split(b"q" * 30, max_line=10, chunks=[5, 5, 5])
    assert len(out) == 1 and isinstance(out[0], Oversize) and out[0].length == 30


def test_json_object_parses():
    assert parse_line(b'{"type":"agent_start"}') == {"type": "agent_start"}


def test_malformed_json_is_raw():
    raw = parse_line(b'{"type":')
    assert isinstance(raw, RawLine) and raw.why == "malformed" and raw.text == '{"type":'


def test_invalid_utf8_is_raw_with_replacement_characters():
    raw = parse_line(b'{"a":"\xff\xfe"}')
    assert isinstance(raw, RawLine) and raw.why == "invalid-utf8"
    assert raw.text == '{"a":"\ufffd\ufffd"}'


def test_json_that_is_not_an_object_is_raw():
    for line in (b"[1]", b"42", b'"s"', b"null", b"true"):
        raw = parse_line(line)
        assert isinstance(raw, RawLine) and raw.why == "not-object", line


def test_oversize_is_raw_and_says_so():
    raw = parse_line(Oversize(10_000, b'{"type":"x"'))
    assert isinstance(raw, RawLine) and raw.why == "oversize" and raw.length == 10_000
    assert raw_text(raw).startswith("[oversize line: 10000 bytes")


def test_what_json_parse_accepts_parses_lone_surrogate_escape():
    # JSON.stringify writes a lone surrogate as an escape; JSON.parse reads it back.
    assert parse_line(b'{"a":"\\ud83d"}') == {"a": "\ud83d"}


def test_what_json_parse_refuses_is_raw():
    for line in (b'{"a":NaN}', b'{"a":Infinity}', b"{'a':1}", b'{"a":1}x'):
        assert isinstance(parse_line(line), RawLine), line


def test_duplicate_keys_last_wins_like_json_parse():
    assert parse_line(b'{"a":1,"a":2}') == {"a": 2}


# -- properties -----------------------------------------------------------------

chunkings = st.lists(st.integers(min_value=0, max_value=64), max_size=40)
streams = st.binary(max_size=600) | st.lists(
    st.sampled_from([b"\n", b"\r", b"\r\n", b"{", b"}", b'"', b"\xe2\x80\xa8", b"\xff", b"abc", b"xyzxyzxyz"]),
    max_size=80,
).map(b"".join)


@given(streams, chunkings, chunkings, st.integers(min_value=1, max_value=40))
@settings(max_examples=400)
def test_any_chunking_yields_the_same_lines(data, a, b, max_line):
    assert split(data, max_line, a) == split(data, max_line, b) == split(data, max_line)


@given(streams, chunkings)
@settings(max_examples=400)
def test_every_byte_lands_in_exactly_one_line(data, chunks):
    out = split(data, 1 << 20, chunks)
    # Rebuild: each line was followed by LF (except maybe the last), and had
    # maybe one CR stripped.
    pieces = data.split(b"\n")
    if pieces and pieces[-1] == b"":
        pieces.pop()
    expected = [p[:-1] if p.endswith(b"\r") else p for p in pieces]
    assert out == expected


@given(streams, chunkings, st.integers(min_value=1, max_value=16))
@settings(max_examples=400)
def test_oversize_lengths_account_for_every_byte(data, chunks, max_line):
    out = split(data, max_line, chunks)
    pieces = data.split(b"\n")
    if pieces and pieces[-1] == b"":
        pieces.pop()
    assert len(out) == len(pieces)
    for got, piece in zip(out, pieces):
        if isinstance(got, Oversize):
            assert got.length in (len(piece), len(piece) - 1)
            assert piece.startswith(got.head)
        else:
            assert len(got) <= max_line


@given(st.binary(max_size=300))
@settings(max_examples=500)
def test_parse_line_never_raises(data):
    result = parse_line(data)
    assert isinstance(result, (dict, RawLine))


def test_update_runs_splits_a_batch_into_runs_and_an_oversize_line_is_never_an_update() -> None:
    from bridge.core.framing import MESSAGE_UPDATE, Oversize, update_runs

    up = MESSAGE_UPDATE + b'"x":1}'
    lines = [up, up, b'{"type":"agent_start"}', up[:-1], up, Oversize(10, up[:5]), up]
    assert list(update_runs(lines, MESSAGE_UPDATE, b"}")) == [
        (0, 2, True),
        (2, 4, False),
        (4, 5, True),
        (5, 6, False),
        (6, 7, True),
    ]
    # Without a suffix the prefix alone decides (the journal reader's case).
    assert list(update_runs([up, up[:-1], b"{}"], MESSAGE_UPDATE)) == [(0, 2, True), (2, 3, False)]
    assert list(update_runs([], MESSAGE_UPDATE)) == []


_UP = b'{"type":"message_update",'
_SHAPES = [
    _UP + b'"d":"x"}',
    _UP + b"}",
    _UP + b'"d":"}"',  # no closing brace: not an update
    b'{"type":"turn_end"}',
    b"",
    b"}",
    _UP[:-1],
    b'}{"type":"message_update",',
    b'x}\n{"type":"message_update",'.split(b"\n")[0],
]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(range(len(_SHAPES))), max_size=300), st.booleans())
def test_sized_update_runs_classify_every_line_as_one_by_one_would(picks: list[int], all_updates: bool) -> None:
    """A batch of updates (counted in bulk) or a mixed one gives the runs and sizes a
    line-by-line check gives."""
    from bridge.core.framing import sized_update_runs

    lines = [_SHAPES[k] for k in picks]
    if all_updates:
        lines = [x for x in lines if x.startswith(_UP) and x.endswith(b"}")]
    flags = [x.startswith(_UP) and x.endswith(b"}") for x in lines]
    runs = list(sized_update_runs(lines, _UP, b"}"))
    assert [f for s, e, f, _ in runs for _ in range(s, e)] == flags
    assert all(a[1] == b[0] and a[2] != b[2] for a, b in itertools.pairwise(runs))
    assert [n for s, e, f, n in runs] == [sum(map(len, lines[s:e])) if f else 0 for s, e, f, _ in runs]


def test_sized_update_runs_give_the_same_runs_in_bulk_and_line_by_line() -> None:
    """A batch of many lines is checked in bulk first, one of few lines (long ones: the older
    engines' whole partials) line by line: the runs and sizes are the same either way."""
    from bridge.core.framing import BULK_MIN_LINES, sized_update_runs

    up = _UP + b'"d":"x"}'
    other = b'{"type":"turn_end"}'
    for n in (BULK_MIN_LINES - 1, BULK_MIN_LINES, 3 * BULK_MIN_LINES):
        same = [up] * n
        assert list(sized_update_runs(same, _UP, b"}")) == [(0, n, True, n * len(up))]
        mixed = [up] * (n - 2) + [other, up]
        assert list(sized_update_runs(mixed, _UP, b"}")) == [
            (0, n - 2, True, (n - 2) * len(up)),
            (n - 2, n - 1, False, 0),
            (n - 1, n, True, len(up)),
        ]


# -- runs of long update lines left in the read (LineSplitter.feed_runs, UpdateRun)

_LONG = 4096  # framing.LONG_LINE
_RUNS = (_UP, b"}")


def _line(kind: int, size: int, bad: bool) -> bytes:
    """An update (0), an update without its closing brace (1), another event (2) or junk (3),
    padded to about ``size`` bytes, with an invalid UTF-8 byte when ``bad``."""
    pad = ("é—x" * size)[:size].encode()
    body = [
        _UP + b'"d":"' + pad + b'"}',
        _UP + b'"d":"' + pad + b'"',
        b'{"type":"turn_end","d":"' + pad + b'"}',
        b"junk " + pad,
    ][kind]
    if bad:
        body = body[:30] + b"\xff" + body[30:]
    return body


_lines = st.tuples(
    st.sampled_from([0, 0, 0, 1, 2, 3]),
    st.sampled_from([0, 10, _LONG - 40, _LONG, _LONG + 300, 3 * _LONG]),
    st.booleans(),
    st.sampled_from([b"\n", b"\n", b"\n", b"\r\n"]),
)


def _expand(items: list) -> list:
    from bridge.core.framing import UpdateRun

    out = []
    for x in items:
        out += list(x) if type(x) is UpdateRun else [x]
    return out


@settings(max_examples=200, deadline=None)
@given(
    st.lists(_lines, max_size=14),
    st.lists(st.integers(min_value=1, max_value=3 * _LONG), max_size=12),
    st.sampled_from([1 << 20, 2 * _LONG, _LONG + 100]),
    st.booleans(),
    st.sampled_from([1, 2, 3, 128]),
)
def test_a_splitter_with_runs_gives_the_same_lines_as_one_without(specs, chunks, max_line, final_lf, bulk_min) -> None:
    """Runs of update lines handed on whole (long ones left in the read, a read's short ones
    when all are updates) are, line for line, what a plain splitter cuts out (CRs, oversize
    lines, any chunking); each run's lines start and end like an update (long ones when left
    in the read), and its sizes and JSON check agree with its lines. A read's short lines are
    taken as one run from ``bulk_min`` of them (fewer than in use, so that short reads meet it)."""
    from unittest import mock

    from bridge.core import framing
    from bridge.core.framing import JsonCheck, UpdateRun

    check = JsonCheck()

    data = b"".join(_line(k, n, bad) + end for k, n, bad, end in specs)
    if not final_lf:
        data = data[:-1]
    runs = LineSplitter(max_line)
    got: list = []
    pos = 0
    with mock.patch.object(framing, "BULK_MIN_LINES", bulk_min):
        for size in chunks:
            got += runs.feed_runs(data[pos : pos + size], *_RUNS)
            pos += size
        got += runs.feed_runs(data[pos:], *_RUNS) + runs.close()
    assert _expand(got) == split(data, max_line)
    for item in got:
        if type(item) is UpdateRun:
            lines = list(item)
            assert lines and all(x.startswith(_UP) for x in lines)
            assert item.cut is not None or all(len(x) >= _LONG and x.endswith(b"}") for x in lines)
            assert item.nbytes == sum(map(len, lines)) and len(item) == len(lines)
            assert item[0] == lines[0] and item[-1:] == lines[-1:]
            assert check.run(item) == check.lines(lines) == all(map(check.line, lines))


def test_long_update_lines_come_as_one_run_and_other_lines_cut_out() -> None:
    from bridge.core.framing import JsonCheck, UpdateRun

    up, other, short = _line(0, _LONG, False), _line(2, _LONG, False), _line(0, 10, False)
    got = LineSplitter().feed_runs(b"x\n" + b"\n".join([up, up, other, up, short, up]) + b"\n", *_RUNS)
    assert [type(x).__name__ for x in got] == ["bytes", "UpdateRun", "bytes", "UpdateRun", "bytes", "bytes"]
    assert list(got[1]) == [up, up] and got[2] == other and list(got[3]) == [up]
    assert got[4:] == [short, up]  # after a short line the read's rest is cut out line by line
    bad = _line(0, _LONG, True)
    (run,) = LineSplitter().feed_runs(b"\n" + up + b"\n" + bad + b"\n", *_RUNS)[1:]
    assert type(run) is UpdateRun and list(run) == [up, bad]
    assert not JsonCheck().run(run) and not JsonCheck().lines(list(run)) and JsonCheck().lines([up, up])


def test_a_read_of_short_update_lines_comes_as_one_run_with_the_line_it_completes() -> None:
    """A read of BULK_MIN_LINES or more short lines, all updates, is one run (cut out with
    their LFs, none stripped); the line the read's first LF completes joins it when it is an
    update. One other line among them, or fewer lines, and every line is cut out on its own."""
    from bridge.core.framing import BULK_MIN_LINES, JsonCheck, UpdateRun

    up = _line(0, 10, False)
    n = BULK_MIN_LINES
    splitter = LineSplitter()
    assert splitter.feed_runs(up[:20], *_RUNS) == []
    (run,) = splitter.feed_runs(up[20:] + b"\n" + (up + b"\n") * n + up[:5], *_RUNS)
    assert type(run) is UpdateRun and run.cut is not None
    assert list(run) == [up] * (n + 1) and len(run) == n + 1 and run.nbytes == (n + 1) * len(up)
    assert run[0] == up and run[1:3] == [up, up] and JsonCheck().run(run)
    assert splitter.buffered == 5
    other = b'{"type":"turn_end"}'
    got = LineSplitter().feed_runs(other + b"\n" + (up + b"\n") * n, *_RUNS)
    assert [type(x) for x in got] == [bytes, UpdateRun] and len(got[1]) == n  # the first is not an update
    mixed = (up + b"\n") * n + other + b"\n" + up + b"\n"
    assert LineSplitter().feed_runs(b"\n" + mixed, *_RUNS) == [b"", *([up] * n), other, up]
    assert LineSplitter().feed_runs(b"\n" + (up + b"\n") * (n - 1), *_RUNS) == [b""] + [up] * (n - 1)
    bad = up[:-1] + b"\xff}"
    (run,) = LineSplitter().feed_runs((up + b"\n") * n + bad + b"\n", *_RUNS)
    assert list(run)[-1] == bad and not JsonCheck().run(run)


_VALID_UPDATE = (
    b'{"type":"message_update","usage":{"input":604,"output":9,"cost":{"total":0.5}},'
    b'"assistantMessageEvent":{"type":"text_delta","contentIndex":0,"delta":"\xc3\xa9\xe2\x80\x94 \\"x\\"\\n"}}'
)


@settings(max_examples=1000)
@given(
    st.lists(
        st.tuples(
            st.integers(min_value=0, max_value=len(_VALID_UPDATE)),
            st.sampled_from(["del", "ins", "flip", "cut", "dup"]),
        ),
        max_size=3,
    ),
    st.binary(max_size=3),
)
def test_the_json_check_says_yes_only_to_what_the_exact_parser_takes(edits, junk) -> None:
    """JsonCheck's True is certain (the fast path skips on it): a line it accepts is one JSON
    text that parse_line also takes. Its False only sends a line to parse_line."""
    import json

    from bridge.core.framing import JsonCheck

    line = _VALID_UPDATE
    for pos, how in edits:
        pos = min(pos, len(line))
        if how == "del":
            line = line[:pos] + line[pos + 1 :]
        elif how == "ins":
            line = line[:pos] + junk + line[pos:]
        elif how == "flip" and pos < len(line):
            line = line[:pos] + bytes([line[pos] ^ (junk[0] if junk else 0x80)]) + line[pos + 1 :]
        elif how == "cut":
            line = line[:pos]
        elif how == "dup":
            line = line[:pos] + line
    check = JsonCheck()
    if check.line(line):
        assert not isinstance(parse_line(line), RawLine)
        json.loads(line.decode("utf-8"))
    assert check.line(_VALID_UPDATE)  # a refusal leaves the parser usable


@given(
    st.binary(max_size=4),
    st.lists(st.binary(max_size=6), min_size=1, max_size=5),
    st.sampled_from([b"", b"a", b"\xff", b"a\xff", b"\xff\xff", b'{"type":"message_update",']),
)
def test_all_start_with_is_startswith_for_every_line(extra, lines, prefix) -> None:
    """The bulk check by the least and the greatest line (bytes order) says what ``startswith``
    says of each line, prefixes ending in 0xFF (no byte above it) included."""
    from bridge.core.framing import _all_start_with

    lines = lines + [prefix + x for x in lines] + [prefix + extra]
    for some in (lines, [prefix + x for x in lines], lines[:1]):
        assert _all_start_with(some, prefix) == all(x.startswith(prefix) for x in some)


@pytest.mark.parametrize("pad", [10, 300_000])
def test_top_scalars_are_what_json_parse_gives_or_none(pad: int) -> None:
    """``JsonCheck.top_scalars``: the members of one JSON object whose values are no objects or
    arrays, as ``JSON.parse`` gives them, when no key is given twice; else None (so the caller
    parses). Also past CHECK_MAX (a long run's ``agent_end``), which gets a parser of its own;
    the shared one stays usable."""
    from bridge.core.framing import CHECK_MAX, JsonCheck

    check = JsonCheck()
    body = b'"messages":[{"role":"user","content":"' + b"x" * pad + b'"}]'
    assert (len(body) > CHECK_MAX) == (pad > CHECK_MAX)
    cases = {
        b'{"type":"agent_end",' + body + b',"willRetry":false,"n":-1.5,"s":"x","z":null}': "agent_end",
        b'{"type":"agent_end",' + body + b"}  \n": "agent_end",
        b'{"type":"agent_end",' + body + b',"willRetry":true,"willRetry":false}': None,
        b'{"type":"agent_end",' + body + b',"type":"agent_settled"}': None,  # JSON.parse: agent_settled
        b'{"type":"agent_end",' + body + b',"type":"agent_end"}': None,
        b'{"type":"agent_end",' + body: None,  # cut short
        b'{"type":"agent_end",' + body + b"} x": None,
        b'{"type":7,' + body + b"}": 7,  # (the session wants the type its first bytes say)
        b'{"kind":"agent_end",' + body + b"}": None,
        b'[{"type":"agent_end"}]': None,
        b'{"type":"agent_end",' + body + b',"n":1e999}': None,  # JavaScript reads it: don't know
        # simdjson looks a key up cut at its NUL: the wrong member's value, or none at all
        b'{"type":"agent_end",' + body + b',"a\\u0000b":1,"a":2}': None,
        b'{"type":"agent_end",' + body + b',"\\u0000":1}': None,
    }
    for line, kind in cases.items():
        got = check.top_scalars(line)
        assert (got and got.get("type")) == kind, line[:40] + line[-40:]
        if got is not None:
            full = orjson.loads(line)
            assert got == {k: v for k, v in full.items() if not isinstance(v, (dict, list))}
    assert check.line(_VALID_UPDATE)


_JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(10**20), 10**20)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(st.sampled_from('ab,[]{}":\\\u00e9\U0001f600 '), max_size=6),
    lambda inner: (
        st.lists(inner, max_size=5)
        | st.dictionaries(st.text(st.sampled_from('ab,[]{}"\\'), max_size=3), inner, max_size=5)
    ),
    max_leaves=30,
)


@given(
    st.dictionaries(st.text(st.sampled_from('tab,[]"\\\x00'), max_size=3), _JSON_VALUES, max_size=6),
    st.sampled_from([(",", ":"), (", ", ": "), (" ,\n", ":\t")]),
    st.lists(
        st.tuples(st.integers(0, 10**6), st.sampled_from([b"", *(bytes([c]) for c in b',[]{}":\\ 1\xff')])), max_size=2
    ),
    st.sampled_from([1, 3, 8, 32]),
)
@settings(max_examples=1500, deadline=None)
def test_a_line_checked_in_pieces_is_decided_as_checked_whole(value, separators, edits, piece) -> None:
    """A line too dense for one simdjson document is checked in pieces cut at commas
    (``framing._pieces``): its answers, yes or no, and its top-level scalars are those of the
    whole line checked at once (a key with a NUL, as the pieces' made-up key has, is a "don't
    know" either way), for JSON texts and for what an edit (a byte dropped, replaced or
    added where it breaks the most: commas, brackets, quotes, escapes) makes of them."""
    import json
    from unittest import mock

    from bridge.core import framing

    line = json.dumps({"type": "some_event", **value}, separators=separators, ensure_ascii=False).encode()
    for at, byte in edits:
        at %= len(line) + 1
        line = line[:at] + byte + line[at + (1 if byte == b"" or at % 2 else 0) :]
    check = framing.JsonCheck()
    with mock.patch.object(framing, "PIECE", piece), mock.patch.object(framing, "WHOLE_MAX", 0):
        assert (check._big(line, scalars=False) is not None) == check.line(line), line
        assert check._big(line, scalars=True) == check.top_scalars(line), line
