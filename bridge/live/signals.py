"""The signals that close a controller's bridge, and the rule that keeps them from killing it.

``bridge run``, ``serve``, ``acp`` and ``demo`` close on SIGINT, SIGTERM and SIGHUP
(docs: guide/exit-codes.md: 128+N, every receipt given). A signal is theirs from before the bridge opens until
after it has closed and every receipt is out: :func:`closing_signals` is the trio receiver for
that whole span, and before it the signals are set to be ignored, since the receiver restores
what was there before it. So a signal that comes while the bridge is already closing (or after
it closed, while the last lines are written, and through the interpreter's own shutdown)
changes nothing, instead of killing the process (SIGTERM, SIGHUP) or raising
``KeyboardInterrupt`` (SIGINT) before the receipts are written (``serve`` alone also bounds
its last lines' wait for a controller that does not read them: ``FLUSH_GRACE``). Engines are spawned while the
receiver's handler is in place, so they start with the default dispositions (an ignored signal
would be inherited across ``exec``; a handled one is not).
"""

from __future__ import annotations

import signal
from collections.abc import AsyncIterator
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Final

import trio

if TYPE_CHECKING:
    from bridge.live.supervisor import Bridge

#: The signals that close the bridge (exit 128+N).
CLOSING_SIGNALS: Final = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def closing_signals(*, keep_interrupt: bool = False) -> AbstractContextManager[AsyncIterator[int]]:
    """The receiver of :data:`CLOSING_SIGNALS` (a context manager), with the signals ignored
    once it is left. ``keep_interrupt``: SIGINT is left as it was (Python's
    ``KeyboardInterrupt``) once the receiver is left."""
    for signum in CLOSING_SIGNALS:
        if signum != signal.SIGINT or not keep_interrupt:
            signal.signal(signum, signal.SIG_IGN)
    return trio.open_signal_receiver(*CLOSING_SIGNALS)


class SignalCloser:
    """The bridge a command has open, closed on each closing signal: ``run`` and ``demo``. The
    first signal decides the exit status (:attr:`first`); one that comes before the bridge has
    opened closes it as soon as it has (:meth:`opened`)."""

    def __init__(self) -> None:
        self.first: int | None = None
        self._bridge: Bridge | None = None

    def opened(self, bridge: Bridge) -> None:
        self._bridge = bridge
        if self.first is not None:
            bridge.close_on_signal(self.first)

    def closed(self) -> None:
        self._bridge = None

    async def watch(self, signals: AsyncIterator[int]) -> None:
        """Close the open bridge on each signal. Ends only when cancelled."""
        async for signum in signals:
            if self.first is None:
                self.first = signum
            # Closing begins: the running prompt is stopped (failed/closing), the rest
            # rejected; the receipts are given once the bridge has closed.
            if self._bridge is not None:
                self._bridge.close_on_signal(signum)
