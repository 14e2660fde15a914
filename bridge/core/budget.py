"""Budgets: what a prompt, and the bridge as a whole, may spend, and when a spend has passed it.

A spend is summed from the engine's own usage, never estimated: Pi's ``usage`` of every
assistant message of the held prompt's run as Pi ends it (its ``message_end``; the same
messages a receipt's :class:`~bridge.core.receipts.Usage` sums). The rules:

1. **What counts.** ``usd`` is Pi's ``usage.cost.total`` (in the currency of the model's
   configured prices: ``models.json``'s ``cost``, per million tokens); ``tokens`` is Pi's
   ``usage.totalTokens`` (input, output and cache; their sum when a provider reports no total).
   A failed attempt Pi retries by itself is an assistant message Pi ends, so retries count; an
   aborted message counts what Pi reported for it. A compaction counts too: Pi 1.6.0's
   ``compaction_end`` (manual or automatic) carries the summary call's ``result.usage``
   (``agent-session.js``, ``compact``; :func:`compaction_spent`). One during a run counts for
   the held prompt; a prompt's own compaction before it is written counts for that prompt
   (and the total), checked at its run's first message.
2. **Passed** means *more than*: a spend equal to its budget is within it. The check runs
   after each message, so a run is stopped at the first message that takes it past, and
   what that message cost is spent already: a budget bounds what is *started*, not what a
   single model call costs.
3. **A prompt's budget** (``budget_usd`` / ``budget_tokens``; the bridge's default for
   every prompt otherwise) is checked against that prompt's spend; **the bridge's total**
   (``total_budget_usd`` / ``total_budget_tokens``) against everything the bridge's prompts
   spent since it opened. Either passing while the prompt is held sends the bridge's stop
   (``by: budget``, journaled with the spend), and the receipt is ``failed``/``budget``
   (SPEC §5) -- decided the same by replay, from the journaled stop.
4. **Nothing left.** A prompt submitted, or reaching the slot, when the bridge's total is
   spent (at or past it) is never written: ``rejected``/``budget``.
5. **Calls the engine's messages do not account for.** The key endpoint
   (:mod:`bridge.core.model_calls`) reports every model call it forwarded, with the usage read
   from the provider's answer, for the prompt that held the slot when the call came. Pi's own
   calls are among them (every call Pi makes goes through it), so a prompt's spend is, count by
   count, the *larger* of what its messages say (rule 1) and what its forwarded calls say:
   a tool that calls the model with the engine's token spends the prompt's budget, and Pi's
   own calls are not counted twice. The bridge's total grows by what a prompt's spend grew.
   A call whose usage could not be read counts as a call (``calls``), with no tokens.

Pure values (no clock, no I/O), for :mod:`bridge.core.lifecycle.budgets`.
"""

from __future__ import annotations

import math
from typing import Any

import attrs

from bridge.core.events import CompactionSpent
from bridge.core.prompts import PromptState
from bridge.core.receipts import Usage


def compaction_spent(held: PromptState | None, value: dict[str, Any]) -> tuple[CompactionSpent, ...]:
    """Rule 1's compaction: what a ``compaction_end`` says its summary cost (none: nothing)."""
    result = value.get("result")
    usage = result.get("usage") if isinstance(result, dict) else None
    if not isinstance(usage, dict):
        return ()
    request = held.request if held is not None and held.receipt is None else None
    return (CompactionSpent(request, Usage().add({"usage": usage})),)


def budget_bound(instance: Any, attribute: Any, value: Any) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise ValueError(f"{attribute.name} must be a number of 0 or more, got {value!r}")


@attrs.frozen
class Spend:
    """What has been spent: dollars (Pi's cost) and tokens."""

    usd: float = 0.0
    tokens: int = 0

    def add(self, usage: Usage) -> Spend:
        """This spend with one more message's usage added."""
        tokens = usage.total_tokens or (usage.input + usage.output + usage.cache_read + usage.cache_write)
        return Spend(self.usd + usage.cost, self.tokens + tokens)

    def most(self, other: Spend) -> Spend:
        """Rule 5: count by count, the larger of the two."""
        return Spend(max(self.usd, other.usd), max(self.tokens, other.tokens))

    def grown(self, before: Spend) -> Spend:
        """What this spend has more than ``before`` (never less than nothing)."""
        return Spend(max(0.0, self.usd - before.usd), max(0, self.tokens - before.tokens))

    def plus(self, other: Spend) -> Spend:
        return Spend(self.usd + other.usd, self.tokens + other.tokens)

    def to_json(self) -> dict[str, Any]:
        return {"usd": self.usd, "tokens": self.tokens}


@attrs.frozen
class Budget:
    """A bound on a spend (None: no bound on that count)."""

    usd: float | None = attrs.field(default=None, validator=budget_bound)
    tokens: int | None = attrs.field(default=None, validator=budget_bound)

    @property
    def empty(self) -> bool:
        return self.usd is None and self.tokens is None

    def passed(self, spend: Spend) -> str | None:
        """Rule 2: what of ``spend`` is more than this budget, in words; None: within it."""
        if self.usd is not None and spend.usd > self.usd:
            return f"{spend.usd:.6g} USD spent, more than {self.usd:g}"
        if self.tokens is not None and spend.tokens > self.tokens:
            return f"{spend.tokens} tokens spent, more than {self.tokens}"
        return None

    def spent(self, spend: Spend) -> str | None:
        """Rule 4: what of ``spend`` is at or past this budget (nothing left), in words; None: some is left."""
        if self.usd is not None and spend.usd >= self.usd:
            return f"{spend.usd:.6g} USD of the bridge's {self.usd:g} spent"
        if self.tokens is not None and spend.tokens >= self.tokens:
            return f"{spend.tokens} of the bridge's {self.tokens} tokens spent"
        return None

    def over(self, default: Budget) -> Budget:
        """This budget, with ``default``'s bound where this one has none."""
        return Budget(
            self.usd if self.usd is not None else default.usd,
            self.tokens if self.tokens is not None else default.tokens,
        )
