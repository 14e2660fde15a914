"""The scripted OpenAI-compatible model server (bridge/demo/model_server/, shipped in the
package; tools/model_server.py runs it in a checkout), run as a real subprocess and spoken to
over real HTTP (no Pi here)."""

from __future__ import annotations

import http.client
import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
#: The packaged server (what ``bridge demo`` runs in-process), as a program.
PACKAGED = (sys.executable, "-m", "bridge.demo.model_server")
#: The checkout's script, for the tests and tools that run it by path.
CHECKOUT_SCRIPT = (sys.executable, "-I", "-S", str(ROOT / "tools" / "model_server.py"))


class Resp:
    def __init__(self, status: int, headers: dict[str, str], body: bytes):
        self.status = status
        self.headers = headers
        self.body = body

    def getheader(self, name: str, default: str | None = None) -> str | None:
        return self.headers.get(name.lower(), default)

    def read(self) -> bytes:
        return self.body


class Server:
    def __init__(self, proc: subprocess.Popen[str], port: int, base_url: str, record: Path):
        self.proc = proc
        self.port = port
        self.base_url = base_url
        self.record = record

    def conn(self, timeout: float = 5.0) -> http.client.HTTPConnection:
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)

    def request(self, method: str, path: str, body: dict[str, Any] | None = None) -> Resp:
        c = self.conn()
        try:
            c.request(
                method,
                path,
                body=None if body is None else json.dumps(body),
                headers={"Content-Type": "application/json"},
            )
            r = c.getresponse()
            return Resp(r.status, {k.lower(): v for k, v in r.getheaders()}, r.read())
        finally:
            c.close()

    def post(self, body: dict[str, Any]) -> Resp:
        return self.request("POST", "/v1/chat/completions", body)

    def recorded(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.record.read_text().splitlines() if line]


@pytest.fixture
def start(tmp_path: Path) -> Iterator[Any]:
    procs: list[subprocess.Popen[str]] = []

    def _start(steps: list[dict[str, Any]], *extra: str, argv: tuple[str, ...] = PACKAGED) -> Server:
        script = tmp_path / f"script{len(procs)}.json"
        script.write_text(json.dumps(steps))
        record = tmp_path / f"record{len(procs)}.jsonl"
        proc = subprocess.Popen(
            [*argv, "--script", str(script), "--record", str(record), *extra],
            stdout=subprocess.PIPE,
            text=True,
        )
        procs.append(proc)
        assert proc.stdout is not None
        line = proc.stdout.readline()
        ready = json.loads(line)
        assert set(ready) == {"port", "base_url"}
        assert ready["base_url"] == f"http://127.0.0.1:{ready['port']}/v1"
        return Server(proc, ready["port"], ready["base_url"], record)

    yield _start
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.wait()
        if p.stdout:
            p.stdout.close()


def sse_events(resp: Resp) -> list[Any]:
    """Parse an SSE body into JSON objects; the final [DONE] becomes "[DONE]"."""
    raw = resp.read().decode()
    out: list[Any] = []
    for record in raw.split("\n\n"):
        if not record.strip():
            continue
        assert record.startswith("data: "), record
        payload = record[len("data: ") :]
        out.append(payload if payload == "[DONE]" else json.loads(payload))
    return out


def chat(stream: bool = True, usage: bool = True) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": "scripted-model",
        "stream": stream,
        "messages": [{"role": "user", "content": "hi"}],
    }
    if stream and usage:
        body["stream_options"] = {"include_usage": True}
    return body


def test_streaming_text_assembles(start: Any) -> None:
    srv = start([{"text": "Hello, scripted world!", "chunk": 5}])
    resp = srv.post(chat())
    assert resp.status == 200
    assert resp.getheader("Content-Type", "").startswith("text/event-stream")
    evs = sse_events(resp)
    assert evs[-1] == "[DONE]"
    chunks = evs[:-1]
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert text == "Hello, scripted world!"
    content_chunks = [c for c in chunks if c["choices"] and c["choices"][0]["delta"].get("content")]
    assert [len(c["choices"][0]["delta"]["content"]) for c in content_chunks] == [5, 5, 5, 5, 2]
    final = [c for c in chunks if c["choices"] and c["choices"][0]["finish_reason"]]
    assert len(final) == 1 and final[0]["choices"][0]["finish_reason"] == "stop"
    usage = chunks[-1]
    assert usage["choices"] == [] and usage["usage"]["total_tokens"] > 0


def test_running_usage_puts_the_usage_so_far_in_every_chunk(start: Any) -> None:
    """``running_usage`` (vLLM's continuous usage): every chunk has the prompt's tokens and the
    completion's so far, growing to the whole at the finish; the usage chunk still ends it.
    Without it only that last chunk has usage (a stream cut short reported none)."""
    steps = [{"text": "x" * 40, "chunk": 8, "running_usage": True, "usage": {"completion_tokens": 10}}, {"text": "y"}]
    srv = start(steps)
    chunks = [c for c in sse_events(srv.post(chat())) if c != "[DONE]"]
    *streamed, last = chunks
    assert last["choices"] == [] and last["usage"]["completion_tokens"] == 10
    done = [c["usage"]["completion_tokens"] for c in streamed]
    assert done == sorted(done) and done[0] == 0 and done[-1] == 10 and 0 < done[2] < 10, done
    assert len({c["usage"]["prompt_tokens"] for c in streamed}) == 1
    assert all(
        c["usage"]["total_tokens"] == c["usage"]["prompt_tokens"] + c["usage"]["completion_tokens"] for c in streamed
    )
    plain = [c for c in sse_events(srv.post(chat())) if c != "[DONE]"]
    assert [c for c in plain if "usage" in c] == [plain[-1]]


def test_words_and_finish_reason_override(start: Any) -> None:
    srv = start([{"words": 12, "finish_reason": "length"}])
    evs = sse_events(srv.post(chat(usage=False)))
    chunks = [e for e in evs if e != "[DONE]"]
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks)
    assert len(text.split()) == 12
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"  # no usage chunk asked


def test_tool_call_delta(start: Any) -> None:
    srv = start([{"tool_call": {"name": "bash", "arguments": {"command": "echo hi"}}}])
    evs = sse_events(srv.post(chat()))
    chunks = [e for e in evs if e != "[DONE]" and e["choices"]]
    calls = [tc for c in chunks for tc in c["choices"][0]["delta"].get("tool_calls") or []]
    assert calls[0]["type"] == "function" and calls[0]["id"]
    assert calls[0]["function"]["name"] == "bash"
    args = "".join(tc["function"].get("arguments", "") for tc in calls)
    assert json.loads(args) == {"command": "echo hi"}
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"


def test_non_streaming(start: Any) -> None:
    srv = start([{"text": "plain json"}])
    resp = srv.post(chat(stream=False))
    body = json.loads(resp.read())
    assert body["object"] == "chat.completion"
    assert body["choices"][0]["message"] == {"role": "assistant", "content": "plain json"}
    assert body["choices"][0]["finish_reason"] == "stop"


def test_error_status(start: Any) -> None:
    srv = start([{"status": 500, "body": "boom"}, {"status": 429, "headers": {"retry-after": "0"}}])
    r1 = srv.post(chat())
    assert r1.status == 500 and r1.read() == b"boom"
    r2 = srv.post(chat())
    assert r2.status == 429 and r2.getheader("retry-after") == "0"
    assert json.loads(r2.read())["error"]["type"] == "rate_limit_error"


def test_requests_recorded_and_default_after_exhaustion(start: Any) -> None:
    srv = start([{"text": "first"}], "--default", '{"text": "fallback"}')
    texts = []
    for _ in range(3):
        evs = sse_events(srv.post(chat()))
        texts.append(
            "".join(c["choices"][0]["delta"].get("content") or "" for c in evs if c != "[DONE]" and c["choices"])
        )
    assert texts == ["first", "fallback", "fallback"]
    models = json.loads(srv.request("GET", "/v1/models").read())
    assert models["data"][0]["id"] == "scripted-model"
    rec = srv.recorded()
    assert [(r["method"], r["path"], r["step"]) for r in rec] == [
        ("POST", "/v1/chat/completions", 0),
        ("POST", "/v1/chat/completions", None),
        ("POST", "/v1/chat/completions", None),
        ("GET", "/v1/models", None),
    ]
    assert rec[0]["body"]["messages"] == [{"role": "user", "content": "hi"}]
    assert all(isinstance(r["time"], float) for r in rec)


def test_hang_then_client_disconnect(start: Any) -> None:
    srv = start([{"hang": True}, {"text": "after"}])
    c = srv.conn(timeout=0.3)
    try:
        c.request("POST", "/v1/chat/completions", body=json.dumps(chat()))
        with pytest.raises(TimeoutError):
            c.getresponse()
    finally:
        c.close()
    evs = sse_events(srv.post(chat()))  # server still serves
    assert evs[-1] == "[DONE]"


def test_write_models(start: Any, tmp_path: Path) -> None:
    srv = start([], "--write-models", str(tmp_path / "agent"))
    models = json.loads((tmp_path / "agent" / "models.json").read_text())
    prov = models["providers"]["scripted"]
    assert prov["baseUrl"] == srv.base_url
    assert prov["api"] == "openai-completions"
    assert prov["models"][0]["id"] == "scripted-model"


def test_exits_on_sigterm_even_while_hanging(start: Any) -> None:
    srv = start([{"hang": True}])
    c = srv.conn(timeout=5)
    try:
        c.request("POST", "/v1/chat/completions", body=json.dumps(chat()))
        time.sleep(0.1)
        t0 = time.monotonic()
        srv.proc.send_signal(signal.SIGTERM)
        assert srv.proc.wait(timeout=3) == 0
        assert time.monotonic() - t0 < 2
    finally:
        c.close()
    assert srv.proc.stdout is not None
    assert srv.proc.stdout.read() == ""  # stdout quiet after the port line


def test_the_checkout_script_runs_the_packaged_server(start: Any) -> None:
    """tools/model_server.py is the packaged server (same port line, replies and record), and
    runs without any install: -I -S, so no PYTHONPATH and no site-packages, only the stdlib."""
    srv = start([{"text": "from the shim", "chunk": 4}], argv=CHECKOUT_SCRIPT)
    events = sse_events(srv.post(chat()))
    text = "".join(e["choices"][0]["delta"].get("content") or "" for e in events[:-1] if e["choices"])
    assert text == "from the shim"
    assert [r["path"] for r in srv.recorded()] == ["/v1/chat/completions"]
