"""The bridge under asyncio: the same trio bridge, run as trio's *guest* on the asyncio loop.

:func:`bridge.live.api.open_bridge` finds the running library itself (``sniffio``); under
asyncio it opens the bridge here. Why guest mode (``trio.lowlevel.start_guest_run``) and not a
second implementation or a port to anyio: there is one bridge. Every guarantee of the trio path
-- the supervision's decisions, the shielded close, the close ladder that reaps each engine,
the journal's fsync off the loop, the clean-up of the private folders -- is the very code that
runs, and trio's scheduler runs its tasks on the asyncio loop's own thread (its I/O waits in a
helper thread), so the two share one thread and need no lock.

The rules of the door:

- **Synchronous calls** of :class:`~bridge.live.supervisor.Bridge` (``submit_nowait``,
  ``configure``, ``shutdown``, ``close_now``, the properties, ``status()``) are the bridge's own:
  their checks run at once and raise at once; what they feed the supervision is handed to
  trio (``TrioToken.run_sync_soon``: in the order given) when the caller is not a trio task.
- **Awaitable calls** (``submit``, ``prompt``, ``stop``, ``models``, ``drain``, ``aclose``, a
  handle's ``receipt``, ``text``, ``events``, a dialog's ``answer``) each run as a trio task in
  a nursery of this door; the result, or the exception, comes back as an asyncio future.
  Cancelling the asyncio caller cancels that task and waits for it to end: a cancelled
  ``prompt`` stops its prompt, as under trio.
- **The block's end**, however it ends (an exception, a cancellation, Ctrl-C, which
  ``asyncio.run`` turns into a cancellation): the door's calls are cancelled, the bridge closes
  as under trio (every receipt given, the engine reaped, its folders removed), and only then
  does ``async with`` return; a second cancellation while it closes is held until it has.
- **Every call is written out** (its parameters, its types: :mod:`bridge.live.protocols`, which
  these classes and the trio ones both satisfy): no ``__getattr__``, and no ``**kw`` passed on
  but a prompt's options, declared once (:class:`~bridge.core.prompts.PromptOptions`) and
  refused by each door when misspelt (:func:`~bridge.live.submits.prompt_door`), so a misspelt
  keyword is a TypeError naming the call made (``submit``), and a user's mypy sees the same
  signatures under either library.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any, TypeVar, Unpack

import outcome
import trio

from bridge.core.config import BridgeConfig
from bridge.core.progress import ProgressEvent
from bridge.core.prompts import PromptOptions
from bridge.core.receipts import Receipt
from bridge.core.supervision import Collected
from bridge.live.engine import Engine
from bridge.live.handles import Dialog, Message, PromptHandle
from bridge.live.journal import Journal
from bridge.live.steering import EngineQuestionError
from bridge.live.submits import prompt_door
from bridge.live.supervisor import Bridge
from bridge.profiles.command import EngineProfile

T = TypeVar("T")
Opened = TypeVar("Opened")
W = TypeVar("W")


class _Door:
    """The way from asyncio into the guest: a trio token and a nursery for the calls."""

    def __init__(self, loop: asyncio.AbstractEventLoop, token: trio.lowlevel.TrioToken, calls: trio.Nursery) -> None:
        self.loop = loop
        self.token = token
        self.calls = calls

    async def call(self, fn: Callable[..., Awaitable[T]], *args: Any, **kw: Any) -> T:
        """Run ``fn(*args, **kw)`` as a trio task; its result or exception here. Ends when it
        does; cancelled, it cancels the task and waits for it to end (shielded). A call the
        bridge's closing ends raises :class:`BridgeClosedError`."""
        done: asyncio.Future[outcome.Outcome[T]] = self.loop.create_future()
        scope = trio.CancelScope()

        async def task() -> None:
            """The call, in trio. Ends when ``fn`` does (or the scope or the bridge's close cancels it)."""
            result: outcome.Outcome[T] = outcome.Error(asyncio.CancelledError())  # our scope's cancel
            try:
                with scope:
                    result = outcome.Value(await fn(*args, **kw))
            except trio.Cancelled:
                done.set_result(outcome.Error(BridgeClosedError("the bridge has closed")))
                raise
            except BaseException as e:
                result = outcome.Error(e)
            done.set_result(result)

        try:
            self.token.run_sync_soon(self.calls.start_soon, task)
        except trio.RunFinishedError:
            raise BridgeClosedError("the bridge has closed") from None
        try:
            got = await asyncio.shield(done)
        except asyncio.CancelledError:
            self.soon(scope.cancel)
            await _shielded(done)
            raise
        return got.unwrap()

    def soon(self, fn: Callable[[], object]) -> None:
        """Have trio call ``fn`` soon, if its run has not ended (then there is nothing to do)."""
        try:
            self.token.run_sync_soon(fn)
        except trio.RunFinishedError:
            pass

    async def read_out(self, recv: trio.MemoryReceiveChannel[T]) -> AsyncIterator[T]:
        """A handle's channel, read until it ends, then closed. The channel itself, not the trio
        handle's generator: a trio async generator made outside trio would be finalized by the
        wrong library's hooks."""
        try:
            async for item in self.items(recv.receive):
                yield item
        finally:
            self.soon(recv.close)

    async def items(self, receive: Callable[[], Awaitable[T]]) -> AsyncIterator[T]:
        """What a trio channel's ``receive`` gives, one call each, until it ends."""
        while True:
            try:
                yield await self.call(receive)
            except (trio.EndOfChannel, trio.ClosedResourceError, StopAsyncIteration, BridgeClosedError):
                return


class BridgeClosedError(RuntimeError):
    """An asyncio call into the bridge was ended by the bridge's closing (the block ended)."""


class AsyncioPromptHandle:
    """A submitted prompt, for asyncio code: :class:`~bridge.live.handles.PromptHandle`'s calls
    (:class:`~bridge.live.protocols.PromptHandleAPI`)."""

    def __init__(self, handle: PromptHandle, door: _Door) -> None:
        self._handle = handle
        self._door = door

    def __repr__(self) -> str:
        return f"AsyncioPromptHandle({self._handle.request!r})"

    @property
    def request(self) -> str:
        """The prompt's id."""
        return self._handle.request

    @property
    def receipt_nowait(self) -> Receipt | None:
        """The receipt if it has come, else None."""
        return self._handle.receipt_nowait

    async def receipt(self) -> Receipt:
        """Wait for the receipt. Ends when the bridge settles it (it always does)."""
        if self._handle.receipt_nowait is not None:  # settled (also after the bridge closed)
            return self._handle.receipt_nowait
        return await self._door.call(self._handle.receipt)

    async def text(self) -> AsyncIterator[str]:
        """The reply text as it streams (``stream=True``). Ends at the receipt."""
        async for piece in self._door.read_out(self._handle.text_channel()):
            yield piece

    async def events(self) -> AsyncIterator[ProgressEvent]:
        """What the engine does for this prompt (``events=True``). Ends at the receipt."""
        async for event in self._door.read_out(self._handle.events_channel()):
            yield event

    async def messages(self) -> AsyncIterator[Message]:
        """Its events as they happen, then its receipt (``events=True``). Ends after the receipt."""
        async for event in self.events():
            yield event
        yield await self.receipt()

    async def stop(self) -> str | None:
        """Stop this prompt: returns at once with the stop's id, or None."""
        if self._handle.receipt_nowait is not None:
            return None  # settled: left alone, as under trio
        return await self._door.call(self._handle.stop)


class AsyncioDialog:
    """An extension dialog, for asyncio code: :class:`~bridge.live.handles.Dialog`'s fields and
    calls (:class:`~bridge.live.protocols.DialogAPI`)."""

    def __init__(self, dialog: Dialog, door: _Door) -> None:
        self._dialog = dialog
        self._door = door

    def __repr__(self) -> str:
        return f"AsyncioDialog({self._dialog!r})"

    @property
    def dialog(self) -> str:
        """The bridge's id for it (``dialog-N``)."""
        return self._dialog.dialog

    @property
    def request(self) -> str | None:
        """The prompt it belongs to, or None."""
        return self._dialog.request

    @property
    def method(self) -> str:
        """``select``, ``confirm``, ``input`` or ``editor``."""
        return self._dialog.method

    @property
    def fields(self) -> dict[str, Any]:
        """Its fields as Pi sent them, bounded."""
        return self._dialog.fields

    @property
    def timeout(self) -> float:
        """Seconds the controller has to answer."""
        return self._dialog.timeout

    @property
    def by(self) -> str | None:
        """Who gave it its response, once ended."""
        return self._dialog.by

    @property
    def response(self) -> dict[str, Any] | None:
        """The response written to the engine, once ended."""
        return self._dialog.response

    async def answer(self, value: str | None = None, *, confirmed: bool | None = None, cancelled: bool = False) -> None:
        """As :meth:`Dialog.answer <bridge.live.handles.Dialog.answer>`. Returns at once."""
        await self._door.call(self._dialog.answer, value, confirmed=confirmed, cancelled=cancelled)

    async def wait_ended(self) -> str:
        """Wait until it has ended (at the latest at its timeout); returns who ended it."""
        return await self._door.call(self._dialog.wait_ended)


class AsyncioBridge:
    """The bridge, for asyncio code: :class:`~bridge.live.supervisor.Bridge`'s calls
    (:class:`~bridge.live.protocols.BridgeAPI`), each with its parameters written out; its
    awaitable calls, handles, dialogs and channels here are asyncio's."""

    def __init__(self, bridge: Bridge, door: _Door) -> None:
        self._bridge = bridge
        self._door = door

    def __repr__(self) -> str:
        return f"AsyncioBridge({self._bridge!r})"

    @property
    def _closed(self) -> bool:
        """The bridge has closed (its guest task may have ended): calls answer as a closed trio
        bridge does, here."""
        return self._bridge._finished

    # -- what it runs with (read at once) ------------------------------------------------

    @property
    def profile(self) -> EngineProfile:
        """The engine profile it was opened on."""
        return self._bridge.profile

    @property
    def config(self) -> BridgeConfig:
        """Its settings."""
        return self._bridge.config

    @property
    def journal(self) -> Journal | None:
        """Its journal, or None."""
        return self._bridge.journal

    def collected(self) -> Collected:
        """As :meth:`Bridge.collected <bridge.live.supervisor.Bridge.collected>`."""
        return self._bridge.collected()

    @property
    def engine(self) -> Engine | None:
        """The current engine process (None before the first prompt)."""
        return self._bridge.engine

    @property
    def no_prompt_follows(self) -> str | None:
        """Why no prompt can be submitted any more, or None while one can."""
        return self._bridge.no_prompt_follows

    @property
    def receipts_issued(self) -> int:
        """Receipts given so far."""
        return self._bridge.receipts_issued

    @property
    def down_reason(self) -> str | None:
        """Why the engine is down for good, or None."""
        return self._bridge.down_reason

    @property
    def closing(self) -> bool:
        """The bridge is closing."""
        return self._bridge.closing

    @property
    def generation(self) -> int:
        """How many engines it has started."""
        return self._bridge.generation

    @property
    def journal_failed(self) -> str | None:
        """Why the journal could not be written, or None."""
        return self._bridge.journal_failed

    def status(self) -> dict[str, Any]:
        """As :meth:`Bridge.status`."""
        return self._bridge.status()

    def knows(self, request: str) -> bool:
        """As :meth:`Bridge.knows`."""
        return self._bridge.knows(request)

    def get_receipt(self, request: str) -> Receipt | None:
        """As :meth:`Bridge.get_receipt`."""
        return self._bridge.get_receipt(request)

    # -- synchronous calls: the bridge's own ----------------------------------------------

    @prompt_door(PromptOptions)
    def submit_nowait(
        self, message: str, *, request: str | None = None, **options: Unpack[PromptOptions]
    ) -> AsyncioPromptHandle:
        """As :meth:`Bridge.submit_nowait`: accepted at once, its checks raise at once."""
        return AsyncioPromptHandle(self._bridge.submit_nowait(message, request=request, **options), self._door)

    def configure(self, *, provider: str | None = None, model: str | None = None, thinking: str | None = None) -> None:
        """As :meth:`Bridge.configure`. Returns at once."""
        self._bridge.configure(provider=provider, model=model, thinking=thinking)

    def new_conversation(self) -> None:
        """As :meth:`Bridge.new_conversation`. Returns at once."""
        self._bridge.new_conversation()

    def compact(self, instructions: str | None = None) -> None:
        """As :meth:`Bridge.compact`. Returns at once."""
        self._bridge.compact(instructions)

    def shutdown(self, drain_timeout: float | None = None) -> None:
        """As :meth:`Bridge.shutdown`. Returns at once."""
        self._bridge.shutdown(drain_timeout)

    def close_now(self, why: str = "close", detail: str | None = None) -> None:
        """As :meth:`Bridge.close_now`. Returns at once."""
        self._bridge.close_now(why, detail)

    # -- awaitable calls: trio tasks ------------------------------------------------------

    @prompt_door(PromptOptions)
    async def submit(
        self, message: str, *, request: str | None = None, **options: Unpack[PromptOptions]
    ) -> AsyncioPromptHandle:
        """As :meth:`Bridge.submit`: returns at once, or with a ledger once the ledger has it."""
        if self._bridge.ledger is None or self._closed:
            return self.submit_nowait(message, request=request, **options)
        handle = await self._door.call(self._bridge.submit, message, request=request, **options)
        return AsyncioPromptHandle(handle, self._door)

    @prompt_door(PromptOptions)
    async def prompt(self, message: str, *, request: str | None = None, **options: Unpack[PromptOptions]) -> Receipt:
        """Submit and wait for the receipt. Ends when it comes (it always does); cancelled
        while it waits, it stops the prompt."""
        if self._closed:  # rejected ``closing`` at once, as under trio
            return await self.submit_nowait(message, request=request, **options).receipt()
        return await self._door.call(self._bridge.prompt, message, request=request, **options)

    async def receipt(self, request: str) -> Receipt:
        """As :meth:`Bridge.receipt`. Ends when there is one."""
        return await self._door.call(self._bridge.receipt, request)

    async def stop(self, request: str) -> str | None:
        """As :meth:`Bridge.stop`: returns at once with the stop's id, or None."""
        if self._closed:
            return None
        return await self._door.call(self._bridge.stop, request)

    async def models(self) -> list[dict[str, Any]]:
        """As :meth:`Bridge.models`. Ends when the engine answers, or raises."""
        if self._closed:
            raise EngineQuestionError("the bridge has closed: there is no engine to ask")
        return await self._door.call(self._bridge.models)

    async def send_raw(self, cmd: dict[str, Any]) -> None:
        """As :meth:`Bridge.send_raw`. Ends when the line is written, or after ``write_timeout``."""
        await self._door.call(self._bridge.send_raw, cmd)

    async def answer_dialog(
        self, dialog: str, *, value: str | None = None, confirmed: bool | None = None, cancelled: bool = False
    ) -> None:
        """As :meth:`Bridge.answer_dialog`. Returns at once."""
        await self._door.call(self._bridge.answer_dialog, dialog, value=value, confirmed=confirmed, cancelled=cancelled)

    async def drain(self) -> None:
        """Wait until every accepted prompt has its receipt (each bounded by its timeouts)."""
        if not self._closed:
            await self._door.call(self._bridge.drain)

    async def wait_closed(self) -> None:
        """Wait until the bridge has closed (after shutdown's drain or close_now)."""
        if not self._closed:
            await self._door.call(self._bridge.wait_closed)

    async def aclose(self, *, drain: bool = False) -> None:
        """As :meth:`Bridge.aclose`: every accepted prompt gets its receipt, then the engine
        stops. Ends when the bridge has closed (bounded as under trio); a second call changes nothing."""
        if not self._closed:
            await self._door.call(self._bridge.aclose, drain=drain)

    async def signals(self, max_buffer: int = 1000) -> AsyncIterator[dict[str, Any]]:
        """Every notification from now on; ends when the bridge has closed."""
        channel = self._bridge.signals(max_buffer)
        async for note in self._door.items(channel.receive):
            yield note

    async def dialogs(self, max_buffer: int = 100) -> AsyncIterator[AsyncioDialog]:
        """The extension dialogs to answer (see :meth:`Bridge.dialogs`); ends when the bridge has closed."""
        channel = self._bridge.dialogs(max_buffer)
        async for dialog in self._door.items(channel.receive):
            yield AsyncioDialog(dialog, self._door)


class _Guest:
    """The one trio run of an asyncio loop (a thread has one trio run at a time): started by
    the first bridge opened on the loop, ended when the last one has closed. Its nursery holds
    each bridge's task."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.users = 0
        self.ready: asyncio.Future[tuple[trio.lowlevel.TrioToken, trio.Nursery, trio.Event]] = loop.create_future()
        self.finished: asyncio.Future[outcome.Outcome[None]] = loop.create_future()

    def start(self) -> None:
        async def main() -> None:
            """The guest run. Ends when its last bridge has left (``end`` is set) and every
            bridge's task has ended."""
            async with trio.open_nursery() as bridges:
                end = trio.Event()
                self.ready.set_result((trio.lowlevel.current_trio_token(), bridges, end))
                await end.wait()

        trio.lowlevel.start_guest_run(
            main,
            run_sync_soon_threadsafe=self.loop.call_soon_threadsafe,
            done_callback=self.finished.set_result,
            host_uses_signal_set_wakeup_fd=True,
            strict_exception_groups=True,
        )


#: Each running loop's guest (the loop's attribute would do, were loops open to attributes).
_guests: dict[asyncio.AbstractEventLoop, _Guest] = {}


async def _join_guest(loop: asyncio.AbstractEventLoop) -> _Guest:
    """The loop's guest, started if none runs (or one is ending: after it has ended). Ends when
    the guest is ready."""
    while True:
        guest = _guests.get(loop)
        if guest is None:
            guest = _guests[loop] = _Guest(loop)
            guest.start()
        elif guest.users == 0 and guest.ready.done():  # ending: wait, then start anew
            await _shielded(guest.finished)
            if _guests.get(loop) is guest:
                del _guests[loop]
            continue
        guest.users += 1
        await _shielded(guest.ready)
        return guest


async def _leave_guest(guest: _Guest) -> None:
    """The last bridge of the loop has closed: its guest run ends (this waits for it)."""
    guest.users -= 1
    if guest.users == 0:
        token, _, end = guest.ready.result()
        token.run_sync_soon(end.set)
        result = await _shielded(guest.finished)
        if _guests.get(guest.loop) is guest:
            del _guests[guest.loop]
        result.unwrap()


@asynccontextmanager
async def open_on_asyncio(opener: Callable[[], AbstractAsyncContextManager[Bridge]]) -> AsyncIterator[AsyncioBridge]:
    """Open the bridge ``opener`` opens, as a task of the running asyncio loop's trio guest;
    close it when the block ends, however it ends. Its exit ends when the bridge has closed."""
    async with open_wrapped_on_asyncio(opener, AsyncioBridge) as bridge:
        yield bridge


@asynccontextmanager
async def open_wrapped_on_asyncio(
    opener: Callable[[], AbstractAsyncContextManager[Opened]], wrap: Callable[[Opened, _Door], W]
) -> AsyncIterator[W]:
    """:func:`open_on_asyncio` for anything a trio context manager opens (a bridge, a pool:
    :mod:`bridge.live.pool`), given to the block as ``wrap(opened, door)``. Its exit ends when
    what was opened has closed."""
    loop = asyncio.get_running_loop()
    guest = await _join_guest(loop)
    opened: asyncio.Future[tuple[Opened, _Door, trio.Event]] = loop.create_future()
    finished: asyncio.Future[outcome.Outcome[None]] = loop.create_future()
    aborted = [False]

    async def run() -> None:
        """The bridge, open in trio. Ends when the asyncio block has ended (``release``) and the
        bridge has closed."""
        try:
            async with opener() as bridge, trio.open_nursery() as calls:
                release = trio.Event()
                door = _Door(loop, trio.lowlevel.current_trio_token(), calls)
                opened.set_result((bridge, door, release))
                await release.wait()
                calls.cancel_scope.cancel()
                if aborted[0]:
                    raise _BlockRaised
        except* _BlockRaised:
            pass

    async def task() -> None:
        """:func:`run` as a task of the guest. Ends when it does."""
        # The bridge's own outcome is its opener's: never the guest's nursery's to raise.
        result = await outcome.acapture(run)
        if not opened.done():  # it never opened: the opener raised (ProfileError, JournalError, ...)
            opened.set_exception(RuntimeError("the bridge did not open"))
        finished.set_result(result)

    token, bridges, _ = guest.ready.result()
    token.run_sync_soon(bridges.start_soon, task)
    try:
        try:
            bridge, door, release = await asyncio.shield(opened)
        except asyncio.CancelledError:
            # Cancelled while it opens: once it has, it is closed at once; this ends when it has.
            opened.add_done_callback(_let_go)
            await _shielded(finished)
            raise
        except BaseException:  # it did not open: the opener's own error, as under trio
            (await _shielded(finished)).unwrap()
            raise
        try:
            yield wrap(bridge, door)
        except BaseException:
            aborted[0] = True  # the block raised: the bridge closes without draining, as under trio
            raise
        finally:
            door.token.run_sync_soon(release.set)
            (await _shielded(finished)).unwrap()
    finally:
        await _leave_guest(guest)


class _BlockRaised(Exception):
    """Raised in the guest when the asyncio block raised: the bridge closes as it does when a
    trio block raises (no drain)."""


def _let_go(opened: asyncio.Future[tuple[Any, _Door, trio.Event]]) -> None:
    if not opened.cancelled() and opened.exception() is None:
        _, door, release = opened.result()
        door.token.run_sync_soon(release.set)


async def _shielded(future: asyncio.Future[T]) -> T:
    """Wait for ``future`` whatever cancels the waiter meanwhile; a cancellation that came is
    raised once it is done. Ends when ``future`` is done."""
    cancelled = False
    while True:
        try:
            result = await asyncio.shield(future)
            break
        except asyncio.CancelledError:
            if future.done():
                result = future.result()
                break
            cancelled = True
    if cancelled:
        raise asyncio.CancelledError
    return result
