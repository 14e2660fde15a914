"""The bridge's stops, the lifecycle's part: :class:`Stops`, which the
:class:`~bridge.core.lifecycle.machine.Lifecycle` holds and calls (its ``stops``). Who decides to stop a held prompt is the
machine's (the controller's :class:`~bridge.core.lifecycle.inputs.Stop`, a deadline, closing)
and :mod:`~bridge.core.lifecycle.budgets`' (a spend past its budget); how a stop is sent is here:

- Each stop gets the next id (``stop-N``), is linked to the prompt with its ``by`` (whose it
  is: :class:`~bridge.core.words.StopBy`), and is noted (``{"event": "stop", "by": …}``) before
  it is written, so replay links the same stop to the same prompt and decides the same reason.
- The prompt's own extension dialogs are answered first (Pi's abort does not resolve them),
  and the profile's clearing command goes before the ``abort`` when configured.
- A stop answered before the prompt's run started stopped nothing (Pi's ``abort`` acts on a
  running agent only): it is sent again, noted with the first stop's ``by``.

It owns, and alone writes: the state's ``stops`` slice (:class:`StopsState`: the last
``stop-N``) and a prompt's ``stop`` and ``stop_by``. The machine and the budgets call
:meth:`Stops.send`; the machine calls :meth:`Stops.missed` for :class:`StopMissed`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from bridge.core import dialogs
from bridge.core.lifecycle.actions import Write
from bridge.core.lifecycle.inputs import StopMissed
from bridge.core.lifecycle.notes import StopNote
from bridge.core.lifecycle.state import PromptRec, StopsState
from bridge.core.words import StopBy

if TYPE_CHECKING:
    from bridge.core.lifecycle.machine import Lifecycle


class Stops:
    """:meth:`send` and the :class:`StopMissed` input's handler."""

    def __init__(self, machine: Lifecycle) -> None:
        self.machine = machine

    @property
    def own(self) -> StopsState:
        return self.machine.state.stops

    def send(self, rec: PromptRec, by: StopBy, why: str) -> None:
        """Stop the held prompt ``rec``: ``by`` whose stop it is, ``why`` in words for the note."""
        m = self.machine
        s, e = m.state, m.state.engine
        self.own.serial += 1
        stop = f"stop-{self.own.serial}"
        rec.stop, rec.stop_by = stop, by
        s.deadlines.pop("stall", None)  # a stopped run is waited for by its stop's own bounds
        m.note(StopNote(stop, rec.request, by, why))
        if not e.running:
            return  # no engine to tell: its exit settles the prompt
        # Pi's abort does not resolve a dialog the extension opened without a signal: the
        # prompt's own dialogs are answered first, or its run would wait on them.
        m.dialogs.end_all(dialogs.BY_STOP, request=rec.request)
        if m.config.stop_clears_queue and "clear_queue" in e.clearing:
            m.emit(Write(e.generation, {"type": "clear_queue", "id": f"{stop}:clear"}, "clear"))
        m.emit(Write(e.generation, {"type": "abort", "id": stop}, "abort"))

    def missed(self, ev: StopMissed) -> None:
        """The held prompt's stop was answered before its run started, so it stopped nothing:
        the same stop is sent again (a new abort id, noted with the first stop's ``by``, so
        replay decides the same word). Its grace starts again with the run it now stops."""
        m = self.machine
        s, e = m.state, m.state.engine
        rec = s.prompts.get(ev.request)
        if rec is None or s.held != ev.request or rec.stop is None or rec.gave_up is not None:
            return
        if not m.current(ev.generation) or not e.running:
            return
        again = f"{rec.stop}:again"
        why = "sent again: the engine answered it before the prompt's run started"
        m.note(StopNote(again, rec.request, rec.stop_by, why))
        m.emit(Write(e.generation, {"type": "abort", "id": again}, "abort"))
        if "stop" in s.deadlines:
            s.deadlines["stop"] = m.now + m.config.stop_grace
