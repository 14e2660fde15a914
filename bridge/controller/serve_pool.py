"""``bridge serve --engines N``: the controller protocol (SPEC §7) over a pool of N engines
(:mod:`bridge.live.pool`) instead of one bridge.

The same lines in and out as :mod:`bridge.controller.serve`, with these differences:

- A prompt may carry ``"conversation": KEY``: the prompts with one key run on one engine, in
  order, each reading the ones before it; a prompt without one starts afresh (no prompt reads
  another's context). Prompts run side by side, one per engine.
- Every line an engine's bridge writes (its receipts, signals, lifecycle, text, events) carries
  ``"engine": N``, the engine's number (its journal is named for it); the pool's own lines are
  ``{"type": "pool", "event": ...}`` (an engine started, stopped, reaped, down; a conversation
  lost), and a prompt the pool rejects itself (queue full, closing, no engine) gets its receipt
  without an ``engine``.
- ``ready``'s ``journal`` is the journals' folder (each engine writes its own file in it).
- ``{"type": "new_conversation", "conversation": KEY}`` ends that key's conversation (its next
  prompt starts a new one: :meth:`Pool.end_conversation <bridge.live.pool.Pool.end_conversation>`;
  no answer). ``configure``, ``new_conversation`` without a key, ``compact``, ``models`` and
  ``answer`` steer or ask one engine, and a pool has N: each is an ``error`` line naming the option. Extension dialogs are
  answered ``cancelled`` (nobody can answer them).
- stdin EOF or ``shutdown``: every accepted prompt runs to its receipt (``--drain-timeout``
  bounds it), every engine is stopped, ``bye``, exit 0. SIGINT/SIGTERM/SIGHUP: closing at once,
  exit 128+N; a controller that closes stdout: closing at once, exit 141. An engine that cannot
  be set up at open: one line on stderr, exit 2, nothing on stdout (as ``serve``).
"""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator
from typing import Any

import trio

from bridge import __version__
from bridge.controller.messages import (
    Bye,
    ControllerError,
    LineError,
    NewConversation,
    Prompt,
    Ready,
    Reply,
    Shutdown,
    Status,
    StatusReport,
    Stop,
    Stopping,
    parse_command,
)
from bridge.controller.output import Output
from bridge.controller.stdin import read_lines
from bridge.core.config import BridgeConfig
from bridge.core.framing import Oversize
from bridge.live.journal import default_journal_dir
from bridge.live.pool import Pool, open_pool
from bridge.live.signals import closing_signals
from bridge.profiles.command import EngineProfile


async def serve_pool(
    profile: EngineProfile,
    *,
    engines: int,
    spares: int | None = None,
    idle_timeout: float | None = None,
    journal: Any = True,
    config: BridgeConfig | None = None,
    drain_timeout: float | None = None,
    stdin_fd: int = 0,
    stdout_fd: int = 1,
) -> int:
    """Serve one controller over a pool; returns the exit status. Ends when the pool has closed
    and every line, ``bye`` last, is written (or dropped after a signal's grace)."""
    out = Output(stdout_fd)
    state: dict[str, Any] = {"status": 0, "pool": None}
    signalled = trio.Event()

    def gone() -> None:
        state["status"] = state["status"] or 141
        if state["pool"] is not None:
            state["pool"].close_now()

    async def watch(signals: AsyncIterator[int]) -> None:
        """Close the pool at each signal. Ends when cancelled (after ``bye``)."""
        async for signum in signals:
            state["status"] = state["status"] or 128 + signum
            signalled.set()
            if state["pool"] is not None:
                state["pool"].close_now()

    with closing_signals(keep_interrupt=True) as signals:
        async with trio.open_nursery() as outer:
            outer.start_soon(out.run)
            outer.start_soon(watch, signals)
            folder = _folder(journal)
            try:
                async with open_pool(
                    profile, engines=engines, spares=spares, idle_timeout=idle_timeout, journal=journal, config=config
                ) as pool:
                    state["pool"] = pool
                    out.on_gone = gone
                    pool.listeners.append(out.put)
                    out.write(Ready(__version__, folder))
                    if state["status"]:
                        pool.close_now()
                    await _serve(pool, out, stdin_fd, drain_timeout)
            finally:
                if state["pool"] is not None:
                    out.write(Bye(state["pool"].receipts_issued))
                out.close()
            with trio.CancelScope(shield=True):
                await out.flush(signalled)
            outer.cancel_scope.cancel()
    pool = state["pool"]
    if pool is not None and pool.journal_failed:
        print(f"bridge serve: {pool.journal_failed}; every receipt went to the controller", file=sys.stderr)
        return int(state["status"]) or 1
    if out.failed is not None:
        return int(state["status"]) or 1
    return int(state["status"])


def _folder(journal: Any) -> str | None:
    if journal is True:
        return str(default_journal_dir())
    if journal is False or journal is None:
        return None
    return str(os.fspath(journal))


async def _serve(pool: Pool, out: Output, stdin_fd: int, drain_timeout: float | None) -> None:
    """Read the controller until the pool has closed (after EOF or ``shutdown`` has drained, or
    at once on a signal). Ends when it has."""
    async with trio.open_nursery() as nursery:

        async def read() -> None:
            """Read stdin, then shut down. Ends after EOF."""
            await _read(pool, out, stdin_fd, drain_timeout)
            pool.shutdown(drain_timeout)

        nursery.start_soon(read)
        await pool.wait_closed()
        nursery.cancel_scope.cancel()


async def _read(pool: Pool, out: Output, stdin_fd: int, drain_timeout: float | None) -> None:
    """Read controller lines until EOF (a read error counts as EOF)."""

    async def take(lineno: int, line: bytes | Oversize) -> None:
        """Act on one line and write its reply (:func:`_take`). Ends when it is handed to the pool."""
        reply = await _take(pool, line, lineno, drain_timeout)
        if reply is not None:
            out.write(reply)

    await read_lines(stdin_fd, take)


async def _take(pool: Pool, line: bytes | Oversize, lineno: int, drain_timeout: float | None) -> Reply | None:
    """Act on one controller line; the reply it gets, if any. Does not wait."""
    try:
        cmd = parse_command(line)
    except ControllerError as e:
        return LineError(str(e), lineno)
    match cmd:
        case Prompt():
            if pool.knows(cmd.id):
                return LineError.duplicate_id(cmd.id, lineno)
            try:
                pool.submit_nowait(cmd.message, request=cmd.id, conversation=cmd.conversation, **cmd.options())
            except ValueError as e:  # what submit refuses: a prompt too big for the engine's lines
                return LineError(str(e), lineno)
        case Stop():
            if not pool.knows(cmd.id):
                return LineError.unknown_id(cmd.id, lineno)
            return Stopping(cmd.id, await pool.stop(cmd.id))
        case Status():
            return StatusReport(pool.status())
        case Shutdown():
            pool.shutdown(drain_timeout)
        case NewConversation(conversation=str(key)):
            pool.end_conversation(key)
        case NewConversation():
            return LineError(
                'new_conversation on bridge serve --engines N takes a "conversation": the key whose conversation '
                "ends (a prompt without a key starts afresh already)",
                lineno,
            )
        case _:
            return LineError(
                f"{cmd.TYPE} steers or asks one engine, and bridge serve --engines runs several: not taken "
                "(give each prompt its own provider, model and thinking; a conversation key keeps one engine)",
                lineno,
            )
    return None


def main_serve_pool(
    profile: EngineProfile,
    *,
    engines: int,
    spares: int | None,
    idle_timeout: float | None,
    journal: Any,
    config: BridgeConfig,
    drain_timeout: float | None,
) -> int:
    """``bridge serve --engines N`` on this process's stdin/stdout; returns the exit status."""
    try:
        return trio.run(
            lambda: serve_pool(
                profile,
                engines=engines,
                spares=spares,
                idle_timeout=idle_timeout,
                journal=journal,
                config=config,
                drain_timeout=drain_timeout,
            )
        )
    except KeyboardInterrupt:
        return 130
