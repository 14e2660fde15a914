"""Named conversations (issue 31): what the bridge carries forward from one engine to the next.

A named conversation is a Pi session file the bridge owns (:mod:`bridge.profiles.conversation`
keeps it, with its :class:`Record`, in the bridge's private state). Every engine the bridge
starts on the conversation is given a *copy* of the bridge's file, and the bridge takes a copy
back only when it can vouch for what the engine wrote. The rules, decided here (pure: no I/O):

1. **What the bridge vouches for** (:func:`vouches`): a prompt's run that settled on clean
   evidence -- its receipt is ``finished`` or ``failed`` (any reason: an error, the controller's
   stop, a timeout's, the bridge's close) with no overlap, gap or seal signal seen while its slot
   was held. Then everything in the engine's session file up to that run's last assistant
   message is the bridge's own: the seal lets nothing else start a run.
2. **Where the bridge's part ends** (:func:`own_part`): at the last assistant message that ends
   a run (stop reason ``stop``, ``length``, ``error`` or ``aborted``; not ``toolUse``, which a
   tool result follows). Entries after it are cut: the file is read right after the run's
   ``agent_settled``, and whatever an engine appended after its run settled (an extension's
   run starting at once: O1) is not the bridge's.
3. **After anything else** -- an overlap, a gap, a non-``started`` ack, an engine that exited
   or was killed mid-run, a settle-timeout -- nothing is taken back. The next engine resumes from
   the last copy the bridge vouched for: the conversation as it was after the last prompt the
   bridge can vouch for. The tainted prompt's own exchange is not carried forward either (its
   receipt already says its outcome is unknown, and the controller was told at once); foreign
   work never is. This is the SPEC §5 rule "nothing the bridge cannot vouch for is carried
   forward silently": the receipt (``outcome-unknown``/``delivery-unknown``) is the signal.
4. **The start-up check** (:func:`entries_problems`): the engine's ``get_state.sessionFile`` is
   the bridge's copy, and ``get_entries`` since the recorded cursor (the last entry of the copy)
   holds no message: Pi resumed exactly what the bridge recorded.

Files are refused politely (:class:`ConversationError`, one line) when they are damaged, were
written by a newer bridge (:data:`FORMAT_VERSION`) or by a Pi whose session format is newer than
the one this bridge reads (:data:`PI_SESSION_VERSION`), as seed ``001`` refuses a newer schema.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, Final

import attrs
import orjson

from bridge.core.receipts import Receipt
from bridge.core.words import State

#: A conversation's name: a folder's name, so no ``/``, no leading dot, at most 64 characters.
NAME: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
#: The conversation record's format; a newer one is refused (seed 001's rule).
FORMAT_VERSION: Final = 1
#: Pi 1.6.0's session format (docs/session-format.md: "Version 3"); a newer header is refused.
PI_SESSION_VERSION: Final = 3
#: Stop reasons that end a run (Pi's ``StopReason``; ``toolUse`` is followed by tool results).
RUN_ENDS: Final = frozenset({"stop", "length", "error", "aborted"})


class ConversationError(Exception):
    """A conversation that cannot be used as it is; the message is one line for the user."""


def name_problem(name: str) -> str | None:
    """Why ``name`` cannot name a conversation, or None."""
    if NAME.fullmatch(name):
        return None
    return (
        f"a conversation's name is 1-64 letters, digits, '.', '_' or '-', starting with a letter "
        f"or digit (no '/'): not {name!r}"
    )


@attrs.frozen
class Record:
    """What the bridge last recorded of a conversation (``conversation.json``)."""

    name: str
    #: The id of the last entry of the bridge's copy (None: nothing recorded yet).
    cursor: str | None = None
    #: Entries in the bridge's copy (the header not counted).
    entries: int = 0
    #: Exchanges recorded (prompts vouched for).
    prompts: int = 0
    #: The engine's working folder when one was given (an ACP session's ``cwd``), else None.
    cwd: str | None = None
    #: The Pi session's id (its header's): a new conversation (``new_session``) changes it.
    session_id: str | None = None
    #: The first prompt's text, shortened: what ``session/list`` and ``bridge conversations`` show.
    title: str | None = None
    version: int = FORMAT_VERSION
    bridge: str | None = None
    engine_version: str | None = None
    saved: str | None = None

    def to_json(self) -> dict[str, Any]:
        return attrs.asdict(self)


def read_record(data: bytes, name: str) -> Record:
    """The record in ``data``; :class:`ConversationError` for a damaged or newer one."""
    try:
        obj = orjson.loads(data)
    except orjson.JSONDecodeError as e:
        raise ConversationError(f"conversation {name!r} is damaged: its record is not JSON ({e})") from None
    if not isinstance(obj, dict):
        raise ConversationError(f"conversation {name!r} is damaged: its record is not a JSON object")
    version = obj.get("version")
    if not isinstance(version, int) or version < 1:
        raise ConversationError(f"conversation {name!r} is damaged: its record has no format version")
    if version > FORMAT_VERSION:
        raise ConversationError(
            f"conversation {name!r} was written by a newer pi-bridge (format {version}; this one reads "
            f"{FORMAT_VERSION}): upgrade pi-bridge to resume it"
        )
    fields = {a.name for a in attrs.fields(Record)}
    try:
        return Record(**{k: v for k, v in obj.items() if k in fields})
    except TypeError as e:
        raise ConversationError(f"conversation {name!r} is damaged: {e}") from None


def vouches(receipt: Receipt) -> bool:
    """Rule 1: the prompt's run settled on clean evidence, so its session entries are ours."""
    return receipt.state in (State.FINISHED, State.FAILED) and not receipt.signals


def _parse(line: bytes, n: int, name: str) -> dict[str, Any]:
    try:
        obj = orjson.loads(line)
    except orjson.JSONDecodeError:
        obj = None
    if not isinstance(obj, dict):
        raise ConversationError(f"conversation {name!r} is damaged: line {n} of its session file is not a JSON object")
    return obj


def check_header(header: Mapping[str, Any], name: str) -> None:
    """A Pi session header this bridge reads (rule: refuse newer formats)."""
    if header.get("type") != "session":
        raise ConversationError(f"conversation {name!r} is damaged: its session file has no Pi session header")
    version = header.get("version", 1)
    if not isinstance(version, int) or version > PI_SESSION_VERSION:
        raise ConversationError(
            f"conversation {name!r} was written by a newer Pi (session format {version}; this bridge "
            f"reads up to {PI_SESSION_VERSION}): resume it with that Pi, or start another conversation"
        )


def _ends_run(entry: Mapping[str, Any]) -> bool:
    message = entry.get("message")
    return (
        entry.get("type") == "message"
        and isinstance(message, Mapping)
        and message.get("role") == "assistant"
        and message.get("stopReason") in RUN_ENDS
    )


def own_part(lines: Sequence[bytes], name: str) -> tuple[list[bytes], str | None]:
    """Rule 2: the header and the entries up to the last assistant message that ends a run, and
    the id of that last entry (the cursor; None when no run has ended yet: only the header)."""
    lines = [ln for ln in lines if ln.strip()]
    if not lines:
        raise ConversationError(f"conversation {name!r} is damaged: its session file is empty")
    check_header(_parse(lines[0], 1, name), name)
    end, cursor = 1, None
    for n, line in enumerate(lines[1:], start=2):
        entry = _parse(line, n, name)
        if _ends_run(entry):
            end, cursor = n, entry.get("id")
    if cursor is not None and not isinstance(cursor, str):
        raise ConversationError(f"conversation {name!r} is damaged: an entry has no id")
    return list(lines[:end]), cursor


def with_cwd(lines: Sequence[bytes], cwd: str, name: str) -> list[bytes]:
    """The session's lines with its header's working folder set to ``cwd``: Pi runs a session
    in the folder it records and, in RPC mode, exits when that folder is gone ("Stored session
    working directory does not exist"), and each engine has a working folder of its own."""
    header = _parse(lines[0], 1, name)
    check_header(header, name)
    return [orjson.dumps({**header, "cwd": cwd}), *lines[1:]]


def entries_problems(state: Mapping[str, Any], entries: Mapping[str, Any] | None, expected_file: str) -> list[str]:
    """Rule 4, on the start-up answers: ``get_state``'s ``data`` and ``get_entries``'s
    (since the cursor; None: Pi refused it, the cursor is not in its session)."""
    problems: list[str] = []
    if state.get("sessionFile") != expected_file:
        problems.append(
            f"Pi resumed the session file {state.get('sessionFile')!r}, not the conversation's own {expected_file}"
        )
    if entries is None:
        problems.append("Pi's session does not hold the entry the bridge last recorded for this conversation")
        return problems
    listed = entries.get("entries")
    if not isinstance(listed, list):
        problems.append("Pi's get_entries answer has no entries")
    elif any(isinstance(e, Mapping) and e.get("type") == "message" for e in listed):
        problems.append("Pi's session holds messages after the last one the bridge recorded for this conversation")
    return problems


#: A title's length at most (``session/list``: a line in an editor's history).
TITLE_MAX: Final = 80


def title_of(said: Sequence[tuple[str, str]]) -> str | None:
    """The first user message, on one line, at most :data:`TITLE_MAX` characters."""
    for role, text in said:
        if role == "user":
            line = " ".join(text.split())
            return line if len(line) <= TITLE_MAX else line[: TITLE_MAX - 1] + "…"
    return None


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, Mapping) and p.get("type") == "text")
    return ""


def history(lines: Sequence[bytes], name: str) -> list[tuple[str, str]]:
    """The conversation as a person (or an ACP client, at ``session/load``) reads it: each user
    and assistant message's text, in order (tool calls and results, system messages and
    Pi's own entries left out). The active branch is the file's order here: the bridge's
    copy is one line of exchanges (it never forks)."""
    out: list[tuple[str, str]] = []
    for n, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        entry = _parse(line, n, name)
        message = entry.get("message")
        if entry.get("type") != "message" or not isinstance(message, Mapping):
            continue
        role = message.get("role")
        if role in ("user", "assistant"):
            text = _text(message.get("content"))
            if text:
                out.append((str(role), text))
    return out


#: What a switch must leave as it was (``get_state``): the bridge's steering and Pi's modes.
KEPT_ACROSS_A_SWITCH: Final = ("model", "thinkingLevel", "steeringMode", "followUpMode", "autoCompactionEnabled")


def _model_key(model: Any) -> Any:
    return (model.get("provider"), model.get("id")) if isinstance(model, Mapping) else model


def take_up_problems(
    before: Mapping[str, Any],
    switched: Mapping[str, Any],
    after: Mapping[str, Any],
    entries: Mapping[str, Any] | None,
    commands: tuple[Any, Any],
    expected_file: str,
) -> list[str]:
    """A pool's move (R12 of :mod:`bridge.core.pool`), on Pi's answers: ``get_state`` before
    (``before``) and after (``after``) the ``switch_session`` (``switched``: its response), the
    ``get_entries`` since the recorded cursor (None: Pi refused it), and ``get_commands`` before
    and after. Rule 4 holds after the switch as at a start-up: the session file is the copy the
    pool placed and holds no message past the cursor; and the switch changed nothing else: no
    run, compaction or queued message, the same model, thinking level and modes, the same
    commands (what the seal's start-up check verified stays verified)."""
    data = switched.get("data")
    if switched.get("success") is not True:
        return [f"Pi refused switch_session: {switched.get('error', 'no reason given')}"]
    if not isinstance(data, Mapping) or data.get("cancelled") is not False:
        return ["Pi did not switch to the conversation's session (an extension cancelled it)"]
    problems = entries_problems(after, entries, expected_file)
    if after.get("isStreaming") or after.get("isCompacting") or after.get("pendingMessageCount"):
        problems.append("Pi was running, compacting or holding queued messages after the switch")
    for key in KEPT_ACROSS_A_SWITCH:
        was, now = before.get(key), after.get(key)
        if key == "model":
            was, now = _model_key(was), _model_key(now)
        if was != now:
            problems.append(f"the switch changed Pi's {key} from {was!r} to {now!r}")
    if commands[0] != commands[1]:
        problems.append("the switch changed the commands Pi offers (get_commands)")
    return problems
