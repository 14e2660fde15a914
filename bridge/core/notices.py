"""Notices: what the bridge tells whoever listens, besides signals. ``bridge serve`` writes each
as one line on stdout (SPEC §7); the Python API's ``Bridge.signals()`` channel and its listeners
get the same JSON objects. Each record's JSON form is declared under it (:mod:`bridge.core.wire`);
the engine's own retries are :class:`bridge.core.events.Retrying` (``{"type":"progress",...}``).
"""

from __future__ import annotations

import attrs

from bridge.core.receipts import Receipt
from bridge.core.wire import Wire, form
from bridge.core.words import RequestId


@form(tag={"type": "engine", "event": "started"})
@attrs.frozen
class EngineStartedNotice(Wire):
    """An engine process is running (generation N: the Nth this bridge started)."""

    pid: int | None
    generation: int


@form(tag={"type": "engine", "event": "exited"})
@attrs.frozen
class EngineExitedNotice(Wire):
    """An engine process ended; ``requested``: the bridge had asked it to stop."""

    pid: int | None
    generation: int
    code: int | None
    signal: int | None
    requested: bool


@form(tag={"type": "engine", "event": "down"})
@attrs.frozen
class EngineDownNotice(Wire):
    """The engine will not be started again (the crash limit, or it cannot be launched)."""

    why: str


@form(tag={"type": "text"}, rename={"request": "id"})
@attrs.frozen
class TextNotice(Wire):
    """Reply text of a prompt submitted with ``stream``, as it arrives."""

    request: RequestId | None
    text: str


@form(tag={"type": "receipt"}, rename={"request": "id"})
@attrs.frozen
class ReceiptNotice(Wire):
    """A prompt's receipt (exactly one per accepted prompt)."""

    request: RequestId | None
    receipt: Receipt


Notice = EngineStartedNotice | EngineExitedNotice | EngineDownNotice | TextNotice | ReceiptNotice
