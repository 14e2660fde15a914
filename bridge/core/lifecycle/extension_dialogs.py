"""Extension dialogs, the lifecycle's part: :class:`ExtensionDialogs`, which the
:class:`~bridge.core.lifecycle.machine.Lifecycle` holds and calls (its ``dialogs``). What a dialog
may be (its methods, the fields passed on, whether an answer fits, who may answer) is
:mod:`bridge.core.dialogs`'; this is when one is asked and how it ends.

It owns, and alone writes: the state's ``dialogs`` slice (:class:`DialogsState`: the open
dialogs, the last ``dialog-N``), the ``dialog`` deadline, and the held prompt's ``paused`` and
``resumed`` (its deadlines waiting on a person). The machine calls it for the dialog inputs, at
the ``dialog`` deadline, and to end a prompt's, an engine's or every open dialog
(:meth:`ExtensionDialogs.end_all`).

- An engine's ``extension_ui_request`` (:class:`DialogOpened`) on the current, running engine
  is asked of the controller (:class:`AskDialog`), with ``timeout`` the seconds it has: the
  bridge's ``dialog_timeout``, or the extension's own if that is shorter. The dialog belongs
  to the held prompt if one is running (not given up), else to none.
- It is not asked, and is answered ``cancelled`` at once, when no extension was allowed (a
  seal diagnostic: the controller had it as a signal, so no ``dialog-end`` either), when
  nobody reads dialogs, while closing, or when its prompt is already being stopped (it
  would hold the stop until its timeout).
- Each dialog gets exactly one ``extension_ui_response`` and one :class:`DialogEnded` saying
  who gave it: the controller's answer (one that fits; a misfit is refused and the dialog
  stays open), or ``cancelled`` at its timeout (the ``dialog`` deadline: the earliest open
  one's), its prompt's stop or receipt, the engine's stop, nobody answering
  (:class:`NobodyAnswers`), or closing. An engine that broke or exited gets no response
  written (nothing it waits on can be answered); the end is noted and announced all the same.
- While one of the held prompt's dialogs is open its ``ack`` and ``stall`` deadlines wait
  (the engine waits on a person, not on the model); when its last one ends each is armed
  afresh, and its quiet is measured from then.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import attrs

from bridge.core import dialogs
from bridge.core.lifecycle.actions import AskDialog, DialogEnded, DialogReply, Write
from bridge.core.lifecycle.inputs import AnswerDialog, DialogOpened
from bridge.core.lifecycle.notes import DialogEndNote, DialogNote
from bridge.core.lifecycle.state import DialogRec, DialogsState, PromptPhase, PromptRec

if TYPE_CHECKING:
    from bridge.core.lifecycle.machine import Lifecycle


class ExtensionDialogs:
    """The dialog inputs' handlers, the ``dialog`` deadline, and :meth:`end_all` (how the
    machine ends a prompt's, an engine's or every open dialog)."""

    def __init__(self, machine: Lifecycle) -> None:
        self.machine = machine

    @property
    def own(self) -> DialogsState:
        return self.machine.state.dialogs

    def opened(self, ev: DialogOpened) -> None:
        m = self.machine
        s, e, own = m.state, m.state.engine, self.own
        if not m.current(ev.generation) or not e.running:
            return  # its engine is gone or going: nothing waits for an answer any more
        own.serial += 1
        held = m.held()
        request = held.request if held is not None and held.phase == PromptPhase.HELD and held.gave_up is None else None
        timeout = m.config.dialog_timeout
        if "timeout" in ev.fields:
            timeout = min(timeout, ev.fields["timeout"] / 1000.0)
        rec = DialogRec(
            dialog=f"dialog-{own.serial}",
            engine_id=ev.engine_id,
            generation=ev.generation,
            method=ev.method,
            request=request,
            fields=dict(ev.fields),
            opened=m.now,
            deadline=m.now + timeout,
        )
        note = DialogNote(rec.dialog, request, ev.engine_id, ev.method, ev.fields.get("title", "")[:200])
        # A dialog its prompt's stop already passed (the extension asked again once the stop
        # answered its first: Pi's abort frees neither) would hold the stop until its timeout.
        stopped = held is not None and request == held.request and held.stop is not None
        if not ev.allowed or not ev.listened or s.closing is not None or stopped:
            # Not to be asked: no extension was allowed (a seal diagnostic, which the controller
            # got as a signal), nobody reads dialogs, closing, or its prompt is being stopped.
            # Answered ``cancelled`` now.
            by = (
                dialogs.BY_SEAL
                if not ev.allowed
                else dialogs.BY_NOBODY
                if not ev.listened
                else dialogs.BY_CLOSING
                if s.closing is not None
                else dialogs.BY_STOP
            )
            m.note(note)
            self._end(rec, by, None, announce=ev.allowed)
            return
        own.open[rec.dialog] = rec
        # ``timeout``: the seconds the controller has (the extension's own, if shorter).
        payload = {
            "type": "ask",
            "dialog": rec.dialog,
            "id": request,
            "method": ev.method,
            **rec.fields,
            "timeout": round(timeout, 3),
        }
        m.note(attrs.evolve(note, timeout=round(timeout, 3)))
        m.emit(AskDialog(rec.dialog, request, ev.method, dict(rec.fields), payload))
        if held is not None and request == held.request:
            # The engine waits on a person now, not on the model: ack and stall wait too.
            for name in ("ack", "stall"):
                if s.deadlines.pop(name, None) is not None and name not in held.paused:
                    held.paused.append(name)
        self._arm()

    def answer(self, ev: AnswerDialog) -> None:
        rec = self.own.open.get(ev.dialog)
        if rec is None:
            self.machine.emit(
                DialogReply(ev.dialog, f"no open dialog {ev.dialog!r} (answered, timed out, cancelled, or never asked)")
            )
            return
        answer, error = dialogs.check_answer(rec.method, rec.fields, ev.value, ev.confirmed, ev.cancelled)
        if answer is None:
            self.machine.emit(DialogReply(ev.dialog, error))
            return
        self._end(rec, dialogs.BY_CONTROLLER, answer)
        self.machine.emit(DialogReply(ev.dialog, None))

    def _end(
        self, rec: DialogRec, by: str, answer: dict[str, Any] | None, *, write: bool = True, announce: bool = True
    ) -> None:
        """Dialog ``rec`` gets its one response: ``answer`` (None: ``cancelled``), written to its
        engine unless that engine is gone (``write`` False); ``announce``: the ``dialog-end``
        notice too (not for a sealed engine's dialog, which was a signal)."""
        m, own = self.machine, self.own
        own.open.pop(rec.dialog, None)
        response = answer if answer is not None else dict(dialogs.CANCELLED)
        if write:
            m.emit(Write(rec.generation, {"type": "extension_ui_response", "id": rec.engine_id, **response}, "dialog"))
        said = response if write else None
        m.note(DialogEndNote(rec.dialog, by, said))
        if announce:
            payload = {
                "type": "dialog-end",
                "dialog": rec.dialog,
                "id": rec.request,
                "method": rec.method,
                "title": rec.fields.get("title"),
                "by": by,
                "answer": said,
            }
            m.emit(DialogEnded(rec.dialog, by, said, payload))
        held = m.held()
        if (
            held is not None
            and held.request == rec.request
            and held.paused
            and not any(d.request == held.request for d in own.open.values())
        ):
            self._resume(held)
        self._arm()

    def _resume(self, rec: PromptRec) -> None:
        """The held prompt's last dialog ended: its paused deadlines run again, each afresh."""
        m = self.machine
        for name in rec.paused:
            if name == "ack" and not rec.acked:
                m.state.deadlines["ack"] = m.now + m.config.ack_timeout
            elif name == "stall" and rec.stall is not None and rec.stop is None:
                m.state.deadlines["stall"] = m.now + rec.stall
        rec.paused = []
        rec.resumed = m.now

    def end_all(
        self, by: str, *, request: str | None = None, generation: int | None = None, write: bool = True
    ) -> None:
        """End the open dialogs of ``request`` (or of engine ``generation``, or all)."""
        for rec in list(self.own.open.values()):
            if (request is None or rec.request == request) and (generation is None or rec.generation == generation):
                self._end(rec, by, None, write=write)

    def _arm(self) -> None:
        deadlines, open_ = self.machine.state.deadlines, self.own.open
        if open_:
            deadlines["dialog"] = min(d.deadline for d in open_.values())
        else:
            deadlines.pop("dialog", None)

    def deadline(self) -> None:
        """The ``dialog`` deadline passed: every dialog past its own is answered ``cancelled``."""
        for rec in sorted(self.own.open.values(), key=lambda d: d.deadline):
            if rec.deadline <= self.machine.now:
                self._end(rec, dialogs.BY_TIMEOUT, None)
        self._arm()
