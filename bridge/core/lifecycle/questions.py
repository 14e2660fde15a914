"""Questions for the engine, the lifecycle's part: :class:`EngineQuestions`, a mixin of
:class:`~bridge.core.lifecycle.machine.Lifecycle`. A question (:class:`Ask`: Pi's
``get_available_models``, what ``Bridge.models`` asks) changes nothing in the engine; it is
answered exactly once (:class:`Answer`), with the engine's response or an error. So is the
first question of all, *can this launch run?* (:class:`Open`, what ``open_bridge`` asks):

- Asked while closing, once closed, or once the engine is down: answered with the error at
  once (``the bridge is closing`` / ``the engine is down: WHY``).
- Otherwise it waits, with its token as the command's ``id``; an engine is started for it if
  none runs. Every one not yet written goes to the engine once it is ready, and the ``ask``
  deadline (``ack_timeout``) bounds them: past it, every waiting question is answered with
  the error ``the engine did not answer in N s``.
- The current engine's answer (:class:`Answered`) is the controller's; the deadline goes once
  no written question waits. An engine that exits takes its written questions with it: they
  are asked again of the next one.
- Closing, or the engine going down, answers every waiting question with the error; a
  shutdown closes only once no prompt and no question is outstanding.

The open:

- :class:`Open` starts an engine if none runs or is being started (the one a first prompt
  would start: it is the engine that prompt then uses, so the open costs no second start) and
  sets ``opening`` to its generation; an engine already starting or up is the one waited for.
- ``opening`` is cleared, with nothing else changed, when that engine's start-up check has
  ended, whichever way: it is ready (sealed, or ``seal_check`` ``warn``); it was refused
  (``setup_failed``, down at once by the package's rules: the launch cannot run, and
  ``down`` says why in the words ``bridge run`` prints); it crashed (exited, did not answer in
  time: counted as a crash, and the next prompt starts the next engine after the backoff, as
  without the open: no engine is started for the open alone a second time); it could not be
  launched (``setup_failed``); or closing began. An engine with no start-up commands (an
  engine given by its command line) is checked once it runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from bridge.core.lifecycle.actions import Action, Answer, Write
from bridge.core.lifecycle.config import BridgeConfig
from bridge.core.lifecycle.inputs import Answered, Ask, Open
from bridge.core.lifecycle.state import LifeState


class EngineQuestions:
    """The question inputs' handlers, their writing (the machine's pump calls
    :meth:`_write_asks`), :meth:`_answer_all`, and the ``ask`` deadline."""

    # What it uses of the machine (Lifecycle sets and defines them).
    config: BridgeConfig
    state: LifeState
    _out: list[Action]
    _now: float

    if TYPE_CHECKING:

        def _current(self, generation: int) -> bool: ...

    def _open(self, ev: Open) -> None:
        s, e = self.state, self.state.engine
        if s.closing is None and s.down is None:
            s.opening = e.generation if e.phase in ("spawning", "checking", "ready") else e.generation + 1

    def _open_ended(self) -> None:
        """The pump asks, before it starts an engine and at its end: is the open's engine done
        with its start-up check (or will none be started for it)?"""
        s, e = self.state, self.state.engine
        if s.opening is None:
            return
        # (An engine stopping with its check not ended closed a pipe first: its exit tells.)
        checked = e.generation >= s.opening and e.phase not in ("spawning", "checking") and not e.in_startup
        if checked or s.down is not None or s.closing is not None:
            s.opening = None

    def _ask(self, ev: Ask) -> None:
        s = self.state
        if s.closing is not None or s.down is not None or s.closed:
            why = "the bridge is closing" if s.closing is not None or s.closed else f"the engine is down: {s.down}"
            self._out.append(Answer(ev.token, error=why))
            return
        s.asks[ev.token] = {**ev.cmd, "id": ev.token}

    def _answered(self, ev: Answered) -> None:
        s = self.state
        if ev.token not in s.asks or not self._current(ev.generation):
            return
        del s.asks[ev.token]
        if ev.token in s.asked:
            s.asked.remove(ev.token)
        if not s.asked:
            s.deadlines.pop("ask", None)
        self._out.append(Answer(ev.token, ev.response))

    def _write_asks(self) -> None:
        """The questions not written to the ready engine yet are, all at once; the ``ask``
        deadline runs from the first write that found it unarmed."""
        s, e = self.state, self.state.engine
        for token, cmd in s.asks.items():
            if token not in s.asked:
                s.asked.append(token)
                self._out.append(Write(e.generation, dict(cmd), "ask"))
        s.deadlines.setdefault("ask", self._now + self.config.ack_timeout)

    def _answer_all(self, error: str) -> None:
        s = self.state
        for token in list(s.asks):
            self._out.append(Answer(token, error=error))
        s.asks.clear()
        s.asked.clear()
        s.deadlines.pop("ask", None)

    def _deadline_ask(self) -> None:
        self._answer_all(f"the engine did not answer in {self.config.ack_timeout:g} s")
