"""The one-call form, :func:`query`: a bridge opened, one prompt sent, what comes of it yielded,
the bridge closed -- and a caller that leaves the loop early is not punished for it.

Why this is not an async generator (issue 42, reproduced 5 of 5): an async generator that
holds :func:`~bridge.live.api.open_bridge` -- a trio nursery, under asyncio a guest run --
across its ``yield`` is closed by whoever finalizes it. After ``async for m in query(...):
break`` that is trio's (or asyncio's) finalizer, late and outside the caller's task: under
trio the bridge's tasks found their nursery closed to new arrivals (``RuntimeError``, then
``TrioInternalError``, after 40 s); under asyncio ``aclose(): asynchronous generator is
already running``. A generator must not own a nursery over its yields (trio's docs on async
generators; PEP 789).

So the bridge runs in a task of its own -- the **pump** -- that owns it from open to close,
and the loop only reads what the pump hands over:

- under trio a system task (:func:`trio.lowlevel.spawn_system_task`, what trio's own
  generator finalizers run in), under asyncio a task of the running loop (kept referenced
  here until it ends: the loop keeps only a weak one);
- it starts at the first ``__anext__`` (a ``query(...)`` never iterated opens nothing);
- **what ends it**: the receipt (then the bridge closes and the loop ends after the close);
  the caller leaving -- :meth:`Query.aclose`, or the iterator being dropped (``break``,
  an exception in the loop's body: CPython drops it at once, and ``__del__`` asks the pump to
  leave through the loop's thread-safe door) -- then the prompt's stream is let go and the
  bridge closes, which stops the prompt (``failed``/``closing``, journaled); or the run ending
  (trio cancels system tasks when ``main`` returns, asyncio cancels the loop's tasks), and the
  bridge closes under that cancellation as any ``async with open_bridge`` does (its close
  ladder is shielded and bounded);
- whatever the opening or the stream raises is handed to the loop and raised there, once.

The pump never refers to the :class:`Query` (only to the shared :class:`_Pipe`), so dropping
the iterator drops the last reference and ``__del__`` runs.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

import attrs
import trio

from bridge.live.handles import Message

if TYPE_CHECKING:
    from contextlib import AbstractAsyncContextManager

    from bridge.live.protocols import BridgeAPI

__all__ = ["Query"]

#: What the pump hands over after the last message: the bridge has closed.
_END: Final = object()

#: asyncio pumps, referenced until they end (the loop holds only a weak reference to a task).
_asyncio_pumps: set[asyncio.Task[None]] = set()


@attrs.define
class _Pipe:
    """What the pump and the loop share: the items, and how to tell the pump to leave."""

    library: str
    #: The items: messages, then an exception (raised by the loop) or :data:`_END`.
    put: Callable[[object], None]
    #: Ask the pump to let the stream go and close the bridge; safe from any thread and from
    #: ``__del__`` (it goes through the loop's own thread-safe door).
    leave: Callable[[], None] = lambda: None
    #: Set by the pump when it has ended (the bridge closed).
    done: bool = False


class Query:
    """The stream :func:`~bridge.live.api.query` returns: an async iterator of the prompt's
    :data:`~bridge.live.handles.Message`\\ s, its receipt last. ``aclose()`` (or leaving the
    loop) closes the bridge, stopping the prompt if it is still running; ``aclose()`` ends when
    the bridge has closed."""

    def __init__(
        self, opener: Callable[[], AbstractAsyncContextManager[BridgeAPI]], submit: Callable[[BridgeAPI], Any]
    ) -> None:
        self._opener = opener
        self._submit = submit
        self._pipe: _Pipe | None = None
        self._get: Callable[[], Any] | None = None
        self._finished = False

    def __aiter__(self) -> Query:
        return self

    async def __anext__(self) -> Message:
        """The next message. Ends when the pump hands one over (or the end, or an error)."""
        if self._finished:
            raise StopAsyncIteration
        if self._get is None:
            self._start()
        assert self._get is not None
        item = await self._get()
        if item is _END:
            self._finished = True
            raise StopAsyncIteration
        if isinstance(item, BaseException):
            self._finished = True
            raise item
        message: Message = item
        return message

    async def aclose(self) -> None:
        """Leave: the prompt's stream is let go and the bridge closed (the prompt stopped if it
        still runs). Ends when the bridge has closed (the pump handed over its end)."""
        if self._pipe is None or self._finished:
            self._finished = True
            return
        self._pipe.leave()
        assert self._get is not None
        while True:
            item = await self._get()
            if item is _END or isinstance(item, BaseException):
                break
        self._finished = True

    def __del__(self) -> None:
        pipe = self._pipe
        if pipe is not None and not pipe.done and not self._finished:
            try:
                pipe.leave()
            except RuntimeError:
                pass  # the run has ended: its own end closed the bridge (or is closing it)

    def _start(self) -> None:
        import sniffio

        library = sniffio.current_async_library()
        if library == "trio":
            self._start_trio()
        else:
            self._start_asyncio()

    def _start_trio(self) -> None:
        # A buffer as large as needed: the pump never waits on the loop, so leaving never waits
        # on a reader that is gone; messages are small and a prompt's stream is finite.
        send, receive = trio.open_memory_channel[object](float("inf"))
        token = trio.lowlevel.current_trio_token()
        scope = trio.CancelScope()
        pipe = _Pipe("trio", send.send_nowait)
        pipe.leave = lambda: token.run_sync_soon(scope.cancel)
        self._pipe, self._get = pipe, receive.receive
        opener, submit = self._opener, self._submit

        async def pump() -> None:
            """The bridge, open from the first message asked for to its close. Ends after the
            receipt and the close, after the caller left and the close, or at the run's end."""
            await _pump(pipe, opener, submit, scope)

        trio.lowlevel.spawn_system_task(pump, name="bridge.query")

    def _start_asyncio(self) -> None:
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[object] = asyncio.Queue()
        pipe = _Pipe("asyncio", queue.put_nowait)
        self._pipe, self._get = pipe, queue.get
        opener, submit = self._opener, self._submit
        forward: list[asyncio.Task[None]] = []

        def leave() -> None:
            loop.call_soon_threadsafe(lambda: [t.cancel() for t in forward])

        pipe.leave = leave

        async def pump() -> None:
            """As under trio (ends after the receipt and the close, after leaving and the close, or
            when the run ends); the stream is read in a task of its own, which leaving cancels."""
            try:
                async with opener() as bridge:
                    handle = await submit(bridge)

                    async def read() -> None:
                        """Forward the stream. Ends after the receipt, or when cancelled (leaving)."""
                        async for message in handle.messages():
                            pipe.put(message)

                    task = loop.create_task(read())
                    forward.append(task)
                    try:
                        await asyncio.shield(task)
                    except asyncio.CancelledError:
                        if not task.cancelled():
                            task.cancel()  # the run's end cancelled the pump itself
                            raise
            except BaseException as e:  # handed to the loop, raised there once
                pipe.put(e)
                if isinstance(e, asyncio.CancelledError | KeyboardInterrupt | SystemExit):
                    raise
            else:
                pipe.put(_END)
            finally:
                pipe.done = True

        task = loop.create_task(pump(), name="bridge.query")
        _asyncio_pumps.add(task)
        task.add_done_callback(_asyncio_pumps.discard)


async def _pump(
    pipe: _Pipe,
    opener: Callable[[], AbstractAsyncContextManager[BridgeAPI]],
    submit: Callable[[BridgeAPI], Any],
    scope: trio.CancelScope,
) -> None:
    """Open, submit, forward the stream until the receipt or ``scope`` is cancelled (leaving),
    close. Ends when the bridge has closed; never raises (a system task must not): what went
    wrong is handed to the loop."""
    try:
        async with opener() as bridge:
            handle = await submit(bridge)
            with scope:
                async for message in handle.messages():
                    pipe.put(message)
    except BaseException as e:
        pipe.put(e if not isinstance(e, trio.Cancelled) else RuntimeError("the run ended before the prompt's receipt"))
        if isinstance(e, trio.Cancelled):
            raise  # the run's end: the system nursery's own cancellation
    else:
        pipe.put(_END)
    finally:
        pipe.done = True
