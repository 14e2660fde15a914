"""The scripted fake engine (tools/fake_engine.py), run as a real subprocess over real pipes.

Every read has a timeout and every process is killed in a ``finally``, so a bug in the fake
engine fails a test instead of hanging the suite."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
FAKE = ROOT / "tools" / "fake_engine.py"

READ_TIMEOUT = 5.0

PLAIN_RUN = [
    "response",
    "agent_start",
    "turn_start",
    "message_start",
    "message_end",
    "message_start",
    "message_update",
    "message_update",
    "message_update",
    "message_update",
    "message_end",
    "turn_end",
    "agent_end",
    "agent_settled",
]


class Engine:
    """One fake engine process; stdout split on LF by a thread so reads can time out."""

    def __init__(self, *args: str, scenario: dict[str, Any] | None = None) -> None:
        argv = [sys.executable, str(FAKE), *args]
        if scenario is not None:
            argv += ["--scenario-json", json.dumps(scenario)]
        self.proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, bufsize=0
        )
        self.lines: queue.Queue[bytes | None] = queue.Queue()
        self.stderr_chunks: list[bytes] = []
        self.pumps = [
            threading.Thread(target=self._pump_stdout, daemon=True),
            threading.Thread(target=self._pump_stderr, daemon=True),
        ]
        for t in self.pumps:
            t.start()

    def _pump_stdout(self) -> None:
        buf = b""
        fd = self.proc.stdout.fileno()
        while True:
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                if buf:
                    self.lines.put(buf)
                self.lines.put(None)
                return
            buf += chunk
            *done, buf = buf.split(b"\n")
            for line in done:
                self.lines.put(line)

    def _pump_stderr(self) -> None:
        fd = self.proc.stderr.fileno()
        while True:
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                return
            self.stderr_chunks.append(chunk)

    @property
    def stderr(self) -> str:
        return b"".join(self.stderr_chunks).decode("utf-8", "replace")

    def send(self, obj: Any) -> None:
        data = obj if isinstance(obj, bytes) else json.dumps(obj).encode()
        self.proc.stdin.write(data + b"\n")
        self.proc.stdin.flush()

    def close_stdin(self) -> None:
        self.proc.stdin.close()

    def raw(self, timeout: float = READ_TIMEOUT) -> bytes | None:
        """The next stdout line, or None at EOF; fails after ``timeout``."""
        try:
            return self.lines.get(timeout=timeout)
        except queue.Empty:
            if self.proc.poll() is None:
                self.proc.send_signal(signal.SIGUSR1)  # the engine dumps its thread stacks
                time.sleep(0.3)
            pytest.fail(f"no stdout line within {timeout}s; stderr:\n{self.stderr}")

    def read(self, timeout: float = READ_TIMEOUT) -> dict[str, Any]:
        line = self.raw(timeout)
        assert line is not None, f"unexpected stdout EOF; stderr:\n{self.stderr}"
        return json.loads(line)

    def read_until(self, pred: Callable[[dict], bool], timeout: float = READ_TIMEOUT) -> list[dict]:
        out: list[dict] = []
        deadline = time.monotonic() + timeout
        while True:
            obj = self.read(max(0.01, deadline - time.monotonic()))
            out.append(obj)
            if pred(obj):
                return out

    def nothing_for(self, seconds: float) -> bool:
        try:
            self.lines.get(timeout=seconds)
        except queue.Empty:
            return True
        return False

    def all_until_eof(self, timeout: float = READ_TIMEOUT) -> list[bytes]:
        out = []
        while True:
            line = self.raw(timeout)
            if line is None:
                return out
            out.append(line)

    def wait(self, timeout: float = READ_TIMEOUT) -> int:
        """The exit status; afterwards ``stderr`` is complete (the stderr pump saw EOF)."""
        rc = self.proc.wait(timeout=timeout)
        self.pumps[1].join(timeout=timeout)
        return rc

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=5)
        # The pumps read raw fds: close only after they saw EOF, or a later engine's pipe could
        # reuse the fd number and a stale pump would steal its bytes.
        for t in self.pumps:
            t.join(timeout=5)
        for f in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            try:
                f.close()
            except OSError:
                pass


@pytest.fixture
def spawn():
    engines: list[Engine] = []

    def make(*args: str, scenario: dict[str, Any] | None = None) -> Engine:
        e = Engine(*args, scenario=scenario)
        engines.append(e)
        return e

    try:
        yield make
    finally:
        for e in engines:
            e.kill()


def types(objs: list[dict]) -> list[str]:
    return [o["type"] for o in objs]


def settled(o: dict) -> bool:
    return o["type"] == "agent_settled"


def prompt(e: Engine, pid: str, text: str = "hello there") -> None:
    e.send({"id": pid, "type": "prompt", "message": text})


# --- Pi's default behaviour -------------------------------------------------------------------


def test_plain_run_has_pi_sequence_and_ack_right_before_agent_start(spawn):
    e = spawn()
    prompt(e, "p1", "hello there, general kenobi")
    got = e.read_until(settled)
    assert types(got) == PLAIN_RUN
    ack = got[0]
    assert ack == {
        "id": "p1",
        "type": "response",
        "command": "prompt",
        "success": True,
        "data": {"disposition": "started"},
    }
    assert got[3]["message"]["role"] == "user"
    assert got[3]["message"]["content"] == [{"type": "text", "text": "hello there, general kenobi"}]
    assert got[5]["message"]["role"] == "assistant" and got[5]["message"]["content"] == []
    deltas = "".join(o["assistantMessageEvent"]["delta"] for o in got[6:10])
    final = got[10]["message"]
    assert final["stopReason"] == "stop" and "usage" in final
    assert final["content"] == [{"type": "text", "text": "ok: hello there, general kenobi"}]
    assert deltas == "ok: hello there, general kenobi"
    assert got[12]["willRetry"] is False and got[13] == {"type": "agent_settled", "aborted": False}
    for o in got[6:10]:
        assert len(json.dumps(o, separators=(",", ":"))) < 400
        assert "partial" not in o["assistantMessageEvent"]


def test_get_state_and_get_commands(spawn):
    e = spawn(scenario={"defaults": {"deltas": 30, "delta_delay": 0.02}})
    e.send({"id": 1, "type": "get_state"})
    st = e.read()
    assert st["id"] == 1 and st["command"] == "get_state" and st["success"] is True
    data = st["data"]
    assert data["isStreaming"] is False and data["pendingMessageCount"] == 0
    assert data["steeringMode"] == "all" and data["followUpMode"] == "all"
    assert data["model"] == {"provider": "fake", "id": "fake-model"} and data["sessionId"] == "fake"
    e.send({"id": 2, "type": "get_commands"})
    assert e.read() == {
        "id": 2,
        "type": "response",
        "command": "get_commands",
        "success": True,
        "data": {"commands": []},
    }
    prompt(e, "p1")
    e.read_until(lambda o: o["type"] == "message_update")
    e.send({"id": 3, "type": "get_state"})
    resp = e.read_until(lambda o: o.get("id") == 3)[-1]
    assert resp["data"]["isStreaming"] is True


def test_abort_mid_stream_settles_aborted_before_the_abort_response(spawn):
    e = spawn(scenario={"defaults": {"deltas": 100, "delta_delay": 0.02}})
    prompt(e, "p1")
    e.read_until(lambda o: o["type"] == "message_update")
    e.send({"id": "s1", "type": "abort"})
    tail = e.read_until(lambda o: o["type"] == "response")
    assert types(tail)[-5:] == ["message_end", "turn_end", "agent_end", "agent_settled", "response"]
    end = tail[-5]["message"]
    assert end["stopReason"] == "aborted" and end["errorMessage"] == "Request was aborted"
    assert tail[-3]["willRetry"] is False
    assert tail[-2] == {"type": "agent_settled", "aborted": True}
    assert tail[-1] == {"id": "s1", "type": "response", "command": "abort", "success": True}
    assert e.nothing_for(0.2)


def test_abort_while_idle_is_just_the_response(spawn):
    e = spawn()
    e.send({"id": "s1", "type": "abort"})
    assert e.read() == {"id": "s1", "type": "response", "command": "abort", "success": True}
    assert e.nothing_for(0.2)


def test_abort_a_hung_run_writes_the_aborted_assistant_message(spawn):
    e = spawn(scenario={"prompts": [{"hang": True}]})
    prompt(e, "p1")
    got = e.read_until(lambda o: o["type"] == "message_end")
    assert got[-1]["message"]["role"] == "user"
    assert e.nothing_for(0.2)
    e.send({"id": "s1", "type": "abort"})
    tail = e.read_until(lambda o: o["type"] == "response")
    assert types(tail) == ["message_start", "message_end", "turn_end", "agent_end", "agent_settled", "response"]
    assert tail[1]["message"]["stopReason"] == "aborted"


def test_retries_start_new_attempts_without_a_user_message(spawn):
    e = spawn(scenario={"prompts": [{"retries": 2}]})
    prompt(e, "p1")
    got = e.read_until(settled)
    t = types(got)
    assert t.count("agent_start") == 3 and t.count("agent_settled") == 1
    assert [o["willRetry"] for o in got if o["type"] == "agent_end"] == [True, True, False]
    users = [o for o in got if o["type"] == "message_start" and o["message"]["role"] == "user"]
    assert len(users) == 1
    starts = [i for i, x in enumerate(t) if x == "agent_start"]
    assert all(t[i + 1] == "turn_start" and got[i + 2]["message"]["role"] == "assistant" for i in starts[1:])
    retry = [o for o in got if o["type"] == "auto_retry_start"]
    assert [r["attempt"] for r in retry] == [1, 2]
    ends = [o for o in got if o["type"] == "message_end" and o["message"]["role"] == "assistant"]
    assert [m["message"]["stopReason"] for m in ends] == ["error", "error", "stop"]
    assert {"type": "auto_retry_end", "success": True, "attempt": 2} in got
    for i in starts[1:]:
        assert t[i - 1] == "auto_retry_start"


def test_abort_during_retry_backoff_has_no_aborted_message(spawn):
    e = spawn(scenario={"prompts": [{"retries": 1, "retry_delay": 30}]})
    prompt(e, "p1")
    e.read_until(lambda o: o["type"] == "auto_retry_start")
    e.send({"id": "s1", "type": "abort"})
    tail = e.read_until(lambda o: o["type"] == "response")
    assert types(tail) == ["auto_retry_end", "agent_settled", "response"]
    assert tail[1]["aborted"] is True


def test_prompt_during_a_run_is_queued_and_runs_after_it_settles(spawn):
    e = spawn(scenario={"prompts": [{"deltas": 20, "delta_delay": 0.02}]})
    prompt(e, "p1", "first")
    e.read_until(lambda o: o["type"] == "message_update")
    prompt(e, "p2", "second")
    got = e.read_until(lambda o: o.get("id") == "p2")
    assert got[-2] == {"type": "queue_update", "steering": [], "followUp": ["second"]}
    assert got[-1]["data"] == {"disposition": "queued"} and got[-1]["success"] is True
    first = e.read_until(settled)
    assert types(first)[-1] == "agent_settled"
    second = e.read_until(settled)
    assert types(second)[:5] == ["agent_start", "turn_start", "queue_update", "message_start", "message_end"]
    assert second[2] == {"type": "queue_update", "steering": [], "followUp": []}
    assert second[3]["message"]["content"][0]["text"] == "second"


def test_steer_is_delivered_at_the_next_turn_and_clear_queue_empties(spawn):
    e = spawn(scenario={"prompts": [{"deltas": 20, "delta_delay": 0.02}]})
    prompt(e, "p1")
    e.read_until(lambda o: o["type"] == "message_update")
    e.send({"id": "st", "type": "steer", "message": "go left"})
    got = e.read_until(lambda o: o.get("id") == "st")
    assert got[-2] == {"type": "queue_update", "steering": ["go left"], "followUp": []}
    run = e.read_until(settled)
    t = types(run)
    i = t.index("turn_end")
    assert t[i + 1 : i + 4] == ["turn_start", "queue_update", "message_start"]
    assert run[i + 3]["message"]["content"][0]["text"] == "go left"
    # clear_queue with something queued while idle
    e.send({"id": "f", "type": "follow_up", "message": "later"})
    e.read_until(lambda o: o.get("id") == "f")
    e.send({"id": "c", "type": "clear_queue"})
    got = e.read_until(lambda o: o.get("id") == "c")
    assert got == [
        {"type": "queue_update", "steering": [], "followUp": []},
        {
            "id": "c",
            "type": "response",
            "command": "clear_queue",
            "success": True,
            "data": {"cleared": {"steering": [], "followUp": ["later"]}},
        },
    ]


def test_unknown_command_and_parse_error_have_no_id(spawn):
    e = spawn()
    e.send({"id": "x1", "type": "frobnicate"})
    assert e.read() == {
        "type": "response",
        "command": "frobnicate",
        "success": False,
        "error": "Unknown command: frobnicate",
    }
    e.send(b"this is not json")
    r = e.read()
    assert "id" not in r and r["command"] == "parse" and r["success"] is False
    assert r["error"].startswith("Failed to parse command: ")
    e.send({"id": "x2"})
    assert e.read() == {"type": "response", "success": False, "error": "Unknown command: undefined"}


def test_null_line_crashes_like_pi(spawn):
    e = spawn()
    e.send(b"null")
    assert e.wait() == 1
    assert "TypeError" in e.stderr


def test_stdin_eof_exits_fast_abandoning_the_run(spawn):
    e = spawn(scenario={"prompts": [{"deltas": 1000, "delta_delay": 0.01}]})
    prompt(e, "p1")
    e.read_until(lambda o: o["type"] == "message_update")
    t0 = time.monotonic()
    e.close_stdin()
    assert e.wait() == 0
    assert time.monotonic() - t0 < 0.5
    rest = [json.loads(x) for x in e.all_until_eof()]
    assert not {"agent_end", "agent_settled"} & set(types(rest))


def test_stderr_has_startup_lines(spawn):
    e = spawn()
    e.close_stdin()
    assert e.wait() == 0
    assert e.stderr.startswith("fake-engine: ")


# --- faults ----------------------------------------------------------------------------------


def test_crash_at_writes_n_lines_then_exits_with_the_code(spawn):
    e = spawn(scenario={"prompts": [{"crash_at": 4, "exit_code": 3}]})
    prompt(e, "p1")
    lines = e.all_until_eof()
    assert e.wait() == 3
    assert types([json.loads(x) for x in lines]) == PLAIN_RUN[:4]


def test_kill_at_sigkills_itself(spawn):
    e = spawn(scenario={"prompts": [{"kill_at": 2}]})
    prompt(e, "p1")
    assert len(e.all_until_eof()) == 2
    assert e.wait() == -signal.SIGKILL


def test_close_stdout_at_keeps_running_until_stdin_eof(spawn):
    e = spawn(scenario={"prompts": [{"close_stdout_at": 3}]})
    prompt(e, "p1")
    assert len(e.all_until_eof()) == 3
    time.sleep(0.1)
    assert e.proc.poll() is None
    e.close_stdin()
    assert e.wait() == 0


def test_hang_at_stops_all_output_but_still_reads_stdin(spawn):
    e = spawn(scenario={"prompts": [{"hang_at": 5}]})
    prompt(e, "p1")
    got = [e.read() for _ in range(5)]
    assert types(got) == PLAIN_RUN[:5]
    e.send({"id": "g", "type": "get_state"})
    assert e.nothing_for(0.3)
    e.close_stdin()
    assert e.wait() == 0


@pytest.mark.parametrize(
    "fault,check",
    [
        ("garbage_at", lambda raw: not raw.startswith(b"{")),
        ("invalid_utf8_at", lambda raw: pytest.raises(UnicodeDecodeError, raw.decode, "utf-8") is not None),
        ("array_at", lambda raw: raw == b"[1]"),
    ],
)
def test_inserted_bad_line_takes_its_step(spawn, fault, check):
    e = spawn(scenario={"prompts": [{fault: 3}]})
    prompt(e, "p1")
    raws = [e.raw() for _ in range(len(PLAIN_RUN) + 1)]
    assert check(raws[2])
    assert types([json.loads(r) for r in raws[:2] + raws[3:]]) == PLAIN_RUN
    assert e.nothing_for(0.1)


def test_oversize_line_has_the_exact_size(spawn):
    e = spawn(scenario={"prompts": [{"oversize_at": 7, "oversize_bytes": 300_000}]})
    prompt(e, "p1")
    raws = [e.raw() for _ in range(len(PLAIN_RUN) + 1)]
    assert len(raws[6]) == 300_000
    assert json.loads(raws[6])["type"] == "message_update"
    assert types([json.loads(r) for r in raws[:6] + raws[7:]]) == PLAIN_RUN


def test_self_start_after_runs_a_second_run_by_itself(spawn):
    e = spawn(scenario={"prompts": [{"self_start_after": True}]})
    prompt(e, "p1")
    first = e.read_until(settled)
    assert types(first) == PLAIN_RUN
    second = e.read_until(settled)
    assert types(second) == PLAIN_RUN[1:]
    assert second[2]["message"]["content"][0]["text"] == "extension says hi"


def test_second_settle_ack_without_start_failure_no_run(spawn):
    e = spawn(
        scenario={
            "prompts": [
                {"second_settle": True},
                {"ack_without_start": True},
                {"failure_no_run": True, "errorMessage": "no key"},
            ]
        }
    )
    prompt(e, "p1")
    got = e.read_until(settled)
    assert e.read() == {"type": "agent_settled", "aborted": False}
    prompt(e, "p2")
    assert types([e.read(), e.read()]) == ["response", "agent_settled"]
    prompt(e, "p3")
    got = e.read_until(settled)
    assert types(got) == ["response", "message_start", "message_end", "agent_settled"]
    assert got[2]["message"]["stopReason"] == "error" and got[2]["message"]["errorMessage"] == "no key"


def test_reject_handled_and_no_ack(spawn):
    e = spawn(scenario={"prompts": [{"reject": "busy"}, {"disposition": "handled"}, {"no_ack": True}]})
    prompt(e, "p1")
    assert e.read() == {"id": "p1", "type": "response", "command": "prompt", "success": False, "error": "busy"}
    prompt(e, "p2")
    assert e.read()["data"] == {"disposition": "handled"}
    assert e.nothing_for(0.1)
    prompt(e, "p3")
    assert types(e.read_until(settled)) == PLAIN_RUN[1:]


def test_extension_ui_waits_for_the_matching_response(spawn):
    e = spawn(scenario={"prompts": [{"extension_ui": {"method": "select", "title": "Pick", "options": ["a", "b"]}}]})
    prompt(e, "p1")
    req = e.read()
    assert req == {
        "type": "extension_ui_request",
        "id": "ui-1",
        "method": "select",
        "title": "Pick",
        "options": ["a", "b"],
    }
    assert e.nothing_for(0.3)
    e.send({"type": "extension_ui_response", "id": "ui-other", "cancelled": True})
    assert e.nothing_for(0.1)
    e.send({"type": "extension_ui_response", "id": "ui-1", "cancelled": True})
    assert types(e.read_until(settled)) == PLAIN_RUN


def test_extension_ui_timeout_auto_resolves(spawn):
    e = spawn(scenario={"prompts": [{"extension_ui": {"method": "confirm", "title": "Sure?", "timeout": 200}}]})
    prompt(e, "p1")
    assert e.read()["timeout"] == 200
    assert types(e.read_until(settled, timeout=3)) == PLAIN_RUN


def test_responses_out_of_order_holds_get_state_until_settled(spawn):
    e = spawn(scenario={"prompts": [{"responses_out_of_order": True, "deltas": 25, "delta_delay": 0.02}]})
    prompt(e, "p1")
    e.read_until(lambda o: o["type"] == "message_update")
    e.send({"id": "g1", "type": "get_state"})
    e.send({"id": "g2", "type": "get_state"})
    got = e.read_until(lambda o: o.get("id") == "g1")
    ids = [o.get("id") for o in got if o["type"] == "response"]
    assert ids == ["g2", "g1"]
    assert types(got)[-3] == "agent_settled"


def test_startup_lines_and_exit_at_start(spawn):
    e = spawn(scenario={"startup": ["garbage!", {"type": "agent_start"}, {"$hex": "ff"}], "exit_at_start": 4})
    assert e.all_until_eof() == [b"garbage!", b'{"type":"agent_start"}', b"\xff"]
    assert e.wait() == 4


def test_ignore_stdin_never_sees_eof(spawn):
    e = spawn(scenario={"prompts": [{"ignore_stdin": True}]})
    prompt(e, "p1")
    e.send({"id": "g", "type": "get_state"})
    assert types(e.read_until(settled)) == PLAIN_RUN
    e.close_stdin()
    assert e.nothing_for(0.3)
    assert e.proc.poll() is None


def fault_lines(seed: int) -> list[str]:
    scenario = {"defaults": {"random_faults": {"p": 1.0, "kinds": ["garbage", "array", "invalid_utf8"]}}}
    e = Engine("--seed", str(seed), scenario=scenario)
    try:
        for i in range(4):
            prompt(e, f"p{i}")
            while True:  # raw reads: the injected lines are not JSON
                raw = e.raw()
                if raw is not None and raw.startswith(b'{"type":"agent_settled"'):
                    break
        e.close_stdin()
        e.wait()
        return [ln for ln in e.stderr.splitlines() if " fault " in ln]
    finally:
        e.kill()


def test_seed_determinism():
    a, b = fault_lines(7), fault_lines(7)
    assert len(a) == 4 and a == b
    assert all(ln.startswith("fake-engine: fault ") and " at " in ln for ln in a)


# --- transcript mode -------------------------------------------------------------------------


def test_transcript_replay(spawn, tmp_path):
    path = tmp_path / "t.jsonl"
    recs = [
        {"transcript": "pi-bridge", "version": 1, "clearing": ["clear_queue"]},
        {"recv_raw": "hello from stdout"},
        {"send": {"id": "p1", "type": "prompt", "message": "hi"}},
        {"recv": {"id": "p1", "type": "response", "command": "prompt", "success": True}, "i": 2},
        {"recv": {"type": "agent_start"}, "i": 3},
        {"note": "ignored"},
        {"send": {"id": "s1", "type": "abort"}},
        {"recv": {"type": "agent_settled", "aborted": True}},
        {"recv": {"id": "s1", "type": "response", "command": "abort", "success": True}},
        {"release": "p1"},
    ]
    path.write_text("\n".join(json.dumps(r) for r in recs) + "\n")
    e = spawn("--transcript", str(path))
    assert e.raw() == b"hello from stdout"
    assert e.nothing_for(0.1)
    e.send({"id": "x", "type": "prompt", "message": "whatever"})
    assert [e.read(), e.read()] == [recs[3]["recv"], recs[4]["recv"]]
    assert e.nothing_for(0.1)
    e.send({"id": "y", "type": "get_state"})
    assert [e.read(), e.read()] == [recs[7]["recv"], recs[8]["recv"]]
    time.sleep(0.1)
    assert e.proc.poll() is None
    e.close_stdin()
    assert e.wait() == 0
    assert "warning" in e.stderr and "'get_state'" in e.stderr


def test_transcript_refuses_newer_version(spawn, tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps({"transcript": "pi-bridge", "version": 2}) + "\n")
    e = spawn("--transcript", str(path))
    assert e.wait() == 2
    assert "version" in e.stderr


# --- more scenario knobs ---------------------------------------------------------------------


def test_crash_at_zero_writes_nothing(spawn):
    e = spawn(scenario={"prompts": [{"crash_at": 0}]})
    prompt(e, "p1")
    assert e.all_until_eof() == []
    assert e.wait() == 1


def test_insert_at_puts_any_line_at_a_step(spawn):
    e = spawn(scenario={"prompts": [{"insert_at": {"2": {"type": "agent_start"}}}]})
    prompt(e, "p1")
    got = e.read_until(settled)
    assert types(got) == ["response", "agent_start"] + PLAIN_RUN[1:]


def test_on_start_run_is_an_unsolicited_run(spawn):
    e = spawn(scenario={"on_start": {"run": {"text": "boot hook"}}})
    got = e.read_until(settled)
    assert types(got) == PLAIN_RUN[1:]
    assert got[2]["message"]["content"][0]["text"] == "boot hook"


def test_abort_leaves_a_queued_prompt_to_run_after(spawn):
    e = spawn(scenario={"prompts": [{"hang": True}]})
    prompt(e, "p1", "a")
    e.read_until(lambda o: o["type"] == "message_end")
    prompt(e, "p2", "b")
    e.read_until(lambda o: o.get("id") == "p2")
    e.send({"id": "s", "type": "abort"})
    e.read_until(lambda o: o.get("id") == "s")
    nxt = e.read_until(settled)
    assert nxt[0]["type"] == "agent_start" and nxt[3]["message"]["content"][0]["text"] == "b"


def test_ack_delay_lets_later_responses_overtake_the_ack(spawn):
    e = spawn(scenario={"prompts": [{"ack_delay": 0.3}]})
    e.send(b'{"id":"p1","type":"prompt","message":"x"}\n{"id":"g","type":"get_state"}')
    assert e.read()["id"] == "g"
    assert types(e.read_until(settled)) == PLAIN_RUN


def test_tools_and_update_shapes(spawn):
    e = spawn(
        scenario={
            "prompts": [
                {"tools": 1, "deltas": 1, "update_shape": "delta"},
                {"deltas": 2, "update_shape": "full", "reply": "abcd"},
            ]
        }
    )
    prompt(e, "p1")
    t = types(e.read_until(settled))
    assert t[5:15] == [
        "message_start",
        "message_end",
        "tool_execution_start",
        "tool_execution_update",
        "tool_execution_update",
        "tool_execution_end",
        "message_start",
        "message_end",
        "turn_end",
        "turn_start",
    ]
    prompt(e, "p2")
    got = e.read_until(settled)
    ups = [o for o in got if o["type"] == "message_update"]
    assert [u["assistantMessageEvent"]["partial"]["content"][0]["text"] for u in ups] == ["ab", "abcd"]
