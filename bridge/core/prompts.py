"""A prompt's options, declared once (:class:`PromptOptions`, :func:`check_prompt`), and what
the session knows of each prompt it saw sent (:class:`PromptState`, with the small pure helpers
it fills one in with: a signal onto its receipt, bounded; an assistant message's text).

**The options** are what a caller may ask of one prompt besides its text and id. Every door
that takes a prompt (``Bridge.submit``/``submit_nowait``/``prompt``, the asyncio bridge's, the
:class:`~bridge.live.protocols.BridgeAPI` protocol's, the pools', the Ray pool's, ``query``) is
``submit(message, *, request=None, **options: Unpack[...])`` over one of the ``TypedDict``
classes here (PEP 692): a user's type checker sees every option with its type, a forwarder
passes ``**options`` on, and an option added here is added to every door at once. Each option
is declared, and documented, in exactly one of them; they nest by what a door can do with it
(so :class:`PromptOptions`, the bridge's, is built on a smaller one rather than being the
root: a door that cannot honour an option does not take it):

- :class:`RunOptions`: what the prompt's run is given -- its images, the model it runs on, how
  long and how much it may take, the trace it continues. Every door takes them.
- :class:`PromptOptions` (``RunOptions`` and ``stream``, ``events``): what a prompt's handle
  shows while it runs. The doors that give a handle take them; the Ray pool (a future of a
  receipt) and ``query`` (which always reads the events) do not, so a caller's type checker
  refuses them there instead of the bridge ignoring them.
- :class:`PoolPromptOptions` (``PromptOptions`` and :class:`ConversationOption`): a pool's
  prompt may name the conversation it belongs to, which picks its engine; one bridge has one
  conversation, so its doors do not take the key. It is a ``TypedDict`` of its own (and not an
  option every door refuses at run time) so that the refusal is the type checker's.
  :class:`RayPromptOptions` (``RunOptions`` and ``ConversationOption``) is the Ray pool's,
  which keys conversations the same way.

**The checks** of the options' values are :func:`check_prompt`'s, pure and done once where a
prompt is accepted (the bridge's ``submit_nowait``, a pool's, the Ray pool's ``submit``): a
``TypeError`` or ``ValueError`` names the option, and nothing is accepted. A check of a new
kind (of the message too) is added there, once, for every door. A key the door does not take
is refused by the door itself (:func:`bridge.live.submits.prompt_door`: it wraps async calls
too, so it lives in the I/O layer), as Python refuses a keyword a call does not take. ``bridge serve``'s wire ``prompt``
(:class:`bridge.controller.messages.Prompt`) carries the same options in camelCase;
``tests/test_messages.py`` checks the two declare the same ones.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Final, TypedDict, cast

import attrs

from bridge.core.images import image_problem
from bridge.core.receipts import Receipt, Usage
from bridge.core.steering import EngineConfig, Wanted
from bridge.core.words import RequestId, Signal, StopBy

# -- the options ------------------------------------------------------------------------------


class RunOptions(TypedDict, total=False):
    """What a prompt's run is given, besides its text (every door takes them; all optional)."""

    timeout: float | None
    """Seconds from its write to its settle; past them the bridge stops it (``failed``/``timeout``).
    None: no limit."""
    images: list[dict[str, Any]] | None
    """Images sent with it, each Pi's ``{"type": "image", "data": BASE64, "mimeType": "image/png"}``."""
    stall_timeout: float | None
    """Seconds its run may show nothing while it waits on the model (None: the bridge's; 0: none)."""
    provider: str | None
    """With ``model``: the model it runs with, verified before it is written."""
    model: str | None
    """The model id (with ``provider``), or ``"provider/id"`` alone."""
    thinking: str | None
    """The thinking level (``off``, ``minimal``, ``low``, ``medium``, ``high``, ``xhigh``, ``max``)."""
    budget_usd: float | None
    """What its run may spend (Pi's cost); past it the bridge stops it (``failed``/``budget``).
    None: the bridge's ``prompt_budget_usd``."""
    budget_tokens: int | None
    """Likewise in tokens (None: the bridge's ``prompt_budget_tokens``)."""
    trace: Mapping[str, str] | None
    """W3C trace context (``{"traceparent": …}``) its span continues, when tracing is on."""


class PromptOptions(RunOptions, total=False):
    """A prompt's options where it gets a handle: :class:`RunOptions`, and what the handle shows."""

    stream: bool
    """Its reply text on the handle's ``text()`` as it comes (default False)."""
    events: bool
    """What the engine does for it on the handle's ``events()`` / ``messages()`` (default False)."""


class ConversationOption(TypedDict, total=False):
    """The option of a pool's prompt that picks its engine."""

    conversation: str | None
    """A key (any non-empty string): the prompts with the same key run on one engine, in order,
    each reading the ones before it, and no other prompt reads them. None: it starts afresh."""


class PoolPromptOptions(PromptOptions, ConversationOption, total=False):
    """A pool's prompt's options: :class:`PromptOptions` and its ``conversation``."""


class RayPromptOptions(RunOptions, ConversationOption, total=False):
    """A Ray pool's prompt's options: :class:`RunOptions` and its ``conversation``."""


def seconds(value: object) -> bool:
    """A positive, finite number of seconds (not a boolean)."""
    return not isinstance(value, bool) and isinstance(value, (int, float)) and value > 0 and value != math.inf


def check_prompt(message: object, options: Mapping[str, object]) -> None:
    """Raise ``TypeError`` / ``ValueError``, naming it, for the first of ``message`` and
    ``options``' values that is wrong (:class:`PoolPromptOptions`' keys; a key it does not know
    is its door's to refuse). Returns None when all are right."""
    if not isinstance(message, str):
        raise TypeError(f"message must be a str, not {type(message).__name__}")
    get = options.get
    for name in ("stream", "events"):
        if not isinstance(get(name, False), bool):
            raise TypeError(f"{name} must be True or False, not {get(name)!r}")
    timeout, stall_timeout = get("timeout"), get("stall_timeout")
    if timeout is not None and not seconds(timeout):
        raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
    if (
        stall_timeout is not None
        and (isinstance(stall_timeout, bool) or stall_timeout != 0)
        and not seconds(stall_timeout)
    ):
        raise ValueError(f"stall_timeout must be 0 (none) or a positive number of seconds, got {stall_timeout!r}")
    images = get("images")
    if images is not None and not isinstance(images, list):
        raise TypeError(f"images must be a list, not {type(images).__name__}")
    problem = image_problem(images) if images else None
    if problem is not None:
        raise ValueError(problem)
    wanted = {name: get(name) for name in ("provider", "model", "thinking")}
    for name, value in wanted.items():
        if value is not None and not isinstance(value, str):
            raise TypeError(f"{name} must be a str or None, not {value!r}")
    named = cast("dict[str, str | None]", wanted)  # (each a str or None, as checked)
    Wanted(named["provider"], named["model"], named["thinking"])  # a lone model, an unknown level: ValueError
    usd, tokens, trace = get("budget_usd"), get("budget_tokens"), get("trace")
    if usd is not None and (isinstance(usd, bool) or not isinstance(usd, (int, float)) or not 0 <= usd < math.inf):
        raise ValueError(f"budget_usd must be a number of dollars, 0 or more, got {usd!r}")
    if tokens is not None and (isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 0):
        raise ValueError(f"budget_tokens must be a whole number of 0 or more, got {tokens!r}")
    if trace is not None and not (
        isinstance(trace, Mapping) and all(isinstance(k, str) and isinstance(v, str) for k, v in trace.items())
    ):
        raise TypeError(f"trace must be a mapping of str to str (W3C trace context: traceparent), not {trace!r}")
    conversation = get("conversation")
    if conversation is not None and (not isinstance(conversation, str) or not conversation):
        raise ValueError(f"conversation must be a non-empty str or None, got {conversation!r}")


# -- what the session knows of a sent prompt ------------------------------------------------

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
