"""Budgets, the lifecycle's part: :class:`Budgets`, which the
:class:`~bridge.core.lifecycle.machine.Lifecycle` holds and calls (its ``budgets``). What counts and when a budget is passed are
:mod:`bridge.core.budget`'s rules; this is what the machine does about it:

- :class:`~bridge.core.lifecycle.inputs.Spent` (one assistant message of a run ended, with its
  usage) adds to the bridge's total and to that prompt's spend. When either passes its budget
  while the prompt is held and not yet stopped, a ``budget`` note (the spend and the budget,
  for people and ``bridge diagnose``) and the bridge's stop (``by: budget``) are journaled and
  the stop is sent, with the ``stop`` deadline (``stop_grace``) as for every stop: the receipt
  is ``failed``/``budget``, or ``outcome-unknown``/``settle-timeout`` if the engine obeys no abort.
- :class:`~bridge.core.lifecycle.inputs.ModelCalled` (the key endpoint forwarded a call) adds
  to the prompt's ``called`` spend; the prompt's spend is the larger of the two (rule 5), the
  bridge's total grows by what that grew, and a ``model-call`` note journals the call. The
  same check follows. The endpoint's gate (:meth:`Budgets.gate`) is open only while a
  prompt is held, not yet stopped.
- While the bridge's total is spent, no prompt is written: each one queued (or submitted) gets
  ``rejected``/``budget``, with the words in ``nativeError``.

It owns, and alone writes: the state's ``budgets`` slice (:class:`BudgetsState`: the bridge's
total spend) and a prompt's ``spent``, ``called`` and ``calls``. The machine calls it for
:class:`~bridge.core.lifecycle.inputs.Spent` and :class:`~bridge.core.lifecycle.inputs.ModelCalled`,
for the gate, and from its pump (:meth:`Budgets.refuse_unbudgeted`); it stops a prompt through
the machine's :mod:`~bridge.core.lifecycle.stops`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from bridge.core.lifecycle.inputs import ModelCalled, Spent
from bridge.core.lifecycle.notes import BudgetNote, ModelCallNote
from bridge.core.lifecycle.state import BudgetsState, PromptPhase, PromptRec
from bridge.core.words import Reason, StopBy

if TYPE_CHECKING:
    from bridge.core.lifecycle.machine import Lifecycle


class Budgets:
    """The :class:`Spent` and :class:`ModelCalled` inputs' handlers, the key endpoint's gate, and
    the total's refusal of queued prompts."""

    def __init__(self, machine: Lifecycle) -> None:
        self.machine = machine

    @property
    def own(self) -> BudgetsState:
        return self.machine.state.budgets

    def gate(self) -> str | None:
        """The prompt the key endpoint may forward model calls for: the one holding the slot
        (being configured -- a compaction before it is written calls the model -- or written),
        not stopped by its budget (None: the gate is closed, calls are refused). Another stop (the
        controller's, a timeout's) leaves it open until the receipt: a call Pi has under way is
        still counted, and refusing it raced the abort -- Pi's run then ended on the endpoint's
        403 before the abort settled it, ``failed`` with that error instead of ``interrupted``
        (an ACP cancel test, one run in twelve under load)."""
        s = self.machine.state
        rec = s.prompts.get(s.held) if s.held is not None else None
        if rec is None or rec.phase == PromptPhase.QUEUED or rec.stop_by is StopBy.BUDGET or rec.gave_up is not None:
            return None
        return rec.request

    def spent(self, ev: Spent) -> None:
        s, own = self.machine.state, self.own
        rec = s.prompts.get(ev.request if ev.request is not None else s.held or "")
        if rec is None:
            own.spent = own.spent.add(ev.usage)
            return
        before = rec.spent.most(rec.called)
        rec.spent = rec.spent.add(ev.usage)
        own.spent = own.spent.plus(rec.spent.most(rec.called).grown(before))
        self._check(rec)

    def model_called(self, ev: ModelCalled) -> None:
        s, own = self.machine.state, self.own
        rec = s.prompts.get(ev.request) if ev.request is not None else None
        if rec is not None:
            before = rec.spent.most(rec.called)
            rec.calls += 1
            if ev.usage is not None:
                rec.called = rec.called.add(ev.usage)
            own.spent = own.spent.plus(rec.spent.most(rec.called).grown(before))
        elif ev.usage is not None:
            own.spent = own.spent.add(ev.usage)  # its prompt has its receipt: the total alone
        if rec is not None:
            self.machine.note(ModelCallNote(ev.request, ev.usage, rec.calls, rec.called))
        else:
            self.machine.note(ModelCallNote(ev.request, ev.usage))
        if rec is not None:
            self._check(rec)

    def _check(self, rec: PromptRec) -> None:
        """Rules 2 and 3: a held prompt whose spend (or the total) passed its budget is stopped."""
        m = self.machine
        s, config, total = m.state, m.config, self.own.spent
        if s.held != rec.request or rec.phase != PromptPhase.HELD or rec.stop is not None or rec.gave_up is not None:
            return
        spent = rec.spent.most(rec.called)
        passed = rec.budget.passed(spent)
        whose = "the prompt's budget"
        if passed is None:
            passed, whose = config.total_budget.passed(total), "the bridge's total budget"
        if passed is None:
            return
        calls = rec.calls or None  # (the endpoint's calls, if any)
        called = rec.called if calls else None
        m.note(BudgetNote(rec.request, spent, total, rec.budget, config.total_budget, calls, called))
        m.stops.send(rec, StopBy.BUDGET, f"{whose} was passed ({passed})")
        s.deadlines["stop"] = m.now + config.stop_grace

    def refuse_unbudgeted(self) -> None:
        """Nothing left of the bridge's total: every queued prompt is rejected, never written."""
        m = self.machine
        s = m.state
        spent = m.config.total_budget.spent(self.own.spent) if s.queue else None
        while spent is not None and s.queue:
            m.reject(s.prompts[s.queue[0]], Reason.BUDGET, spent)
