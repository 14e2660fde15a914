"""``bridge acp``'s protocol: the Agent Client Protocol (ACP v1, JSON-RPC 2.0 over stdio) as
pi-bridge speaks it. Sans-IO, like :mod:`bridge.controller.messages`: a line in, a typed
message out; a receipt or an event in, an ACP object out. No trio, no clock, no I/O: the loop
that carries these is :mod:`bridge.controller.acp.agent`.

Sources: the ACP schema v1 (``schema/v1/schema.json`` of ``@agentclientprotocol/sdk`` 2.4.0,
the same as the ``agent-client-protocol`` PyPI package's ``schema.py``, schema tag 1.19.0) and
the protocol pages it links (initialization, session setup, prompt turn, tool calls,
session config options). Every message written here is validated against that schema by
``tests/test_acp.py``.

Rules:

1. **Framing.** One JSON-RPC 2.0 message per line (``\\n``), UTF-8, no batches. A line that is
   not JSON is answered ``-32700`` with ``id: null``; a JSON value that is not a request, a
   notification or a response is ``-32600`` (JSON-RPC 2.0 §5.1). A response (``result`` or
   ``error``, no ``method``) is never answered, also one with ``id: null``.
2. **Methods** (the agent side): ``initialize``, ``session/new``, ``session/load``,
   ``session/list`` (:mod:`bridge.controller.acp.sessions`), ``session/prompt``,
   ``session/cancel`` (a notification), ``session/set_config_option``, ``session/close``
   (what ACP asks of it: the session's work cancelled, its engine stopped; answered once done). Any other request is
   ``-32601``; any other notification is ignored (JSON-RPC: a notification is never answered).
3. **initialize**: the agent answers protocol version 1 whatever the client asks (the only
   version it speaks; the client disconnects if it cannot), and only capabilities that are
   true: image and embedded text context in prompts, no audio, ``session/load`` and
   ``session/list`` (named conversations: the bridge keeps their Pi session files), no MCP transports (the seal turns MCP off), no auth methods.
4. **session/new**: ``cwd`` must be an absolute path to a folder; it becomes the engine's
   working folder. A non-empty ``mcpServers`` is refused (``-32602``): the sealed Pi runs no MCP
   server (SPEC §2, the seal), and silently dropping them would tell the editor its tools are
   there when they are not.
5. **session/prompt**: ``text`` and ``resource_link`` blocks (the baseline) become the
   message text, in order, a link as ``[name](uri)`` on a line of its own (a newline between
   it and the text before or after it, as around an embedded resource: ``Look at`` and a link
   are never ``Look at[a.py](…)``); an embedded text ``resource`` is added as text with its
   URI, on lines of its own; an
   ``image`` becomes one of Pi's images (``data`` + ``mimeType``). An audio block, a binary
   resource or an image without data is refused (``-32602``).
6. **Receipts** (:func:`prompt_outcome`), one answer per prompt, never ``end_turn`` for
   anything but a finished prompt:

   ===================================================  ==========================================
   receipt                                              answer
   ===================================================  ==========================================
   ``finished``, the last turn stopped on ``length``    ``stopReason: "max_tokens"``
   ``finished``                                         ``stopReason: "end_turn"``
   ``failed``/``interrupted`` (the session's cancel)    ``stopReason: "cancelled"``
   ``rejected``/``cancelled`` (cancelled before sent)   ``stopReason: "cancelled"``
   ``failed`` (any other reason, or none)               error :data:`PROMPT_FAILED`
   ``rejected``                                         error :data:`PROMPT_REJECTED`
   ``delivery-unknown``                                 error :data:`PROMPT_DELIVERY_UNKNOWN`
   ``outcome-unknown``                                  error :data:`PROMPT_OUTCOME_UNKNOWN`
   ===================================================  ==========================================

   A result carries the whole receipt in ``_meta["pi-bridge"]["receipt"]``; an error carries
   it in ``data["receipt"]``. The error codes are application-defined (JSON-RPC 2.0 §5.1:
   outside -32768..-32000, which JSON-RPC and ACP reserve), one per receipt state, so a client
   can tell "failed" from "nobody knows" without parsing words.
7. **Events → ``session/update``** (:class:`ToolCalls`, :func:`update_for`): ``text`` →
   ``agent_message_chunk``; ``thinking`` → ``agent_thought_chunk``; ``tool-start`` →
   ``tool_call`` (``in_progress``: Pi is running it), ``tool-update`` → ``tool_call_update``
   with the output so far as text content, ``tool-end`` → ``tool_call_update``
   ``completed``/``failed`` with the result as text content. Tool output is standard
   ``content`` (never only a ``_meta`` field) and never a ``terminal`` block (the client's
   terminal is not used: Pi runs its own tools, confined). Retries, compaction and turns have
   no ACP update and are not sent (the receipt tells them).
8. **Permission requests** (:func:`permission_request`, :func:`permission_answer`): an
   allowlisted extension's ``confirm`` or ``select`` dialog is asked as
   ``session/request_permission`` (a ``confirm``: "Yes" ``allow_once`` / "No" ``reject_once``;
   a ``select``: one option per choice), on a pending tool call of its own
   (``pi-dialog-ID``) whose title is the dialog's and whose content is its message. The
   client's ``selected`` option is the answer; its ``cancelled`` outcome, an error, or anything
   that is not one of the options offered is ``cancelled=True`` -- never a yes nobody gave. An
   ``input`` or ``editor`` dialog has no ACP form: it is answered ``cancelled``. A dialog that
   ends before the client answers (its timeout, its prompt's stop) gets ``$/cancel_request``.
   Once the dialog has ended, its tool call does too (:func:`permission_closed`): a
   ``tool_call_update`` ``completed`` after a yes or a choice, ``failed`` otherwise.
9. **Configuration** (:func:`config_options`): a ``model`` selector (what the engine offers)
   and a ``thought_level`` selector (Pi's levels), as ACP session config options; choosing one
   is the bridge's ``configure`` — applied and verified before the next prompt is written, and
   a refusal is that prompt's ``rejected``/``config`` error. Each option's ``currentValue`` is
   what the session's prompts run with, not what was asked: a level the model does not offer
   runs as the level Pi clamps it to, and the option says that level, with the one asked in
   its ``_meta["pi-bridge"]["thinkingAsked"]`` (as the receipt's ``config`` does). Until a
   prompt has run, that is what Pi's model list tells (:func:`thinking_for`: a model listed
   without ``reasoning`` runs ``off``); once one has, what its receipt's ``config`` says the
   engine was verified to run -- when that differs from what was said, a ``session/update``
   ``config_option_update`` says it before the prompt's answer.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping, Sequence
from typing import Any, Final, TypeAlias

import attrs

from bridge.core.framing import DEFAULT_MAX_LINE, Oversize, RawLine, parse_line
from bridge.core.images import problem_of as image_problem_of
from bridge.core.progress import ProgressEvent, TextEvent, ThinkingEvent, ToolEnd, ToolStart, ToolUpdate
from bridge.core.receipts import Receipt
from bridge.core.words import THINKING_LEVELS, Reason, State

#: The ACP version this agent speaks (schema v1).
PROTOCOL_VERSION: Final = 1
#: Where a response's ``_meta`` keeps what pi-bridge adds (ACP "Extensibility": ``_meta`` is
#: free for implementations; a name of our own so it never collides with another's).
META_KEY: Final = "pi-bridge"

# JSON-RPC 2.0 §5.1 and ACP's ErrorCode.
PARSE_ERROR: Final = -32700
INVALID_REQUEST: Final = -32600
METHOD_NOT_FOUND: Final = -32601
INVALID_PARAMS: Final = -32602
INTERNAL_ERROR: Final = -32603
RESOURCE_NOT_FOUND: Final = -32002
# pi-bridge's own: a prompt that did not finish, by its receipt's state (rule 6).
PROMPT_FAILED: Final = -31001
PROMPT_REJECTED: Final = -31002
PROMPT_DELIVERY_UNKNOWN: Final = -31003
PROMPT_OUTCOME_UNKNOWN: Final = -31004

_STATE_CODES: Final[Mapping[State, int]] = {
    State.FAILED: PROMPT_FAILED,
    State.REJECTED: PROMPT_REJECTED,
    State.DELIVERY_UNKNOWN: PROMPT_DELIVERY_UNKNOWN,
    State.OUTCOME_UNKNOWN: PROMPT_OUTCOME_UNKNOWN,
    State.PENDING: PROMPT_OUTCOME_UNKNOWN,  # never live; replay's word
}

#: Pi's built-in tools and the ACP ``ToolKind`` each is (Pi's docs: read, bash, edit, write,
#: grep, find, ls). Any other tool is ``other``.
TOOL_KINDS: Final[Mapping[str, str]] = {
    "read": "read",
    "bash": "execute",
    "edit": "edit",
    "write": "edit",
    "grep": "search",
    "find": "search",
    "ls": "search",
}
#: A tool call's title: at most this many characters (a long command is cut with ``…``).
TITLE_CHARS: Final = 200

JsonId: TypeAlias = "int | str | None"


class AcpError(Exception):
    """A request that cannot be carried out: answered with ``code`` and this message."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.code = code
        self.data = data


# -- what comes in ------------------------------------------------------------------------------


@attrs.frozen
class Request:
    id: int | str
    method: str
    params: dict[str, Any]


@attrs.frozen
class Notification:
    method: str
    params: dict[str, Any]


@attrs.frozen
class Response:
    """The client's answer to a request of ours (``result`` or ``error``); ``id`` None when it
    had none a request of ours could have (``null``, a float)."""

    id: JsonId
    result: Any = None
    error: dict[str, Any] | None = None


@attrs.frozen
class Invalid:
    """A line that is no message: answered with ``error`` (``id`` null unless it had one)."""

    id: JsonId
    code: int
    message: str


Incoming: TypeAlias = Request | Notification | Response | Invalid


def parse_message(line: bytes | Oversize) -> Incoming:
    """One line from the client as a message (rule 1)."""
    if isinstance(line, Oversize):
        return Invalid(
            None,
            INVALID_REQUEST,
            f"a message of {line.length} bytes is over the limit ({DEFAULT_MAX_LINE} bytes a line)",
        )
    # The core's reader (orjson, then the standard library's decoder for what orjson refuses):
    # a lone surrogate (``"\ud83d"``, what JavaScript writes for half an emoji) is valid JSON
    # text, read as `serve` reads it, not a parse error that leaves the request unanswered.
    value = parse_line(line)
    if isinstance(value, RawLine):
        if value.why == "not-object":
            return Invalid(None, INVALID_REQUEST, "a message is a JSON object (no batches)")
        return Invalid(None, PARSE_ERROR, "not JSON")
    rid = value.get("id")
    has_id = "id" in value
    good_id = not isinstance(rid, bool) and isinstance(rid, (int, str))
    method = value.get("method")
    if method is None and ("result" in value or "error" in value):
        # A response is never answered (JSON-RPC 2.0 §5), whatever its shape: an error with
        # ``id: null`` is the client saying it could not read a line of ours, and answering it
        # with an error of our own could go back and forth for good. One that is not an answer
        # to a request of ours (no such id) is dropped by the loop.
        error = value.get("error")
        return Response(rid if good_id else None, value.get("result"), error if isinstance(error, dict) else None)
    if has_id and not good_id:
        return Invalid(None, INVALID_REQUEST, "id must be a string or an integer")
    if value.get("jsonrpc") != "2.0":
        return Invalid(rid, INVALID_REQUEST, 'jsonrpc must be "2.0"')
    if not isinstance(method, str):
        return Invalid(rid, INVALID_REQUEST, "method must be a string")
    params = value.get("params", {})
    if params is None:
        params = {}
    if not isinstance(params, dict):
        return Invalid(rid, INVALID_PARAMS, "params must be an object")
    if rid is not None:
        return Request(rid, method, params)
    return Notification(method, params)


def _session_id(params: Mapping[str, Any]) -> str:
    sid = params.get("sessionId")
    if not isinstance(sid, str) or not sid:
        raise AcpError(INVALID_PARAMS, "sessionId must be a non-empty string")
    return sid


@attrs.frozen
class NewSession:
    cwd: str


def parse_new_session(params: Mapping[str, Any]) -> NewSession:
    """``session/new``'s params (rule 4); the folder's existence is the loop's to check."""
    cwd = params.get("cwd")
    if not isinstance(cwd, str) or not posixpath.isabs(cwd):
        raise AcpError(INVALID_PARAMS, "cwd must be an absolute path")
    servers = params.get("mcpServers", [])
    if not isinstance(servers, list):
        raise AcpError(INVALID_PARAMS, "mcpServers must be a list")
    if servers:
        names = ", ".join(str(s.get("name")) if isinstance(s, dict) else "?" for s in servers)
        raise AcpError(
            INVALID_PARAMS,
            f"MCP servers are refused: the sealed Pi runs without MCP (asked for: {names}); "
            "start the session with an empty mcpServers",
        )
    return NewSession(posixpath.normpath(cwd))


@attrs.frozen
class PromptParams:
    session_id: str
    message: str
    images: list[dict[str, Any]]


def parse_prompt(params: Mapping[str, Any]) -> PromptParams:
    """``session/prompt``'s params (rule 5)."""
    sid = _session_id(params)
    blocks = params.get("prompt")
    if not isinstance(blocks, list) or not blocks:
        raise AcpError(INVALID_PARAMS, "prompt must be a non-empty list of content blocks")
    text = _Lines()
    images: list[dict[str, Any]] = []
    for n, block in enumerate(blocks):
        if not isinstance(block, dict):
            raise AcpError(INVALID_PARAMS, f"prompt[{n}] is not a content block")
        kind = block.get("type")
        if kind == "text" and isinstance(block.get("text"), str):
            text.add(block["text"])
        elif kind == "resource_link" and isinstance(block.get("uri"), str):
            name = block.get("name") if isinstance(block.get("name"), str) else block["uri"]
            text.add_line(f"[{name}]({block['uri']})")
        elif kind == "resource":
            text.add(_embedded(block.get("resource"), n))
        elif kind == "image":
            images.append(_image(block, n))
        elif kind in ("text", "resource_link"):
            field = "text" if kind == "text" else "uri"
            raise AcpError(INVALID_PARAMS, f"prompt[{n}]: a {kind!r} block needs its {field} as a string")
        else:
            raise AcpError(
                INVALID_PARAMS, f"prompt[{n}]: a {kind!r} block is not taken (text, images and resources are)"
            )
    message = text.joined()
    if not message and not images:
        raise AcpError(INVALID_PARAMS, "the prompt has no text and no image")
    return PromptParams(sid, message, images)


class _Lines:
    """A prompt's text, joined from its blocks in order: text as it is, and a line of its own
    (a link) with a newline before it unless the text so far ends one, and after it unless
    what follows starts one."""

    def __init__(self) -> None:
        self.parts: list[str] = []
        #: The last part is a line of its own, not yet ended.
        self.line_open = False

    def add(self, piece: str) -> None:
        if not piece:
            return
        if self.line_open and not piece.startswith("\n"):
            self.parts.append("\n")
        self.parts.append(piece)
        self.line_open = False

    def add_line(self, line: str) -> None:
        if self.parts and not self.parts[-1].endswith("\n"):
            self.parts.append("\n")
        self.parts.append(line)
        self.line_open = True

    def joined(self) -> str:
        return "".join(self.parts)


def _embedded(resource: Any, n: int) -> str:
    if not isinstance(resource, dict) or not isinstance(resource.get("uri"), str):
        raise AcpError(INVALID_PARAMS, f"prompt[{n}]: a resource needs its uri")
    if not isinstance(resource.get("text"), str):
        raise AcpError(INVALID_PARAMS, f"prompt[{n}]: a binary resource cannot be given to Pi (text resources can)")
    return f'\n<context uri="{resource["uri"]}">\n{resource["text"]}\n</context>\n'


def _image(block: Mapping[str, Any], n: int) -> dict[str, Any]:
    data, mime = block.get("data"), block.get("mimeType")
    if not isinstance(data, str) or not data or not isinstance(mime, str):
        raise AcpError(INVALID_PARAMS, f"prompt[{n}]: an image needs its base64 data and mimeType")
    image = {"type": "image", "data": data, "mimeType": mime}
    problem = image_problem_of(image, f"prompt[{n}]")
    if problem is not None:
        raise AcpError(INVALID_PARAMS, problem)
    return image


def parse_cancel(params: Mapping[str, Any]) -> str:
    """``session/cancel``'s (and ``session/close``'s) session id."""
    return _session_id(params)


@attrs.frozen
class SetOption:
    session_id: str
    config_id: str
    value: str


def parse_set_option(params: Mapping[str, Any]) -> SetOption:
    sid = _session_id(params)
    config_id, value = params.get("configId"), params.get("value")
    if not isinstance(config_id, str) or not isinstance(value, str):
        raise AcpError(INVALID_PARAMS, "configId and value must be strings")
    return SetOption(sid, config_id, value)


# -- what goes out ------------------------------------------------------------------------------


def result(rid: JsonId, value: Mapping[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rid, "result": value}


def error(rid: JsonId, code: int, message: str, data: Any = None) -> dict[str, Any]:
    err: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        err["data"] = data
    return {"jsonrpc": "2.0", "id": rid, "error": err}


def notification(method: str, params: Mapping[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "method": method, "params": params}


def request(rid: int | str, method: str, params: Mapping[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rid, "method": method, "params": params}


def initialize_result(version: str) -> dict[str, Any]:
    """The answer to ``initialize`` (rule 3)."""
    return {
        "protocolVersion": PROTOCOL_VERSION,
        "agentCapabilities": {
            "loadSession": True,
            "promptCapabilities": {"image": True, "audio": False, "embeddedContext": True},
            "mcpCapabilities": {"http": False, "sse": False},
            "sessionCapabilities": {"close": {}, "list": {}},
        },
        "authMethods": [],
        "agentInfo": {"name": "pi-bridge", "title": "Pi (sealed, with receipts)", "version": version},
    }


@attrs.frozen
class PromptOutcome:
    """What a prompt's answer is: a result (``stop_reason``) or an error (``code``)."""

    stop_reason: str | None
    code: int | None
    message: str


def prompt_outcome(receipt: Receipt, last_stop: str | None) -> PromptOutcome:
    """The answer a receipt gets (rule 6). ``last_stop``: Pi's ``stopReason`` of the prompt's
    last turn (its ``turn-end`` event), for ``max_tokens``."""
    state, reason = receipt.state, receipt.reason
    if state == State.FINISHED:
        return PromptOutcome("max_tokens" if last_stop == "length" else "end_turn", None, "finished")
    if (state, reason) in ((State.FAILED, Reason.INTERRUPTED), (State.REJECTED, Reason.CANCELLED)):
        return PromptOutcome("cancelled", None, "cancelled")
    return PromptOutcome(None, _STATE_CODES[state], _words(receipt))


def _words(r: Receipt) -> str:
    """One sentence for an error's ``message``: the state, the reason, the engine's first line."""
    head = _STATE_WORDS.get(r.state, f"the prompt is {r.state}")
    if r.reason is not None:
        head += f" ({r.reason})"
    first = r.native_error.strip().splitlines()[0][:300] if r.native_error and r.native_error.strip() else ""
    return f"{head}: {first}" if first else head


_STATE_WORDS: Final[Mapping[State, str]] = {
    State.FAILED: "the prompt failed",
    State.REJECTED: "the prompt was rejected",
    State.DELIVERY_UNKNOWN: "whether the model got the prompt is unknown",
    State.OUTCOME_UNKNOWN: "the prompt's outcome is unknown",
}


def prompt_result(receipt: Receipt, outcome: PromptOutcome, rid: JsonId) -> dict[str, Any]:
    """The whole answer to a ``session/prompt``, its receipt inside (rule 6)."""
    wire = receipt.to_json()
    if outcome.stop_reason is not None:
        return result(rid, {"stopReason": outcome.stop_reason, "_meta": {META_KEY: {"receipt": wire}}})
    assert outcome.code is not None
    return error(rid, outcome.code, outcome.message, {"receipt": wire})


def session_update(session_id: str, update: Mapping[str, Any]) -> dict[str, Any]:
    return notification("session/update", {"sessionId": session_id, "update": update})


def _text(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


@attrs.define
class ToolCalls:
    """The tool calls of one session, by id: what was said of each (its title and kind are
    given once, at ``tool_call``; updates carry only what changed). ``cwd``: where relative
    paths in a tool's arguments point."""

    cwd: str
    seen: set[str] = attrs.field(factory=set)
    #: Calls started and not ended yet, in order, each with the prompt whose run started it.
    running: dict[str, Any] = attrs.field(factory=dict)

    def update_for(self, event: ProgressEvent) -> dict[str, Any] | None:
        """The ``session/update`` ``update`` for one of the prompt's events, or None (rule 7)."""
        kind = type(event)
        if kind is TextEvent:
            assert isinstance(event, TextEvent)
            return {"sessionUpdate": "agent_message_chunk", "content": _text(event.delta)}
        if kind is ThinkingEvent:
            assert isinstance(event, ThinkingEvent)
            return {"sessionUpdate": "agent_thought_chunk", "content": _text(event.delta)}
        if kind is ToolStart:
            assert isinstance(event, ToolStart)
            return self._start(event)
        if kind is ToolUpdate:
            assert isinstance(event, ToolUpdate)
            return self._progress(event.call_id, event.tool, "in_progress", event.output)
        if kind is ToolEnd:
            assert isinstance(event, ToolEnd)
            self.running.pop(event.call_id or "", None)
            return self._progress(event.call_id, event.tool, "failed" if event.is_error else "completed", event.result)
        return None

    def unfinished(self, request: Any, why: str) -> list[dict[str, Any]]:
        """Prompt ``request`` has its receipt: a ``failed`` update for each of its tool calls
        that never ended (Pi died or was stopped mid-tool), so no editor shows one running
        forever. Another prompt's calls are not touched: a queued prompt rejected while the
        running one's tool runs says nothing of that tool."""
        mine = [call_id for call_id, of in self.running.items() if of == request]
        updates = [
            {
                "sessionUpdate": "tool_call_update",
                "toolCallId": call_id,
                "status": "failed",
                "content": [{"type": "content", "content": _text(why)}],
            }
            for call_id in mine
        ]
        for call_id in mine:
            del self.running[call_id]
        return updates

    def _start(self, event: ToolStart) -> dict[str, Any] | None:
        if event.call_id is None:
            return None
        self.seen.add(event.call_id)
        self.running.setdefault(event.call_id, event.request)
        update: dict[str, Any] = {
            "sessionUpdate": "tool_call",
            "toolCallId": event.call_id,
            "title": tool_title(event.tool, event.args),
            "kind": TOOL_KINDS.get(event.tool or "", "other"),
            "status": "in_progress",
            "rawInput": event.args,
        }
        path = event.args.get("path") if isinstance(event.args, dict) else None
        if isinstance(path, str) and path:
            update["locations"] = [{"path": posixpath.normpath(posixpath.join(self.cwd, path))}]
        return update

    def _progress(self, call_id: str | None, tool: str | None, status: str, text: str) -> dict[str, Any] | None:
        if call_id is None or (status == "in_progress" and not text):
            return None  # an update with no output yet says nothing new
        update: dict[str, Any] = {"sessionUpdate": "tool_call_update", "toolCallId": call_id, "status": status}
        if call_id not in self.seen:  # its start was not seen (it cannot be, but say what it is)
            self.seen.add(call_id)
            update["title"] = tool_title(tool, None)
            update["kind"] = TOOL_KINDS.get(tool or "", "other")
        if text:
            update["content"] = [{"type": "content", "content": _text(text)}]
        return update


def tool_title(tool: str | None, args: Any) -> str:
    """A tool call's title: a ``bash`` call's command, a file tool's verb and path, else the tool's name."""
    name = tool or "tool"
    title = name
    if isinstance(args, dict):
        if name == "bash" and isinstance(args.get("command"), str):
            title = args["command"].strip()
        elif isinstance(args.get("path"), str):
            title = f"{name} {args['path']}"
        elif isinstance(args.get("pattern"), str):
            title = f"{name} {args['pattern']}"
    return title if len(title) <= TITLE_CHARS else title[: TITLE_CHARS - 1] + "…"


# -- permission requests (rule 8) -------------------------------------------------------------------

#: The dialog methods ACP can ask (``session/request_permission``); the others are cancelled.
PERMISSION_METHODS: Final = frozenset({"confirm", "select"})
_CONFIRM_OPTIONS: Final = (
    {"optionId": "allow", "name": "Yes", "kind": "allow_once"},
    {"optionId": "reject", "name": "No", "kind": "reject_once"},
)


def permission_request(session_id: str, dialog: str, method: str, fields: Mapping[str, Any]) -> dict[str, Any] | None:
    """``session/request_permission``'s params for an extension dialog, or None when ACP has no
    form for it (``input``, ``editor``, a ``select`` without options)."""
    if method not in PERMISSION_METHODS:
        return None
    title = fields.get("title") if isinstance(fields.get("title"), str) and fields.get("title") else "An extension asks"
    call: dict[str, Any] = {"toolCallId": f"pi-dialog-{dialog}", "title": title, "kind": "other", "status": "pending"}
    if isinstance(fields.get("message"), str) and fields["message"]:
        call["content"] = [{"type": "content", "content": _text(fields["message"])}]
    if method == "confirm":
        options = [dict(o) for o in _CONFIRM_OPTIONS]
    else:
        choices = fields.get("options")
        if not isinstance(choices, list) or not choices:
            return None
        options = [{"optionId": str(n), "name": str(c), "kind": "allow_once"} for n, c in enumerate(choices)]
    return {"sessionId": session_id, "toolCall": call, "options": options}


def permission_answer(method: str, fields: Mapping[str, Any], answer: Response) -> dict[str, Any]:
    """The dialog's answer (``Dialog.answer``'s keywords) from the client's response (rule 8)."""
    outcome = answer.result.get("outcome") if isinstance(answer.result, dict) else None
    chosen = outcome.get("optionId") if isinstance(outcome, dict) and outcome.get("outcome") == "selected" else None
    if answer.error is not None or not isinstance(chosen, str):
        return {"cancelled": True}
    if method == "confirm" and chosen in ("allow", "reject"):
        return {"confirmed": chosen == "allow"}
    choices = fields.get("options")
    if method == "select" and isinstance(choices, list) and chosen.isdigit() and int(chosen) < len(choices):
        return {"value": choices[int(chosen)]}
    return {"cancelled": True}


def permission_closed(dialog: str, answer: Mapping[str, Any] | None) -> dict[str, Any]:
    """The ``tool_call_update`` that ends a dialog's tool call (rule 8) once the dialog has
    ended: ``completed`` when the client said yes or chose an option, ``failed`` when it said
    no, cancelled, or did not answer before the dialog ended."""
    yes = answer is not None and (answer.get("confirmed") is True or "value" in answer)
    return {
        "sessionUpdate": "tool_call_update",
        "toolCallId": f"pi-dialog-{dialog}",
        "status": "completed" if yes else "failed",
    }


def cancel_request(rid: int | str) -> dict[str, Any]:
    """ACP's ``$/cancel_request``: a request of ours nobody needs answered any more."""
    return notification("$/cancel_request", {"requestId": rid})


# -- configuration (rule 9) -------------------------------------------------------------------------


def model_value(provider: str, model: str) -> str:
    return f"{provider}/{model}"


def config_options(
    models: Sequence[Mapping[str, Any]],
    current_model: str | None,
    thinking: str | None,
    thinking_asked: str | None = None,
) -> list[dict[str, Any]]:
    """The session's config options: a model selector (when the engine listed models) and the
    thinking level; ``thinking`` is the level that runs, ``thinking_asked`` the one asked for
    when it is another (Pi clamped it), said in the option's ``_meta``."""
    options: list[dict[str, Any]] = []
    choices = [
        {"value": model_value(str(m["provider"]), str(m["id"])), "name": str(m.get("name") or m["id"])}
        for m in models
        if m.get("provider") and m.get("id")
    ]
    if choices:
        values = [c["value"] for c in choices]
        options.append(
            {
                "id": "model",
                "name": "Model",
                "category": "model",
                "type": "select",
                "currentValue": current_model if current_model in values else values[0],
                "options": choices,
            }
        )
    level = thinking if thinking in THINKING_LEVELS else "off"
    thought: dict[str, Any] = {
        "id": "thought_level",
        "name": "Thinking",
        "description": "Pi's thinking level, as the model runs it (a model without reasoning runs at off; "
        "the level asked for is then in _meta, and in the receipt)",
        "category": "thought_level",
        "type": "select",
        "currentValue": level,
        "options": [{"value": v, "name": v} for v in THINKING_LEVELS],
    }
    if thinking_asked is not None and thinking_asked != level:
        thought["_meta"] = {META_KEY: {"thinkingAsked": thinking_asked}}
    options.append(thought)
    return options


def thinking_for(models: Sequence[Mapping[str, Any]], model: str | None, asked: str) -> str:
    """The thinking level ``model`` (a :func:`model_value`) runs when ``asked`` is asked of it,
    as far as the engine's model list tells: ``off`` for a model listed with ``reasoning``
    false (Pi offers it no other level: ``getSupportedThinkingLevels``), else ``asked``. What
    else Pi clamps (a level a reasoning model does not map, such as ``max``) is known once a
    prompt has run with it: its receipt's ``config``."""
    for m in models:
        if m.get("provider") and m.get("id") and model_value(str(m["provider"]), str(m["id"])) == model:
            return "off" if m.get("reasoning") is False else asked
    return asked


def current_value(options: Sequence[Mapping[str, Any]], config_id: str) -> str | None:
    """An option's ``currentValue`` (None when the session has no such option)."""
    return next((str(o["currentValue"]) for o in options if o["id"] == config_id), None)


def config_option_update(options: list[dict[str, Any]]) -> dict[str, Any]:
    """The ``session/update`` saying the options' current values changed."""
    return {"sessionUpdate": "config_option_update", "configOptions": options}


def chosen(option: SetOption, options: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """What a ``session/set_config_option`` asks of the bridge's ``configure``: ``provider``
    and ``model``, or ``thinking``. Raises :class:`AcpError` for an unknown option or value."""
    for o in options:
        if o["id"] != option.config_id:
            continue
        if option.value not in {c["value"] for c in o["options"]}:
            raise AcpError(INVALID_PARAMS, f"{option.value!r} is not a value of {option.config_id}")
        if option.config_id == "model":
            provider, _, model = option.value.partition("/")
            return {"provider": provider, "model": model}
        return {"thinking": option.value}
    raise AcpError(INVALID_PARAMS, f"no config option {option.config_id!r}")
