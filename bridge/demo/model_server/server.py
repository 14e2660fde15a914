"""The running server, as the demo and the tests hold it, and the ``models.json`` that points
Pi at it.

:func:`start_server` binds the socket, serves in a daemon thread and returns a
:class:`ServerHandle` (port, base URL, recorded requests, steps left, ``close``).
:func:`models_json` is the custom-provider config Pi 1.6.0 reads from
``$PI_CODING_AGENT_DIR/models.json`` (Pi's docs/models.md, "Configure a compatible endpoint",
and docs/models-configuration.md; SPEC §2).
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterable
from typing import Any

from bridge.demo.model_server.handler import ScriptedHTTPServer
from bridge.demo.model_server.script import Script

__all__ = [
    "DEFAULT_MODEL_ID",
    "DEFAULT_PROVIDER",
    "DUMMY_API_KEY",
    "ServerHandle",
    "models_json",
    "start_server",
    "write_models",
]

DEFAULT_PROVIDER = "scripted"
DEFAULT_MODEL_ID = "scripted-model"
DUMMY_API_KEY = "scripted-dummy-key"


def models_json(
    base_url: str,
    provider: str = DEFAULT_PROVIDER,
    model_id: str = DEFAULT_MODEL_ID,
    cost: dict[str, float] | None = None,
) -> dict[str, Any]:
    """The ``models.json`` content that points Pi 1.6.0 at this server.

    Format from Pi's docs/models.md ("Configure a compatible endpoint") and
    docs/models-configuration.md: a custom provider needs ``baseUrl`` and
    ``api``; the dummy ``apiKey`` makes the model available. ``cost``: the model's
    prices per million tokens (``input``, ``output``, ``cacheRead``, ``cacheWrite``;
    default all 0), from which Pi computes each message's ``usage.cost``.
    """
    model = {
        "id": model_id,
        "name": "Scripted Model",
        "reasoning": False,
        "input": ["text"],
        "contextWindow": 128000,
        "maxTokens": 16384,
        "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, **(cost or {})},
    }
    compat = {
        "supportsStore": False,
        "supportsDeveloperRole": False,
        "supportsReasoningEffort": False,
        "supportsUsageInStreaming": True,
        "maxTokensField": "max_tokens",
    }
    return {
        "providers": {
            provider: {
                "name": "Scripted test server",
                "baseUrl": base_url,
                "api": "openai-completions",
                "apiKey": DUMMY_API_KEY,
                "compat": compat,
                "models": [model],
            }
        }
    }


def write_models(
    directory: str,
    base_url: str,
    provider: str = DEFAULT_PROVIDER,
    model_id: str = DEFAULT_MODEL_ID,
    cost: dict[str, float] | None = None,
) -> str:
    """Write ``directory/models.json`` atomically; return its path."""
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, "models.json")
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(models_json(base_url, provider, model_id, cost), f, indent=2)
        f.write("\n")
    os.replace(tmp, path)
    return path


class ServerHandle:
    """A running scripted server (in a background thread)."""

    def __init__(self, server: ScriptedHTTPServer, thread: threading.Thread, host: str):
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

    def write_models(
        self,
        directory: str,
        provider: str = DEFAULT_PROVIDER,
        model_id: str | None = None,
        cost: dict[str, float] | None = None,
    ) -> str:
        return write_models(directory, self.base_url, provider, model_id or self._server.model_id, cost)

    def close(self) -> None:
        """Stop serving: waiting handlers see the stop flag and end; the thread is joined (≤ 5 s)."""
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
    require_key: str | None = None,
) -> ServerHandle:
    """Start the scripted server in a daemon thread and return its handle. ``require_key``: a
    completion request without it (as a bearer token, ``x-api-key`` or ``?key=``) is answered 401."""
    steps = Script(script, default)
    srv = ScriptedHTTPServer((host, port), steps, model_id, verbose, require_key)
    # Closed by ServerHandle.close (the file lives as long as the server).
    srv.record_file = open(record, "a", encoding="utf-8") if record else None  # noqa: SIM115
    t = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, name="model-server", daemon=True)
    t.start()
    return ServerHandle(srv, t, host)
