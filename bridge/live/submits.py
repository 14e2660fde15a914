"""What ``submit_nowait`` checks of its arguments before a prompt is accepted (nothing is
accepted when one is wrong: a ``TypeError`` or ``ValueError`` names it), and the
:class:`~bridge.core.supervision.Submit` they make. The parameters' meanings are
:meth:`bridge.live.supervisor.Bridge.submit_nowait`'s docstring."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from bridge.core.budget import Budget
from bridge.core.images import image_problem


def seconds(value: Any) -> bool:
    """A positive, finite number of seconds (not a boolean)."""
    return not isinstance(value, bool) and isinstance(value, (int, float)) and value > 0 and value != math.inf


def check_submit(
    message: Any,
    *,
    stream: Any,
    events: Any,
    timeout: Any,
    stall_timeout: Any,
    images: Any,
    budget_usd: Any = None,
    budget_tokens: Any = None,
    trace: Any = None,
) -> Budget:
    """Raise ``TypeError`` / ``ValueError`` for an argument that is wrong; return the prompt's budget."""
    if not isinstance(message, str):
        raise TypeError(f"message must be a str, not {type(message).__name__}")
    for name, flag in (("stream", stream), ("events", events)):
        if not isinstance(flag, bool):
            raise TypeError(f"{name} must be True or False, not {flag!r}")
    if timeout is not None and not seconds(timeout):
        raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
    if (
        stall_timeout is not None
        and (isinstance(stall_timeout, bool) or stall_timeout != 0)
        and not seconds(stall_timeout)
    ):
        raise ValueError(f"stall_timeout must be 0 (none) or a positive number of seconds, got {stall_timeout!r}")
    if images is not None and not isinstance(images, list):
        raise TypeError(f"images must be a list, not {type(images).__name__}")
    problem = image_problem(images) if images else None
    if problem is not None:
        raise ValueError(problem)
    if budget_usd is not None and (
        isinstance(budget_usd, bool) or not isinstance(budget_usd, (int, float)) or not 0 <= budget_usd < math.inf
    ):
        raise ValueError(f"budget_usd must be a number of dollars, 0 or more, got {budget_usd!r}")
    if budget_tokens is not None and (
        isinstance(budget_tokens, bool) or not isinstance(budget_tokens, int) or budget_tokens < 0
    ):
        raise ValueError(f"budget_tokens must be a whole number of 0 or more, got {budget_tokens!r}")
    if trace is not None and not (
        isinstance(trace, Mapping) and all(isinstance(k, str) and isinstance(v, str) for k, v in trace.items())
    ):
        raise TypeError(f"trace must be a mapping of str to str (W3C trace context: traceparent), not {trace!r}")
    # Budget checks what is left: a number of 0 or more.
    budget = Budget(budget_usd, budget_tokens)
    return budget
