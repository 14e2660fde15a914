"""What the session knows of each prompt it saw sent (:class:`PromptState`), and the small pure
helpers it fills one in with: a signal onto its receipt (bounded), an assistant message's
text."""

from __future__ import annotations

from typing import Any, Final

import attrs

from bridge.core.receipts import Receipt, Usage
from bridge.core.steering import EngineConfig
from bridge.core.words import RequestId, Signal, StopBy

#: Signals kept on one prompt's receipt; past it they are counted, not kept.
SIGNALS_PER_PROMPT: Final = 100


@attrs.define
class PromptState:
    """What the session knows of one sent prompt."""

    #: None only in replay, for a journal's prompt that had no id.
    request: RequestId | None
    stream: bool = False
    #: The controller asked for its events (:mod:`bridge.core.progress`).
    events: bool = False
    #: It is traced (:mod:`bridge.live.otel`): its event lines' events, from their top-level
    #: scalars (a ``message_update`` is not read for it: no deltas), and its usage events.
    traced: bool = False
    ack_idx: int | None = None
    disposition: str | None = None
    working_idx: int | None = None
    stop: Any = None
    #: Whose stop ``stop`` is (the journal's ``stop`` note): controller, timeout, closing.
    stop_by: StopBy | None = None
    #: Its first stop was answered before its run started: it stopped nothing, and the run's
    #: ``agent_start`` says so (:class:`~bridge.core.events.StopUnheard`).
    stop_unheard: bool = False
    reply: str | None = None
    signals: list[dict[str, Any]] = attrs.field(factory=list)
    times: dict[str, float] = attrs.field(factory=dict)
    pid: int | None = None
    generation: int | None = None
    receipt: Receipt | None = None
    #: The run attributed to it, remembered when another prompt displaced it.
    run_id: str | None = None
    #: Its run's assistant messages' usage, summed.
    usage: Usage = attrs.field(factory=Usage)
    #: Tool calls of its run that started and have not ended (no stall while one runs).
    tools_running: set[str] = attrs.field(factory=set)
    #: Seconds the engine said it waits before retrying (its last line was ``auto_retry_start``).
    retry_delay: float = 0.0
    #: The model and thinking level the engine was verified to have (a ``config`` note).
    config: EngineConfig | None = None


def add_signal(prompt: PromptState, signal: dict[str, Any]) -> None:
    """A signal onto ``prompt``'s receipt: the first :data:`SIGNALS_PER_PROMPT`, then one saying more were not kept."""
    if len(prompt.signals) < SIGNALS_PER_PROMPT:
        prompt.signals.append(signal)
    elif len(prompt.signals) == SIGNALS_PER_PROMPT:
        prompt.signals.append({"signal": Signal.MORE_SIGNALS_NOT_KEPT, "idx": signal.get("idx")})


def message_text(message: dict[str, Any]) -> str:
    """The text parts of an assistant message, joined."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    return "".join(
        part["text"]
        for part in content
        if isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str)
    )
