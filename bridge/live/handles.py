"""The trio side of one accepted prompt: who waits for its receipt (:class:`Pending`) and what
the code that submitted it holds (:class:`PromptHandle`); and of one extension dialog
(:class:`Dialog`)."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import TYPE_CHECKING, Any

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


#: What a prompt's one stream (:meth:`PromptHandle.messages`, :func:`bridge.query`) yields: its
#: events as they happen, then its receipt.
Message = ProgressEvent | Receipt


class PromptHandle:
    """A submitted prompt. Its receipt comes exactly once."""

    def __init__(self, prompt: Pending, bridge: Bridge) -> None:
        self._prompt = prompt
        self._bridge = bridge
        #: What has been read from already (each of text and events is read once).
        self._read: set[str] = set()

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

    async def text(self) -> AsyncGenerator[str, None]:
        """The reply text as it streams (``submit(..., stream=True)``). Ends at the receipt.
        Raises RuntimeError for a prompt submitted without ``stream``, or read a second time."""
        async with self.text_channel() as recv:
            async for piece in recv:
                yield piece

    async def events(self) -> AsyncGenerator[ProgressEvent, None]:
        """What the engine does for this prompt, as it happens (``submit(..., events=True)``):
        :mod:`bridge.core.progress`'s records (``event.to_json()`` is the JSON ``bridge
        serve`` writes). Ends at the receipt. Raises RuntimeError for a prompt submitted
        without ``events``, or read a second time."""
        async with self.events_channel() as recv:
            async for event in recv:
                yield event

    def text_channel(self) -> trio.MemoryReceiveChannel[str]:
        """The channel :meth:`text` reads (it is read once): for a caller that reads it its own way."""
        recv = self._prompt.text_recv
        if recv is None:
            raise RuntimeError("submit the prompt with stream=True to read its text as it arrives")
        if "text" in self._read:  # (trio would say only ClosedResourceError())
            raise RuntimeError("a prompt's text is read once, and this one's was read already")
        self._read.add("text")
        return recv

    def events_channel(self) -> trio.MemoryReceiveChannel[ProgressEvent]:
        """The channel :meth:`events` reads (it is read once)."""
        recv = self._prompt.event_recv
        if recv is None:
            raise RuntimeError("submit the prompt with events=True to read its events")
        if "events" in self._read:
            raise RuntimeError("a prompt's events are read once, and this one's were read already")
        self._read.add("events")
        return recv

    async def messages(self) -> AsyncGenerator[Message, None]:
        """The prompt's one stream: what the engine does for it as it happens (its
        :meth:`events`: text and thinking deltas, tool calls, retries, turns, each assistant
        message's usage), then its :class:`~bridge.core.receipts.Receipt`, last. Submit it with
        ``events=True``. Ends after the receipt."""
        async for event in self.events():
            yield event
        yield await self.receipt()

    async def stop(self) -> str | None:
        """Stop this prompt (:meth:`Bridge.stop`): returns at once with the stop's id, or None."""
        return await self._bridge.stop(self.request)


class DialogError(Exception):
    """An answer to an extension dialog was refused; the message says why (the dialog has
    ended already, or the answer does not fit it). A dialog left open stays open."""


@attrs.define(eq=False)
class Dialog:
    """An extension dialog for the controller (:meth:`Bridge.dialogs`; the rules are
    :mod:`bridge.core.dialogs`'). It ends exactly once: answered with :meth:`answer`, or
    ``cancelled`` by the bridge (its timeout, its prompt's stop or receipt, the engine's
    stop or exit, closing); :attr:`by` then says which."""

    #: The bridge's id for it (``dialog-N``).
    dialog: str
    #: The prompt it belongs to (held when it opened), or None.
    request: str | None
    #: ``select``, ``confirm``, ``input`` or ``editor``.
    method: str
    #: Its fields as Pi sent them, bounded: ``title``, ``options``, ``message``, ``placeholder``,
    #: ``prefill``, and ``timeout`` (ms) if the extension gave one.
    fields: dict[str, Any]
    #: Seconds the controller has to answer.
    timeout: float
    _bridge: Bridge = attrs.field(repr=False)
    ended: trio.Event = attrs.field(factory=trio.Event, repr=False)
    #: Who gave it its response (``controller``, ``timeout``, ``stop``, ...), once ended.
    by: str | None = None
    #: The response written to the engine (None: none was, its engine was gone).
    response: dict[str, Any] | None = None

    async def answer(self, value: str | None = None, *, confirmed: bool | None = None, cancelled: bool = False) -> None:
        """Answer it: ``value`` (select: one of ``fields["options"]``; input, editor: text),
        ``confirmed=True``/``False`` (confirm), or ``cancelled=True`` (any). Returns at once;
        raises :class:`DialogError` when it has ended already or the answer does not fit."""
        await self._bridge.answer_dialog(self.dialog, value=value, confirmed=confirmed, cancelled=cancelled)

    async def wait_ended(self) -> str:
        """Wait until it has ended; returns :attr:`by`. Ends when it gets its response (each
        dialog does, at the latest at its timeout or when the bridge closes)."""
        await self.ended.wait()
        assert self.by is not None
        return self.by
