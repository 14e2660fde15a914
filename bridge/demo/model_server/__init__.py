"""Scripted OpenAI-compatible model server for offline Pi runs (tests, demo, CI; SPEC §2).

It ships inside the package because ``bridge demo`` runs it in-process (an installed wheel
has no checkout to load it from); in a checkout, ``tools/model_server.py`` runs this same
package.

Why stdlib only: the server must run wherever the project's Python runs, with no extra
dependency to install or pin (tests/test_layers.py checks that every module here imports
nothing else, not even the rest of ``bridge``).

Endpoints
---------
``POST /v1/chat/completions``
    Consumes the next script step and answers as OpenAI does: a ``chat.completion`` JSON,
    or with ``"stream": true`` ``text/event-stream`` ``chat.completion.chunk`` records.
``GET /v1/models``
    ``{"object": "list", "data": [{"id": MODEL_ID, "object": "model", ...}]}``.
    Does not consume a step. Any other path answers 404 (also not a step).

Every request (method, path, parsed JSON body, time, step index) is recorded in memory
(``handle.requests``) and, with ``--record FILE``, appended to FILE as one JSON line per
request (flushed at once).

Where things are:

- :mod:`~bridge.demo.model_server.script`: the steps, their schema (``text``, ``words``,
  ``tool_call``, ``chunk``, ``delay``, ``status``, ``hang``, ``cut_after`` …) and the order
  they are taken in.
- :mod:`~bridge.demo.model_server.reply`: what one step answers to one request, as
  OpenAI's ``chat.completion`` and ``chat.completion.chunk`` objects (pure).
- :mod:`~bridge.demo.model_server.handler`: the HTTP handler: routes, recording, waits,
  error steps and the Server-Sent Events stream.
- :mod:`~bridge.demo.model_server.server`: :func:`start_server`, :class:`ServerHandle` and
  :func:`models_json`, the config that points Pi at the server.
- :mod:`~bridge.demo.model_server.cli`: ``python -m bridge.demo.model_server`` (the one
  stdout line with the port, the stop signals).

In-process use::

    handle = start_server([{"text": "hi"}])
    ... handle.port, handle.base_url, handle.requests ...
    handle.close()
"""

from __future__ import annotations

from bridge.demo.model_server.script import DEFAULT_STEP, make_words
from bridge.demo.model_server.server import ServerHandle, models_json, start_server, write_models

__all__ = [
    "DEFAULT_STEP",
    "ServerHandle",
    "make_words",
    "models_json",
    "start_server",
    "write_models",
]
