"""The pool under asyncio: the same trio :class:`~bridge.live.pool.Pool`, run as trio's guest on
the asyncio loop, by the door :mod:`bridge.live.aio` opens bridges with (its rules are these:
synchronous calls are the pool's own, awaitable calls run as trio tasks, the block's end closes
the pool as under trio)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, Unpack

from bridge.core.progress import ProgressEvent
from bridge.core.prompts import PoolPromptOptions
from bridge.core.receipts import Receipt
from bridge.live.aio import _Door
from bridge.live.handles import Message
from bridge.live.pool import Pool
from bridge.live.pool_handle import PoolHandle
from bridge.live.submits import prompt_door
from bridge.live.supervisor import Bridge


class AsyncioPoolHandle:
    """A prompt submitted to a pool, for asyncio code: :class:`~bridge.live.pool_handle.PoolHandle`'s calls."""

    def __init__(self, handle: PoolHandle, door: _Door) -> None:
        self._handle = handle
        self._door = door

    def __repr__(self) -> str:
        return f"AsyncioPoolHandle({self._handle.request!r})"

    @property
    def request(self) -> str:
        """The prompt's id."""
        return self._handle.request

    @property
    def conversation(self) -> str | None:
        """Its conversation key, or None."""
        return self._handle.conversation

    @property
    def engine(self) -> int | None:
        """The engine that took it, or None."""
        return self._handle.engine

    @property
    def receipt_nowait(self) -> Receipt | None:
        """The receipt if it has come, else None."""
        return self._handle.receipt_nowait

    async def receipt(self) -> Receipt:
        """Wait for the receipt. Ends when it is settled (it always is)."""
        if self._handle.receipt_nowait is not None:
            return self._handle.receipt_nowait
        return await self._door.call(self._handle.receipt)

    async def text(self) -> AsyncIterator[str]:
        """The reply text as it streams (``stream=True``). Ends at the receipt."""
        recv = await self._door.call(self._handle.text_channel)
        if recv is not None:
            async for piece in self._door.read_out(recv):
                yield piece

    async def events(self) -> AsyncIterator[ProgressEvent]:
        """What the engine does for it (``events=True``). Ends at the receipt."""
        recv = await self._door.call(self._handle.events_channel)
        if recv is not None:
            async for event in self._door.read_out(recv):
                yield event

    async def messages(self) -> AsyncIterator[Message]:
        """Its events, then its receipt (``events=True``). Ends after the receipt."""
        async for event in self.events():
            yield event
        yield await self.receipt()

    async def stop(self) -> str | None:
        """Stop it: returns at once with the stop's id, or None."""
        if self._handle.receipt_nowait is not None:
            return None
        return await self._door.call(self._handle.stop)


class AsyncioPool:
    """The pool, for asyncio code: :class:`~bridge.live.pool.Pool`'s calls, its handles and
    channels asyncio's."""

    def __init__(self, pool: Pool, door: _Door) -> None:
        self._pool = pool
        self._door = door

    def __repr__(self) -> str:
        return f"AsyncioPool({self._pool!r})"

    @property
    def _closed(self) -> bool:
        return self._pool._finished

    @property
    def engines(self) -> dict[int, Bridge]:
        """As :attr:`Pool.engines <bridge.live.pool.Pool.engines>` (the trio bridges, to read)."""
        return self._pool.engines

    @property
    def journals(self) -> dict[int, Any]:
        """Every journal the pool's engines wrote, by engine number."""
        return self._pool.journals

    @property
    def receipts_issued(self) -> int:
        """Receipts given so far."""
        return self._pool.receipts_issued

    @property
    def closing(self) -> bool:
        """The pool is closing."""
        return self._pool.closing

    def status(self) -> dict[str, Any]:
        """As :meth:`Pool.status <bridge.live.pool.Pool.status>`."""
        return self._pool.status()

    def knows(self, request: str) -> bool:
        """As :meth:`Pool.knows <bridge.live.pool.Pool.knows>`."""
        return self._pool.knows(request)

    def get_receipt(self, request: str) -> Receipt | None:
        """As :meth:`Pool.get_receipt <bridge.live.pool.Pool.get_receipt>`."""
        return self._pool.get_receipt(request)

    @prompt_door(PoolPromptOptions)
    def submit_nowait(
        self, message: str, *, request: str | None = None, **options: Unpack[PoolPromptOptions]
    ) -> AsyncioPoolHandle:
        """As :meth:`Pool.submit_nowait <bridge.live.pool.Pool.submit_nowait>`: accepted at once, its checks raise at once."""
        return AsyncioPoolHandle(self._pool.submit_nowait(message, request=request, **options), self._door)

    @prompt_door(PoolPromptOptions)
    async def submit(
        self, message: str, *, request: str | None = None, **options: Unpack[PoolPromptOptions]
    ) -> AsyncioPoolHandle:
        """As :meth:`Pool.submit <bridge.live.pool.Pool.submit>`: returns at once."""
        return self.submit_nowait(message, request=request, **options)

    @prompt_door(PoolPromptOptions)
    async def prompt(
        self, message: str, *, request: str | None = None, **options: Unpack[PoolPromptOptions]
    ) -> Receipt:
        """Submit and wait for the receipt. Ends when it comes (it always does); cancelled while it
        waits, it stops the prompt."""
        handle = self.submit_nowait(message, request=request, **options)
        try:
            return await handle.receipt()
        except BaseException:
            if not self._closed:
                await self._door.call(self._pool.stop, handle.request)
            raise

    async def stop(self, request: str) -> str | None:
        """As :meth:`Pool.stop <bridge.live.pool.Pool.stop>`: returns at once."""
        if self._closed:
            return None
        return await self._door.call(self._pool.stop, request)

    def end_conversation(self, conversation: str) -> None:
        """As :meth:`Pool.end_conversation <bridge.live.pool.Pool.end_conversation>`. Returns at once."""
        self._pool.end_conversation(conversation)

    def shutdown(self, drain_timeout: float | None = None) -> None:
        """As :meth:`Pool.shutdown <bridge.live.pool.Pool.shutdown>`. Returns at once."""
        self._pool.shutdown(drain_timeout)

    def close_now(self) -> None:
        """As :meth:`Pool.close_now <bridge.live.pool.Pool.close_now>`. Returns at once."""
        self._pool.close_now()

    async def drain(self) -> None:
        """Wait until every accepted prompt has its receipt."""
        if not self._closed:
            await self._door.call(self._pool.drain)

    async def wait_closed(self) -> None:
        """Wait until the pool has closed."""
        if not self._closed:
            await self._door.call(self._pool.wait_closed)

    async def aclose(self, *, drain: bool = False) -> None:
        """As :meth:`Pool.aclose <bridge.live.pool.Pool.aclose>`. Ends when the pool has closed."""
        if not self._closed:
            await self._door.call(self._pool.aclose, drain=drain)

    async def signals(self, max_buffer: int = 1000) -> AsyncIterator[dict[str, Any]]:
        """Every notification from now on; ends when the pool has closed."""
        channel = self._pool.signals(max_buffer)
        async for note in self._door.items(channel.receive):
            yield note
