"""Questions for the engine, the lifecycle's part: :class:`EngineQuestions`, which the
:class:`~bridge.core.lifecycle.machine.Lifecycle` holds and calls (its ``questions``). A question (:class:`Ask`: Pi's
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

It owns, and alone writes: the state's ``questions`` slice (:class:`QuestionsState`: the questions
waiting, those written to the current engine, and ``opening``) and the ``ask`` deadline. The
machine calls it for :class:`Ask`, :class:`Answered` and :class:`Open`; from its pump to write the
questions to a ready engine, to answer them all when it closes or goes down, and to ask whether
the open is over; and when the engine exits (:meth:`EngineQuestions.engine_gone`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from bridge.core.lifecycle.actions import Answer, Write
from bridge.core.lifecycle.inputs import Answered, Ask, Open
from bridge.core.lifecycle.state import EnginePhase, QuestionsState

if TYPE_CHECKING:
    from bridge.core.lifecycle.machine import Lifecycle


class EngineQuestions:
    """The question inputs' handlers, their writing (the machine's pump calls :meth:`write`),
    :meth:`answer_all`, and the ``ask`` deadline."""

    def __init__(self, machine: Lifecycle) -> None:
        self.machine = machine

    @property
    def own(self) -> QuestionsState:
        return self.machine.state.questions

    @property
    def waiting(self) -> bool:
        """A question waits for its answer."""
        return bool(self.own.asks)

    @property
    def unwritten(self) -> bool:
        """A question waits that is not written to the current engine yet."""
        return len(self.own.asked) < len(self.own.asks)

    def open(self, ev: Open) -> None:
        s, e = self.machine.state, self.machine.state.engine
        if s.closing is None and s.down is None:
            self.own.opening = (
                e.generation
                if e.phase in (EnginePhase.SPAWNING, EnginePhase.CHECKING, EnginePhase.READY)
                else e.generation + 1
            )

    def open_ended(self) -> None:
        """The pump asks, before it starts an engine and at its end: is the open's engine done
        with its start-up check (or will none be started for it)?"""
        s, e, own = self.machine.state, self.machine.state.engine, self.own
        if own.opening is None:
            return
        # (An engine stopping with its check not ended closed a pipe first: its exit tells.)
        checked = (
            e.generation >= own.opening
            and e.phase not in (EnginePhase.SPAWNING, EnginePhase.CHECKING)
            and not e.in_startup
        )
        if checked or s.down is not None or s.closing is not None:
            own.opening = None

    def ask(self, ev: Ask) -> None:
        s = self.machine.state
        if s.closing is not None or s.down is not None or s.closed:
            why = "the bridge is closing" if s.closing is not None or s.closed else f"the engine is down: {s.down}"
            self.machine.emit(Answer(ev.token, error=why))
            return
        self.own.asks[ev.token] = {**ev.cmd, "id": ev.token}

    def answered(self, ev: Answered) -> None:
        own = self.own
        if ev.token not in own.asks or not self.machine.current(ev.generation):
            return
        del own.asks[ev.token]
        if ev.token in own.asked:
            own.asked.remove(ev.token)
        if not own.asked:
            self.machine.state.deadlines.pop("ask", None)
        self.machine.emit(Answer(ev.token, ev.response))

    def write(self) -> None:
        """The questions not written to the ready engine yet are, all at once; the ``ask``
        deadline runs from the first write that found it unarmed."""
        m, own = self.machine, self.own
        for token, cmd in own.asks.items():
            if token not in own.asked:
                own.asked.append(token)
                m.emit(Write(m.state.engine.generation, dict(cmd), "ask"))
        m.state.deadlines.setdefault("ask", m.now + m.config.ack_timeout)

    def answer_all(self, error: str) -> None:
        own = self.own
        for token in list(own.asks):
            self.machine.emit(Answer(token, error=error))
        own.asks.clear()
        own.asked.clear()
        self.machine.state.deadlines.pop("ask", None)

    def engine_gone(self) -> None:
        """The engine exited: the questions written to it are asked again of the next one."""
        self.own.asked.clear()
        self.machine.state.deadlines.pop("ask", None)

    def deadline(self) -> None:
        """The ``ask`` deadline: every waiting question is answered with the error."""
        self.answer_all(f"the engine did not answer in {self.machine.config.ack_timeout:g} s")
