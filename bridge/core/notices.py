"""Notices: what the bridge tells whoever listens, and the signals the lifecycle raises itself. ``bridge serve`` writes each
as one line on stdout (SPEC §7); the Python API's ``Bridge.signals()`` channel and its listeners
get the same JSON objects. Each record's JSON form is declared under it (:mod:`bridge.core.wire`);
the engine's own retries are :class:`bridge.core.events.Retrying` (``{"type":"progress",...}``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from bridge.core.receipts import Receipt, Usage
from bridge.core.wire import Wire, form
from bridge.core.words import RequestId, Signal


@form(tag={"type": "engine", "event": "started"}, rename={"new_conversation": "newConversation"})
@attrs.frozen
class EngineStartedNotice(Wire):
    """An engine process is running (generation N: the Nth this bridge started)."""

    pid: int | None
    generation: int
    #: It replaces an engine that had been written a prompt: the conversation is lost (a new
    #: engine is a new conversation; the seal keeps no session file). Never under a named
    #: conversation, which every engine resumes (:mod:`bridge.core.conversation`).
    new_conversation: bool = False


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
    """The engine will not be started again (the crash limit, or it cannot be set up)."""

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


@form(
    tag={"type": "compacted"},
    rename={
        "request": "id",
        "tokens_before": "tokensBefore",
        "tokens_after": "estimatedTokensAfter",
        "summary_chars": "summaryChars",
    },
)
@attrs.frozen
class CompactedNotice(Wire):
    """The compaction asked for before prompt ``request`` was done (``ok``), or Pi refused it
    (``error``, Pi's words; the prompt is written all the same)."""

    request: RequestId | None
    ok: bool
    error: str | None = None
    tokens_before: Any = None
    tokens_after: Any = None
    #: Pi's usage of the model call(s) that wrote the summary, in a receipt's ``usage`` shape.
    usage: Usage | None = None
    #: How long the summary is, in characters (the summary itself is in the journal).
    summary_chars: int | None = None


def compaction_notice(request: RequestId | None, answer: Mapping[str, Any]) -> CompactedNotice:
    """The notice for Pi's answer to ``compact``."""
    if answer.get("success") is not True:
        error = answer.get("error")
        return CompactedNotice(request, False, str(error)[:500] if error is not None else "no answer")
    data = answer.get("data")
    data = data if isinstance(data, Mapping) else {}
    summary = data.get("summary")
    usage = data.get("usage")
    return CompactedNotice(
        request,
        True,
        tokens_before=data.get("tokensBefore"),
        tokens_after=data.get("estimatedTokensAfter"),
        usage=Usage().add({"usage": usage}) if isinstance(usage, dict) else None,
        summary_chars=len(summary) if isinstance(summary, str) else None,
    )


Notice = EngineStartedNotice | EngineExitedNotice | EngineDownNotice | TextNotice | ReceiptNotice | CompactedNotice


# --------------------------------------------------------------------------
# The signals the lifecycle raises itself (the tracker's and the session's are in
# bridge.core.tracker and bridge.core.events); each is stamped with its engine's generation.


@form(tag={"signal": Signal.SEAL_CHECK})
@attrs.frozen
class SealCheckSignal(Wire):
    """The engine failed its start-up (seal) check; ``action``: what ``--seal-check`` does about it."""

    problems: list[str]
    action: str


@form(tag={"signal": Signal.ENGINE_DOWN})
@attrs.frozen
class EngineDownSignal(Wire):
    """The engine will not be started again, and why."""

    why: str


@form(tag={"signal": Signal.JOURNAL_FAILED})
@attrs.frozen
class JournalFailedSignal(Wire):
    """The journal could not be written (the bridge closes; no receipt is lost)."""

    error: str


@form(tag={"signal": Signal.STALLED})
@attrs.frozen
class StalledSignal(Wire):
    """The held prompt's run showed nothing for ``after`` seconds while it waited on the
    model; the bridge stops it (``stop``), and it settles ``failed``/``stalled``."""

    request: RequestId
    after: float
    stop: str | None


@form(tag={"signal": Signal.SIGNALS_SUPPRESSED})
@attrs.frozen
class SignalsSuppressed(Wire):
    """This engine raised more signals than are sent; the rest are counted, not sent."""

    after: int
