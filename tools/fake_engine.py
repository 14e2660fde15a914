#!/usr/bin/env python3
"""A scripted fake engine that speaks Pi 1.6.0's RPC JSONL (``pi --mode rpc``).

It is the engine the bridge's own tests spawn (``bridge … -- python tools/fake_engine.py …``):
faithful to Pi's shapes and orderings by default, and able to misbehave on demand so the
supervisor's fault handling can be exercised. Standalone: Python 3.11 stdlib + orjson.

Usage::

    python tools/fake_engine.py [--scenario FILE | --scenario-json JSON | --transcript FILE]
                                [--seed N]

Commands are JSON lines on stdin, events and responses JSON lines on stdout (LF-terminated,
written as whole lines by one writer thread), human chatter on stderr (never protocol).

Default behaviour (what Pi 1.6.0 does, SPEC §2)
================================================

* ``get_state`` -> ``{"type":"response","id":X,"command":"get_state","success":true,"data":{
  "model":{"provider":"fake","id":"fake-model"},"thinkingLevel":"off","isStreaming":…,
  "isCompacting":false,"steeringMode":"all","followUpMode":"all","sessionId":"fake",
  "autoCompactionEnabled":false,"messageCount":…,"pendingMessageCount":…}}``. ``isStreaming`` is
  true between a run's ``agent_start`` and its ``agent_settled``; ``pendingMessageCount`` counts
  queued steering, follow-up and prompt texts.
* ``get_commands`` -> ``data.commands`` = ``[]`` (or the scenario's ``commands``).
* ``prompt`` while idle -> the ack ``{"id":X,"type":"response","command":"prompt","success":true,
  "data":{"disposition":"started"}}`` immediately followed by the run (N = ``deltas``)::

      1 response (ack)            6 message_start  (assistant, content [])
      2 agent_start               7..6+N message_update (text_delta)
      3 turn_start                7+N message_end  (assistant, stopReason "stop", usage)
      4 message_start (user)      8+N turn_end
      5 message_end   (user)      9+N agent_end    {messages, willRetry:false}
                                  10+N agent_settled {aborted:false}

  Those numbers are the prompt's *steps* (see faults below). The reply defaults to
  ``"ok: " + message[:40]``. Timestamps come from a fake clock, so output is deterministic.
* ``message_update`` lines are short (~260 B, like Pi 1.6's): ``{"type":"message_update",
  "message":{"role":"assistant","provider":"fake","model":"fake-model","usage":{…small…}},
  "assistantMessageEvent":{"type":"text_delta","contentIndex":0,"delta":"…"}}`` — no cumulative
  partial. ``update_shape`` picks another shape (below).
* ``prompt`` while a run is active (or other prompts are queued) -> ``queue_update``
  (``followUp`` lists the queued prompt texts) then the ack with ``disposition:"queued"``; the
  queued prompt runs, in FIFO order, right after the current run's story ends: ``agent_start``,
  ``turn_start``, ``queue_update`` (without it), user ``message_start`` …
  (``streamingBehavior`` is ignored.)
* ``steer`` / ``follow_up`` -> ``queue_update`` (full queues, plain texts) then the response
  (success, no data). Delivery: after the current (or next) run's assistant turn, a new turn:
  ``turn_start``, ``queue_update`` (emptied), one user ``message_start``/``message_end`` per text,
  an assistant reply, ``turn_end``; steering first, then follow-ups; then ``agent_end``.
* ``clear_queue`` -> an empty ``queue_update`` then ``{"…","command":"clear_queue","success":true,
  "data":{"cleared":{"steering":[…],"followUp":[…]}}}``. Queued prompts are dropped (their
  texts are in ``followUp``) and never run.
* ``abort`` while running -> the run stops, then the response comes last:
  streaming: ``message_end`` (assistant, ``stopReason:"aborted"``, ``errorMessage:"Request was
  aborted"``, the partial text), ``turn_end``, ``agent_end`` (willRetry false),
  ``agent_settled`` {aborted:true}, ``{"type":"response","id":X,"command":"abort",
  "success":true}``. Before the assistant started (e.g. ``hang``) a ``message_start`` for the
  aborted assistant message comes first. During a retry backoff no assistant message is
  written: ``auto_retry_end`` {success:false, finalError:"Retry cancelled"}, ``agent_settled``
  {aborted:true}, response. ``abort`` while idle (or while a prompt waits on an extension
  dialog before its ack) -> just the response. Queues survive an abort.
* Commands are parsed like ``JSON.parse``: a lone surrogate escape (``"\\ud800"``) is read, and
  written back as an escape (``JSON.stringify``), e.g. in the user message and the reply.
* Unknown command -> ``{"type":"response","command":TYPE,"success":false,"error":"Unknown
  command: TYPE"}`` with **no id** (no ``command`` key when the type is missing, and the error
  says ``undefined``, like ``JSON.stringify`` of Pi's object). A non-object JSON line (``42``,
  ``[1]``, ``"x"``) is an unknown command too. A line that is not JSON ->
  ``{"type":"response","command":"parse","success":false,"error":"Failed to parse command: …"}``
  with no id (the message approximates V8's). Blank lines are skipped. A bare ``null`` line
  crashes the process: a Node-like TypeError stack trace on stderr, exit 1.
* Also answered (success, Pi-like data): ``set_steering_mode``, ``set_follow_up_mode``,
  ``set_auto_compaction``, ``set_auto_retry``, ``abort_retry``, ``set_thinking_level``,
  ``set_session_name``, ``abort_bash``, ``new_session``, ``get_messages``,
  ``get_last_assistant_text``, ``get_session_stats``, ``get_available_models``.
  ``extension_ui_response`` gets no response (it resumes a waiting dialog; unknown ids ignored).
* stdin EOF -> exit 0 within milliseconds (already-written lines are flushed for at most
  0.2 s), abandoning any running prompt: no ``agent_end``/``agent_settled``.
* stderr gets two startup lines (``fake-engine: …``) and diagnostics; never protocol.
  SIGUSR1 dumps the engine's thread stacks on stderr (for debugging a wedged test).

Scenario
========

``--scenario FILE`` or ``--scenario-json JSON`` (read as ``JSON.parse`` reads, lone surrogate escapes
included); every key is optional::

    {
      "defaults": {BEHAVIOUR},        # merged into every prompt's behaviour
      "prompts": [{BEHAVIOUR}, …],    # the 1st, 2nd, … prompt command received (arrival
                                      # order, rejected ones included); later prompts
                                      # get "defaults" only
      "on_start": {
        "lines": [LINE, …],           # written at start, before stdin is read
        "stderr": ["text", …],        # extra stderr lines at start
        "stderr_flood": {"lines": N, "size": B},  # then N stderr lines of B characters each
                                      # ("flood K: xxx…", K from 1), then "flood done"
        "delay": 0.0,                 # seconds to wait before the lines
        "exit": CODE,                 # exit with CODE right after the lines
        "run": {BEHAVIOUR} | true,    # an unsolicited run at start (user text
                                      # "run.text", default "extension says hi") — O1
        "ignore_sigterm": false       # SIGTERM is ignored (test the kill ladder)
      },
      "startup": [LINE, …],           # alias of on_start.lines (both are written)
      "exit_at_start": CODE,          # alias of on_start.exit
      "state": {…},                   # merged into get_state's data (e.g. a dirty seal)
      "commands": [{…}, …],           # get_commands' data.commands
      "models": [{…}, …]              # get_available_models' data.models (default: one fake model)
    }

A LINE is written as: a JSON object/array/number -> its JSON; a string -> that text, raw
(e.g. garbage); ``{"$hex": "ff00"}`` -> those bytes (e.g. invalid UTF-8).

BEHAVIOUR (missing keys = Pi's default; unknown keys are warned about on stderr):

* Content: ``reply`` (text; default ``"ok: "+message[:40]``), ``deltas`` (int, default 4:
  the number of ``message_update`` lines; the reply is split evenly, a short reply gives empty
  deltas), ``delta_delay`` (seconds before each update, default 0 — pace a run so a test can
  stop it mid-stream), ``stopReason`` (default ``"stop"``; any string, e.g. ``"length"``,
  ``"toolUse"``, ``"error"``, ``"weird"``), ``errorMessage`` (default ``"fake provider error"``
  when stopReason is ``"error"``), ``update_shape``: ``"lean"`` (default, above), ``"delta"``
  (Pi's documented delta-only form: top-level ``usage``, no ``message``) or ``"full"``
  (``message`` and ``assistantMessageEvent.partial`` carry the whole partial so far — the
  quadratic older engines), ``tools`` (int, default 0: that many tool calls before the reply:
  an assistant ``toolUse`` message, ``tool_execution_start``/``_update`` × ``tool_updates``
  (default 2, accumulated ``partialResult`` growing by ``tool_output_bytes``, default 64)/
  ``_end``, a ``toolResult`` message, ``turn_end``, then a new ``turn_start`` for the reply);
  ``tool_hang`` (default false): the first tool call hangs after its ``tool_execution_start``
  (a tool that blocks: nothing more until an ``abort``).
* Retries: ``retries`` K (default 0) failed attempts before the final one. Attempt 1 is
  ``agent_start``, ``turn_start``, the user message, assistant ``message_start``/``message_end``
  (``stopReason:"error"``, ``errorMessage`` = ``retry_error``, default ``"529 overloaded_error:
  Overloaded"``), ``turn_end``, ``agent_end`` {willRetry:true}, ``auto_retry_start``
  {attempt, maxAttempts (``max_retries``, default max(3,K)), delayMs, errorMessage}; then
  ``retry_delay`` seconds (default 0; abortable) and the next attempt starts with
  ``agent_start`` and NO user message. After the final attempt's successful assistant
  ``message_end`` comes ``auto_retry_end`` {success:true, attempt:K}; if the final attempt
  ends in ``"error"``, ``auto_retry_end`` {success:false, finalError} follows its ``agent_end``.
* ``hang``: ``true`` -> after the user message nothing more is streamed until ``abort`` (which
  then works as above); ``"forever"`` -> same, but ``abort`` is swallowed (no response, ever).
* ``reject``: ``true`` or an error text -> the ack is ``success:false`` with ``error`` (default
  ``"Prompt rejected by fake engine"``); nothing else happens.
* ``disposition``: ``"started"``/``"queued"``/``"handled"`` overrides the ack's disposition.
  ``"handled"`` -> no run at all. ``"queued"`` while idle -> the run still follows the ack.
* ``no_ack``: run without ever writing the ack. ``ack_delay``: seconds before the ack (other
  commands are answered meanwhile, so their responses come first).
* ``ack_without_start``: the ack, then ``agent_settled`` {aborted:false}, no ``agent_start``.
* ``failure_no_run``: the ack, then an assistant ``message_start``/``message_end`` with
  ``stopReason:"error"`` (``errorMessage``), no ``agent_start``, then ``agent_settled``.
* ``self_start_after``: after this prompt's ``agent_settled`` (and ``second_settle``), start a
  second run on its own (after ``self_start_delay`` s, default 0): ``agent_start`` … user
  message ``self_start_text`` (default ``"extension says hi"``) … ``agent_settled`` — the O1.
* ``second_settle``: one more ``agent_settled`` {aborted:false} after the real one.
* ``before_ack`` / ``after_settle``: lists of LINEs written before the ack (e.g. an
  ``extension_error``) / after the ``agent_settled`` (e.g. a stray ``queue_update``).
* ``extension_ui``: one dialog spec or a list, written before the ack, each as
  ``{"type":"extension_ui_request","id":"ui-K","method":…, …the spec's other fields…}``
  (K counts 1, 2, … over the process; ``id`` in the spec overrides). Dialog methods
  (``select``, ``confirm``, ``input``, ``editor``) wait for ``{"type":"extension_ui_response",
  "id":"ui-K",…}`` on stdin (a ``cancelled:true`` answer counts) before continuing; with
  ``timeout`` (ms, sent in the request like Pi) they auto-resolve after it. ``"wait": false|true``
  overrides (``notify``/``setStatus``/``setWidget``/``setTitle``/``set_editor_text`` don't wait).
  The answer is logged on stderr.
* ``responses_out_of_order``: while this prompt holds the run, responses to other commands
  (not ``prompt``/``abort``) are held back and written newest first when its story ends
  (after ``agent_settled``/``second_settle``/``self_start_after``).
* ``ignore_stdin``: stop reading stdin right after this prompt's line (stdin EOF is never
  seen, so the process lingers until killed).
* ``close_stdin``: like ``ignore_stdin``, but stdin is closed too, so the bridge's next write
  fails at once (EPIPE) instead of filling the pipe; the process lingers until killed.
* ``exit_after_close``: with ``close_stdin``, exit (``exit_code``, with a stack trace on stderr)
  that many seconds after closing stdin instead of lingering: an engine dying, whose stdin
  goes first, so a prompt written in between is never read.

Faults at a step. A prompt's steps are the lines its story writes, counted from 1: its
dialog requests, ``before_ack`` lines, the ack, its run (retries, steering turns,
``self_start_after`` run, ``second_settle``, ``after_settle``) and an abort's tail — but not
responses to other commands (nor the abort response). Values are an int or a list of ints.

* Inserted lines (they take step N; the line that would have been N becomes N+1):
  ``garbage_at`` (``garbage_text``, default ``"fake-engine: stray debug output (not JSON)"``),
  ``oversize_at`` (one line of exactly ``oversize_bytes`` bytes, default 64 MiB + 1 KiB,
  shaped ``{"type":"message_update","pad":"xxxx…"}``, written in 1 MiB pieces so even a
  1 GiB line is never held in memory), ``invalid_utf8_at`` (a JSON-looking
  line with invalid UTF-8), ``array_at`` (``[1]``), ``insert_at`` (``{"N": LINE or [LINE…]}``:
  any lines, e.g. an unsolicited ``agent_start``).
* After line N is written (N = 0: as soon as the prompt is read, before any output):
  ``crash_at`` (a Node-like stack trace on stderr, exit ``exit_code``, default 1),
  ``kill_at`` (SIGKILL itself), ``close_stdout_at`` (close stdout; keep running and reading
  stdin until EOF, then exit 0), ``hang_at`` (write nothing more, ever, for any command; keep
  reading stdin; EOF still exits 0).

Random faults (soak tests): ``"random_faults": {"p": 0.3, "kinds": [...], "max_step": N}`` in
``defaults`` (or a prompt). For each prompt, with probability p, one kind is picked from
``kinds`` (default: crash, kill, close_stdout, hang, garbage, oversize, invalid_utf8, array;
also accepted: self_start_after, second_settle, no_ack, ack_without_start, failure_no_run,
reject, hang_run) at a step in 1..max_step (default: the plain run's line count). The draw
depends only on ``--seed`` (default 0) and the prompt's number, never on timing. Each pick is
printed on stderr as ``fake-engine: fault <kind> at <step>`` (step 0 for kinds without one).

Transcript mode
===============

``--transcript FILE`` replays a pi-bridge transcript v1 (SPEC §6) instead of a scenario: the
``recv`` (re-serialised) / ``recv_raw`` (as text) lines before the first ``send`` are written
at start; each line read from stdin then releases the recorded lines up to the next ``send``
(no id matching; a command whose ``type`` differs from the recorded send's type gets a
warning on stderr). Other kinds (``release``, ``stderr``, ``exit``, ``note``, ``receipt``,
``signal``) are ignored. After the last send it waits for stdin EOF and exits 0. A bad header,
a newer version or an unknown kind exits 2 with a message naming the line.
"""

from __future__ import annotations

import argparse
import collections
import faulthandler
import json
import os
import queue
import random
import signal
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import orjson

PI_VERSION = "1.6.0"

# Pi's default oversize reference point: the bridge's default line limit is 64 MiB (SPEC §3),
# so the default oversize line is just past it.
DEFAULT_OVERSIZE_BYTES = 64 * 1024 * 1024 + 1024

# How long stdin EOF / a crash waits for already-queued output to reach the pipe.
EXIT_DRAIN_SECONDS = 0.2

FAKE_CLOCK_START_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z

DIALOG_METHODS = frozenset({"select", "confirm", "input", "editor"})

TERMINAL_FAULTS = ("crash", "kill", "close_stdout", "hang")
INSERT_FAULTS = ("garbage", "oversize", "invalid_utf8", "array")
STEP_FAULT_KINDS = TERMINAL_FAULTS + INSERT_FAULTS
FLAG_FAULT_KINDS = {
    "self_start_after": ("self_start_after", True),
    "second_settle": ("second_settle", True),
    "no_ack": ("no_ack", True),
    "ack_without_start": ("ack_without_start", True),
    "failure_no_run": ("failure_no_run", True),
    "reject": ("reject", True),
    "hang_run": ("hang", True),
}

BEHAVIOUR_DEFAULTS: dict[str, Any] = {
    "reply": None,
    "deltas": 4,
    "delta_delay": 0.0,
    "stopReason": "stop",
    "errorMessage": None,
    "update_shape": "lean",
    "tools": 0,
    "tool_updates": 2,
    "tool_output_bytes": 64,
    "tool_hang": False,
    "retries": 0,
    "retry_delay": 0.0,
    "max_retries": None,
    "retry_error": "529 overloaded_error: Overloaded",
    "hang": False,
    "reject": False,
    "disposition": None,
    "no_ack": False,
    "ack_delay": 0.0,
    "ack_without_start": False,
    "failure_no_run": False,
    "self_start_after": False,
    "self_start_text": "extension says hi",
    "self_start_delay": 0.0,
    "second_settle": False,
    "before_ack": [],
    "after_settle": [],
    "extension_ui": None,
    "responses_out_of_order": False,
    "ignore_stdin": False,
    "close_stdin": False,
    "exit_after_close": None,
    "crash_at": None,
    "exit_code": 1,
    "kill_at": None,
    "close_stdout_at": None,
    "hang_at": None,
    "garbage_at": None,
    "garbage_text": "fake-engine: stray debug output (not JSON)",
    "oversize_at": None,
    "oversize_bytes": DEFAULT_OVERSIZE_BYTES,
    "invalid_utf8_at": None,
    "array_at": None,
    "insert_at": None,
    "random_faults": None,
    "text": None,  # on_start.run only: the unsolicited run's user text
}

SIMPLE_COMMANDS = {
    "set_steering_mode": None,
    "set_follow_up_mode": None,
    "set_auto_compaction": None,
    "set_auto_retry": None,
    "abort_retry": None,
    "set_thinking_level": None,
    "set_session_name": None,
    "abort_bash": None,
    "new_session": {"cancelled": False},
    "get_available_models": {"models": [{"provider": "fake", "id": "fake-model"}]},
}


def log(text: str) -> None:
    """One diagnostic line on stderr (never protocol)."""
    try:
        sys.stderr.write(f"fake-engine: {text}\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass


def js_dumps(obj: Any) -> bytes:
    """``JSON.stringify``: orjson, and for a str with a lone surrogate (which Node keeps and
    writes as a ``\\udXXX`` escape; orjson refuses it) the standard library's escapes."""
    try:
        return orjson.dumps(obj)
    except TypeError:
        return json.dumps(obj, separators=(",", ":")).encode("ascii")


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def js_loads(text: str) -> Any:
    """``JSON.parse``: orjson, and for what orjson refuses but Node reads (a lone surrogate
    escape such as ``"\\ud800"``) the standard library's strict decoder (no NaN/Infinity)."""
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        try:
            return json.loads(text, parse_constant=_refuse_constant)
        except (ValueError, RecursionError):
            raise orjson.JSONDecodeError("not JSON", text, 0) from None


def encode_line(item: Any) -> bytes:
    """A scenario LINE to bytes (without the LF)."""
    if isinstance(item, bytes):
        return item
    if isinstance(item, str):
        return item.encode("utf-8")
    if isinstance(item, dict) and set(item) == {"$hex"}:
        return bytes.fromhex(item["$hex"])
    return js_dumps(item)


def js_string(value: Any) -> str:
    """How a template literal in Node would print a command's ``type``."""
    if value is None:
        return "undefined"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, str):
        return value
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, list):
        return ",".join(js_string(v) for v in value)
    return "[object Object]"


def v8_parse_error(text: str) -> str:
    """An approximation of V8's JSON.parse message, for the ``parse`` error response."""
    stripped = text.strip()
    snippet = stripped if len(stripped) <= 32 else stripped[:32] + "..."
    return f"Unexpected token '{stripped[:1]}', \"{snippet}\" is not valid JSON"


def die(message: str, code: int = 2) -> None:
    """Refuse to start (bad arguments, scenario or transcript)."""
    log(message)
    sys.exit(code)


def steps_of(value: Any) -> list[int]:
    if value is None or value is False:
        return []
    if isinstance(value, bool):
        return []
    if isinstance(value, int):
        return [value]
    return [int(v) for v in value]


# --------------------------------------------------------------------------------------------
# Output: one writer thread, so a full pipe never blocks command handling (Node buffers its
# stdout writes the same way) and terminal faults happen exactly after line N reached the pipe.


class Writer:
    def __init__(self, fd: int = 1) -> None:
        self.fd = fd
        self.q: queue.SimpleQueue = queue.SimpleQueue()
        self.dead = False  # stdout closed, broken or hung: lines are dropped
        self.thread = threading.Thread(target=self._run, name="writer", daemon=True)
        self.thread.start()

    def line(self, data: bytes) -> None:
        self.q.put(data)

    def action(self, kind: str, arg: Any = None) -> None:
        self.q.put((kind, arg))

    def drain(self, timeout: float) -> bool:
        """Block until every line queued so far was written (or dropped), or ``timeout``."""
        done = threading.Event()
        self.q.put(("flush", done))
        return done.wait(timeout)

    def _write(self, data: bytes) -> None:
        if self.dead:
            return
        view = memoryview(data + b"\n")
        try:
            while view:
                n = os.write(self.fd, view)
                view = view[n:]
        except OSError:
            self.dead = True

    def _write_oversize(self, nbytes: int) -> None:
        """One oversize line (see :func:`oversize_line`) written in OVERSIZE_PIECE pieces,
        so a 1 GiB line never sits in memory whole. Same bytes as ``oversize_line(n)``."""
        if self.dead:
            return
        head, tail = OVERSIZE_HEAD, OVERSIZE_TAIL + b"\n"
        pad = max(0, nbytes - len(head) - len(OVERSIZE_TAIL))
        piece = b"x" * min(pad, OVERSIZE_PIECE)
        try:
            self._write_all(head)
            while pad > 0:
                n = min(pad, len(piece))
                self._write_all(piece if n == len(piece) else piece[:n])
                pad -= n
            self._write_all(tail)
        except OSError:
            self.dead = True

    def _write_all(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            n = os.write(self.fd, view)
            view = view[n:]

    def _run(self) -> None:
        while True:
            item = self.q.get()
            if isinstance(item, bytes):
                self._write(item)
                continue
            kind, arg = item
            if kind == "oversize":
                self._write_oversize(arg)
            elif kind == "flush":
                arg.set()
            elif kind == "exit":
                code, trace = arg
                if trace:
                    try:
                        sys.stderr.write(trace)
                        sys.stderr.flush()
                    except (OSError, ValueError):
                        pass
                os._exit(code)
            elif kind == "kill":
                log("fault kill: SIGKILL to self")
                os.kill(os.getpid(), signal.SIGKILL)
            elif kind == "close":
                log("fault close_stdout: closing stdout")
                self.dead = True
                try:
                    os.close(self.fd)
                except OSError:
                    pass
            elif kind == "stop":
                log("fault hang: no more output")
                self.dead = True


def crash_trace(what: str, code: int, error: str = "TypeError", source: str = "const id = command.id;") -> str:
    """A Node-like uncaught-exception report for stderr."""
    return (
        "/fake/pi-coding-agent/dist/modes/rpc/rpc-mode.js:412\n"
        f"        {source}\n"
        "                           ^\n\n"
        f"{error}: {what}\n"
        "    at handleCommand (/fake/pi-coding-agent/dist/modes/rpc/rpc-mode.js:412:28)\n"
        "    at /fake/pi-coding-agent/dist/modes/rpc/jsonl.js:31:13\n"
        "    at process.processTicksAndRejections (node:internal/process/task_queues:105:5)\n\n"
        f"Node.js v24.11.0 (fake-engine exit {code})\n"
    )


# --------------------------------------------------------------------------------------------
# Faults counted per prompt story.


class Faults:
    def __init__(self, beh: dict[str, Any]) -> None:
        self.step = 0
        self.terminal: dict[int, list[str]] = collections.defaultdict(list)
        for kind in TERMINAL_FAULTS:
            for s in steps_of(beh.get(f"{kind}_at")):
                self.terminal[s].append(kind)
        self.inserts: dict[int, list[Any]] = collections.defaultdict(list)
        for s in steps_of(beh.get("garbage_at")):
            self.inserts[s].append(encode_line(str(beh["garbage_text"])))
        for s in steps_of(beh.get("oversize_at")):
            self.inserts[s].append(("oversize", int(beh["oversize_bytes"])))
        for s in steps_of(beh.get("invalid_utf8_at")):
            self.inserts[s].append(b'{"type":"message_update","text":"bad \xc3\x28 utf8 \xff\xfe"}')
        for s in steps_of(beh.get("array_at")):
            self.inserts[s].append(b"[1]")
        extra = beh.get("insert_at") or {}
        for key, lines in extra.items():
            if not isinstance(lines, list) or (lines and not isinstance(lines[0], (dict, list, str))):
                lines = [lines]
            for line in lines:
                self.inserts[int(key)].append(encode_line(line))
        self.exit_code = int(beh.get("exit_code", 1))


OVERSIZE_HEAD = b'{"type":"message_update","pad":"'
OVERSIZE_TAIL = b'"}'
#: Oversize lines are written in pieces of this size (never held whole in memory).
OVERSIZE_PIECE = 1 << 20


def oversize_line(nbytes: int) -> bytes:
    return OVERSIZE_HEAD + b"x" * max(0, nbytes - len(OVERSIZE_HEAD) - len(OVERSIZE_TAIL)) + OVERSIZE_TAIL


# --------------------------------------------------------------------------------------------
# Stories: one generator per prompt (or unsolicited run). A story yields what it waits for:
#   ("sleep", seconds) | ("ui", id, timeout_s|None) | ("turn",) | ("hang",)
# and the engine resumes it. Everything else it does (writing lines) is immediate.


class Story:
    def __init__(
        self,
        engine: Engine,
        n: int,
        message: str | None,
        cmd: dict | None,
        beh: dict[str, Any],
        unsolicited: bool = False,
    ) -> None:
        self.engine = engine
        self.n = n
        self.message = message
        self.cmd = cmd
        self.beh = beh
        self.unsolicited = unsolicited
        self.faults = Faults(beh)
        self.wait: tuple | None = None
        self.deadline: float | None = None
        self.resume_value: Any = None
        self.done = False
        self.deaf = False  # hang:"forever": abort is swallowed
        # run state, for the abort tail
        self.phase = "pre"  # pre | queued | user | assistant | backoff | idle
        self.in_run = False
        self.partial = ""
        self.run_messages: list[dict] = []
        self.retry_attempt = 0
        self.gen = self.body()

    # -- output

    def emit(self, obj: Any) -> None:
        self.engine.write(obj, self.faults)

    def respond_ack(self, disposition: str) -> None:
        self.emit(self.engine.response(self.cmd, "prompt", True, data={"disposition": disposition}))

    # -- the story

    def body(self) -> Iterator[tuple]:
        e, b = self.engine, self.beh
        if self.unsolicited:
            if e.running is not None or e.run_queue:
                e.run_queue.append(self)
                yield ("turn",)
            else:
                e.running = self
            yield from self.run(self.message or "extension says hi", b, deliver_queue=False)
            return
        for line in b.get("before_ack") or []:
            self.emit(encode_line(line))
        uis = b.get("extension_ui")
        if isinstance(uis, dict):
            uis = [uis]
        for spec in uis or []:
            spec = dict(spec)
            wait = spec.pop("wait", None)
            e.ui_serial += 1
            ui_id = spec.pop("id", None) or f"ui-{e.ui_serial}"
            request = {"type": "extension_ui_request", "id": ui_id, **spec}
            self.emit(request)
            if wait is None:
                wait = spec.get("method") in DIALOG_METHODS
            if wait:
                timeout = spec.get("timeout")
                answer = yield ("ui", ui_id, (timeout / 1000.0) if timeout else None)
                log(
                    f"extension_ui {ui_id} answered: "
                    + (orjson.dumps(answer).decode() if answer is not None else "timed out")
                )
        if b.get("ack_delay"):
            yield ("sleep", float(b["ack_delay"]))
        if b.get("reject"):
            err = b["reject"] if isinstance(b["reject"], str) else "Prompt rejected by fake engine"
            self.emit(e.response(self.cmd, "prompt", False, error=err))
            return
        disposition = b.get("disposition")
        if disposition == "handled":
            if not b.get("no_ack"):
                self.respond_ack("handled")
            return
        busy = e.running is not None or bool(e.run_queue)
        delivered_from_queue = False
        if busy:
            self.phase = "queued"
            e.run_queue.append(self)
            self.emit(e.queue_update())
            if not b.get("no_ack"):
                self.respond_ack(disposition or "queued")
            yield ("turn",)
            delivered_from_queue = True
        else:
            e.running = self
            if not b.get("no_ack"):
                self.respond_ack(disposition or "started")
        if b.get("ack_without_start"):
            self.emit({"type": "agent_settled", "aborted": False})
        elif b.get("failure_no_run"):
            msg = e.assistant_message([], "error", b.get("errorMessage") or "fake provider error", 0)
            self.emit({"type": "message_start", "message": msg})
            self.emit({"type": "message_end", "message": msg})
            self.emit({"type": "agent_settled", "aborted": False})
        else:
            yield from self.run(self.message or "", b, deliver_queue=delivered_from_queue)
        if b.get("second_settle"):
            self.emit({"type": "agent_settled", "aborted": False})
        for line in b.get("after_settle") or []:
            self.emit(encode_line(line))
        if b.get("self_start_after"):
            if b.get("self_start_delay"):
                yield ("sleep", float(b["self_start_delay"]))
            plain = dict(BEHAVIOUR_DEFAULTS)
            plain["deltas"] = b.get("deltas", 4)
            yield from self.run(str(b.get("self_start_text") or "extension says hi"), plain, deliver_queue=False)

    def run(self, text: str, b: dict[str, Any], deliver_queue: bool) -> Iterator[tuple]:
        """One prompt's run, from its first agent_start to its agent_settled."""
        e = self.engine
        retries = int(b.get("retries") or 0)
        max_attempts = int(b.get("max_retries") or max(3, retries))
        stop = b.get("stopReason", "stop")
        reply = b.get("reply")
        if reply is None:
            reply = "ok: " + text[:40]
        for attempt in range(retries + 1):
            final = attempt == retries
            self.run_messages = []
            self.emit({"type": "agent_start"})
            self.in_run = True
            self.phase = "user"
            self.emit({"type": "turn_start"})
            if attempt == 0:
                if deliver_queue:
                    self.emit(e.queue_update())
                um = e.user_message(text)
                self.run_messages.append(um)
                self.emit({"type": "message_start", "message": um})
                self.emit({"type": "message_end", "message": um})
                if b.get("hang"):
                    self.deaf = b["hang"] == "forever"
                    yield ("hang",)
            if not final:
                err = str(b.get("retry_error"))
                am = e.assistant_message([], "error", err, 0)
                self.emit({"type": "message_start", "message": am})
                self.emit({"type": "message_end", "message": am})
                self.run_messages.append(am)
                self.emit({"type": "turn_end", "message": am, "toolResults": []})
                self.emit({"type": "agent_end", "messages": self.run_messages, "willRetry": True})
                self.retry_attempt = attempt + 1
                delay = float(b.get("retry_delay") or 0)
                self.emit(
                    {
                        "type": "auto_retry_start",
                        "attempt": attempt + 1,
                        "maxAttempts": max_attempts,
                        "delayMs": int(delay * 1000),
                        "errorMessage": err,
                    }
                )
                self.phase = "backoff"
                if delay:
                    yield ("sleep", delay)
                continue
            # the final attempt
            for k in range(int(b.get("tools") or 0)):
                yield from self.tool_turn(k + 1, b)
            err = b.get("errorMessage")
            if err is None and stop == "error":
                err = "fake provider error"
            am = yield from self.stream_assistant(reply, stop, err, b)
            if retries and stop != "error":
                self.emit({"type": "auto_retry_end", "success": True, "attempt": retries})
            self.emit({"type": "turn_end", "message": am, "toolResults": []})
            for queue_name in ("steering", "follow_up"):
                texts = getattr(e, queue_name)
                if not texts:
                    continue
                delivered = list(texts)
                texts.clear()
                self.emit({"type": "turn_start"})
                self.emit(e.queue_update())
                for t in delivered:
                    um = e.user_message(t)
                    self.run_messages.append(um)
                    self.emit({"type": "message_start", "message": um})
                    self.emit({"type": "message_end", "message": um})
                sub = yield from self.stream_assistant("ok: " + delivered[-1][:40], "stop", None, b)
                self.emit({"type": "turn_end", "message": sub, "toolResults": []})
            self.emit({"type": "agent_end", "messages": self.run_messages, "willRetry": False})
            if retries and stop == "error":
                self.emit({"type": "auto_retry_end", "success": False, "attempt": retries, "finalError": err})
            self.in_run = False
            self.phase = "idle"
            self.emit({"type": "agent_settled", "aborted": False})

    def stream_assistant(self, reply: str, stop: Any, err: str | None, b: dict[str, Any]) -> Iterator[tuple]:
        e = self.engine
        n = max(0, int(b.get("deltas", 4)))
        shape = b.get("update_shape", "lean")
        delay = float(b.get("delta_delay") or 0)
        start = e.assistant_message([], stop, None, 0, partial=True)
        self.emit({"type": "message_start", "message": start})
        self.phase = "assistant"
        self.partial = ""
        size = -(-len(reply) // n) if n else 0
        for i in range(n):
            if delay:
                yield ("sleep", delay)
            chunk = reply[i * size : (i + 1) * size]
            self.partial += chunk
            self.emit(e.update_line(chunk, self.partial, i + 1, shape))
        if n == 0:
            self.partial = reply
        content = [{"type": "text", "text": self.partial}] if self.partial else []
        am = e.assistant_message(content, stop, err, len(reply.split()))
        self.emit({"type": "message_end", "message": am})
        self.run_messages.append(am)
        self.phase = "user"
        self.partial = ""
        return am

    def tool_turn(self, k: int, b: dict[str, Any]) -> Iterator[tuple]:
        e = self.engine
        call_id = f"call_{k}"
        args = {"command": f"echo {k}"}
        call = {"type": "toolCall", "id": call_id, "name": "bash", "arguments": args}
        am = e.assistant_message([call], "toolUse", None, 5)
        self.emit({"type": "message_start", "message": e.assistant_message([], "toolUse", None, 0, partial=True)})
        self.emit({"type": "message_end", "message": am})
        self.run_messages.append(am)
        self.emit({"type": "tool_execution_start", "toolCallId": call_id, "toolName": "bash", "args": args})
        if b.get("tool_hang"):
            yield ("hang",)
        out = ""
        for _ in range(int(b.get("tool_updates", 2))):
            out += "y" * int(b.get("tool_output_bytes", 64)) + "\n"
            self.emit(
                {
                    "type": "tool_execution_update",
                    "toolCallId": call_id,
                    "toolName": "bash",
                    "args": args,
                    "partialResult": {
                        "content": [{"type": "text", "text": out}],
                        "details": {"truncation": None, "fullOutputPath": None},
                    },
                }
            )
        result = {"content": [{"type": "text", "text": out}], "details": {}}
        self.emit(
            {
                "type": "tool_execution_end",
                "toolCallId": call_id,
                "toolName": "bash",
                "result": result,
                "isError": False,
            }
        )
        tr = {
            "role": "toolResult",
            "toolCallId": call_id,
            "toolName": "bash",
            "content": result["content"],
            "isError": False,
            "timestamp": e.tick(),
        }
        self.emit({"type": "message_start", "message": tr})
        self.emit({"type": "message_end", "message": tr})
        self.run_messages.append(tr)
        self.emit({"type": "turn_end", "message": am, "toolResults": [tr]})
        self.emit({"type": "turn_start"})
        if False:  # keep this a generator
            yield ("sleep", 0)

    def abort_tail(self) -> None:
        """What Pi writes when ``abort`` stops this story's run (before the abort response)."""
        e = self.engine
        if self.phase == "backoff":
            self.emit(
                {
                    "type": "auto_retry_end",
                    "success": False,
                    "attempt": self.retry_attempt,
                    "finalError": "Retry cancelled",
                }
            )
        else:
            if self.phase == "user":
                self.emit(
                    {"type": "message_start", "message": e.assistant_message([], "aborted", None, 0, partial=True)}
                )
            content = [{"type": "text", "text": self.partial}] if self.partial else []
            am = e.assistant_message(content, "aborted", "Request was aborted", 0)
            self.emit({"type": "message_end", "message": am})
            self.run_messages.append(am)
            self.emit({"type": "turn_end", "message": am, "toolResults": []})
            self.emit({"type": "agent_end", "messages": self.run_messages, "willRetry": False})
        self.in_run = False
        self.phase = "idle"
        self.emit({"type": "agent_settled", "aborted": True})


# --------------------------------------------------------------------------------------------


class Engine:
    def __init__(self, scenario: dict[str, Any], seed: int) -> None:
        self.scenario = scenario
        self.seed = seed
        self.writer = Writer(1)
        self.inbox: queue.Queue = queue.Queue()
        self.stories: list[Story] = []
        self.running: Story | None = None
        self.run_queue: collections.deque[Story] = collections.deque()
        self.steering: list[str] = []
        self.follow_up: list[str] = []
        self.held: list[bytes] = []
        self.ui_serial = 0
        self.clock = 0
        self.message_count = 0
        self.last_assistant_text: str | None = None
        self.dying: str | bool = False
        self.dying_code = 1
        self.prompts_seen = 0  # reader thread only
        self.close_stdin = False  # reader thread only
        self.close_exit: tuple[float, int] | None = None  # reader thread only: (seconds, code)
        self._beh_cache: dict[int, dict[str, Any]] = {}
        self._beh_lock = threading.Lock()
        known = set(BEHAVIOUR_DEFAULTS)
        for where, beh in [("defaults", scenario.get("defaults") or {})] + [
            (f"prompts[{i}]", p) for i, p in enumerate(scenario.get("prompts") or [])
        ]:
            for key in beh:
                if key not in known:
                    log(f"warning: unknown behaviour key {key!r} in {where}")

    # -- behaviour resolution (called from the reader thread; pure in n)

    def behaviour(self, n: int) -> dict[str, Any]:
        with self._beh_lock:
            if n in self._beh_cache:
                return self._beh_cache[n]
            beh = dict(BEHAVIOUR_DEFAULTS)
            beh.update(self.scenario.get("defaults") or {})
            prompts = self.scenario.get("prompts") or []
            if n - 1 < len(prompts):
                beh.update(prompts[n - 1] or {})
            rf = beh.get("random_faults")
            if rf:
                rng = random.Random(f"fake-engine/{self.seed}/{n}")
                if rng.random() < float(rf.get("p", 0.3)):
                    kinds = list(rf.get("kinds") or STEP_FAULT_KINDS)
                    kind = rng.choice(kinds)
                    plain = 10 + int(beh.get("deltas", 4)) + 8 * int(beh.get("retries") or 0)
                    step = rng.randint(1, int(rf.get("max_step") or plain))
                    if kind in FLAG_FAULT_KINDS:
                        key, value = FLAG_FAULT_KINDS[kind]
                        beh[key] = value
                        step = 0
                    elif kind in STEP_FAULT_KINDS:
                        beh[f"{kind}_at"] = step
                    else:
                        log(f"warning: unknown random fault kind {kind!r}")
                    log(f"fault {kind} at {step}")
            self._beh_cache[n] = beh
            return beh

    # -- wire helpers

    def tick(self) -> int:
        self.clock += 1
        return FAKE_CLOCK_START_MS + self.clock * 1000

    def usage(self, out: int) -> dict[str, Any]:
        return {
            "input": 12,
            "output": out,
            "cacheRead": 0,
            "cacheWrite": 0,
            "totalTokens": 12 + out,
            "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "total": 0},
        }

    def user_message(self, text: str) -> dict[str, Any]:
        self.message_count += 1
        return {"role": "user", "content": [{"type": "text", "text": text}], "timestamp": self.tick()}

    def assistant_message(
        self, content: list, stop: Any, err: str | None, out: int, partial: bool = False
    ) -> dict[str, Any]:
        msg = {
            "role": "assistant",
            "content": content,
            "api": "openai-completions",
            "provider": "fake",
            "model": "fake-model",
            "usage": self.usage(out),
            "stopReason": stop,
            "timestamp": self.tick(),
        }
        if err is not None:
            msg["errorMessage"] = err
        if not partial:
            self.message_count += 1
            texts = [c.get("text", "") for c in content if c.get("type") == "text"]
            if texts:
                self.last_assistant_text = "".join(texts)
        return msg

    def update_line(self, chunk: str, partial: str, k: int, shape: str) -> dict[str, Any]:
        ame = {"type": "text_delta", "contentIndex": 0, "delta": chunk}
        if shape == "delta":
            return {"type": "message_update", "usage": self.usage(k), "assistantMessageEvent": ame}
        if shape == "full":
            msg = {
                "role": "assistant",
                "content": [{"type": "text", "text": partial}],
                "api": "openai-completions",
                "provider": "fake",
                "model": "fake-model",
                "usage": self.usage(k),
                "stopReason": "stop",
                "timestamp": FAKE_CLOCK_START_MS,
            }
            return {"type": "message_update", "message": msg, "assistantMessageEvent": {**ame, "partial": msg}}
        small = {"input": 12, "output": k, "totalTokens": 12 + k}
        return {
            "type": "message_update",
            "message": {
                "role": "assistant",
                "api": "openai-completions",
                "provider": "fake",
                "model": "fake-model",
                "usage": small,
            },
            "assistantMessageEvent": ame,
        }

    def queue_update(self) -> dict[str, Any]:
        follow = list(self.follow_up) + [s.message or "" for s in self.run_queue if not s.unsolicited]
        return {"type": "queue_update", "steering": list(self.steering), "followUp": follow}

    def response(
        self,
        cmd: dict | None,
        command: str,
        success: bool,
        data: Any = None,
        error: str | None = None,
        with_data: bool = False,
    ) -> dict[str, Any]:
        resp: dict[str, Any] = {}
        if cmd is not None and "id" in cmd:
            resp["id"] = cmd["id"]
        resp["type"] = "response"
        resp["command"] = command
        resp["success"] = success
        if data is not None or with_data:
            resp["data"] = data
        if error is not None:
            resp["error"] = error
        return resp

    # -- output

    def write(self, obj: Any, faults: Faults | None = None) -> None:
        data = obj if isinstance(obj, bytes) else js_dumps(obj)
        if faults is None:
            self.writer.line(data)
            return
        while faults.step + 1 in faults.inserts:
            s = faults.step + 1
            for item in faults.inserts.pop(s):
                faults.step += 1
                if isinstance(item, tuple):  # ("oversize", n): streamed by the writer
                    self.writer.action("oversize", item[1])
                else:
                    self.writer.line(item)
                self._terminal(faults, faults.step)
        faults.step += 1
        self.writer.line(data)
        self._terminal(faults, faults.step)

    def _terminal(self, faults: Faults, step: int) -> None:
        for kind in faults.terminal.pop(step, []):
            if kind == "crash":
                self.dying = "crash"
                code = self.dying_code = faults.exit_code
                self.writer.action(
                    "exit",
                    (
                        code,
                        f"fake-engine: fault crash_at {step}\n"
                        + crash_trace(
                            "fake engine crashed (fault injection)", code, "Error", "throw new Error(reason);"
                        ),
                    ),
                )
            elif kind == "kill":
                self.dying = "kill"
                self.writer.action("kill")
            elif kind == "close_stdout":
                self.writer.action("close")
            elif kind == "hang":
                self.writer.action("stop")

    def respond(self, resp: dict[str, Any]) -> None:
        r = self.running
        if r is not None and r.beh.get("responses_out_of_order") and resp.get("command") not in ("prompt", "abort"):
            self.held.append(js_dumps(resp))
            return
        self.write(resp)

    def exit(self, code: int) -> None:
        self.writer.drain(EXIT_DRAIN_SECONDS)
        os._exit(code)

    # -- scheduling

    def start_story(self, story: Story) -> None:
        self.stories.append(story)
        if story.faults.terminal.get(0):
            self._terminal(story.faults, 0)
        self.pump()

    def step(self, story: Story, value: Any = None) -> None:
        try:
            action = story.gen.send(value)
        except StopIteration:
            self.story_done(story)
            return
        story.wait = action
        story.deadline = None
        if action[0] == "sleep":
            story.deadline = time.monotonic() + max(0.0, action[1])
        elif action[0] == "ui" and action[2] is not None:
            story.deadline = time.monotonic() + max(0.0, action[2])

    def story_done(self, story: Story) -> None:
        story.done = True
        story.wait = None
        if story in self.stories:
            self.stories.remove(story)
        if story in self.run_queue:
            self.run_queue.remove(story)
        if self.running is story:
            self.running = None
            held, self.held = self.held, []
            for data in reversed(held):
                self.write(data)
            self.grant()

    def grant(self) -> None:
        if self.running is None and self.run_queue:
            nxt = self.run_queue.popleft()
            self.running = nxt
            nxt.wait = None
            nxt.resume_value = None

    def pump(self) -> None:
        """Run every story that can make progress, until none can."""
        progressed = True
        while progressed and not self.dying:
            progressed = False
            now = time.monotonic()
            for story in list(self.stories):
                if story.done:
                    continue
                w = story.wait
                if w is None:
                    value, story.resume_value = story.resume_value, None
                elif story.deadline is not None and now >= story.deadline:
                    value = None
                else:
                    continue
                story.wait = None
                self.step(story, value)
                progressed = True

    def next_deadline(self) -> float | None:
        deadlines = [s.deadline for s in self.stories if s.deadline is not None and not s.done]
        return min(deadlines) if deadlines else None

    # -- main loop

    def stderr_flood(self, lines: int, size: int) -> None:
        """``on_start.stderr_flood``: ``lines`` lines of ``size`` characters, then ``flood done``."""
        pad = "x" * size
        chunk: list[str] = []
        for k in range(1, lines + 1):
            head = f"flood {k}: "
            chunk.append(head + pad[len(head) :] + "\n")
            if len(chunk) == 1000:
                sys.stderr.write("".join(chunk))
                chunk = []
        sys.stderr.write("".join(chunk) + "flood done\n")
        sys.stderr.flush()

    def serve(self) -> None:
        on_start = dict(self.scenario.get("on_start") or {})
        if on_start.get("ignore_sigterm"):
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        for text in on_start.get("stderr") or []:
            log(str(text))
        flood = on_start.get("stderr_flood")
        if flood:
            self.stderr_flood(int(flood.get("lines", 0)), int(flood.get("size", 100)))
        if on_start.get("delay"):
            time.sleep(float(on_start["delay"]))
        for line in list(self.scenario.get("startup") or []) + list(on_start.get("lines") or []):
            self.write(encode_line(line))
        code = on_start.get("exit", self.scenario.get("exit_at_start"))
        if code is not None:
            log(f"exit_at_start {code}")
            self.exit(int(code))
        threading.Thread(target=self.read_stdin, name="reader", daemon=True).start()
        run = on_start.get("run")
        if run:
            beh = dict(BEHAVIOUR_DEFAULTS)
            if isinstance(run, dict):
                beh.update(run)
            self.start_story(Story(self, 0, str(beh.get("text") or "extension says hi"), None, beh, unsolicited=True))
        while True:
            if self.dying:
                # The writer thread exits the process once the lines before the fault are out;
                # if it is stuck on a pipe nobody reads, die anyway.
                time.sleep(1.0)
                if self.dying == "kill":
                    os.kill(os.getpid(), signal.SIGKILL)
                os._exit(self.dying_code)
            deadline = self.next_deadline()
            timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                item = self.inbox.get(timeout=timeout)
            except queue.Empty:
                item = None
            if item is not None:
                self.handle(item)
            self.pump()

    def read_stdin(self) -> None:
        """Reader thread: split stdin on LF only, parse, hand each command to the main loop."""
        buf = bytearray()
        scan = 0
        while True:
            try:
                chunk = os.read(0, 1 << 16)
            except OSError:
                chunk = b""
            if not chunk:
                if buf:
                    self.feed(bytes(buf))
                self.inbox.put(("eof",))
                return
            buf += chunk
            while True:
                i = buf.find(b"\n", scan)
                if i < 0:
                    scan = len(buf)
                    break
                line = bytes(buf[:i])
                del buf[: i + 1]
                scan = 0
                if not self.feed(line):
                    if self.close_stdin:
                        log("close_stdin: stdin closed, no longer reading it")
                        if self.close_exit is not None:
                            time.sleep(self.close_exit[0])
                            self.inbox.put(("die", self.close_exit[1]))
                    else:
                        log("ignore_stdin: no longer reading stdin")
                    threading.Event().wait()

    def feed(self, line: bytes) -> bool:
        """Queue one stdin line for the main loop; False means stop reading stdin."""
        if line.endswith(b"\r"):
            line = line[:-1]
        text = line.decode("utf-8", errors="replace")
        if not text.strip():
            return True
        try:
            obj = js_loads(text)
        except orjson.JSONDecodeError:
            self.inbox.put(("parse_error", text))
            return True
        n = 0
        beh = None
        if isinstance(obj, dict) and obj.get("type") == "prompt":
            self.prompts_seen += 1
            n = self.prompts_seen
            beh = self.behaviour(n)
        if beh and beh.get("close_stdin"):
            self.close_stdin = True
            if beh.get("exit_after_close") is not None:
                self.close_exit = (float(beh["exit_after_close"]), int(beh.get("exit_code", 1)))
            # Closed before the prompt is handled, so any write after its output certainly fails.
            try:
                os.close(0)
            except OSError:
                pass
        self.inbox.put(("cmd", obj, n, beh))
        return not (beh and (beh.get("ignore_stdin") or beh.get("close_stdin")))

    def handle(self, item: tuple) -> None:
        kind = item[0]
        if kind == "eof":
            self.exit(0)
        if kind == "die":
            log(f"exit_after_close: exiting {item[1]}")
            sys.stderr.write(crash_trace("fake engine died after closing its stdin", item[1], "Error"))
            sys.stderr.flush()
            self.exit(item[1])
        if kind == "parse_error":
            self.write(
                {
                    "type": "response",
                    "command": "parse",
                    "success": False,
                    "error": f"Failed to parse command: {v8_parse_error(item[1])}",
                }
            )
            return
        _, obj, n, beh = item
        if obj is None:
            self.dying = "crash"
            self.dying_code = 1
            self.writer.action("exit", (1, crash_trace("Cannot read properties of null (reading 'id')", 1)))
            return
        if not isinstance(obj, dict) or obj.get("type") not in COMMANDS:
            ctype = obj.get("type") if isinstance(obj, dict) else None
            resp: dict[str, Any] = {"type": "response"}
            if ctype is not None:
                resp["command"] = ctype
            resp["success"] = False
            resp["error"] = f"Unknown command: {js_string(ctype)}"
            self.write(resp)
            return
        COMMANDS[obj["type"]](self, obj, n, beh)

    # -- commands

    def cmd_prompt(self, cmd: dict, n: int, beh: dict[str, Any]) -> None:
        message = cmd.get("message")
        if not isinstance(message, str):
            self.write(self.response(cmd, "prompt", False, error="prompt requires a string message"))
            return
        self.start_story(Story(self, n, message, cmd, beh))

    def _enqueue_text(self, cmd: dict, which: str) -> None:
        message = cmd.get("message")
        if not isinstance(message, str):
            self.respond(self.response(cmd, cmd["type"], False, error=f"{cmd['type']} requires a string message"))
            return
        (self.steering if which == "steering" else self.follow_up).append(message)
        self.write(self.queue_update())
        self.respond(self.response(cmd, cmd["type"], True))

    def cmd_steer(self, cmd: dict, n: int, beh: Any) -> None:
        self._enqueue_text(cmd, "steering")

    def cmd_follow_up(self, cmd: dict, n: int, beh: Any) -> None:
        self._enqueue_text(cmd, "follow_up")

    def cmd_clear_queue(self, cmd: dict, n: int, beh: Any) -> None:
        dropped = [s for s in self.run_queue if not s.unsolicited]
        cleared = {
            "steering": list(self.steering),
            "followUp": list(self.follow_up) + [s.message or "" for s in dropped],
        }
        self.steering.clear()
        self.follow_up.clear()
        for s in dropped:
            s.gen.close()
            self.story_done(s)
        self.write(self.queue_update())
        self.respond(self.response(cmd, "clear_queue", True, data={"cleared": cleared}))

    def cmd_abort(self, cmd: dict, n: int, beh: Any) -> None:
        story = self.running
        if story is not None and story.in_run:
            if story.deaf:
                log("abort swallowed (hang: forever)")
                return
            story.gen.close()
            story.abort_tail()
            self.story_done(story)
        self.write(self.response(cmd, "abort", True))

    def cmd_get_state(self, cmd: dict, n: int, beh: Any) -> None:
        streaming = self.running is not None and self.running.in_run
        pending = len(self.steering) + len(self.follow_up) + sum(1 for s in self.run_queue if not s.unsolicited)
        data = {
            "model": {"provider": "fake", "id": "fake-model"},
            "thinkingLevel": "off",
            "isStreaming": streaming,
            "isCompacting": False,
            "steeringMode": "all",
            "followUpMode": "all",
            "sessionId": "fake",
            "autoCompactionEnabled": False,
            "messageCount": self.message_count,
            "pendingMessageCount": pending,
        }
        data.update(self.scenario.get("state") or {})
        self.respond(self.response(cmd, "get_state", True, data=data))

    def cmd_get_commands(self, cmd: dict, n: int, beh: Any) -> None:
        self.respond(
            self.response(cmd, "get_commands", True, data={"commands": list(self.scenario.get("commands") or [])})
        )

    def cmd_extension_ui_response(self, cmd: dict, n: int, beh: Any) -> None:
        for story in self.stories:
            if story.wait and story.wait[0] == "ui" and story.wait[1] == cmd.get("id"):
                story.wait = None
                story.deadline = None
                story.resume_value = cmd
                return
        log(f"extension_ui_response for unknown id {cmd.get('id')!r} ignored")

    def cmd_simple(self, cmd: dict, n: int, beh: Any) -> None:
        ctype = cmd["type"]
        data: Any = SIMPLE_COMMANDS.get(ctype)
        if ctype == "get_available_models" and "models" in self.scenario:
            data = {"models": list(self.scenario["models"] or [])}
        elif ctype == "get_messages":
            data = {"messages": []}
        elif ctype == "get_last_assistant_text":
            data = {"text": self.last_assistant_text}
        elif ctype == "get_session_stats":
            data = {
                "sessionId": "fake",
                "userMessages": 0,
                "assistantMessages": 0,
                "toolCalls": 0,
                "toolResults": 0,
                "totalMessages": self.message_count,
                "tokens": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "total": 0},
                "cost": 0,
            }
        self.respond(self.response(cmd, ctype, True, data=data))


COMMANDS = {
    "prompt": Engine.cmd_prompt,
    "steer": Engine.cmd_steer,
    "follow_up": Engine.cmd_follow_up,
    "clear_queue": Engine.cmd_clear_queue,
    "abort": Engine.cmd_abort,
    "get_state": Engine.cmd_get_state,
    "get_commands": Engine.cmd_get_commands,
    "extension_ui_response": Engine.cmd_extension_ui_response,
    **{
        name: Engine.cmd_simple
        for name in list(SIMPLE_COMMANDS) + ["get_messages", "get_last_assistant_text", "get_session_stats"]
    },
}


# --------------------------------------------------------------------------------------------
# Transcript replay.

TRANSCRIPT_IGNORED = frozenset({"release", "stderr", "exit", "note", "receipt", "signal"})


def load_transcript(path: str) -> tuple[list[list[bytes]], list[Any]]:
    """The recorded engine lines, cut at every ``send``: chunks[0] before the first send,
    chunks[k] after the k-th; and the sends themselves."""
    with open(path, "rb") as f:
        raw = f.read()
    lines = raw.split(b"\n")
    try:
        header = orjson.loads(lines[0])
    except orjson.JSONDecodeError:
        header = None
    if not isinstance(header, dict) or header.get("transcript") != "pi-bridge":
        die(f"{path}:1: not a pi-bridge transcript header")
    if header.get("version") != 1:
        die(f"{path}:1: transcript version {header.get('version')!r} is not supported (this replayer reads version 1)")
    chunks: list[list[bytes]] = [[]]
    sends: list[Any] = []
    for lineno, line in enumerate(lines[1:], start=2):
        if line.endswith(b"\r"):
            line = line[:-1]
        if not line.strip():
            continue
        try:
            rec = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            die(f"{path}:{lineno}: not JSON ({exc})")
        if not isinstance(rec, dict):
            die(f"{path}:{lineno}: not a transcript record")
        kinds = [k for k in rec if k not in ("t", "i")]
        if len(kinds) != 1:
            die(f"{path}:{lineno}: expected exactly one kind, got {kinds}")
        kind = kinds[0]
        if kind == "send":
            sends.append(rec["send"])
            chunks.append([])
        elif kind == "recv":
            chunks[-1].append(orjson.dumps(rec["recv"]))
        elif kind == "recv_raw":
            chunks[-1].append(str(rec["recv_raw"]).encode("utf-8", errors="replace"))
        elif kind not in TRANSCRIPT_IGNORED:
            die(f"{path}:{lineno}: unknown transcript kind {kind!r}")
    return chunks, sends


def replay_transcript(path: str) -> None:
    try:
        chunks, sends = load_transcript(path)
    except OSError as exc:
        die(f"cannot read transcript {path}: {exc}")
    log(f"replaying transcript {path}: {len(sends)} sends")
    writer = Writer(1)

    def write_chunk(k: int) -> None:
        for data in chunks[k]:
            writer.line(data)

    write_chunk(0)
    k = 0
    buf = b""
    while True:
        try:
            chunk = os.read(0, 1 << 16)
        except OSError:
            chunk = b""
        if not chunk:
            lines = [buf] if buf else []
            buf = b""
        else:
            buf += chunk
            *lines, buf = buf.split(b"\n")
        for line in lines:
            if line.endswith(b"\r"):
                line = line[:-1]
            if not line.strip():
                continue
            k += 1
            if k > len(sends):
                log(f"warning: command {k} arrived after the transcript's last send; ignored")
                continue
            try:
                got = orjson.loads(line)
            except orjson.JSONDecodeError:
                got = None
            want = sends[k - 1]
            got_type = got.get("type") if isinstance(got, dict) else None
            want_type = want.get("type") if isinstance(want, dict) else None
            if got_type != want_type:
                log(f"warning: command {k} has type {got_type!r}, the transcript sent {want_type!r}")
            write_chunk(k)
        if not chunk:
            writer.drain(EXIT_DRAIN_SECONDS)
            os._exit(0)


# --------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="A scripted fake engine speaking Pi 1.6.0 RPC JSONL.")
    src = parser.add_mutually_exclusive_group()
    src.add_argument("--scenario", metavar="FILE", help="scenario JSON file")
    src.add_argument("--scenario-json", metavar="JSON", help="scenario JSON text")
    src.add_argument("--transcript", metavar="FILE", help="replay a pi-bridge transcript v1")
    parser.add_argument("--seed", type=int, default=0, help="seed for random_faults (default 0)")
    args = parser.parse_args(argv)

    signal.signal(signal.SIGINT, signal.SIG_DFL)
    faulthandler.register(signal.SIGUSR1)  # a stack dump on demand, for debugging a wedged run
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    log(f"pi RPC test double (speaks pi {PI_VERSION} rpc), pid {os.getpid()}")

    if args.transcript:
        replay_transcript(args.transcript)
        return
    scenario: dict[str, Any] = {}
    source = "default"
    try:
        if args.scenario:
            with open(args.scenario, "rb") as f:
                scenario = js_loads(f.read().decode("utf-8"))
            source = args.scenario
        elif args.scenario_json:
            scenario = js_loads(args.scenario_json)
            source = "--scenario-json"
    except (OSError, UnicodeDecodeError, orjson.JSONDecodeError) as exc:
        die(f"bad scenario: {exc}")
    if not isinstance(scenario, dict):
        die("bad scenario: not a JSON object")
    log(f"scenario {source}, seed {args.seed}; ready for commands on stdin")
    Engine(scenario, args.seed).serve()


if __name__ == "__main__":
    main()
