"""``bridge serve`` end to end: a real subprocess, real pipes, the fake engine behind it.

Every read is bounded (``ServeProc.next``/``until`` fail after a timeout) and every
process is killed in a ``finally``, so a hang fails the test instead of the suite.
"""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import trio

from tests.helpers_live import FAKE, ROOT, ServeProc, fake_engine_argv, read_journal, wait_gone


@pytest.fixture
async def serve_factory(tmp_path: Path) -> AsyncIterator[Any]:
    procs: list[ServeProc] = []

    async def start(scenario: dict[str, Any] | None = None, *args: str, journal: str = "j.jsonl") -> ServeProc:
        sp = await ServeProc.start(
            tmp_path, fake_engine_argv(scenario or {}), "--journal", str(tmp_path / journal), *args
        )
        procs.append(sp)
        ready = await sp.next(timeout=15)
        assert ready is not None and ready["type"] == "ready", (ready, sp.stderr)
        return sp

    try:
        yield start
    finally:
        for sp in procs:
            await sp.kill()


def by_id(sp: ServeProc) -> dict[str, dict[str, Any]]:
    """The receipts the controller saw, by id; fails on a second receipt for an id."""
    counts = Counter(r["id"] for r in sp.receipts())
    assert all(n == 1 for n in counts.values()), f"more than one receipt for an id: {counts}"
    out = {}
    for r in sp.receipts():
        assert r["receipt"]["request"] == r["id"]
        out[r["id"]] = r["receipt"]
    return out


async def wait_held(sp: ServeProc, rid: str, queued: list[str] | None = None, timeout: float = 10.0) -> dict[str, Any]:
    """Ask ``status`` until ``rid`` holds the slot (and ``queued`` are waiting)."""
    with trio.fail_after(timeout):
        while True:
            await sp.send({"type": "status"})
            st = await sp.until(lambda line: line["type"] == "status")
            if st["held"] == rid and (queued is None or st["queued"] == queued):
                return st
            await trio.sleep(0.02)


async def finish(sp: ServeProc, how: str = "shutdown", timeout: float = 20.0) -> tuple[int, list[dict[str, Any]]]:
    if how == "shutdown":
        await sp.send({"type": "shutdown"})
    else:
        await sp.close_stdin()
    rest = await sp.read_all(timeout=timeout)
    code = await sp.wait(timeout=5)
    return code, rest


def assert_bye_last(sp: ServeProc) -> None:
    assert sp.lines, "no output"
    byes = [i for i, line in enumerate(sp.lines) if line["type"] == "bye"]
    assert byes == [len(sp.lines) - 1], f"bye must be the last line, once: {sp.lines[-5:]}"
    assert sp.lines[-1]["receipts"] == len(sp.receipts())


# -- the basics -------------------------------------------------------------------------------


async def test_ready_prompt_and_stream(serve_factory: Any, tmp_path: Path) -> None:
    sp: ServeProc = await serve_factory({"defaults": {"deltas": 5}})
    ready = sp.lines[0]
    assert ready["journal"] == str(tmp_path / "j.jsonl")
    assert isinstance(ready["version"], str)

    await sp.send({"type": "prompt", "id": "a", "message": "hello there"})
    ra = await sp.until(lambda line: line["type"] == "receipt")
    assert ra["id"] == "a"
    assert ra["receipt"]["state"] == "finished" and ra["receipt"]["reason"] is None
    assert ra["receipt"]["reply"] == "ok: hello there"

    await sp.send({"type": "prompt", "id": "b", "message": "stream me please", "stream": True})
    rb = await sp.until(lambda line: line["type"] == "receipt")
    assert rb["id"] == "b" and rb["receipt"]["state"] == "finished"
    texts = [line["text"] for line in sp.lines if line["type"] == "text" and line["id"] == "b"]
    assert len(texts) >= 2, sp.lines
    assert "".join(texts) == rb["receipt"]["reply"] == "ok: stream me please"
    assert not [line for line in sp.lines if line["type"] == "text" and line["id"] == "a"], "a did not ask to stream"

    code, _ = await finish(sp)
    assert code == 0, sp.stderr
    assert set(by_id(sp)) == {"a", "b"}
    assert_bye_last(sp)


BAD_LINES: list[tuple[bytes, str]] = [
    (b"this is not json", "not JSON"),
    (b"[1, 2, 3]", "not an object"),
    (b"42", "not an object"),
    (b'{"type":"frobnicate","id":"q"}', "unknown type"),
    (b'{"id":"q","message":"no type"}', '"type"'),
    (b'{"type":"prompt","message":"no id"}', '"id"'),
    (b'{"type":"prompt","id":42,"message":"int id"}', '"id"'),
    (b'{"type":"prompt","id":"","message":"empty id"}', '"id"'),
    (b'{"type":"prompt","id":"m1","message":42}', '"message"'),
    (b'{"type":"prompt","id":"m2"}', '"message"'),
    (b'{"type":"prompt","id":"t1","message":"x","timeout":-1}', '"timeout"'),
    (b'{"type":"prompt","id":"t2","message":"x","timeout":0}', '"timeout"'),
    (b'{"type":"prompt","id":"t3","message":"x","timeout":"soon"}', '"timeout"'),
    (b'{"type":"prompt","id":"t4","message":"x","timeout":true}', '"timeout"'),
    (b'{"type":"prompt","id":"s1","message":"x","stream":"yes"}', '"stream"'),
    (b'{"type":"prompt","id":"u1","message":"bad \xff\xfe utf8"}', "UTF-8"),
    (b'{"type":"stop"}', '"id"'),
    (b'{"type":"stop","id":7}', '"id"'),
    # A misspelt key refuses the prompt (it would run without its stall timeout): no receipt for k1.
    (b'{"type":"prompt","id":"k1","message":"x","stallTimout":5}', 'unknown key "stallTimout" in prompt: did you mean'),
    (b'{"type":"status","verbose":true}', 'unknown key "verbose" in status'),
]


async def test_bad_controller_lines(serve_factory: Any) -> None:
    sp: ServeProc = await serve_factory()
    await sp.send({"type": "prompt", "id": "d", "message": "first"})
    first = await sp.until(lambda line: line["type"] == "receipt")
    assert first["receipt"]["state"] == "finished"
    lineno = 1
    expected: list[tuple[int, str, str]] = []
    for raw, what in BAD_LINES:
        await sp.send(raw)
        lineno += 1
        expected.append((lineno, what, raw.decode("utf-8", "replace")))
    await sp.send({"type": "prompt", "id": "d", "message": "duplicate"})
    lineno += 1
    expected.append((lineno, "duplicate", "duplicate id d"))
    await sp.send({"type": "stop", "id": "nobody"})
    lineno += 1
    expected.append((lineno, "unknown id", "stop of an unknown id"))

    errors = []
    for _ in expected:
        errors.append(await sp.until(lambda line: line["type"] == "error"))
    for err, (n, what, raw) in zip(errors, expected):
        assert err["line"] == n, (err, raw)
        assert what.lower() in err["error"].lower(), f"error for {raw!r} does not name the problem: {err}"

    # still running: a later prompt gets its receipt
    await sp.send({"type": "prompt", "id": "after", "message": "still there?"})
    r = await sp.until(lambda line: line["type"] == "receipt")
    assert r["id"] == "after" and r["receipt"]["state"] == "finished"
    code, _ = await finish(sp)
    assert code == 0
    # none of the bad prompt lines was accepted: receipts only for d and after, once each
    assert set(by_id(sp)) == {"d", "after"}
    assert by_id(sp)["d"]["reply"] == "ok: first"
    assert_bye_last(sp)


# -- stop ---------------------------------------------------------------------------------------


async def test_stop_running_prompt(serve_factory: Any) -> None:
    sp: ServeProc = await serve_factory({"prompts": [{"hang": True}]})
    await sp.send({"type": "prompt", "id": "a", "message": "hang on"})
    await wait_held(sp, "a")
    await sp.send({"type": "stop", "id": "a"})
    stopping = await sp.until(lambda line: line["type"] == "stopping")
    assert stopping["id"] == "a" and isinstance(stopping["stop"], str) and stopping["stop"]
    r = (await sp.until(lambda line: line["type"] == "receipt"))["receipt"]
    assert (r["state"], r["reason"]) == ("failed", "interrupted"), r
    assert r["stop"] == stopping["stop"]
    # a stop of a prompt that already has its receipt is harmless
    await sp.send({"type": "stop", "id": "a"})
    again = await sp.until(lambda line: line["type"] in ("stopping", "error"))
    assert again["type"] == "stopping" and again["stop"] is None
    # the engine still works
    await sp.send({"type": "prompt", "id": "b", "message": "next"})
    rb = (await sp.until(lambda line: line["type"] == "receipt"))["receipt"]
    assert rb["state"] == "finished"
    code, _ = await finish(sp)
    assert code == 0
    assert set(by_id(sp)) == {"a", "b"}


async def test_stop_queued_prompt_and_unknown(serve_factory: Any) -> None:
    sp: ServeProc = await serve_factory({"prompts": [{"hang": True}]})
    await sp.send({"type": "prompt", "id": "a", "message": "hang on"})
    await sp.send({"type": "prompt", "id": "b", "message": "waiting"})
    await wait_held(sp, "a", queued=["b"])
    await sp.send({"type": "stop", "id": "b"})
    rb = await sp.until(lambda line: line["type"] == "receipt")
    assert rb["id"] == "b"
    assert (rb["receipt"]["state"], rb["receipt"]["reason"]) == ("rejected", "cancelled")
    await sp.send({"type": "stop", "id": "zzz"})
    err = await sp.until(lambda line: line["type"] == "error")
    assert err.get("id") == "zzz" and "unknown" in err["error"]
    await sp.send({"type": "stop", "id": "a"})
    ra = await sp.until(lambda line: line["type"] == "receipt")
    assert ra["id"] == "a" and ra["receipt"]["reason"] == "interrupted"
    code, _ = await finish(sp)
    assert code == 0
    assert set(by_id(sp)) == {"a", "b"}


async def test_status(serve_factory: Any, tmp_path: Path) -> None:
    sp: ServeProc = await serve_factory({"prompts": [{"hang": True}]})
    await sp.send({"type": "status"})
    st0 = await sp.until(lambda line: line["type"] == "status")
    assert st0["held"] is None and st0["queued"] == [] and st0["receipts"] == 0
    assert st0["journal"] == str(tmp_path / "j.jsonl")
    await sp.send({"type": "prompt", "id": "a", "message": "x"})
    await sp.send({"type": "prompt", "id": "b", "message": "y"})
    st = await wait_held(sp, "a", queued=["b"])
    assert st["engine"]["alive"] is True and st["engine"]["generation"] == 1
    assert st["engine"]["pid"] in sp.engine_pids()
    await sp.send({"type": "stop", "id": "a"})
    await sp.until(lambda line: line["type"] == "receipt" and line["id"] == "b")
    await sp.send({"type": "status"})
    st2 = await sp.until(lambda line: line["type"] == "status")
    assert st2["receipts"] == 2 and st2["held"] is None and st2["queued"] == []
    code, _ = await finish(sp)
    assert code == 0


# -- ending ------------------------------------------------------------------------------------


@pytest.mark.parametrize("how", ["shutdown", "eof"])
async def test_end_drains_outstanding(serve_factory: Any, how: str) -> None:
    sp: ServeProc = await serve_factory({"defaults": {"delta_delay": 0.05}})
    ids = ["a", "b", "c", "d"]
    for rid in ids:
        await sp.send({"type": "prompt", "id": rid, "message": f"prompt {rid}"})
    code, _ = await finish(sp, how)
    assert code == 0, sp.stderr
    got = by_id(sp)
    assert set(got) == set(ids)
    assert all(r["state"] == "finished" for r in got.values()), got
    assert [r["id"] for r in sp.receipts()] == ids, "FIFO"
    assert_bye_last(sp)
    for pid in sp.engine_pids():
        assert await wait_gone(pid) == []


async def test_sigterm_while_running(serve_factory: Any) -> None:
    sp: ServeProc = await serve_factory({"prompts": [{"hang": True}]})
    await sp.send({"type": "prompt", "id": "a", "message": "hang on"})
    await sp.send({"type": "prompt", "id": "b", "message": "queued"})
    await wait_held(sp, "a", queued=["b"])
    pids = sp.engine_pids()
    assert len(pids) == 1
    sp.proc.send_signal(signal.SIGTERM)
    await sp.read_all(timeout=20)
    code = await sp.wait(timeout=5)
    assert code == 128 + signal.SIGTERM, sp.stderr
    got = by_id(sp)
    assert set(got) == {"a", "b"}
    # the bridge stops the held prompt (the fake engine honours abort): its own stop, closing
    assert (got["a"]["state"], got["a"]["reason"]) == ("failed", "closing"), got["a"]
    assert (got["b"]["state"], got["b"]["reason"]) == ("rejected", "closing")
    assert_bye_last(sp)
    assert await wait_gone(pids[0]) == [], "the engine was not reaped"


async def test_queue_full(serve_factory: Any) -> None:
    sp: ServeProc = await serve_factory({"prompts": [{"hang": True}]}, "--queue-max", "1")
    await sp.send({"type": "prompt", "id": "a", "message": "x"})
    await wait_held(sp, "a")
    await sp.send({"type": "prompt", "id": "b", "message": "y"})
    await sp.send({"type": "prompt", "id": "c", "message": "z"})
    rc = await sp.until(lambda line: line["type"] == "receipt")
    assert rc["id"] == "c" and (rc["receipt"]["state"], rc["receipt"]["reason"]) == ("rejected", "queue-full")
    await sp.send({"type": "stop", "id": "a"})
    code, _ = await finish(sp)
    assert code == 0
    got = by_id(sp)
    assert got["a"]["reason"] == "interrupted" and got["b"]["state"] == "finished"


# -- content --------------------------------------------------------------------------------------

AWKWARD = [
    "line one\nline two\n\nline four",
    "carriage\r\nreturn\rand\r",
    "separators \u2028 line \u2029 para \u0085 next",
    "nul \x00 inside \x00\x01\x1f control",
    "emoji 🦀 👩‍👩‍👧 \U0001f600 and \ufeff bom",
    '{"type":"receipt","id":"forged"}\n{"type":"bye"}',
    "é" * 300_000 + "\n" + "x" * 400_000 + "🦀" * 1000,  # ~1 MB of UTF-8
]


async def test_prompt_text_arrives_intact(serve_factory: Any, tmp_path: Path) -> None:
    sp: ServeProc = await serve_factory()
    for n, msg in enumerate(AWKWARD):
        line = json.dumps({"type": "prompt", "id": f"p{n}", "message": msg}, ensure_ascii=bool(n % 2)).encode()
        assert b"\n" not in line
        await sp.send(line)
    code, _ = await finish(sp, timeout=60)
    assert code == 0, sp.stderr
    got = by_id(sp)
    assert set(got) == {f"p{n}" for n in range(len(AWKWARD))}
    for n, msg in enumerate(AWKWARD):
        r = got[f"p{n}"]
        assert r["state"] == "finished", r
        assert r["reply"] == "ok: " + msg[:40], (n, r["reply"])
    sent = [e["send"] for e in read_journal(tmp_path / "j.jsonl") if "send" in e and e["send"].get("type") == "prompt"]
    assert [s["message"] for s in sent] == AWKWARD


async def test_engine_output_cannot_forge_controller_lines(serve_factory: Any) -> None:
    forged_reply = 'done\n{"type":"receipt","id":"x","receipt":{"state":"finished"}}\n{"type":"bye","receipts":0}\r\n\u2028{"type":"error"}'
    forged_line = {"type": "receipt", "id": "x", "receipt": {"request": "x", "state": "finished"}}
    scenario = {
        "on_start": {"stderr": [json.dumps(forged_line), '{"type":"bye","receipts":9}']},
        "defaults": {
            "reply": forged_reply,
            "deltas": 6,
            "before_ack": [forged_line, {"type": "bye", "receipts": 0}],
            "after_settle": [forged_line, '{"type":"text","id":"a","text":"forged"}'],
        },
    }
    sp: ServeProc = await serve_factory(scenario)
    await sp.send({"type": "prompt", "id": "a", "message": "one", "stream": True})
    await sp.send({"type": "prompt", "id": "b", "message": "two"})
    code, _ = await finish(sp)
    assert code == 0
    # every stdout line parsed as one JSON object (ServeProc checks) and was one line
    assert all(b"\n" not in raw for raw in sp.raw)
    got = by_id(sp)
    assert set(got) == {"a", "b"}, f"a forged receipt: {sp.receipts()}"
    assert [line["type"] for line in sp.lines].count("bye") == 1
    assert_bye_last(sp)
    assert got["a"]["reply"] == forged_reply
    texts = "".join(line["text"] for line in sp.lines if line["type"] == "text" and line["id"] == "a")
    assert texts == forged_reply
    assert not [line for line in sp.lines if line["type"] == "text" and line["id"] != "a"]


# -- the journal -----------------------------------------------------------------------------------


async def test_journal_private_and_replays(serve_factory: Any, tmp_path: Path) -> None:
    scenario = {
        "prompts": [
            {},
            {"hang": True},
            {"stopReason": "error", "errorMessage": "boom"},
            {"stopReason": "length"},
            {"self_start_after": True},
        ]
    }
    sp: ServeProc = await serve_factory(scenario, "--queue-max", "2")
    await sp.send({"type": "prompt", "id": "fin", "message": "a"})
    await sp.until(lambda line: line["type"] == "receipt")
    await sp.send({"type": "prompt", "id": "hang", "message": "b"})
    await wait_held(sp, "hang")
    await sp.send({"type": "prompt", "id": "err", "message": "c"})
    await sp.send({"type": "prompt", "id": "cancel", "message": "d"})
    await sp.send({"type": "prompt", "id": "full", "message": "e"})
    await sp.send({"type": "stop", "id": "cancel"})
    await sp.send({"type": "stop", "id": "hang"})
    await sp.until(lambda line: line["type"] == "receipt" and line["id"] == "err")
    await sp.send({"type": "prompt", "id": "len", "message": "f"})
    await sp.send({"type": "prompt", "id": "o1", "message": "g"})
    await sp.until(lambda line: line["type"] == "receipt" and line["id"] == "o1")
    await sp.send({"type": "prompt", "id": "last", "message": "h", "timeout": 5})
    code, _ = await finish(sp)
    assert code == 0
    seen = {k: (v["state"], v["reason"]) for k, v in by_id(sp).items()}
    assert seen["fin"] == ("finished", None)
    assert seen["hang"] == ("failed", "interrupted")
    assert seen["err"] == ("failed", None)
    assert seen["cancel"] == ("rejected", "cancelled")
    assert seen["full"] == ("rejected", "queue-full")
    assert seen["len"] == ("finished", None)

    path = tmp_path / "j.jsonl"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    out = subprocess.run(
        [sys.executable, "-m", "bridge", "replay", "--json", str(path)], capture_output=True, timeout=30, cwd=str(ROOT)
    )
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    replayed = {r["request"]: (r["state"], r["reason"]) for r in result["receipts"]}
    assert replayed == seen
    assert len(result["receipts"]) == len(seen)
    live_overlaps = [
        {k: v for k, v in line.items() if k not in ("type", "generation")}
        for line in sp.lines
        if line["type"] == "signal" and str(line.get("signal", "")).startswith("O")
    ]
    assert live_overlaps and live_overlaps[0]["signal"] == "O1"
    assert result["overlaps"] == live_overlaps


# -- more edges ------------------------------------------------------------------------------------


async def test_last_line_without_newline_is_a_line(serve_factory: Any) -> None:
    sp: ServeProc = await serve_factory()
    await sp.send({"type": "prompt", "id": "a", "message": "engine up first"})
    await sp.until(lambda line: line["type"] == "receipt")
    assert sp.proc.stdin is not None
    await sp.proc.stdin.send_all(b'{"type":"prompt","id":"b","message":"no newline at the end"}')
    code, _ = await finish(sp, "eof")
    assert code == 0
    assert by_id(sp)["b"]["state"] == "finished"
    assert by_id(sp)["b"]["reply"] == "ok: no newline at the end"


# An engine that exits at start on its first two launches, then is the fake engine:
# the third start comes after the restart backoff (0.25 s by default).
CRASH_TWICE = (
    'n=$(cat "$0" 2>/dev/null || echo 0); echo $((n+1)) > "$0"; '
    'if [ "$n" -lt 2 ]; then echo "boom $n" >&2; exit 3; fi; exec "$@"'
)


async def serve_after_two_crashes(tmp_path: Path, message: str) -> ServeProc:
    """``bridge serve`` on an engine that crashes twice: both crashes spent on
    prompts c1 and c2, then prompt "a" sent while the dispatcher waits out the
    restart backoff before the third engine."""
    counter = tmp_path / "starts"
    argv = ["sh", "-c", CRASH_TWICE, str(counter), *fake_engine_argv({})]
    sp = await ServeProc.start(tmp_path, argv, "--journal", str(tmp_path / "j.jsonl"))
    assert (await sp.next(timeout=15))["type"] == "ready"  # type: ignore[index]
    for rid in ("c1", "c2"):
        await sp.send({"type": "prompt", "id": rid, "message": "x"})
        await sp.until(lambda line, rid=rid: line["type"] == "receipt" and line["id"] == rid)
    await sp.send({"type": "prompt", "id": "a", "message": message})
    await trio.sleep(0.1)  # the dispatcher has taken "a" and waits out the backoff
    return sp


async def test_eof_during_engine_restart_still_runs_the_prompt(tmp_path: Path) -> None:
    """Regression (fixed in 25436c7): drain() missed a prompt taken by the dispatcher
    while its engine was starting, so EOF rejected it 'closing'."""
    sp = await serve_after_two_crashes(tmp_path, "after two crashes")
    try:
        code, _ = await finish(sp, "eof")
        assert code == 0
        r = by_id(sp)["a"]
        assert (r["state"], r["reason"]) == ("finished", None), r
    finally:
        await sp.kill()


async def test_single_prompt_then_eof(tmp_path: Path) -> None:
    """Regression (fixed in 25436c7): ``printf 'PROMPT\\n' | bridge serve`` rejected it 'closing'."""
    with trio.fail_after(30):
        out = await trio.run_process(
            [sys.executable, "-m", "bridge", "serve", "--no-journal", "--", *fake_engine_argv({})],
            stdin=b'{"type":"prompt","id":"a","message":"hi"}\n',
            capture_stdout=True,
            capture_stderr=True,
            check=False,
            cwd=str(ROOT),
        )
    assert out.returncode == 0
    receipts = [json.loads(x) for x in out.stdout.splitlines() if b'"receipt"' in x]
    assert len(receipts) == 1
    assert receipts[0]["receipt"]["state"] == "finished", receipts[0]


async def test_stop_during_engine_restart_cancels_for_real(tmp_path: Path) -> None:
    sp = await serve_after_two_crashes(tmp_path, "cancel me")
    try:
        await sp.send({"type": "stop", "id": "a"})
        r = await sp.until(lambda line: line["type"] == "receipt" and line["id"] == "a")
        assert (r["receipt"]["state"], r["receipt"]["reason"]) == ("rejected", "cancelled")
        await trio.sleep(0.5)
        await sp.send({"type": "status"})
        st = await sp.until(lambda line: line["type"] == "status")
        code, _ = await finish(sp, "eof")
        assert code == 0
        sent = [e["send"].get("id") for e in read_journal(tmp_path / "j.jsonl") if "send" in e]
        assert "a" not in sent, "a prompt receipted rejected/cancelled was written to the engine"
        assert st["held"] is None, st
    finally:
        await sp.kill()


async def test_per_prompt_timeout_stops_the_run(serve_factory: Any) -> None:
    sp: ServeProc = await serve_factory({"prompts": [{"hang": True}]})
    await sp.send({"type": "prompt", "id": "a", "message": "slow", "timeout": 0.3})
    r = (await sp.until(lambda line: line["type"] == "receipt", timeout=10))["receipt"]
    # the settle timeout sends a stop; the engine honours it
    assert r["state"] in ("failed", "outcome-unknown"), r
    assert r["stop"] is not None
    code, _ = await finish(sp)
    assert code == 0


async def test_drain_timeout_bounds_an_engine_that_ignores_abort(serve_factory: Any) -> None:
    sp: ServeProc = await serve_factory({"prompts": [{"hang": "forever"}]}, "--drain-timeout", "0.3")
    await sp.send({"type": "prompt", "id": "a", "message": "never ends"})
    await sp.send({"type": "prompt", "id": "b", "message": "queued"})
    await wait_held(sp, "a", queued=["b"])
    pids = sp.engine_pids()
    with trio.fail_after(20):
        code, _ = await finish(sp, "eof")
    assert code == 0
    got = by_id(sp)
    assert got["a"]["state"] == "outcome-unknown", got["a"]
    assert (got["b"]["state"], got["b"]["reason"]) == ("rejected", "closing")
    assert_bye_last(sp)
    assert await wait_gone(pids[0]) == []


async def test_sigint_exits_130(serve_factory: Any) -> None:
    sp: ServeProc = await serve_factory({"prompts": [{"hang": True}]})
    await sp.send({"type": "prompt", "id": "a", "message": "x"})
    await wait_held(sp, "a")
    sp.proc.send_signal(signal.SIGINT)
    await sp.read_all()
    assert await sp.wait() == 130
    assert set(by_id(sp)) == {"a"}
    assert_bye_last(sp)


async def test_controller_that_goes_away(tmp_path: Path) -> None:
    """The controller stops reading stdout: nobody reads receipts any more, so the bridge
    closes as for a signal (docs: guide/exit-codes.md: 141), and every accepted prompt's receipt
    still reaches the journal."""
    sp = await ServeProc.start(
        tmp_path, fake_engine_argv({"defaults": {"delta_delay": 0.02}}), "--journal", str(tmp_path / "j.jsonl")
    )
    try:
        assert (await sp.next(timeout=15))["type"] == "ready"  # type: ignore[index]
        assert sp.proc.stdout is not None
        await sp.proc.stdout.aclose()
        for n in range(3):
            await sp.send({"type": "prompt", "id": f"p{n}", "message": "x" * 1000, "stream": True})
        await sp.close_stdin()
        code = await sp.wait(timeout=20)
        assert code == 141, sp.stderr
        entries = read_journal(tmp_path / "j.jsonl")
        receipts = [e["receipt"] for e in entries if "receipt" in e]
        assert sorted(r["request"] for r in receipts) == ["p0", "p1", "p2"]
        assert all(r["state"] in ("finished", "rejected", "failed") for r in receipts), receipts
        assert any(e.get("note", {}).get("why") == "controller-gone" for e in entries)
    finally:
        await sp.kill()


# -- a controller that does not read stdout -----------------------------------------------------


async def journal_has(path: Path, pred: Any, timeout: float = 30.0) -> list[dict[str, Any]]:
    """Poll the journal until ``pred(entries)`` holds (the controller reads nothing on stdout)."""
    with trio.fail_after(timeout):
        while True:
            entries = read_journal(path) if path.exists() else []
            if pred(entries):
                return entries
            await trio.sleep(0.05)


def journal_receipts(entries: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {e["receipt"]["request"]: e["receipt"] for e in entries if "receipt" in e}


@pytest.mark.parametrize("when", ["running", "after-eof"])
async def test_a_signal_ends_serve_whose_controller_does_not_read_stdout(tmp_path: Path, when: str) -> None:
    """SPEC §8 (no controller fault hangs the bridge), docs: guide/exit-codes.md (128+N): with far
    more than a pipe's worth of lines unread, a signal -- while a streamed prompt runs, or after
    stdin EOF has drained and the bridge closed -- still ends serve: the last lines wait at most
    ``FLUSH_GRACE`` for the controller, then one stderr line names the journal, which holds
    every receipt, and the exit status is the signal's. It used to wait for a reader forever."""
    journal = tmp_path / "j.jsonl"
    # 2 MB of reply in 20,000 deltas: paced (running), the run lasts 10 s or more, and the
    # journal (--journal-full: each update kept, ~300 B) passes its 1 MiB buffer after about
    # 3,000 of them, by when some 400 KB of text lines wait on a pipe that holds 64 KiB.
    big: dict[str, Any] = {"reply": "y" * 2_000_000, "deltas": 20_000}
    if when == "running":
        big["delta_delay"] = 0.0005
    scenario = tmp_path / "scenario.json"
    scenario.write_text(json.dumps({"prompts": [big]}))
    engine = [sys.executable, str(FAKE), "--scenario", str(scenario)]
    sp = await ServeProc.start(tmp_path, engine, "--journal", str(journal), "--journal-full")
    try:
        await sp.send({"type": "prompt", "id": "big", "message": "x", "stream": True})
        if when == "running":
            with trio.fail_after(30):
                while not journal.exists() or journal.stat().st_size < 1 << 20:
                    await trio.sleep(0.05)
            assert "big" not in journal_receipts(read_journal(journal))  # still running
        else:
            await sp.close_stdin()
            await journal_has(journal, lambda es: any(e.get("note", {}).get("event") == "bridge-closed" for e in es))
            assert sp.proc.returncode is None  # its last lines are not read: it waits for the controller
        sp.proc.send_signal(signal.SIGTERM)
        code = await sp.wait(timeout=40)
        assert code == 128 + signal.SIGTERM, sp.stderr
        assert sp.stderr.count("\n") == 1 and f"every receipt is in the journal {journal}" in sp.stderr, sp.stderr
        entries = read_journal(journal)
        got = journal_receipts(entries)["big"]
        assert (got["state"], got["reason"]) == (("failed", "closing") if when == "running" else ("finished", None))
        assert entries[-1]["note"]["event"] == "bridge-closed"
        assert sp.proc.stdout is not None
        assert (await sp.proc.stdout.receive_some(1 << 16)).startswith(b'{"type":"ready"')
    finally:
        await sp.kill()


async def test_a_compaction_the_engine_never_answers_tells_the_controller(serve_factory: Any) -> None:
    """The fake engine does not know ``compact`` (its answer has no id): past the prompt's stall
    timeout the prompt is rejected/config and the engine replaced. The controller gets
    ``compacted`` ``ok: false`` before that receipt, and the next engine's ``started`` line says
    ``newConversation`` (the conversation of prompt a is gone). Neither was said before."""
    sp: ServeProc = await serve_factory()
    await sp.send({"type": "prompt", "id": "a", "message": "remember this"})
    await sp.until(lambda line: line["type"] == "receipt" and line["id"] == "a")
    await sp.send({"type": "compact", "instructions": "keep it"})
    await sp.send({"type": "prompt", "id": "b", "message": "after the compaction", "stallTimeout": 1})
    rb = await sp.until(lambda line: line["type"] == "receipt" and line["id"] == "b", timeout=20)
    assert (rb["receipt"]["state"], rb["receipt"]["reason"]) == ("rejected", "config"), rb
    (notice,) = [line for line in sp.lines if line["type"] == "compacted"]
    assert notice["id"] == "b" and notice["ok"] is False and "conversation is lost" in notice["error"], notice
    assert sp.lines.index(notice) < sp.lines.index(rb)
    await sp.send({"type": "prompt", "id": "c", "message": "on the new engine"})
    await sp.until(lambda line: line["type"] == "receipt" and line["id"] == "c", timeout=20)
    starts = [line for line in sp.lines if line["type"] == "engine" and line["event"] == "started"]
    assert [(s["generation"], s["newConversation"]) for s in starts] == [(1, False), (2, True)], starts
    code, _ = await finish(sp)
    assert code == 0, sp.stderr
    assert by_id(sp)["c"]["state"] == "finished"


def test_a_prompt_and_its_stop_written_back_to_back_are_interrupted_twelve_times_in_a_row(
    pinned_pi: Any, tmp_path: Path
) -> None:
    """The real, sealed Pi behind ``bridge serve``: a prompt and its ``stop`` in one write, twelve
    times, give twelve ``failed``/``interrupted`` receipts on one engine. Pi answers an ``abort``
    that comes before the prompt's run has begun at once, stopping nothing; the bridge sends
    it again when the run starts (SPEC §5), so none ends ``settle-timeout`` after a replaced
    engine."""
    from bridge.demo.model_server import start_server
    from bridge.demo.model_server.server import models_json

    server = start_server([{"text": "up"}] + [{"words": 400, "delay": 0.02}] * 12)
    models = tmp_path / "models.json"
    models.write_text(json.dumps(models_json(server.base_url)))
    argv = [sys.executable, "-m", "bridge", "serve", "--journal", str(tmp_path / "j.jsonl")]
    argv += ["--models-json", str(models), "--provider", "scripted", "--model", "scripted-model"]
    receipts = []
    try:
        with subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=ROOT) as proc:
            assert proc.stdin is not None and proc.stdout is not None
            try:
                assert json.loads(proc.stdout.readline())["type"] == "ready"
                # A first prompt runs whole: the engine is up (a stop while it starts cancels
                # a prompt that was never written, rejected/cancelled: not the case here).
                proc.stdin.write(b'{"type":"prompt","id":"up","message":"are you up?"}\n')
                proc.stdin.flush()
                while json.loads(proc.stdout.readline() or b'{"type":"receipt"}')["type"] != "receipt":
                    pass
                for n in range(12):
                    pair = [
                        {"type": "prompt", "id": f"p{n}", "message": "write a lot"},
                        {"type": "stop", "id": f"p{n}"},
                    ]
                    proc.stdin.write(b"".join(json.dumps(m).encode() + b"\n" for m in pair))
                    proc.stdin.flush()
                    while True:
                        out = json.loads(proc.stdout.readline() or b"null")
                        assert out is not None, "serve ended early"
                        if out["type"] == "receipt":
                            receipts.append(out["receipt"])
                            break
                proc.stdin.close()
                assert proc.wait(timeout=30) == 0
            finally:
                if proc.poll() is None:
                    proc.kill()
    finally:
        server.close()
    assert [(r["state"], r["reason"]) for r in receipts] == [("failed", "interrupted")] * 12, receipts
    assert {r["generation"] for r in receipts} == {1}, "no engine was replaced"
    from bridge.readers.replay import replay

    replayed = {r.request: (r.state, r.reason) for r in replay(str(tmp_path / "j.jsonl")).receipts if r.request != "up"}
    assert replayed == {r["request"]: ("failed", "interrupted") for r in receipts}
