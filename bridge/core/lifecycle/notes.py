"""The journal's notes the lifecycle writes: one record each, its JSON form declared under it
(:func:`bridge.core.wire.form`), made a dict once, by :meth:`Lifecycle.note
<bridge.core.lifecycle.machine.Lifecycle.note>` (the :class:`~bridge.core.lifecycle.actions.Note`
action carries that dict to the journal and to the session, which reads ``stop``, ``config``,
``engine-start`` and ``unsent`` notes, live and in replay).

The bytes are the journals' of old, and must stay so: replay reads every journal ever written
(the fixtures under ``tests/fixtures/`` are replayed by tests/test_replay.py). So each record's
fields are in the order its keys have always had, after ``{"event": WORD}``; a key written only
sometimes is ``omit_default`` (written when not None); and where one word had two shapes, it is
two records (``configure``: the bridge's and a prompt's; ``seal-check``: the answers' and an
exit's, whose keys came in another order).
"""

from __future__ import annotations

from typing import Any, TypeAlias

import attrs

from bridge.core.budget import Budget, Spend
from bridge.core.notices import CompactedNotice
from bridge.core.receipts import Usage
from bridge.core.steering import EngineConfig, Wanted
from bridge.core.wire import Wire, converter, form
from bridge.core.words import StopBy


@form(tag={"event": "shutdown"})
@attrs.frozen
class ShutdownNote(Wire):
    """Shutdown began: no new prompts, the queue is worked off (within ``drain_timeout``)."""

    drain_timeout: float | None


@form(tag={"event": "closing"})
@attrs.frozen
class ClosingNote(Wire):
    """Closing began (``why``: ``close``, ``signal``, ``drain-timeout``, ``journal``)."""

    why: str
    detail: str | None


@form(tag={"event": "engine-start"})
@attrs.frozen
class EngineStartNote(Wire):
    """Engine ``generation`` runs as ``pid``, launched with ``argv`` (the session reads it)."""

    pid: int | None
    generation: int
    argv: list[str]


@form(tag={"event": "seal-check"})
@attrs.frozen
class SealCheckNote(Wire):
    """The start-up check ended (``problems`` empty: sealed); ``enforced``: the launch's seal."""

    generation: int
    problems: list[str]
    enforced: Any


@form(tag={"event": "seal-check"})
@attrs.frozen
class SealCheckExitNote(Wire):
    """The engine exited during its start-up check: the same note, in the key order it has
    always had for an exit."""

    generation: int
    enforced: Any
    problems: list[str]


@form(tag={"event": "unsent"})
@attrs.frozen
class UnsentNote(Wire):
    """Not one byte of the held prompt reached the engine: the session decides it ``rejected``."""

    request: str
    generation: int
    why: str


@form(tag={"event": "config"})
@attrs.frozen
class ConfigNote(Wire):
    """What the engine was verified to run ``request`` with, as it is written (the session reads it)."""

    request: str
    config: EngineConfig


@form(tag={"event": "configure"})
@attrs.frozen
class ConfigureNote(Wire):
    """The bridge's configuration for the prompts submitted from now on."""

    wanted: Wanted


@form(tag={"event": "configure"})
@attrs.frozen
class PromptConfigureNote(Wire):
    """Prompt ``request`` is configured before it is written."""

    request: str
    wanted: Wanted
    new_conversation: bool
    compact: str | None


@form(tag={"event": "configured"})
@attrs.frozen
class ConfiguredNote(Wire):
    """Prompt ``request``'s configuration was answered: what the engine runs, or the problem."""

    request: str
    config: EngineConfig | None
    problem: str | None


@form(tag={"event": "new-conversation"}, omit_default=("request", "by"))
@attrs.frozen
class NewConversationNote(Wire):
    """A new conversation was asked for (no ``request``); or, for ``request``, it is had ``by``
    another way (Pi would not start one: ``recycling the engine``)."""

    request: str | None = None
    by: str | None = None


@form(tag={"event": "compact"})
@attrs.frozen
class CompactNote(Wire):
    """A compaction was asked for (``instructions``: the controller's, or None)."""

    instructions: str | None


@attrs.frozen
class CompactedNote(Wire):
    """How the compaction before a prompt went: the controller's notice, without its ``type``."""

    notice: CompactedNotice


def _compacted(note: CompactedNote) -> dict[str, Any]:
    return {"event": "compacted", **{k: v for k, v in note.notice.to_json().items() if k != "type"}}


converter.register_unstructure_hook(CompactedNote, _compacted)


@form(tag={"event": "dialog"}, omit_default=("timeout",))
@attrs.frozen
class DialogNote(Wire):
    """An extension dialog opened; ``timeout`` (the controller's seconds) only if it was asked."""

    dialog: str
    request: str | None
    engine_id: Any
    method: str
    title: str
    timeout: float | None = None


@form(tag={"event": "dialog-end"})
@attrs.frozen
class DialogEndNote(Wire):
    """A dialog got its one response, ``by`` whom (``answer`` None: none was written)."""

    dialog: str
    by: str
    answer: dict[str, Any] | None


@form(tag={"event": "stop"})
@attrs.frozen
class StopNote(Wire):
    """The bridge stops ``request`` with ``stop``, ``by`` whom (the session reads it)."""

    stop: str
    request: str
    by: StopBy | None
    why: str


@form(tag={"event": "model-call"}, omit_default=("calls", "called"))
@attrs.frozen
class ModelCallNote(Wire):
    """The key endpoint forwarded a call for ``request``; ``calls`` and ``called``: that prompt's
    so far (only while it has no receipt)."""

    request: str | None
    usage: Usage | None
    calls: int | None = None
    called: Spend | None = None


@form(tag={"event": "budget"}, rename={"total_budget": "totalBudget"}, omit_default=("calls", "called"))
@attrs.frozen
class BudgetNote(Wire):
    """A spend passed its budget: ``request``'s, the bridge's total, and both budgets."""

    request: str
    spent: Spend
    total: Spend
    budget: Budget
    total_budget: Budget
    calls: int | None = None
    called: Spend | None = None


#: Every note the lifecycle writes.
LifeNote: TypeAlias = (
    ShutdownNote
    | ClosingNote
    | EngineStartNote
    | SealCheckNote
    | SealCheckExitNote
    | UnsentNote
    | ConfigNote
    | ConfigureNote
    | PromptConfigureNote
    | ConfiguredNote
    | NewConversationNote
    | CompactNote
    | CompactedNote
    | DialogNote
    | DialogEndNote
    | StopNote
    | ModelCallNote
    | BudgetNote
)
