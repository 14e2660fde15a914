"""The engine side of one bridge: spawning each engine, writing to it in order, and carrying
what it reports -- its lines, its stderr, its exit -- into the session, the journal and the
lifecycle.

It is the :class:`~bridge.live.engine.EngineSink` every engine reports to. A read's lines go to
the session as one batch (:meth:`~bridge.core.session.Session.observe_batch`, the fast path),
each is journaled, and the session's events go back to the bridge (``handle``). The answers to
the start-up (seal) check are gathered here and checked by the launch's own ``check``. What it
needs of the bridge is passed in as functions: feed an input to the lifecycle, the clock, a
shielded scope for a task, the session's events, the current generation.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import trio

from bridge.core.events import Event, Skipped, Streamed
from bridge.core.framing import MESSAGE_UPDATE, Oversize, RawLine, UpdateRun
from bridge.core.lifecycle import (
    Answered,
    BridgeConfig,
    Configured,
    EngineExited,
    Input,
    Spawned,
    SpawnFailed,
    StartupChecked,
    StdoutClosed,
    WriteFailed,
)
from bridge.core.progress import DELTA_TYPES, join_deltas
from bridge.core.session import Session
from bridge.core.steering import from_state
from bridge.live.engine import Engine, EngineGone
from bridge.live.journal import Journal
from bridge.profiles.command import EngineProfile, Launch, ProfileError

#: A writer queue's item: the bytes, the request they are for, the Write's kind.
_Item = tuple[bytes, str | None, str]


class EngineSide:
    """The engines of one bridge (one at a time: :attr:`current`)."""

    def __init__(
        self,
        nursery: trio.Nursery,
        profile: EngineProfile,
        config: BridgeConfig,
        first_launch: Launch,
        session: Session,
        journal: Journal | None,
        *,
        feed: Callable[[Input], None],
        now: Callable[[], float],
        shielded: Callable[[], trio.CancelScope],
        handle: Callable[[Sequence[Event]], None],
        generation: Callable[[], int],
    ) -> None:
        self._nursery = nursery
        self.profile = profile
        self.config = config
        #: Prepared at open (so a setup problem is raised there); spawned on the first prompt.
        self.launch: Launch | None = first_launch
        self.session = session
        self.journal = journal
        self._feed = feed
        self._now = now
        self._shielded = shielded
        self._handle = handle
        self._generation = generation
        #: The engine whose lines count (a stopped one's late lines are ignored).
        self.current: Engine | None = None
        #: Each engine's writer queue: (bytes, the request they are for, the Write's kind).
        self._writers: dict[Engine, tuple[trio.MemorySendChannel[_Item], trio.MemoryReceiveChannel[_Item]]] = {}
        #: The item each engine's writer is writing now.
        self._writing: dict[Engine, _Item] = {}
        self._startup_waiting: dict[str, dict[str, Any] | None] = {}
        #: When the current engine's last line was read (the stall timeout counts from it).
        self.last_seen: float | None = None
        #: The configuration commands written for a prompt, and their answers so far.
        self._config_waiting: dict[str, dict[str, Any] | None] = {}
        self._config_for: tuple[int, str] | None = None
        #: Questions written to the current engine (their ids), awaiting an answer.
        self.asked: set[str] = set()

    def expect_config(self, generation: int, request: str, cid: str) -> None:
        """A configuration command for ``request`` is written: its answer is awaited (all of
        them answered: :class:`~bridge.core.lifecycle.Configured`)."""
        if self._config_for != (generation, request):
            self._config_for = (generation, request)
            self._config_waiting = {}
        self._config_waiting[cid] = None

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
                    launch = self.profile.prepare()
            except ProfileError as e:
                self._feed(SpawnFailed(generation, str(e)))
                return
            try:
                engine = await Engine.start(self._nursery, launch, generation, self, self.config.max_line)
            except OSError as e:
                launch.run_cleanup()
                self._feed(SpawnFailed(generation, f"cannot start the engine {launch.argv[0]!r}: {e.strerror or e}"))
                return
            self.current = engine
            send, recv = trio.open_memory_channel[_Item](math.inf)
            self._writers[engine] = (send, recv)
            self._nursery.start_soon(self._writer, engine, recv)
            self._startup_waiting = {cmd["id"]: None for cmd in launch.startup}
            self._feed(
                Spawned(
                    generation,
                    engine.pid,
                    list(launch.argv),
                    [dict(c) for c in launch.startup],
                    list(launch.clearing),
                    launch.header.get("seal"),
                )
            )

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
                                unsent = kind == "prompt" and e.written == 0
                                tail = list(self.session.stderr_tail)
                                self._feed(WriteFailed(engine.generation, request, False, unsent, str(e), tail))
                            continue
                        finally:
                            self._writing.pop(engine, None)
                    if scope.cancelled_caught:
                        self._feed(WriteFailed(engine.generation, request, stuck=True))

    async def stop(self, engine: Engine, requested: bool) -> None:
        """The close ladder (shielded inside). Ends when the engine is reaped."""
        await engine.aclose(self.config.stdin_grace, self.config.term_grace, requested=requested)

    # -- what an engine reports (it calls these: EngineSink) ------------------------------------

    def lines(self, engine: Engine, lines: Sequence[bytes | Oversize | UpdateRun]) -> None:
        """One read's lines, in order, with one clock read. The session observes them
        (:meth:`~bridge.core.session.Session.observe_batch`: runs of ``message_update``
        lines nobody streams are taken in bulk); here each is journaled and its events
        carried out."""
        if engine is not self.current:
            return
        t = self._now()
        shown = False  # a line of the engine's own (not an answer to a command of ours)
        journal = self.journal
        # message_update lines a lean journal keeps no text of, parsed (streamed) or not: one
        # ``updates`` entry for each run of them (first index, count, bytes), written before
        # any other entry and before any event is handled, so the journal's order is the read's.
        run = _ElidedRun(journal, t)
        lean = journal is not None and not journal.full
        deltas: list[Any] = []  # a prompt's text / thinking deltas of this read, joined when handed on
        for seen in self.session.observe_batch(lines, t=t):
            if isinstance(seen, (Skipped, Streamed)):
                shown = True
                if journal is not None:
                    run.add(seen.first, len(seen.lines), seen.nbytes)
                if isinstance(seen, Skipped) or not seen.events:
                    continue
                handed: Sequence[Sequence[Event]] = [(event,) for event in seen.events]  # each as if its line's
            else:
                parsed = seen.parsed
                if not shown and (type(parsed) is not dict or parsed.get("type") != "response"):
                    shown = True
                if journal is not None:
                    if type(parsed) is RawLine:
                        run.flush()
                        journal.recv_raw(seen.idx, parsed, t)
                    elif lean and seen.line.startswith(MESSAGE_UPDATE):  # type: ignore[union-attr]  # bytes
                        run.add(seen.idx, 1, len(seen.line))  # type: ignore[arg-type]  # bytes
                    else:
                        run.flush()
                        journal.recv(seen.idx, seen.line, parsed, t)  # type: ignore[arg-type]  # not a RawLine: bytes
                waiting = self._startup_waiting or self._config_waiting or self.asked
                if waiting and type(parsed) is dict and parsed.get("type") == "response":
                    run.flush()
                    self._answer(parsed)
                if not seen.events:
                    continue
                handed = (seen.events,)
            for events in handed:
                one = events[0] if len(events) == 1 else None
                if isinstance(one, DELTA_TYPES) and (not deltas or type(deltas[0]) is type(one)):
                    deltas.append(one)
                    continue
                run.flush()
                if deltas:  # handed on before what follows them, in order
                    self._handle((join_deltas(deltas),))
                    deltas = []
                if isinstance(one, DELTA_TYPES):
                    deltas.append(one)
                else:
                    self._handle(events)
        run.flush()
        if deltas:
            self._handle((join_deltas(deltas),))
        if shown:
            # The stall timeout counts from the engine's own lines: answers to the bridge's
            # questions (a controller asking for the models) say nothing of the run.
            self.last_seen = t

    def stderr(self, engine: Engine, text: str) -> None:
        if self.journal is not None:
            self.journal.stderr(text, self._now())
        if engine is self.current:
            self.session.stderr(text)

    def stdout_closed(self, engine: Engine) -> None:
        self._feed(StdoutClosed(engine.generation))

    def exited(self, engine: Engine, code: int | None, sig: int | None) -> None:
        t = self._now()
        unsent = self._never_written(engine)
        # First the lifecycle learns the engine can take nothing more (its stdout
        # may still be held open by a grandchild), so the receipt decided below
        # does not let the next prompt be written to a dead engine.
        self._feed(StdoutClosed(engine.generation))
        # A prompt none of which reached the pipe before the exit was never read: said before
        # the exit decides the held prompt (rejected, not delivery-unknown).
        for request in unsent:
            tail = list(self.session.stderr_tail)
            self._feed(WriteFailed(engine.generation, request, False, True, "the engine had exited", tail))
        # Journaled here, after those notes: replay applies entries in order, and the session
        # took the notes before the exit (else replay settles delivery-unknown where we said
        # rejected: found by tools/soak).
        if self.journal is not None:
            self.journal.exit(code, sig, t)
        if engine is self.current:
            events = self.session.engine_exited(code, sig, t=t)
            if events:
                self._handle(events)
        tail = list(self.session.stderr_tail)
        refusal = engine.launch.refusal(tail) if engine.launch is not None and engine.launch.refusal else None
        if engine.launch is not None:
            engine.launch.run_cleanup()
        self._feed(EngineExited(engine.generation, code, sig, tail, refusal))

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

    def _answer(self, response: dict[str, Any]) -> None:
        """A response to the start-up check or to a configuration: gathered until all are in."""
        rid = response.get("id")
        if not isinstance(rid, str):
            return
        if rid in self.asked:
            self.asked.discard(rid)
            self._feed(Answered(self._generation(), rid, response))
            return
        if rid in self._config_waiting and self._config_for is not None:
            self._config_waiting[rid] = response
            if all(v is not None for v in self._config_waiting.values()):
                answers = {k: v for k, v in self._config_waiting.items() if v is not None}
                (generation, request), self._config_for = self._config_for, None
                self._config_waiting = {}
                self._feed(Configured(generation, request, answers))
            return
        if rid not in self._startup_waiting:
            return
        self._startup_waiting[rid] = response
        if all(v is not None for v in self._startup_waiting.values()):
            answers = {k: v for k, v in self._startup_waiting.items() if v is not None}
            self._startup_waiting = {}
            engine = self.current
            launch = engine.launch if engine is not None else None
            problems = launch.check(answers) if launch is not None and launch.check is not None else []
            if launch is not None and launch.confinement is not None and self.journal is not None:
                note = {"event": "confinement", "generation": self._generation(), **launch.confinement()}
                self.journal.note(note, self._now())
            state = answers.get("seal-state")
            config = from_state(state.get("data")) if state is not None and state.get("success") else None
            self._feed(StartupChecked(self._generation(), problems, config))


class _ElidedRun:
    """Consecutive ``message_update`` lines of one read, journaled as one ``updates`` entry
    when the next entry is written (:meth:`flush`); with no journal, nothing."""

    __slots__ = ("count", "first", "journal", "nbytes", "t")

    def __init__(self, journal: Journal | None, t: float) -> None:
        self.journal = journal
        self.t = t
        self.first = self.count = self.nbytes = 0

    def add(self, first: int, count: int, nbytes: int) -> None:
        if self.count and first != self.first + self.count:
            self.flush()
        if not self.count:
            self.first = first
        self.count += count
        self.nbytes += nbytes

    def flush(self) -> None:
        if self.count and self.journal is not None:
            self.journal.recv_elided_updates(self.count, self.nbytes, self.first, self.t)
        self.count = self.nbytes = 0
