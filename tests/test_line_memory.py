"""Issue 35, "lines not built unless needed": a line whose contents nothing reads is checked,
not built, at any size under the line limit (framing's module comment, ``JsonCheck``).

Each case runs in a fresh interpreter: a 60 MB line of small objects is fed in 64 KiB reads
through a :class:`~bridge.core.framing.LineSplitter` and a default
:class:`~bridge.core.session.Session` (what the live bridge does, no process), and the
interpreter's peak RSS (``VmHWM``) is read. Memory, not time: simdjson's buffers are C++
allocations ``tracemalloc`` cannot see, so RSS is measured. Built by orjson, such a line peaks
at ~1.9 GB.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bridge import open_bridge
from bridge.core.lifecycle.config import BridgeConfig
from bridge.profiles.command import CommandProfile
from tests.helpers_live import fake_engine_argv

ROOT = Path(__file__).resolve().parent.parent

PEAK_MAX_MB = 400

_SCRIPT = r"""
import sys
from bridge.core.framing import LineSplitter
from bridge.core.session import Session

head, want = sys.argv[1].encode(), sys.argv[2]
s = Session(("clear_queue",))
s.send({"type": "prompt", "id": "p", "message": "x"})
splitter = LineSplitter()
seen = []
chunk = b"{}," * 21845  # 64 KiB of small objects
for data in [head + b'"x":[', *[chunk] * (60_000_000 // len(chunk)), b'{}],"n":7}\n']:
    for item in s.observe_batch(splitter.feed(data)):
        seen.append((item.idx, getattr(item, "parsed", None)))
del splitter
assert s.observations == 1 and s.tracker.gap is None, (s.observations, s.tracker.gap)
(idx, parsed), = seen
if want != "-":
    assert parsed == {"type": want, "n": 7}, sorted(parsed)  # (keys: never a built line's repr)
for row in open("/proc/self/status"):
    if row.startswith("VmHWM:"):
        print(int(row.split()[1]) // 1024)
"""


@pytest.mark.parametrize(
    ("head", "parsed"),
    [
        ('{"type":"some_event",', "some_event"),  # a type nothing reads
        ('{"type":"agent_end",', "agent_end"),  # read for its type and top-level scalars only
        ('{"type":"message_update",', "-"),  # nobody streams it: checked, never parsed
    ],
)
def test_a_60_mb_line_nothing_reads_costs_under_400_mb(head: str, parsed: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", _SCRIPT, head, parsed], capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    peak = int(done.stdout.split()[-1])
    assert peak < PEAK_MAX_MB, f"peak RSS {peak} MB"


# -- the live paths (issue 42): the bridge process's own peak, each door that reads lines ------

#: An engine that answers any command and runs each prompt with one 60 MB ``message_update``
#: line of ``{}`` objects (written a piece at a time: the engine never holds it), its delta
#: "ok" the only text.
_ENGINE = r"""
import json, sys
out = sys.stdout.buffer
def w(obj):
    out.write(json.dumps(obj, separators=(",", ":")).encode() + b"\n")
for raw in sys.stdin.buffer:
    cmd = json.loads(raw)
    kind, rid = cmd.get("type"), cmd.get("id")
    if kind != "prompt":
        w({"type": "response", "id": rid, "command": kind, "success": True})
        out.flush()
        continue
    user = {"role": "user", "content": [{"type": "text", "text": cmd["message"]}], "timestamp": 1}
    reply = {"role": "assistant", "content": [{"type": "text", "text": "ok"}], "stopReason": "stop"}
    w({"id": rid, "type": "response", "command": "prompt", "success": True, "data": {"disposition": "started"}})
    for line in ({"type": "agent_start"}, {"type": "turn_start"}, {"type": "message_start", "message": user},
                 {"type": "message_end", "message": user}, {"type": "message_start", "message": {**reply, "content": []}}):
        w(line)
    out.write(b'{"type":"message_update","assistantMessageEvent":{"type":"text_delta","contentIndex":0,"delta":"ok"},"x":[')
    chunk = b"{}," * 21845
    for _ in range(60_000_000 // len(chunk)):
        out.write(chunk)
    out.write(b"{}]}\n")
    for line in ({"type": "message_end", "message": reply}, {"type": "turn_end", "message": reply, "toolResults": []},
                 {"type": "agent_end", "messages": [user, reply]}, {"type": "agent_settled", "aborted": False}):
        w(line)
    out.flush()
"""

#: The bridge's command line run in this interpreter (``bridge.cli.main``), its own peak after.
_CLI = r"""
import sys
from bridge.cli import main
code = main(sys.argv[1:])
for row in open("/proc/self/status"):
    if row.startswith("VmHWM:"):
        print("peak", int(row.split()[1]) // 1024, file=sys.stderr)
sys.exit(code)
"""

#: The Python API, ``stream`` and ``events`` as argv 2 and 3 say, in this interpreter.
_API = r"""
import sys, trio
from bridge import open_bridge
from bridge.profiles.command import CommandProfile
stream, events = sys.argv[2] == "1", sys.argv[3] == "1"
async def main():
    async with open_bridge(CommandProfile([sys.executable, sys.argv[1]]), journal=False) as bridge:
        h = await bridge.submit("hi", stream=stream, events=events)
        text = "".join([piece async for piece in h.text()]) if stream else "ok"
        seen = [event.to_json().get("event") async for event in h.events()] if events else []
        receipt = await h.receipt()
        assert (receipt.state, receipt.reply, text) == ("finished", "ok", "ok"), (receipt, text)
        assert not events or "text" in seen, seen
trio.run(main)
for row in open("/proc/self/status"):
    if row.startswith("VmHWM:"):
        print("peak", int(row.split()[1]) // 1024, file=sys.stderr)
"""

_ACP = [
    {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": 1, "clientCapabilities": {}}},
    {"jsonrpc": "2.0", "id": 2, "method": "session/new", "params": {"cwd": "/", "mcpServers": []}},
    {
        "jsonrpc": "2.0",
        "id": 3,
        "method": "session/prompt",
        "params": {"sessionId": "s1", "prompt": [{"type": "text", "text": "hi"}]},
    },
]


def _jsonl(*values: object) -> bytes:
    return b"".join(json.dumps(value).encode() + b"\n" for value in values)


_DOORS = [
    ("run", ["run", "hi", "--no-journal", "--json"], b"", b'"state":"finished"'),
    ("run (journal)", ["run", "hi", "--json", "--journal", "{tmp}/j.jsonl"], b"", b'"state":"finished"'),
    (
        "run (full journal)",
        ["run", "hi", "--json", "--journal", "{tmp}/j.jsonl", "--journal-full"],
        b"",
        b'"state":"finished"',
    ),
    (
        "serve",
        ["serve", "--no-journal"],
        _jsonl({"type": "prompt", "id": "p", "message": "hi"}),
        b'"state":"finished"',
    ),
    (
        "serve (events)",
        ["serve", "--no-journal"],
        _jsonl({"type": "prompt", "id": "p", "message": "hi", "events": True, "stream": True}),
        b'"state":"finished"',
    ),
    ("acp", ["acp", "--no-journal"], None, b'"stopReason":"end_turn"'),
    ("api", ["0", "0"], None, None),
    ("api (stream)", ["1", "0"], None, None),
    ("api (events)", ["0", "1"], None, None),
]


@pytest.mark.parametrize(("door", "argv", "stdin", "want"), _DOORS, ids=[door[0] for door in _DOORS])
def test_a_60_mb_line_costs_each_door_under_400_mb(
    tmp_path: Path, door: str, argv: list[str], stdin: bytes | None, want: bytes | None
) -> None:
    """Issue 42: one 60 MB ``message_update`` line of ``{}`` objects peaked ``bridge run`` at 1.9
    GB (built whole by orjson to read its delta). Every door that reads the engine's lines, with
    the prompt's text or events streamed and without: the bridge process's own peak RSS (its
    ``VmHWM``, not the engine's) stays under :data:`PEAK_MAX_MB`."""
    engine = tmp_path / "engine.py"
    engine.write_text(_ENGINE)
    if door.startswith("api"):
        cmd = [sys.executable, "-c", _API, str(engine), *argv]
    else:
        args = [arg.replace("{tmp}", str(tmp_path)) for arg in argv]
        cmd = [sys.executable, "-c", _CLI, *args, "--", sys.executable, str(engine)]
    if door == "acp":
        code, out, err = _acp(cmd)
    else:
        done = subprocess.run(cmd, input=stdin, capture_output=True, timeout=300, check=False, cwd=ROOT)
        code, out, err = done.returncode, done.stdout, done.stderr.decode(errors="replace")
    assert code == 0, err[-2000:]
    if want is not None:
        assert want in out, out[-2000:]
    peak = int(err.split("peak ")[-1].split()[0])
    assert peak < PEAK_MAX_MB, f"{door}: peak RSS {peak} MB"


def _acp(cmd: list[str]) -> tuple[int, bytes, str]:
    """``bridge acp``: a session opened (it is ``s1``), its prompt's answer read, then stdin's EOF."""
    with subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT) as proc:
        assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
        try:
            for message in _ACP:
                proc.stdin.write(_jsonl(message))
                proc.stdin.flush()
                answer = b"{}"
                while json.loads(answer).get("id") != message["id"]:
                    answer = proc.stdout.readline()
                    assert answer, proc.stderr.read().decode(errors="replace")[-2000:]
            proc.stdin.close()
            return proc.wait(timeout=60), answer, proc.stderr.read().decode(errors="replace")
        finally:
            if proc.poll() is None:
                proc.kill()


# -- a prompt too big for the engine's lines (issue 42) ----------------------------------------


async def test_a_prompt_over_half_the_line_limit_is_refused_at_submit_not_ended_in_a_gap() -> None:
    """Issue 42: a prompt just under the line limit was accepted, and ended
    ``outcome-unknown``/``gap`` after its run: Pi writes it back whole (the user message's
    ``message_start``/``message_end``, ``agent_end``), and that echo was oversize. A prompt past
    half the limit (``prompt_room``, JSON-escaped) is refused at the door, as any argument that
    cannot work is; one within it runs to ``finished`` with its echo read."""
    config = BridgeConfig(max_line=4096)
    async with open_bridge(CommandProfile(fake_engine_argv()), config=config, journal=False) as bridge:
        with pytest.raises(
            ValueError, match=r"at least 2,100 bytes .* half the engine's line limit \(2,048 of 4,096\)"
        ):
            bridge.submit_nowait("x" * 2100)
        with pytest.raises(ValueError, match="2,050 bytes"):
            bridge.submit_nowait('"' * 1025)  # (each quote is two bytes on the line)
        h = await bridge.submit("y" * 2000)
        receipt = await h.receipt()
        assert (receipt.state, receipt.reason) == ("finished", None), receipt


def test_serve_answers_a_prompt_too_big_for_the_engines_lines_with_an_error_and_goes_on() -> None:
    """Through ``bridge serve`` (the 64 MiB line limit): a prompt line of 40 MB is read (under
    the controller's own limit) and answered with an error naming the bound; the next prompt
    runs."""
    big = {"type": "prompt", "id": "big", "message": "x" * 40_000_000}
    done = subprocess.run(
        [sys.executable, "-m", "bridge", "serve", "--no-journal", "--", *fake_engine_argv()],
        input=_jsonl(big, {"type": "prompt", "id": "p2", "message": "hi"}),
        capture_output=True,
        timeout=120,
        check=False,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    replies = [json.loads(line) for line in done.stdout.splitlines()]
    errors = [r for r in replies if r.get("type") == "error"]
    assert len(errors) == 1 and "half the engine's line limit" in errors[0]["error"], errors
    assert errors[0].get("line") == 1, errors
    receipts = {r["receipt"]["request"]: r["receipt"]["state"] for r in replies if r.get("type") == "receipt"}
    assert receipts == {"p2": "finished"}, replies


def test_run_refuses_a_prompt_on_stdin_too_big_for_the_engines_lines_without_reading_it_whole() -> None:
    """``bridge run -``: stdin is read up to the most a prompt may be, and one byte more; a
    bigger prompt is the set-up error (exit 2) naming the bound."""
    done = subprocess.run(
        [sys.executable, "-m", "bridge", "run", "-", "--no-journal", "--", *fake_engine_argv()],
        input=b"x" * 40_000_000,
        capture_output=True,
        timeout=120,
        check=False,
        cwd=ROOT,
    )
    assert done.returncode == 2, done.stderr[-2000:]
    assert b"the prompt on stdin is over 33,554,432 bytes, more than half" in done.stderr, done.stderr[-2000:]


def test_acp_answers_a_prompt_too_big_for_the_engines_lines_with_invalid_params_and_goes_on() -> None:
    """Through ``bridge acp``: ``session/prompt`` with a 34 MB text is answered ``-32602`` naming
    the bound (never accepted, so no prompt runs); the next prompt runs."""
    argv = [sys.executable, "-m", "bridge", "acp", "--no-journal", "--", *fake_engine_argv()]
    big = {**_ACP[2], "params": {"sessionId": "s1", "prompt": [{"type": "text", "text": "x" * 34_000_000}]}}
    small = {**_ACP[2], "id": 4}
    with subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=ROOT) as proc:
        assert proc.stdin is not None and proc.stdout is not None
        answers: dict[object, dict[str, object]] = {}
        try:
            for message in (*_ACP[:2], big, small):
                proc.stdin.write(_jsonl(message))
                proc.stdin.flush()
                while message["id"] not in answers:
                    got = json.loads(proc.stdout.readline() or b"null")
                    assert got is not None, "the agent ended early"
                    if "id" in got:
                        answers[got["id"]] = got
            proc.stdin.close()
            assert proc.wait(timeout=60) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
    error = answers[3].get("error")
    assert isinstance(error, dict) and error["code"] == -32602, answers[3]
    assert "half the engine's line limit" in str(error["message"]), error
    assert "end_turn" in str(answers[4].get("result")), answers[4]
