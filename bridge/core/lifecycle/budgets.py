"""Budgets, the lifecycle's part: :class:`Budgets`, a mixin of
:class:`~bridge.core.lifecycle.machine.Lifecycle`. What counts and when a budget is passed are
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
  same check follows. The endpoint's gate (:meth:`Budgets.model_gate`) is open only while a
  prompt is held, not yet stopped.
- While the bridge's total is spent, no prompt is written: each one queued (or submitted) gets
  ``rejected``/``budget``, with the words in ``nativeError``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from bridge.core.lifecycle.config import BridgeConfig
from bridge.core.lifecycle.inputs import ModelCalled, Spent
from bridge.core.lifecycle.state import LifeState, PromptRec
from bridge.core.words import Reason, StopBy


class Budgets:
    """The :class:`Spent` and :class:`ModelCalled` inputs' handlers, the key endpoint's gate, and
    the total's refusal of queued prompts."""

    # What it uses of the machine (Lifecycle sets and defines them).
    config: BridgeConfig
    state: LifeState
    _now: float

    if TYPE_CHECKING:

        def _note(self, payload: dict[str, Any]) -> None: ...
        def _reject(self, rec: PromptRec, reason: Reason, native_error: str | None = None) -> None: ...
        def _send_stop(self, rec: PromptRec, by: StopBy, why: str) -> None: ...

    def model_gate(self) -> str | None:
        """The prompt the key endpoint may forward model calls for: the one holding the slot
        (being configured -- a compaction before it is written calls the model -- or written),
        not stopped by its budget (None: the gate is closed, calls are refused). Another stop (the
        controller's, a timeout's) leaves it open until the receipt: a call Pi has under way is
        still counted, and refusing it raced the abort -- Pi's run then ended on the endpoint's
        403 before the abort settled it, ``failed`` with that error instead of ``interrupted``
        (an ACP cancel test, one run in twelve under load)."""
        s = self.state
        rec = s.prompts.get(s.held) if s.held is not None else None
        if rec is None or rec.phase == "queued" or rec.stop_by is StopBy.BUDGET or rec.gave_up is not None:
            return None
        return rec.request

    def _spent(self, ev: Spent) -> None:
        s = self.state
        rec = s.prompts.get(ev.request if ev.request is not None else s.held or "")
        if rec is None:
            s.spent = s.spent.add(ev.usage)
            return
        before = rec.spent.most(rec.called)
        rec.spent = rec.spent.add(ev.usage)
        s.spent = s.spent.plus(rec.spent.most(rec.called).grown(before))
        self._check(rec)

    def _model_called(self, ev: ModelCalled) -> None:
        s = self.state
        rec = s.prompts.get(ev.request) if ev.request is not None else None
        if rec is not None:
            before = rec.spent.most(rec.called)
            rec.calls += 1
            if ev.usage is not None:
                rec.called = rec.called.add(ev.usage)
            s.spent = s.spent.plus(rec.spent.most(rec.called).grown(before))
        elif ev.usage is not None:
            s.spent = s.spent.add(ev.usage)  # its prompt has its receipt: the total alone
        self._note(
            {
                "event": "model-call",
                "request": ev.request,
                "usage": ev.usage.to_json() if ev.usage is not None else None,
                **({"calls": rec.calls, "called": rec.called.to_json()} if rec is not None else {}),
            }
        )
        if rec is not None:
            self._check(rec)

    def _check(self, rec: PromptRec) -> None:
        """Rules 2 and 3: a held prompt whose spend (or the total) passed its budget is stopped."""
        s = self.state
        if s.held != rec.request or rec.phase != "held" or rec.stop is not None or rec.gave_up is not None:
            return
        spent = rec.spent.most(rec.called)
        passed = rec.budget.passed(spent)
        whose = "the prompt's budget"
        if passed is None:
            passed, whose = self.config.total_budget.passed(s.spent), "the bridge's total budget"
        if passed is None:
            return
        self._note(
            {
                "event": "budget",
                "request": rec.request,
                "spent": spent.to_json(),
                "total": s.spent.to_json(),
                "budget": {"usd": rec.budget.usd, "tokens": rec.budget.tokens},
                "totalBudget": {"usd": self.config.total_budget_usd, "tokens": self.config.total_budget_tokens},
                **({"calls": rec.calls, "called": rec.called.to_json()} if rec.calls else {}),
            }
        )
        self._send_stop(rec, StopBy.BUDGET, f"{whose} was passed ({passed})")
        s.deadlines["stop"] = self._now + self.config.stop_grace

    def _refuse_unbudgeted(self) -> None:
        """Nothing left of the bridge's total: every queued prompt is rejected, never written."""
        s = self.state
        spent = self.config.total_budget.spent(s.spent) if s.queue else None
        while spent is not None and s.queue:
            self._reject(s.prompts[s.queue[0]], Reason.BUDGET, spent)
