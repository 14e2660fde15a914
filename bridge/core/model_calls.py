"""Model calls the bridge's key endpoint forwarded: what each one cost, read from the provider's answer.

The key endpoint (:mod:`bridge.profiles.keyhold`) holds the provider key outside the sandbox
and forwards every model call the engine (or one of its tools, with the engine's token)
makes. It feeds each answer's body, as it streams through, to a :class:`UsageReader`, and
reports the call with what the reader found to the supervision, which counts it against the
held prompt's budget (:mod:`bridge.core.budget`, rule 5). The rules, with their sources:

1. **OpenAI chat completions** (Pi's ``openai-completions`` API; the scripted server speaks
   it): a stream's last ``chat.completion.chunk`` carries ``usage`` when the request asked for
   ``stream_options.include_usage`` (Pi 1.6.0 does: ``openai-completions.js``), a plain
   ``chat.completion`` carries it at the top. ``prompt_tokens`` includes the cached ones
   (``prompt_tokens_details.cached_tokens``); Pi counts them apart as ``cacheRead``, and so
   does this reader. A chunk that carries a running usage (vLLM's ``continuous_usage_stats``)
   replaces the one before: the last one seen is the call's.
2. **Anthropic messages** (``anthropic-messages``): the stream's ``message_start`` carries
   ``message.usage`` (``input_tokens``, ``cache_read_input_tokens``,
   ``cache_creation_input_tokens``, ``output_tokens``), each ``message_delta`` a cumulative
   ``usage.output_tokens``; a plain answer carries ``usage`` at the top.
3. **OpenAI responses** (``openai-responses``, Pi's built-in ``openai``): the stream's
   ``response.completed`` carries ``response.usage`` (``input_tokens`` with
   ``input_tokens_details.cached_tokens`` among them, ``output_tokens``); a plain answer carries
   ``usage`` at the top. **Google** (``google-generative-ai``): each streamed chunk's
   ``usageMetadata`` (``promptTokenCount``, ``cachedContentTokenCount`` among them,
   ``candidatesTokenCount``, ``thoughtsTokenCount``), the last one the call's.
4. **Anything else** (another API, a body that is neither JSON nor Server-Sent Events, a
   stream cut before its usage) is a call with no usage known: counted as a call, never
   estimated (the budget page says what that leaves open).
5. **Prices**: a usage's ``cost`` is computed as Pi computes it, from the model's configured
   prices per million tokens (``models.json``'s ``cost``, or Pi's own catalogue for a built-in
   provider): :func:`priced`.

Pure: bytes in, a :class:`~bridge.core.receipts.Usage` out; no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import orjson

from bridge.core.receipts import Usage

__all__ = ["MAX_EVENT", "UsageReader", "priced"]

#: The longest Server-Sent Event (or plain JSON answer) the reader keeps to parse: a usage
#: record is a few hundred bytes, a plain answer a model's whole reply. Past this, the
#: event is dropped unread (the call counts with no usage from it: rule 3).
MAX_EVENT: Final = 4 * 1024 * 1024


class UsageReader:
    """Fed a model call's answer body as it streams (:meth:`feed`), says its usage (:attr:`usage`)."""

    def __init__(self, content_type: str = "") -> None:
        self._sse = "event-stream" in content_type.lower()
        self._buffer = bytearray()
        self._dropping = False
        #: The last usage seen, as a Usage (OpenAI's, Google's); Anthropic's: its parts, merged.
        self._last: Usage | None = None
        self._anthropic: dict[str, int] = {}

    def feed(self, data: bytes) -> None:
        """More of the body (transfer coding removed)."""
        if not self._sse:
            if len(self._buffer) + len(data) <= MAX_EVENT:
                self._buffer += data
            else:
                self._dropping = True
            return
        self._buffer += data
        while True:
            end, sep = _event_end(self._buffer)
            if end < 0:
                if len(self._buffer) > MAX_EVENT:
                    self._buffer.clear()
                    self._dropping = True  # up to the next event's end, then read again
                return
            event = bytes(self._buffer[:end])
            del self._buffer[: end + sep]
            if self._dropping:
                self._dropping = False
                continue
            self._event(event)

    @property
    def usage(self) -> Usage | None:
        """The call's usage (tokens only; :func:`priced` adds the cost), or None: none was read."""
        if not self._sse and self._buffer and not self._dropping:
            self._record(_json(bytes(self._buffer)))
            self._buffer.clear()
        if self._last is not None:
            return self._last
        if self._anthropic:
            a = self._anthropic
            inp, out = a.get("input_tokens", 0), a.get("output_tokens", 0)
            read, write = a.get("cache_read_input_tokens", 0), a.get("cache_creation_input_tokens", 0)
            return Usage(
                input=inp, output=out, cache_read=read, cache_write=write, total_tokens=inp + out + read + write
            )
        return None

    def _event(self, event: bytes) -> None:
        data = b"\n".join(
            line[5:].lstrip(b" ") for line in event.replace(b"\r\n", b"\n").split(b"\n") if line.startswith(b"data:")
        )
        if data and data != b"[DONE]":
            self._record(_json(data))

    def _record(self, obj: Any) -> None:
        if not isinstance(obj, dict):
            return
        kind = obj.get("type")
        usage = obj.get("usage")
        if kind == "message_start" and isinstance(obj.get("message"), dict):
            self._anthropic_usage(obj["message"].get("usage"))
        elif kind == "message_delta" or kind == "message":
            self._anthropic_usage(usage)
        elif isinstance(usage, dict) and "prompt_tokens" in usage:
            self._last = _from_openai(usage)
        elif kind == "response.completed" and isinstance(obj.get("response"), dict):
            self._record(obj["response"])
        elif isinstance(usage, dict) and "input_tokens" in usage:  # a responses API answer
            self._last = _cached_apart(
                usage.get("input_tokens"), usage.get("output_tokens"), usage, "input_tokens_details"
            )
        elif isinstance(obj.get("usageMetadata"), dict):
            u = obj["usageMetadata"]
            out = _int(u.get("candidatesTokenCount")) + _int(u.get("thoughtsTokenCount"))
            cached = _int(u.get("cachedContentTokenCount"))
            inp = max(0, _int(u.get("promptTokenCount")) - cached)
            self._last = Usage(input=inp, output=out, cache_read=cached, total_tokens=inp + out + cached)

    def _anthropic_usage(self, usage: Any) -> None:
        if isinstance(usage, dict):
            for k, v in usage.items():
                if isinstance(v, int) and not isinstance(v, bool):
                    self._anthropic[k] = v


def _event_end(buffer: bytearray) -> tuple[int, int]:
    """Where the first Server-Sent Event in ``buffer`` ends (a blank line), and the separator's length."""
    ends = [(i, n) for i, n in ((buffer.find(b"\n\n"), 2), (buffer.find(b"\r\n\r\n"), 4)) if i >= 0]
    return min(ends) if ends else (-1, 0)


def _json(data: bytes) -> Any:
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return None


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def _from_openai(u: Mapping[str, Any]) -> Usage:
    return _cached_apart(u.get("prompt_tokens"), u.get("completion_tokens"), u, "prompt_tokens_details")


def _cached_apart(prompt: Any, completion: Any, u: Mapping[str, Any], details_key: str) -> Usage:
    """Input tokens with the cached ones among them (OpenAI's two APIs), counted apart as Pi does."""
    details = u.get(details_key)
    cached = _int(details.get("cached_tokens")) if isinstance(details, dict) else 0
    inp, out = max(0, _int(prompt) - cached), _int(completion)
    return Usage(input=inp, output=out, cache_read=cached, total_tokens=inp + out + cached)


def priced(usage: Usage, cost: Mapping[str, Any] | None) -> Usage:
    """``usage`` with its cost (rule 4): each count times its price per million tokens
    (``input``, ``output``, ``cacheRead``, ``cacheWrite``; a missing price is 0)."""
    if not cost:
        return usage

    def price(name: str) -> float:
        value = cost.get(name)
        return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0.0

    total = (
        usage.input * price("input")
        + usage.output * price("output")
        + usage.cache_read * price("cacheRead")
        + usage.cache_write * price("cacheWrite")
    ) / 1_000_000
    return Usage(
        input=usage.input,
        output=usage.output,
        cache_read=usage.cache_read,
        cache_write=usage.cache_write,
        total_tokens=usage.total_tokens,
        cost=round(total, 12),
    )
