"""What the evidence half says: the events a :class:`~bridge.core.session.Session` returns, in
order, for what it was fed (besides the tracker's own :class:`~bridge.core.tracker.Overlap`,
:class:`~bridge.core.tracker.Working` and :class:`~bridge.core.tracker.Settled`), and what it
yields for each engine line (:class:`Observed`, or for a run of ``message_update`` lines
:class:`Skipped`, taken in bulk by the fast path, or :class:`Streamed`, parsed in one pass for
a prompt that reads them). The events a prompt asked for (tool
calls, thinking, ...) are :mod:`bridge.core.progress`'s.

Each event that reaches the controller as a ``signal`` has its wire form here (``to_json``);
the words are :mod:`bridge.core.words`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

import attrs

from bridge.core.framing import Oversize, RawLine
from bridge.core.progress import ProgressEvent
from bridge.core.receipts import Receipt, Usage
from bridge.core.tracker import Overlap, Settled, Working
from bridge.core.wire import Wire, form
from bridge.core.words import Reason, RequestId, Signal


@form(tag={"signal": Signal.GAP}, rename={"length": "bytes"})
@attrs.frozen
class GapOpened(Wire):
    """A line that was not a JSON object: the evidence may be incomplete from here."""

    idx: int
    why: str
    length: int


@form(tag={"signal": Signal.UNSEALED})
@attrs.frozen
class SealBroken(Wire):
    """The first overlap, gap or non-``started`` disposition on this engine."""

    #: The taint: ``overlap``, ``aborted-without-stop``, ``gap`` or ``disposition``.
    cause: Reason
    idx: int
    request: RequestId | None


@attrs.frozen
class Acked:
    request: RequestId | None
    idx: int
    disposition: str | None


@form(tag={"signal": Signal.DISPOSITION})
@attrs.frozen
class DispositionSignal(Wire):
    idx: int
    request: RequestId | None
    disposition: Any


@form(tag={"signal": Signal.SECOND_PROMPT})
@attrs.frozen
class SecondPrompt(Wire):
    """A ``prompt`` written while another prompt held the slot (only a deliberate ``send_raw``
    does that): the bridge's own signal, not one of the seed's overlaps (SPEC §4). It breaks the
    seal (``unsealed``, cause ``overlap``), and goes on the displaced prompt's receipt, so the
    receipt says why its evidence is tainted."""

    #: The last observation index when it was written (the new prompt's lines come after it).
    idx: int
    #: The new prompt's id.
    request: RequestId | None
    #: The prompt that held the slot, displaced without its receipt.
    held: RequestId | None


@form(tag={"signal": Signal.SEAL_DIAGNOSTIC}, omit=["answer", "ui"], flatten="detail")
@attrs.frozen
class Diagnostic(Wire):
    """Something a sealed engine should not do, but that is not an overlap.

    ``answer`` is the command the bridge must write in reply (a dialog is
    answered ``cancelled`` at once so the engine never hangs on it), or None.
    """

    kind: str  # "extension-ui" | "extension-error"
    idx: int
    detail: dict[str, Any]
    answer: dict[str, Any] | None = None
    #: An extension UI request's own fields, bounded (:func:`bridge.core.dialogs.ui_fields`):
    #: what an allowlisted extension's dialog or notification passes on to the controller.
    ui: dict[str, Any] | None = None


@attrs.frozen
class StopUnheard:
    """The held prompt's run started after the engine had answered its stop: that stop
    stopped nothing (Pi's ``abort`` acts on a running agent only, and the run had not
    begun), so it must be sent again now (SPEC §5: a stop sent before the prompt's run
    started still stops that run)."""

    request: RequestId | None
    stop: Any
    idx: int


@attrs.frozen
class TextDelta:
    request: RequestId | None
    text: str


@attrs.frozen
class ReceiptReady:
    receipt: Receipt


@form(
    tag={"type": "progress", "event": "retrying"},
    rename={"request": "id", "max_attempts": "maxAttempts", "delay_ms": "delayMs"},
)
@attrs.frozen
class Retrying(Wire):
    """The engine retries the held prompt's run by itself (Pi's ``auto_retry_start``)."""

    request: RequestId | None
    attempt: Any
    max_attempts: Any
    delay_ms: Any
    error: str | None


@attrs.frozen
class CompactionSpent:
    """Pi compacted the conversation (its ``compaction_end``, manual or automatic) and says
    what the summary's model call cost: it counts toward the budgets (:mod:`bridge.core.budget`).
    ``request``: the held prompt whose run it was in (None: between runs, a prompt's own
    compaction before it is written)."""

    request: RequestId | None
    usage: Usage


Event = (
    Overlap
    | Working
    | Settled
    | GapOpened
    | SealBroken
    | Acked
    | DispositionSignal
    | SecondPrompt
    | Diagnostic
    | TextDelta
    | StopUnheard
    | ReceiptReady
    | Retrying
    | CompactionSpent
    | ProgressEvent
)

#: Returned for the lines that cause nothing (most of them); never mutated.
NO_EVENTS: Final[tuple[()]] = ()


@attrs.frozen
class Observed:
    """One engine line observed: its index, what it parsed to (None: a ``message_update``
    nobody streams, not parsed) and the events it caused."""

    idx: int
    line: bytes | Oversize
    parsed: dict[str, Any] | RawLine | None
    events: Sequence[Event]


@attrs.frozen
class Skipped:
    """A run of ``message_update`` lines taken in bulk: indices ``first`` on, not parsed."""

    first: int
    lines: Sequence[bytes]
    #: Their bytes together.
    nbytes: int


@attrs.frozen
class Streamed:
    """A run of ``message_update`` lines the held prompt reads (its text, its events), parsed
    in one pass: indices ``first`` on, and only their deltas come of them, joined by kind as a
    read's deltas are (:meth:`bridge.core.session.Session.observe_batch`)."""

    first: int
    lines: Sequence[bytes]
    #: Their bytes together.
    nbytes: int
    events: Sequence[Event]


Observation = Observed | Skipped | Streamed
