"""The live bridge: one engine at a time, one prompt at a time, one receipt each.

:func:`open_bridge` is the Python API (SPEC §7)::

    async with open_bridge(profile) as bridge:
        handle = await bridge.submit("hello", stream=True)
        async for text in handle.text():
            print(text, end="")
        receipt = await handle.receipt()

How a prompt goes (every wait says what ends it):

1. ``submit`` queues it in a bounded FIFO (full: ``rejected``/``queue-full``;
   closing: ``rejected``/``closing``; engine down: ``rejected``/``engine-down``).
2. The dispatcher takes the next prompt when no slot is held, makes sure an
   engine is up and sealed (starting or recycling one, with backoff after
   crashes), and writes the ``prompt`` (the session attaches the slot first).
3. It waits until the prompt's receipt is decided. What ends the wait: the
   session decides it from the engine's lines (settle, refusal, exit); the ack
   timeout (``delivery-unknown``/``no-ack``); the prompt's settle timeout (a
   stop first, then ``outcome-unknown``/``settle-timeout`` after a grace); the
   taint grace after an overlap, gap or bad disposition
   (``outcome-unknown``/``overlap``...); the engine's exit.
4. The receipt is journaled (fsync), the slot released in the same step, the
   handle resolved. A tainted, stuck or dead engine is recycled before the next
   prompt: a fresh process and a fresh tracker, generation + 1.

Closing (:meth:`Bridge.aclose`): new prompts are refused (``closing``);
with ``drain=True`` the queue is worked off first; then queued prompts are
rejected (``closing``), the held prompt is stopped and given a grace to
settle, and the engine is stopped by the close ladder. Every accepted prompt
has its receipt before ``aclose`` returns.
"""

from __future__ import annotations

import collections
import itertools
import math
import operator
import os
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import attrs
import trio

from bridge import __version__
from bridge.engine import Engine, EngineGone
from bridge.framing import DEFAULT_MAX_LINE, Oversize, RawLine
from bridge.journal import Journal, default_journal_path
from bridge.profile import EngineProfile, Launch, ProfileError
from bridge.receipts import Receipt, Times
from bridge.session import (
    MESSAGE_UPDATE_PREFIX,
    Acked,
    Diagnostic,
    DispositionSignal,
    GapOpened,
    ReceiptReady,
    SealBroken,
    Session,
    TextDelta,
)
from bridge.tracker import Overlap


#: Settled prompt ids remembered for duplicate detection and ``get_receipt``.
RECENT_IDS = 65536
#: Signals sent to the controller per engine generation; the rest are counted.
SIGNALS_PER_GENERATION = 1000


def _positive(instance: Any, attribute: Any, value: Any) -> None:
    if not value > 0:
        raise ValueError(f"{attribute.name} must be more than 0, got {value!r}")


@attrs.define
class BridgeConfig:
    """Limits and timeouts. Every wait the bridge does is bounded by one of these."""

    #: Prompts waiting for the slot (beyond it: ``rejected``/``queue-full``).
    queue_max: int = attrs.field(default=64, validator=_positive)
    #: Sent prompt -> its ack. Past it: ``delivery-unknown``/``no-ack``, recycle.
    ack_timeout: float = attrs.field(default=30.0, validator=_positive)
    #: A prompt's own settle timeout (None: wait for the engine). Per prompt too.
    settle_timeout: float | None = attrs.field(default=None, validator=attrs.validators.optional(_positive))
    #: After the stop a settle timeout sends, how long to wait before giving up.
    stop_grace: float = attrs.field(default=5.0, validator=_positive)
    #: After an overlap / gap / bad disposition, how long the held slot waits for
    #: its own run to settle before it is given up.
    taint_grace: float = attrs.field(default=5.0, validator=_positive)
    #: A write to the engine's stdin (a stuck engine stops reading).
    write_timeout: float = attrs.field(default=30.0, validator=_positive)
    #: Spawn -> the seal check's responses.
    startup_timeout: float = attrs.field(default=30.0, validator=_positive)
    #: "refuse": an engine that fails the seal check is not used; "warn": it is,
    #: with a signal (for recording seal failures on purpose).
    seal_check: str = attrs.field(default="refuse", validator=attrs.validators.in_(("refuse", "warn")))
    #: Send the profile's clearing command before each ``abort``.
    stop_clears_queue: bool = True
    #: Waits between restarts after crashes (the last one repeats).
    restart_backoff: tuple[float, ...] = (0.0, 0.25, 1.0, 2.0, 4.0)
    #: This many unrequested engine exits within ``crash_window`` seconds: down.
    crash_limit: int = attrs.field(default=5, validator=_positive)
    crash_window: float = attrs.field(default=60.0, validator=_positive)
    #: Closing: how long the stopped prompt may take to settle.
    close_grace: float = attrs.field(default=5.0, validator=_positive)
    #: The close ladder's rungs: after closing stdin, after SIGTERM.
    stdin_grace: float = attrs.field(default=2.0, validator=_positive)
    term_grace: float = attrs.field(default=2.0, validator=_positive)
    max_line: int = attrs.field(default=DEFAULT_MAX_LINE, validator=_positive)
    journal_full: bool = False


@attrs.define(eq=False)
class _Prompt:
    request: str
    message: str
    images: list[Any] | None
    stream: bool
    timeout: float | None
    submitted: float
    done: trio.Event = attrs.field(factory=trio.Event)
    receipt: Receipt | None = None
    sent: bool = False
    stop_id: str | None = None
    text_send: trio.MemorySendChannel[str] | None = None
    text_recv: trio.MemoryReceiveChannel[str] | None = None


class PromptHandle:
    """A submitted prompt. Its receipt comes exactly once."""

    def __init__(self, prompt: _Prompt, bridge: Bridge) -> None:
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

    async def stop(self) -> str | None:
        return await self._bridge.stop(self.request)


class Bridge:
    """Supervises one engine for one controller. Build it with :func:`open_bridge`."""

    def __init__(
        self,
        nursery: trio.Nursery,
        profile: EngineProfile,
        first_launch: Launch,
        journal: Journal | None,
        config: BridgeConfig,
    ) -> None:
        self._nursery = nursery
        self.profile = profile
        self.config = config
        self.journal = journal
        self._launch: Launch | None = first_launch
        self._t0 = trio.current_time()
        self.session = Session(first_launch.clearing, collect=False)
        self.engine: Engine | None = None
        self.generation = 0
        self._queue: collections.deque[_Prompt] = collections.deque()
        self._queue_changed = trio.Event()
        #: Prompts without a receipt yet.
        self._prompts: dict[str, _Prompt] = {}
        #: The last RECENT_IDS settled prompts' receipts (duplicate ids, lookups).
        self._recent: collections.OrderedDict[str, Receipt] = collections.OrderedDict()
        self._signals_this_generation = 0
        self._held: _Prompt | None = None
        self._wake = trio.Event()
        self._ids = itertools.count(1)
        self._stop_ids = itertools.count(1)
        self._crashes: collections.deque[float] = collections.deque()
        #: Why the last engine failed (for the engine-down message).
        self._last_crash = ""
        #: The engine must be replaced before the next prompt (stuck, timed out).
        self._must_recycle = False
        self.down_reason: str | None = None
        self.closing = False
        self._closed = trio.Event()
        self._dispatcher_done = trio.Event()
        self._fsync_wanted = trio.Event()
        self._fsync_scope = trio.CancelScope()
        self._fsync_done = trio.Event()
        self._startup_waiting: dict[str, dict[str, Any] | None] = {}
        self._subscribers: list[trio.MemorySendChannel[dict[str, Any]]] = []
        self.receipts_issued = 0
        #: Observers called with every notification dict (serve uses this).
        self.listeners: list[Callable[[dict[str, Any]], None]] = []

    # -- clock ---------------------------------------------------------------------

    def now(self) -> float:
        return trio.current_time() - self._t0

    # -- controller API ----------------------------------------------------------------

    async def submit(
        self,
        message: str,
        *,
        request: str | None = None,
        stream: bool = False,
        timeout: float | None = None,
        images: list[Any] | None = None,
    ) -> PromptHandle:
        """Accept a prompt. It always gets a receipt (maybe at once: a rejection).
        Raises ValueError (and accepts nothing) for a used id or a bad timeout."""
        if timeout is not None and not timeout > 0:
            raise ValueError(f"timeout must be more than 0 seconds, got {timeout!r}")
        if request is None:
            request = f"p{next(self._ids)}"
            while self.knows(request):
                request = f"p{next(self._ids)}"
        elif self.knows(request):
            raise ValueError(f"request id {request!r} is already in use")
        p = _Prompt(
            request=request,
            message=message,
            images=images,
            stream=stream,
            timeout=timeout if timeout is not None else self.config.settle_timeout,
            submitted=self.now(),
        )
        if stream:
            p.text_send, p.text_recv = trio.open_memory_channel[str](math.inf)
        self._prompts[request] = p
        if self.closing:
            self._finish_unsent(p, "rejected", "closing")
        elif self.down_reason is not None:
            self._finish_unsent(p, "rejected", "engine-down", native_error=self.down_reason)
        elif len(self._queue) >= self.config.queue_max:
            self._finish_unsent(p, "rejected", "queue-full")
        else:
            self._queue.append(p)
            self._queue_changed.set()
        return PromptHandle(p, self)

    async def prompt(self, message: str, **kw: Any) -> Receipt:
        """Submit and wait for the receipt."""
        handle = await self.submit(message, **kw)
        return await handle.receipt()

    async def stop(self, request: str) -> str | None:
        """Stop a prompt: a queued one is rejected (``cancelled``) without touching
        the engine; the held one gets an ``abort`` whose id is returned. A prompt
        that already has its receipt is left alone (None)."""
        p = self._prompts.get(request)
        if p is None or p.receipt is not None:
            return None
        if not p.sent:
            # Queued, or taken by the dispatcher while it starts an engine: the
            # dispatcher checks for a receipt before it sends.
            try:
                self._queue.remove(p)
            except ValueError:
                pass
            self._finish_unsent(p, "rejected", "cancelled")
            return None
        if p.stop_id is not None:
            return p.stop_id
        return await self._send_stop(p)

    async def send_raw(self, cmd: dict[str, Any]) -> None:
        """Write any command to the current engine, bypassing the slot rules.

        For recording seal failures on purpose (a second prompt while one
        runs, ``steer``, ``follow_up``): it is journaled and fed to the
        session like any send, so the tracker sees what the engine saw. A
        controller never needs it; using it unseals the engine.
        """
        engine = self.engine
        if engine is None or not engine.alive:
            raise RuntimeError("no engine is running")
        self._record_send(cmd)
        with trio.move_on_after(self.config.write_timeout):
            await engine.send(cmd)

    def knows(self, request: str) -> bool:
        """True if ``request`` is outstanding or among the last RECENT_IDS settled."""
        return request in self._prompts or request in self._recent

    def get_receipt(self, request: str) -> Receipt | None:
        return self._recent.get(request)

    def status(self) -> dict[str, Any]:
        engine = self.engine
        return {
            "engine": {
                "pid": engine.pid if engine is not None else None,
                "generation": self.generation,
                "alive": bool(engine is not None and engine.alive),
                "sealed": self.session.sealed,
                "down": self.down_reason,
            },
            "held": self._held.request if self._held is not None else None,
            "queued": [p.request for p in self._queue],
            "receipts": self.receipts_issued,
            "journal": str(self.journal.path) if self.journal is not None else None,
        }

    def signals(self, max_buffer: int = 1000) -> trio.MemoryReceiveChannel[dict[str, Any]]:
        """A channel of every notification (signals, engine lifecycle, receipts)."""
        send, recv = trio.open_memory_channel[dict[str, Any]](max_buffer)
        self._subscribers.append(send)
        return recv

    async def drain(self) -> None:
        """Wait until every accepted prompt has its receipt (queued, starting an
        engine for it, or held). Ends when none is outstanding; each prompt is
        bounded by its own timeouts."""
        while self._prompts:
            await self._wait_change()

    async def aclose(self, *, drain: bool = False) -> None:
        """Close: every accepted prompt gets its receipt, then the engine stops."""
        if self._closed.is_set():
            return
        if drain:
            await self.drain()
        self.closing = True
        while self._queue:
            self._finish_unsent(self._queue.popleft(), "rejected", "closing")
        self._queue_changed.set()
        held = self._held
        if held is not None and held.receipt is None:
            with trio.CancelScope(shield=True):
                if held.stop_id is None:
                    await self._send_stop(held)
                with trio.move_on_after(self.config.close_grace):
                    await held.done.wait()
        with trio.CancelScope(shield=True):
            await self._retire_engine()
            with trio.move_on_after(5.0):
                await self._dispatcher_done.wait()
        # Anything still without a receipt (a dispatcher cut short) gets one now.
        for p in list(self._prompts.values()):
            if p.receipt is None and not p.sent:
                self._finish_unsent(p, "rejected", "closing")
            elif p.receipt is None:
                self._give_up(p, "outcome-unknown", "engine-exited")
        # The journal closes only after the fsync task has ended: an fsync
        # already in its thread finishes first (never on a closed descriptor).
        self._fsync_scope.cancel()
        with trio.CancelScope(shield=True), trio.move_on_after(10.0):
            await self._fsync_done.wait()
        if self.journal is not None:
            self.journal.note({"event": "bridge-closed", "receipts": self.receipts_issued}, self.now())
            self.journal.close()
        for send in self._subscribers:
            send.close()
        self._closed.set()

    # -- notifications ------------------------------------------------------------------

    def _notify(self, note: dict[str, Any]) -> None:
        for listener in self.listeners:
            listener(note)
        for send in list(self._subscribers):
            try:
                send.send_nowait(note)
            except trio.WouldBlock:
                pass  # a subscriber that does not read loses notifications, not the bridge
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                self._subscribers.remove(send)

    def _signal(self, payload: dict[str, Any]) -> None:
        # An unsealed engine can flood: past SIGNALS_PER_GENERATION the rest are
        # counted, not sent (the journal keeps every line, so replay has them all).
        self._signals_this_generation += 1
        if self._signals_this_generation > SIGNALS_PER_GENERATION:
            if self._signals_this_generation == SIGNALS_PER_GENERATION + 1:
                payload = {"signal": "signals-suppressed", "after": SIGNALS_PER_GENERATION}
            else:
                return
        note = {"type": "signal", **payload, "generation": self.generation}
        if self.journal is not None:
            self.journal.signal({k: v for k, v in note.items() if k != "type"}, self.now())
        self._notify(note)

    def _poke(self) -> None:
        self._wake.set()

    async def _wait_change(self) -> None:
        """Wait for the next change (a line, an exit, a receipt). Ends at the next poke."""
        if self._wake.is_set():
            self._wake = trio.Event()
        await self._wake.wait()

    # -- receipts -------------------------------------------------------------------------

    def _finish_unsent(self, p: _Prompt, state: str, reason: str, native_error: str | None = None) -> None:
        receipt = Receipt(
            request=p.request,
            state=state,
            reason=reason,
            native_error=native_error,
            times=Times(submitted=p.submitted, settled=self.now()),
        )
        self._deliver(p, receipt)

    def _deliver(self, p: _Prompt, receipt: Receipt) -> None:
        if p.receipt is not None:
            raise AssertionError(f"second receipt for {p.request!r}")
        if receipt.times.submitted is None:
            receipt = attrs.evolve(receipt, times=attrs.evolve(receipt.times, submitted=p.submitted))
        p.receipt = receipt
        self.receipts_issued += 1
        t = self.now()
        if self.journal is not None:
            self.journal.receipt(receipt, t)
            self._fsync_wanted.set()
        if p.text_send is not None:
            p.text_send.close()
        if p is self._held:
            # Released in the same step the receipt is settled: nothing the
            # engine writes after the settle is read while the slot is held.
            self.session.release(p.request, t=t)
            if self.journal is not None:
                self.journal.release(p.request, t)
            self._held = None
        p.done.set()
        # Settled prompts leave the working set; a bounded window of their ids
        # and receipts stays for duplicate checks and lookups.
        self._prompts.pop(p.request, None)
        self._recent[p.request] = receipt
        if len(self._recent) > RECENT_IDS:
            self._recent.popitem(last=False)
        self._notify({"type": "receipt", "id": p.request, "receipt": receipt.to_json()})
        self._poke()

    def _give_up(self, p: _Prompt, state: str, reason: str) -> None:
        for event in self.session.give_up(p.request, state, reason, t=self.now()):
            if type(event) is ReceiptReady:
                self._deliver(p, event.receipt)
        if p.receipt is None:
            # Sent to an earlier engine: the session no longer knows it.
            self._deliver(p, Receipt(request=p.request, state=state, reason=reason, pid=None, generation=self.generation))

    # -- the engine's lines (EngineSink) --------------------------------------------------------

    def lines(self, engine: Engine, lines: list[bytes | Oversize]) -> None:
        """One read's lines, in order. The hot path: runs of ``message_update``
        lines nobody streams are taken in bulk (found and journaled with C-level
        maps, one clock read per batch); every other line goes one by one."""
        if engine is not self.engine:
            return
        t = self.now()
        session = self.session
        count = len(lines)
        flags: list[bool] | None = None
        if session.updates_skippable():
            try:
                flags = list(map(operator.and_,
                                 map(bytes.startswith, lines, itertools.repeat(MESSAGE_UPDATE_PREFIX)),  # type: ignore[arg-type]
                                 map(bytes.endswith, lines, itertools.repeat(b"}"))))  # type: ignore[arg-type]
            except TypeError:  # an Oversize line in the batch: it goes the slow way
                flags = [type(x) is bytes and x.startswith(MESSAGE_UPDATE_PREFIX) and x.endswith(b"}") for x in lines]
        pos = 0
        while pos < count:
            if flags is not None and flags[pos] and session.updates_skippable():
                try:
                    end = flags.index(False, pos)
                except ValueError:
                    end = count
                run = lines[pos:end]
                if _all_utf8(run):  # type: ignore[arg-type]
                    first = session.skip_updates(len(run))
                    if self.journal is not None:
                        self.journal.recv_elided_updates(run, first, t)  # type: ignore[arg-type]
                else:
                    for line in run:  # the one with invalid UTF-8 is a gap
                        self._line(line, t)
                pos = end
            else:
                self._line(lines[pos], t)
                pos += 1

    def _line(self, line: bytes | Oversize, t: float) -> None:
        idx, parsed, events = self.session.receive_line(line, t=t)
        journal = self.journal
        if type(parsed) is RawLine:
            if journal is not None:
                journal.recv_raw(idx, parsed, t)
        elif journal is not None:
            journal.recv(idx, line, parsed, t)  # type: ignore[arg-type]
        if parsed is not None and type(parsed) is dict and parsed.get("type") == "response":
            rid = parsed.get("id")
            if rid in self._startup_waiting:
                self._startup_waiting[rid] = parsed
                self._poke()
        if events:
            self._handle(events)

    def stderr(self, engine: Engine, text: str) -> None:
        if self.journal is not None:
            self.journal.stderr(text, self.now())

    def stdout_closed(self, engine: Engine) -> None:
        # An engine that closed its stdout can tell us nothing more: stop it.
        if engine.alive and not engine.retiring:
            self._nursery.start_soon(self._stop_engine, engine)
        self._poke()

    def exited(self, engine: Engine, code: int | None, sig: int | None) -> None:
        t = self.now()
        if self.journal is not None:
            self.journal.exit(code, sig, t)
        if engine is self.engine:
            events = self.session.engine_exited(t=t)
            if events:
                self._handle(events)
        if not engine.retiring:
            self._crashes.append(t)
            tail = " | ".join(list(engine.stderr_tail)[-5:])
            self._last_crash = f"engine exited (code {code}, signal {sig})" + (f": {tail}" if tail else "")
        self._notify({"type": "engine", "event": "exited", "pid": engine.pid, "generation": engine.generation,
                      "code": code, "signal": sig, "requested": engine.retiring})
        if engine.launch is not None:
            engine.launch.run_cleanup()
        self._poke()

    def _handle(self, events: Any) -> None:
        held = self._held
        for event in events:
            kind = type(event)
            if kind is ReceiptReady:
                p = self._prompts.get(event.receipt.request)
                if p is not None and p.receipt is None:
                    self._deliver(p, event.receipt)
            elif kind is TextDelta:
                if held is not None and held.text_send is not None and held.request == event.request:
                    try:
                        held.text_send.send_nowait(event.text)
                    except (trio.BrokenResourceError, trio.ClosedResourceError):
                        pass
                    self._notify({"type": "text", "id": event.request, "text": event.text})
            elif kind is Overlap:
                self._signal(event.to_json())
            elif kind is GapOpened or kind is DispositionSignal or kind is SealBroken:
                self._signal(event.to_json())
                self._poke()
            elif kind is Diagnostic:
                self._signal(event.to_json())
                if event.answer is not None and self.engine is not None:
                    self._nursery.start_soon(self._send_quietly, self.engine, event.answer)
            elif kind is Acked:
                self._poke()

    async def _fsync_journal(self) -> None:
        """Make receipts durable off the event loop. Ends when the bridge closes
        (cancelled; an fsync running in its thread is waited for)."""
        journal = self.journal
        try:
            if journal is None:
                return
            fd = journal.fileno()
            with self._fsync_scope:
                while True:
                    await self._fsync_wanted.wait()
                    self._fsync_wanted = trio.Event()
                    await trio.to_thread.run_sync(os.fsync, fd)
        finally:
            self._fsync_done.set()

    def _record_send(self, cmd: dict[str, Any], *, stream: bool = False) -> None:
        """Journal a command and feed it to the session, before it is written:
        every line the engine writes in answer is read after it."""
        t = self.now()
        if self.journal is not None:
            self.journal.send(cmd, t)
        events = self.session.send(cmd, t=t, stream=stream)
        if events:
            self._handle(events)

    async def _send_quietly(self, engine: Engine, cmd: dict[str, Any]) -> None:
        if engine is not self.engine or not engine.alive:
            return
        self._record_send(cmd)
        with trio.move_on_after(self.config.write_timeout):
            try:
                await engine.send(cmd)
            except EngineGone:
                pass

    # -- the dispatcher ------------------------------------------------------------------

    async def _dispatch(self) -> None:
        try:
            while True:
                p = await self._next_prompt()
                if p is None:
                    return
                engine = await self._ensure_engine()
                if p.receipt is not None:
                    # Stopped (cancelled) or closed while its engine was starting:
                    # it was never sent, and never will be.
                    continue
                if engine is None:
                    self._finish_unsent(p, "rejected", "engine-down" if self.down_reason else "closing",
                                        native_error=self.down_reason)
                    if self.down_reason is not None:
                        while self._queue:
                            self._finish_unsent(self._queue.popleft(), "rejected", "engine-down",
                                                native_error=self.down_reason)
                    continue
                await self._drive(engine, p)
                if engine.alive and (not self.session.sealed or self._must_recycle):
                    await self._retire_engine()
        finally:
            self._dispatcher_done.set()

    async def _next_prompt(self) -> _Prompt | None:
        """The next queued prompt. Ends when one is queued, or at close (None)."""
        while not self._queue:
            if self.closing:
                return None
            self._queue_changed = trio.Event()
            await self._queue_changed.wait()
        if self.closing:
            return None
        return self._queue.popleft()

    async def _ensure_engine(self) -> Engine | None:
        """A live, sealed engine, or None when down or closing."""
        engine = self.engine
        if engine is not None and engine.alive and self.session.sealed and not self._must_recycle:
            return engine
        if engine is not None:
            await self._retire_engine()
        while not self.closing:
            if self.down_reason is not None:
                return None
            horizon = self.now() - self.config.crash_window
            while self._crashes and self._crashes[0] < horizon:
                self._crashes.popleft()
            if len(self._crashes) >= self.config.crash_limit:
                self._go_down(f"{len(self._crashes)} engine failures in {self.config.crash_window:g}s; last: {self._last_crash}")
                return None
            if self._crashes:
                backoff = self.config.restart_backoff
                await trio.sleep(backoff[min(len(self._crashes), len(backoff)) - 1])
            engine = await self._start_engine()
            if engine is not None:
                return engine
        return None

    def _go_down(self, why: str) -> None:
        self.down_reason = why
        self._signal({"signal": "engine-down", "why": why})
        self._notify({"type": "engine", "event": "down", "why": why})

    async def _start_engine(self) -> Engine | None:
        launch = self._launch
        self._launch = None
        try:
            if launch is None:
                launch = self.profile.prepare()
        except ProfileError as e:
            self._go_down(str(e))
            return None
        self.generation += 1
        self._signals_this_generation = 0
        self._must_recycle = False
        try:
            engine = await Engine.start(self._nursery, launch, self.generation, self, self.config.max_line)
        except OSError as e:
            launch.run_cleanup()
            self._go_down(f"cannot start the engine {launch.argv[0]!r}: {e.strerror or e}")
            return None
        self.engine = engine
        self.session.engine_started(engine.pid, self.generation)
        t = self.now()
        if self.journal is not None:
            self.journal.note({"event": "engine-start", "pid": engine.pid, "generation": self.generation,
                               "argv": launch.argv}, t)
        self._notify({"type": "engine", "event": "started", "pid": engine.pid, "generation": self.generation})
        if self.closing:
            await self._retire_engine()
            return None
        if launch.startup and not await self._check_seal(engine, launch):
            await self._retire_engine()
            self._crashes.append(self.now())
            return None
        return engine

    async def _check_seal(self, engine: Engine, launch: Launch) -> bool:
        """Send the profile's start-up commands and check the answers. Ends when all
        are answered, the engine exits, or ``startup_timeout`` passes."""
        self._startup_waiting = {cmd["id"]: None for cmd in launch.startup}
        with trio.move_on_after(self.config.startup_timeout):
            for cmd in launch.startup:
                self._record_send(cmd)
                try:
                    await engine.send(cmd)
                except EngineGone:
                    break
            while engine.alive and any(v is None for v in self._startup_waiting.values()):
                await self._wait_change()
        answers = {k: v for k, v in self._startup_waiting.items() if v is not None}
        self._startup_waiting = {}
        problems = launch.check(answers) if launch.check is not None else []
        if problems:
            self._last_crash = "seal check failed: " + "; ".join(problems)
        if not engine.alive:
            problems = [f"the engine exited during the seal check: {' | '.join(list(engine.stderr_tail)[-5:])}"]
        elif len(answers) < len(launch.startup):
            problems = problems or ["the engine did not answer the seal check in time"]
        t = self.now()
        if self.journal is not None:
            self.journal.note({"event": "seal-check", "generation": self.generation, "problems": problems,
                               "enforced": launch.header.get("seal")}, t)
        if not problems:
            return True
        self._signal({"signal": "seal-check", "problems": problems, "action": self.config.seal_check})
        return self.config.seal_check == "warn"

    async def _retire_engine(self) -> None:
        """Stop the current engine on purpose (not counted as a crash)."""
        engine = self.engine
        if engine is None:
            return
        await engine.aclose(self.config.stdin_grace, self.config.term_grace)

    async def _stop_engine(self, engine: Engine) -> None:
        """Stop an engine that broke (closed its stdout): its exit counts as a crash."""
        await engine.aclose(self.config.stdin_grace, self.config.term_grace, requested=False)

    async def _send_stop(self, p: _Prompt) -> str:
        stop_id = f"stop-{next(self._stop_ids)}"
        p.stop_id = stop_id
        engine = self.engine
        commands: list[dict[str, Any]] = []
        launch_clearing = self.session.clearing
        if self.config.stop_clears_queue and "clear_queue" in launch_clearing:
            commands.append({"type": "clear_queue", "id": f"{stop_id}:clear"})
        commands.append({"type": "abort", "id": stop_id})
        if engine is None or not engine.alive:
            return stop_id
        for cmd in commands:
            self._record_send(cmd)
            with trio.move_on_after(self.config.write_timeout) as scope:
                try:
                    await engine.send(cmd)
                except EngineGone:
                    break
            if scope.cancelled_caught:
                self._must_recycle = True
                break
        self._poke()
        return stop_id

    async def _drive(self, engine: Engine, p: _Prompt) -> None:
        """Send ``p`` and wait for its receipt (see the module docstring)."""
        cmd: dict[str, Any] = {"type": "prompt", "id": p.request, "message": p.message}
        if p.images:
            cmd["images"] = p.images
        t = self.now()
        self._held = p
        p.sent = True
        self._record_send(cmd, stream=p.stream)
        state = self.session.prompt(p.request)
        if state is not None:
            state.times["submitted"] = p.submitted
        with trio.move_on_after(self.config.write_timeout) as write_scope:
            try:
                await engine.send(cmd)
            except EngineGone:
                pass
        if write_scope.cancelled_caught and p.receipt is None:
            self._give_up(p, "delivery-unknown", "no-ack")
            self._must_recycle = True
            return
        cfg = self.config
        sent_at = self.now()
        ack_deadline = sent_at + cfg.ack_timeout
        settle_deadline = sent_at + p.timeout if p.timeout is not None else math.inf
        stop_deadline = math.inf
        taint_deadline = math.inf
        timed_out = False
        while p.receipt is None:
            state = self.session.prompt(p.request)
            acked = state is not None and state.ack_idx is not None
            if not self.session.sealed and taint_deadline == math.inf:
                taint_deadline = self.now() + cfg.taint_grace
            deadline = min(
                ack_deadline if not acked else math.inf,
                settle_deadline if not timed_out else math.inf,
                stop_deadline,
                taint_deadline,
            )
            with trio.move_on_at(self._t0 + deadline):
                await self._wait_change()
            if p.receipt is not None:
                break
            now = self.now()
            if not engine.alive:
                # The exit handler settles the held prompt; this is a fallback.
                await engine.exited.wait()
                if p.receipt is None:
                    self._give_up(p, "outcome-unknown", "engine-exited")
                break
            if now >= taint_deadline:
                self._give_up(p, "outcome-unknown", self.session.taint or "overlap")
                self._must_recycle = True
            elif not acked and now >= ack_deadline:
                self._give_up(p, "delivery-unknown", "no-ack")
                self._must_recycle = True
            elif not timed_out and now >= settle_deadline:
                timed_out = True
                if p.stop_id is None:
                    await self._send_stop(p)
                stop_deadline = self.now() + cfg.stop_grace
            elif now >= stop_deadline:
                self._give_up(p, "outcome-unknown", "settle-timeout")
                self._must_recycle = True


def _all_utf8(lines: list[bytes]) -> bool:
    """Every line valid UTF-8: ASCII lines are; only the others are decoded (all in C)."""
    others = list(itertools.compress(lines, map(operator.not_, map(bytes.isascii, lines))))
    if not others:
        return True
    try:
        collections.deque(map(bytes.decode, others), maxlen=0)
    except UnicodeDecodeError:
        return False
    return True


@asynccontextmanager
async def open_bridge(
    profile: EngineProfile,
    *,
    journal: str | Path | None | bool = True,
    config: BridgeConfig | None = None,
    drain_on_exit: bool = False,
) -> AsyncIterator[Bridge]:
    """Open a bridge on an engine profile; close it (every receipt settled) on exit.

    ``journal``: True for the default location, a path, or False/None for none.
    Raises :class:`~bridge.profile.ProfileError` when the engine can't be prepared.
    """
    config = config or BridgeConfig()
    launch = profile.prepare()
    jr: Journal | None = None
    try:
        if journal:
            path = default_journal_path() if journal is True else Path(journal)
            jr = Journal(
                path,
                clearing=launch.clearing,
                full=config.journal_full,
                bridge=__version__,
                created=_utc_now(),
                lean=not config.journal_full,
                **launch.header,
            )
    except BaseException:
        launch.run_cleanup()
        raise
    async with trio.open_nursery() as nursery:
        bridge = Bridge(nursery, profile, launch, jr, config)
        if config.journal_full:
            bridge.session.fast_skip = False
        nursery.start_soon(bridge._dispatch)
        nursery.start_soon(bridge._fsync_journal)
        try:
            yield bridge
            if drain_on_exit:
                await bridge.drain()
        finally:
            with trio.CancelScope(shield=True):
                await bridge.aclose()
                # A dispatcher cut short mid-start may have left an engine up.
                if bridge.engine is not None and bridge.engine.alive:
                    await bridge.engine.aclose(config.stdin_grace, config.term_grace)
            nursery.cancel_scope.cancel()


def _utc_now() -> str:
    import datetime

    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
