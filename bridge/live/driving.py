"""The drive loop: how the trio layer calls a pure object's doors and carries out what they return.

Two pure objects decide in the trio layer, and both are driven by a :class:`Driver`: a bridge's
:class:`~bridge.core.supervision.Supervision` (:mod:`bridge.live.supervisor`) and a pool's
:class:`~bridge.core.pool.PoolRules` (:mod:`bridge.live.pool`). A *door* is a call of one of the
object's doors, bound with its arguments and the time (``lambda: supervision.tick(now())``); it
returns the actions to carry out, in order. The rules it keeps, once for both:

- **One door at a time.** A door called while actions are being carried out (a carrier that calls
  one: a prompt that could not be written, a listener that stops a prompt) waits its turn: steps
  never nest, and the order of their actions is the order of the doors.
- **Each action by the carrier for its type**, one dictionary look-up (``carriers``, a table a
  reader greps, not a name built at run time).
- **From asyncio code** (trio as asyncio's guest: :mod:`bridge.live.aio`) a door is handed to
  trio with the run's token, in order, and driven there; once the trio run has ended (the owner
  has closed, nothing waits on it) it is driven here and now.
- **Waking.** After the doors, :meth:`poke` wakes whoever waits for a change (:meth:`wait_change`:
  a drain, the clock) when the owner says something changed (``changed``).
- **The clock** (:meth:`clock`): one task sleeps until the object's next deadline, or until a
  change may have moved it, and calls its tick door.

What differs is the owner's: ``between`` (after each door's actions: a door that follows from
them, say the journal's failure seen while they were carried out), ``settled`` (always, once the
doors are done, even when a carrier raised) and ``changed`` (whether to wake the waiters).
"""

from __future__ import annotations

import collections
import math
from collections.abc import Callable, Iterable
from typing import Any, Generic, TypeVar

import trio

A = TypeVar("A")

#: A door of a pure object, called with no arguments: the actions it returns, in order.
Door = Callable[[], Iterable[A]]


class Driver(Generic[A]):
    """Calls doors one at a time and carries out their actions (the module's rules)."""

    def __init__(
        self,
        carriers: dict[type, Callable[[Any], None]],
        *,
        between: Callable[[], Door[A] | None] | None = None,
        settled: Callable[[], None] | None = None,
        changed: Callable[[], bool] | None = None,
    ) -> None:
        #: Each action type's carrier (the owner may wrap them: a tracer's hooks).
        self.carriers = carriers
        self._between = between
        self._settled = settled
        self._changed_by = changed
        self._token = trio.lowlevel.current_trio_token()
        self._doors: collections.deque[Door[A]] = collections.deque()
        #: True while doors are called and their actions carried out.
        self.stepping = False
        self._changed = trio.Event()

    def drive(self, door: Door[A]) -> None:
        """Call ``door`` and carry out the actions it returns, in order (after the doors called
        before it). Returns once they are carried out, or at once when a door is being driven
        already (this one waits its turn) or when called from asyncio code (handed to trio)."""
        if not trio.lowlevel.in_trio_task():
            # Called from asyncio code (trio as its guest): handed to trio, in order, and driven
            # there. Once the guest run has ended the owner has closed and nothing waits on it:
            # its closed object answers here and now (a prompt is rejected ``closing``, as under trio).
            try:
                self._token.run_sync_soon(self._drive_in_trio, door)
                return
            except trio.RunFinishedError:
                pass
        self._drive_in_trio(door)

    def queue(self, door: Door[A]) -> None:
        """Queue ``door`` behind the doors waiting their turn, without driving: it is called by the
        drive under way, or else by the next one."""
        self._doors.append(door)

    def _drive_in_trio(self, door: Door[A]) -> None:
        doors = self._doors
        doors.append(door)
        if self.stepping:
            return
        self.stepping = True
        carriers, between = self.carriers, self._between
        try:
            while doors:
                for action in doors.popleft()():
                    carriers[type(action)](action)
                if between is not None:
                    follows = between()
                    if follows is not None:
                        doors.append(follows)
        finally:
            self.stepping = False
            if self._settled is not None:
                self._settled()
        if self._changed_by is None or self._changed_by():
            self.poke()

    def poke(self) -> None:
        """Wake whoever waits for a change (:meth:`wait_change`)."""
        self._changed.set()
        self._changed = trio.Event()

    async def wait_change(self) -> None:
        """Wait for the next change. Ends at the next :meth:`poke` (after a door that changed something)."""
        await self._changed.wait()

    async def clock(
        self, next_deadline: Callable[[], float | None], tick: Door[A], t0: float, done: trio.Event
    ) -> None:
        """Call ``tick`` whenever the next deadline passes (``next_deadline()``: seconds after
        ``t0`` on trio's clock, or None: none is set). Ends when ``done`` is set (checked after
        each change) or the task is cancelled."""
        while not done.is_set():
            changed = self._changed
            deadline = next_deadline()
            at = t0 + deadline if deadline is not None else math.inf
            with trio.move_on_at(at):
                await changed.wait()
            if deadline is not None and trio.current_time() >= at:
                self.drive(tick)
