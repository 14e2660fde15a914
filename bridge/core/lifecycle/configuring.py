"""A prompt's configuring, the lifecycle's part: :class:`Configuring`, which the
:class:`~bridge.core.lifecycle.machine.Lifecycle` holds and calls (its ``configuring``). The
commands for a model and a thinking level, and how their answers are verified, are
:mod:`bridge.core.steering`'s; this is when they are written and what their answers do, with a
new conversation and a compaction.

It owns, and alone writes: the state's ``configuring`` slice (:class:`ConfiguringState`: the
bridge's configuration, and the new conversation or compaction waiting for the next prompt),
a configuring prompt's ``config_answers`` and its ``compact`` once done, the engine's
``configs`` count and ``busy`` command, and the ``config`` and ``busy`` deadlines. The machine
calls it for the steering inputs, when a prompt taking the slot needs configuring
(:meth:`Configuring.begin`), when a configuring prompt is stopped or its engine is lost, and at
its deadlines; it calls back the machine to write, requeue or reject the prompt.

- :class:`Configure` steers the prompts submitted from then on (what it leaves as is stays);
  :class:`NewConversation` and :class:`Compact` go with the next prompt submitted (a
  compaction is moot in a new conversation). Each is noted.
- A prompt taking the slot is *configured* before it is written (phase ``configuring``: it
  holds the slot, nothing of it is written) when it asks for what the engine is not known to
  have, or for a new conversation or a compaction. Its commands are written one at a time
  (Pi 1.6.0 runs commands concurrently): ``new_session``, else ``compact``; then the
  steering's commands, ``get_state`` last. Each is bounded by ``ack_timeout`` (the
  ``config`` deadline), a compaction, which calls the model, by the prompt's stall timeout.
- All answered: a compaction's outcome is told to the controller (a refusal such as
  "Nothing to compact" does not stop the prompt); a new conversation the engine would not
  start (an extension cancelled it) recycles the engine and the prompt waits for a fresh
  one; the answers are verified, and a problem rejects the prompt (``rejected``/``config``).
  Verified, it is written, unless the engine is to be replaced first (unsealed, recycled,
  not ready): then it goes back to the front of the queue.
- Not answered in time: the engine is recycled, the prompt rejected (``config``). An engine
  that is gone or replaced before it answered a compaction: the controller is told the
  compaction failed (the new engine's conversation is empty).
- A configuring prompt stopped while Pi compacts for it: ``abort`` stops the compaction,
  and no prompt is written until the compaction is answered (Pi refuses a prompt while it
  compacts), bounded by ``ack_timeout`` (the ``busy`` deadline); past it the engine is
  replaced before the next prompt.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from bridge.core.lifecycle.actions import Notify, Write
from bridge.core.lifecycle.config import DEFAULT_STALL_TIMEOUT
from bridge.core.lifecycle.inputs import Compact, Configure, Configured, NewConversation
from bridge.core.lifecycle.notes import (
    CompactedNote,
    CompactNote,
    ConfiguredNote,
    ConfigureNote,
    NewConversationNote,
    PromptConfigureNote,
)
from bridge.core.lifecycle.state import ConfiguringState, EnginePhase, PromptPhase, PromptRec
from bridge.core.notices import compaction_notice
from bridge.core.steering import commands, verify
from bridge.core.words import Reason

if TYPE_CHECKING:
    from bridge.core.lifecycle.machine import Lifecycle


class Configuring:
    """The steering inputs' handlers, the configuring of a held prompt, and the ``config`` and
    ``busy`` deadlines."""

    def __init__(self, machine: Lifecycle) -> None:
        self.machine = machine

    @property
    def own(self) -> ConfiguringState:
        return self.machine.state.configuring

    def configure(self, ev: Configure) -> None:
        own = self.own
        own.wanted = ev.wanted.over(own.wanted)
        self.machine.note(ConfigureNote(own.wanted))

    def new_conversation(self, ev: NewConversation) -> None:
        self.own.fresh = True
        self.machine.note(NewConversationNote())

    def compact(self, ev: Compact) -> None:
        self.own.compact = ev.instructions or ""
        self.machine.note(CompactNote(ev.instructions))

    def take_next(self) -> tuple[bool, str | None]:
        """What goes with the prompt submitted now, taken: a new conversation, else a compaction
        (moot in a new conversation)."""
        own = self.own
        fresh, own.fresh = own.fresh, False
        compact, own.compact = own.compact, None
        return fresh, None if fresh else compact

    def begin(self, rec: PromptRec) -> None:
        """``rec``, holding the slot, is configured: its first command is written."""
        rec.phase = PromptPhase.CONFIGURING
        self.machine.state.engine.configs += 1
        self.machine.note(PromptConfigureNote(rec.request, rec.wanted, rec.fresh, rec.compact))
        rec.config_answers = {}
        self._write(rec, self._commands(rec)[0])

    def _write(self, rec: PromptRec, cmd: dict[str, Any]) -> None:
        """One configuration command for the held prompt, bounded by ``ack_timeout`` -- a
        compaction, which calls the model, by the prompt's stall timeout when that is longer."""
        m = self.machine
        m.emit(Write(m.state.engine.generation, cmd, "config", request=rec.request))
        m.state.deadlines["config"] = m.now + self._bound(rec, cmd)

    def _bound(self, rec: PromptRec, cmd: dict[str, Any]) -> float:
        """``ack_timeout``; a compaction, which calls the model, the prompt's stall timeout."""
        config = self.machine.config
        if cmd["type"] == "compact":
            return rec.stall or config.stall_timeout or DEFAULT_STALL_TIMEOUT
        return config.ack_timeout

    def _commands(self, rec: PromptRec) -> list[dict[str, Any]]:
        """What is written, one at a time, before ``rec``: ``new_session`` if a new
        conversation was asked for, else ``compact`` if a compaction was, then its
        configuration, ``get_state`` last."""
        prefix = self._prefix()
        first = [{"type": "new_session", "id": f"{prefix}:new"}] if rec.fresh else []
        if rec.compact is not None and not rec.fresh:  # a new conversation has nothing to compact
            first.append({"type": "compact", "id": f"{prefix}:compact"})
            if rec.compact:
                first[-1]["customInstructions"] = rec.compact
        return first + commands(rec.wanted, prefix)

    def _prefix(self) -> str:
        e = self.machine.state.engine
        return f"cfg-{e.generation}-{e.configs}"

    def configured(self, ev: Configured) -> None:
        m = self.machine
        s, e = m.state, m.state.engine
        if e.busy is not None and e.busy in ev.answers and m.current(ev.generation):
            e.busy = None  # the aborted compaction is over: prompts may be written again
            s.deadlines.pop("busy", None)
        rec = m.held()
        if (
            rec is None
            or rec.phase != PromptPhase.CONFIGURING
            or rec.request != ev.request
            or not m.current(ev.generation)
        ):
            return
        rec.config_answers.update(ev.answers)
        prefix = self._prefix()
        cmds = self._commands(rec)
        if len(rec.config_answers) < len(cmds):
            # One at a time: Pi 1.6.0 runs commands concurrently, and answered a get_state
            # written right behind a set_model with the old model (and set_model after it).
            self._write(rec, cmds[len(rec.config_answers)])
            return
        s.deadlines.pop("config", None)
        if rec.compact is not None:
            self._compacted(rec, rec.config_answers.get(f"{prefix}:compact", {}))
        if rec.fresh:
            new = rec.config_answers.get(f"{prefix}:new", {})
            data = new.get("data")
            if new.get("success") is not True or (isinstance(data, dict) and data.get("cancelled")):
                # Pi would not start a new conversation (an extension cancelled it): a fresh
                # engine is one. The prompt waits for it.
                rec.fresh, rec.compact = False, None
                e.recycle = True
                m.note(NewConversationNote(rec.request, "recycling the engine"))
                m.requeue(rec)
                return
        config, problem = verify(rec.wanted, rec.config_answers, prefix)
        e.config = config if problem is None else None
        m.note(ConfiguredNote(rec.request, config, problem))
        if problem is not None:
            m.reject(rec, Reason.CONFIG, problem)
        elif not e.sealed or e.recycle or e.phase != EnginePhase.READY:
            m.requeue(rec)  # not onto this engine: it is replaced first
        else:
            m.send_prompt(rec)

    def _compacted(self, rec: PromptRec, answer: dict[str, Any]) -> None:
        """The compaction before ``rec`` was answered: the controller is told how it went (a
        refusal, such as Pi's "Nothing to compact", does not stop the prompt)."""
        notice = compaction_notice(rec.request, answer)
        self.machine.note(CompactedNote(notice))
        self.machine.emit(Notify(notice))
        rec.compact = None  # done: a prompt requeued onto a fresh engine is not compacted again

    def compaction_lost(self, rec: PromptRec, why: str) -> None:
        """The engine configuring ``rec`` is gone or replaced before it answered the compaction
        asked for: the controller is told it failed, and why (a new engine's conversation is
        empty: there is nothing left to compact for it)."""
        if rec.compact is not None and not rec.fresh:
            self._compacted(rec, {"success": False, "error": why})

    def abort_compaction(self, rec: PromptRec) -> None:
        """A configuring prompt is stopped while Pi compacts for it: Pi's ``abort`` stops the
        compaction (agent-session.js ``abort``: ``abortCompaction``), and no prompt is written
        until the compaction is answered -- Pi refuses a prompt while it compacts."""
        m = self.machine
        e = m.state.engine
        cmds = self._commands(rec)
        pending = cmds[len(rec.config_answers)] if len(rec.config_answers) < len(cmds) else None
        if pending is None or pending["type"] != "compact" or not e.running:
            return
        e.busy = pending["id"]
        m.emit(Write(e.generation, {"type": "abort", "id": f"{self._prefix()}:abort"}, "abort"))
        m.state.deadlines["busy"] = m.now + m.config.ack_timeout

    def deadline_config(self) -> None:
        """The ``config`` deadline: the held prompt's configuration was not answered in time."""
        m = self.machine
        rec = m.held()
        if rec is not None and rec.phase == PromptPhase.CONFIGURING:
            m.state.engine.recycle = True
            cmds = self._commands(rec)
            cmd = cmds[min(len(rec.config_answers), len(cmds) - 1)]
            bound = self._bound(rec, cmd)
            why = f"the engine did not answer {cmd['type']} in {bound:g} s"
            self.compaction_lost(rec, f"{why}: the engine is replaced, and the conversation is lost with it")
            m.reject(rec, Reason.CONFIG, why)

    def deadline_busy(self) -> None:
        """The ``busy`` deadline: an aborted compaction was not answered in time."""
        e = self.machine.state.engine
        if e.busy is not None:
            e.busy = None
            e.recycle = True  # it did not say its compaction ended: the next prompt goes to a new engine
