"""``bridge serve``'s protocol messages (``bridge/controller/messages.py``), without a process:
a controller line becomes a typed command or a named error; each reply's JSON is byte for byte
what the protocol says (``"type"`` first, fields in order, an error's id only when it has one).
The live loop is ``tests/test_serve.py``."""

from __future__ import annotations

import pytest

from bridge.controller.messages import (
    Bye,
    ControllerError,
    LineError,
    Prompt,
    Ready,
    Reply,
    Shutdown,
    Status,
    StatusReport,
    Stop,
    Stopping,
    parse_command,
    to_wire,
)
from bridge.core.framing import Oversize
from bridge.transcript import dumps


def test_a_prompt_line_becomes_a_prompt_with_its_defaults() -> None:
    assert parse_command(b'{"type":"prompt","id":"a","message":"hi"}') == Prompt("a", "hi")


def test_a_prompt_keeps_stream_timeout_and_images_as_given() -> None:
    line = b'{"type":"prompt","id":"a","message":"hi","stream":true,"timeout":3,"images":[{"x":1}],"extra":0}'
    cmd = parse_command(line)
    assert cmd == Prompt("a", "hi", stream=True, timeout=3, images=[{"x": 1}])
    assert isinstance(cmd, Prompt) and type(cmd.timeout) is int


def test_stop_status_and_shutdown_lines() -> None:
    assert parse_command(b'{"type":"stop","id":"a"}') == Stop("a")
    assert parse_command(b'{"type":"status"}') == Status()
    assert parse_command(b'{"type":"shutdown","id":7}') == Shutdown()


@pytest.mark.parametrize(
    ("line", "error"),
    [
        (b"nope", "line is not JSON"),
        (b"[1]", "line is JSON but not an object"),
        (b'{"message":"\xff"}', "line is not valid UTF-8"),
        (b'{"type":null}', 'missing "type"'),
        (
            b'{"type":"steer"}',
            "unknown type 'steer' (expected prompt, stop, status, shutdown, configure, new_conversation, models or answer)",
        ),
        (b'{"type":"stop"}', 'stop needs an "id"'),
        (b'{"type":"prompt","id":"","message":"x"}', '"id" must be a non-empty string'),
        (b'{"type":"prompt","id":"a"}', 'prompt needs a "message" string'),
        (b'{"type":"prompt","id":"a","message":"x","stream":null}', '"stream" must be true or false'),
        (b'{"type":"prompt","id":"a","message":"x","timeout":1e999}', '"timeout" must be a positive number of seconds'),
        (b'{"type":"prompt","id":"a","message":"x","timeout":false}', '"timeout" must be a positive number of seconds'),
        (b'{"type":"prompt","id":"a","message":"x","images":"img"}', '"images" must be a list'),
        # The first problem in the rules' order is the one named.
        (b'{"type":"prompt","message":1,"stream":2}', 'prompt needs an "id"'),
    ],
)
def test_a_bad_line_is_a_named_error(line: bytes, error: str) -> None:
    with pytest.raises(ControllerError) as e:
        parse_command(line)
    assert str(e.value) == error


def test_an_oversize_line_says_its_length() -> None:
    with pytest.raises(ControllerError, match=r"^line too long \(123456789 bytes\)$"):
        parse_command(Oversize(123456789, b'{"type":"prompt"'))


@pytest.mark.parametrize(
    ("reply", "wire"),
    [
        (Ready("1.2.3", None), b'{"type":"ready","version":"1.2.3","journal":null}'),
        (Ready("1.2.3", "/j.jsonl"), b'{"type":"ready","version":"1.2.3","journal":"/j.jsonl"}'),
        (LineError("line is not JSON", 3), b'{"type":"error","error":"line is not JSON","line":3}'),
        (
            LineError.duplicate_id("a", 4),
            b'{"type":"error","error":"duplicate id \'a\': already used in this session","line":4,"id":"a"}',
        ),
        (
            LineError.unknown_id("b", 5),
            b'{"type":"error","error":"unknown id \'b\': no such prompt","line":5,"id":"b"}',
        ),
        (Stopping("a", "stop-1"), b'{"type":"stopping","id":"a","stop":"stop-1"}'),
        (Stopping("a", None), b'{"type":"stopping","id":"a","stop":null}'),
        (StatusReport({"held": "a", "queued": ["b"]}), b'{"type":"status","held":"a","queued":["b"]}'),
        (Bye(2), b'{"type":"bye","receipts":2}'),
    ],
)
def test_each_reply_is_written_exactly_so(reply: Reply, wire: bytes) -> None:
    assert dumps(to_wire(reply)) == wire
