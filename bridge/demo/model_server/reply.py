"""What one step answers to one chat-completions request, in OpenAI's words.

A :class:`Reply` is the step made concrete for a request: its completion id, time, model,
text, tool calls (each with an id and its arguments as a JSON string), finish reason and
token usage. It has two wire forms, both OpenAI's chat completions API as Pi's
``openai-completions`` provider reads it (Pi's docs/models.md):

- ``"stream": false``: one ``chat.completion`` object (:func:`completion`).
- ``"stream": true``: ``chat.completion.chunk`` objects (:func:`chunks`): a first chunk with
  ``delta.role = "assistant"``, thinking deltas (``reasoning_content``), content deltas, then per tool call one delta naming it and
  deltas with its arguments in pieces, a final chunk with an empty delta and
  ``finish_reason``, then (if ``stream_options.include_usage``) a chunk with
  ``choices: []`` and ``usage``. The HTTP handler sends them as Server-Sent Events and ends
  with ``data: [DONE]``. A step's ``running_usage`` puts the usage so far in every chunk too
  (``completion_tokens`` counting what was streamed), as vLLM's
  ``stream_options.continuous_usage_stats`` does: a stream cut short then has reported some.

Pure: no I/O; the clock is read once, for ``created``.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from bridge.demo.model_server.script import make_words

__all__ = ["Reply", "chunks", "completion", "make_reply"]


@dataclass(frozen=True)
class Reply:
    id: str
    created: int
    model: str
    text: str
    #: Thinking text (``reasoning_content``), "" for none.
    reasoning: str
    #: ``{"id", "name", "arguments"}``, the arguments a JSON string.
    calls: list[dict[str, Any]]
    finish: str
    usage: dict[str, Any]


def make_reply(req: dict[str, Any], step: dict[str, Any], n: int, model_id: str) -> Reply:
    """The reply to request body ``req`` from ``step``; ``n`` numbers it (ids), ``model_id`` if the request names none."""
    text = make_words(step["words"]) if "words" in step else step.get("text", "")
    calls = list(step.get("tool_calls") or [])
    if step.get("tool_call"):
        calls.insert(0, step["tool_call"])
    calls_norm = [_call(c, f"call_scripted_{n}_{j}") for j, c in enumerate(calls)]
    return Reply(
        id=f"chatcmpl-scripted-{n}",
        created=int(time.time()),
        model=req.get("model") or model_id,
        text=text,
        reasoning=str(step.get("reasoning") or ""),
        calls=calls_norm,
        finish=step.get("finish_reason") or ("tool_calls" if calls_norm else "stop"),
        usage=_usage(req, text, calls_norm, step.get("usage")),
    )


def _call(c: dict[str, Any], default_id: str) -> dict[str, Any]:
    args = c.get("arguments", {})
    return {
        "id": c.get("id") or default_id,
        "name": c["name"],
        "arguments": args if isinstance(args, str) else json.dumps(args),
    }


def _usage(
    req: dict[str, Any], text: str, calls: list[dict[str, Any]], override: dict[str, Any] | None
) -> dict[str, Any]:
    """About four characters a token, unless the step says."""
    prompt = max(1, len(json.dumps(req.get("messages", []))) // 4)
    completion = max(1, (len(text) + sum(len(c["arguments"]) for c in calls)) // 4)
    cached = 0
    if override:
        prompt = int(override.get("prompt_tokens", prompt))
        completion = int(override.get("completion_tokens", completion))
        cached = int(override.get("cached_tokens", 0))
    usage: dict[str, Any] = {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }
    if cached:
        usage["prompt_tokens_details"] = {"cached_tokens": cached}
    return usage


def completion(reply: Reply) -> dict[str, Any]:
    """The ``chat.completion`` object (the answer to ``"stream": false``)."""
    message: dict[str, Any] = {"role": "assistant", "content": reply.text or None}
    if reply.reasoning:
        message["reasoning_content"] = reply.reasoning
    if reply.calls:
        message["tool_calls"] = [
            {"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
            for c in reply.calls
        ]
    return {
        "id": reply.id,
        "object": "chat.completion",
        "created": reply.created,
        "model": reply.model,
        "choices": [{"index": 0, "message": message, "finish_reason": reply.finish, "logprobs": None}],
        "usage": reply.usage,
    }


def chunks(reply: Reply, size: int, include_usage: bool, running_usage: bool = False) -> list[dict[str, Any]]:
    """The ``chat.completion.chunk`` objects of a streamed reply, text and arguments in ``size``-character
    pieces; ``running_usage``: each with the usage so far (:func:`_running`)."""
    events = [_chunk(reply, {"role": "assistant", "content": ""})]
    events += [_chunk(reply, {"reasoning_content": piece}) for piece in _pieces(reply.reasoning, size)]
    events += [_chunk(reply, {"content": piece}) for piece in _pieces(reply.text, size)]
    for j, c in enumerate(reply.calls):
        named = {"index": j, "id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": ""}}
        events.append(_chunk(reply, {"tool_calls": [named]}))
        events += [
            _chunk(reply, {"tool_calls": [{"index": j, "function": {"arguments": piece}}]})
            for piece in _pieces(c["arguments"], size)
        ]
    events.append(_chunk(reply, {}, reply.finish))
    if running_usage:
        _running(events, reply.usage)
    if include_usage:
        events.append({**_chunk_head(reply), "choices": [], "usage": reply.usage})
    return events


def _running(events: list[dict[str, Any]], usage: dict[str, Any]) -> None:
    """Each chunk gets the usage so far: all of the prompt's tokens, and of the completion's
    its share of the characters streamed up to and with that chunk (the last: all of them)."""
    sizes = [sum(len(str(v)) for v in _streamed(e)) for e in events]
    total, sent = max(1, sum(sizes)), 0
    for event, n in zip(events, sizes, strict=True):
        sent += n
        done = usage["completion_tokens"] * sent // total if event is not events[-1] else usage["completion_tokens"]
        event["usage"] = {**usage, "completion_tokens": done, "total_tokens": usage["prompt_tokens"] + done}


def _streamed(event: dict[str, Any]) -> list[Any]:
    """What a chunk streams: its delta's text, thinking and tool-call arguments."""
    delta = event["choices"][0]["delta"]
    calls = delta.get("tool_calls") or []
    return [delta.get("content") or "", delta.get("reasoning_content") or ""] + [
        c.get("function", {}).get("arguments") or "" for c in calls
    ]


def _pieces(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


def _chunk_head(reply: Reply) -> dict[str, Any]:
    return {
        "id": reply.id,
        "object": "chat.completion.chunk",
        "created": reply.created,
        "model": reply.model,
        "system_fingerprint": None,
    }


def _chunk(reply: Reply, delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
    choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
    return {**_chunk_head(reply), "choices": [choice]}
