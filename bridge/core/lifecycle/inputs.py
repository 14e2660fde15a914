"""What the lifecycle is fed: the controller's commands, what the engine's process and lines
showed, the journal's failure, and time (:class:`Tick`)."""

from __future__ import annotations

from typing import Any

import attrs

from bridge.core.budget import Budget
from bridge.core.receipts import Receipt, Usage
from bridge.core.steering import EngineConfig, Wanted

# --------------------------------------------------------------------------
# Inputs


@attrs.frozen
class Submit:
    request: str
    message: str
    images: list[Any] | None = None
    stream: bool = False
    #: Seconds from send to settle (None: the config's ``settle_timeout``).
    timeout: float | None = None
    #: Its events are wanted (:mod:`bridge.core.progress`).
    events: bool = False
    #: Its stall timeout in seconds (None: the config's ``stall_timeout``; 0: none).
    stall_timeout: float | None = None
    #: The model and thinking level it asks for (over the bridge's :class:`Configure`).
    wanted: Wanted = attrs.field(factory=Wanted)
    #: What it may spend (over the config's ``prompt_budget_usd`` / ``_tokens``): :mod:`bridge.core.budget`.
    budget: Budget = attrs.field(factory=Budget)
    #: It is traced (:mod:`bridge.live.otel`): its tool calls, retries and usage are told.
    traced: bool = False


@attrs.frozen
class Configure:
    """The model and thinking level for the prompts submitted from now on (what it leaves
    as is stays as it was)."""

    wanted: Wanted


@attrs.frozen
class Stop:
    """The controller stops one prompt."""

    request: str


@attrs.frozen
class Shutdown:
    """No new prompts; the outstanding ones run to their receipts, bounded by ``drain_timeout``."""

    drain_timeout: float | None = None


@attrs.frozen
class Close:
    """Closing begins now: ``why`` is ``close`` (the API), ``signal`` or ``journal``."""

    why: str = "close"
    detail: str | None = None


@attrs.frozen
class Spawned:
    generation: int
    pid: int | None
    argv: list[str] = attrs.field(factory=list)
    #: The profile's start-up (seal check) commands, written before any prompt.
    startup: list[dict[str, Any]] = attrs.field(factory=list)
    clearing: list[str] = attrs.field(factory=list)
    #: What the seal enforced (the journal header's ``seal``), for the seal-check note.
    seal: Any = None


@attrs.frozen
class SpawnFailed:
    """The engine could not be prepared or launched: the bridge goes down."""

    generation: int
    error: str


@attrs.frozen
class StartupChecked:
    """Every start-up command was answered; ``problems`` are what the seal check found."""

    generation: int
    problems: list[str] = attrs.field(factory=list)
    #: The model and thinking level the check's ``get_state`` showed.
    config: EngineConfig | None = None


@attrs.frozen
class NewConversation:
    """Start a new conversation before the next prompt is written (Pi's ``new_session``; a
    fresh engine where Pi cannot)."""


@attrs.frozen
class Compact:
    """Compact the conversation (Pi's ``compact``, with ``instructions`` for the summary) before
    the next prompt submitted is written."""

    instructions: str | None = None


@attrs.frozen
class Open:
    """The controller opened the bridge: start an engine now (if none runs) and keep
    :attr:`~bridge.core.lifecycle.LifeState.opening` set until its start-up check has ended
    (:mod:`bridge.core.lifecycle.questions` says how it ends)."""


@attrs.frozen
class Ask:
    """A question for the engine that changes nothing (``get_available_models``): written to
    the engine once one is ready (one is started for it), answered with
    :class:`~bridge.core.lifecycle.actions.Answer`."""

    token: str
    cmd: dict[str, Any]


@attrs.frozen
class Answered:
    """The engine answered the question ``token``."""

    generation: int
    token: str
    response: dict[str, Any]


@attrs.frozen
class DialogOpened:
    """The engine opened an extension dialog (``select``, ``confirm``, ``input``, ``editor``:
    :mod:`bridge.core.dialogs`); ``fields`` are the ones passed on. ``allowed``: its extension
    was allowed (``--extension``; else it is a seal diagnostic); ``listened``: a controller can
    answer it. Unless both, it is answered ``cancelled`` at once."""

    generation: int
    #: Pi's id for it, written back in the response (any JSON value Pi sent).
    engine_id: Any
    method: str
    fields: dict[str, Any] = attrs.field(factory=dict)
    listened: bool = True
    allowed: bool = True


@attrs.frozen
class AnswerDialog:
    """The controller's answer to dialog ``dialog``: one of ``value``, ``confirmed`` or
    ``cancelled=True``. Answered with :class:`~bridge.core.lifecycle.actions.DialogReply`."""

    dialog: str
    value: Any = None
    confirmed: Any = None
    cancelled: Any = False


@attrs.frozen
class NobodyAnswers:
    """Nobody can answer dialogs any more (the controller's stdin ended): the open ones are
    answered ``cancelled`` (``no-controller``)."""


@attrs.frozen
class Configured:
    """Every configuration command written for ``request`` was answered (by id)."""

    generation: int
    request: str
    answers: dict[str, dict[str, Any]] = attrs.field(factory=dict)


@attrs.frozen
class Acked:
    generation: int
    request: str


@attrs.frozen
class StopMissed:
    """The held prompt's run started after the engine had answered its stop (Pi's ``abort``
    acts on a running agent only): that stop stopped nothing, and is sent again."""

    generation: int
    request: str


@attrs.frozen
class Spent:
    """One assistant message of ``request``'s run ended with this usage (Pi's ``message_end``):
    its spend counts toward the prompt's budget and the bridge's total (:mod:`bridge.core.budget`)."""

    generation: int
    #: None: a compaction between runs (it counts for the prompt holding the slot).
    request: str | None
    usage: Usage


@attrs.frozen
class ModelCalled:
    """The key endpoint forwarded one model call (:mod:`bridge.core.model_calls`) while
    ``request`` held the slot (None: none did; the endpoint refuses those, so only a call begun
    just before a receipt reports one): it counts toward that prompt's budget and the bridge's
    total, beyond what the engine's own messages account for (:mod:`bridge.core.budget`, rule 5)."""

    generation: int
    request: str | None
    #: What the provider's answer said it cost (None: no usage could be read; a call all the same).
    usage: Usage | None


@attrs.frozen
class Decided:
    """The evidence half decided a receipt."""

    receipt: Receipt


@attrs.frozen
class Unsealed:
    """The engine's first overlap, gap or bad disposition."""

    generation: int
    cause: str


@attrs.frozen
class SignalSeen:
    """A signal for the controller (overlap, gap, disposition, seal diagnostic)."""

    generation: int
    payload: dict[str, Any]


@attrs.frozen
class WriteFailed:
    """A write did not complete: the engine stopped reading (``stuck``: timed out) or its stdin broke.

    ``unsent``: the write was ``request``'s prompt and not one byte of it went into the pipe
    (its stdin was closed first, or the engine exited before it was written): the engine
    certainly never read it. ``error`` says how it failed; ``stderr`` is the engine's last
    stderr lines."""

    generation: int
    request: str | None = None
    stuck: bool = False
    unsent: bool = False
    error: str | None = None
    stderr: list[str] = attrs.field(factory=list)


@attrs.frozen
class NotWritten:
    """The held prompt's Write was not carried out (no engine to take it, or the
    journal failed first): it was never written, so it goes back to the front of
    the queue (and is rejected there if closing has begun)."""

    generation: int
    request: str


@attrs.frozen
class StdoutClosed:
    generation: int


@attrs.frozen
class EngineExited:
    generation: int
    code: int | None = None
    signal: int | None = None
    #: The engine's last stderr lines.
    stderr: list[str] = attrs.field(factory=list)
    #: What the launch's ``refusal`` read in them: the engine refused its configuration (a
    #: model it does not know), which a restart repeats. Only heeded during the start-up check.
    refusal: str | None = None


@attrs.frozen
class JournalFailed:
    error: str


@attrs.frozen
class Activity:
    """What the held prompt's run last showed, brought up to date before each :class:`Tick`:
    ``at`` is when the engine's last line was read, ``pause`` how much longer than the stall
    timeout the run may stay quiet after it (``inf`` while a tool runs; a retry's wait)."""

    generation: int
    request: str
    at: float
    pause: float = 0.0


@attrs.frozen
class Tick:
    """Time passed: every deadline at or before ``now`` fires."""


Input = (
    Submit
    | Configure
    | NewConversation
    | Compact
    | Open
    | Ask
    | Answered
    | DialogOpened
    | AnswerDialog
    | NobodyAnswers
    | Configured
    | Stop
    | Shutdown
    | Close
    | Spawned
    | SpawnFailed
    | StartupChecked
    | Acked
    | StopMissed
    | Spent
    | ModelCalled
    | Decided
    | Unsealed
    | SignalSeen
    | WriteFailed
    | NotWritten
    | StdoutClosed
    | EngineExited
    | JournalFailed
    | Activity
    | Tick
)
