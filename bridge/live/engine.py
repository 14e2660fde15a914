"""One engine process: spawn, read, write, reap. The thin trio layer.

An :class:`Engine` owns one subprocess and four tasks in the caller's nursery:

- the stdout reader: large reads into :class:`~bridge.core.framing.LineSplitter`,
  each read's lines handed to ``sink.lines`` synchronously (no await between
  reading a line and the session seeing it, so the order of observations is
  the order of bytes on the pipe);
- the stderr drain: lines into a bounded ring (:attr:`Engine.stderr_tail`) and
  ``sink.stderr``; never parsed as protocol;
- the waiter: ``Process.wait()``, then up to :data:`STDOUT_DRAIN_GRACE` for the
  reader to finish what the engine wrote before it died, then ``sink.exited``;
- the writer: the commands queued for the engine (:meth:`Engine.queue`, in the order the
  supervision recorded them), written one at a time, each bounded by ``write_timeout``; a
  write that failed or timed out is ``sink.write_failed``. At the exit the queue is closed and
  the prompts none of whose bytes reached the engine are :attr:`Engine.unsent` (it never read
  them: ``rejected``, not ``delivery-unknown``).

Closing is a ladder (:meth:`Engine.aclose`), shielded from cancellation and
bounded at every rung: close stdin (Pi exits within milliseconds on EOF), wait;
SIGTERM to the engine's process group, wait; SIGKILL, wait. The child is
always reaped. Whenever the engine exits (asked to or not), what it left in its
process group is SIGKILLed before it is reaped (so the group's id is still its own). The engine runs in its own session (``start_new_session``) so a
Ctrl-C at the terminal reaches the bridge, which then stops the engine in
order, rather than killing the engine under a running prompt; if the bridge
itself is killed, the engine's stdin reaches EOF and Pi exits on its own.

Nothing the engine starts escapes: unless its launch is contained already (the confined Pi's
PID namespace: :attr:`~bridge.profiles.command.Launch.contained`), the engine runs under
:mod:`bridge.live.reaper`, a child subreaper that at the engine's exit SIGKILLs and reaps
whatever is left below it, wherever it went (``setsid``, double forks, ``nohup``), and exits
with the engine's status. The ladder's last rung then asks the reaper first (SIGUSR1: it
SIGKILLs the engine and the rest), then SIGKILLs the group.

**Evidence only from the engine** (issue 41): the engine's stdin, stdout and stderr are
AF_UNIX stream socketpairs, not pipes. A pipe's end can be opened again through
``/proc/<pid>/fd/N`` by any process that may look into the engine's ``/proc`` (even the read
end, for writing): a tool of the engine's -- a ``bash`` call, or Pi's own in-process ``write``
tool given the path ``/proc/self/fd/1`` -- then wrote ``agent_end``/``agent_settled`` lines into
the bridge's stdout and a receipt settled ``finished`` on them (reproduced on Pi 1.6.0). A
socket cannot be opened through ``/proc`` at all (``open`` fails with ``ENXIO``: the kernel's
``sock_no_open``; checked here for Pi's own process as well as a child's). Each pair is made
one-way (:func:`_stdio_pairs`): the engine's end of stdin is shut for writing, its end of
stdout and stderr for reading. What the pipes gave is kept: closing the bridge's end of stdin
is the engine's EOF (no other process holds the pair: the bridge's ends are not inheritable,
the engine's ends are closed here once it is spawned); a closed peer gives EPIPE on write
(SIGPIPE is ignored by Python) and EOF on read; one ``recv`` takes every queued message up to
:data:`READ_SIZE`, as one pipe read did. The per-engine buffer: see :data:`PIPE_BUDGET`.

Writes are serialised by a lock (a trio stream allows one sender at a time).
A write to an engine that has stopped reading blocks when the socket's buffer fills: the
caller bounds every write with a timeout. A write counts the bytes the socket took
(:attr:`Engine.writing`; trio's ``send_all`` does not say how many went in before
it failed): a line of which no byte went in was certainly never read by the engine
(:attr:`EngineGone.written` is 0), one cut short may have been.
"""

from __future__ import annotations

import collections
import errno
import math
import os
import signal
import socket
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

import trio

from bridge.core.framing import DEFAULT_MAX_LINE, MESSAGE_UPDATE, LineSplitter, Oversize, UpdateRun
from bridge.profiles.command import Launch
from bridge.transcript import dumps

#: Bytes asked for per read. Pi writes many short lines; one large read takes
#: hundreds of them at once and keeps the per-line cost in the splitter's C code.
READ_SIZE = 256 * 1024

#: After the process exits, how long the reader may take to drain stdout.
STDOUT_DRAIN_GRACE = 2.0

#: The stderr ring: last lines kept for "why did it die" messages.
STDERR_RING = 200
#: A single stderr line is cut to this many characters.
STDERR_LINE_MAX = 8192


#: The reaper an engine runs under (run by its path: no package import; ~30 ms a start).
REAPER = str(Path(__file__).with_name("reaper.py"))
#: The ladder's rung that asks the reaper to SIGKILL the engine and what it left, and how long
#: it is given before the group is SIGKILLed.
REAPER_KILL = signal.SIGUSR1
REAPER_GRACE = 2.0


def under_reaper(launch: Launch) -> bool:
    """Whether the engine runs under :mod:`bridge.live.reaper`: not when its launch is contained
    already (a PID namespace), nor off Linux (no child subreaper there)."""
    return not launch.contained and sys.platform.startswith("linux")


#: How much engine output may wait unread, shared by the engines of this process. Measured
#: with pipes (F_SETPIPE_SZ): a 64 KiB pipe (the default) wakes the reader for every 64 KiB
#: (the per-read cost shows on one busy engine: 1.5x an orjson loop with 64 KiB, 1.7x with
#: 256 KiB); but every byte queued ahead of an ``agent_settled`` delays its receipt: the whole
#: pipe is read before it (one engine, 5 MB prompts: settle median 3.5 ms with a 1 MiB pipe,
#: 1.5 ms with 256 KiB, 0.9 ms with 64 KiB; the stream's time the same with 256 KiB as with
#: 1 MiB, 1.5x with 64 KiB; issue 18), and with many engines busy at once that adds up (32
#: engines: settle p99 15 ms with 64 KiB pipes, 31 ms with 256 KiB, 79 ms with 1 MiB;
#: tools/bench/bench). So each engine gets its share of PIPE_BUDGET, between PIPE_MIN and PIPE_MAX
#: (one read's size: a reader that keeps up takes the whole queue in one read).
#:
#: Now that stdout is a socket (the header): what may wait in an AF_UNIX stream socket is
#: bounded by the *writer's* ``SO_SNDBUF`` alone (the reader's ``SO_RCVBUF`` changes nothing;
#: measured here: 100-byte writes fill 27.8 KB of the default 208 KiB, 1000-byte ones 93 KB,
#: 64 KiB ones 233 KB, whatever the reader's ``SO_RCVBUF``), counted with each message's
#: bookkeeping, and the kernel doubles the value set for that (socket(7)); one message more
#: than the limit goes in (up to half of it). So the engine's end of stdout gets ``SO_SNDBUF`` =
#: a quarter of the share, set before the spawn (:data:`SNDBUF_PART`). Measured with
#: ``tools/bench/bench --sections scale`` (2 rounds, against the pipes' code run just before; shared
#: machine): with the whole share set, 32 engines' settle p50/p99 was 108/158 ms (pipes:
#: 71/95 and 38/60 ms), with half 86/120 ms, with a quarter 39/80 ms, the bridge's throughput
#: 144 MB/s (pipes: 64 and 100), one idle engine's settle p50 1.8 ms (pipes: 2.5 and 2.0).
#: Unlike a pipe it cannot be resized afterwards: the bridge must not keep the engine's end (it
#: would never see EOF). An engine keeps the share it started with (the count of engines then,
#: itself included).
PIPE_BUDGET = 2 << 20
PIPE_MIN = 64 << 10
PIPE_MAX = 256 << 10
#: The part of an engine's share set as its stdout's ``SO_SNDBUF`` (above).
SNDBUF_PART = 4
_live_engines: set[Engine] = set()


def errno_name(e: BaseException) -> str | None:
    """``EPIPE``, ``EBADF``, … for an OSError (also one a trio error wraps), else None."""
    cause = e if isinstance(e, OSError) else e.__cause__ or e.__context__
    code = getattr(cause, "errno", None)
    return errno.errorcode.get(code) if isinstance(code, int) else None


def _pipe_share(starting: int = 0) -> int:
    share = PIPE_BUDGET // max(1, len(_live_engines) + starting)
    return max(PIPE_MIN, min(PIPE_MAX, share))


def _stdio_pairs(sndbuf: int) -> tuple[list[socket.socket], list[socket.socket]]:
    """The engine's stdin, stdout and stderr as one-way socketpairs (the header): (the bridge's
    ends, the engine's ends), in that order. The engine's end of stdout gets ``SO_SNDBUF``
    ``sndbuf`` (:data:`PIPE_BUDGET`; best effort: a smaller buffer only costs wake-ups)."""
    ours: list[socket.socket] = []
    theirs: list[socket.socket] = []
    try:
        for k in range(3):
            mine, engine = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
            ours.append(mine)
            theirs.append(engine)
            # One way only: the engine reads its stdin and writes its stdout and stderr.
            engine.shutdown(socket.SHUT_WR if k == 0 else socket.SHUT_RD)
            mine.shutdown(socket.SHUT_RD if k == 0 else socket.SHUT_WR)
        try:
            theirs[1].setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, sndbuf)
        except OSError:
            pass
    except BaseException:
        for s in ours + theirs:
            s.close()
        raise
    return ours, theirs


class EngineGone(Exception):
    """The engine cannot take a command: it exited or closed its stdin.

    ``written``: how many bytes of the data being written went into the pipe before the
    write failed (0: none, so the engine never read any of it)."""

    def __init__(self, message: str, written: int = 0) -> None:
        super().__init__(message)
        self.written = written


#: A queued write: the bytes (whole lines), the request they are for, the kind of command
#: (:attr:`bridge.core.supervision.Write.kind`: ``prompt``, ``config``, ``abort``, ...).
QueuedWrite = tuple[bytes, str | None, str]


class EngineSink(Protocol):
    """Who hears what an engine reports (the bridge: each report is a door of its supervision)."""

    def lines(self, engine: Engine, lines: Sequence[bytes | Oversize | UpdateRun]) -> None: ...

    def stderr(self, engine: Engine, text: str) -> None: ...

    def stdout_closed(self, engine: Engine) -> None: ...

    def write_failed(self, engine: Engine, request: str | None, unsent: bool, error: str | None, stuck: bool) -> None:
        """A queued write did not complete: ``stuck`` (past ``write_timeout``: the engine stopped
        reading), or it failed (``error``); ``unsent``: a prompt none of whose bytes went in."""

    def exited(self, engine: Engine, code: int | None, sig: int | None) -> None: ...


class Engine:
    def __init__(self, launch: Launch, generation: int, sink: EngineSink, max_line: int) -> None:
        self.launch = launch
        self.generation = generation
        self.sink = sink
        self.max_line = max_line
        self.process: trio.Process | None = None
        #: The bridge's ends of the engine's stdin, stdout and stderr (sockets: the header).
        self.stdin: trio.lowlevel.FdStream | None = None
        self.stdout: trio.lowlevel.FdStream | None = None
        self.stderr: trio.lowlevel.FdStream | None = None
        self.pid: int | None = None
        self.stderr_tail: collections.deque[str] = collections.deque(maxlen=STDERR_RING)
        self.exited = trio.Event()
        #: Set once the waiter has reaped the process (before ``exited``: the stdout drain).
        self.reaped = trio.Event()
        self.stdout_done = trio.Event()
        self.returncode: int | None = None
        #: True once the bridge asked this engine to stop (not a crash).
        self.retiring = False
        self._send_lock = trio.Lock()
        #: Runs under :mod:`bridge.live.reaper` (the process is the reaper; the engine its child).
        self.reaper = under_reaper(launch)
        #: Bytes of the data being written that the pipe has taken so far (None: no write
        #: under way). Read at the engine's exit: 0 means none of it can ever be read.
        self.writing: int | None = None
        #: The writer's queue (:meth:`queue`), the item it is writing now, and, once the engine
        #: has exited, the prompts none of whose bytes went into its pipe.
        self._queued, self._to_write = trio.open_memory_channel[QueuedWrite](math.inf)
        self._item: QueuedWrite | None = None
        self.unsent: list[str] = []
        # The reader, the stderr drain and the waiter are shielded: cancelling
        # the bridge must not blind it while it stops the engine (the close
        # ladder needs to see the exit, the journal the last lines). What ends
        # them: EOF, the exit, and at the latest :meth:`abandon`, which the
        # ladder calls last.
        self._reader_scope = trio.CancelScope(shield=True)
        self._stderr_scope = trio.CancelScope(shield=True)
        self._waiter_scope = trio.CancelScope(shield=True)

    @classmethod
    async def start(
        cls,
        nursery: trio.Nursery,
        launch: Launch,
        generation: int,
        sink: EngineSink,
        max_line: int = DEFAULT_MAX_LINE,
        *,
        write_timeout: float = 30.0,
        writer: trio.CancelScope | None = None,
    ) -> Engine:
        """Spawn the engine and start its tasks. Raises OSError if it can't be spawned.
        ``writer``: the writer task's scope (shielded; the owner cancels it when it has finished:
        a bridge's close), by default one of its own."""
        engine = cls(launch, generation, sink, max_line)
        argv, pass_fds = list(launch.argv), launch.pass_fds
        status: tuple[int, int] | None = None
        if engine.reaper:
            status = os.pipe()
            argv = [sys.executable, "-I", "-S", REAPER, str(status[1]), "--", *argv]
            pass_fds = (*pass_fds, status[1])
        ours, theirs = _stdio_pairs(_pipe_share(starting=1) // SNDBUF_PART)
        try:
            engine.process = await trio.lowlevel.open_process(
                argv,
                stdin=theirs[0].fileno(),
                stdout=theirs[1].fileno(),
                stderr=theirs[2].fileno(),
                env=launch.env,
                cwd=launch.cwd,
                start_new_session=True,
                pass_fds=pass_fds,
            )
        except BaseException:
            if status is not None:
                os.close(status[0])
            for s in ours:
                s.close()
            raise
        finally:
            if status is not None:
                os.close(status[1])
            for s in theirs:
                s.close()
        engine.stdin, engine.stdout, engine.stderr = (trio.lowlevel.FdStream(s.detach()) for s in ours)
        if status is not None:
            await engine._launched(status[0])
        engine.pid = engine.process.pid
        _live_engines.add(engine)
        nursery.start_soon(engine._read_stdout)
        nursery.start_soon(engine._drain_stderr)
        nursery.start_soon(engine._wait)
        nursery.start_soon(engine._write_queued, write_timeout, writer or trio.CancelScope(shield=True))
        return engine

    async def _launched(self, status: int) -> None:
        """Read the reaper's status pipe (closed once the engine is spawned; an errno if it could
        not be). Ends at the pipe's EOF: the engine started or the reaper exited. Raises the
        OSError the spawn failed with, the reaper reaped."""
        assert self.process is not None
        told = b""
        async with trio.lowlevel.FdStream(status) as pipe:
            while chunk := await pipe.receive_some(64):
                told += chunk
        if told:
            for stream in (self.stdin, self.stdout, self.stderr):
                if stream is not None:
                    await stream.aclose()
            await self.process.wait()  # the reaper exits at once (127)
            code = int(told) if told.isdigit() else 0
            raise OSError(code, os.strerror(code) if code else "the reaper could not start it", self.launch.argv[0])

    @property
    def alive(self) -> bool:
        return not self.exited.is_set()

    # -- writing -----------------------------------------------------------------

    def queue(self, data: bytes, request: str | None, kind: str = "") -> None:
        """Queue ``data`` (whole lines: a command of ``kind`` for ``request``) for the writer;
        dropped once the engine has exited (its queue is closed). Returns at once."""
        try:
            self._queued.send_nowait((data, request, kind))
        except trio.ClosedResourceError:
            pass

    async def _write_queued(self, write_timeout: float, scope: trio.CancelScope) -> None:
        """Write the queued commands in order, each bounded by ``write_timeout``. Ends when the
        engine has exited (its queue is closed) or ``scope`` is cancelled (its owner finished).

        A prompt of which no byte went in is reported *unsent* (the engine never read it); once
        the engine has exited, its exit says that instead (:attr:`unsent`)."""
        with scope:
            async with self._to_write as queued:
                async for item in queued:
                    data, request, kind = item
                    self._item = item
                    with trio.move_on_after(write_timeout) as timer:
                        try:
                            await self.send_bytes(data)
                        except EngineGone as e:
                            if self.alive:
                                self.sink.write_failed(
                                    self, request, kind == "prompt" and e.written == 0, str(e), False
                                )
                            continue
                        finally:
                            self._item = None
                    if timer.cancelled_caught:
                        self.sink.write_failed(self, request, False, None, True)

    def _close_queue(self) -> list[str]:
        """At the exit: close the writer's queue and return the prompts none of whose bytes went
        into the pipe -- still queued, or being written with nothing taken yet."""
        found: list[str] = []
        item = self._item
        if item is not None and item[2] == "prompt" and item[1] is not None and not self.writing:
            found.append(item[1])
        self._queued.close()
        while True:
            try:
                _, request, kind = self._to_write.receive_nowait()
            except (trio.WouldBlock, trio.EndOfChannel, trio.ClosedResourceError):
                break
            if kind == "prompt" and request is not None:
                found.append(request)
        return found

    async def send(self, cmd: dict[str, Any]) -> None:
        """Write one command as one line. Raises :class:`EngineGone`."""
        await self.send_bytes(dumps(cmd) + b"\n")

    async def send_bytes(self, data: bytes) -> None:
        """Write ``data`` whole (one writer at a time). Ends when the socket took it; raises
        :class:`EngineGone` if the engine is gone or stopped reading. Unbounded here: the
        bridge's writer task bounds it (``write_timeout``)."""
        stdin = self.stdin
        if self.process is None or stdin is None or self.exited.is_set():
            raise EngineGone("the engine has exited")
        async with self._send_lock:
            self.writing = 0
            try:
                await self._send_all(stdin, data)
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as e:
                name = errno_name(e) or e.__class__.__name__
                raise EngineGone(f"the engine stopped reading its stdin ({name})", self.writing) from None
            finally:
                self.writing = None

    async def _send_all(self, stdin: Any, data: bytes) -> None:
        """trio's ``FdStream.send_all``, counting what the socket took in :attr:`writing`. Ends
        when the socket took all of ``data``; raises OSError (EPIPE: the engine closed its stdin;
        EBADF) or trio.ClosedResourceError (the stream was closed while it waited). The
        descriptor is asked for at each write: a stream closed meanwhile (the close ladder)
        gives -1 (EBADF), never a number the process has reused."""
        await trio.lowlevel.checkpoint()
        with memoryview(data) as view:
            while self.writing is not None and self.writing < len(data):
                fd = stdin.fileno()
                try:
                    self.writing += os.write(fd, view[self.writing :])
                except BlockingIOError:
                    await trio.lowlevel.wait_writable(fd)

    # -- tasks -------------------------------------------------------------------------

    async def _read_stdout(self) -> None:
        """Read stdout into lines for the sink. Ends at EOF (the engine, and every process that
        inherited its stdout, closed it) or when :meth:`_wait` cancels it after the drain grace."""
        assert self.stdout is not None
        stdout = self.stdout
        # Runs of long message_update lines stay in the read (framing.UpdateRun): the session
        # takes them in bulk without a copy.
        splitter = LineSplitter(self.max_line)
        sink_lines = self.sink.lines
        with self._reader_scope:
            try:
                while True:
                    data = await stdout.receive_some(READ_SIZE)
                    if not data:
                        break
                    lines = splitter.feed_runs(data, MESSAGE_UPDATE, b"}")
                    if lines:
                        sink_lines(self, lines)
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                pass
        tail = splitter.close()
        if tail:
            sink_lines(self, tail)
        self.stdout_done.set()
        self.sink.stdout_closed(self)

    async def _drain_stderr(self) -> None:
        """Read stderr a line at a time into the ring and the sink. Ends at EOF or when
        :meth:`_wait` cancels it once the engine has exited."""
        assert self.stderr is not None
        stderr = self.stderr
        splitter = LineSplitter(STDERR_LINE_MAX)
        with self._stderr_scope:
            try:
                while True:
                    data = await stderr.receive_some(64 * 1024)
                    if not data:
                        break
                    for line in splitter.feed(data):
                        self._stderr_line(line)
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                pass
        for line in splitter.close():
            self._stderr_line(line)

    def _stderr_line(self, line: bytes | Oversize) -> None:
        if isinstance(line, Oversize):
            text = line.head.decode("utf-8", "replace") + f"… [{line.length} bytes]"
        else:
            text = line.decode("utf-8", "replace")
        self.stderr_tail.append(text)
        self.sink.stderr(self, text)

    async def _wait(self) -> None:
        """Reap the engine and tell the sink. Ends when the process has exited and its stdout is
        read out (or ``STDOUT_DRAIN_GRACE`` has passed: a grandchild may hold it open)."""
        assert self.process is not None
        with self._waiter_scope:
            if await self._exit_seen():
                # What the engine left in its process group (a tool's `sleep &`, a
                # grandchild holding its stdout) ends with it, as in the confined Pi's PID
                # namespace. Killed before the engine is reaped: its pid, the group's id,
                # cannot have been taken by another process yet.
                self._signal_group(signal.SIGKILL)
            code = await self.process.wait()
            self.returncode = code
            self.reaped.set()
            # What the engine wrote before it died is still in the pipe: let the
            # reader finish it (bounded: a grandchild may hold stdout open).
            with trio.move_on_after(STDOUT_DRAIN_GRACE):
                await self.stdout_done.wait()
        self._reader_scope.cancel()
        self._stderr_scope.cancel()
        _live_engines.discard(self)
        status = self.process.returncode
        sig = -status if status is not None and status < 0 else None
        self.unsent = self._close_queue()
        self.sink.exited(self, status if sig is None else None, sig)
        self.exited.set()

    async def _exit_seen(self) -> bool:
        """Until the engine has exited, leaving it unreaped (True: its pid is still its own),
        or, where the exit cannot be watched without reaping it (no pidfd), until it has been
        reaped (False)."""
        assert self.process is not None
        try:
            fd = os.pidfd_open(self.process.pid)
        except (AttributeError, OSError):
            return False
        try:
            await trio.lowlevel.wait_readable(fd)
        finally:
            trio.lowlevel.notify_closing(fd)
            os.close(fd)
        return True

    def abandon(self) -> None:
        """End the engine's tasks now (the last rung: the process is gone or unkillable)."""
        self._reader_scope.cancel()
        self._stderr_scope.cancel()
        self._waiter_scope.cancel()

    # -- closing -------------------------------------------------------------------

    async def aclose(self, stdin_grace: float = 2.0, term_grace: float = 2.0, *, requested: bool = True) -> None:
        """Stop the engine: close stdin, SIGTERM, SIGKILL; every wait bounded.

        Shielded: runs to the end even when the caller is being cancelled. Ends
        when the process has been reaped (and its exit reported to the sink),
        or after the SIGKILL rung's bounded wait. ``requested=False`` when the
        engine broke first (it closed its stdout): its exit is then a crash.
        """
        if requested:
            self.retiring = True
        proc = self.process
        if proc is None:
            return
        with trio.CancelScope(shield=True):
            if self.stdin is not None:
                try:
                    # Closing our end (no other process holds it) is the engine's EOF.
                    await self.stdin.aclose()
                except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                    pass
            # Waits for the waiter to reap the engine, never reaps it here: the waiter kills
            # what the engine left in its process group while the engine's pid is still its own.
            with trio.move_on_after(stdin_grace):
                await self.reaped.wait()
            rungs = [(signal.SIGTERM, term_grace), (signal.SIGKILL, 5.0)]
            if self.reaper:
                rungs.insert(1, (REAPER_KILL, REAPER_GRACE))
            for sig, grace in rungs:
                if self.reaped.is_set():
                    break
                if sig == REAPER_KILL:
                    proc.send_signal(sig)  # the reaper alone (unreaped: its pid is its own)
                else:
                    self._signal_group(sig)
                with trio.move_on_after(grace):
                    await self.reaped.wait()
            # The waiter task reports the exit; give it the stdout drain grace.
            with trio.move_on_after(STDOUT_DRAIN_GRACE + 1.0):
                await self.exited.wait()
            if not self.exited.is_set():
                self.abandon()
                with trio.move_on_after(1.0):
                    await self.exited.wait()
            for stream in (self.stdout, self.stderr):
                if stream is not None:
                    try:
                        await stream.aclose()
                    except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                        pass

    def _signal_group(self, sig: int) -> None:
        assert self.process is not None
        try:
            os.killpg(self.process.pid, sig)
        except ProcessLookupError:
            pass
        except PermissionError:
            try:
                self.process.send_signal(sig)
            except ProcessLookupError:
                pass
