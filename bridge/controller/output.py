"""``bridge serve``'s stdout: one writer task, fed from an unbounded queue.

Rules:

- Nothing that produces a line waits for the controller: :meth:`Output.put` (the live bridge's
  notifications) and :meth:`Output.write` (serve's own replies) queue it and return. A
  controller that reads slowly never stalls the engine's stream; it costs memory instead
  (docs: guide/timeouts.md).
- A line put while nothing is queued or being written is written at once, without waiting
  for the writer task's turn (a receipt reaches the controller in the step that settled it;
  issue 18): a non-blocking write the pipe takes whole, else what is left is queued.
- Lines are written in the order they were queued, whatever is queued at once in one write.
- A controller that goes away (a broken pipe) is not an error: the rest is dropped quietly,
  receipts still reach the journal, and :attr:`Output.on_gone` is called once (``serve``
  closes the bridge then: nobody reads what it would do). Any other write error (a full disk, a closed descriptor)
  drops the rest too, but is kept in :attr:`Output.failed`: ``serve`` says so and exits 1.
- :meth:`Output.close` ends the queue: what was queued before it is still written, and
  :attr:`Output.done` is set once it has been (or dropped).
- After a signal, the last lines wait at most :data:`FLUSH_GRACE` for a controller that does not
  read stdout (:meth:`Output.flush`): a signal must end the process (SPEC §8: nothing the
  controller does hangs the bridge); the receipts are in the journal.
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

import trio

from bridge.transcript import dumps

if TYPE_CHECKING:
    from bridge.controller.messages import Reply

#: How long, after a signal, the last lines wait for a controller that does not read stdout.
FLUSH_GRACE: Final = 5.0


class Output:
    """One writer for stdout: notifications are queued, never block the bridge."""

    def __init__(self, fd: int) -> None:
        self._stream = trio.lowlevel.FdStream(os.dup(fd))  # non-blocking from here on
        self._send, self._recv = trio.open_memory_channel[bytes](math.inf)
        self.broken = False
        #: Why stdout could not be written, when it was not the controller going away.
        self.failed: str | None = None
        #: Lines queued and not yet taken by the writer, and whether it is writing: while
        #: either is so, a new line must queue behind them.
        self._queued = 0
        self._writing = False
        self._closed = False
        #: Set when everything queued is written (or the controller is gone).
        self.done = trio.Event()
        #: Called once when the controller goes away (its end of stdout closed).
        self.on_gone: Callable[[], None] | None = None

    def put(self, note: dict[str, Any]) -> None:
        """Write or queue one JSON object (a no-op once closed)."""
        if self._closed:
            return
        data = dumps(note) + b"\n"
        if not self._queued and not self._writing and not self.broken:
            try:
                n = os.write(self._stream.fileno(), data)
            except BlockingIOError:
                n = 0
            except OSError as e:
                self._broke(e)
                return
            if n == len(data):
                return
            data = data[n:]
        self._queued += 1
        self._send.send_nowait(data)

    def write(self, reply: Reply) -> None:
        """Queue one of serve's own replies in its wire form (serve's messages are imported by
        serve, not by ``bridge acp``, which writes only :meth:`put`'s)."""
        from bridge.controller.messages import to_wire

        self.put(to_wire(reply))

    def close(self) -> None:
        self._closed = True
        self._send.close()

    async def flush(self, signalled: trio.Event) -> bool:
        """Wait for the last lines to be written (after :meth:`close`). Ends when they are (or
        dropped: the controller is gone), or :data:`FLUSH_GRACE` after ``signalled`` is set if
        the controller does not read them: then returns True (the caller cancels the writer)."""
        gave_up = False
        async with trio.open_nursery() as nursery:

            async def bound() -> None:
                """Give up on the controller. Ends FLUSH_GRACE after the signal (cancelled sooner
                when the lines are written)."""
                nonlocal gave_up
                await signalled.wait()
                await trio.sleep(FLUSH_GRACE)
                gave_up = not self.done.is_set()
                nursery.cancel_scope.cancel()

            nursery.start_soon(bound)
            await self.done.wait()
            nursery.cancel_scope.cancel()
        return gave_up

    async def run(self) -> None:
        """Write queued lines. Ends when the queue is closed and written out."""
        try:
            await self._write_all()
        finally:
            self.done.set()

    async def _write_all(self) -> None:
        """Write batches as they come. Ends when the queue is closed and empty (once the
        controller is gone the rest is read and dropped), then closes stdout."""
        async with self._recv:
            async for data in self._recv:
                batch = [data, *self._queued_now()]
                self._queued -= len(batch)
                if self.broken:
                    continue
                self._writing = True
                try:
                    await self._stream.send_all(b"".join(batch))
                except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as e:
                    self._broke(e)
                finally:
                    self._writing = False
        try:
            await self._stream.aclose()
        except OSError:
            pass

    def _broke(self, e: BaseException) -> None:
        """Nothing more is written. A broken pipe is the controller going away (quiet: the
        receipts are journaled); anything else is kept as :attr:`failed`."""
        first = not self.broken
        self.broken = True
        cause = e if isinstance(e, OSError) else e.__cause__
        if not isinstance(cause, (BrokenPipeError, ConnectionResetError)):
            if self.failed is None:
                self.failed = getattr(cause, "strerror", None) or str(cause or e) or type(e).__name__
        elif first and self.on_gone is not None:
            self.on_gone()

    def _queued_now(self) -> list[bytes]:
        """Every line already queued (taken without waiting)."""
        lines = []
        while True:
            try:
                lines.append(self._recv.receive_nowait())
            except (trio.WouldBlock, trio.EndOfChannel):
                return lines


def silence_stdout(stream: Any = None) -> None:
    """Point stdout (or ``stream``: stderr) at /dev/null so nothing more (not even the exit's
    flush) hits the closed pipe."""
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, (stream or sys.stdout).fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass
