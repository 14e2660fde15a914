"""Who hears what a bridge says: the listeners called with every notification, the channels of
:meth:`~bridge.live.supervisor.Bridge.signals` and :meth:`~bridge.live.supervisor.Bridge.dialogs`,
and whether anyone answers extension dialogs.

Rules: a notification is handed to every channel without waiting -- a full channel misses it, a
closed one is dropped -- so a subscriber that does not read loses notifications, never the
bridge; a channel asked for after the bridge closed ends at once; a dialog nobody takes from a
full channel ends at its timeout.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import trio

from bridge.live.handles import Dialog


class Notifications:
    """The notifications of one bridge."""

    def __init__(self) -> None:
        #: Observers called with every notification dict (serve, run and acp use this).
        self.listeners: list[Callable[[dict[str, Any]], None]] = []
        #: A controller answers extension dialogs (serve: on its stdin) and reads them as
        #: ``ask`` notifications: dialogs are asked, not cancelled.
        self.answers_dialogs = False
        self._subscribers: list[trio.MemorySendChannel[dict[str, Any]]] = []
        self._dialog_subscribers: list[trio.MemorySendChannel[Dialog]] = []
        #: Set once the channels are closed (:meth:`close`): the bridge sends nothing more.
        self._closed = False

    def signals(self, max_buffer: int) -> trio.MemoryReceiveChannel[dict[str, Any]]:
        send, recv = trio.open_memory_channel[dict[str, Any]](max_buffer)
        self._subscribe(self._subscribers, send)
        return recv

    def dialogs(self, max_buffer: int) -> trio.MemoryReceiveChannel[Dialog]:
        send, recv = trio.open_memory_channel[Dialog](max_buffer)
        self._subscribe(self._dialog_subscribers, send)
        return recv

    def _subscribe(self, subscribers: list[Any], send: Any) -> None:
        """A new channel's send end joins ``subscribers``; on a closed bridge, which sends nothing
        more, it is closed at once, so the channel ends."""
        if self._closed:
            send.close()
        else:
            subscribers.append(send)

    @property
    def heard(self) -> bool:
        """Someone reads notifications (a listener or a channel): worth making one's JSON."""
        return bool(self.listeners or self._subscribers)

    def listened(self) -> bool:
        """Someone answers dialogs: the controller, or an open :meth:`dialogs` channel."""
        if self.answers_dialogs:
            return True
        self._dialog_subscribers = [s for s in self._dialog_subscribers if not _nobody_reads(s)]
        return bool(self._dialog_subscribers)

    def notify(self, note: dict[str, Any]) -> None:
        for listener in self.listeners:
            listener(note)
        _offer(self._subscribers, note)

    def offer_dialog(self, dialog: Dialog) -> None:
        _offer(self._dialog_subscribers, dialog)

    def close(self) -> None:
        """The bridge has closed: every channel ends."""
        self._closed = True
        for send in self._subscribers:
            send.close()
        for dsend in self._dialog_subscribers:
            dsend.close()


def _offer(channels: list[trio.MemorySendChannel[Any]], item: Any) -> None:
    """Hand ``item`` to every channel without waiting: a full one misses it, a closed one is
    dropped from ``channels``."""
    for send in list(channels):
        try:
            send.send_nowait(item)
        except trio.WouldBlock:
            pass
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            channels.remove(send)


def _nobody_reads(send: trio.MemorySendChannel[Any]) -> bool:
    """Every receiver of ``send`` has been closed (nobody reads it any more)."""
    return send.statistics().open_receive_channels == 0
