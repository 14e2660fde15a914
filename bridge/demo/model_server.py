"""Scripted OpenAI-compatible model server for offline Pi runs (tests, demo, CI).

It ships inside the package because ``bridge demo`` runs it in-process (an
installed wheel has no checkout to load it from); in a checkout,
``tools/model_server.py`` runs this same module.

Why stdlib only: the server must run wherever the project's Python runs, with no
extra dependency to install or pin (tests/test_layers.py checks that it imports
nothing else, not even the rest of ``bridge``). ``http.server.ThreadingHTTPServer``
is a real HTTP/1.1 server (keep-alive, one thread per connection), and Server-Sent Events
are nothing but ``data: {...}\\n\\n`` records written as HTTP/1.1 chunked
transfer-encoding chunks, so no async framework is needed. One thread per
connection also makes "hang" and "slow" steps trivial and independent.

Endpoints
---------
``POST /v1/chat/completions``
    Consumes the next script step (one step per request, in order; when the
    script is exhausted the *default* step is used, by default ``{"text": "ok"}``).
    With ``"stream": true`` it answers ``text/event-stream`` with
    ``chat.completion.chunk`` objects exactly as OpenAI does: a first chunk with
    ``delta.role = "assistant"``, content / tool-call deltas, a final chunk with an
    empty delta and ``finish_reason``, then (if ``stream_options.include_usage``)
    a chunk with ``choices: []`` and ``usage``, then ``data: [DONE]``.
    With ``"stream": false`` (or absent) it answers one ``chat.completion`` JSON.
``GET /v1/models``
    ``{"object": "list", "data": [{"id": MODEL_ID, "object": "model", ...}]}``.
    Does not consume a step. Any other path answers 404 (also not a step).

Every request (method, path, parsed JSON body, time, step index) is recorded in
memory (``handle.requests``) and, with ``--record FILE``, appended to FILE as one
JSON line per request (flushed at once).

Step schema (a JSON object; keys combine where it makes sense)
--------------------------------------------------------------
Reply content:
  ``text``: str            assistant text.
  ``words``: int           instead of ``text``: a deterministic text of N words
                           (same N -> same text, see :func:`make_words`).
  ``tool_call``: {"name": str, "arguments": obj|str, "id"?: str}
                           one function tool call (e.g. Pi's built-in ``bash``
                           with ``{"command": "echo hi"}``, or ``read`` with
                           ``{"path": "..."}``); finish_reason becomes
                           ``"tool_calls"``. ``tool_calls``: [..] for several.
                           May follow ``text`` in the same reply.
Streaming shape:
  ``chunk``: int           characters per content delta (default 8); tool-call
                           arguments are streamed in pieces of the same size.
  ``delay``: float         seconds to sleep between chunks (default 0). A slow
                           stream is text with a large delay.
  ``latency``: float       seconds to wait before sending anything (headers).
  ``finish_reason``: str   override the final finish_reason (e.g. ``"length"``).
  ``usage``: {...}         override ``prompt_tokens`` / ``completion_tokens``.
Failures:
  ``status``: int          answer with this HTTP status (e.g. 500, 429, 529)
                           and an OpenAI-style error body; no step content.
  ``body``: str|obj        the error body (obj -> JSON; str sent verbatim, as
                           JSON content-type if it parses as JSON).
  ``headers``: {..}        extra response headers (e.g. ``{"retry-after": "0"}``).
  ``hang``: true           read the request, then never answer (until the client
                           disconnects or the server stops).
  ``hang_after``: int      stream that many chunks (role chunk included), then
                           stall without finishing.
  ``cut_after``: int       stream that many chunks, then drop the connection
                           without the terminating chunk (a network error).

Examples::

    [{"text": "hello", "chunk": 2},
     {"tool_call": {"name": "bash", "arguments": {"command": "echo hi"}}},
     {"words": 200, "delay": 0.05},
     {"status": 500, "body": "boom"},
     {"hang": true},
     {"text": "truncated", "finish_reason": "length"}]

CLI
---
``python -m bridge.demo.model_server [--script FILE] [--steps JSON] [--default JSON]
[--host 127.0.0.1] [--port 0] [--record FILE] [--write-models DIR]
[--provider scripted] [--model-id scripted-model] [--verbose]``
(in a checkout, ``python tools/model_server.py …`` is the same).

When listening it prints exactly one line to stdout,
``{"port": N, "base_url": "http://127.0.0.1:N/v1"}``, and nothing else after
that (``--verbose`` logs go to stderr). ``--write-models DIR`` writes
``DIR/models.json`` (see :func:`models_json`) before that line is printed.
SIGTERM / SIGINT stop it cleanly (exit status 0).

In-process use::

    handle = start_server([{"text": "hi"}])
    ... handle.port, handle.base_url, handle.requests ...
    handle.close()
"""

from __future__ import annotations

import argparse
import json
import os
import select
import signal
import socket
import sys
import threading
import time
from collections.abc import Iterable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = [
    "DEFAULT_STEP",
    "ServerHandle",
    "make_words",
    "models_json",
    "start_server",
    "write_models",
]

DEFAULT_STEP: dict[str, Any] = {"text": "ok"}
DEFAULT_PROVIDER = "scripted"
DEFAULT_MODEL_ID = "scripted-model"
DUMMY_API_KEY = "scripted-dummy-key"

_STEP_KEYS = {
    "text",
    "words",
    "tool_call",
    "tool_calls",
    "chunk",
    "delay",
    "latency",
    "finish_reason",
    "usage",
    "status",
    "body",
    "headers",
    "hang",
    "hang_after",
    "cut_after",
    "comment",
}

_VOCAB = [
    "alpha",
    "bravo",
    "charlie",
    "delta",
    "echo",
    "foxtrot",
    "golf",
    "hotel",
    "india",
    "juliet",
    "kilo",
    "lima",
    "mike",
    "november",
    "oscar",
    "papa",
    "quebec",
    "romeo",
    "sierra",
    "tango",
    "uniform",
    "victor",
    "whiskey",
    "xray",
    "yankee",
    "zulu",
]


def make_words(n: int) -> str:
    """A deterministic text of ``n`` words (NATO alphabet, stride 7)."""
    return " ".join(_VOCAB[(i * 7) % len(_VOCAB)] for i in range(max(0, int(n))))


def validate_step(step: Any) -> dict[str, Any]:
    if not isinstance(step, dict):
        raise ValueError(f"script step must be a JSON object, got {step!r}")
    unknown = set(step) - _STEP_KEYS
    if unknown:
        raise ValueError(f"unknown step keys {sorted(unknown)} in {step!r}")
    return step


def models_json(
    base_url: str,
    provider: str = DEFAULT_PROVIDER,
    model_id: str = DEFAULT_MODEL_ID,
) -> dict[str, Any]:
    """The ``models.json`` content that points Pi 1.6.0 at this server.

    Format from Pi's docs/models.md ("Configure a compatible endpoint") and
    docs/models-configuration.md: a custom provider needs ``baseUrl`` and
    ``api``; the dummy ``apiKey`` makes the model available.
    """
    return {
        "providers": {
            provider: {
                "name": "Scripted test server",
                "baseUrl": base_url,
                "api": "openai-completions",
                "apiKey": DUMMY_API_KEY,
                "compat": {
                    "supportsStore": False,
                    "supportsDeveloperRole": False,
                    "supportsReasoningEffort": False,
                    "supportsUsageInStreaming": True,
                    "maxTokensField": "max_tokens",
                },
                "models": [
                    {
                        "id": model_id,
                        "name": "Scripted Model",
                        "reasoning": False,
                        "input": ["text"],
                        "contextWindow": 128000,
                        "maxTokens": 16384,
                        "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0},
                    }
                ],
            }
        }
    }


def write_models(
    directory: str,
    base_url: str,
    provider: str = DEFAULT_PROVIDER,
    model_id: str = DEFAULT_MODEL_ID,
) -> str:
    """Write ``directory/models.json`` atomically; return its path."""
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, "models.json")
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(models_json(base_url, provider, model_id), f, indent=2)
        f.write("\n")
    os.replace(tmp, path)
    return path


class _ClientGone(Exception):
    """The client closed the connection (or the server is stopping)."""


class _Script:
    def __init__(self, steps: Iterable[dict[str, Any]], default: dict[str, Any] | None):
        self._steps = [validate_step(s) for s in steps]
        self._default = validate_step(dict(default) if default is not None else dict(DEFAULT_STEP))
        self._next = 0
        self._lock = threading.Lock()

    def take(self) -> tuple[int | None, dict[str, Any]]:
        """(index, step); index is None for the default step."""
        with self._lock:
            if self._next < len(self._steps):
                i = self._next
                self._next += 1
                return i, self._steps[i]
            return None, self._default

    @property
    def remaining(self) -> int:
        with self._lock:
            return len(self._steps) - self._next


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    allow_reuse_address = True

    script: _Script
    stopping: threading.Event
    requests: list[dict[str, Any]]
    requests_lock: threading.Lock
    record_file: Any
    model_id: str
    verbose: bool
    counter: int


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"
    server_version = "ScriptedModelServer/1.0"

    # -- plumbing -----------------------------------------------------------

    def log_message(self, format: str, *args: Any) -> None:
        if self.server.verbose:
            sys.stderr.write("model_server: " + (format % args) + "\n")

    def handle(self) -> None:
        try:
            super().handle()
        except (TimeoutError, ConnectionError, _ClientGone, OSError):
            self.close_connection = True

    def _record(self, body: Any, step_index: int | None, raw: str | None = None) -> None:
        entry: dict[str, Any] = {
            "time": time.time(),
            "method": self.command,
            "path": self.path,
            "body": body,
            "step": step_index,
        }
        if raw is not None:
            entry["raw_body"] = raw
        srv = self.server
        with srv.requests_lock:
            srv.requests.append(entry)
            if srv.record_file is not None:
                srv.record_file.write(json.dumps(entry) + "\n")
                srv.record_file.flush()

    def _client_gone(self) -> bool:
        """True if the peer closed its side (EOF readable) or server stopping."""
        if self.server.stopping.is_set():
            return True
        try:
            r, _, _ = select.select([self.connection], [], [], 0)
            if r:
                data: bytes = self.connection.recv(1, socket.MSG_PEEK)
                return data == b""
        except (OSError, ValueError):
            return True
        return False

    def _wait(self, seconds: float | None) -> None:
        """Sleep ``seconds`` (forever if None), raising _ClientGone on disconnect/stop."""
        deadline = None if seconds is None else time.monotonic() + seconds
        while True:
            if self._client_gone():
                raise _ClientGone()
            if deadline is None:
                timeout = 0.05
            else:
                left = deadline - time.monotonic()
                if left <= 0:
                    return
                timeout = min(left, 0.05)
            try:
                select.select([self.connection], [], [], timeout)
            except (OSError, ValueError):
                raise _ClientGone() from None

    def _send_json(self, status: int, obj: Any, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(obj).encode()
        self._send_bytes(status, data, "application/json", headers)

    def _send_bytes(self, status: int, data: bytes, ctype: str, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, str(v))
        self.end_headers()
        self.wfile.write(data)
        self.wfile.flush()

    def _chunk(self, data: bytes) -> None:
        try:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()
        except (ConnectionError, OSError) as e:
            raise _ClientGone() from e

    # -- routes ---------------------------------------------------------------

    def do_GET(self) -> None:
        self._record(None, None)
        if self.path.rstrip("/") in ("/v1/models", "/models"):
            self._send_json(
                200,
                {
                    "object": "list",
                    "data": [{"id": self.server.model_id, "object": "model", "created": 0, "owned_by": "scripted"}],
                },
            )
        else:
            self._send_json(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw) if raw else None
            raw_text = None
        except ValueError:
            body, raw_text = None, raw.decode("utf-8", "replace")
        if self.path.rstrip("/") not in ("/v1/chat/completions", "/chat/completions"):
            self._record(body, None, raw_text)
            self._send_json(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})
            return
        index, step = self.server.script.take()
        self._record(body, index, raw_text)
        if not isinstance(body, dict):
            self._send_json(400, {"error": {"message": "body must be a JSON object", "type": "invalid_request_error"}})
            return
        try:
            self._answer(body, step)
        except _ClientGone:
            self.close_connection = True

    # -- replies --------------------------------------------------------------

    def _answer(self, req: dict[str, Any], step: dict[str, Any]) -> None:
        if step.get("latency"):
            self._wait(float(step["latency"]))
        if step.get("hang") is True:
            self._wait(None)
            return
        if "status" in step and int(step["status"]) >= 300:
            self._send_error_step(step)
            return

        with self.server.requests_lock:
            self.server.counter += 1
            n = self.server.counter
        model = req.get("model") or self.server.model_id
        created = int(time.time())
        cid = f"chatcmpl-scripted-{n}"
        text = make_words(step["words"]) if "words" in step else step.get("text", "")
        calls = list(step.get("tool_calls") or [])
        if step.get("tool_call"):
            calls.insert(0, step["tool_call"])
        calls_norm = []
        for j, c in enumerate(calls):
            args = c.get("arguments", {})
            calls_norm.append(
                {
                    "id": c.get("id") or f"call_scripted_{n}_{j}",
                    "name": c["name"],
                    "arguments": args if isinstance(args, str) else json.dumps(args),
                }
            )
        finish = step.get("finish_reason") or ("tool_calls" if calls_norm else "stop")
        usage = self._usage(req, text, calls_norm, step.get("usage"))

        if not req.get("stream"):
            message: dict[str, Any] = {"role": "assistant", "content": text or None}
            if calls_norm:
                message["tool_calls"] = [
                    {"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
                    for c in calls_norm
                ]
            self._send_json(
                200,
                {
                    "id": cid,
                    "object": "chat.completion",
                    "created": created,
                    "model": model,
                    "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
                    "usage": usage,
                },
            )
            return

        self._stream(req, step, cid, created, model, text, calls_norm, finish, usage)

    def _usage(
        self, req: dict[str, Any], text: str, calls: list[dict[str, Any]], override: dict[str, Any] | None
    ) -> dict[str, Any]:
        prompt = max(1, len(json.dumps(req.get("messages", []))) // 4)
        completion = max(1, (len(text) + sum(len(c["arguments"]) for c in calls)) // 4)
        if override:
            prompt = int(override.get("prompt_tokens", prompt))
            completion = int(override.get("completion_tokens", completion))
        return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}

    def _send_error_step(self, step: dict[str, Any]) -> None:
        status = int(step["status"])
        body = step.get("body")
        headers = dict(step.get("headers") or {})
        if body is None:
            etype = {429: "rate_limit_error", 529: "overloaded_error"}.get(status, "server_error")
            body = {"error": {"message": f"scripted error {status}", "type": etype, "param": None, "code": None}}
        if isinstance(body, str):
            try:
                json.loads(body)
                ctype = "application/json"
            except ValueError:
                ctype = "text/plain; charset=utf-8"
            self._send_bytes(status, body.encode(), ctype, headers)
        else:
            self._send_json(status, body, headers)

    def _stream(
        self,
        req: dict[str, Any],
        step: dict[str, Any],
        cid: str,
        created: int,
        model: str,
        text: str,
        calls: list[dict[str, Any]],
        finish: str,
        usage: dict[str, Any],
    ) -> None:
        size = max(1, int(step.get("chunk", 8)))
        delay = float(step.get("delay", 0.0))
        hang_after = step.get("hang_after")
        cut_after = step.get("cut_after")
        include_usage = bool((req.get("stream_options") or {}).get("include_usage"))

        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        for k, v in (step.get("headers") or {}).items():
            self.send_header(k, str(v))
        self.end_headers()
        self.wfile.flush()

        def chunk_obj(delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
            return {
                "id": cid,
                "object": "chat.completion.chunk",
                "created": created,
                "model": model,
                "system_fingerprint": None,
                "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}],
            }

        events: list[dict[str, Any]] = [chunk_obj({"role": "assistant", "content": ""})]
        for i in range(0, len(text), size):
            events.append(chunk_obj({"content": text[i : i + size]}))
        for j, c in enumerate(calls):
            events.append(
                chunk_obj(
                    {
                        "tool_calls": [
                            {
                                "index": j,
                                "id": c["id"],
                                "type": "function",
                                "function": {"name": c["name"], "arguments": ""},
                            }
                        ]
                    }
                )
            )
            a = c["arguments"]
            for i in range(0, len(a), size):
                events.append(chunk_obj({"tool_calls": [{"index": j, "function": {"arguments": a[i : i + size]}}]}))
        events.append(chunk_obj({}, finish))
        if include_usage:
            events.append(
                {
                    "id": cid,
                    "object": "chat.completion.chunk",
                    "created": created,
                    "model": model,
                    "system_fingerprint": None,
                    "choices": [],
                    "usage": usage,
                }
            )

        sent = 0
        for k, ev in enumerate(events):
            if hang_after is not None and sent >= int(hang_after):
                self._wait(None)
                return
            if cut_after is not None and sent >= int(cut_after):
                self._cut()
                return
            if k > 0 and delay > 0:
                self._wait(delay)
            self._chunk(b"data: " + json.dumps(ev).encode() + b"\n\n")
            sent += 1
        if hang_after is not None and sent >= int(hang_after):
            self._wait(None)
            return
        if cut_after is not None and sent >= int(cut_after):
            self._cut()
            return
        self._chunk(b"data: [DONE]\n\n")
        self._chunk(b"")  # terminating zero-length chunk

    def _cut(self) -> None:
        self.close_connection = True
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


class ServerHandle:
    """A running scripted server (in a background thread)."""

    def __init__(self, server: _Server, thread: threading.Thread, host: str):
        self._server = server
        self._thread = thread
        self.host = host
        self.port: int = server.server_address[1]
        self.base_url = f"http://{host}:{self.port}/v1"
        self._closed = False

    @property
    def requests(self) -> list[dict[str, Any]]:
        """Recorded requests so far (a snapshot copy)."""
        with self._server.requests_lock:
            return list(self._server.requests)

    @property
    def remaining(self) -> int:
        """Script steps not yet consumed."""
        return self._server.script.remaining

    def write_models(self, directory: str, provider: str = DEFAULT_PROVIDER, model_id: str | None = None) -> str:
        return write_models(directory, self.base_url, provider, model_id or self._server.model_id)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._server.stopping.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
        if self._server.record_file is not None:
            self._server.record_file.close()

    def __enter__(self) -> ServerHandle:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def start_server(
    script: Iterable[dict[str, Any]] = (),
    default: dict[str, Any] | None = None,
    host: str = "127.0.0.1",
    port: int = 0,
    record: str | None = None,
    model_id: str = DEFAULT_MODEL_ID,
    verbose: bool = False,
) -> ServerHandle:
    """Start the scripted server in a daemon thread and return its handle."""
    srv = _Server((host, port), _Handler)
    srv.script = _Script(script, default)
    srv.stopping = threading.Event()
    srv.requests = []
    srv.requests_lock = threading.Lock()
    # Closed by ServerHandle.close (the file lives as long as the server).
    srv.record_file = open(record, "a", encoding="utf-8") if record else None  # noqa: SIM115
    srv.model_id = model_id
    srv.verbose = verbose
    srv.counter = 0
    t = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, name="model-server", daemon=True)
    t.start()
    return ServerHandle(srv, t, host)


def _load_script(path: str | None, steps: str | None) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    data: Any = []
    if path:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    elif steps:
        data = json.loads(steps)
    default = None
    if isinstance(data, dict):  # {"steps": [...], "default": {...}}
        default = data.get("default")
        data = data.get("steps", [])
    if not isinstance(data, list):
        raise ValueError('script must be a JSON list of steps (or {"steps": [...]})')
    return data, default


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Scripted OpenAI-compatible model server (see module docstring).")
    p.add_argument("--script", help='JSON file: a list of steps, or {"steps": [...], "default": {...}}')
    p.add_argument("--steps", help="the script inline, as JSON (instead of --script)")
    p.add_argument("--default", help='JSON step used once the script is exhausted (default {"text": "ok"})')
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--record", help="append every request as a JSON line to this file")
    p.add_argument("--write-models", metavar="DIR", help="write DIR/models.json pointing Pi at this server")
    p.add_argument("--provider", default=DEFAULT_PROVIDER, help="provider name in models.json")
    p.add_argument("--model-id", default=DEFAULT_MODEL_ID, help="model id in models.json and /v1/models")
    p.add_argument("--verbose", action="store_true", help="log requests to stderr")
    a = p.parse_args(argv)

    stop = threading.Event()

    def on_signal(signum: int, frame: Any) -> None:
        stop.set()

    # Installed first: a signal that arrives during start-up still stops cleanly.
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    if hasattr(signal, "SIGHUP"):
        signal.signal(signal.SIGHUP, on_signal)

    try:
        steps, default = _load_script(a.script, a.steps)
        if a.default is not None:
            default = json.loads(a.default)
        handle = start_server(
            steps, default, host=a.host, port=a.port, record=a.record, model_id=a.model_id, verbose=a.verbose
        )
    except (OSError, ValueError) as e:
        print(f"model_server: {e}", file=sys.stderr)
        return 2

    if a.write_models:
        write_models(a.write_models, handle.base_url, a.provider, a.model_id)
    sys.stdout.write(json.dumps({"port": handle.port, "base_url": handle.base_url}) + "\n")
    sys.stdout.flush()

    while not stop.wait(0.5):
        pass
    handle.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
