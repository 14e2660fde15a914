"""``bridge serve``: the loop that carries the controller protocol (SPEC §7) between
stdin/stdout and one live bridge.

What a line may say and what the bridge answers are :mod:`bridge.controller.messages`; stdout
is :mod:`bridge.controller.output`. Here: who reads stdin, who closes the bridge, and when the
process ends.

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
  a second ``shutdown`` changes nothing. ``configure``, ``new_conversation`` and ``compact``
  (they steer the prompts submitted after them, and none can be) are an ``error`` line, also
  while the bridge closes; ``models`` and dialog answers are taken as before.
- SIGINT / SIGTERM / SIGHUP: closing at once (nothing queued is written; the
  running prompt is stopped, ``failed``/``closing``), exit 130 / 143 / 129.
- Once a signal has come (before or after the bridge closed), the last lines wait at most
  :data:`FLUSH_GRACE` for a controller that does not read stdout, counted from the later of
  the closing and the signal; then the rest is dropped (every receipt is in the journal), one
  line on stderr says so and names the journal, and the exit status is the signal's. Without
  a signal they wait for the controller as long as it takes (a drain after EOF is read slowly
  by some controllers; a signal is how one ends a bridge whose controller hangs).
- stdout closed by the controller (a broken pipe, ``| head``): closing at once as for a
  signal, every receipt in the journal, exit 141.
- The journal cannot be written (a full disk): the controller gets a
  ``journal-failed`` signal at once, the bridge closes as for a signal (every
  accepted prompt still gets its receipt here), and exits 1 with one line on
  stderr.
- The engine cannot be set up (it could not be launched, or its start-up check refused
  the configuration: the bridge is down at once, every prompt ``rejected``/``engine-down``):
  serving goes on until EOF as usual, then the bridge exits 2 with one line on stderr. An
  engine down for the crash limit (it kept exiting, as ``-- false`` does): the same, exit 1.
- An allowed extension's dialog (``--extension``) is an ``ask`` line; the controller answers
  it with ``answer``, and ``dialog-end`` says who gave its one response (the controller, or
  ``cancelled`` by its timeout, its prompt's stop or receipt, the engine's stop, closing;
  after stdin EOF nobody can answer, so open and later dialogs are cancelled at once).
  An answer that does not fit, or comes after the end, is an ``error`` line.
- ``ready`` is the first line and ``bye`` the last. A bridge that could not open (a journal or
  an engine profile that cannot be set up) writes nothing on stdout: the error propagates (one
  line on stderr, exit 2). No controller line is read before ``ready``, so no prompt is owed a
  receipt then.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from typing import Any

import attrs
import trio

from bridge import __version__
from bridge.controller.messages import (
    AnswerDialog,
    Bye,
    Command,
    CompactConversation,
    Configure,
    Configured,
    ControllerError,
    LineError,
    Models,
    ModelsQuery,
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
from bridge.controller.output import FLUSH_GRACE, Output
from bridge.controller.stdin import read_lines
from bridge.core.framing import Oversize
from bridge.core.wire import converter
from bridge.live.api import Bridge, BridgeConfig, open_trio_bridge
from bridge.live.handles import DialogError
from bridge.live.signals import closing_signals
from bridge.live.steering import EngineQuestionError
from bridge.profiles.command import EngineProfile

#: Seconds the last lines (``bye`` last) may still take, once a signal has come and the bridge
#: has closed, to reach a controller that does not read its stdout; then they are dropped. A
#: few seconds, like the close grace: a controller that reads takes them in milliseconds.


def main_serve(profile: EngineProfile, *, journal: Any, config: BridgeConfig, drain_timeout: float | None) -> int:
    """``bridge serve`` on this process's stdin/stdout; returns the exit status."""
    try:
        return trio.run(lambda: serve(profile, journal=journal, config=config, drain_timeout=drain_timeout))
    except KeyboardInterrupt:
        return 130
    finally:
        sys.stdout.flush()


async def serve(
    profile: EngineProfile,
    *,
    journal: Any = True,
    config: BridgeConfig | None = None,
    drain_timeout: float | None = None,
    stdin_fd: int = 0,
    stdout_fd: int = 1,
) -> int:
    """Serve one controller; returns the exit status. Ends when the bridge has closed (after
    EOF or ``shutdown`` has drained, or at once after a signal or a journal failure) and
    everything for the controller, ``bye`` last, is written."""
    server = _Server(Output(stdout_fd), drain_timeout)
    with closing_signals(keep_interrupt=True) as signals:  # ours from the first line to bye
        async with trio.open_nursery() as outer:
            outer.start_soon(server.out.run)
            outer.start_soon(server.watch_signals, signals)
            await server.run(profile, journal, config, stdin_fd)
            outer.cancel_scope.cancel()
    return server.exit_status()


@attrs.define
class _Server:
    """One ``serve``: its output, its bridge once open, and the signal that ends it."""

    out: Output
    drain_timeout: float | None
    bridge: Bridge | None = None
    #: 128+N after signal N came before the bridge had closed (the first such signal), else 0.
    status: int = 0
    #: The first signal, whenever it came: it bounds the last lines' wait (:data:`FLUSH_GRACE`).
    signum: int | None = None
    signalled: trio.Event = attrs.field(factory=trio.Event)
    #: Set when the last lines were dropped because the controller did not read them in time.
    gave_up: bool = False

    async def watch_signals(self, signals: AsyncIterator[int]) -> None:
        """Close the bridge on each signal. Ends only when cancelled (after ``bye``)."""
        async for signum in signals:
            bridge = self.bridge
            if bridge is None or not bridge.view().closed:
                self.status = self.status or 128 + signum
            if self.signum is None:
                self.signum = signum
                self.signalled.set()
            if bridge is not None:
                bridge.close_on_signal(signum)

    async def run(self, profile: EngineProfile, journal: Any, config: BridgeConfig | None, stdin_fd: int) -> None:
        """Open the bridge and serve the controller. Ends when the bridge has closed and every
        line, ``bye`` last, is written (or dropped: the controller is gone)."""
        try:
            async with open_trio_bridge(profile, journal=journal, config=config, start_engine=False) as bridge:
                self._opened(bridge)
                await _serve_loop(bridge, self.out, stdin_fd, self.drain_timeout)
        finally:
            if self.bridge is not None:  # else it could not open: stdout stays empty (docs: guide/exit-codes.md)
                self.out.write(Bye(self.bridge.receipts_issued))
            self.out.close()
        with trio.CancelScope(shield=True):
            await self._flush()

    async def _flush(self) -> None:
        """Wait for the last lines to be written. Ends when they are (or dropped: the controller
        is gone), or :data:`FLUSH_GRACE` after the first signal (:meth:`Output.flush`; then
        :attr:`gave_up`, and the writer is cancelled with the rest of ``serve``)."""
        self.gave_up = await self.out.flush(self.signalled)

    def _opened(self, bridge: Bridge) -> None:
        """The bridge is open: its notifications go to the controller, after ``ready``."""
        self.bridge = bridge
        self.out.on_gone = self._controller_gone
        bridge.listeners.append(self.out.put)
        bridge.answers_dialogs = True  # the controller reads each ask and answers on stdin
        self.out.write(Ready(__version__, str(bridge.journal.path) if bridge.journal is not None else None))
        if self.status:  # a signal came while the bridge was opening
            bridge.close_on_signal(self.status - 128)

    def _controller_gone(self) -> None:
        """The controller closed its end of stdout (``| head``): nobody reads receipts any more,
        so the bridge closes as for a signal (the running prompt stopped, every receipt in the
        journal) and serve exits 141, like a process killed by SIGPIPE."""
        self.status = self.status or 141
        if self.bridge is not None:
            self.bridge.close_now("controller-gone", "the controller closed its end of stdout")

    def _receipts_where(self) -> str:
        """Where the receipts the controller did not get are: the words for a line on stderr."""
        journal = self.bridge.journal if self.bridge is not None else None
        if journal is None:
            return "there is no journal"
        if self.bridge is not None and self.bridge.journal_failed:
            return f"and the journal could not be written either: {self.bridge.journal_failed}"
        return f"every receipt is in the journal {journal.path}"

    def exit_status(self) -> int:
        """The exit status (docs: guide/exit-codes.md); a journal failure, an engine that cannot be set
        up (2), or a stdout that could not be written (not a controller that went away), also
        gets its line on stderr."""
        if self.gave_up:
            print(
                f"bridge serve: the controller did not read stdout within {FLUSH_GRACE:g} s of closing, so the "
                f"last lines were dropped; {self._receipts_where()}",
                file=sys.stderr,
            )
            return self.status or 128 + (self.signum or 0)
        if self.out.failed is not None:
            print(
                f"bridge serve: cannot write to stdout ({self.out.failed}); {self._receipts_where()}", file=sys.stderr
            )
            return self.status or 1
        if self.bridge is not None and self.bridge.journal_failed:
            print(f"bridge serve: {self.bridge.journal_failed}; every receipt went to the controller", file=sys.stderr)
            return self.status or 1
        if self.bridge is not None and self.bridge.view().setup_failed:
            # Down for good with a problem to fix (like ``run``): every prompt was answered
            # rejected/engine-down, and the status says so too.
            print(f"bridge serve: the engine cannot be set up: {self.bridge.down_reason}", file=sys.stderr)
            return 2
        if self.bridge is not None and self.bridge.down_reason is not None and not self.status:
            # Down for the crash limit: every prompt after it was rejected/engine-down. Not a
            # drain that went well (0): the bridge could not do its job.
            print(f"bridge serve: the engine went down: {self.bridge.down_reason}", file=sys.stderr)
            return 1
        return self.status


async def _serve_loop(bridge: Bridge, out: Output, stdin_fd: int, drain_timeout: float | None) -> None:
    """Run until the bridge has closed: after EOF or ``shutdown`` has drained, or
    at once on a signal (or a journal failure). stdin is read until then."""
    async with trio.open_nursery() as nursery:

        async def read_controller() -> None:
            """Read stdin, then shut down. Ends after EOF (when the shutdown is asked for)."""
            await _read_controller(bridge, out, stdin_fd, drain_timeout, nursery)
            bridge.shutdown(drain_timeout)  # EOF
            bridge.stop_answering_dialogs()  # and no answer can come any more

        nursery.start_soon(read_controller)
        await bridge.wait_closed()
        nursery.cancel_scope.cancel()


async def _read_controller(
    bridge: Bridge, out: Output, stdin_fd: int, drain_timeout: float | None, nursery: trio.Nursery
) -> None:
    """Read controller lines until EOF (also after ``shutdown``); a read error counts as EOF."""

    async def take(lineno: int, line: bytes | Oversize) -> None:
        """Act on one line (:func:`_take`). Ends when it is handed to the bridge."""
        await _take(bridge, out, line, lineno, drain_timeout, nursery)

    await read_lines(stdin_fd, take)


async def _take(
    bridge: Bridge,
    out: Output,
    line: bytes | Oversize,
    lineno: int,
    drain_timeout: float | None,
    nursery: trio.Nursery,
) -> None:
    """Act on one controller line, and answer it if it asks for an answer. Does not wait: a
    prompt, a stop and a shutdown are only handed to the bridge; a models question is answered
    by a task of ``nursery`` when the engine answers."""
    try:
        cmd = parse_command(line)
    except ControllerError as e:
        out.write(LineError(str(e), lineno))
        return
    if isinstance(cmd, ModelsQuery):
        nursery.start_soon(_answer_models, bridge, out, lineno)
        return
    reply = await _act(bridge, cmd, lineno, drain_timeout)
    if reply is not None:
        out.write(reply)


async def _answer_models(bridge: Bridge, out: Output, lineno: int) -> None:
    """Ask the engine for its models and write the answer. Ends when the engine answers or
    cannot (bounded by ``--ack-timeout``; closing answers it at once)."""
    try:
        out.write(Models(await bridge.models()))
    except EngineQuestionError as e:
        out.write(LineError(str(e), lineno))


async def _act(bridge: Bridge, cmd: Command, lineno: int, drain_timeout: float | None) -> Reply | None:
    """Carry out one command; the reply it gets, if any. Does not wait (as :func:`_take`)."""
    match cmd:
        case Prompt() | NewConversation() if cmd.conversation is not None:
            return LineError('"conversation" keys a prompt to one engine of a pool: bridge serve --engines N', lineno)
        case Prompt():
            if bridge.knows(cmd.id):
                return LineError.duplicate_id(cmd.id, lineno)
            try:
                await bridge.submit(cmd.message, request=cmd.id, **cmd.options())
            except ValueError as e:  # what submit refuses: a prompt too big for the engine's lines
                return LineError(str(e), lineno)
        case Configure() | NewConversation() | CompactConversation() if when := bridge.no_prompt_follows:
            # They steer the prompts submitted after them (docs: guide/steering.md), and none can be:
            # taken, they would change nothing while ``configured`` named a model never used.
            return LineError(
                f"{cmd.TYPE} {when} changes nothing: it steers the prompts submitted after it, and none can be "
                "(the prompts already accepted run as they were submitted)",
                lineno,
            )
        case Configure():
            bridge.configure(**cmd.wanted.asked())
            return Configured(converter.unstructure(bridge.view().wanted))
        case NewConversation():
            bridge.new_conversation()
        case CompactConversation():
            bridge.compact(cmd.instructions)
        case Stop():
            if not bridge.knows(cmd.id):
                return LineError.unknown_id(cmd.id, lineno)
            return Stopping(cmd.id, await bridge.stop(cmd.id))
        case Status():
            return StatusReport(bridge.status())
        case Shutdown():
            bridge.shutdown(drain_timeout)
        case AnswerDialog():
            try:
                await bridge.answer_dialog(
                    cmd.dialog, value=cmd.value, confirmed=cmd.confirmed, cancelled=cmd.cancelled
                )
            except DialogError as e:
                return LineError(f"answer to {cmd.dialog!r} not taken: {e}", lineno)
    return None
