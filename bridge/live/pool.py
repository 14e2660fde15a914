"""Many engines in one process (issue 32): :func:`open_pool` runs up to N ordinary bridges on
one engine profile and gives each prompt to an idle one, with :class:`Pool`'s calls in the
shape of :class:`~bridge.live.supervisor.Bridge`'s::

    async with open_pool(profile, engines=4) as pool:
        receipts = [await h.receipt() for h in [await pool.submit(text) for text in texts]]

What decides is pure: :class:`~bridge.core.pool.PoolRules` (routing, conversation affinity,
spares, idle reaping, the cap, closing; its opening comment states the rules). This module
carries out its actions, as :mod:`bridge.live.supervisor` does the supervision's:

- every door of the rules is called through :meth:`Pool._drive`, which carries out the actions
  in order before the next door is called (a door called meanwhile waits its turn): the bridge's
  drive loop, :class:`~bridge.live.driving.Driver`;
- an engine is one task (:meth:`Pool._run_engine`) holding one bridge opened exactly as
  :func:`~bridge.live.api.open_bridge` opens it, with its own journal, named for the engine
  (``...-pool-engine-N.jsonl``, its header's ``pool.engine`` is N);
- a prompt given to an engine is that bridge's prompt, under the pool's id; one task per prompt
  waits for its receipt and tells the rules the engine is idle again;
- a prompt the pool itself rejects (its queue full, closing, no engine left, stopped while it
  waited) gets its receipt here, ``rejected``, and is in no engine's journal: no engine saw it.

Every receipt comes exactly once: each bridge settles its own prompts, and the rules keep a
prompt either waiting (the pool's to settle) or given to one engine (its bridge's), never both.
"""

from __future__ import annotations

import collections
import functools
import itertools
import os
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Unpack, cast

import attrs
import trio

from bridge.core.config import RECENT_IDS, BridgeConfig
from bridge.core.framing import prompt_bytes
from bridge.core.notices import ReceiptNotice
from bridge.core.pool import (
    Clean,
    Closed,
    Dispatch,
    EngineState,
    Notice,
    PoolAction,
    PoolConfig,
    PoolRules,
    Reject,
    StartEngine,
    StopEngine,
)
from bridge.core.prompts import PoolPromptOptions, PromptOptions, check_prompt
from bridge.core.prompts import seconds as _seconds
from bridge.core.receipts import Receipt, Times
from bridge.core.words import Reason, State
from bridge.live.api import _hide_journals, _open_on_trio, running_library
from bridge.live.driving import Door, Driver
from bridge.live.journal import JournalError, default_journal_dir, default_journal_path
from bridge.live.notifications import Notifications
from bridge.live.pool_handle import PoolHandle
from bridge.live.pool_moves import PoolConversations
from bridge.live.submits import check_size, prompt_door
from bridge.live.supervisor import CLOSE_BACKSTOP, Bridge
from bridge.live.tenants import CleanError, clean
from bridge.profiles.command import EngineProfile, Launch, ProfileError
from bridge.profiles.pi import PiProfile

__all__ = ["Pool", "PoolConfig", "PoolHandle", "open_pool"]

#: A drain past its bound: each engine's bridge is shut down with this bound, so its running
#: prompt is stopped as past it (``failed``/``timeout``) at once.
EXPIRED_DRAIN = 1e-3
#: R13: how long a clean-up that failed waits to see whether the engine process has ended (then
#: nothing of it is left, and the engine is clean) before it takes the engine out.
ENDED_GRACE = 2.0


@attrs.define
class _PoolEngineProfile:
    """The pool's profile for engine N: the same launches, each journal header saying ``pool.engine``."""

    profile: EngineProfile
    number: int
    name: str = attrs.field(default=attrs.Factory(lambda self: self.profile.name, takes_self=True))

    def prepare(self) -> Launch:
        launch = self.profile.prepare()
        launch.header = {**launch.header, "pool": {"engine": self.number}}
        return launch


@attrs.define(eq=False)
class _Engine:
    """One engine of the pool: its bridge once open."""

    number: int
    journal: Path | None
    bridge: Bridge | None = None
    #: Why it could not open (a ProfileError or JournalError), or None.
    error: BaseException | None = None
    done: trio.Event = attrs.field(factory=trio.Event)


class Pool:
    """Up to N engines for one controller, one bridge each. Build it with :func:`open_pool`."""

    def __init__(
        self,
        nursery: trio.Nursery,
        profile: EngineProfile,
        rules: PoolRules,
        folder: Path | None,
        config: BridgeConfig,
        store: PoolConversations | None = None,
    ) -> None:
        self._nursery = nursery
        #: R12: the conversations the pool keeps (a Pi profile's), or None.
        self.store = store
        self.profile = profile
        self.config = config
        self.rules = rules
        self._folder = folder
        self._t0 = trio.current_time()
        self._last_now = 0.0
        self._heard = Notifications()
        self._handles: dict[str, PoolHandle] = {}
        #: Conversation -> the last of its prompts submitted before its end_conversation, while
        #: that one has no receipt yet (the end waits for it).
        self._ends: dict[str, str] = {}
        self._recent: collections.OrderedDict[str, Receipt] = collections.OrderedDict()
        self._engines: dict[int, _Engine] = {}
        #: Every journal the pool's engines wrote, engine number -> path.
        self.journals: dict[int, Path] = {}
        #: Why an engine's journal could not be written (a full disk), the first time: the pool
        #: then closes at once, as a bridge does (SPEC §5; ``serve --engines`` exits 1 saying it).
        self.journal_failed: str | None = None
        self._ids = itertools.count(1)
        self._closed = trio.Event()
        self._finished = False
        self.receipts_issued = 0
        #: The drive loop, with how each kind of the rules' actions is carried out.
        self._driver: Driver[PoolAction] = Driver(
            {
                StartEngine: self._start_engine,
                Dispatch: self._dispatch,
                Reject: self._reject,
                StopEngine: self._stop_engine,
                Notice: lambda a: self._heard.notify(a.payload),
                Closed: lambda a: self._closed.set(),
                Clean: lambda a: self._nursery.start_soon(self._clean, a.engine),
            }
        )

    # -- what it says ------------------------------------------------------------------------

    def now(self) -> float:
        """Seconds since the pool opened (after its trio run ended: the last time it read)."""
        try:
            self._last_now = trio.current_time() - self._t0
        except RuntimeError:
            pass
        return self._last_now

    @property
    def engines(self) -> dict[int, Bridge]:
        """The bridges of the engines open now, by engine number."""
        return {n: e.bridge for n, e in self._engines.items() if e.bridge is not None}

    @property
    def closing(self) -> bool:
        """True from the moment closing began (nothing waiting is given to an engine any more)."""
        return self.rules.closing

    @property
    def outstanding(self) -> int:
        """Prompts accepted and without their receipt."""
        return self.rules.outstanding

    def knows(self, request: str) -> bool:
        """True if ``request`` is outstanding or among the last ones settled."""
        return request in self._handles or request in self._recent

    def get_receipt(self, request: str) -> Receipt | None:
        """A recently settled prompt's receipt, or None."""
        return self._recent.get(request)

    def status(self) -> dict[str, Any]:
        """What runs: the pool's engines and queue (``pool``), each open engine's bridge status."""
        return {
            "pool": self.rules.status(),
            "engines": {str(n): b.status() for n, b in self.engines.items()},
            "receipts": self.receipts_issued,
            "journals": {str(n): str(p) for n, p in self.journals.items()},
        }

    def signals(self, max_buffer: int = 1000) -> trio.MemoryReceiveChannel[dict[str, Any]]:
        """A channel of every notification from now on: each engine's (with ``"engine": N``),
        the pool's own (``{"type": "pool", "event": ...}``) and the receipts the pool gives
        itself. It ends when the pool has closed."""
        return self._heard.signals(max_buffer)

    @property
    def listeners(self) -> list[Callable[[dict[str, Any]], None]]:
        """Observers called with every notification dict (``bridge serve --engines`` uses this)."""
        return self._heard.listeners

    # -- prompts ---------------------------------------------------------------------------

    @prompt_door(PoolPromptOptions)
    def submit_nowait(
        self, message: str, *, request: str | None = None, **options: Unpack[PoolPromptOptions]
    ) -> PoolHandle:
        """Accept a prompt; returns at once. It always gets a receipt (maybe at once: a rejection).

        Its options (:class:`~bridge.core.prompts.PoolPromptOptions`) are :meth:`Bridge.submit_nowait
        <bridge.live.supervisor.Bridge.submit_nowait>`'s (``budget_usd``, ``budget_tokens`` and
        ``trace`` too: the engine's bridge that runs it holds its budget and continues its trace)
        and ``conversation``, the key that keeps a conversation's prompts on one engine; checked
        here, at once (:func:`~bridge.core.prompts.check_prompt`: a prompt may wait before an
        engine's bridge sees it).

        Raises:
            TypeError: As :meth:`Bridge.submit_nowait <bridge.live.supervisor.Bridge.submit_nowait>`.
            ValueError: Likewise, and an empty or non-string ``conversation``."""
        check_prompt(message, options)
        check_size(message, options.get("images"), self.config.max_line)
        if request is None:
            request = f"p{next(self._ids)}"
            while self.knows(request):
                request = f"p{next(self._ids)}"
        elif not isinstance(request, str) or not request:
            raise ValueError(f"request id must be a non-empty str, got {request!r}")
        elif self.knows(request):
            raise ValueError(f"request id {request!r} is already in use")
        conversation = options.pop("conversation", None)
        # What is left is what the engine's bridge is given (its own door's options).
        handle = PoolHandle(self, request, conversation, message, cast("PromptOptions", options))
        self._handles[request] = handle
        size = prompt_bytes(message, options.get("images"))
        self._drive(lambda: self.rules.submit(request, conversation, self.now(), size))
        return handle

    @prompt_door(PoolPromptOptions)
    async def submit(
        self, message: str, *, request: str | None = None, **options: Unpack[PoolPromptOptions]
    ) -> PoolHandle:
        """Accept a prompt; returns at once with its handle (:meth:`submit_nowait` says the rest)."""
        return self.submit_nowait(message, request=request, **options)

    @prompt_door(PoolPromptOptions)
    async def prompt(
        self, message: str, *, request: str | None = None, **options: Unpack[PoolPromptOptions]
    ) -> Receipt:
        """Submit (:meth:`submit_nowait`'s parameters) and wait for the receipt. Ends when it
        comes (it always does); cancelled while it waits, it stops the prompt first."""
        handle = self.submit_nowait(message, request=request, **options)
        try:
            return await handle.receipt()
        except BaseException:
            with trio.CancelScope(shield=True):
                await self.stop(handle.request)
            raise

    async def stop(self, request: str) -> str | None:
        """Stop a prompt; returns at once. A waiting one is rejected (``cancelled``) without
        touching an engine (None); a running one is stopped by its engine's bridge (the
        abort's id, as :meth:`Bridge.stop <bridge.live.supervisor.Bridge.stop>` returns it)."""
        handle = self._handles.get(request)
        if handle is None:
            return None
        engine = self._engines.get(handle.engine) if handle.engine is not None else None
        if engine is not None and engine.bridge is not None:
            return await engine.bridge.stop(request)
        if request in self.rules.running:  # its engine takes its conversation up: stopped after
            handle.stop_asked = True
        self._drive(lambda: self.rules.stop(request, self.now()))
        return None

    def end_conversation(self, conversation: str) -> None:
        """The conversation is over: its engine takes other prompts again (each starts afresh),
        and a prompt submitted under its key from now on starts a new conversation -- the pool's
        stored history of it (R12) is removed. In submit order, as a single bridge's
        ``new_conversation``: the key's prompts submitted before keep it, and the end comes as
        the last of them has its receipt. Returns at once."""
        before = [h.request for h in self._handles.values() if h.conversation == conversation]
        if before:
            self._ends[conversation] = before[-1]
        else:
            self._end_now(conversation)

    def _end_now(self, conversation: str) -> None:
        self._ends.pop(conversation, None)
        if self.store is not None:
            self.store.forget(conversation)
        self._drive(lambda: self.rules.end_conversation(conversation, self.now()))

    async def drain(self) -> None:
        """Wait until every accepted prompt has its receipt. Ends when none is outstanding."""
        while self.rules.outstanding:
            await self._driver.wait_change()

    # -- closing ------------------------------------------------------------------------------

    def shutdown(self, drain_timeout: float | None = None) -> None:
        """No new prompts (``rejected``/``closing``); the accepted ones run to their receipts
        (past ``drain_timeout``: the waiting ones rejected ``closing``, the running ones
        stopped, ``failed``/``timeout``); then every engine stops and the pool closes."""
        if drain_timeout is not None and not _seconds(drain_timeout):
            raise ValueError(f"drain_timeout must be a positive number of seconds, got {drain_timeout!r}")
        self._drive(lambda: self.rules.shutdown(self.now(), drain_timeout))

    def close_now(self) -> None:
        """Begin closing at once: waiting prompts are rejected (``closing``), each engine's bridge
        closes (its running prompt stopped, ``failed``/``closing``)."""
        self._drive(lambda: self.rules.close(self.now()))

    async def wait_closed(self) -> None:
        """Wait until the pool has closed: every prompt has its receipt and no engine runs."""
        await self._closed.wait()

    async def aclose(self, *, drain: bool = False) -> None:
        """Close: every accepted prompt gets its receipt, then every engine stops. ``drain=True``
        works the queue off first. Ends when the pool has closed (each bridge's close is bounded
        by its graces; the pool waits at most :data:`~bridge.live.supervisor.CLOSE_BACKSTOP` more)."""
        if self._finished:
            return
        with trio.CancelScope(shield=True):
            if drain:
                self.shutdown()
                await self.drain()
            self.close_now()
            bound = self.config.close_grace + self.config.stdin_grace + self.config.term_grace + CLOSE_BACKSTOP
            with trio.move_on_after(2 * bound):
                await self._closed.wait()
            self._finished = True
            self._heard.close()

    # -- the one door into the rules --------------------------------------------------------

    def _drive(self, door: Door[PoolAction]) -> None:
        """Call one of the rules' doors and carry out its actions, in order; a door called
        meanwhile waits its turn. From asyncio code (the pool as trio's guest) it is handed to
        trio, in order (:class:`~bridge.live.driving.Driver`)."""
        self._driver.drive(door)

    # -- carrying out actions -----------------------------------------------------------------

    def _start_engine(self, action: StartEngine) -> None:
        self._engines[action.engine] = _Engine(action.engine, self._journal_for(action.engine))
        self._nursery.start_soon(self._run_engine, action.engine)

    def _dispatch(self, action: Dispatch) -> None:
        handle = self._handles[action.request]
        bridge = self._engines[action.engine].bridge
        assert bridge is not None  # the rules give prompts to open (idle) engines only
        if action.take_up is not None and self.store is not None:
            self._nursery.start_soon(self._take_up, handle, action, bridge)
            return
        if action.fresh and self.store is not None:
            try:  # R12: nothing of the conversation before stays where its tools can read it
                self.store.scrub(bridge)
            except OSError as e:
                self._refuse(handle, action, str(e), f"engine {action.engine} could not clear its sessions")
                return
        self._hand(handle, action, bridge)

    async def _take_up(self, handle: PoolHandle, action: Dispatch, bridge: Bridge) -> None:
        """R12: the engine takes the prompt's conversation up, then gets the prompt; a take-up
        it fails is the prompt's receipt (never written) and the engine's end. Ends when the
        prompt is handed on or settled."""
        assert self.store is not None and action.take_up is not None
        why = await self.store.take_up(bridge, action.take_up)
        if handle.stop_asked or bridge.closing:
            self._turn_away(handle, Reason.CANCELLED if handle.stop_asked else Reason.CLOSING, None)
        elif why is not None:
            self._refuse(
                handle, action, why, f"engine {action.engine} could not take conversation {action.take_up!r} up"
            )
        else:
            self._hand(handle, action, bridge)

    def _refuse(self, handle: PoolHandle, action: Dispatch, why: str, what: str) -> None:
        """R12: the engine cannot be given the prompt (its take-up or its scrub failed, ``why``):
        the prompt's receipt is ``rejected``/``engine`` (never written), and the engine is stopped."""
        self._heard.notify(
            {
                "type": "pool",
                "event": "take-up-failed",
                "conversation": action.take_up or handle.conversation,
                "engine": action.engine,
                "why": why,
            }
        )
        self._drive(lambda: self.rules.unusable(action.engine, self.now()))
        self._turn_away(handle, Reason.ENGINE, f"{what}: {why}")

    def _turn_away(self, handle: PoolHandle, reason: Reason, detail: str | None) -> None:
        """A prompt the rules gave an engine that never had it: ``rejected`` now, the engine idle."""
        self._reject_handle(handle, reason, detail)
        self._drive(lambda: self.rules.settled(handle.request, self.now(), kept=False))

    def _hand(self, handle: PoolHandle, action: Dispatch, bridge: Bridge) -> None:
        """Give the prompt to the engine's bridge."""
        if action.fresh:
            try:
                bridge.new_conversation()
            except RuntimeError:
                pass  # the bridge is closing: it rejects the prompt ``closing`` itself
        try:
            inner = bridge.submit_nowait(handle.message, request=handle.request, **handle.options)
        except (TypeError, ValueError) as e:  # checked at submit: not expected
            self._driver.queue(lambda: self.rules.settled(handle.request, self.now()))
            self._settle(handle, self._rejected(handle, Reason.CONFIG, str(e)))
            return
        handle._attach(inner, action.engine)
        self._nursery.start_soon(self._relay, handle, inner.receipt, bridge)

    def _reject(self, action: Reject) -> None:
        handle = self._handles.get(action.request)
        if handle is not None:
            self._reject_handle(handle, action.reason, action.detail)

    def _reject_handle(self, handle: PoolHandle, reason: Reason, detail: str | None) -> None:
        """The prompt's receipt: ``rejected`` (never written), settled and told."""
        receipt = self._rejected(handle, reason, detail)
        self._settle(handle, receipt)
        self._heard.notify(ReceiptNotice(receipt.request, receipt).to_json())

    def _rejected(self, handle: PoolHandle, reason: Reason, detail: str | None) -> Receipt:
        return Receipt(
            handle.request,
            State.REJECTED,
            reason,
            native_error=detail,
            times=Times(submitted=handle.submitted, settled=self.now()),
        )

    def _settle(self, handle: PoolHandle, receipt: Receipt) -> None:
        self._handles.pop(handle.request, None)
        self._recent[handle.request] = receipt
        while len(self._recent) > RECENT_IDS:
            self._recent.popitem(last=False)
        self.receipts_issued += 1
        handle._settle(receipt)
        key = handle.conversation
        if key is not None and self._ends.get(key) == handle.request:
            self._end_now(key)  # (before the rules hear it settled: the key's next prompt is new)

    def _stop_engine(self, action: StopEngine) -> None:
        bridge = self._engines[action.engine].bridge if action.engine in self._engines else None
        if bridge is None:
            return  # not open (yet): the rules stop it when it has started, or it has failed
        if action.drain_expired:
            bridge.shutdown(EXPIRED_DRAIN)
        else:
            bridge.close_now()

    # -- tasks --------------------------------------------------------------------------------

    async def _relay(self, handle: PoolHandle, receipt: Callable[[], Any], bridge: Bridge) -> None:
        """Wait for a given prompt's receipt (its bridge always settles it), record its
        conversation's exchange (R12), then tell the rules. Ends when the receipt has come and
        the exchange is recorded."""
        got: Receipt = await receipt()
        self.rules.receipted(handle.request)
        self._settle(handle, got)
        kept = True
        if self.store is not None and handle.conversation is not None:
            with trio.CancelScope(shield=True):
                note = await self.store.settled(handle.conversation, bridge, got)
            kept = self.store.kept(handle.conversation)
            if note is not None:
                self._heard.notify({"type": "pool", "engine": handle.engine, **note})
        self._drive(lambda: self.rules.settled(handle.request, self.now(), kept=kept))

    async def _clean(self, number: int) -> None:
        """R13: clean engine ``number`` (:mod:`bridge.live.tenants`) in a worker thread, then tell
        the rules it is clean -- or that it could not be, which stops it. Ends when the
        clean-up has finished or failed."""
        engine = self._engines.get(number)
        bridge = engine.bridge if engine is not None else None
        process = bridge.engine if bridge is not None else None
        why: str | None = None
        if process is not None and process.alive:
            t0 = trio.current_time()
            try:
                with trio.CancelScope(shield=True):
                    await trio.to_thread.run_sync(clean, process)
            except CleanError as e:
                why = str(e)
            if why is None and (bridge is None or bridge.engine is not process):
                why = "the engine process was replaced while it was cleaned"
            if why is not None:
                # An engine process that ended took its sandbox with it (its PID namespace, /tmp)
                # and its private folders go with its launch: nothing is left to clean.
                with trio.move_on_after(ENDED_GRACE):
                    await process.exited.wait()
                why = None if process.exited.is_set() else why
            if why is None:
                ms = round((trio.current_time() - t0) * 1000, 1)
                self._heard.notify({"type": "pool", "event": "engine-cleaned", "engine": number, "ms": ms})
        if why is None:  # (also with no engine process: nothing of one is left)
            self._drive(lambda: self.rules.cleaned(number, self.now()))
        else:
            failed = why
            self._drive(lambda: self.rules.unclean(number, failed, self.now()))

    async def _run_engine(self, number: int) -> None:
        """Engine ``number``: open its bridge, tell the rules, hold it open until it closes (the
        rules stop it, or it closes on its own). Ends when its bridge has closed."""
        engine = self._engines[number]
        journal = engine.journal
        try:
            async with _open_on_trio(
                _PoolEngineProfile(self.profile, number),
                journal=journal if journal is not None else False,
                config=self.config,
                drain_on_exit=False,
                collect=False,
                start_engine=True,
            ) as bridge:
                engine.bridge = bridge
                if bridge.journal is not None:
                    self.journals[number] = bridge.journal.path
                bridge.listeners.append(functools.partial(self._heard_from, number))
                self._drive(lambda: self.rules.started(number, self.now()))
                await bridge.wait_closed()
                mine = self.rules.engines.get(number)
                if mine is not None and mine.state != EngineState.STOPPING:
                    # Closed on its own (its journal could not be written, say), not by the rules.
                    why = bridge.journal_failed or bridge.down_reason or "its bridge closed"
                    self._drive(lambda: self.rules.failed(number, f"engine {number}: {why}", self.now()))
                if bridge.journal_failed and self.journal_failed is None:
                    # The journals share a folder, and a journal that cannot be written is the
                    # end of a bridge (SPEC §5): the pool closes, its waiting prompts rejected
                    # closing, each running one stopped -- not 376 of 400 turned away
                    # engine-down one engine at a time, and an exit 0 (issue 42).
                    self.journal_failed = bridge.journal_failed
                    self.close_now()
        except (ProfileError, JournalError) as e:
            engine.error = e
            why = str(e)
            self._drive(lambda: self.rules.failed(number, why, self.now()))
        finally:
            engine.done.set()
            engine.bridge = None
            self._drive(lambda: self.rules.gone(number, self.now()))

    def _heard_from(self, number: int, note: dict[str, Any]) -> None:
        """What engine ``number``'s bridge tells, told on with its number; its ``engine``/``down``
        (the crash limit, a refused set-up) is that engine's end for the rules (R9)."""
        self._heard.notify({**note, "engine": number})
        generation = note.get("generation")
        started = note.get("type") == "engine" and note.get("event") == "started"
        exited = note.get("type") == "engine" and note.get("event") == "exited"
        # R12: the process that held the conversation ended (its bridge starts a new one only
        # for the next question or prompt, so waiting for that start would be too late).
        if exited or (started and isinstance(generation, int) and generation > 1):
            self._drive(lambda: self.rules.restarted(number, self.now()))
        if note.get("type") == "engine" and note.get("event") == "down":
            why = f"engine {number} went down: {note.get('why')}"
            self._drive(lambda: self.rules.failed(number, why, self.now()))

    def _journal_for(self, number: int) -> Path | None:
        if self._folder is None:
            return None
        name = default_journal_path().stem
        return self._folder / f"{name}-pool-engine-{number}.jsonl"

    async def _clock(self) -> None:
        """Tell the rules the time whenever their next deadline passes. Ends when the pool has closed."""
        rules = self.rules
        await self._driver.clock(rules.next_deadline, lambda: rules.tick(self.now()), self._t0, self._closed)

    async def _opened(self) -> BaseException | None:
        """Wait until the engines started at open are open (or one could not be). Returns the
        first error, or None. Ends when none is starting, or one has failed."""
        while self.rules.down is None and any(e.state == EngineState.STARTING for e in self.rules.engines.values()):
            await self._driver.wait_change()
        return next((e.error for e in self._engines.values() if e.error is not None), None)


@asynccontextmanager
async def open_pool(
    engine: EngineProfile,
    *,
    engines: int,
    spares: int | None = None,
    idle_timeout: float | None = None,
    queue_max: int = 1024,
    journal: str | Path | bool | None = True,
    config: BridgeConfig | None = None,
    drain_on_exit: bool = False,
) -> AsyncIterator[Any]:
    """Open a pool of up to ``engines`` engines on one profile; close it (every receipt settled,
    every engine reaped) on exit. The same under trio and asyncio, as :func:`~bridge.live.api.open_bridge`.

    Args:
        engine: The engine profile every engine of the pool runs (as ``open_bridge``'s).
        engines: The cap: at most this many engines at once (at least 1).
        spares: Engines kept started and free, ready for the next prompt (default: all
            ``engines``, started at open; 0: each engine is started by a prompt that needs it).
        idle_timeout: Seconds an idle engine beyond the spares is kept; then it is stopped (a
            conversation it held is told lost). None (the default): kept for ever.
        queue_max: Prompts that may wait for an engine; one more is ``rejected``/``queue-full``
            (so is one whose text would take the waiting prompts' bytes past ``config``'s
            ``queue_bytes``).
        journal: True (the default): one journal per engine in the default folder; a folder's
            path: in it; False or None: none. Each is named ``...-pool-engine-N.jsonl`` for its
            engine N, and its header says ``"pool": {"engine": N}``.
        config: Each engine's bridge settings (:class:`~bridge.core.config.BridgeConfig`).
        drain_on_exit: At the block's normal end, wait until every accepted prompt has its
            receipt before closing (default: the running prompts are stopped).

    Yields:
        The open pool: a :class:`Pool` under trio, an :class:`~bridge.live.pool_aio.AsyncioPool` under asyncio.

    Raises:
        ProfileError: An engine started at open could not be (as ``open_bridge`` raises it),
            after every engine is cleaned up.
        JournalError: An engine's journal cannot be created.
        ValueError: A bound out of range (``engines=0``, ...), or a bad ``journal``.
        RuntimeError: Called outside ``trio.run`` or ``asyncio.run``.
    """
    moves = isinstance(engine, PiProfile)  # R12: Pi's sessions can be switched to
    # R13: a confined Pi's sandbox can be cleaned between tenants (bridge/live/tenants.py).
    tenants = isinstance(engine, PiProfile) and engine.sandbox.enabled
    rules = PoolRules(
        PoolConfig(
            engines=engines,
            spares=spares,
            idle_timeout=idle_timeout,
            queue_max=queue_max,
            queue_bytes=(config or BridgeConfig()).queue_bytes,
            moves=moves,
            clean=tenants,
        )
    )

    def opener() -> Any:
        return _open_pool_on_trio(engine, rules, journal, config or BridgeConfig(), drain_on_exit)

    if running_library("open_pool runs") == "asyncio":
        from bridge.live.aio import open_wrapped_on_asyncio
        from bridge.live.pool_aio import AsyncioPool

        async with open_wrapped_on_asyncio(opener, AsyncioPool) as on_asyncio:
            yield on_asyncio
    else:
        async with opener() as pool:
            yield pool


@asynccontextmanager
async def _open_pool_on_trio(
    profile: EngineProfile, rules: PoolRules, journal: Any, config: BridgeConfig, drain_on_exit: bool
) -> AsyncIterator[Pool]:
    """:func:`open_pool` under trio (and, as trio's guest, under asyncio). Its exit ends when the
    pool has closed."""
    if journal is True:
        folder: Path | None = default_journal_dir()
    elif journal is False or journal is None:
        folder = None
    elif isinstance(journal, (str, os.PathLike)) and os.fspath(journal):
        folder = Path(journal)
    else:
        raise ValueError(
            f"journal: True (the default folder), a folder's path, or False/None for none; not {journal!r}"
        )
    profile = _hide_journals(profile, folder)
    store = PoolConversations() if rules.config.moves else None
    if store is not None and isinstance(profile, PiProfile):
        profile = profile.hiding(store.folder)
    raised: BaseException | None = None
    try:
        async with trio.open_nursery() as nursery:
            pool = Pool(nursery, profile, rules, folder, config, store)
            nursery.start_soon(pool._clock)
            try:
                pool._drive(lambda: rules.open(pool.now()))
                error = await pool._opened()
                if error is not None:
                    raise error
                yield pool
                if drain_on_exit:
                    await pool.drain()
            except BaseException as e:
                raised = e
                raise
            finally:
                await pool.aclose()
                nursery.cancel_scope.cancel()
                if store is not None:
                    store.close()
    except BaseExceptionGroup as group:
        # As open_bridge: what the block raised comes out as raised, not in a group of one.
        if raised is None or group.exceptions != (raised,):
            raise
    else:
        return
    raise raised
