"""The prompt lifecycle: one pure state machine for everything that is not evidence.

The package: :mod:`.config` (settings and deadlines), :mod:`.state` (the records, and the
phases, each a ``StrEnum``), :mod:`.inputs` and :mod:`.actions` (what goes in and comes
out), :mod:`.notes` (the journal notes it writes, one record each), :mod:`.machine`
(:class:`Lifecycle` and :func:`step`), and five parts of the machine in modules of their own:
objects the machine holds and calls, each with its own slice of the state (``state.<part>``,
written by that part only) and its rules in its module's header: :mod:`.extension_dialogs` (a
dialog's asking and its one response), :mod:`.configuring` (a prompt's model, thinking level,
new conversation and compaction, applied before it is written), :mod:`.questions` (the
questions for the engine that change nothing, ``get_available_models``, and the open),
:mod:`.stops` (how a stop is sent) and :mod:`.budgets` (a spend past its budget:
:mod:`bridge.core.budget`).

The shape is seed ``004``'s: :meth:`Lifecycle.step` takes one input and the
time and returns the actions the trio layer must carry out. No trio, no clock,
no I/O; the state (:class:`LifeState`) is plain attrs data that round-trips
through cattrs (:func:`snapshot` / :func:`restore`), and for the same state,
input and ``now`` a step always gives the same state and actions (tested, with
a model-based test over random interleavings: tests/test_lifecycle.py).

The evidence half is :class:`bridge.core.session.Session`: it reads the engine's
lines and decides a receipt when the evidence concludes (settle, refusal,
exit). This machine owns the rest of SPEC §5 and §7:

- **queue and slot**: a bounded FIFO of accepted prompts, at most one held
  (written to the engine, no receipt yet); a prompt is written only while no
  slot is held, on a ready, sealed engine, and never once closing has begun;
- **the engine's life**: spawn when a prompt waits (or at :class:`Open`), the start-up (seal) check
  with its deadline, recycling an unsealed or stuck engine, crash counting
  (one count per unrequested exit or unanswered check, never two), backoff and
  ``engine-down``;
- **start-up failures, two kinds**. A *crash* -- the engine exited before or during
  its check, closed a pipe, or did not answer the check in time -- may be transient
  (a loaded machine, a provider or network hiccup at load): it counts once toward
  the crash limit and the engine is restarted after the backoff (SPEC §5). A
  *refusal* -- the engine answered every start-up command (:class:`StartupChecked`)
  and the answers fail the check: a model it does not offer, a loose match it
  picked, a seal or sandbox problem; or it exited during the check in words its
  launch's ``refusal`` reads as one (:class:`EngineExited` ``refusal``: Pi's
  ``Model "x" not found`` for a ``--model`` with no ``--provider``) -- is a function of the launch (flags, config
  folder, models, keys, extensions, host) that a fresh engine repeats, so it is not
  retried: down at once (``setup_failed``; ``run`` and ``serve`` exit 2, ``open_bridge`` raises), the
  problems in the ``engine-down`` signal and in every rejected prompt's
  ``nativeError``. No confirmation retry: nothing in a fully answered check depends on
  timing a restart could change (the one racy problem, an extension running on its
  own before ``get_state`` is answered, is a broken seal either way). An extension
  that fails to load is a crash by these rules: Pi exits 1 before it reads a command
  ("Failed to load extension", main.js), the same words as for an extension whose
  load threw for a passing reason, so only its stderr tells and it is retried;
- **a written prompt that never reached the engine**: a prompt is journaled and handed
  to the session as sent before its bytes go to the pipe. If the write then fails before
  one byte went in (:class:`WriteFailed` ``unsent``: the engine's stdin was closed, as a
  dying engine's is, or it exited with the prompt still queued for its writer), the engine
  certainly never read it (SPEC §5 ``rejected``: "never sent"): an ``unsent`` note, from
  which the session decides ``rejected``/``engine-down`` (so replay decides the same). It is
  not requeued: its id is already in the journal as sent on that engine. A write cut short
  is no such fact: the engine's exit decides that prompt (``delivery-unknown``);
- **deadlines**: ack, settle and stall (a stop first, then the stop's grace), taint
  grace, close grace, start-up, backoff, drain (see :data:`DEADLINES`);
- **stops and whose they are**: the controller's (``interrupted``), a
  timeout's (``timeout``: a prompt's own or the drain bound), closing's
  (``closing``), a stall's (``stalled``). Each stop is preceded by a journal ``note`` naming its owner,
  so replay reaches the same receipt;
- **shutdown and closing**: shutdown refuses new prompts and works the queue
  off; closing (a signal, the API's close, the drain bound, a journal that
  cannot be written) rejects what is unwritten, stops the held prompt, stops
  the engine, and ends with :class:`Closed` once every accepted prompt has its
  receipt;
- **extension dialogs** (:mod:`bridge.core.dialogs`; :mod:`.extension_dialogs`): each is asked of the controller
  (:class:`AskDialog`) and gets exactly one ``extension_ui_response`` — the controller's
  answer, or ``cancelled`` at its timeout, its prompt's stop or receipt, the engine's stop,
  or closing — and one :class:`DialogEnded` saying who gave it; while one of the held
  prompt's is open, its ack and stall deadlines wait;
- the signal budget per engine generation, and the window of recent ids.

Receipts are decided in one place, :func:`bridge.core.receipts.decide`: this
machine asks it for prompts it never wrote; for a written prompt whose
deadline passed it emits :class:`GiveUp`, and the evidence half answers with
the receipt (fed back as :class:`Decided`).

Inputs come from the controller (:class:`Open`, :class:`Submit`, :class:`Stop`,
:class:`Shutdown`, :class:`Close`), from the engine's process and lines
(:class:`Spawned`, :class:`SpawnFailed`, :class:`StartupChecked`,
:class:`Acked`, :class:`Decided`, :class:`Unsealed`, :class:`SignalSeen`,
:class:`WriteFailed`, :class:`StdoutClosed`, :class:`EngineExited`), from the
journal (:class:`JournalFailed`), and from time (:class:`Tick`: the trio layer
sleeps until :meth:`Lifecycle.next_deadline` and then ticks, first bringing the held run's
:class:`Activity` up to date so that the stall deadline is measured from its last line).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from bridge.core.lifecycle.actions import (
        Action,
        Answer,
        AskDialog,
        Closed,
        Deliver,
        DialogEnded,
        DialogReply,
        GiveUp,
        Note,
        Notify,
        Signal,
        Spawn,
        StopAnswer,
        StopEngine,
        Write,
    )
    from bridge.core.lifecycle.config import (
        DEADLINES,
        DEFAULT_DIALOG_TIMEOUT,
        DEFAULT_STALL_TIMEOUT,
        HELD_DEADLINES,
        RECENT_IDS,
        SIGNALS_PER_GENERATION,
        BridgeConfig,
    )
    from bridge.core.lifecycle.inputs import (
        Acked,
        Activity,
        AnswerDialog,
        Answered,
        Ask,
        Close,
        Compact,
        Configure,
        Configured,
        Decided,
        DialogOpened,
        EngineExited,
        Input,
        JournalFailed,
        NewConversation,
        NobodyAnswers,
        NotWritten,
        Open,
        Shutdown,
        SignalSeen,
        Spawned,
        SpawnFailed,
        StartupChecked,
        StdoutClosed,
        Stop,
        StopMissed,
        Submit,
        Tick,
        Unsealed,
        WriteFailed,
    )
    from bridge.core.lifecycle.machine import (
        Lifecycle,
        step,
    )
    from bridge.core.lifecycle.state import (
        DialogRec,
        EnginePhase,
        EngineRec,
        LifeState,
        PromptPhase,
        PromptRec,
        restore,
        snapshot,
    )
    from bridge.core.receipts import GiveUpWhy

#: Which module each name is from. They are loaded on first use (PEP 562), all at once: so that
#: ``bridge.core.lifecycle.config`` (a controller's settings, :class:`BridgeConfig`) is imported
#: without the machine (``bridge acp`` answers ``initialize`` before a session needs the rest).
_HOMES: dict[str, str] = {
    name: module
    for module, names in {
        "actions": (
            "Action", "Answer", "AskDialog", "Closed", "Deliver", "DialogEnded", "DialogReply", "GiveUp",
            "Note", "Notify", "Signal", "Spawn", "StopAnswer", "StopEngine", "Write",
        ),
        "config": (
            "DEADLINES", "DEFAULT_DIALOG_TIMEOUT", "DEFAULT_STALL_TIMEOUT", "HELD_DEADLINES", "RECENT_IDS",
            "SIGNALS_PER_GENERATION", "BridgeConfig",
        ),
        "inputs": (
            "Acked", "Activity", "AnswerDialog", "Answered", "Ask", "Close", "Compact", "Configure",
            "Configured", "Decided", "DialogOpened", "EngineExited", "Input", "JournalFailed",
            "ModelCalled", "NewConversation", "NobodyAnswers", "NotWritten", "Open", "Shutdown",
            "SignalSeen", "Spawned", "SpawnFailed", "Spent", "StartupChecked", "StdoutClosed", "Stop",
            "StopMissed", "Submit", "Tick", "Unsealed", "WriteFailed",
        ),
        "machine": ("Lifecycle", "step"),
        "state": (
            "DialogRec", "EnginePhase", "EngineRec", "LifeState", "PromptPhase", "PromptRec", "restore", "snapshot",
        ),
        "receipts": ("GiveUpWhy",),
    }.items()
    for name in names
}  # fmt: skip

__all__ = [
    "DEADLINES",
    "DEFAULT_DIALOG_TIMEOUT",
    "DEFAULT_STALL_TIMEOUT",
    "HELD_DEADLINES",
    "RECENT_IDS",
    "SIGNALS_PER_GENERATION",
    "Acked",
    "Action",
    "Activity",
    "Answer",
    "AnswerDialog",
    "Answered",
    "Ask",
    "AskDialog",
    "BridgeConfig",
    "Close",
    "Closed",
    "Compact",
    "Configure",
    "Configured",
    "Decided",
    "Deliver",
    "DialogEnded",
    "DialogOpened",
    "DialogRec",
    "DialogReply",
    "EngineExited",
    "EnginePhase",
    "EngineRec",
    "GiveUp",
    "GiveUpWhy",
    "Input",
    "JournalFailed",
    "LifeState",
    "Lifecycle",
    "ModelCalled",
    "NewConversation",
    "NobodyAnswers",
    "NotWritten",
    "Note",
    "Notify",
    "Open",
    "PromptPhase",
    "PromptRec",
    "Shutdown",
    "Signal",
    "SignalSeen",
    "Spawn",
    "SpawnFailed",
    "Spawned",
    "Spent",
    "StartupChecked",
    "StdoutClosed",
    "Stop",
    "StopAnswer",
    "StopEngine",
    "StopMissed",
    "Submit",
    "Tick",
    "Unsealed",
    "Write",
    "WriteFailed",
    "restore",
    "snapshot",
    "step",
]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'bridge.core.lifecycle' has no attribute {name!r}")
    from bridge.core import receipts
    from bridge.core.lifecycle import actions, config, inputs, machine, state

    modules = {"actions": actions, "config": config, "inputs": inputs, "machine": machine, "state": state}
    modules["receipts"] = receipts
    globals().update({n: getattr(modules[m], n) for n, m in _HOMES.items()})
    return globals()[name]


def __dir__() -> list[str]:
    return sorted([*globals(), *_HOMES])
