#!/usr/bin/env python3
"""A stream-serving engine for ``tools/bench/bench``: Pi 1.6.0's RPC over a real pipe, as fast as the pipe takes it.

It builds one test stream once (in memory, or loads one written earlier with ``--write``), then
serves it: for every ``prompt`` command read on stdin it writes the ack (with the prompt's id),
the whole stream, and a closing ``agent_settled`` line stamped with the wall clock at the moment
it is written::

    {"type":"agent_settled","aborted":false,"benchT":<time.time()>,"benchM":<time.monotonic()>}

so a reader in the same clock domain can measure settle latency (engine writes the line ->
the controller has the receipt). A prompt whose message is ``warmup`` gets a tiny complete run
instead (so a bridge can spawn the engine and warm up before the measured prompt). Also answered,
Pi-style: ``get_state`` (idle), ``get_commands`` (none), ``abort`` (success), anything else
(``Unknown command``, no id, like Pi). stdin EOF: close stdout and exit at once (``os._exit``, no
interpreter teardown of a multi-GB buffer). When the stream is loaded it prints
``bench-engine: ready BYTES LINES`` on stderr. Standalone: Python 3.11 stdlib + orjson.

Streams (every line shape copied from ``tools/pi/captures/*.jsonl``, Pi 1.6.0):

``pi16``    Pi 1.6: long replies of short ``message_update`` text deltas (~297 B each, exactly
            the capture's ``usage`` + ``assistantMessageEvent`` shape), ``--deltas-per-turn`` per
            assistant message; turns chained by a small ``bash`` tool call (toolcall_* updates,
            tool_execution_*, a toolResult message); each run framed as Pi frames it: agent_start,
            turn_start, the system and user messages, ..., message_end / turn_end with the whole
            message, agent_end with the run's whole message list. ``--lines`` lines in all.
``tools``   tool-heavy: each turn a short reply and one ``bash`` call whose
            ``tool_execution_update`` lines carry the accumulated output (grows ~1 KiB per update,
            capped at Pi's 50 KiB tail with ``details.truncation`` like Pi's bash tool). ``--mb``.
``legacy``  older engines: every ``message_update`` carries the whole partial message so far, in
            ``message`` and again in ``assistantMessageEvent.partial`` (quadratic bytes). ``--mb``.

Usage::

    bench_engine.py --gen pi16 --lines 500000          # generate, then serve
    bench_engine.py --gen tools --mb 150 --write F     # generate into F and exit (prints BYTES LINES)
    bench_engine.py --load F                           # serve the stream in F
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

import orjson

ROOT = Path(__file__).resolve().parents[2]
CAPTURE = ROOT / "tools" / "pi" / "captures" / "tool_call.jsonl"

# -- line shapes (Pi 1.6.0, from the captures) -------------------------------------------------

USAGE_ZERO = {
    "input": 0,
    "output": 0,
    "cacheRead": 0,
    "cacheWrite": 0,
    "totalTokens": 0,
    "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "total": 0},
}


def usage(inp: int, out: int) -> dict[str, Any]:
    return {
        "input": inp,
        "output": out,
        "cacheRead": 0,
        "cacheWrite": 0,
        "reasoning": 0,
        "totalTokens": inp + out,
        "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "total": 0, "totalFromProvider": False},
    }


def _capture_objects() -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """The system message and the get_state data Pi 1.6.0 wrote in the tool_call capture."""
    system = state = None
    try:
        with open(CAPTURE, "rb") as f:
            for line in f:
                obj = orjson.loads(line)
                if obj.get("type") == "message_start" and obj["message"].get("role") == "system":
                    system = obj["message"]
                elif obj.get("command") == "get_state" and state is None:
                    state = obj.get("data")
    except (OSError, ValueError):
        pass
    return system, state


SYSTEM, STATE = _capture_objects()
if SYSTEM is None:
    SYSTEM = {
        "role": "system",
        "content": "",
        "sections": {"preamble": "You are a coding assistant."},
        "timestamp": 1795976470400,
    }
if STATE is None:
    STATE = {
        "thinkingLevel": "off",
        "isStreaming": False,
        "isCompacting": False,
        "steeringMode": "one-at-a-time",
        "followUpMode": "one-at-a-time",
        "sessionId": "bench",
        "autoCompactionEnabled": True,
        "messageCount": 0,
        "pendingMessageCount": 0,
    }

#: Reply text the deltas are cut from: prose, code, a newline now and then, quotes, and a
#: little non-ASCII (as real replies have; it exercises the UTF-8 checks of a reader).
CORPUS = (
    "The function reads the whole file into memory before it splits the lines, so a large "
    "journal costs as much memory as it has bytes. Here is a version that streams instead:\n\n"
    '```python\ndef read_lines(path):\n    with open(path, "rb") as f:\n        for line in f:\n'
    '            yield line.rstrip(b"\\n")\n```\n\nIt keeps one line at a time — the résumé of '
    "the change is in the commit message. Tests pass (42 passed, 0 failed) and the naïve "
    "benchmark shows a 3× speed-up on the 2 GB file. "
)

T0_MS = 1795976470400


class Builder:
    """Accumulates serialised lines (bytes, LF-terminated) and counts them."""

    def __init__(self) -> None:
        self.parts: list[bytes] = []
        self.size = 0
        self.lines = 0
        self.ts = T0_MS
        self.resp = 0
        self.call = 0
        self.corpus_pos = 0

    def emit(self, obj: Any) -> None:
        data = orjson.dumps(obj) + b"\n"
        self.parts.append(data)
        self.size += len(data)
        self.lines += 1

    def tick(self) -> int:
        self.ts += 7
        return self.ts

    def text(self, n: int) -> str:
        """The next ``n`` characters of the corpus (wrapping)."""
        c = CORPUS
        p = self.corpus_pos % len(c)
        out = c[p : p + n]
        while len(out) < n:
            out += c[: n - len(out)]
        self.corpus_pos = p + n
        return out

    def bytes(self) -> bytes:
        return b"".join(self.parts)

    # -- messages ---------------------------------------------------------------

    def assistant(self, content: list[Any], stop: str, out_tokens: int) -> dict[str, Any]:
        self.resp += 1
        return {
            "role": "assistant",
            "content": content,
            "api": "openai-completions",
            "provider": "scripted",
            "model": "scripted-model",
            "usage": usage(604, out_tokens),
            "stopReason": stop,
            "timestamp": self.tick(),
            "responseId": f"chatcmpl-scripted-{self.resp}",
            "rawStopReason": "tool_calls" if stop == "toolUse" else "stop",
            "durationMs": 23,
            "thinkingLevel": "off",
        }

    def assistant_start(self) -> None:
        self.emit(
            {
                "type": "message_start",
                "message": {
                    "role": "assistant",
                    "content": [],
                    "api": "openai-completions",
                    "provider": "scripted",
                    "model": "scripted-model",
                    "usage": USAGE_ZERO,
                    "stopReason": "pending",
                    "timestamp": self.tick(),
                },
            }
        )

    def run_start(self, prompt: str) -> list[dict[str, Any]]:
        self.emit({"type": "agent_start"})
        self.emit({"type": "turn_start"})
        self.emit({"type": "message_start", "message": SYSTEM})
        self.emit({"type": "message_end", "message": SYSTEM})
        user = {"role": "user", "content": [{"type": "text", "text": prompt}], "timestamp": self.tick()}
        self.emit({"type": "message_start", "message": user})
        self.emit({"type": "message_end", "message": user})
        return [SYSTEM, user]

    def text_deltas(self, n: int, shape: str, step: int = 8) -> str:
        """``text_start``, ``n`` deltas, ``text_end``; returns the message text."""
        self.emit(
            {
                "type": "message_update",
                "usage": USAGE_ZERO,
                "assistantMessageEvent": {"type": "text_start", "contentIndex": 0},
            }
        )
        text = ""
        u = usage(604, 7)
        for k in range(n):
            piece = self.text(step)
            text += piece
            if shape == "legacy":
                partial = {
                    "role": "assistant",
                    "content": [{"type": "text", "text": text}],
                    "api": "openai-completions",
                    "provider": "scripted",
                    "model": "scripted-model",
                    "usage": usage(604, k + 1),
                    "stopReason": "stop",
                    "timestamp": self.ts,
                }
                self.emit(
                    {
                        "type": "message_update",
                        "message": partial,
                        "assistantMessageEvent": {
                            "type": "text_delta",
                            "contentIndex": 0,
                            "delta": piece,
                            "partial": partial,
                        },
                    }
                )
            else:
                if k % 4 == 0:
                    u = usage(604, 7 + k // 4)
                self.emit(
                    {
                        "type": "message_update",
                        "usage": u,
                        "assistantMessageEvent": {"type": "text_delta", "contentIndex": 0, "delta": piece},
                    }
                )
        self.emit(
            {
                "type": "message_update",
                "usage": usage(604, 7 + n // 4),
                "assistantMessageEvent": {"type": "text_end", "contentIndex": 0, "content": text},
            }
        )
        return text

    def tool_call(self, heavy: bool) -> tuple[dict[str, Any], dict[str, Any]]:
        """The toolcall_* updates; after the assistant's message_end the caller runs
        :meth:`tool_exec`. Returns (toolCall content item, args)."""
        self.call += 1
        cid = f"call_scripted_{self.call}_0"
        args = {"command": f"pytest -x tests/test_{self.call}.py" if heavy else "echo hi"}
        u = usage(607, 5)
        self.emit(
            {
                "type": "message_update",
                "usage": USAGE_ZERO,
                "assistantMessageEvent": {"type": "toolcall_start", "contentIndex": 1, "id": cid, "toolName": "bash"},
            }
        )
        js = orjson.dumps(args).decode()
        for k in range(0, len(js), 8):
            self.emit(
                {
                    "type": "message_update",
                    "usage": u,
                    "assistantMessageEvent": {"type": "toolcall_delta", "contentIndex": 1, "delta": js[k : k + 8]},
                }
            )
        call = {"type": "toolCall", "id": cid, "name": "bash", "arguments": args}
        self.emit(
            {
                "type": "message_update",
                "usage": u,
                "assistantMessageEvent": {"type": "toolcall_end", "contentIndex": 1, "toolCall": call},
            }
        )
        return call, args

    def tool_exec(self, call: dict[str, Any], updates: int, grow: int) -> dict[str, Any]:
        """tool_execution_start, updates with accumulated output (Pi's 50 KiB tail), _end, and
        the toolResult message; returns the toolResult message."""
        cid, args = call["id"], call["arguments"]
        self.emit({"type": "tool_execution_start", "toolCallId": cid, "toolName": "bash", "args": args})
        self.emit(
            {
                "type": "tool_execution_update",
                "toolCallId": cid,
                "toolName": "bash",
                "args": args,
                "partialResult": {"content": []},
            }
        )
        lines: list[str] = []
        total = 0
        text = "hi\n"
        details: dict[str, Any] = {}
        for u in range(updates):
            added = 0
            while added < grow:
                ln = f"tests/test_{self.call}.py::test_case_{len(lines):05d} PASSED  [{(u * 100) // max(updates, 1):3d}%] {self.text(24)}"
                lines.append(ln)
                added += len(ln) + 1
            total += added
            # Pi's bash tool keeps the last 2000 lines / 50 KiB (truncate.js DEFAULT_MAX_*).
            keep: list[str] = []
            size = 0
            for ln in reversed(lines[-2000:]):
                if size + len(ln) + 1 > 50 * 1024:
                    break
                keep.append(ln)
                size += len(ln) + 1
            keep.reverse()
            text = "\n".join(keep) + "\n"
            if len(keep) < len(lines):
                details = {
                    "truncation": {
                        "truncated": True,
                        "truncatedBy": "bytes",
                        "totalLines": len(lines),
                        "totalBytes": total,
                        "outputLines": len(keep),
                        "outputBytes": size,
                        "lastLinePartial": False,
                        "firstLineExceedsLimit": False,
                        "maxLines": 2000,
                        "maxBytes": 51200,
                    },
                    "fullOutputPath": f"/tmp/pi-bash-{self.call:08x}.log",
                }
            self.emit(
                {
                    "type": "tool_execution_update",
                    "toolCallId": cid,
                    "toolName": "bash",
                    "args": args,
                    "partialResult": {"content": [{"type": "text", "text": text}], "details": details},
                }
            )
        if not updates:
            self.emit(
                {
                    "type": "tool_execution_update",
                    "toolCallId": cid,
                    "toolName": "bash",
                    "args": args,
                    "partialResult": {"content": [{"type": "text", "text": text}], "details": {}},
                }
            )
        self.emit(
            {
                "type": "tool_execution_end",
                "toolCallId": cid,
                "toolName": "bash",
                "result": {
                    "content": [{"type": "text", "text": text}],
                    "structuredContent": {
                        "output": text,
                        "truncated": bool(details),
                        "exit_code": 0,
                        "wall_time_seconds": 0,
                    },
                },
                "isError": False,
                "durationMs": 7,
            }
        )
        tr = {
            "role": "toolResult",
            "toolCallId": cid,
            "toolName": "bash",
            "content": [{"type": "text", "text": text}],
            "isError": False,
            "durationMs": 7,
            "timestamp": self.tick(),
        }
        self.emit({"type": "message_start", "message": tr})
        self.emit({"type": "message_end", "message": tr})
        return tr


def build(
    kind: str,
    *,
    lines: int = 500_000,
    mb: float = 150.0,
    deltas_per_turn: int = 5000,
    legacy_deltas: int = 1500,
    tool_updates: int = 120,
    tool_grow: int = 1024,
) -> bytes:
    """One run's lines after the ack (everything but ``agent_settled``)."""
    b = Builder()
    messages = b.run_start("bench: stream a long answer")
    target_bytes = int(mb * 1024 * 1024)

    def done() -> bool:
        if kind == "pi16":
            return b.lines + deltas_per_turn // 8 >= lines
        return b.size >= target_bytes

    turn = 0
    while True:
        turn += 1
        if turn > 1:
            b.emit({"type": "turn_start"})
        b.assistant_start()
        if kind == "pi16":
            n = max(1, min(deltas_per_turn, lines - b.lines - 40))
            text = b.text_deltas(n, "pi16")
        elif kind == "legacy":
            text = b.text_deltas(legacy_deltas, "legacy")
        else:
            text = b.text_deltas(20, "pi16")
        last = done()
        content: list[Any] = [{"type": "text", "text": text}]
        if not last:
            call, _ = b.tool_call(heavy=kind == "tools")
            content.append(call)
        am = b.assistant(content, "stop" if last else "toolUse", len(text) // 4)
        b.emit({"type": "message_end", "message": am})
        messages.append(am)
        results: list[Any] = []
        if not last:
            if kind == "tools":
                tr = b.tool_exec(call, tool_updates, tool_grow)
            else:
                tr = b.tool_exec(call, 1, 3)
            messages.append(tr)
            results.append(tr)
        b.emit({"type": "turn_end", "message": am, "toolResults": results})
        if last:
            break
    b.emit({"type": "agent_end", "messages": messages, "willRetry": False})
    return b.bytes()


def warmup_run() -> bytes:
    b = Builder()
    messages = b.run_start("warmup")
    b.assistant_start()
    text = b.text_deltas(2, "pi16")
    am = b.assistant([{"type": "text", "text": text}], "stop", 2)
    b.emit({"type": "message_end", "message": am})
    messages.append(am)
    b.emit({"type": "turn_end", "message": am, "toolResults": []})
    b.emit({"type": "agent_end", "messages": messages, "willRetry": False})
    return b.bytes()


# -- serving ------------------------------------------------------------------------------------


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def settled_line() -> bytes:
    # benchM: CLOCK_MONOTONIC, which every process on the machine shares (the readers' settle
    # latency is measured on it; Node's performance.timeOrigin is ms off the wall clock).
    return b'{"type":"agent_settled","aborted":false,"benchT":%.6f,"benchM":%.6f}\n' % (time.time(), time.monotonic())


def serve(body: bytes) -> None:
    warm = warmup_run()
    stdin = os.fdopen(0, "rb", buffering=1 << 16)
    out = 1
    for raw in stdin:
        raw = raw.strip()
        if not raw:
            continue
        try:
            cmd = orjson.loads(raw)
        except orjson.JSONDecodeError as e:
            write_all(
                out,
                orjson.dumps(
                    {"type": "response", "command": "parse", "success": False, "error": f"Failed to parse command: {e}"}
                )
                + b"\n",
            )
            continue
        kind = cmd.get("type") if isinstance(cmd, dict) else None
        cid = cmd.get("id") if isinstance(cmd, dict) else None
        head: dict[str, Any] = {"id": cid} if cid is not None else {}
        if kind == "prompt":
            ack = {**head, "type": "response", "command": "prompt", "success": True, "data": {"disposition": "started"}}
            write_all(out, orjson.dumps(ack) + b"\n")
            write_all(out, warm if cmd.get("message") == "warmup" else body)
            write_all(out, settled_line())
        elif kind == "get_state":
            write_all(
                out,
                orjson.dumps({**head, "type": "response", "command": "get_state", "success": True, "data": STATE})
                + b"\n",
            )
        elif kind == "get_commands":
            write_all(
                out,
                orjson.dumps(
                    {**head, "type": "response", "command": "get_commands", "success": True, "data": {"commands": []}}
                )
                + b"\n",
            )
        elif kind in ("abort", "clear_queue"):
            resp: dict[str, Any] = {**head, "type": "response", "command": kind, "success": True}
            if kind == "clear_queue":
                write_all(out, b'{"type":"queue_update","steering":[],"followUp":[]}\n')
                resp["data"] = {"cleared": {"steering": [], "followUp": []}}
            write_all(out, orjson.dumps(resp) + b"\n")
        else:
            write_all(
                out,
                orjson.dumps(
                    {"type": "response", "command": kind, "success": False, "error": f"Unknown command: {kind}"}
                )
                + b"\n",
            )
    os.close(out)
    os._exit(0)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--gen", choices=("pi16", "tools", "legacy"))
    p.add_argument("--load", metavar="FILE", help="serve the stream in FILE (written by --write)")
    p.add_argument("--write", metavar="FILE", help="write the generated stream to FILE and exit")
    p.add_argument("--lines", type=int, default=500_000, help="pi16: lines in the stream (default 500000)")
    p.add_argument("--mb", type=float, default=150.0, help="tools/legacy: MiB in the stream (default 150)")
    p.add_argument("--deltas-per-turn", type=int, default=5000, help="pi16: text deltas per assistant message")
    p.add_argument("--legacy-deltas", type=int, default=1500, help="legacy: deltas per assistant message")
    a = p.parse_args(argv)
    if a.load:
        with open(a.load, "rb") as f:
            body = f.read()
    elif a.gen:
        body = build(a.gen, lines=a.lines, mb=a.mb, deltas_per_turn=a.deltas_per_turn, legacy_deltas=a.legacy_deltas)
    else:
        p.error("give --gen KIND or --load FILE")
    if a.write:
        tmp = a.write + ".tmp"
        with open(tmp, "wb") as f:
            f.write(body)
        os.replace(tmp, a.write)
        print(len(body), body.count(b"\n"))
        return 0
    nl = body.count(b"\n")
    sys.stderr.write(f"bench-engine: ready {len(body)} {nl}\n")
    sys.stderr.flush()
    serve(body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
