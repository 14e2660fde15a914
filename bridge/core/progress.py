"""What the engine does while it has a prompt, in the bridge's words: the events a controller
gets for a prompt submitted with ``events`` (serve: ``"events": true``; the API:
``submit(..., events=True)`` and ``PromptHandle.events()``).

Each is one small JSON object, ``{"type": "event", "event": KIND, "id": PROMPT, "i": IDX, ...}``,
tagged with the prompt and the observation index of the engine line it came from. The kinds,
and the Pi lines they come from (Pi's ``docs/json.md``):

=================  ==========================================  ===================================
``event``          fields                                      Pi's line
=================  ==========================================  ===================================
``text``           ``delta``, ``lines``                        ``message_update`` ``text_delta``
``thinking``       ``delta``, ``lines``                        ``message_update`` ``thinking_delta``
``tool-start``     ``callId``, ``tool``, ``args``              ``tool_execution_start``
``tool-update``    ``callId``, ``tool``, ``output``,           ``tool_execution_update``
                   ``truncated``
``tool-end``       ``callId``, ``tool``, ``result``,           ``tool_execution_end``
                   ``truncated``, ``isError``, ``durationMs``
``retry-start``    ``attempt``, ``maxAttempts``, ``delayMs``,  ``auto_retry_start``
                   ``error``
``retry-end``      ``success``, ``attempt``, ``error``         ``auto_retry_end``
``compaction-      ``reason``                                  ``compaction_start``
start``
``compaction-end`` ``reason``, ``aborted``, ``willRetry``,     ``compaction_end``
                   ``error``
``turn-start``     (none)                                      ``turn_start``
``turn-end``       ``stopReason``, ``toolResults`` (a count)   ``turn_end``
``usage``          ``usage`` (this message's), ``total``       an assistant ``message_end``
                   (the run's so far), ``stopReason``
=================  ==========================================  ===================================

``usage`` comes once per assistant message of the run, when Pi ends it (its ``message_end``;
an aborted or failed message too): ``usage`` is what Pi reported for that message (a
:class:`~bridge.core.receipts.Usage` of one message), ``total`` the run's sum so far -- what the
receipt's ``usage`` says if nothing more comes, and exactly the receipt's after the last one.
What Pi reports for a message cut short is what its provider had streamed by then: OpenAI's
chat completions send the usage only at the end of the stream (``include_usage``), so such a
message has 0 tokens; providers that report usage as they go (Anthropic's input tokens at the
start; vLLM's continuous usage) give what was spent. The session makes it, not
:func:`translate`: ``total`` is the session's sum.

Deltas read together are joined: consecutive ``text`` (or ``thinking``) deltas of one read of
the engine's stdout are one event, ``i`` the first line's index and ``lines`` how many it joins
(:func:`join_deltas`).

Bounds, so that an event stays small whatever a tool prints:

- ``tool-update``'s ``output`` is the *latest* partial output's text, its last
  :data:`UPDATE_CHARS` characters (Pi sends the whole accumulated output each time; only the
  tail is new); ``truncated`` counts the characters left out before it.
- ``tool-end``'s ``result`` is the result's text, its first :data:`RESULT_CHARS` characters
  (``truncated``: how many more there were); an image part reads ``[image]``.
- ``tool-start``'s ``args``: a string longer than :data:`ARG_CHARS` characters inside them
  (a ``write`` tool's file content) is cut there and ends with ``…``, a list or object
  nested more than :data:`ARG_DEPTH` levels deep is ``…``; ``argsTruncated`` counts the
  characters cut (one for each such list or object).
- error texts: :data:`ERROR_CHARS` characters.

Only lines of the prompt's own run while the engine is sealed become events (the same rule as
streamed text): after an overlap the bridge cannot say whose a line is. Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

import attrs

from bridge.core.receipts import Usage
from bridge.core.wire import Wire, form
from bridge.core.words import RequestId

#: ``tool-update``: the last this many characters of the latest partial output.
UPDATE_CHARS: Final = 2000
#: ``tool-end``: the first this many characters of the result.
RESULT_CHARS: Final = 8000
#: ``tool-start``: each string inside the arguments, at most this many characters.
ARG_CHARS: Final = 2000
#: ``tool-start``: containers nested this deep inside the arguments are cut (an engine's line
#: may nest 1,024 deep; no tool's arguments need a tenth of that, and nothing recurses further).
ARG_DEPTH: Final = 64
#: Error texts (retries, compaction), at most this many characters.
ERROR_CHARS: Final = 500

_HEAD: Final = {"request": "id", "idx": "i"}


def _event(kind: str, **rename: str) -> Callable[[type], type]:
    return form(tag={"type": "event", "event": kind}, rename={**_HEAD, **rename})


@_event("text")
@attrs.frozen
class TextEvent(Wire):
    request: RequestId | None
    idx: int
    delta: str
    #: How many delta lines it joins (:func:`join_deltas`); ``idx`` is the first one's.
    lines: int = 1


@_event("thinking")
@attrs.frozen
class ThinkingEvent(Wire):
    request: RequestId | None
    idx: int
    delta: str
    lines: int = 1


#: The events :func:`join_deltas` may join.
DELTA_TYPES: Final = (TextEvent, ThinkingEvent)


def join_deltas(deltas: list[TextEvent] | list[ThinkingEvent]) -> TextEvent | ThinkingEvent:
    """One event for consecutive deltas of one kind and one prompt, read together: their text
    joined, ``idx`` the first one's, ``lines`` their count. The live bridge joins what one read
    of the engine's stdout brought, so a fast stream costs a controller one event per read, not
    one per token (and nothing waits for more: a read is joined only with itself)."""
    first = deltas[0]
    if len(deltas) == 1:
        return first
    text = "".join(d.delta for d in deltas)
    lines = sum(d.lines for d in deltas)
    if type(first) is TextEvent:
        return TextEvent(first.request, first.idx, text, lines)
    return ThinkingEvent(first.request, first.idx, text, lines)


@_event("tool-start", call_id="callId", args_truncated="argsTruncated")
@attrs.frozen
class ToolStart(Wire):
    request: RequestId | None
    idx: int
    call_id: str | None
    tool: str | None
    args: Any
    args_truncated: int = 0


@_event("tool-update", call_id="callId")
@attrs.frozen
class ToolUpdate(Wire):
    request: RequestId | None
    idx: int
    call_id: str | None
    tool: str | None
    output: str
    truncated: int = 0


@_event("tool-end", call_id="callId", is_error="isError", duration_ms="durationMs")
@attrs.frozen
class ToolEnd(Wire):
    request: RequestId | None
    idx: int
    call_id: str | None
    tool: str | None
    result: str
    truncated: int
    is_error: bool
    duration_ms: float | None = None


@_event("retry-start", max_attempts="maxAttempts", delay_ms="delayMs")
@attrs.frozen
class RetryStart(Wire):
    request: RequestId | None
    idx: int
    attempt: int | None
    max_attempts: int | None
    delay_ms: float | None
    error: str | None


@_event("retry-end")
@attrs.frozen
class RetryEnd(Wire):
    request: RequestId | None
    idx: int
    success: bool
    attempt: int | None
    error: str | None


@_event("compaction-start")
@attrs.frozen
class CompactionStart(Wire):
    request: RequestId | None
    idx: int
    reason: str | None


@_event("compaction-end", will_retry="willRetry")
@attrs.frozen
class CompactionEnd(Wire):
    request: RequestId | None
    idx: int
    reason: str | None
    aborted: bool
    will_retry: bool
    error: str | None


@_event("turn-start")
@attrs.frozen
class TurnStart(Wire):
    request: RequestId | None
    idx: int


@_event("turn-end", stop_reason="stopReason", tool_results="toolResults")
@attrs.frozen
class TurnEnd(Wire):
    request: RequestId | None
    idx: int
    stop_reason: str | None
    tool_results: int


@_event("usage", stop_reason="stopReason")
@attrs.frozen
class UsageEvent(Wire):
    request: RequestId | None
    idx: int
    #: What Pi reported for this assistant message (``messages`` is 1).
    usage: Usage
    #: The run's usage so far, this message's included.
    total: Usage
    #: The message's ``stopReason`` (``stop``, ``toolUse``, ``aborted``, ``error``, ...).
    stop_reason: str | None = None


ProgressEvent = (
    TextEvent
    | ThinkingEvent
    | ToolStart
    | ToolUpdate
    | ToolEnd
    | RetryStart
    | RetryEnd
    | CompactionStart
    | CompactionEnd
    | TurnStart
    | TurnEnd
    | UsageEvent
)
#: Every event class, for ``type(event) in PROGRESS_TYPES``.
PROGRESS_TYPES: Final[frozenset[type]] = frozenset(ProgressEvent.__args__)


def translate(value: dict[str, Any], idx: int, request: RequestId | None) -> ProgressEvent | None:
    """The event for one engine line of the prompt's run, or None (a line no event shows)."""
    kind = value.get("type")
    build = _BUILDERS.get(kind) if isinstance(kind, str) else None
    return build(value, idx, request) if build is not None else None


# -- each Pi line -----------------------------------------------------------------------------


def delta_of(update: dict[str, Any]) -> tuple[Any, str] | None:
    """A ``message_update``'s delta: its kind (``text_delta``, ``thinking_delta``, ...) and its
    non-empty text, or None (Pi 1.6 writes only the delta and the usage, no partial message)."""
    delta = update.get("assistantMessageEvent")
    piece = delta.get("delta") if type(delta) is dict else None
    if type(piece) is not str or not piece:
        return None
    return delta.get("type"), piece  # type: ignore[union-attr]  # a dict: piece came from it


def _message_update(v: dict[str, Any], idx: int, request: RequestId | None) -> ProgressEvent | None:
    found = delta_of(v)
    if found is None:
        return None
    kind, piece = found
    if kind == "text_delta":
        return TextEvent(request, idx, piece)
    if kind == "thinking_delta":
        return ThinkingEvent(request, idx, piece)
    return None


def _tool_start(v: dict[str, Any], idx: int, request: RequestId | None) -> ProgressEvent:
    args, cut = _bounded(v.get("args"))
    return ToolStart(request, idx, _str(v.get("toolCallId")), _str(v.get("toolName")), args, cut)


def _tool_update(v: dict[str, Any], idx: int, request: RequestId | None) -> ProgressEvent:
    text = result_text(v.get("partialResult"))
    cut = max(0, len(text) - UPDATE_CHARS)
    return ToolUpdate(request, idx, _str(v.get("toolCallId")), _str(v.get("toolName")), text[cut:], cut)


def _tool_end(v: dict[str, Any], idx: int, request: RequestId | None) -> ProgressEvent:
    text = result_text(v.get("result"))
    duration = v.get("durationMs")
    return ToolEnd(
        request,
        idx,
        _str(v.get("toolCallId")),
        _str(v.get("toolName")),
        text[:RESULT_CHARS],
        max(0, len(text) - RESULT_CHARS),
        v.get("isError") is True,
        duration if _number(duration) else None,
    )


def _retry_start(v: dict[str, Any], idx: int, request: RequestId | None) -> ProgressEvent:
    delay = v.get("delayMs")
    return RetryStart(
        request,
        idx,
        _int(v.get("attempt")),
        _int(v.get("maxAttempts")),
        delay if _number(delay) else None,
        _error(v.get("errorMessage")),
    )


def _retry_end(v: dict[str, Any], idx: int, request: RequestId | None) -> ProgressEvent:
    return RetryEnd(request, idx, v.get("success") is True, _int(v.get("attempt")), _error(v.get("finalError")))


def _compaction_start(v: dict[str, Any], idx: int, request: RequestId | None) -> ProgressEvent:
    return CompactionStart(request, idx, _str(v.get("reason")))


def _compaction_end(v: dict[str, Any], idx: int, request: RequestId | None) -> ProgressEvent:
    return CompactionEnd(
        request,
        idx,
        _str(v.get("reason")),
        v.get("aborted") is True,
        v.get("willRetry") is True,
        _error(v.get("errorMessage")),
    )


def _turn_start(v: dict[str, Any], idx: int, request: RequestId | None) -> ProgressEvent:
    return TurnStart(request, idx)


def _turn_end(v: dict[str, Any], idx: int, request: RequestId | None) -> ProgressEvent:
    message = v.get("message")
    stop = message.get("stopReason") if isinstance(message, dict) else None
    results = v.get("toolResults")
    return TurnEnd(request, idx, _str(stop), len(results) if isinstance(results, list) else 0)


_BUILDERS: Final[dict[str, Callable[[dict[str, Any], int, RequestId | None], ProgressEvent | None]]] = {
    "message_update": _message_update,
    "tool_execution_start": _tool_start,
    "tool_execution_update": _tool_update,
    "tool_execution_end": _tool_end,
    "auto_retry_start": _retry_start,
    "auto_retry_end": _retry_end,
    "compaction_start": _compaction_start,
    "compaction_end": _compaction_end,
    "turn_start": _turn_start,
    "turn_end": _turn_end,
}

#: The Pi line types that can become an event.
EVENT_LINES: Final = frozenset(_BUILDERS)


# -- helpers ------------------------------------------------------------------------------------


def result_text(result: Any) -> str:
    """A tool result's text: its ``content`` parts' text joined (an image part: ``[image]``)."""
    if isinstance(result, str):
        return result
    content = result.get("content") if isinstance(result, dict) else None
    if not isinstance(content, list):
        return ""
    parts = []
    for part in content:
        if isinstance(part, dict):
            if part.get("type") == "text" and isinstance(part.get("text"), str):
                parts.append(part["text"])
            elif part.get("type") == "image":
                parts.append("[image]")
    return "".join(parts)


def _bounded(value: Any, depth: int = 0) -> tuple[Any, int]:
    """``value`` with every string in it cut to :data:`ARG_CHARS` characters and every
    container nested past :data:`ARG_DEPTH` levels replaced by ``…`` (which counts as one),
    and how many characters were cut."""
    if isinstance(value, str):
        if len(value) <= ARG_CHARS:
            return value, 0
        return value[:ARG_CHARS] + "…", len(value) - ARG_CHARS
    if isinstance(value, (dict, list)) and depth >= ARG_DEPTH:
        return "…", 1
    if isinstance(value, dict):
        out: dict[Any, Any] = {}
        cut = 0
        for k, v in value.items():
            out[k], n = _bounded(v, depth + 1)
            cut += n
        return out, cut
    if isinstance(value, list):
        items = []
        cut = 0
        for v in value:
            item, n = _bounded(v, depth + 1)
            items.append(item)
            cut += n
        return items, cut
    return value, 0


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _error(value: Any) -> str | None:
    return value[:ERROR_CHARS] if isinstance(value, str) else None
