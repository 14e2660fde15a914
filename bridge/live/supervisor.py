"""The live bridge: the thin trio layer around the supervision.

:func:`bridge.live.api.open_bridge` (the Python API, SPEC §7) builds a :class:`Bridge`.

One pure object decides everything: :class:`~bridge.core.supervision.Supervision` (which owns
the lifecycle -- queue, slot, deadlines, stops, closing, engine restarts -- and the session,
the evidence). This module only tells it what the world did and carries out what it answers:

- every door of the supervision is called through :meth:`Bridge._drive` (the drive loop,
  :class:`~bridge.live.driving.Driver`, the pool's too), and the actions it returns are carried
  out in order before the next door is called (a door that carrying out an action calls waits
  its turn, so steps never nest);
- actions are carried out at once where they are synchronous (journal an entry, queue a
  command's bytes for the engine's writer, deliver a receipt, notify) or in tasks where they
  wait (spawn an engine, stop one with the close ladder, write to a pipe bounded by
  ``write_timeout``);
- one task (:meth:`Bridge._clock`) sleeps until the supervision's next deadline and then
  calls its :meth:`~bridge.core.supervision.Supervision.tick`;
- what an engine reports (its lines, stderr, a failed write, its exit: :class:`_Reports`) is a
  door of the supervision too, called the same way.

The clock task, the writers and the engines' own tasks are shielded from
cancellation until the bridge has closed: cancelling the code that uses the
bridge must not leave a prompt without its receipt or an engine running.

The trio layer is this :class:`Bridge` and the :class:`~bridge.live.engine.Engine` it spawns
(one process, its reader, writer and close ladder). Beside them: the launches an engine is
spawned from (:mod:`bridge.live.launches`), the journal (:mod:`bridge.live.journal`, which
writes each ``Record*`` action), the drive loop (:mod:`bridge.live.driving`) and the API
(:mod:`bridge.live.api`, :mod:`bridge.live.handles`).
"""

from __future__ import annotations

import functools
import itertools
import math
import os
import signal as signal_module
import uuid
from collections.abc import Callable, Sequence
from typing import Any, Unpack

import trio

from bridge.core.budget import Budget
from bridge.core.config import RECENT_IDS, SIGNALS_PER_GENERATION, BridgeConfig
from bridge.core.framing import Oversize, UpdateRun
from bridge.core.ledger import DEFAULT_SCOPE, Admission, Conflict, Known
from bridge.core.notices import ReceiptNotice, TextNotice
from bridge.core.progress import ProgressEvent
from bridge.core.prompts import PromptOptions, check_prompt
from bridge.core.receipts import Receipt, Usage
from bridge.core.steering import Wanted
from bridge.core.supervision import (
    Action,
    Answer,
    AnswerDialog,
    AskDialog,
    Close,
    Closed,
    Collected,
    Deliver,
    DialogEnded,
    DialogReply,
    NobodyAnswers,
    Notify,
    Progress,
    RecordReceipt,
    Request,
    Shutdown,
    Spawn,
    Stop,
    StopAnswer,
    StopEngine,
    Submit,
    Supervision,
    Tell,
    Text,
    View,
    Write,
)
from bridge.live.driving import Door, Driver
from bridge.live.engine import Engine, EngineGone
from bridge.live.handles import Dialog, DialogError, Pending, PromptHandle
from bridge.live.journal import Journal
from bridge.live.launches import Launches
from bridge.live.ledger import AsyncLedger, LedgerWrites
from bridge.live.notifications import Notifications
from bridge.live.otel import PromptTracer, prompt_tracer
from bridge.live.status import status_of
from bridge.live.steering import EngineQuestionError, Steering
from bridge.live.submits import check_size, prompt_door
from bridge.profiles.command import EngineProfile, Launch, ProfileError
from bridge.transcript import dumps

__all__ = ["RECENT_IDS", "SIGNALS_PER_GENERATION", "Bridge", "BridgeConfig", "EngineQuestionError"]

#: After closing, if the lifecycle has still not closed (a bug, or an engine the
#: close ladder could not reap), this much longer is waited before every
#: outstanding prompt is given its receipt by force.
CLOSE_BACKSTOP = 30.0

#: How often a receipt in flight in another bridge on the ledger is looked for there (seconds).
LEDGER_POLL = 0.2
#: At the close, how long the ledger's last writes are waited for (a busy timeout and an fsync
#: each, at most a few).
LEDGER_FLUSH = 30.0

#: Signal numbers to names, for the closing note.
_SIGNAL_NAMES = {int(s): s.name for s in signal_module.Signals}


class Bridge(Steering):
    """Supervises one engine for one controller. Build it with :func:`bridge.live.api.open_bridge`."""

    def __init__(
        self,
        nursery: trio.Nursery,
        profile: EngineProfile,
        first_launch: Launch,
        journal: Journal | None,
        config: BridgeConfig,
        *,
        collect: bool = False,
        ledger: AsyncLedger | None = None,
        scope: str = DEFAULT_SCOPE,
    ) -> None:
        self._nursery = nursery
        #: The durable ledger (issue 44; :mod:`bridge.live.ledger`), or None: each prompt is
        #: accepted into it before it is, and its receipt recorded there before it is delivered.
        self.ledger = ledger
        #: Who chose the ids, in the ledger (:data:`bridge.core.ledger.DEFAULT_SCOPE` when none is named).
        self.scope = scope
        #: The ledger's writes, in order, in a task of their own (:class:`~bridge.live.ledger.LedgerWrites`).
        self.ledger_writes = None if ledger is None else LedgerWrites(ledger, scope, self._delivered, self._notify)
        #: Who waits for an id's receipt besides its handle (a Known resubmission, :meth:`receipt`).
        self._followers: dict[str, list[Pending]] = {}
        self._token = trio.lowlevel.current_trio_token()
        self.profile = profile
        self.config = config
        self.journal = journal
        self._t0 = trio.current_time()
        self._last_now = 0.0
        #: Who hears what the bridge says (:mod:`bridge.live.notifications`).
        self._heard = Notifications()
        #: The one object that decides (:mod:`bridge.core.supervision`).
        self.supervision = Supervision(
            config,
            first_launch.clearing,
            dialogs=first_launch.dialogs,
            journal=journal is not None,
            listening=self._heard.listened,
            collect=collect,
        )
        self._handles: dict[str, Pending] = {}
        self._closed = trio.Event()
        self._stop_answers: dict[str, str | None] = {}
        self._asks: dict[str, trio.Event] = {}
        self._ask_ids = itertools.count(1)
        self._answers: dict[str, Answer] = {}
        self._ids = itertools.count(1)
        self._fsync_wanted = trio.Event()
        self._fsync_scope = trio.CancelScope()
        self._fsync_done = trio.Event()
        self._task_scopes: set[trio.CancelScope] = set()
        self._dialogs: dict[str, Dialog] = {}
        self._dialog_replies: dict[str, str | None] = {}
        self._finished = False
        #: Receipts settled in a step whose journal write failed: given out after the
        #: ``journal-failed`` signal (:meth:`_deliver`).
        self._unjournaled: list[Receipt] = []
        #: A journal failure seen while actions are carried out, told once they have been.
        self._journal_failure: str | None = None
        #: What each engine is spawned from (:mod:`bridge.live.launches`), the current engine
        #: (whose lines count: a stopped one's late lines are ignored) and what it reports.
        self.launches = Launches(nursery, profile, first_launch)
        self._engine: Engine | None = None
        self._reports = _Reports(self)
        #: The supervision's steps as of the last drive (a drive that made none moved nothing).
        self._steps_seen = 0
        if journal is not None:
            journal.on_failure = self._on_journal_failure
        #: Spans of its prompts, when tracing is on (:mod:`bridge.live.otel`).
        self._tracer: PromptTracer | None = prompt_tracer(self.supervision.view)
        #: The drive loop, with how each kind of action is carried out.
        carriers = self._carrying(journal)
        if self._tracer is not None:
            carriers = self._tracer.wrap(carriers)
        self._driver: Driver[Action] = Driver(
            carriers, between=self._journal_failed_meanwhile, settled=self._steps_done, changed=self._stepped
        )

    def _carrying(self, journal: Journal | None) -> dict[type, Callable[[Any], None]]:
        """Each action kind's carrier: what the trio layer does for it (a journal entry is
        written only where there is a journal: the supervision makes none without one)."""
        carriers: dict[type, Callable[[Any], None]] = {
            Write: self._write,
            Deliver: self._deliver,
            Tell: self._tell,
            Text: self._text,
            Progress: self._progress,
            Notify: lambda a: self._notify(a.payload.to_json()),
            Spawn: lambda a: self._nursery.start_soon(self._spawn, a.generation),
            StopEngine: self._stop_engine,
            StopAnswer: lambda a: self._stop_answers.__setitem__(a.request, a.stop),
            AskDialog: self._ask_dialog,
            DialogEnded: self._dialog_ended,
            DialogReply: lambda a: self._dialog_replies.__setitem__(a.dialog, a.error),
            Answer: self._answer,
            Closed: lambda a: self._closed.set(),
        }
        if journal is not None:
            carriers.update(journal.carriers())
            carriers[RecordReceipt] = self._record_receipt  # (made durable off the loop: _fsync_journal)
        return carriers

    def view(self) -> View:
        """What the supervision shows, as of its last step (:class:`~bridge.core.supervision.View`:
        the engine, the held and queued prompts, closing, ...): a frozen record to read."""
        return self.supervision.view()

    def collected(self) -> Collected:
        """The tracker's outputs so far (``overlaps``, ``working``, ``settled``), kept when the
        bridge was opened with ``collect=True`` (empty otherwise), as replay keeps them."""
        return self.supervision.collected()

    @property
    def engine(self) -> Engine | None:
        """The current engine process (None until one is started: at open, or else by the first prompt)."""
        return self._engine

    # -- clock ---------------------------------------------------------------------

    def now(self) -> float:
        """Seconds since the bridge opened; after its trio run ended (asyncio, once the block
        is over: :mod:`bridge.live.aio`), the last time it read."""
        try:
            self._last_now = trio.current_time() - self._t0
        except RuntimeError:
            pass
        return self._last_now

    # -- controller API ----------------------------------------------------------------

    # submit, submit_nowait and prompt take the same parameters (tests/test_typed.py checks
    # it): the message, its id and the options (declared once: bridge.core.prompts).

    @prompt_door(PromptOptions)
    async def submit(
        self, message: str, *, request: str | None = None, **options: Unpack[PromptOptions]
    ) -> PromptHandle:
        """Accept a prompt; returns with its handle (:meth:`submit_nowait` says the rest). With
        a ledger (``open_bridge(ledger=...)``) it ends when the ledger has the prompt's record,
        fsynced, in a worker thread (or has answered from the record it holds): an id the
        ledger holds for the same text and options gives back a handle whose receipt is the
        stored one (or waits for it) and runs nothing; for other text or options it raises
        ValueError with the ledger's one line."""
        if self.ledger is None or self._finished:
            return self.submit_nowait(message, request=request, **options)
        request = self._check_submit(message, request, options)
        admission = await self.ledger.accept(request, message, dict(options), scope=self.scope, journal=self._where)
        return self._admitted(admission, message, request, options)

    @prompt_door(PromptOptions)
    def submit_nowait(
        self, message: str, *, request: str | None = None, **options: Unpack[PromptOptions]
    ) -> PromptHandle:
        """Accept a prompt; returns at once. It always gets a receipt (maybe at once: a rejection,
        ``queue-full``, ``closing`` or ``engine-down``, not an exception).

        Args:
            message: The prompt's text, sent intact whatever it holds.
            request: Its id (default ``p1``, ``p2``, ...): a non-empty string not in use.
            **options: Its options (:class:`~bridge.core.prompts.PromptOptions`: ``stream``,
                ``timeout``, ``images``, ``events``, ``stall_timeout``, ``provider``, ``model``,
                ``thinking``, ``budget_usd``, ``budget_tokens``, ``trace``), each optional.

        Raises:
            TypeError: A message that is not text, a keyword it does not take, an option of the
                wrong type (nothing is accepted).
            ValueError: A used or empty id, a bad timeout, image or budget, a lone model, an
                unknown level (:func:`~bridge.core.prompts.check_prompt`), a prompt over half the
                engine's line limit (its echo would be oversize: :func:`~bridge.live.submits.check_size`).
                With a ledger: other text or options under an id it holds (its one line).

        With a ledger the prompt is accepted into it here, on the event loop (one fsync:
        :meth:`submit` does it in a worker thread instead), as :meth:`submit` says."""
        request = self._check_submit(message, request, options)
        if self.ledger is not None and not self._finished:  # (closed: rejected ``closing``, not recorded)
            admission = self.ledger.ledger.accept(
                request, message, dict(options), scope=self.scope, journal=self._where
            )
            return self._admitted(admission, message, request, options)
        return self._accept(message, request, options)

    def _check_submit(self, message: str, request: str | None, options: PromptOptions) -> str:
        """The checks of a prompt before it is accepted (:meth:`submit_nowait`'s Raises), and its
        id: the one given, or one the bridge makes (with a ledger, one no other bridge makes)."""
        check_prompt(message, options)
        check_size(message, options.get("images"), self.config.max_line)
        if request is None:
            if self.ledger is not None:
                return f"p-{uuid.uuid4().hex}"  # (p1, p2, ... would name another bridge's prompts for good)
            request = f"p{next(self._ids)}"
            while self.knows(request) or request in self._handles:
                request = f"p{next(self._ids)}"
            return request
        if not isinstance(request, str) or not request:
            raise ValueError(f"request id must be a non-empty str, got {request!r}")
        if self.ledger is None and (self.knows(request) or request in self._handles):
            raise ValueError(f"request id {request!r} is already in use")
        return request

    @property
    def _where(self) -> str | None:
        """The journal a ledger record names (recovery reads it), or None."""
        return None if self.journal is None else str(self.journal.path)

    def _admitted(self, admission: Admission, message: str, request: str, options: PromptOptions) -> PromptHandle:
        """What the ledger's answer makes of a prompt: accepted (new), the same prompt again
        (Known: its handle follows the first's receipt; nothing runs), or refused (Conflict)."""
        if isinstance(admission, Conflict):
            raise ValueError(admission.line)
        if not isinstance(admission, Known):
            return self._accept(message, request, options)
        p = self._pending(request, options)
        record = admission.record
        if record.receipt is not None:
            self._settle_pending(p, record.receipt)
        else:
            self._follow(p)
        return PromptHandle(p, self)

    def _pending(self, request: str, options: PromptOptions) -> Pending:
        p = Pending(request)
        if options.get("stream", False):
            p.text_send, p.text_recv = trio.open_memory_channel[str](math.inf)
        if options.get("events", False):
            p.event_send, p.event_recv = trio.open_memory_channel[ProgressEvent](math.inf)
        return p

    def _follow(self, p: Pending) -> None:
        """``p`` gets its id's receipt when this bridge delivers it, or, when the prompt is in
        no handle of this bridge (another bridge on the ledger runs it), when the ledger has it."""
        self._followers.setdefault(p.request, []).append(p)
        if p.request not in self._handles:
            if trio.lowlevel.in_trio_task():
                self._nursery.start_soon(self._await_ledger, p.request)
            else:  # (submit_nowait from asyncio code: trio's guest starts it)
                self._token.run_sync_soon(self._nursery.start_soon, self._await_ledger, p.request)

    async def _await_ledger(self, request: str) -> None:
        """Read the ledger until ``request`` has a receipt there, then give it to its followers.
        Ends then, or when the bridge finishes (its scope is cancelled)."""
        assert self.ledger is not None
        with self._shielded():
            while request in self._followers:
                record = await self.ledger.get(request, scope=self.scope)
                if record is not None and record.receipt is not None:
                    for p in self._followers.pop(request, []):
                        self._settle_pending(p, record.receipt)
                    return
                await trio.sleep(LEDGER_POLL)

    def _accept(self, message: str, request: str, options: PromptOptions) -> PromptHandle:
        """Hand an accepted prompt to the supervision; its handle."""
        stream, events = options.get("stream", False), options.get("events", False)
        p = self._pending(request, options)
        self._handles[request] = p
        submit = Submit(
            request,
            message,
            images=options.get("images"),
            stream=stream,
            timeout=options.get("timeout"),
            events=events,
            stall_timeout=options.get("stall_timeout"),
            wanted=Wanted(options.get("provider"), options.get("model"), options.get("thinking")),
            budget=Budget(options.get("budget_usd"), options.get("budget_tokens")),
            traced=self._tracer is not None and self._tracer.submitted(request, options.get("trace")),
        )
        self._feed(submit)
        return PromptHandle(p, self)

    @prompt_door(PromptOptions)
    async def prompt(self, message: str, *, request: str | None = None, **options: Unpack[PromptOptions]) -> Receipt:
        """Submit (the parameters, and what it raises, are :meth:`submit_nowait`'s) and wait
        for the receipt. Ends when it comes (it always does).

        Cancelled while it waits (``trio.move_on_after`` around it, say), it stops the prompt
        first, as :meth:`stop` does: nobody holds its handle, so nobody else could, and a run
        left going would hold the slot from the prompts after it. The receipt still comes
        (to :meth:`signals` and the journal). To stop waiting but let a prompt run, use
        :meth:`submit` and the handle."""
        handle = await self.submit(message, request=request, **options)
        try:
            return await handle.receipt()
        except BaseException:
            self._feed(Stop(handle.request))
            raise

    async def stop(self, request: str) -> str | None:
        """Stop a prompt; returns at once (the abort is queued for the engine's writer).
        A queued one is rejected (``cancelled``) without touching the engine; the held one
        gets an ``abort``. Returns the abort's id (the stop already sent, if one was, whoever
        sent it), or None: a settled or unknown prompt is left alone."""
        self._feed(Stop(request))
        return self._stop_answers.pop(request, None)

    async def send_raw(self, cmd: dict[str, Any]) -> None:
        """Write any command to the current engine, bypassing the slot rules.

        For recording seal failures on purpose (a second prompt while one
        runs, ``steer``, ``follow_up``): it is journaled and fed to the
        session like any send, so the tracker sees what the engine saw. A
        controller never needs it; using it unseals the engine. Ends when the line
        is written, or after ``write_timeout`` (an engine that stopped reading).
        """
        engine = self.engine
        if engine is None or not engine.alive:
            raise RuntimeError("no engine is running")
        self._drive(lambda: self.supervision.sent_raw(cmd, self.now()))
        with trio.move_on_after(self.config.write_timeout):
            try:
                await engine.send(cmd)
            except EngineGone:
                pass

    def knows(self, request: str) -> bool:
        """True if ``request`` is outstanding or among the last RECENT_IDS settled."""
        return self.supervision.knows(request)

    async def receipt(self, request: str) -> Receipt:
        """``request``'s receipt: the ledger's (with one), or this bridge's for one among its last
        ``RECENT_IDS`` settled; waited for while it is in flight, here or (with a ledger) in
        another bridge on the ledger. Ends when there is one. Raises KeyError for an id neither
        knows."""
        if request not in self._handles:
            if self.ledger is None:
                found = self.supervision.receipt(request)
                if found is None:
                    raise KeyError(request)
                return found
            record = await self.ledger.get(request, scope=self.scope)
            if record is not None and record.receipt is not None:
                return record.receipt
            if record is None and request not in self._handles:
                raise KeyError(request)
        follower = Pending(request)
        self._follow(follower)
        await follower.done.wait()
        assert follower.receipt is not None
        return follower.receipt

    def get_receipt(self, request: str) -> Receipt | None:
        """``request``'s receipt if it is among the last ``RECENT_IDS`` settled, else None."""
        return self.supervision.receipt(request)

    @property
    def receipts_issued(self) -> int:
        return self.supervision.view().receipts

    @property
    def down_reason(self) -> str | None:
        """Why the engine is down (every prompt ``rejected``/``engine-down``), or None."""
        return self.supervision.view().down

    @property
    def closing(self) -> bool:
        """True from the moment closing began (nothing unwritten is written any more)."""
        return self.supervision.view().closing is not None

    @property
    def generation(self) -> int:
        return self.supervision.view().generation

    @property
    def journal_failed(self) -> str | None:
        """Why the journal could not be written, or None."""
        return self.journal.failed if self.journal is not None else None

    def status(self) -> dict[str, Any]:
        """What runs: what ``bridge serve`` answers a ``status`` with (``engine``, ``held``, ``queued``, ...)."""
        engine = self.engine
        alive = engine is not None and engine.alive
        return status_of(self.supervision.view(), alive, engine.pid if engine is not None else None, self.journal)

    def dialogs(self, max_buffer: int = 100) -> trio.MemoryReceiveChannel[Dialog]:
        """A channel of the extension dialogs to answer (:class:`~bridge.live.handles.Dialog`).

        Only an engine whose extensions were allowed (``PiProfile(extensions=[...])``,
        ``--extension``) has dialogs to ask. While a channel from here is open (or
        :attr:`answers_dialogs` is set), each dialog is asked and waits for its answer up to
        ``dialog_timeout``; with none, it is answered ``cancelled`` at once. Never a yes
        nobody gave. A full channel loses nothing: the dialog ends at its timeout."""
        return self._heard.dialogs(max_buffer)

    @property
    def listeners(self) -> list[Callable[[dict[str, Any]], None]]:
        """Observers called with every notification dict (serve, run and acp use this)."""
        return self._heard.listeners

    @property
    def answers_dialogs(self) -> bool:
        """A controller answers extension dialogs through :meth:`answer_dialog` (serve: its
        stdin) and reads them as ``ask`` notifications: dialogs are asked, not cancelled."""
        return self._heard.answers_dialogs

    @answers_dialogs.setter
    def answers_dialogs(self, value: bool) -> None:
        self._heard.answers_dialogs = value

    async def answer_dialog(
        self, dialog: str, *, value: str | None = None, confirmed: bool | None = None, cancelled: bool = False
    ) -> None:
        """Answer extension dialog ``dialog`` (:meth:`Dialog.answer
        <bridge.live.handles.Dialog.answer>` says how). Returns at once: the answer is written
        to the engine. Raises :class:`~bridge.live.handles.DialogError` when the dialog has
        ended or the answer does not fit it."""
        self._feed(AnswerDialog(dialog, value, confirmed, cancelled))
        error = self._dialog_replies.pop(dialog, "the bridge did not take the answer")
        if error is not None:
            raise DialogError(error)

    def stop_answering_dialogs(self) -> None:
        """Nobody will answer dialogs any more (serve's stdin ended): the open ones are
        answered ``cancelled`` now (``no-controller``), and so is every later one unless a
        :meth:`dialogs` channel is open."""
        self.answers_dialogs = False
        if not self._heard.listened():
            self._feed(NobodyAnswers())

    def signals(self, max_buffer: int = 1000) -> trio.MemoryReceiveChannel[dict[str, Any]]:
        """A channel of every notification (signals, engine lifecycle, receipts) from now on;
        it ends when the bridge has closed (at once, from a closed bridge)."""
        return self._heard.signals(max_buffer)

    async def drain(self) -> None:
        """Wait until every accepted prompt has its receipt (queued, starting an
        engine for it, or held). Ends when none is outstanding; each prompt is
        bounded by its own timeouts."""
        while self.supervision.view().outstanding:
            await self._wait_change()
        if self.ledger_writes is not None:
            await self.ledger_writes.flushed()

    def shutdown(self, drain_timeout: float | None = None) -> None:
        """No new prompts (they get ``rejected``/``closing``); the outstanding ones run
        to their receipts (past ``drain_timeout``: stopped, ``failed``/``timeout``);
        then the engine is stopped and the bridge closes. A second call changes nothing."""
        self._feed(Shutdown(drain_timeout))

    def close_now(self, why: str = "close", detail: str | None = None) -> None:
        """Begin closing at once: nothing unwritten is written (queued prompts get
        ``rejected``/``closing``), the held prompt is stopped (``failed``/``closing``),
        then the engine is stopped. ``why``: ``close`` or ``signal``."""
        self._feed(Close(why, detail))

    def close_on_signal(self, signum: int) -> None:
        self.close_now("signal", _SIGNAL_NAMES.get(signum, f"signal {signum}"))

    async def wait_closed(self) -> None:
        """Wait until the lifecycle has closed: every accepted prompt has its
        receipt and no engine runs. Ends after :meth:`shutdown` has drained or
        :meth:`close_now`, bounded by their timeouts."""
        await self._closed.wait()

    async def aclose(self, *, drain: bool = False) -> None:
        """Close: every accepted prompt gets its receipt, then the engine stops.

        ``drain=True`` works the queue off first (like :meth:`shutdown`). Ends when
        the lifecycle has closed (bounded by ``close_grace`` and the close ladder;
        past :data:`CLOSE_BACKSTOP` more, the rest is settled by force)."""
        if self._finished:
            return
        with trio.CancelScope(shield=True):
            if drain:
                self.shutdown()
                await self.drain()
            self.close_now()
            with trio.move_on_after(
                self.config.close_grace + self.config.stdin_grace + self.config.term_grace + CLOSE_BACKSTOP
            ):
                await self._closed.wait()
            if not self._closed.is_set():
                await self._force_close()
            await self._finish()

    async def _force_close(self) -> None:
        """The backstop: kill what still runs and settle every outstanding prompt. Does not
        wait (async for its callers' sake): it returns once every prompt has its receipt."""
        engine = self.engine
        alive = None
        if engine is not None and engine.alive:
            engine.abandon()
            alive = engine.generation
        self._drive(lambda: self.supervision.force_close(alive, self.now()))
        self._closed.set()

    async def _finish(self) -> None:
        """After the lifecycle closed: end the tasks, make the journal durable, close it. Ends
        when the fsync task has ended (an fsync in its thread finishes first; at most 10 s)."""
        if self._finished:
            return
        self._finished = True
        if self.ledger_writes is not None:  # every receipt recorded and delivered before the tasks end
            with trio.CancelScope(shield=True), trio.move_on_after(LEDGER_FLUSH):
                await self.ledger_writes.flushed()
        if self._tracer is not None:
            self._tracer.close()
        for scope in self._task_scopes:
            scope.cancel()
        self.launches.drop_unspawned()
        await self.launches.recorded()  # (its note before the journal closes)
        # The journal closes only after the fsync task has ended: an fsync
        # already in its thread finishes first (never on a closed descriptor).
        self._fsync_scope.cancel()
        with trio.CancelScope(shield=True), trio.move_on_after(10.0):
            await self._fsync_done.wait()
        if self.journal is not None:
            self.journal.note({"event": "bridge-closed", "receipts": self.receipts_issued}, self.now())
            self.journal.close()
        self._heard.close()

    # -- the one door into the supervision --------------------------------------------------

    def _feed(self, request: Request) -> None:
        """Give the supervision a controller's request (:meth:`_drive`)."""
        self._drive(lambda: self.supervision.feed(request, self.now()))

    def _drive(self, door: Door[Action]) -> None:
        """Call one of the supervision's doors and carry out the actions it returns, in order
        (:class:`~bridge.live.driving.Driver`). A door called while actions are carried out (a
        prompt that could not be written, a listener that stops a prompt) waits its turn: steps
        never nest, and their order is the order of the doors. From asyncio code it is handed
        to trio."""
        self._driver.drive(door)

    def _journal_failed_meanwhile(self) -> Door[Action] | None:
        """After each door's actions: a journal failure seen while they were carried out is the
        next door (after them and the NotWritten of a prompt they held back, so closing sees
        the prompt as unwritten)."""
        if self._journal_failure is None:
            return None
        why, self._journal_failure = self._journal_failure, None
        return functools.partial(self._journal_failed, why)

    def _steps_done(self) -> None:
        """Once the doors are done: receipts held back by a journal failure are never held past
        the steps that made them."""
        if self._unjournaled:
            self._resolve_unjournaled()

    def _stepped(self) -> bool:
        """Whether the doors stepped the lifecycle: only a step moves a deadline or the
        outstanding count (a read that stepped nothing, most of a stream's, wakes neither the
        clock nor a drain). The key endpoint's gate follows the steps (a prompt held, settled)."""
        steps = self.supervision.steps
        if steps == self._steps_seen:
            return False
        self._steps_seen = steps
        self.launches.gate(self._engine, self.supervision.model_gate())
        return True

    def _on_journal_failure(self, why: str) -> None:
        if self._driver.stepping:
            self._journal_failure = why
        else:
            self._drive(functools.partial(self._journal_failed, why))

    def _journal_failed(self, why: str) -> list[Action]:
        return self.supervision.journal_failed(why, self.now())

    # -- carrying out actions -------------------------------------------------------------

    def _write(self, action: Write) -> None:
        """Queue a command the supervision recorded for the engine's writer. Once the journal
        failed (in these very actions: the supervision did not know yet), a prompt or a
        start-up command is not written, and a prompt goes back to the supervision unwritten."""
        engine = self.engine
        unwritable = engine is None or engine.generation != action.generation or not engine.alive
        if unwritable or (action.kind in ("prompt", "startup") and self.journal_failed):
            if action.kind in ("prompt", "config") and action.request is not None:
                generation, request = action.generation, action.request
                self._drive(lambda: self.supervision.not_written(generation, request, self.now()))
            return
        assert engine is not None
        engine.queue(dumps(action.cmd) + b"\n", action.request, action.kind)
        if self.ledger_writes is not None and action.kind == "prompt" and action.request is not None:
            self.ledger_writes.written(action.request, self._where)  # (after the journal's send, flushed)

    def _stop_engine(self, action: StopEngine) -> None:
        """The close ladder (shielded inside), in a task of its own: it ends when the engine is reaped."""
        engine = self.engine
        if engine is not None and engine.generation == action.generation and engine.alive:
            config = self.config
            ladder = functools.partial(engine.aclose, config.stdin_grace, config.term_grace, requested=action.requested)
            self._nursery.start_soon(ladder)

    def _record_receipt(self, action: RecordReceipt) -> None:
        assert self.journal is not None
        self.journal.receipt(action.receipt, action.t)
        self._fsync_wanted.set()

    def _answer(self, action: Answer) -> None:
        waiter = self._asks.pop(action.token, None)
        if waiter is not None:
            self._answers[action.token] = action
            waiter.set()

    def _ask_dialog(self, action: AskDialog) -> None:
        d = Dialog(action.dialog, action.request, action.method, action.fields, action.payload["timeout"], self)
        self._dialogs[action.dialog] = d
        self._notify(action.payload)
        self._heard.offer_dialog(d)  # one nobody takes ends at its timeout

    def _dialog_ended(self, action: DialogEnded) -> None:
        d = self._dialogs.pop(action.dialog, None)
        if d is not None:
            d.by, d.response = action.by, action.answer
            d.ended.set()
        self._notify(action.payload)

    def _deliver(self, action: Deliver) -> None:
        receipt = action.receipt
        self.launches.settled(self._engine, receipt, self.journal, self.now)
        if self._journal_failure is not None:
            # The journal failed in these actions (at this receipt's own line, maybe): the
            # controller hears ``journal-failed`` first, then this receipt, which the journal
            # may not hold (released by the signal, :meth:`_tell`; by the end of
            # :meth:`_drive` at the latest).
            self._unjournaled.append(receipt)
            return
        self._resolve(receipt)

    def _resolve_unjournaled(self) -> None:
        held, self._unjournaled = self._unjournaled, []
        for receipt in held:
            self._resolve(receipt)

    def _resolve(self, receipt: Receipt) -> None:
        """Deliver a receipt: to its handle, its followers and the listeners; with a ledger,
        once the ledger has recorded it (fsynced: :class:`~bridge.live.ledger.LedgerWrites`)."""
        if self.ledger_writes is not None and receipt.request is not None and not self._finished:
            self.ledger_writes.settle(receipt)
            return
        self._delivered(receipt)

    def _delivered(self, receipt: Receipt) -> None:
        request = receipt.request
        p = self._handles.pop(request, None) if request is not None else None
        for follower in self._followers.pop(request, []) if request is not None else []:
            self._settle_pending(follower, receipt)
        if p is None or p.receipt is not None:
            return
        self._settle_pending(p, receipt)
        self._notify(ReceiptNotice(receipt.request, receipt).to_json())

    @staticmethod
    def _settle_pending(p: Pending, receipt: Receipt) -> None:
        if p.receipt is None:
            p.receipt = receipt
            p.close_channels()
            p.done.set()

    def _tell(self, action: Tell) -> None:
        self._notify(action.payload)
        if self._unjournaled and action.payload.get("signal") == "journal-failed":
            self._resolve_unjournaled()

    def _text(self, action: Text) -> None:
        p = self._handles.get(action.request) if action.request is not None else None
        if p is not None and p.text_send is not None:
            try:
                p.text_send.send_nowait(action.text)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass
            self._notify(TextNotice(action.request, action.text).to_json())

    def _progress(self, action: Progress) -> None:
        p = self._handles.get(action.request) if action.request is not None else None
        if p is not None and p.event_send is not None:
            try:
                p.event_send.send_nowait(action.event)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass
            if self._heard.heard:  # its JSON only for someone who reads it
                self._notify(action.event.to_json())

    def _notify(self, note: dict[str, Any]) -> None:
        self._heard.notify(note)

    async def _wait_change(self) -> None:
        """Wait for the next step of the lifecycle. Ends after the next door that stepped it."""
        await self._driver.wait_change()

    # -- tasks ----------------------------------------------------------------------------

    def _shielded(self) -> trio.CancelScope:
        """A scope for a task that must outlive a cancelled caller; cancelled by _finish."""
        scope = trio.CancelScope(shield=True)
        self._task_scopes.add(scope)
        return scope

    async def _clock(self) -> None:
        """Tell the supervision the time whenever its next deadline passes. Ends when the
        bridge has closed or finished (its scope is cancelled then)."""
        sup = self.supervision
        with self._shielded():
            await self._driver.clock(sup.next_deadline, lambda: sup.tick(self.now()), self._t0, self._closed)

    async def _spawn(self, generation: int) -> None:
        """Prepare and launch engine ``generation`` (:class:`Spawn`); tell the supervision it runs
        or could not be launched. Ends once it is spawned, or could not be."""
        sup = self.supervision
        with self._shielded():
            try:
                launch = await self.launches.take()
            except ProfileError as e:
                why = str(e)
                self._drive(lambda: sup.spawn_failed(generation, why, self.now()))
                return
            try:
                engine = await Engine.start(
                    self._nursery,
                    launch,
                    generation,
                    self._reports,
                    self.config.max_line,
                    write_timeout=self.config.write_timeout,
                    writer=self._shielded(),
                )
            except OSError as e:
                launch.run_cleanup()
                cannot = f"cannot start the engine {launch.argv[0]!r}: {e.strerror or e}"
                self._drive(lambda: sup.spawn_failed(generation, cannot, self.now()))
                return
            except BaseException:
                launch.run_cleanup()  # anything else that ends the spawn leaves nothing behind either
                raise
            self._engine = engine
            if launch.endpoint is not None:
                launch.endpoint.report = self.launches.model_calls(functools.partial(self._model_called, generation))
            self._drive(lambda: sup.spawned(generation, engine.pid, launch, self.now()))

    def _model_called(self, generation: int, request: str | None, usage: Usage | None) -> None:
        """Engine ``generation``'s key endpoint forwarded a model call (handed to trio)."""
        self._drive(lambda: self.supervision.model_called(generation, request, usage, self.now()))

    async def _fsync_journal(self) -> None:
        """Make receipts durable off the event loop. Ends when the bridge closes
        (cancelled; an fsync running in its thread is waited for)."""
        journal = self.journal
        try:
            if journal is None or journal.closed:
                return  # no journal, or it failed before this task first ran
            fd = journal.fileno()
            with self._fsync_scope:
                while not journal.closed:
                    await self._fsync_wanted.wait()
                    self._fsync_wanted = trio.Event()
                    try:
                        await trio.to_thread.run_sync(os.fsync, fd)
                    except OSError as e:
                        journal.fail(e)
        finally:
            self._fsync_done.set()


class _Reports:
    """What a bridge's engines report (:class:`~bridge.live.engine.EngineSink`), each report a
    door of its supervision, called through the bridge's drive loop. Apart from :class:`Bridge`
    so that these are not its public calls."""

    __slots__ = ("_bridge",)

    def __init__(self, bridge: Bridge) -> None:
        self._bridge = bridge

    def lines(self, engine: Engine, lines: Sequence[bytes | Oversize | UpdateRun]) -> None:
        """One read's lines, in order, with one clock read: one door (a stopped engine's are ignored)."""
        b = self._bridge
        if engine is b._engine:
            b._drive(lambda: b.supervision.lines(engine.generation, lines, b.now()))

    def stderr(self, engine: Engine, text: str) -> None:
        b = self._bridge
        b._drive(lambda: b.supervision.stderr(engine.generation, text, b.now()))

    def stdout_closed(self, engine: Engine) -> None:
        b = self._bridge
        b._drive(lambda: b.supervision.stdout_closed(engine.generation, b.now()))

    def write_failed(self, engine: Engine, request: str | None, unsent: bool, error: str | None, stuck: bool) -> None:
        b = self._bridge
        b._drive(
            lambda: b.supervision.write_failed(
                engine.generation, request, stuck=stuck, unsent=unsent, error=error, now=b.now()
            )
        )

    def exited(self, engine: Engine, code: int | None, sig: int | None) -> None:
        """The engine is reaped: its private folders go, and the supervision hears of the exit,
        with the prompts none of whose bytes reached its pipe (:attr:`Engine.unsent
        <bridge.live.engine.Engine.unsent>`)."""
        b = self._bridge
        t = b.now()
        unsent = engine.unsent
        if engine.launch is not None:
            engine.launch.run_cleanup()
        b._drive(lambda: b.supervision.exited(engine.generation, code, sig, unsent, t))
