"""``bridge serve``'s protocol messages (``bridge/controller/messages.py``), without a process:
a controller line becomes a typed command or a named error; each reply's JSON is byte for byte
what the protocol says (``"type"`` first, fields in order, an error's id only when it has one).
The live loop is ``tests/test_serve.py``."""

from __future__ import annotations

import os
import re
from typing import Any

import attrs
import pytest
import trio

from bridge.controller import stdin
from bridge.controller.messages import (
    COMMAND_TYPES,
    KEYS,
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
from bridge.core.framing import LineSplitter, Oversize
from bridge.core.images import image_problem
from bridge.core.prompts import PoolPromptOptions
from bridge.transcript import dumps


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def test_the_wire_prompt_takes_the_options_declared_once() -> None:
    """A ``prompt`` line's keys, the :class:`Prompt`'s fields and the API's prompt options
    (bridge.core.prompts, a pool's: ``conversation`` too) are the same options, in camelCase on
    the wire: an option added to one and not the others fails here (on the wire it would be
    refused, or read and dropped)."""
    declared = set(PoolPromptOptions.__optional_keys__)
    fields = {f.name for f in attrs.fields(Prompt)} - {"id", "message", "wanted"} | {"provider", "model", "thinking"}
    assert fields == declared
    assert set(KEYS["prompt"]) - {"id", "message"} == {_camel(name) for name in declared}


def test_a_prompts_options_are_what_the_bridges_submit_is_given() -> None:
    full = b'{"type":"prompt","id":"a","message":"x","stream":true,"timeout":1,"images":[],"events":true,'
    full += b'"stallTimeout":0,"model":"p/m","thinking":"low","budgetUsd":1,"budgetTokens":2,"trace":{"a":"b"}}'
    cmd = parse_command(full)
    assert isinstance(cmd, Prompt)
    assert cmd.options() == {
        "stream": True,
        "timeout": 1,
        "images": [],
        "events": True,
        "stall_timeout": 0,
        "provider": None,
        "model": "p/m",  # as the line gave it: a refusal says how it was read
        "thinking": "low",
        "budget_usd": 1,
        "budget_tokens": 2,
        "trace": {"a": "b"},
    }


def test_a_prompt_line_becomes_a_prompt_with_its_defaults() -> None:
    assert parse_command(b'{"type":"prompt","id":"a","message":"hi"}') == Prompt("a", "hi")


def test_a_prompt_keeps_stream_timeout_and_images_as_given() -> None:
    image = {"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png"}
    line = b'{"type":"prompt","id":"a","message":"hi","stream":true,"timeout":3,"images":[%s]}' % dumps(image)
    cmd = parse_command(line)
    assert cmd == Prompt("a", "hi", stream=True, timeout=3, images=[image])
    assert isinstance(cmd, Prompt) and type(cmd.timeout) is int


def test_stop_status_and_shutdown_lines() -> None:
    assert parse_command(b'{"type":"stop","id":"a"}') == Stop("a")
    assert parse_command(b'{"type":"status"}') == Status()
    assert parse_command(b'{"type":"shutdown"}') == Shutdown()


def test_every_key_a_command_takes_is_taken() -> None:
    """The table of known keys is the parser's: a line with each key a command takes parses."""
    assert set(KEYS) == set(COMMAND_TYPES)
    full = b'{"type":"prompt","id":"a","message":"x","stream":true,"timeout":1,"images":[],"events":true,'
    full += b'"stallTimeout":0,"provider":"p","model":"m","thinking":"low"}'
    assert isinstance(parse_command(full), Prompt)
    assert parse_command(b'{"type":"configure","provider":"p","model":"m","thinking":"low"}') is not None


@pytest.mark.parametrize(
    ("line", "error"),
    [
        # A misspelling: the line is refused, naming the key and the one it is closest to.
        (
            b'{"type":"prompt","id":"a","message":"x","stallTimout":60}',
            'unknown key "stallTimout" in prompt: did you mean "stallTimeout"?',
        ),
        (
            b'{"type":"prompt","id":"a","message":"x","thinkng":"high"}',
            'unknown key "thinkng" in prompt: did you mean "thinking"?',
        ),
        (b'{"type":"configure","modle":"m"}', 'unknown key "modle" in configure: did you mean "model"?'),
        # Checked right after the type: a misspelt "message" is named as such, not as missing.
        (b'{"type":"prompt","id":"a","mesage":"x"}', 'unknown key "mesage" in prompt: did you mean "message"?'),
        # A key from nowhere (a later bridge's, say): named, with what the command takes.
        (
            b'{"type":"prompt","id":"a","message":"x","priority":1}',
            'unknown key "priority" in prompt (prompt takes id, message, stream, timeout, images, events, '
            "stallTimeout, conversation, provider, model, thinking, budgetUsd, budgetTokens, trace)",
        ),
        (b'{"type":"shutdown","id":7}', 'unknown key "id" in shutdown (shutdown takes no other key)'),
        (b'{"type":"stop","id":"a","why":"x"}', 'unknown key "why" in stop (stop takes id)'),
        (
            b'{"type":"prompt","id":"a","message":"x","stallTimout":1,"thinkng":"low"}',
            'unknown keys "stallTimout" (did you mean "stallTimeout"?), "thinkng" (did you mean "thinking"?) in prompt',
        ),
    ],
)
def test_a_key_the_command_does_not_take_refuses_the_line_naming_it(line: bytes, error: str) -> None:
    with pytest.raises(ControllerError) as e:
        parse_command(line)
    assert str(e.value) == error


def test_an_unknown_key_error_is_bounded() -> None:
    """At most five keys named, each cut at 40 characters: a line is not echoed back whole."""
    keys = ",".join(f'"{c * 100}":1' for c in "abcdefgh")
    with pytest.raises(ControllerError) as e:
        parse_command(f'{{"type":"status",{keys}}}'.encode())
    text = str(e.value)
    assert text.startswith('unknown keys "' + "a" * 40 + '…", "' + "b" * 40 + '…"')
    assert " and 3 more in status (status takes no other key)" in text and len(text) < 300


@pytest.mark.parametrize(
    ("line", "error"),
    [
        (b"nope", "line is not JSON"),
        (b"[1]", "line is JSON but not an object"),
        (b'{"message":"\xff"}', "line is not valid UTF-8"),
        (b'{"type":null}', 'missing "type"'),
        (
            b'{"type":"steer"}',
            "unknown type 'steer' (expected prompt, stop, status, shutdown, configure, new_conversation, models, answer or compact)",
        ),
        (b'{"type":"stop"}', 'stop needs an "id"'),
        (b'{"type":"prompt","id":"","message":"x"}', '"id" must be a non-empty string'),
        (b'{"type":"prompt","id":"a"}', 'prompt needs a "message" string'),
        (b'{"type":"prompt","id":"a","message":"x","stream":null}', '"stream" must be true or false'),
        (b'{"type":"prompt","id":"a","message":"x","timeout":1e999}', '"timeout" must be a positive number of seconds'),
        (b'{"type":"prompt","id":"a","message":"x","timeout":false}', '"timeout" must be a positive number of seconds'),
        (b'{"type":"prompt","id":"a","message":"x","images":"img"}', '"images" must be a list'),
        # A bad model or thinking level is named under its own key.
        (
            b'{"type":"configure","model":"/thinker"}',
            '"model": \'/thinker\' alone must be "provider/id", both named (or give "provider" too)',
        ),
        (
            b'{"type":"prompt","id":"a","message":"x","model":"scripted/"}',
            '"model": \'scripted/\' alone must be "provider/id", both named (or give "provider" too)',
        ),
        (
            b'{"type":"configure","thinking":"hot"}',
            "\"thinking\": 'hot' is not one of off, minimal, low, medium, high, xhigh, max",
        ),
        # The first problem in the rules' order is the one named.
        (b'{"type":"prompt","message":1,"stream":2}', 'prompt needs an "id"'),
    ],
)
def test_a_bad_line_is_a_named_error(line: bytes, error: str) -> None:
    with pytest.raises(ControllerError) as e:
        parse_command(line)
    assert str(e.value) == error


def test_an_oversize_line_says_its_length() -> None:
    with pytest.raises(ControllerError, match=r"^line too long \(123456789 bytes; a line may have 67108864\)$"):
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


@pytest.mark.parametrize(
    "line, key",
    [
        (b'{"type":"prompt","id":"a","id":"b","message":"x"}', "id"),
        (b'{"type":"stop","id":"a","type":"stop"}', "type"),
        (
            b'{"type":"prompt","id":"a","message":"x","images":[{"type":"image","data":"QQ==","data":"Qg==","mimeType":"image/png"}]}',
            "data",
        ),
    ],
)
def test_a_key_given_twice_refuses_the_line(line: bytes, key: str) -> None:
    """JSON keeps the last of a key given twice: a prompt would go under one of two ids
    without a word. Refused, naming the key; the same line without the twin is taken."""
    with pytest.raises(ControllerError, match=f"the key '{key}' is given twice"):
        parse_command(line)
    assert parse_command(b'{"type":"prompt","id":"a","message":"x \\u00e9 \\"id\\":\\"b\\""}').id == "a"


@pytest.mark.parametrize(
    "image, says",
    [
        ("abc", "images[0] is not an object"),
        ({"type": "text", "data": "QQ==", "mimeType": "image/png"}, 'images[0]: "type" must be "image"'),
        ({"type": "image", "mimeType": "image/png"}, 'images[0]: "data" must be the image\'s bytes in base64'),
        ({"type": "image", "data": "not base64!", "mimeType": "image/png"}, 'images[0]: "data" is not base64'),
        ({"type": "image", "data": "QQ=", "mimeType": "image/png"}, 'images[0]: "data" is not base64'),
        ({"type": "image", "data": "QQ=="}, 'images[0]: "mimeType" must be an image type such as "image/png"'),
        ({"type": "image", "data": "QQ==", "mimeType": "text/html"}, '"mimeType" must be an image type'),
        ({"type": "image", "data": "QQ==", "mimeType": "image/png", "name": "x"}, "has the key 'name'"),
    ],
)
def test_an_image_pi_could_not_read_is_refused_naming_what_is_wrong(image: Any, says: str) -> None:
    """Pi fails a prompt whose image has no mimeType in Node's words, and leaves out an image
    whose data is not base64 while the receipt says finished (a new-user trial): each is the
    controller's error now, named, before anything is accepted -- in serve and the Python API."""
    line = b'{"type":"prompt","id":"a","message":"x","images":[%s]}' % dumps(image)
    with pytest.raises(ControllerError, match=re.escape(says)):
        parse_command(line)
    assert image_problem([{"type": "image", "data": "QQ==", "mimeType": "image/png"}]) is None
    assert says.split(":")[-1].strip() in (image_problem([image]) or "")


async def test_the_controllers_one_line_reader_numbers_skips_blanks_and_never_holds_a_long_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 43: ``serve``, ``serve --engines`` and ``acp`` read stdin with one bounded reader
    (:func:`bridge.controller.stdin.read_lines`). Lines come numbered from 1 (blank ones counted,
    not handed on), a final line without LF included; a line past the limit comes as an
    :class:`Oversize` (its head and length, for the error that answers it) while the reader
    holds no more than the limit of it: here 1 MiB through a limit of 100 bytes."""
    got: list[tuple[int, bytes | Oversize]] = []
    held: list[int] = []

    async def take(lineno: int, line: bytes | Oversize) -> None:
        got.append((lineno, line))

    read, write = os.pipe()
    try:

        async def writer() -> None:
            with os.fdopen(write, "wb") as out:
                for chunk in (b'{"a":1}\n\n  \n', b"x" * 100, b"y" * (1 << 20), b"\n", b'{"b":2}'):
                    await trio.to_thread.run_sync(out.write, chunk)
                    await trio.to_thread.run_sync(out.flush)

        class Watched(LineSplitter):
            def feed(self, data: bytes) -> list[bytes | Oversize]:
                out = super().feed(data)
                held.append(self.buffered)
                return out

        monkeypatch.setattr(stdin, "LineSplitter", Watched)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(writer)
            await stdin.read_lines(read, take, max_line=100)
    finally:
        os.close(read)
    assert [n for n, _ in got] == [1, 4, 5], got
    assert got[0][1] == b'{"a":1}' and got[2][1] == b'{"b":2}'
    oversize = got[1][1]
    assert isinstance(oversize, Oversize) and oversize.length == 100 + (1 << 20) and oversize.head.startswith(b"x")
    assert max(held) <= 101, max(held)
