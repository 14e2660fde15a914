"""The lifecycle's state: plain attrs records (a prompt, the engine, the whole machine) that
round-trip through cattrs (:func:`snapshot` / :func:`restore`). A phase is a :class:`StrEnum`
whose member is its word, so the snapshot's JSON is what it was with bare strings. The machine's
five parts each have a slice of their own (:class:`DialogsState`, :class:`ConfiguringState`,
:class:`QuestionsState`, :class:`StopsState`, :class:`BudgetsState`), which only that part writes;
a :class:`PromptRec`'s and the :class:`EngineRec`'s fields a part owns are named in its module."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

import attrs

from bridge.core.budget import Budget, Spend
from bridge.core.receipts import GiveUpWhy, Receipt
from bridge.core.steering import EngineConfig, Wanted
from bridge.core.wire import converter
from bridge.core.words import StopBy

# --------------------------------------------------------------------------
# State


class PromptPhase(StrEnum):
    """Where an accepted prompt is (a member is its word: the snapshot's JSON is as it was)."""

    #: In the queue, not written.
    QUEUED = "queued"
    #: Holding the slot while the model or thinking level it asked for (or a new
    #: conversation, a compaction) is applied and checked: not written yet.
    CONFIGURING = "configuring"
    #: Written to the engine, holding the slot until its receipt.
    HELD = "held"


class EnginePhase(StrEnum):
    """Where the current engine is (a member is its word)."""

    #: No process.
    NONE = "none"
    #: Waiting to respawn after crashes.
    BACKOFF = "backoff"
    SPAWNING = "spawning"
    #: Start-up commands written, their answers awaited.
    CHECKING = "checking"
    READY = "ready"
    #: Asked to stop; its exit is awaited.
    STOPPING = "stopping"


@attrs.define
class PromptRec:
    """One accepted prompt without a receipt yet."""

    request: str
    message: str
    images: list[Any] | None = None
    stream: bool = False
    events: bool = False
    timeout: float | None = None
    #: Its text's and images' bytes on a line (:func:`~bridge.core.framing.prompt_bytes`): what
    #: it holds while queued, counted against :attr:`BridgeConfig.queue_bytes`.
    size: int = 0
    #: Its stall timeout (None: none).
    stall: float | None = None
    #: Its stall deadline is the tool bound's (a tool runs, :attr:`BridgeConfig.tool_timeout`).
    tool_quiet: bool = False
    submitted: float = 0.0
    #: When it was written to the engine.
    written: float | None = None
    #: ``queued`` until written, then ``held``; ``configuring`` while the model or thinking
    #: level it asked for is applied and checked (it holds the slot, not yet written).
    phase: PromptPhase = PromptPhase.QUEUED
    #: The model and thinking level it asked for (over the bridge's).
    wanted: Wanted = attrs.field(factory=Wanted)
    #: What it may spend (its own, over the bridge's default), and what its run spent so far.
    budget: Budget = attrs.field(factory=Budget)
    spent: Spend = attrs.field(factory=Spend)
    #: What the key endpoint's calls for it cost, and how many there were (budget rule 5).
    called: Spend = attrs.field(factory=Spend)
    calls: int = 0
    #: It is traced (its Write says so to the evidence half).
    traced: bool = False
    #: What the engine was verified to run it with.
    config: EngineConfig | None = None
    #: A new conversation is started (``new_session``) before it is written.
    fresh: bool = False
    #: The conversation is compacted (Pi's ``compact``, with these instructions; "" for none)
    #: before it is written.
    compact: str | None = None
    #: The answers to its configuration commands so far (they are written one at a time).
    config_answers: dict[str, dict[str, Any]] = attrs.field(factory=dict)
    stop: str | None = None
    stop_by: StopBy | None = None
    acked: bool = False
    #: A GiveUp was emitted for it (its receipt is on the way).
    gave_up: GiveUpWhy | None = None
    #: Its ack / stall deadlines, waiting while one of its dialogs is open (how long each
    #: had left is not kept: each is armed afresh when the last dialog ends).
    paused: list[str] = attrs.field(factory=list)
    #: When its last dialog ended (its quiet is measured from there, not from the engine's
    #: last line before the dialog).
    resumed: float | None = None
    #: Whether its engine had been written a prompt before this one (restored when this one
    #: turns out never written: that engine holds no conversation of it).
    engine_was_prompted: bool = False


@attrs.define
class DialogRec:
    """An extension dialog the controller was asked (:mod:`bridge.core.dialogs`), not yet answered."""

    #: The bridge's id for it (``dialog-N``), the one the controller answers.
    dialog: str
    #: Pi's id for it (the ``extension_ui_request``'s), the one the response carries.
    engine_id: Any
    generation: int
    method: str
    #: The prompt held when it opened (None: between prompts).
    request: str | None
    fields: dict[str, Any] = attrs.field(factory=dict)
    opened: float = 0.0
    deadline: float = 0.0


@attrs.define
class EngineRec:
    """The current engine, as the lifecycle sees it (``phase``: :class:`EnginePhase`)."""

    generation: int = 0
    phase: EnginePhase = EnginePhase.NONE
    pid: int | None = None
    #: We asked it to stop: its exit is not a crash.
    stop_requested: bool = False
    sealed: bool = True
    #: Replace it before the next prompt (stuck, timed out, unsealed).
    recycle: bool = False
    clearing: list[str] = attrs.field(factory=list)
    seal: Any = None
    signals: int = 0
    #: The model and thinking level it was last verified to have (None: not known).
    config: EngineConfig | None = None
    #: Configurations applied to it so far (their commands' ids count with it).
    configs: int = 0
    #: The id of a command whose answer must come before any prompt is written to it (a
    #: compaction aborted with the prompt it was for), or None.
    busy: str | None = None
    #: Its start-up check has not ended yet (an exit now is a start-up death,
    #: even after it closed its stdout first).
    in_startup: bool = False
    #: A prompt has been written to it: it holds a conversation, which its replacement lacks.
    prompted: bool = False
    #: It replaces an engine that held a conversation (its ``started`` notice says so).
    new_conversation: bool = False

    @property
    def running(self) -> bool:
        """It runs and reads commands: being checked, or ready."""
        return self.phase in (EnginePhase.CHECKING, EnginePhase.READY)


@attrs.define
class DialogsState:
    """:mod:`~bridge.core.lifecycle.extension_dialogs`' slice: the dialogs asked of the controller."""

    #: Extension dialogs waiting for the controller's answer, by the bridge's id.
    open: dict[str, DialogRec] = attrs.field(factory=dict)
    #: The last ``dialog-N`` given.
    serial: int = 0


@attrs.define
class ConfiguringState:
    """:mod:`~bridge.core.lifecycle.configuring`'s slice: what goes with the prompts submitted next."""

    #: The bridge's own configuration for the prompts submitted from now on.
    wanted: Wanted = attrs.field(factory=Wanted)
    #: The controller asked for a new conversation: it goes with the next prompt submitted,
    #: started before that prompt is written.
    fresh: bool = False
    #: The controller asked for a compaction (its instructions, "" for none): it goes with the
    #: next prompt submitted, done before that prompt is written.
    compact: str | None = None


@attrs.define
class QuestionsState:
    """:mod:`~bridge.core.lifecycle.questions`' slice: the questions for the engine, and the open."""

    #: Questions for the engine not answered yet (token -> command), and those written to the
    #: current engine.
    asks: dict[str, dict[str, Any]] = attrs.field(factory=dict)
    asked: list[str] = attrs.field(factory=list)
    #: An :class:`~bridge.core.lifecycle.inputs.Open` waits for the start-up check of engine
    #: generation N (None: no open waits). When it is cleared, ``setup_failed`` says whether
    #: the launch was refused (``down`` has the words).
    opening: int | None = None


@attrs.define
class StopsState:
    """:mod:`~bridge.core.lifecycle.stops`' slice."""

    #: The last ``stop-N`` given.
    serial: int = 0


@attrs.define
class BudgetsState:
    """:mod:`~bridge.core.lifecycle.budgets`' slice."""

    #: What every prompt's run spent since the bridge opened (its total budget's measure).
    spent: Spend = attrs.field(factory=Spend)


@attrs.define
class LifeState:
    prompts: dict[str, PromptRec] = attrs.field(factory=dict)
    queue: list[str] = attrs.field(factory=list)
    held: str | None = None
    #: The last RECENT_IDS receipts, oldest first.
    recent: dict[str, Receipt] = attrs.field(factory=dict)
    engine: EngineRec = attrs.field(factory=EngineRec)
    crashes: list[float] = attrs.field(factory=list)
    last_crash: str = ""
    #: Why the engine is down for good, or None.
    down: str | None = None
    #: Down because the engine cannot be set up: it could not be prepared or launched at
    #: all, or its start-up check refused the configuration (a problem the user fixes,
    #: not a crash loop).
    setup_failed: bool = False
    #: Shutdown: no new prompts, the queue is worked off.
    draining: bool = False
    #: Why closing began (``close``, ``signal``, ``drain-timeout``, ``journal``), or None.
    closing: str | None = None
    closed: bool = False
    deadlines: dict[str, float] = attrs.field(factory=dict)
    journal_failed: str | None = None
    receipts: int = 0
    #: The parts' own slices, each written by its part only (the part's module says its rules).
    dialogs: DialogsState = attrs.field(factory=DialogsState)
    configuring: ConfiguringState = attrs.field(factory=ConfiguringState)
    questions: QuestionsState = attrs.field(factory=QuestionsState)
    stops: StopsState = attrs.field(factory=StopsState)
    budgets: BudgetsState = attrs.field(factory=BudgetsState)


def snapshot(state: LifeState) -> dict[str, Any]:
    """The state as plain data (JSON-able)."""
    return converter.unstructure(state)  # type: ignore[no-any-return]


def restore(data: dict[str, Any]) -> LifeState:
    return converter.structure(data, LifeState)
