"""The bridge's stops, the lifecycle's part: :class:`Stops`, a mixin of
:class:`~bridge.core.lifecycle.machine.Lifecycle`. Who decides to stop a held prompt is the
machine's (the controller's :class:`~bridge.core.lifecycle.inputs.Stop`, a deadline, closing)
and :mod:`~bridge.core.lifecycle.budgets`' (a spend past its budget); how a stop is sent is here:

- Each stop gets the next id (``stop-N``), is linked to the prompt with its ``by`` (whose it
  is: :class:`~bridge.core.words.StopBy`), and is noted (``{"event": "stop", "by": …}``) before
  it is written, so replay links the same stop to the same prompt and decides the same reason.
- The prompt's own extension dialogs are answered first (Pi's abort does not resolve them),
  and the profile's clearing command goes before the ``abort`` when configured.
- A stop answered before the prompt's run started stopped nothing (Pi's ``abort`` acts on a
  running agent only): it is sent again, noted with the first stop's ``by``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from bridge.core import dialogs
from bridge.core.lifecycle.actions import Action, Write
from bridge.core.lifecycle.config import BridgeConfig
from bridge.core.lifecycle.inputs import StopMissed
from bridge.core.lifecycle.state import LifeState, PromptRec
from bridge.core.words import StopBy


class Stops:
    """:meth:`_send_stop` and the :class:`StopMissed` input's handler."""

    # What it uses of the machine (Lifecycle sets and defines them).
    config: BridgeConfig
    state: LifeState
    _out: list[Action]
    _now: float

    if TYPE_CHECKING:

        def _current(self, generation: int) -> bool: ...
        def _note(self, payload: dict[str, Any]) -> None: ...
        def _end_dialogs(
            self, by: str, *, request: str | None = None, generation: int | None = None, write: bool = True
        ) -> None: ...

    def _send_stop(self, rec: PromptRec, by: StopBy, why: str) -> None:
        s, e = self.state, self.state.engine
        s.stop_serial += 1
        stop = f"stop-{s.stop_serial}"
        rec.stop, rec.stop_by = stop, by
        s.deadlines.pop("stall", None)  # a stopped run is waited for by its stop's own bounds
        self._note({"event": "stop", "stop": stop, "request": rec.request, "by": by, "why": why})
        if e.phase not in ("checking", "ready"):
            return  # no engine to tell: its exit settles the prompt
        # Pi's abort does not resolve a dialog the extension opened without a signal: the
        # prompt's own dialogs are answered first, or its run would wait on them.
        self._end_dialogs(dialogs.BY_STOP, request=rec.request)
        if self.config.stop_clears_queue and "clear_queue" in e.clearing:
            self._out.append(Write(e.generation, {"type": "clear_queue", "id": f"{stop}:clear"}, "clear"))
        self._out.append(Write(e.generation, {"type": "abort", "id": stop}, "abort"))

    def _stop_missed(self, ev: StopMissed) -> None:
        """The held prompt's stop was answered before its run started, so it stopped nothing:
        the same stop is sent again (a new abort id, noted with the first stop's ``by``, so
        replay decides the same word). Its grace starts again with the run it now stops."""
        s, e = self.state, self.state.engine
        rec = s.prompts.get(ev.request)
        if rec is None or s.held != ev.request or rec.stop is None or rec.gave_up is not None:
            return
        if not self._current(ev.generation) or e.phase not in ("checking", "ready"):
            return
        again = f"{rec.stop}:again"
        why = "sent again: the engine answered it before the prompt's run started"
        self._note({"event": "stop", "stop": again, "request": rec.request, "by": rec.stop_by, "why": why})
        self._out.append(Write(e.generation, {"type": "abort", "id": again}, "abort"))
        if "stop" in s.deadlines:
            s.deadlines["stop"] = self._now + self.config.stop_grace
