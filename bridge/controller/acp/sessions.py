"""ACP's ``session/load`` and ``session/list`` over named conversations (issue 31;
docs: guide/conversations.md). Sans-IO: what is parsed and what is said; the loop is
:mod:`bridge.controller.acp.agent`.

Rules:

1. An ACP session that can be loaded is a named conversation
   (:mod:`bridge.core.conversation`): its ``sessionId`` is the conversation's name. With
   ``bridge acp --keep-sessions`` every ``session/new`` begins one (named ``acp-`` and 12 hex
   digits); without it sessions are the engine's alone, as before. ``session/load`` loads any
   named conversation (one ``bridge run --conversation`` made too).
2. ``session/list`` lists the conversations that recorded a working folder (an ACP session's
   ``cwd``), filtered by the request's ``cwd``; each with its first prompt as ``title`` and its
   last save as ``updatedAt``. One page: no ``nextCursor``.
3. ``session/load`` replays the conversation to the client before it answers, as the ACP spec
   asks ("the Agent MUST replay the entire conversation to the Client in the form of
   ``session/update`` notifications"): each user message as a ``user_message_chunk``, each
   assistant text as an ``agent_message_chunk``, in order -- what the bridge recorded
   (:func:`~bridge.core.conversation.history`), which is what the next prompt's engine resumes.
"""

from __future__ import annotations

import posixpath
import secrets
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from bridge.controller.acp.protocol import INVALID_PARAMS, AcpError, parse_new_session
from bridge.core.conversation import Record, name_problem


@attrs.frozen
class LoadSession:
    session_id: str
    cwd: str


def new_name() -> str:
    """Rule 1: a kept session's conversation name."""
    return "acp-" + secrets.token_hex(6)


def parse_load(params: Mapping[str, Any]) -> LoadSession:
    """``session/load``'s params: a conversation's name, and ``session/new``'s ``cwd`` and
    ``mcpServers`` rules."""
    sid = params.get("sessionId")
    if not isinstance(sid, str) or name_problem(sid) is not None:
        raise AcpError(INVALID_PARAMS, f"sessionId must name a conversation: {name_problem(str(sid))}")
    return LoadSession(sid, parse_new_session(params).cwd)


def list_result(records: Sequence[Record], cwd: Any) -> dict[str, Any]:
    """Rule 2: ``session/list``'s answer."""
    if cwd is not None and (not isinstance(cwd, str) or not posixpath.isabs(cwd)):
        raise AcpError(INVALID_PARAMS, "cwd must be an absolute path")
    wanted = posixpath.normpath(cwd) if cwd else None
    sessions = [
        {"sessionId": r.name, "cwd": r.cwd, "title": r.title, "updatedAt": r.saved}
        for r in records
        if r.cwd is not None and (wanted is None or r.cwd == wanted)
    ]
    return {"sessions": sessions}


def replay_updates(said: Sequence[tuple[str, str]]) -> list[dict[str, Any]]:
    """Rule 3: the ``session/update`` updates that replay a conversation."""
    kinds = {"user": "user_message_chunk", "assistant": "agent_message_chunk"}
    return [{"sessionUpdate": kinds[role], "content": {"type": "text", "text": text}} for role, text in said]
