"""What crosses the supervision's doors: its vocabulary, declared once.

:class:`~bridge.core.supervision.Supervision` is the one object that decides; these are the words
it speaks with the layers above it (the style of h11, whose events are declared once in
``h11/_events.py`` and exported by the package):

- :data:`Request` -- what a controller asks (:meth:`Supervision.feed
  <bridge.core.supervision.Supervision.feed>`): the lifecycle's own records, named here;
- :data:`Action` -- everything a door returns: the lifecycle's actions it passes on (a write, a
  spawn, a stop, a receipt to deliver, ...) and those it adds (a journal entry, ``Record*``; a
  notification, :class:`Tell`; streamed :class:`Text`; a prompt's :class:`Progress`);
- :class:`View` -- what a door may read of it (:meth:`Supervision.view
  <bridge.core.supervision.Supervision.view>`), and :class:`Collected`, the tracker's outputs;
- :class:`LaunchFacts` -- what it reads of an engine's launch.

A module of its own because it is owned by no one step: the supervision's machinery (its doors'
handling, the session and the lifecycle it joins) is :mod:`bridge.core.supervision`, which
re-exports every name here; the layers above import them from there (tests/test_layers.py).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

import attrs

from bridge.core.budget import Spend
from bridge.core.framing import RawLine
from bridge.core.lifecycle import (
    Answer,
    AnswerDialog,
    Ask,
    AskDialog,
    Close,
    Closed,
    Compact,
    Configure,
    Deliver,
    DialogEnded,
    DialogReply,
    NewConversation,
    NobodyAnswers,
    Notify,
    Open,
    Shutdown,
    Spawn,
    Stop,
    StopAnswer,
    StopEngine,
    Submit,
    Write,
)
from bridge.core.progress import ProgressEvent
from bridge.core.receipts import Receipt
from bridge.core.steering import EngineConfig, Wanted
from bridge.core.tracker import Overlap, Settled, Working
from bridge.core.words import StopBy

# --------------------------------------------------------------------------
# What a controller asks (the lifecycle's own records, exported here as the one door's words)

#: A controller's request: what :meth:`Supervision.feed` takes. What the world does (an engine
#: launched, its lines, its exit, a failed write, the time) has a door of its own.
Request = (
    Open | Submit | Stop | Shutdown | Close | Configure | NewConversation | Compact | Ask | AnswerDialog | NobodyAnswers
)
_REQUESTS: frozenset[type] = frozenset(
    {Open, Submit, Stop, Shutdown, Close, Configure, NewConversation, Compact, Ask, AnswerDialog, NobodyAnswers}
)

# --------------------------------------------------------------------------
# What an engine's launch tells the supervision (bridge.profiles.command.Launch has it)


class LaunchFacts(Protocol):
    """The parts of a launch the supervision reads: pure data and pure checks."""

    @property
    def argv(self) -> Sequence[str]: ...
    @property
    def startup(self) -> Sequence[dict[str, Any]]: ...
    @property
    def clearing(self) -> Sequence[str]: ...
    @property
    def header(self) -> dict[str, Any]: ...
    @property
    def dialogs(self) -> bool: ...
    @property
    def check(self) -> Callable[[dict[str, dict[str, Any]]], list[str]] | None: ...
    @property
    def confinement(self) -> Callable[[], dict[str, Any]] | None: ...
    @property
    def refusal(self) -> Callable[[list[str]], str | None] | None: ...


# --------------------------------------------------------------------------
# Actions the supervision adds to the lifecycle's (which it passes on, but for GiveUp)


@attrs.frozen
class RecordSend:
    """Journal a command written to the engine (``send``)."""

    cmd: dict[str, Any]
    t: float


@attrs.frozen
class RecordRecv:
    """Journal one engine line that parsed as a JSON object (``recv``)."""

    idx: int
    line: bytes
    parsed: dict[str, Any] | None
    t: float


@attrs.frozen
class RecordRaw:
    """Journal one engine line that was not a JSON object (``recv_raw``)."""

    idx: int
    raw: RawLine
    t: float


@attrs.frozen
class RecordUpdates:
    """Journal a run of ``message_update`` lines a lean journal keeps no text of (``updates``)."""

    first: int
    count: int
    nbytes: int
    t: float


@attrs.frozen
class RecordRelease:
    request: str | None
    t: float


@attrs.frozen
class RecordStderr:
    text: str
    t: float


@attrs.frozen
class RecordExit:
    code: int | None
    signal: int | None
    t: float


@attrs.frozen
class RecordNote:
    payload: dict[str, Any]
    t: float


@attrs.frozen
class RecordSignal:
    payload: dict[str, Any]
    t: float


@attrs.frozen
class RecordReceipt:
    """Journal a receipt, flushed at once (the trio layer makes it durable off the loop)."""

    receipt: Receipt
    t: float


@attrs.frozen
class Tell:
    """A notification for the controller, as its JSON object (signals, progress, ``ui``)."""

    payload: dict[str, Any]


@attrs.frozen
class Text:
    """Reply text of a prompt that streams it."""

    request: str | None
    text: str


@attrs.frozen
class Progress:
    """What the engine does for a prompt that asked for its events."""

    request: str | None
    event: ProgressEvent


Record = (
    RecordSend
    | RecordRecv
    | RecordRaw
    | RecordUpdates
    | RecordRelease
    | RecordStderr
    | RecordExit
    | RecordNote
    | RecordSignal
    | RecordReceipt
)

#: Everything a door returns.
Action = (
    Spawn
    | Write
    | StopEngine
    | Deliver
    | Notify
    | StopAnswer
    | Answer
    | AskDialog
    | DialogEnded
    | DialogReply
    | Closed
    | Record
    | Tell
    | Text
    | Progress
)


# --------------------------------------------------------------------------
# What the doors may read


@attrs.frozen
class View:
    """What a supervision shows the layers above it, as of its last step (:meth:`Supervision.view`):
    read-only, taken whole, so a door never reaches into the lifecycle's state."""

    #: The current engine's generation (the Nth engine started; 0: none yet), its phase
    #: (``none``, ``backoff``, ``spawning``, ``checking``, ``ready``, ``stopping``), whether it
    #: is sealed, and the model and thinking level it was last verified to run (None: not known).
    generation: int
    engine_phase: str
    sealed: bool
    engine_config: EngineConfig | None
    #: The prompt holding the slot (None: none), and whose stop it has had (None: none).
    held: str | None
    held_stop_by: StopBy | None
    #: The prompts waiting for the slot, in order.
    queued: tuple[str, ...]
    #: Accepted prompts without their receipt (queued, starting an engine for, held).
    outstanding: int
    #: Receipts given so far.
    receipts: int
    #: Why the engine is down for good (None: it is not); ``setup_failed``: down because the
    #: launch was refused (a problem the user fixes, not a crash loop).
    down: str | None
    setup_failed: bool
    #: An :class:`~bridge.core.lifecycle.Open` waits for the start-up check.
    opening: bool
    #: Shutdown: no new prompts, the queue is worked off.
    draining: bool
    #: Why closing began (``close``, ``signal``, ``drain-timeout``, ``journal``), or None;
    #: ``closed``: every accepted prompt has its receipt and no engine runs.
    closing: str | None
    closed: bool
    #: The bridge's own model and thinking level for the prompts submitted from now on.
    wanted: Wanted
    #: What every prompt's run spent since the bridge opened.
    spent: Spend


@attrs.frozen
class Collected:
    """The tracker's outputs so far, kept by a supervision made with ``collect=True`` (as replay
    keeps them): its overlaps, the runs that reached the model, the settles."""

    overlaps: tuple[Overlap, ...]
    working: tuple[Working, ...]
    settled: tuple[Settled, ...]
