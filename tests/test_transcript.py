"""SPEC §6: transcript v1 reader and writer; version 2 (one ``updates`` entry per run of deltas)."""

from __future__ import annotations

import io
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bridge.transcript import TranscriptError, TranscriptReader, TranscriptWriter, dumps
from bridge.transcript.format import _dumps_nested

HEADER = b'{"transcript":"pi-bridge","version":1}\n'


def read(data: bytes) -> list:
    return list(TranscriptReader(io.BytesIO(data), "t.jsonl"))


def test_header_is_read_with_clearing_and_meta():
    r = TranscriptReader(
        io.BytesIO(b'{"transcript":"pi-bridge","version":1,"clearing":["clear_queue"],"engine":"pi"}\n')
    )
    assert r.header.clearing == ("clear_queue",) and r.header.meta == {"engine": "pi"}


def test_newer_version_is_refused_politely():
    with pytest.raises(TranscriptError, match=r"t.jsonl:1: transcript version 3 is newer"):
        read(b'{"transcript":"pi-bridge","version":3}\n')


def test_not_a_transcript_is_refused():
    for head in (b"", b"hello\n", b'{"version":1}\n', b'{"transcript":"pi-bridge"}\n', b"[1]\n"):
        with pytest.raises(TranscriptError, match=r"t.jsonl:1:"):
            read(head)


def test_unknown_kind_names_the_line():
    with pytest.raises(TranscriptError, match=r't.jsonl:3: unknown entry kind "bogus"'):
        read(HEADER + b'{"recv":{}}\n{"bogus":1}\n')


def test_two_kinds_on_one_line_is_an_error():
    with pytest.raises(TranscriptError, match=r":2: .*several kinds"):
        read(HEADER + b'{"recv":{},"send":{}}\n')


def test_index_must_match_when_present():
    entries = read(HEADER + b'{"recv":{},"i":1}\n{"recv_raw":"x","i":2}\n{"recv":{}}\n')
    assert [e.i for e in entries] == [1, 2, 3]
    with pytest.raises(TranscriptError, match=r":3: \"i\" is 5 but this is observation 2"):
        read(HEADER + b'{"recv":{},"i":1}\n{"recv":{},"i":5}\n')


def test_time_is_kept():
    (e,) = read(HEADER + b'{"send":{"type":"prompt"},"t":1.5}\n')
    assert e.t == 1.5 and e.kind == "send"


def test_a_cut_off_last_line_is_dropped_and_reported():
    r = TranscriptReader(io.BytesIO(HEADER + b'{"recv":{}}\n{"recv":{"ty'), "t")
    assert len(list(r)) == 1 and r.truncated


def test_a_complete_last_line_without_lf_is_read():
    assert len(read(HEADER + b'{"recv":{}}')) == 1


def test_blank_lines_and_crlf_are_tolerated():
    assert len(read(HEADER + b'\n{"recv":{}}\r\n\n')) == 1


def test_a_byte_order_mark_before_the_header_is_passed_over():
    """A journal saved by an editor that writes a UTF-8 BOM (and CRLF) still reads; it was
    refused as 'header is not JSON (Expecting value: line 1 column 1 (char 0))'."""
    entries = read(b"\xef\xbb\xbf" + HEADER.replace(b"\n", b"\r\n") + b'{"recv":{}}\r\n')
    assert [e.kind for e in entries] == ["recv"]
    for mode in ("__iter__", "skipping_updates"):
        r = TranscriptReader(io.BytesIO(b"\xef\xbb\xbf" + HEADER + b'{"recv":{},"i":1}\n'), "t.jsonl")
        assert r.header.version == 1
        assert len(list(getattr(r, mode)())) == 1


def test_a_second_header_is_named_as_joined_journals():
    """``cat a.jsonl b.jsonl``: the second header was 'an entry has exactly one kind; this one
    has several kinds (transcript, version, …)'."""
    for mode in ("__iter__", "skipping_updates"):
        r = TranscriptReader(io.BytesIO(HEADER + b'{"recv":{},"i":1}\n' + HEADER + b'{"recv":{},"i":1}\n'), "t.jsonl")
        with pytest.raises(TranscriptError, match=r"^t.jsonl:3: a second transcript header: journals joined"):
            list(getattr(r, mode)())


def test_malformed_middle_line_is_an_error():
    with pytest.raises(TranscriptError, match=r":2: not JSON"):
        read(HEADER + b"{oops\n" + b'{"recv":{}}\n')


def test_writer_round_trips_hostile_text_one_entry_per_line():
    buf = io.BytesIO()
    w = TranscriptWriter(buf, clearing=("clear_queue",), engine="fake")
    nasty = 'a\nb\r\u2028\u2029\u0085\x00{"receipt":1}\n\ud83d'
    w.write("send", {"type": "prompt", "message": nasty}, t=0.25)
    w.write("recv", {"type": "x"}, i=1)
    w.write("recv_raw", nasty, i=2)
    w.flush()
    data = buf.getvalue()
    assert data.count(b"\n") == 4
    r = TranscriptReader(io.BytesIO(data))
    entries = list(r)
    assert r.header.clearing == ("clear_queue",) and r.header.meta == {"engine": "fake"}
    assert entries[0].value["message"] == nasty and entries[0].t == 0.25
    assert entries[2].value == nasty


def entries_both_ways(data: bytes) -> tuple[list, list]:
    slow = list(TranscriptReader(io.BytesIO(data), "t"))
    fast = list(TranscriptReader(io.BytesIO(data), "t").skipping_updates())
    return slow, fast


UPD = b'{"recv":{"type":"message_update","elided":300},"i":%d}\n'


def test_skipping_updates_counts_runs_and_reads_everything_else_the_same():
    data = (
        HEADER
        + b'{"send":{"type":"prompt","id":"p1"}}\n'
        + b"".join(UPD % i for i in range(1, 4))
        + b'{"recv":{"type":"agent_settled"},"i":4}\n'
        + UPD % 5
        + b'{"recv":{"type":"turn_end"}}'
    )
    slow, fast = entries_both_ways(data)
    assert [e.kind for e in fast] == ["send", "updates", "recv", "updates", "recv"]
    assert [e.value for e in fast if e.kind == "updates"] == [3, 1]
    assert [e.i for e in fast if e.kind == "recv"] == [4, 6]
    assert [e.i for e in slow if e.kind == "recv" and e.value.get("type") != "message_update"] == [4, 6]
    assert [e.line for e in fast if e.kind != "updates"] == [
        e.line for e in slow if e.value.get("type") != "message_update"
    ]


@pytest.mark.parametrize("size", [1, 2, 3, 7, 64, 1 << 20])
def test_skipping_updates_reads_the_same_whatever_its_read_size(size: int) -> None:
    """Lines that span many reads (a long ``recv``, read in pieces and joined once when its LF
    comes) and reads that hold many lines give the same entries, a cut-off last line too."""
    from unittest import mock

    from bridge.transcript import reader as reader_module

    long_line = b'{"recv":{"type":"turn_end","pad":"' + b"x" * 300 + b'"},"i":5}\n'
    data = (
        HEADER
        + b'{"send":{"type":"prompt","id":"p1"}}\n'
        + b"".join(UPD % i for i in range(1, 4))
        + b'{"recv":{"type":"agent_settled"},"i":4}\n'
        + long_line
        + UPD % 6
        + b'{"recv":{"type":"turn_end"'  # cut off
    )

    def runs_joined(entries: list) -> list:
        """A run split between reads comes as several ``updates`` entries: joined here."""
        out: list = []
        for e in entries:
            if e.kind == "updates" and out and out[-1][0] == "updates":
                out[-1] = ("updates", out[-1][1] + e.value, e.i)
            else:
                out.append((e.kind, e.value, e.i) if e.kind == "updates" else (e.kind, e.value, e.i, e.t, e.line))
        return out

    want = list(TranscriptReader(io.BytesIO(data), "t").skipping_updates())
    with mock.patch.object(reader_module, "UPDATES_READ", size):
        r = TranscriptReader(io.BytesIO(data), "t")
        got = list(r.skipping_updates())
    assert runs_joined(got) == runs_joined(want) and r.truncated
    assert [e[0] for e in runs_joined(got)] == ["send", "updates", "recv", "recv", "updates"]


def test_a_line_lost_inside_a_skipped_run_is_still_caught_by_the_next_index():
    data = HEADER + UPD % 1 + UPD % 3 + b'{"recv":{"type":"agent_settled"},"i":4}\n'
    with pytest.raises(TranscriptError, match=r":4: \"i\" is 4 but this is observation 3"):
        list(TranscriptReader(io.BytesIO(data), "t").skipping_updates())


def test_a_cut_off_last_line_is_dropped_in_both_modes():
    data = HEADER + UPD % 1 + b'{"recv":{"ty'
    reader = TranscriptReader(io.BytesIO(data), "t")
    assert [e.kind for e in reader.skipping_updates()] == ["updates"] and reader.truncated


# -- version 2: one ``updates`` entry for a run of message_update lines -------------------------

HEADER2 = b'{"transcript":"pi-bridge","version":2}\n'
RUN = b'{"updates":{"count":%d,"elided":%d},"i":%d,"t":0.5}\n'


def test_a_version_2_run_counts_its_observations_in_both_reading_modes():
    data = (
        HEADER2
        + b'{"send":{"type":"prompt","id":"p1"}}\n'
        + b'{"recv":{"type":"agent_start"},"i":1}\n'
        + RUN % (3, 900, 2)
        + UPD % 5  # a version 1 style line may follow (a parsed update's lean form)
        + RUN % (2, 600, 6)
        + b'{"recv":{"type":"agent_settled"},"i":8}\n'
    )
    slow, fast = entries_both_ways(data)
    assert [e.kind for e in fast] == ["send", "recv", "updates", "updates", "updates", "recv"]
    assert [(e.value, e.i) for e in fast if e.kind == "updates"] == [(3, 4), (1, 5), (2, 7)]
    assert [e.i for e in slow if e.kind == "recv"] == [1, 2, 3, 4, 5, 6, 7, 8]
    expanded = [e for e in slow if e.kind == "recv" and e.value.get("elided", 0) is None]
    assert [e.i for e in expanded] == [2, 3, 4, 6, 7] and expanded[0].t == 0.5 and expanded[0].line == 4


def test_a_version_2_run_with_the_wrong_first_index_is_an_error():
    data = HEADER2 + b'{"recv":{"type":"agent_start"},"i":1}\n' + RUN % (3, 900, 3)
    for mode in (list, lambda r: list(r.skipping_updates())):
        with pytest.raises(TranscriptError, match=r':3: "i" is 3 but this run starts at observation 2'):
            mode(TranscriptReader(io.BytesIO(data), "t"))
    after = HEADER2 + RUN % (3, 900, 1) + b'{"recv":{"type":"agent_settled"},"i":3}\n'
    with pytest.raises(TranscriptError, match=r':3: "i" is 3 but this is observation 4'):
        list(TranscriptReader(io.BytesIO(after), "t").skipping_updates())


def test_a_malformed_run_entry_is_refused():
    for bad in (b'{"updates":3}\n', b'{"updates":{"count":0,"elided":0}}\n', b'{"updates":{"count":2}}\n'):
        with pytest.raises(TranscriptError, match=r":2: an updates entry holds"):
            read(HEADER2 + bad)


def test_a_run_entry_in_a_version_1_file_is_an_unknown_kind():
    with pytest.raises(TranscriptError, match=r':2: unknown entry kind "updates" \(this reader knows, in version 1'):
        read(HEADER + RUN % (1, 300, 1))


def test_the_writer_writes_version_2_by_default_and_version_1_on_request():
    buf = io.BytesIO()
    TranscriptWriter(buf).write("updates", {"count": 2, "elided": 10}, i=1)
    assert buf.getvalue().startswith(HEADER2)
    old = TranscriptWriter(io.BytesIO(), version=1)
    with pytest.raises(ValueError, match="unknown transcript kind 'updates' \\(version 1\\)"):
        old.write("updates", {"count": 2, "elided": 10}, i=1)


# -- values nested as deep as an engine may write them --------------------------------------


def nested(depth: int) -> bytes:
    """An object ``depth`` levels deep (the object itself is the first)."""
    return b'{"type":"x","a":' + b"[" * (depth - 1) + b"]" * (depth - 1) + b"}"


def test_a_recv_entry_around_a_line_nested_1024_deep_is_read():
    """orjson reads an engine line nested 1,024 deep, so the live bridge takes it and journals it
    one level deeper, past both parsers' limits: the reader still reads it (SPEC §6)."""
    entry = b'{"recv":' + nested(1024) + b',"i":1,"t":1.5e-05}\n'
    (e,) = read(HEADER + entry)
    assert (e.kind, e.i, e.t, e.value["type"]) == ("recv", 1, 1.5e-05, "x")
    assert dumps({"recv": e.value, "i": 1, "t": 1.5e-05}) + b"\n" == entry


def test_a_line_nested_past_any_limit_is_an_error_with_its_line_number():
    with pytest.raises(TranscriptError, match=r":2: not JSON \(nested too deep to read\)"):
        read(HEADER + b"[" * 100_000 + b"]" * 100_000 + b"\n")
    # Near the writer's shape, but not it: the same error, never a crash.
    with pytest.raises(TranscriptError, match=r":2: not JSON"):
        read(HEADER + b'{"recv":' + b"[" * 5000 + b"]" * 5000 + b',"i":3,"t":1.5,"x":1}\n')


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=30,
)


@given(json_values)
def test_the_deep_writer_writes_what_json_writes(value):
    assert _dumps_nested(value) == json.dumps(value, ensure_ascii=True, separators=(",", ":")).encode()


def test_dumps_writes_values_deeper_than_the_interpreter_recurses():
    deep: object = 1
    for _ in range(5000):
        deep = {"a": [deep]}
    data = dumps(deep)
    assert data == b'{"a":[' * 5000 + b"1" + b"]}" * 5000


def test_a_gzip_file_is_named_as_one():
    import gzip

    with pytest.raises(TranscriptError, match=r":1: a gzip file: gunzip it first"):
        read(gzip.compress(HEADER + b'{"recv":{}}\n'))


class _Endless(io.RawIOBase):
    """NUL bytes without end (``/dev/zero``, a sparse file): counts what was read and fails a
    test that reads far past the header's bound instead of letting it eat the machine."""

    def __init__(self) -> None:
        self.served = 0

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:  # type: ignore[no-untyped-def]
        assert self.served < 8 << 20, "read on past any header's length"
        b[:] = bytes(len(b))
        self.served += len(b)
        return len(b)


def test_a_first_line_without_end_is_refused_after_a_bounded_read():
    endless = _Endless()
    with pytest.raises(
        TranscriptError, match=r"t.jsonl:1: not a pi-bridge transcript \(no header: its first line runs past 1 MiB\)"
    ):
        TranscriptReader(io.BufferedReader(endless), "t.jsonl")
    assert endless.served <= 2 << 20
