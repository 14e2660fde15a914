"""The trio side of one prompt submitted to a pool (:class:`PoolHandle`): it waits in the pool
until an engine takes it, then it is that engine's bridge's prompt (its
:class:`~bridge.live.handles.PromptHandle`), or it is rejected by the pool itself. Its receipt
comes exactly once either way."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import TYPE_CHECKING, Any

import trio

from bridge.core.progress import ProgressEvent
from bridge.core.prompts import PromptOptions
from bridge.core.receipts import Receipt
from bridge.live.handles import Message, PromptHandle

if TYPE_CHECKING:
    from bridge.live.pool import Pool


class PoolHandle:
    """A prompt submitted to a pool (:meth:`Pool.submit <bridge.live.pool.Pool.submit>`). Its
    receipt comes exactly once; :attr:`engine` says which engine ran it (None: none did)."""

    def __init__(
        self, pool: Pool, request: str, conversation: str | None, message: str, options: PromptOptions
    ) -> None:
        self._pool = pool
        self._request = request
        self._conversation = conversation
        #: What the engine's bridge is given at dispatch (the pool's own copy until then).
        self.message = message
        self.options = options
        self.submitted = pool.now()
        self._inner: PromptHandle | None = None
        self._engine: int | None = None
        self._receipt: Receipt | None = None
        #: Set when an engine took it or the pool settled it: its streams can be read.
        self._placed = trio.Event()
        self._done = trio.Event()
        self._read: set[str] = set()
        #: Stopped while its engine took its conversation up (R12): settled ``cancelled`` then.
        self.stop_asked = False

    def __repr__(self) -> str:
        return f"PoolHandle({self._request!r}, engine={self._engine!r})"

    @property
    def request(self) -> str:
        """The prompt's id."""
        return self._request

    @property
    def conversation(self) -> str | None:
        """The conversation key it was submitted with, or None."""
        return self._conversation

    @property
    def engine(self) -> int | None:
        """The number of the engine that took it (its journal is named for it), or None while
        it waits, or for a prompt the pool rejected."""
        return self._engine

    @property
    def receipt_nowait(self) -> Receipt | None:
        """The receipt if it has come, else None."""
        return self._receipt

    async def receipt(self) -> Receipt:
        """Wait for the receipt. Ends when the pool or its engine's bridge settles it (it always does)."""
        await self._done.wait()
        assert self._receipt is not None
        return self._receipt

    def _attach(self, inner: PromptHandle, engine: int) -> None:
        """An engine took it (:class:`~bridge.core.pool.Dispatch`)."""
        self._inner, self._engine = inner, engine
        self._placed.set()

    def _settle(self, receipt: Receipt) -> None:
        if self._receipt is None:
            self._receipt = receipt
            self._placed.set()
            self._done.set()

    async def _channel(self, which: str) -> trio.MemoryReceiveChannel[Any] | None:
        """The engine's channel of ``which`` (``text``/``events``) once it is placed, or None
        (rejected by the pool: nothing to read). Read once. Ends when it is placed or settled."""
        wanted = self.options.get("stream" if which == "text" else "events")
        if not wanted:
            flag = "stream=True" if which == "text" else "events=True"
            raise RuntimeError(f"submit the prompt with {flag} to read its {which}")
        if which in self._read:
            raise RuntimeError(f"a prompt's {which} is read once, and this one's was read already")
        self._read.add(which)
        await self._placed.wait()
        if self._inner is None:
            return None
        return self._inner.text_channel() if which == "text" else self._inner.events_channel()

    async def text_channel(self) -> trio.MemoryReceiveChannel[str] | None:
        """What :meth:`text` reads, once an engine has it (None: the pool rejected it). Ends when
        it is placed."""
        return await self._channel("text")

    async def events_channel(self) -> trio.MemoryReceiveChannel[ProgressEvent] | None:
        """What :meth:`events` reads, once an engine has it (None: the pool rejected it). Ends
        when it is placed."""
        return await self._channel("events")

    async def text(self) -> AsyncGenerator[str, None]:
        """The reply text as it streams (``stream=True``). Ends at the receipt."""
        recv = await self.text_channel()
        if recv is not None:
            async with recv:
                async for piece in recv:
                    yield piece

    async def events(self) -> AsyncGenerator[ProgressEvent, None]:
        """What the engine does for it, as it happens (``events=True``). Ends at the receipt."""
        recv = await self.events_channel()
        if recv is not None:
            async with recv:
                async for event in recv:
                    yield event

    async def messages(self) -> AsyncGenerator[Message, None]:
        """Its events as they happen, then its receipt, last (``events=True``). Ends after the receipt."""
        async for event in self.events():
            yield event
        yield await self.receipt()

    async def stop(self) -> str | None:
        """Stop it (:meth:`Pool.stop <bridge.live.pool.Pool.stop>`): returns at once with the stop's id, or None."""
        return await self._pool.stop(self._request)
