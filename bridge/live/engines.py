"""The engine side of one bridge: spawning each engine, writing to it in order, and telling
the supervision what it reports -- its lines, its stderr, its exit.

It is the :class:`~bridge.live.engine.EngineSink` every engine reports to. Each report is a
door of the :class:`~bridge.core.supervision.Supervision` (a read's lines as one batch: the
fast path), called through the bridge's ``drive``, which carries out what it answers. What is
here is what only the world knows: the processes, the writer queues, what was never written.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import trio

from bridge.core.config import BridgeConfig
from bridge.core.framing import Oversize, UpdateRun
from bridge.core.receipts import Receipt, Usage
from bridge.core.supervision import Action, Supervision
from bridge.live.engine import Engine, EngineGone
from bridge.live.journal import Journal
from bridge.profiles.command import EngineProfile, Launch, ProfileError

#: A writer queue's item: the bytes, the request they are for, the Write's kind.
_Item = tuple[bytes, str | None, str]

#: A door of the supervision, called with no arguments (the bridge's ``drive`` calls it).
Door = Callable[[], list[Action]]


class EngineSide:
    """The engines of one bridge (one at a time: :attr:`current`)."""

    def __init__(
        self,
        nursery: trio.Nursery,
        profile: EngineProfile,
        config: BridgeConfig,
        first_launch: Launch,
        supervision: Supervision,
        *,
        drive: Callable[[Door], None],
        now: Callable[[], float],
        shielded: Callable[[], trio.CancelScope],
    ) -> None:
        self._nursery = nursery
        self.profile = profile
        self.config = config
        #: Prepared at open (so a setup problem is raised there); spawned on the first prompt.
        self.launch: Launch | None = first_launch
        #: Every launch prepared for this bridge whose private folders may still be on disk
        #: (each is removed at its engine's exit; :meth:`clean_up` removes whatever is left).
        self._prepared: list[Launch] = [first_launch]
        self._sup = supervision
        self._drive = drive
        self._now = now
        self._shielded = shielded
        #: The engine whose lines count (a stopped one's late lines are ignored).
        self.current: Engine | None = None
        #: Each engine's writer queue: (bytes, the request they are for, the Write's kind).
        self._writers: dict[Engine, tuple[trio.MemorySendChannel[_Item], trio.MemoryReceiveChannel[_Item]]] = {}
        #: Held while a conversation is recorded, or an engine is prepared (:meth:`_record`).
        self._recording = trio.Lock()
        #: Conversation records begun and not ended; set when there are none (:meth:`recorded`).
        self._records = 0
        self._records_done = trio.Event()
        #: The item each engine's writer is writing now.
        self._writing: dict[Engine, _Item] = {}

    def queue(self, engine: Engine, data: bytes, request: str | None, kind: str = "") -> None:
        """Queue ``data`` (whole lines; a Write of ``kind``) for ``engine``'s writer; dropped if it
        has none (it exited)."""
        writer = self._writers.get(engine)
        if writer is not None:
            writer[0].send_nowait((data, request, kind))

    # -- tasks ----------------------------------------------------------------------------

    async def spawn(self, generation: int) -> None:
        """Prepare and launch one engine; answer the lifecycle. Ends once it is spawned."""
        with self._shielded():
            launch, self.launch = self.launch, None
            try:
                if launch is None:
                    async with self._recording:  # (after the last conversation record)
                        launch = self.profile.prepare()
                    self._prepared = [kept for kept in self._prepared if kept.cleanup is not None]
                    self._prepared.append(launch)
            except ProfileError as e:
                why = str(e)
                self._drive(lambda: self._sup.spawn_failed(generation, why, self._now()))
                return
            try:
                engine = await Engine.start(self._nursery, launch, generation, self, self.config.max_line)
            except OSError as e:
                launch.run_cleanup()
                cannot = f"cannot start the engine {launch.argv[0]!r}: {e.strerror or e}"
                self._drive(lambda: self._sup.spawn_failed(generation, cannot, self._now()))
                return
            except BaseException:
                launch.run_cleanup()  # anything else that ends the spawn leaves nothing behind either
                raise
            self.current = engine
            if launch.endpoint is not None:
                launch.endpoint.report = self._model_calls(generation)
            send, recv = trio.open_memory_channel[_Item](math.inf)
            self._writers[engine] = (send, recv)
            self._nursery.start_soon(self._writer, engine, recv)
            started = launch
            self._drive(lambda: self._sup.spawned(generation, engine.pid, started, self._now()))

    def _model_calls(self, generation: int) -> Callable[[str | None, Usage | None], None]:
        """What engine ``generation``'s key endpoint calls (from its own threads) for each model
        call it forwarded: handed to trio, where the supervision hears it. Once the bridge's trio
        run has ended nothing hears it any more (the endpoint is closed with the folders)."""
        token = trio.lowlevel.current_trio_token()

        def report(request: str | None, usage: Usage | None) -> None:
            door: Door = lambda: self._sup.model_called(generation, request, usage, self._now())  # noqa: E731
            try:
                token.run_sync_soon(self._drive, door)
            except trio.RunFinishedError:
                pass

        return report

    def gate(self) -> None:
        """Open or close the current engine's key endpoint as the supervision says
        (:meth:`~bridge.core.supervision.Supervision.model_gate`): after every step."""
        engine = self.current
        endpoint = engine.launch.endpoint if engine is not None and engine.launch is not None else None
        if endpoint is not None:
            endpoint.gate = self._sup.model_gate()

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

    async def recorded(self) -> None:
        """Wait for the conversation records begun (:meth:`_record`). Ends when none is left
        (each is bounded by the disk's writes)."""
        while self._records:
            await self._records_done.wait()

    def settled(self, receipt: Receipt, journal: Journal | None) -> None:
        """A receipt is delivered: its engine's launch hears it (a named conversation takes its
        session back, :mod:`bridge.profiles.conversation`) while that engine is current; what
        it leaves to do is done in a worker thread (:meth:`_record`). Returns at once."""
        engine = self.current
        if engine is None or engine.generation != receipt.generation or engine.launch.settled is None:
            return
        work = engine.launch.settled(receipt)
        if work is not None:
            if not self._records:
                self._records_done = trio.Event()
            self._records += 1
            self._nursery.start_soon(self._record, work, journal)

    async def _record(self, work: Callable[[], dict[str, Any]], journal: Journal | None) -> None:
        """Record a conversation off the event loop (its writes are fsynced), one at a time and
        never while an engine is being prepared (whose copy must be the last one recorded).
        Shielded: a close does not cut a record short. Ends when it is written (or failed: the
        note says so), bounded by the disk's writes."""
        with trio.CancelScope(shield=True):
            try:
                async with self._recording:
                    note = await trio.to_thread.run_sync(work)
                if journal is not None:
                    journal.note(note, self._now())
            finally:
                self._records -= 1
                if not self._records:
                    self._records_done.set()

    async def _writer(self, engine: Engine, recv: trio.MemoryReceiveChannel[_Item]) -> None:
        """Write queued commands to ``engine`` in order, each bounded by ``write_timeout``.
        Ends when the engine has exited (its channel is closed) or the bridge finished.

        A prompt of which no byte went in is reported *unsent* (the engine never read it); once
        the engine has exited its exit reports that instead (:meth:`exited`)."""
        with self._shielded():
            async with recv:
                async for item in recv:
                    data, request, kind = item
                    self._writing[engine] = item
                    with trio.move_on_after(self.config.write_timeout) as scope:
                        try:
                            await engine.send_bytes(data)
                        except EngineGone as e:
                            if engine.alive:
                                self._write_failed(
                                    engine.generation, request, kind == "prompt" and e.written == 0, str(e)
                                )
                            continue
                        finally:
                            self._writing.pop(engine, None)
                    if scope.cancelled_caught:
                        self._write_failed(engine.generation, request, stuck=True)

    def _write_failed(
        self,
        generation: int,
        request: str | None,
        unsent: bool = False,
        error: str | None = None,
        *,
        stuck: bool = False,
    ) -> None:
        self._drive(
            lambda: self._sup.write_failed(
                generation, request, stuck=stuck, unsent=unsent, error=error, now=self._now()
            )
        )

    async def stop(self, engine: Engine, requested: bool) -> None:
        """The close ladder (shielded inside). Ends when the engine is reaped."""
        await engine.aclose(self.config.stdin_grace, self.config.term_grace, requested=requested)

    # -- what an engine reports (it calls these: EngineSink) ------------------------------------

    def lines(self, engine: Engine, lines: Sequence[bytes | Oversize | UpdateRun]) -> None:
        """One read's lines, in order, with one clock read: one door."""
        if engine is self.current:
            self._drive(lambda: self._sup.lines(engine.generation, lines, self._now()))

    def stderr(self, engine: Engine, text: str) -> None:
        self._drive(lambda: self._sup.stderr(engine.generation, text, self._now()))

    def stdout_closed(self, engine: Engine) -> None:
        self._drive(lambda: self._sup.stdout_closed(engine.generation, self._now()))

    def exited(self, engine: Engine, code: int | None, sig: int | None) -> None:
        """The engine is reaped: its private folders go, and the supervision hears of the exit,
        with the prompts none of whose bytes reached its pipe."""
        t = self._now()
        unsent = self._never_written(engine)
        if engine.launch is not None:
            engine.launch.run_cleanup()
        self._drive(lambda: self._sup.exited(engine.generation, code, sig, unsent, t))

    def _never_written(self, engine: Engine) -> list[str]:
        """At ``engine``'s exit: close its writer queue and return the prompts none of whose
        bytes went into its pipe -- still queued, or being written with nothing taken yet."""
        found: list[str] = []
        writing = self._writing.get(engine)
        if writing is not None and writing[2] == "prompt" and writing[1] is not None and not engine.writing:
            found.append(writing[1])
        writer = self._writers.pop(engine, None)
        if writer is None:
            return found
        send, recv = writer
        send.close()
        while True:
            try:
                _, request, kind = recv.receive_nowait()
            except (trio.WouldBlock, trio.EndOfChannel, trio.ClosedResourceError):
                break
            if kind == "prompt" and request is not None:
                found.append(request)
        return found
