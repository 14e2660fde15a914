"""The HTTP side: one request handler on a stdlib threading server, and the SSE stream.

``http.server.ThreadingHTTPServer`` is a real HTTP/1.1 server (keep-alive, one thread per
connection), and Server-Sent Events are nothing but ``data: {...}\\n\\n`` records written as
HTTP/1.1 chunked transfer-encoding chunks, so no async framework is needed. One thread per
connection also makes "hang" and "slow" steps trivial and independent: a waiting handler
polls its socket, so it ends when the client disconnects or the server stops
(:class:`ClientGone`).

Routes: ``POST /v1/chat/completions`` takes the next step (:mod:`bridge.demo.model_server.script`) and answers with its
:class:`~bridge.demo.model_server.reply.Reply`; ``GET /v1/models`` lists the one model; any
other path is a 404. Every request is recorded (method, path, parsed JSON body, time, step
index, the key it carried) in memory and, when the server has a record file, as one flushed
JSON line. A server started with ``require_key`` answers a completion request without that key
401 (no step taken).
"""

from __future__ import annotations

import json
import select
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, TextIO
from urllib.parse import parse_qs, urlsplit

from bridge.demo.model_server.reply import Reply, chunks, completion, make_reply
from bridge.demo.model_server.script import Script

__all__ = ["ClientGone", "Handler", "ScriptedHTTPServer"]

#: How often a waiting handler looks at its socket and at the stop flag (seconds).
_POLL = 0.05


class ClientGone(Exception):
    """The client closed the connection (or the server is stopping)."""


class ScriptedHTTPServer(ThreadingHTTPServer):
    """The stdlib server, holding what every handler thread shares."""

    daemon_threads = True
    block_on_close = False
    allow_reuse_address = True

    def __init__(
        self, address: tuple[str, int], script: Script, model_id: str, verbose: bool, require_key: str | None = None
    ):
        super().__init__(address, Handler)
        #: A completion request must carry this key (``Authorization: Bearer``, ``x-api-key`` or
        #: ``?key=``), else it is answered 401 and takes no step.
        self.require_key = require_key
        self.script = script
        self.model_id = model_id
        self.verbose = verbose
        self.stopping = threading.Event()
        self.requests: list[dict[str, Any]] = []
        #: Guards ``requests``, ``record_file`` and ``counter``.
        self.requests_lock = threading.Lock()
        self.record_file: TextIO | None = None
        #: Completions answered so far (numbers their ids).
        self.counter = 0


class Handler(BaseHTTPRequestHandler):
    server: ScriptedHTTPServer
    protocol_version = "HTTP/1.1"
    server_version = "ScriptedModelServer/1.0"
    #: ``TCP_NODELAY``: a stream's small writes go out at once, not after the last one's ACK
    #: (Nagle's algorithm held a client that delays its ACKs ~40 ms a call: tools/bench/bench_keyhold).
    disable_nagle_algorithm = True

    # -- plumbing -----------------------------------------------------------

    def log_message(self, format: str, *args: Any) -> None:
        if self.server.verbose:
            sys.stderr.write("model_server: " + (format % args) + "\n")

    def handle(self) -> None:
        try:
            super().handle()
        except (TimeoutError, ConnectionError, ClientGone, OSError):
            self.close_connection = True

    def _record(self, body: Any, step_index: int | None, raw: str | None = None) -> None:
        entry: dict[str, Any] = {
            "time": time.time(),
            "method": self.command,
            "path": self.path,
            "body": body,
            "step": step_index,
            "key": self._key(),
        }
        if raw is not None:
            entry["raw_body"] = raw
        srv = self.server
        with srv.requests_lock:
            srv.requests.append(entry)
            if srv.record_file is not None:
                srv.record_file.write(json.dumps(entry) + "\n")
                srv.record_file.flush()

    def _key(self) -> str | None:
        """The key the request carries (``Authorization: Bearer``, ``x-api-key``, ``?key=``), if any."""
        auth = self.headers.get("Authorization") or ""
        if auth.lower().startswith("bearer "):
            return auth[7:].strip()
        if self.headers.get("x-api-key"):
            return str(self.headers["x-api-key"])
        query = parse_qs(urlsplit(self.path).query).get("key")
        return query[0] if query else None

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
        """Sleep ``seconds`` (forever if None), raising ClientGone on disconnect/stop."""
        deadline = None if seconds is None else time.monotonic() + seconds
        while True:
            if self._client_gone():
                raise ClientGone()
            if deadline is None:
                timeout = _POLL
            else:
                left = deadline - time.monotonic()
                if left <= 0:
                    return
                timeout = min(left, _POLL)
            try:
                select.select([self.connection], [], [], timeout)
            except (OSError, ValueError):
                raise ClientGone() from None

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
            raise ClientGone() from e

    def _cut(self) -> None:
        self.close_connection = True
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    # -- routes ---------------------------------------------------------------

    def do_GET(self) -> None:
        self._record(None, None)
        if self.path.rstrip("/") in ("/v1/models", "/models"):
            model = {"id": self.server.model_id, "object": "model", "created": 0, "owned_by": "scripted"}
            self._send_json(200, {"object": "list", "data": [model]})
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
        if urlsplit(self.path).path.rstrip("/") not in ("/v1/chat/completions", "/chat/completions"):
            self._record(body, None, raw_text)
            self._send_json(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})
            return
        wanted = self.server.require_key
        if wanted is not None and self._key() != wanted:
            self._record(body, None, raw_text)
            self._send_json(401, {"error": {"message": "wrong or missing API key", "type": "authentication_error"}})
            return
        index, step = self.server.script.take()
        self._record(body, index, raw_text)
        if not isinstance(body, dict):
            self._send_json(400, {"error": {"message": "body must be a JSON object", "type": "invalid_request_error"}})
            return
        try:
            self._answer(body, step)
        except ClientGone:
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
        reply = make_reply(req, step, n, self.server.model_id)
        if req.get("stream"):
            self._stream(req, step, reply)
        else:
            self._send_json(200, completion(reply))

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

    # -- the event stream -------------------------------------------------------

    def _stream(self, req: dict[str, Any], step: dict[str, Any], reply: Reply) -> None:
        """The reply as Server-Sent Events, shaped by the step's ``chunk``, ``delay``,
        ``hang_after`` and ``cut_after``; ``data: [DONE]`` and the last chunk end it."""
        include_usage = bool((req.get("stream_options") or {}).get("include_usage"))
        events = chunks(reply, max(1, int(step.get("chunk", 8))), include_usage, bool(step.get("running_usage")))
        delay = float(step.get("delay", 0.0))
        self._start_event_stream(step.get("headers") or {})
        for sent, event in enumerate(events):
            if self._stop_early(step, sent):
                return
            if sent > 0 and delay > 0:
                self._wait(delay)
            self._chunk(b"data: " + json.dumps(event).encode() + b"\n\n")
        if self._stop_early(step, len(events)):
            return
        self._chunk(b"data: [DONE]\n\n")
        self._chunk(b"")  # terminating zero-length chunk

    def _start_event_stream(self, headers: dict[str, Any]) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        for k, v in headers.items():
            self.send_header(k, str(v))
        self.end_headers()
        self.wfile.flush()

    def _stop_early(self, step: dict[str, Any], sent: int) -> bool:
        """With ``sent`` chunks out, stall (``hang_after``: until the client goes) or drop the
        connection (``cut_after``) if the step says so now; True if it did."""
        hang_after, cut_after = step.get("hang_after"), step.get("cut_after")
        if hang_after is not None and sent >= int(hang_after):
            self._wait(None)
            return True
        if cut_after is not None and sent >= int(cut_after):
            self._cut()
            return True
        return False
