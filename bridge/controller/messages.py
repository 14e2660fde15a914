"""``bridge serve``'s protocol messages (SPEC §7): what a controller line may say, and what the
bridge writes back. Sans-IO: lines in, typed commands out; typed replies in, JSON objects out.

In (one JSON object per line), parsed by :func:`parse_command` into a :data:`Command`::

    {"type":"prompt","id":ID,"message":TEXT, "stream"?:bool, "timeout"?:seconds, "images"?:[...],
     "events"?:bool, "stallTimeout"?:seconds (0: none),
     "provider"?:P, "model"?:ID (together), "thinking"?:LEVEL,
     "budgetUsd"?:number, "budgetTokens"?:int, "trace"?:{"traceparent":…}}
    {"type":"configure", "provider"?:P, "model"?:ID, "thinking"?:LEVEL}  for the prompts that follow
    {"type":"new_conversation"}                     a new conversation before the next prompt
                      (serve --engines: "conversation":KEY ends that key's conversation)
    {"type":"compact", "instructions"?:TEXT}        compact the conversation before the next prompt
    {"type":"models"}                               what the engine offers
    {"type":"answer","dialog":D, "value"?:V | "confirmed"?:bool | "cancelled"?:true}
                                                    the answer to an extension dialog's ask
    {"type":"stop","id":ID}
    {"type":"status"}
    {"type":"shutdown"}

Out (one JSON object per line)::

    {"type":"ready","version":V,"journal":PATH|null}     Ready: the first line
    {"type":"receipt","id":ID,"receipt":{...}}          exactly one per accepted prompt id
    {"type":"signal","signal":...,...}                  overlaps, gaps, seal diagnostics, as they happen
    {"type":"text","id":ID,"text":...}                  streamed reply text ("stream": true)
    {"type":"event","event":KIND,"id":ID,"i":IDX,...}   what the engine does ("events": true;
                                                        bridge.core.progress)
    {"type":"engine","event":"started"|"exited"|"down",...}
    {"type":"compacted","id":ID,"ok":B,...}         how the compaction before prompt ID went
    {"type":"ask","dialog":D,"id":ID|null,"method":M,...,"timeout":S}  an extension dialog
    {"type":"dialog-end","dialog":D,"id":ID|null,"by":WHO,"answer":{...}|null}  its one response
    {"type":"ui","method":M,"id":ID|null,...}       an extension's notification (notify, setStatus, …)
    {"type":"progress","event":"retrying","id":ID,...}  the engine retries the running prompt itself
    {"type":"stopping","id":ID,"stop":STOP_ID|null}     Stopping: answer to a stop
    {"type":"configured","wanted":{...}}                Configured: answer to a configure
    {"type":"models","models":[{...}]}                  Models: answer to a models (an error: LineError)
    {"type":"status",...}                               StatusReport: answer to a status
    {"type":"error","error":WHAT,"line":N,"id"?:ID}     LineError: a bad controller line
    {"type":"bye","receipts":N}                         Bye: last line before exit 0

``receipt``, ``signal``, ``text``, ``event``, ``engine``, ``progress``, ``ask``, ``dialog-end``
and ``ui`` are the live bridge's own
notifications, passed through as they are; the rest are the classes here, written through
:data:`converter` (``"type"`` first, then the fields in the order above).

Rules:

- A line is a command when it is valid UTF-8 JSON, an object, with a known ``"type"``; a
  ``prompt`` or ``stop`` has an ``"id"`` that is a non-empty string; a ``prompt`` has a
  ``"message"`` string, and if given a boolean ``"stream"``, a positive finite ``"timeout"``
  (seconds; not a boolean), a list of ``"images"``, a boolean ``"events"`` and a
  ``"stallTimeout"`` that is 0 or a positive finite number of seconds. Anything else is a
  :class:`ControllerError` whose message names the first problem, in that order; the bridge
  answers it with a :class:`LineError` and keeps running.
- **A key the command does not take is refused, not ignored** (:data:`KEYS`; checked right
  after the type, so ``"mesage"`` is named as the misspelling it is, with the key it is
  closest to: ``unknown key "stallTimout" in prompt: did you mean "stallTimeout"?``). Ignoring
  it would run the prompt without what the controller asked for -- a misspelt ``timeout`` or
  ``stallTimeout`` runs unbounded, a misspelt ``thinking`` or ``model`` on another model --
  and a receipt would not say so. Compatibility goes the same way (seed ``001``: refuse
  politely instead of misreading): a controller written for a later pi-bridge that sends a key
  this one does not know gets the line refused with the key named, never half-obeyed; it can
  read the bridge's version in ``ready`` first. A refused prompt is not accepted (no receipt
  is owed for it). The error names at most :data:`_KEYS_NAMED` keys, each cut at
  :data:`_KEY_CHARS` characters: a controller's line is not echoed back whole.
- Whether an id is new (a prompt) or known (a stop) is the bridge's to say, not the line's:
  :meth:`LineError.duplicate_id` and :meth:`LineError.unknown_id` word those answers.
"""

from __future__ import annotations

import difflib
import json
import math
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, Final, TypeAlias, cast

import attrs
import cattrs
from cattrs.gen import make_dict_unstructure_fn, override

from bridge.core.framing import DEFAULT_MAX_LINE, Oversize, RawLine, parse_line
from bridge.core.images import image_problem
from bridge.core.prompts import PromptOptions
from bridge.core.steering import Wanted
from bridge.core.words import THINKING_LEVELS, RequestId

#: The ``"type"`` values a controller may send, in the order an unknown type's error lists them.
COMMAND_TYPES: Final = (
    "prompt",
    "stop",
    "status",
    "shutdown",
    "configure",
    "new_conversation",
    "models",
    "answer",
    "compact",
)
_WANTED_KEYS: Final = ("provider", "model", "thinking")
#: The keys each command takes besides ``"type"``, in the order an error lists them; any other
#: key refuses the line (module rules).
KEYS: Final[Mapping[str, tuple[str, ...]]] = {
    "prompt": (
        "id",
        "message",
        "stream",
        "timeout",
        "images",
        "events",
        "stallTimeout",
        "conversation",
        *_WANTED_KEYS,
        "budgetUsd",
        "budgetTokens",
        "trace",
    ),
    "stop": ("id",),
    "status": (),
    "shutdown": (),
    "configure": _WANTED_KEYS,
    "new_conversation": ("conversation",),
    "models": (),
    "answer": ("dialog", "value", "confirmed", "cancelled"),
    "compact": ("instructions",),
}
#: Unknown keys an error names (then "and N more"), and the characters kept of each.
_KEYS_NAMED: Final = 5
_KEY_CHARS: Final = 40


class ControllerError(Exception):
    """A controller line the bridge cannot take; the message says why."""


# -- in: commands ----------------------------------------------------------------------------


@attrs.frozen
class Prompt:
    """Submit a prompt under the controller's ``id``."""

    TYPE: ClassVar[str] = "prompt"

    id: RequestId
    message: str
    stream: bool = False
    #: Seconds, as the controller gave them (an int stays an int).
    timeout: float | None = None
    images: list[Any] | None = None
    events: bool = False
    #: Seconds (0: no stall detection; None: the bridge's ``--stall-timeout``).
    stall_timeout: float | None = None
    #: The model and thinking level it asks for (over the bridge's ``configure``).
    wanted: Wanted = attrs.field(factory=Wanted)
    #: The conversation it belongs to (``bridge serve --engines N``: its prompts keep one engine).
    conversation: str | None = None
    #: What it may spend (None: the bridge's ``--budget-usd`` / ``--budget-tokens``).
    budget_usd: float | None = None
    budget_tokens: int | None = None
    #: The W3C trace context its span continues (``traceparent``, ``tracestate``).
    trace: dict[str, str] | None = None

    def options(self) -> PromptOptions:
        """Its options as a bridge's ``submit`` takes them (:class:`~bridge.core.prompts.PromptOptions`,
        whose keys are these fields' names; ``conversation`` is a pool's: a controller passes it
        itself): ``wanted`` as the line gave it (a model named alone as ``provider/id`` stays so:
        a refusal says how it was read)."""
        given = {name: getattr(self, name) for name in _OPTION_FIELDS}
        return cast("PromptOptions", given | self.wanted.asked())


#: The fields of :class:`Prompt` that are options of a bridge's ``submit`` under the same name
#: (tests/test_messages.py checks that the wire and the declaration name the same options).
_OPTION_FIELDS: Final = tuple(f.name for f in attrs.fields(Prompt) if f.name in PromptOptions.__optional_keys__)


@attrs.frozen
class Configure:
    """The model and thinking level for the prompts that follow."""

    TYPE: ClassVar[str] = "configure"

    wanted: Wanted


@attrs.frozen
class NewConversation:
    """Start a new conversation before the next prompt (no answer). With ``conversation``
    (``bridge serve --engines N`` only): that key's conversation is over, and its next prompt
    starts a new one (:meth:`Pool.end_conversation <bridge.live.pool.Pool.end_conversation>`)."""

    TYPE: ClassVar[str] = "new_conversation"

    conversation: str | None = None


@attrs.frozen
class CompactConversation:
    """Compact the conversation before the next prompt (no answer; a ``compacted`` notice)."""

    TYPE: ClassVar[str] = "compact"

    instructions: str | None = None


@attrs.frozen
class ModelsQuery:
    """Ask the engine what models it offers (answered with :class:`Models`)."""

    TYPE: ClassVar[str] = "models"


@attrs.frozen
class AnswerDialog:
    """Answer the extension dialog ``dialog`` (an ``ask``): whether the answer fits the
    dialog is the bridge's to say (:func:`bridge.core.dialogs.check_answer`)."""

    TYPE: ClassVar[str] = "answer"

    dialog: str
    value: Any = None
    confirmed: Any = None
    cancelled: Any = False


@attrs.frozen
class Stop:
    """Stop the prompt ``id`` (queued: cancelled; running: aborted)."""

    TYPE: ClassVar[str] = "stop"

    id: RequestId


@attrs.frozen
class Status:
    """Ask for a :class:`StatusReport`."""

    TYPE: ClassVar[str] = "status"


@attrs.frozen
class Shutdown:
    """No new prompts; drain the outstanding ones, then close."""

    TYPE: ClassVar[str] = "shutdown"


Command: TypeAlias = (
    Prompt | Stop | Status | Shutdown | Configure | NewConversation | ModelsQuery | AnswerDialog | CompactConversation
)


def parse_command(line: bytes | Oversize) -> Command:
    """Validate one controller line into its command. Raises :class:`ControllerError`."""
    value = _json_object(line)
    kind = _kind(value)
    _known_keys(value, kind)
    if kind == "status":
        return Status()
    if kind == "shutdown":
        return Shutdown()
    if kind == "configure":
        return Configure(_wanted(value))
    if kind == "new_conversation":
        return NewConversation(_conversation(value))
    if kind == "models":
        return ModelsQuery()
    if kind == "answer":
        return _answer(value)
    if kind == "compact":
        instructions = value.get("instructions")
        if instructions is not None and not isinstance(instructions, str):
            raise ControllerError('"instructions" must be a string')
        return CompactConversation(instructions)
    rid = _request_id(value, kind)
    if kind == "stop":
        return Stop(rid)
    return _prompt(value, rid)


def _json_object(line: bytes | Oversize) -> dict[str, Any]:
    value = parse_line(line)
    if not isinstance(value, RawLine):
        _no_key_twice(line)  # type: ignore[arg-type]  # (a parsed line is bytes)
        return value
    if value.why == "oversize":
        raise ControllerError(f"line too long ({value.length} bytes; a line may have {DEFAULT_MAX_LINE})")
    if value.why == "invalid-utf8":
        raise ControllerError("line is not valid UTF-8")
    if value.why == "not-object":
        raise ControllerError("line is JSON but not an object")
    raise ControllerError("line is not JSON")


def _no_key_twice(line: bytes) -> None:
    """Refuse an object that gives a key twice (JSON allows it, and keeps the last: a line
    whose ``id`` is given twice would be taken under one of them without a word)."""

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        seen: set[str] = set()
        for key, _ in items:
            if key in seen:
                raise ControllerError(f"the key {key!r} is given twice")
            seen.add(key)
        return dict(items)

    try:
        json.loads(line, object_pairs_hook=pairs)
    except (ValueError, RecursionError):  # (ControllerError is neither) parsed once already
        pass


def _kind(value: dict[str, Any]) -> str:
    kind = value.get("type")
    if kind is None:
        raise ControllerError('missing "type"')
    if kind not in COMMAND_TYPES:
        raise ControllerError(
            f"unknown type {kind!r} (expected {', '.join(COMMAND_TYPES[:-1])} or {COMMAND_TYPES[-1]})"
        )
    return str(kind)


def _known_keys(value: dict[str, Any], kind: str) -> None:
    """Refuse a line holding a key its command does not take (:data:`KEYS`), naming each with
    the known key it is closest to; the known keys are listed when a key has no close one."""
    known = KEYS[kind]
    unknown = [k for k in value if k != "type" and k not in known]
    if not unknown:
        return
    guesses = {k: difflib.get_close_matches(k, known, n=1, cutoff=0.7) for k in unknown[:_KEYS_NAMED]}
    shown = {k: f'"{k}"' if len(k) <= _KEY_CHARS else f'"{k[:_KEY_CHARS]}…"' for k in guesses}
    if len(unknown) == 1 and guesses[unknown[0]]:
        raise ControllerError(f'unknown key {shown[unknown[0]]} in {kind}: did you mean "{guesses[unknown[0]][0]}"?')
    parts = [shown[k] + (f' (did you mean "{g[0]}"?)' if g else "") for k, g in guesses.items()]
    more = len(unknown) - len(guesses)
    why = (
        f"unknown key{'s' if len(unknown) > 1 else ''} {', '.join(parts)}"
        + (f" and {more} more" if more else "")
        + f" in {kind}"
    )
    if all(guesses.values()) and not more:
        raise ControllerError(why)
    raise ControllerError(f"{why} ({kind} takes {', '.join(known) if known else 'no other key'})")


def _request_id(value: dict[str, Any], kind: str) -> RequestId:
    rid = value.get("id")
    if rid is None:
        raise ControllerError(f'{kind} needs an "id"')
    if not isinstance(rid, str) or not rid:
        raise ControllerError('"id" must be a non-empty string')
    return rid


def _prompt(value: dict[str, Any], rid: RequestId) -> Prompt:
    message = value.get("message")
    if not isinstance(message, str):
        raise ControllerError('prompt needs a "message" string')
    stream = value.get("stream", False)
    if not isinstance(stream, bool):
        raise ControllerError('"stream" must be true or false')
    timeout = value.get("timeout")
    if timeout is not None and not _positive_seconds(timeout):
        raise ControllerError('"timeout" must be a positive number of seconds')
    images = value.get("images")
    if images is not None and not isinstance(images, list):
        raise ControllerError('"images" must be a list')
    problem = image_problem(images) if images else None
    if problem is not None:
        raise ControllerError(problem)
    events = value.get("events", False)
    if not isinstance(events, bool):
        raise ControllerError('"events" must be true or false')
    stall = value.get("stallTimeout")
    if isinstance(stall, bool) or (stall is not None and stall != 0 and not _positive_seconds(stall)):
        raise ControllerError('"stallTimeout" must be 0 (none) or a positive number of seconds')
    conversation = _conversation(value)
    usd, tokens, trace = value.get("budgetUsd"), value.get("budgetTokens"), value.get("trace")
    if usd is not None and (isinstance(usd, bool) or not isinstance(usd, (int, float)) or not 0 <= usd < math.inf):
        raise ControllerError('"budgetUsd" must be a number of 0 or more (dollars, Pi\'s cost)')
    if tokens is not None and (isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 0):
        raise ControllerError('"budgetTokens" must be a whole number of 0 or more')
    if trace is not None and not (isinstance(trace, dict) and all(isinstance(v, str) for v in trace.values())):
        raise ControllerError('"trace" must be an object of strings (W3C trace context: "traceparent")')
    return Prompt(
        rid, message, stream, timeout, images, events, stall, _wanted(value), conversation, usd, tokens, trace
    )


def _answer(value: dict[str, Any]) -> AnswerDialog:
    dialog = value.get("dialog")
    if dialog is None:
        raise ControllerError('answer needs a "dialog": the id of the ask it answers')
    if not isinstance(dialog, str) or not dialog:
        raise ControllerError('"dialog" must be a non-empty string: the id of the ask it answers')
    return AnswerDialog(dialog, value.get("value"), value.get("confirmed"), value.get("cancelled", False))


def _wanted(value: dict[str, Any]) -> Wanted:
    """A line's ``provider``, ``model`` and ``thinking``: strings, a model with its provider."""
    fields = {}
    for key in ("provider", "model", "thinking"):
        got = value.get(key)
        if got is not None and (not isinstance(got, str) or not got):
            raise ControllerError(f'"{key}" must be a non-empty string')
        fields[key] = got
    provider, model, thinking = fields["provider"], fields["model"], fields["thinking"]
    model_alone = provider is None and model is not None and "/" in model
    if (provider is None) != (model is None) and not model_alone:
        raise ControllerError(
            '"provider" and "model" go together: a model is named by both (or "model": "provider/id")'
        )
    if provider is None and model is not None and not all(model.partition("/")[::2]):  # (model alone)
        raise ControllerError(f'"model": {model!r} alone must be "provider/id", both named (or give "provider" too)')
    if thinking is not None and thinking not in THINKING_LEVELS:
        raise ControllerError(f'"thinking": {thinking!r} is not one of {", ".join(THINKING_LEVELS)}')
    return Wanted(provider, model, thinking)


def _positive_seconds(value: object) -> bool:
    """A JSON number (not a boolean) above 0 and finite."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return value > 0 and value != math.inf


# -- out: what serve itself writes -----------------------------------------------------------


@attrs.frozen
class Ready:
    """The first line: the bridge is open and reads commands."""

    TYPE: ClassVar[str] = "ready"

    version: str
    #: The journal's path, or None with ``--no-journal``.
    journal: str | None


@attrs.frozen
class LineError:
    """A controller line the bridge did not take (it keeps running)."""

    TYPE: ClassVar[str] = "error"

    error: str
    #: The line's number on stdin, from 1 (blank lines count).
    line: int
    #: The prompt or stop's id, when the problem is the id's (left out otherwise).
    id: RequestId | None = None

    @classmethod
    def duplicate_id(cls, rid: RequestId, line: int) -> LineError:
        return cls(f"duplicate id {rid!r}: already used in this session", line, rid)

    @classmethod
    def unknown_id(cls, rid: RequestId, line: int) -> LineError:
        return cls(f"unknown id {rid!r}: no such prompt", line, rid)


@attrs.frozen
class Stopping:
    """The answer to a stop: the id of the abort sent for it, or None (nothing to abort)."""

    TYPE: ClassVar[str] = "stopping"

    id: RequestId
    stop: str | None


@attrs.frozen
class StatusReport:
    """The answer to a status: the live bridge's status fields, written after ``"type"``."""

    TYPE: ClassVar[str] = "status"

    fields: dict[str, Any]


@attrs.frozen
class Configured:
    """The answer to a configure: what the prompts that follow will ask for."""

    TYPE: ClassVar[str] = "configured"

    wanted: dict[str, Any]


@attrs.frozen
class Models:
    """The answer to a models: the engine's models (``provider``, ``id``, ``name``,
    ``reasoning``, ``contextWindow``, ``maxTokens``, ``input``)."""

    TYPE: ClassVar[str] = "models"

    models: list[dict[str, Any]]


@attrs.frozen
class Bye:
    """The last line before the bridge exits: how many receipts it gave."""

    TYPE: ClassVar[str] = "bye"

    receipts: int


Reply: TypeAlias = Ready | LineError | Stopping | StatusReport | Configured | Models | Bye


def _make_converter() -> cattrs.Converter:
    """Each reply as ``{"type": TYPE, **fields}``; a LineError leaves out an id it lacks."""
    c = cattrs.Converter()
    for cls in (Ready, Stopping, Configured, Models, Bye):
        c.register_unstructure_hook(cls, _typed(cls.TYPE, make_dict_unstructure_fn(cls, c)))
    error_fields = make_dict_unstructure_fn(LineError, c, id=override(omit_if_default=True))
    c.register_unstructure_hook(LineError, _typed(LineError.TYPE, error_fields))
    c.register_unstructure_hook(StatusReport, lambda report: {"type": StatusReport.TYPE, **report.fields})
    return c


def _typed(kind: str, fields: Callable[[Any], dict[str, Any]]) -> Callable[[Any], dict[str, Any]]:
    return lambda reply: {"type": kind, **fields(reply)}


converter: Final = _make_converter()


def to_wire(reply: Reply) -> dict[str, Any]:
    """The JSON object a reply is written as."""
    wire: dict[str, Any] = converter.unstructure(reply)
    return wire


def _conversation(value: dict[str, Any]) -> str | None:
    conversation = value.get("conversation")
    if conversation is not None and (not isinstance(conversation, str) or not conversation):
        raise ControllerError('"conversation" must be a non-empty string')
    return conversation
