"""The command line: ``python -m bridge.demo.model_server`` (``python tools/model_server.py``
in a checkout).

``[--script FILE] [--steps JSON] [--default JSON] [--host 127.0.0.1] [--port 0]
[--record FILE] [--write-models DIR] [--provider scripted] [--model-id scripted-model]
[--verbose]``

When listening it prints exactly one line to stdout,
``{"port": N, "base_url": "http://127.0.0.1:N/v1"}``, and nothing else after that
(``--verbose`` logs go to stderr): the tests and tools read the port from it.
``--write-models DIR`` writes ``DIR/models.json`` before that line is printed.
SIGTERM / SIGINT / SIGHUP stop it cleanly (exit status 0); a script or address it cannot
use is one line on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
from typing import Any

from bridge.demo.model_server.script import load_script
from bridge.demo.model_server.server import DEFAULT_MODEL_ID, DEFAULT_PROVIDER, start_server, write_models

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    """Serve until a stop signal; the exit status."""
    a = _parser().parse_args(argv)
    # Installed first: a signal that arrives during start-up still stops cleanly.
    stop = _stop_on_signals()
    try:
        steps, default = load_script(a.script, a.steps)
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


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=None if not sys.argv[0].endswith("__main__.py") else "python -m bridge.demo.model_server",
        description="Scripted OpenAI-compatible model server (see bridge/demo/model_server/).",
    )
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
    return p


def _stop_on_signals() -> threading.Event:
    """An event that SIGTERM, SIGINT and (where it exists) SIGHUP set."""
    stop = threading.Event()

    def on_signal(signum: int, frame: Any) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    if hasattr(signal, "SIGHUP"):
        signal.signal(signal.SIGHUP, on_signal)
    return stop
