"""The script: the steps the server answers with, one per chat-completions request, in order.

When the script is exhausted the *default* step answers every further request (by default
:data:`DEFAULT_STEP`). ``GET /v1/models`` and unknown paths consume no step.

Step schema (a JSON object; keys combine where it makes sense)
--------------------------------------------------------------
Reply content:
  ``text``: str            assistant text.
  ``words``: int           instead of ``text``: a deterministic text of N words
                           (same N -> same text, see :func:`make_words`).
  ``tool_call``: {"name": str, "arguments": obj|str, "id"?: str}
                           one function tool call (e.g. Pi's built-in ``bash``
                           with ``{"command": "echo hi"}``, or ``read`` with
                           ``{"path": "..."}``); finish_reason becomes
                           ``"tool_calls"``. ``tool_calls``: [..] for several.
                           May follow ``text`` in the same reply.
  ``reasoning``: str       thinking text, streamed before the reply as
                           ``delta.reasoning_content`` (what llama.cpp and
                           DeepSeek send; Pi reads it as a thinking block).
Streaming shape:
  ``chunk``: int           characters per content delta (default 8); tool-call
                           arguments are streamed in pieces of the same size.
  ``delay``: float         seconds to sleep between chunks (default 0). A slow
                           stream is text with a large delay.
  ``latency``: float       seconds to wait before sending anything (headers).
  ``finish_reason``: str   override the final finish_reason (e.g. ``"length"``).
  ``usage``: {...}         override ``prompt_tokens`` / ``completion_tokens``;
                           ``cached_tokens`` (sent as
                           ``prompt_tokens_details.cached_tokens``: cache reads).
                           The usage is sent once, in a last chunk after the
                           ``finish_reason`` one, when the request asks for it
                           (``stream_options.include_usage``, as Pi does): a
                           stream stopped before its end reported none, so Pi's
                           aborted message shows 0 tokens.
  ``running_usage``: true  also put the usage so far in every chunk (vLLM's
                           ``continuous_usage_stats``; Anthropic's stream says
                           its input tokens at the start): ``prompt_tokens``
                           whole from the first chunk, ``completion_tokens``
                           counting what was streamed. A stream stopped midway
                           then has usage to report (Pi keeps the last chunk's).
Failures:
  ``status``: int          answer with this HTTP status (e.g. 500, 429, 529)
                           and an OpenAI-style error body; no step content.
  ``body``: str|obj        the error body (obj -> JSON; str sent verbatim, as
                           JSON content-type if it parses as JSON).
  ``headers``: {..}        extra response headers (e.g. ``{"retry-after": "0"}``).
  ``hang``: true           read the request, then never answer (until the client
                           disconnects or the server stops).
  ``hang_after``: int      stream that many chunks (role chunk included), then
                           stall without finishing.
  ``cut_after``: int       stream that many chunks, then drop the connection
                           without the terminating chunk (a network error).
Also ``comment``: ignored (a note for the reader of a script file).

Examples::

    [{"text": "hello", "chunk": 2},
     {"tool_call": {"name": "bash", "arguments": {"command": "echo hi"}}},
     {"words": 200, "delay": 0.05},
     {"status": 500, "body": "boom"},
     {"hang": true},
     {"text": "truncated", "finish_reason": "length"}]

A script file (``--script``) is a list of steps, or ``{"steps": [...], "default": {...}}``.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable
from typing import Any

__all__ = ["DEFAULT_STEP", "STEP_KEYS", "Script", "load_script", "make_words", "validate_step"]

DEFAULT_STEP: dict[str, Any] = {"text": "ok"}

#: Every key a step may have (the schema above); any other is refused, so a typo is an error.
STEP_KEYS = frozenset(
    {
        "text",
        "words",
        "reasoning",
        "tool_call",
        "tool_calls",
        "chunk",
        "delay",
        "latency",
        "finish_reason",
        "usage",
        "running_usage",
        "status",
        "body",
        "headers",
        "hang",
        "hang_after",
        "cut_after",
        "comment",
    }
)

_VOCAB = [
    "alpha",
    "bravo",
    "charlie",
    "delta",
    "echo",
    "foxtrot",
    "golf",
    "hotel",
    "india",
    "juliet",
    "kilo",
    "lima",
    "mike",
    "november",
    "oscar",
    "papa",
    "quebec",
    "romeo",
    "sierra",
    "tango",
    "uniform",
    "victor",
    "whiskey",
    "xray",
    "yankee",
    "zulu",
]


def make_words(n: int) -> str:
    """A deterministic text of ``n`` words (NATO alphabet, stride 7)."""
    return " ".join(_VOCAB[(i * 7) % len(_VOCAB)] for i in range(max(0, int(n))))


def validate_step(step: Any) -> dict[str, Any]:
    """``step`` itself if it is a JSON object with only :data:`STEP_KEYS`; else ValueError."""
    if not isinstance(step, dict):
        raise ValueError(f"script step must be a JSON object, got {step!r}")
    unknown = set(step) - STEP_KEYS
    if unknown:
        raise ValueError(f"unknown step keys {sorted(unknown)} in {step!r}")
    return step


class Script:
    """The steps, handed out one per request in order (thread-safe: one thread per connection)."""

    def __init__(self, steps: Iterable[dict[str, Any]], default: dict[str, Any] | None):
        self._steps = [validate_step(s) for s in steps]
        self._default = validate_step(dict(default) if default is not None else dict(DEFAULT_STEP))
        self._next = 0
        self._lock = threading.Lock()

    def take(self) -> tuple[int | None, dict[str, Any]]:
        """(index, step); index is None for the default step."""
        with self._lock:
            if self._next < len(self._steps):
                i = self._next
                self._next += 1
                return i, self._steps[i]
            return None, self._default

    @property
    def remaining(self) -> int:
        with self._lock:
            return len(self._steps) - self._next


def load_script(path: str | None, steps: str | None) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """The steps and default step from a script file, or else from inline JSON (none: ``[]``)."""
    data: Any = []
    if path:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    elif steps:
        data = json.loads(steps)
    default = None
    if isinstance(data, dict):  # {"steps": [...], "default": {...}}
        default = data.get("default")
        data = data.get("steps", [])
    if not isinstance(data, list):
        raise ValueError('script must be a JSON list of steps (or {"steps": [...]})')
    return data, default
