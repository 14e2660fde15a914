"""The launches of one bridge: each engine's preparation and private folders, its key endpoint,
and the conversation record a receipt leaves to write.

A :class:`~bridge.profiles.command.Launch` is what the profile prepared for one engine: its argv,
its private folders (removed at that engine's exit, and whatever is left at the bridge's close),
its key endpoint (whose gate follows the supervision's :meth:`~bridge.core.supervision.Supervision.model_gate`),
and, for a named conversation, what to record after each of its receipts
(:mod:`bridge.profiles.conversation`). This module keeps them for the bridge
(:class:`~bridge.live.supervisor.Bridge`), which spawns each engine from one
(:class:`~bridge.live.engine.Engine`) and tells the supervision what happened. It decides nothing:
when to spawn, and what a model call or a receipt means, are the supervision's.

Why a module of its own: a launch outlives its engine's spawn (the folders, the records made off
the event loop after a receipt, the clean-up at the bridge's close) and is a different owner from
the process (:mod:`bridge.live.engine`) and the bridge's doors (:mod:`bridge.live.supervisor`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import trio

from bridge.core.receipts import Receipt, Usage
from bridge.profiles.command import EngineProfile, Launch

if TYPE_CHECKING:
    from bridge.live.engine import Engine
    from bridge.live.journal import Journal


class Launches:
    """The launches prepared for one bridge (the first at open; each later one for a new engine)."""

    def __init__(self, nursery: trio.Nursery, profile: EngineProfile, first_launch: Launch) -> None:
        self._nursery = nursery
        self.profile = profile
        #: Prepared at open (so a setup problem is raised there); spawned on the first prompt.
        self.launch: Launch | None = first_launch
        #: Every launch prepared for this bridge whose private folders may still be on disk
        #: (each is removed at its engine's exit; :meth:`clean_up` removes whatever is left).
        self._prepared: list[Launch] = [first_launch]
        #: Held while a conversation is recorded, or an engine is prepared (:meth:`_record`).
        self._recording = trio.Lock()
        #: Conversation records begun and not ended; set when there are none (:meth:`recorded`).
        self._records = 0
        self._records_done = trio.Event()

    async def take(self) -> Launch:
        """The launch for the next engine: the one prepared at open, else a new one. Ends once it
        is prepared (after the last conversation record: its copy must be the one the engine
        resumes). Raises :class:`~bridge.profiles.command.ProfileError`."""
        launch, self.launch = self.launch, None
        if launch is None:
            async with self._recording:
                launch = self.profile.prepare()
            self._prepared = [kept for kept in self._prepared if kept.cleanup is not None]
            self._prepared.append(launch)
        return launch

    @staticmethod
    def model_calls(
        door: Callable[[str | None, Usage | None], None],
    ) -> Callable[[str | None, Usage | None], None]:
        """What an engine's key endpoint calls (from its own threads) for each model call it
        forwarded: ``door`` is called in trio (where the supervision hears it). Once the
        bridge's trio run has ended nothing hears it any more (the endpoint is closed with the
        folders)."""
        token = trio.lowlevel.current_trio_token()

        def report(request: str | None, usage: Usage | None) -> None:
            try:
                token.run_sync_soon(door, request, usage)
            except trio.RunFinishedError:
                pass

        return report

    @staticmethod
    def gate(engine: Engine | None, gate: str | None) -> None:
        """Open the current engine's key endpoint to prompt ``gate``, or close it (None), as the
        supervision says (:meth:`~bridge.core.supervision.Supervision.model_gate`)."""
        endpoint = engine.launch.endpoint if engine is not None and engine.launch is not None else None
        if endpoint is not None:
            endpoint.gate = gate

    def clean_up(self) -> None:
        """Remove the private folders of every launch prepared for this bridge that are still
        there (once the bridge's tasks have ended: its engines are reaped or given up)."""
        prepared, self._prepared = self._prepared, []
        for launch in prepared:
            launch.run_cleanup()

    def drop_unspawned(self) -> None:
        """At the close: a launch prepared at open and never spawned (no prompt came) has its
        private folders removed too."""
        if self.launch is not None:
            self.launch.run_cleanup()
            self.launch = None

    def settled(
        self, engine: Engine | None, receipt: Receipt, journal: Journal | None, now: Callable[[], float]
    ) -> None:
        """A receipt is delivered: its engine's launch hears it (a named conversation takes its
        session back, :mod:`bridge.profiles.conversation`) while that engine is ``engine``, the
        current one; what it leaves to do is done in a worker thread (:meth:`_record`). Returns
        at once."""
        if engine is None or engine.generation != receipt.generation or engine.launch.settled is None:
            return
        work = engine.launch.settled(receipt)
        if work is not None:
            if not self._records:
                self._records_done = trio.Event()
            self._records += 1
            self._nursery.start_soon(self._record, work, journal, now)

    async def recorded(self) -> None:
        """Wait for the conversation records begun (:meth:`_record`). Ends when none is left
        (each is bounded by the disk's writes)."""
        while self._records:
            await self._records_done.wait()

    async def _record(
        self, work: Callable[[], dict[str, Any]], journal: Journal | None, now: Callable[[], float]
    ) -> None:
        """Record a conversation off the event loop (its writes are fsynced), one at a time and
        never while an engine is being prepared (whose copy must be the last one recorded).
        Shielded: a close does not cut a record short. Ends when it is written (or failed: the
        note says so), bounded by the disk's writes."""
        with trio.CancelScope(shield=True):
            try:
                async with self._recording:
                    note = await trio.to_thread.run_sync(work)
                if journal is not None:
                    journal.note(note, now())
            finally:
                self._records -= 1
                if not self._records:
                    self._records_done.set()
