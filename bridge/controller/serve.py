"""``bridge serve``: the controller protocol over JSONL on stdin/stdout (SPEC §7).

In (one JSON object per line)::

    {"type":"prompt","id":ID,"message":TEXT, "stream"?:bool, "timeout"?:seconds, "images"?:[...]}
    {"type":"stop","id":ID}
    {"type":"status"}
    {"type":"shutdown"}

Out (one JSON object per line)::

    {"type":"ready","version":V,"journal":PATH|null,"engine":{...header...}}
    {"type":"receipt","id":ID,"receipt":{...}}          exactly one per accepted prompt id
    {"type":"signal","signal":...,...}                  overlaps, gaps, seal diagnostics, as they happen
    {"type":"text","id":ID,"text":...}                  streamed reply text ("stream": true)
    {"type":"engine","event":"started"|"exited"|"down",...}
    {"type":"progress","event":"retrying","id":ID,...}  the engine retries the running prompt itself
    {"type":"stopping","id":ID,"stop":STOP_ID|null}     answer to a stop
    {"type":"status",...}                               answer to a status
    {"type":"error","error":WHAT,"line":N,"id"?:ID}     a bad controller line (the bridge keeps running)
    {"type":"bye","receipts":N}                         last line before exit 0

Rules:

- A prompt is *accepted* when its line is valid and its id is new; from then on
  its receipt is owed, whatever happens. Ids are non-empty strings, unique for
  the whole session (a duplicate is an error and is not accepted).
- stdin EOF or ``shutdown``: no new prompts; every outstanding prompt runs to
  its receipt (``--drain-timeout`` bounds that: past it, the running prompt is
  stopped, ``failed``/``timeout``, and the queued ones are rejected
  ``closing``); then the engine is stopped and the bridge exits 0.
- After ``shutdown`` the bridge keeps reading until EOF or its exit: ``status``
  is answered, ``stop`` honoured, a new ``prompt`` gets ``rejected``/``closing``,
  a second ``shutdown`` changes nothing.
- SIGINT / SIGTERM / SIGHUP: closing at once (nothing queued is written; the
  running prompt is stopped, ``failed``/``closing``), exit 130 / 143 / 129.
- The journal cannot be written (a full disk): the controller gets a
  ``journal-failed`` signal at once, the bridge closes as for a signal (every
  accepted prompt still gets its receipt here), and exits 1 with one line on
  stderr.
- Output is written by one task from an unbounded queue, so a controller that
  reads slowly never stalls the engine's stream (it costs memory instead).
"""

from __future__ import annotations

import math
import os
import signal
import sys
from typing import Any

import trio

from bridge import __version__
from bridge.core.framing import DEFAULT_MAX_LINE, LineSplitter, Oversize, RawLine, parse_line
from bridge.live.api import open_bridge
from bridge.live.supervisor import Bridge, BridgeConfig
from bridge.profiles.command import EngineProfile
from bridge.transcript import dumps


class ControllerError(Exception):
    """A controller line the bridge cannot take; the message says why."""


def parse_command(line: bytes | Oversize) -> dict[str, Any]:
    """Validate one controller line. Raises :class:`ControllerError`."""
    value = parse_line(line)
    if isinstance(value, RawLine):
        if value.why == "oversize":
            raise ControllerError(f"line too long ({value.length} bytes)")
        if value.why == "invalid-utf8":
            raise ControllerError("line is not valid UTF-8")
        if value.why == "not-object":
            raise ControllerError("line is JSON but not an object")
        raise ControllerError("line is not JSON")
    kind = value.get("type")
    if kind not in ("prompt", "stop", "status", "shutdown"):
        if kind is None:
            raise ControllerError('missing "type"')
        raise ControllerError(f"unknown type {kind!r} (expected prompt, stop, status or shutdown)")
    if kind in ("prompt", "stop"):
        rid = value.get("id")
        if rid is None:
            raise ControllerError(f'{kind} needs an "id"')
        if not isinstance(rid, str) or not rid:
            raise ControllerError('"id" must be a non-empty string')
    if kind == "prompt":
        message = value.get("message")
        if not isinstance(message, str):
            raise ControllerError('prompt needs a "message" string')
        if "stream" in value and not isinstance(value["stream"], bool):
            raise ControllerError('"stream" must be true or false')
        timeout = value.get("timeout")
        if timeout is not None and (
            isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0 or timeout == math.inf
        ):
            raise ControllerError('"timeout" must be a positive number of seconds')
        images = value.get("images")
        if images is not None and not isinstance(images, list):
            raise ControllerError('"images" must be a list')
    return value


class _Output:
    """One writer for stdout: notifications are queued, never block the bridge."""

    def __init__(self, fd: int) -> None:
        self._stream = trio.lowlevel.FdStream(os.dup(fd))
        self._send, self._recv = trio.open_memory_channel[bytes](math.inf)
        self.broken = False
        #: Set when everything queued is written (or the controller is gone).
        self.done = trio.Event()

    def put(self, note: dict[str, Any]) -> None:
        try:
            self._send.send_nowait(dumps(note) + b"\n")
        except trio.ClosedResourceError:
            pass

    def close(self) -> None:
        self._send.close()

    async def run(self) -> None:
        """Write queued lines. Ends when the queue is closed and written out."""
        try:
            await self._write_all()
        finally:
            self.done.set()

    async def _write_all(self) -> None:
        async with self._recv:
            async for data in self._recv:
                batch = [data]
                while True:
                    try:
                        batch.append(self._recv.receive_nowait())
                    except (trio.WouldBlock, trio.EndOfChannel):
                        break
                if self.broken:
                    continue
                try:
                    await self._stream.send_all(b"".join(batch))
                except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                    self.broken = True  # the controller went away; receipts are still journaled
        try:
            await self._stream.aclose()
        except OSError:
            pass


async def serve(
    profile: EngineProfile,
    *,
    journal: Any = True,
    config: BridgeConfig | None = None,
    drain_timeout: float | None = None,
    stdin_fd: int = 0,
    stdout_fd: int = 1,
) -> int:
    out = _Output(stdout_fd)
    status = 0
    opened: list[Bridge] = []
    # Signals are ours from the first line to ``bye``: one that comes while the
    # bridge is already closing (or after it closed) changes nothing, instead of
    # killing the process before the last receipts and ``bye`` are written. The
    # receiver restores what was there before it, so SIGTERM and SIGHUP are set
    # to be ignored first: after ``bye`` (until the exit, and through the
    # interpreter's own shutdown) there is nothing left for them to stop.
    # (Engines are spawned while the receiver's handler is in place, so they
    # start with the default dispositions.)
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, signal.SIG_IGN)
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM, signal.SIGHUP) as signals:
        async with trio.open_nursery() as outer:
            outer.start_soon(out.run)

            async def watch_signals() -> None:
                nonlocal status
                async for signum in signals:
                    bridge = opened[0] if opened else None
                    if bridge is None or not bridge.lifecycle.state.closed:
                        status = status or 128 + signum
                    if bridge is not None:
                        bridge.close_on_signal(signum)

            outer.start_soon(watch_signals)
            try:
                async with open_bridge(profile, journal=journal, config=config) as bridge:
                    opened.append(bridge)
                    bridge.listeners.append(out.put)
                    out.put(
                        {
                            "type": "ready",
                            "version": __version__,
                            "journal": str(bridge.journal.path) if bridge.journal is not None else None,
                        }
                    )
                    if status:  # a signal came while the bridge was opening
                        bridge.close_on_signal(status - 128)
                    await _serve_loop(bridge, out, stdin_fd, drain_timeout)
            finally:
                out.put({"type": "bye", "receipts": opened[0].receipts_issued if opened else 0})
                out.close()
            with trio.CancelScope(shield=True):
                await out.done.wait()
            outer.cancel_scope.cancel()
    if opened and opened[0].journal_failed:
        print(f"bridge serve: {opened[0].journal_failed}; every receipt went to the controller", file=sys.stderr)
        return status or 1
    return status


async def _serve_loop(bridge: Bridge, out: _Output, stdin_fd: int, drain_timeout: float | None) -> None:
    """Run until the bridge has closed: after EOF or ``shutdown`` has drained, or
    at once on a signal (or a journal failure). stdin is read until then."""
    async with trio.open_nursery() as nursery:

        async def read_controller() -> None:
            await _read_controller(bridge, out, stdin_fd, drain_timeout)
            bridge.shutdown(drain_timeout)  # EOF

        nursery.start_soon(read_controller)
        await bridge.wait_closed()
        nursery.cancel_scope.cancel()


async def _read_controller(bridge: Bridge, out: _Output, stdin_fd: int, drain_timeout: float | None) -> None:
    """Read controller lines until EOF (also after ``shutdown``)."""
    stream = trio.lowlevel.FdStream(os.dup(stdin_fd))
    splitter = LineSplitter(DEFAULT_MAX_LINE)
    lineno = 0
    async with stream:
        while True:
            try:
                data = await stream.receive_some(256 * 1024)
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                data = b""
            lines = splitter.feed(data) if data else splitter.close()
            for line in lines:
                lineno += 1
                if isinstance(line, bytes) and not line.strip():
                    continue
                await _take(bridge, out, line, lineno, drain_timeout)
            if not data:
                return


async def _take(bridge: Bridge, out: _Output, line: bytes | Oversize, lineno: int, drain_timeout: float | None) -> None:
    """Act on one controller line."""
    try:
        cmd = parse_command(line)
    except ControllerError as e:
        note: dict[str, Any] = {"type": "error", "error": str(e), "line": lineno}
        out.put(note)
        return
    kind = cmd["type"]
    if kind == "prompt":
        rid = cmd["id"]
        if bridge.knows(rid):
            out.put(
                {
                    "type": "error",
                    "error": f"duplicate id {rid!r}: already used in this session",
                    "line": lineno,
                    "id": rid,
                }
            )
            return
        await bridge.submit(
            cmd["message"],
            request=rid,
            stream=bool(cmd.get("stream", False)),
            timeout=cmd.get("timeout"),
            images=cmd.get("images"),
        )
    elif kind == "stop":
        rid = cmd["id"]
        if not bridge.knows(rid):
            out.put({"type": "error", "error": f"unknown id {rid!r}: no such prompt", "line": lineno, "id": rid})
            return
        stop = await bridge.stop(rid)
        out.put({"type": "stopping", "id": rid, "stop": stop})
    elif kind == "status":
        out.put({"type": "status", **bridge.status()})
    elif kind == "shutdown":
        bridge.shutdown(drain_timeout)


def main_serve(profile: EngineProfile, *, journal: Any, config: BridgeConfig, drain_timeout: float | None) -> int:
    try:
        return trio.run(lambda: serve(profile, journal=journal, config=config, drain_timeout=drain_timeout))
    except KeyboardInterrupt:
        return 130
    finally:
        sys.stdout.flush()
