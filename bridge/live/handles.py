"""The trio side of one accepted prompt: who waits for its receipt (:class:`Pending`) and what
the code that submitted it holds (:class:`PromptHandle`)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

import attrs
import trio

from bridge.core.progress import ProgressEvent
from bridge.core.receipts import Receipt

if TYPE_CHECKING:
    from bridge.live.supervisor import Bridge


@attrs.define(eq=False)
class Pending:
    """The trio side of one accepted prompt: who waits for it."""

    request: str
    done: trio.Event = attrs.field(factory=trio.Event)
    receipt: Receipt | None = None
    text_send: trio.MemorySendChannel[str] | None = None
    text_recv: trio.MemoryReceiveChannel[str] | None = None
    event_send: trio.MemorySendChannel[ProgressEvent] | None = None
    event_recv: trio.MemoryReceiveChannel[ProgressEvent] | None = None

    def close_channels(self) -> None:
        """The receipt came: whoever reads the text or the events reaches their end."""
        if self.text_send is not None:
            self.text_send.close()
        if self.event_send is not None:
            self.event_send.close()


class PromptHandle:
    """A submitted prompt. Its receipt comes exactly once."""

    def __init__(self, prompt: Pending, bridge: Bridge) -> None:
        self._prompt = prompt
        self._bridge = bridge

    @property
    def request(self) -> str:
        return self._prompt.request

    async def receipt(self) -> Receipt:
        """Wait for the receipt. Ends when the bridge settles it (it always does)."""
        await self._prompt.done.wait()
        assert self._prompt.receipt is not None
        return self._prompt.receipt

    @property
    def receipt_nowait(self) -> Receipt | None:
        return self._prompt.receipt

    async def text(self) -> AsyncIterator[str]:
        """The reply text as it streams (``submit(..., stream=True)``). Ends at the receipt."""
        recv = self._prompt.text_recv
        if recv is None:
            raise RuntimeError("submit the prompt with stream=True to read its text as it arrives")
        async with recv:
            async for piece in recv:
                yield piece

    async def events(self) -> AsyncIterator[ProgressEvent]:
        """What the engine does for this prompt, as it happens (``submit(..., events=True)``):
        :mod:`bridge.core.progress`'s records (``event.to_json()`` is the JSON ``bridge
        serve`` writes). Ends at the receipt."""
        recv = self._prompt.event_recv
        if recv is None:
            raise RuntimeError("submit the prompt with events=True to read its events")
        async with recv:
            async for event in recv:
                yield event

    async def stop(self) -> str | None:
        """Stop this prompt (:meth:`Bridge.stop`): returns at once with the stop's id, or None."""
        return await self._bridge.stop(self.request)
