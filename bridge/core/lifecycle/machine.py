"""The machine: :class:`Lifecycle` (``step(input, now) -> actions``) and the pure :func:`step`.
The rules it follows are the package's (:mod:`bridge.core.lifecycle`)."""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from typing import Any

from bridge.core import dialogs
from bridge.core.framing import prompt_bytes
from bridge.core.lifecycle.actions import (
    Action,
    Closed,
    Deliver,
    GiveUp,
    Note,
    Notify,
    Signal,
    Spawn,
    StopAnswer,
    StopEngine,
    Write,
)
from bridge.core.lifecycle.budgets import Budgets
from bridge.core.lifecycle.config import (
    DEADLINES,
    HELD_DEADLINES,
    RECENT_IDS,
    SIGNALS_PER_GENERATION,
    BridgeConfig,
)
from bridge.core.lifecycle.configuring import Configuring
from bridge.core.lifecycle.extension_dialogs import ExtensionDialogs
from bridge.core.lifecycle.inputs import (
    Acked,
    Activity,
    AnswerDialog,
    Answered,
    Ask,
    Close,
    Compact,
    Configure,
    Configured,
    Decided,
    DialogOpened,
    EngineExited,
    Input,
    JournalFailed,
    ModelCalled,
    NewConversation,
    NobodyAnswers,
    NotWritten,
    Open,
    Shutdown,
    SignalSeen,
    Spawned,
    SpawnFailed,
    Spent,
    StartupChecked,
    StdoutClosed,
    Stop,
    StopMissed,
    Submit,
    Tick,
    Unsealed,
    WriteFailed,
)
from bridge.core.lifecycle.notes import (
    ClosingNote,
    ConfigNote,
    EngineStartNote,
    LifeNote,
    SealCheckExitNote,
    SealCheckNote,
    ShutdownNote,
    UnsentNote,
)
from bridge.core.lifecycle.questions import EngineQuestions
from bridge.core.lifecycle.state import ConfiguringState, EnginePhase, LifeState, PromptPhase, PromptRec
from bridge.core.lifecycle.stops import Stops
from bridge.core.notices import (
    EngineDownNotice,
    EngineDownSignal,
    EngineExitedNotice,
    EngineStartedNotice,
    JournalFailedSignal,
    SealCheckSignal,
    SignalsSuppressed,
    StalledSignal,
)
from bridge.core.receipts import Facts, GiveUpWhy, Receipt, Times, decide, exit_words
from bridge.core.steering import Wanted
from bridge.core.words import Reason, StopBy

# --------------------------------------------------------------------------
# The machine


class Lifecycle:
    """The state machine. ``step(input, now)`` -> actions; ``now`` is seconds since start.

    It holds five parts, each an object of its own module with its rules and its own slice of
    the state (``state.<part>``), which it calls and which call it back (to write, note, reject,
    requeue): :attr:`dialogs`, the extension dialogs
    (:mod:`~bridge.core.lifecycle.extension_dialogs`); :attr:`configuring`, a prompt's model,
    thinking level, new conversation and compaction (:mod:`~bridge.core.lifecycle.configuring`);
    :attr:`questions`, the questions for the engine and the open
    (:mod:`~bridge.core.lifecycle.questions`); :attr:`stops`, how a stop is sent
    (:mod:`~bridge.core.lifecycle.stops`); :attr:`budgets` (:mod:`~bridge.core.lifecycle.budgets`).
    The rest -- the queue and the slot, the engine's life, deadlines, closing, receipts -- is the
    machine's own."""

    def __init__(self, config: BridgeConfig | None = None, state: LifeState | None = None) -> None:
        self.config = config or BridgeConfig()
        self.state = state or LifeState(configuring=ConfiguringState(wanted=Wanted(thinking=self.config.thinking)))
        self._out: list[Action] = []
        #: The time of the step being taken (seconds since start).
        self.now = 0.0
        self.dialogs = ExtensionDialogs(self)
        self.configuring = Configuring(self)
        self.questions = EngineQuestions(self)
        self.stops = Stops(self)
        self.budgets = Budgets(self)
        self._handlers: dict[type, Callable[[Any], None]] = {
            Submit: self._submit,
            Configure: self.configuring.configure,
            Configured: self.configuring.configured,
            NewConversation: self.configuring.new_conversation,
            Compact: self.configuring.compact,
            Open: self.questions.open,
            Ask: self.questions.ask,
            Answered: self.questions.answered,
            DialogOpened: self.dialogs.opened,
            AnswerDialog: self.dialogs.answer,
            NobodyAnswers: lambda ev: self.dialogs.end_all(dialogs.BY_NOBODY),
            Stop: self._stop,
            Shutdown: self._shutdown,
            Close: self._close,
            Spawned: self._spawned,
            SpawnFailed: self._spawn_failed,
            StartupChecked: self._startup_checked,
            Acked: self._acked,
            Decided: self._decided,
            Unsealed: self._unsealed,
            SignalSeen: self._signal_seen,
            StopMissed: self.stops.missed,
            Spent: self.budgets.spent,
            ModelCalled: self.budgets.model_called,
            WriteFailed: self._write_failed,
            NotWritten: self._not_written,
            StdoutClosed: self._stdout_closed,
            EngineExited: self._exited,
            JournalFailed: self._journal_failed,
            Activity: self._activity,
            Tick: self._tick,
        }
        #: What each deadline does when it passes (config.py's DEADLINES says it in words), in
        #: DEADLINES' order: a deadline without its handler here fails at construction.
        self._deadlines: dict[str, Callable[[], None]] = {
            "dialog": self.dialogs.deadline,
            "busy": self.configuring.deadline_busy,
            "ask": self.questions.deadline,
            "config": self.configuring.deadline_config,
            "ack": self._deadline_ack,
            "settle": self._deadline_settle,
            "stall": self._deadline_stall,
            "stop": self._deadline_stop,
            "taint": self._deadline_taint,
            "close": self._deadline_close,
            "startup": self._deadline_startup,
            "backoff": self._deadline_backoff,
            "drain": self._deadline_drain,
        }
        if tuple(self._deadlines) != DEADLINES:
            raise AssertionError(f"the deadlines' handlers {tuple(self._deadlines)} are not DEADLINES {DEADLINES}")

    # -- the door ------------------------------------------------------------

    def step(self, event: Input, now: float) -> list[Action]:
        """Take one input at time ``now``; return the actions, in order."""
        out: list[Action] = []
        self._out = out
        self.now = now
        if not self.state.closed:
            self._handlers[type(event)](event)
            self._pump()
        elif type(event) in (Submit, Ask, AnswerDialog):  # a receipt, or an answer, is owed even now
            self._handlers[type(event)](event)
        self._out = []
        return out

    # -- queries -------------------------------------------------------------

    def knows(self, request: str) -> bool:
        """True if ``request`` is outstanding or among the last RECENT_IDS settled."""
        return request in self.state.prompts or request in self.state.recent

    def next_deadline(self) -> float | None:
        deadlines = self.state.deadlines
        return min(deadlines.values()) if deadlines else None

    @property
    def outstanding(self) -> int:
        return len(self.state.prompts)

    def model_gate(self) -> str | None:
        """The prompt the key endpoint may forward model calls for (:meth:`Budgets.gate`)."""
        return self.budgets.gate()

    # -- what the parts use of the machine -------------------------------------------

    def emit(self, action: Action) -> None:
        """``action`` is this step's next."""
        self._out.append(action)

    # -- controller inputs -----------------------------------------------------

    def _submit(self, ev: Submit) -> None:
        s = self.state
        if self.knows(ev.request):
            raise ValueError(f"request id {ev.request!r} is already in use")
        stall = ev.stall_timeout if ev.stall_timeout is not None else self.config.stall_timeout
        fresh, compact = self.configuring.take_next()  # they go with the next prompt submitted
        rec = PromptRec(
            request=ev.request,
            fresh=fresh,
            compact=compact,
            message=ev.message,
            images=ev.images,
            stream=ev.stream,
            events=ev.events,
            size=prompt_bytes(ev.message, ev.images),
            timeout=ev.timeout if ev.timeout is not None else self.config.settle_timeout,
            stall=stall or None,
            submitted=self.now,
            wanted=ev.wanted.over(s.configuring.wanted),
            budget=ev.budget.over(self.config.prompt_budget),
            traced=ev.traced,
        )
        s.prompts[ev.request] = rec
        if s.closing is not None or s.draining or s.closed:
            self.reject(rec, Reason.CLOSING)
        elif s.down is not None:
            self.reject(rec, Reason.ENGINE_DOWN, s.down)
        elif len(s.queue) >= self.config.queue_max or self._queued_bytes() + rec.size > self.config.queue_bytes:
            self.reject(rec, Reason.QUEUE_FULL)
        else:
            s.queue.append(ev.request)

    def _queued_bytes(self) -> int:
        """The bytes the prompts waiting for the slot hold (:attr:`PromptRec.size`)."""
        prompts = self.state.prompts
        return sum(prompts[request].size for request in self.state.queue if request in prompts)

    def _stop(self, ev: Stop) -> None:
        s = self.state
        rec = s.prompts.get(ev.request)
        if rec is None:
            self.emit(StopAnswer(ev.request, None))
        elif rec.phase in (PromptPhase.QUEUED, PromptPhase.CONFIGURING):  # never written: nothing to abort
            if rec.phase == PromptPhase.CONFIGURING:
                self.configuring.abort_compaction(rec)
            self.reject(rec, Reason.CANCELLED)
            self.emit(StopAnswer(ev.request, None))
        else:
            if rec.stop is None and rec.gave_up is None:
                self.stops.send(rec, StopBy.CONTROLLER, "the controller asked")
                if s.engine.running:
                    # Bounded like the bridge's own stops (the stall deadline went with the
                    # stop): an engine that obeys no abort (stopped, hung) held the slot, and
                    # every prompt queued behind it, until the bridge closed.
                    s.deadlines["stop"] = self.now + self.config.stop_grace
            self.emit(StopAnswer(ev.request, rec.stop))

    def _shutdown(self, ev: Shutdown) -> None:
        s = self.state
        if s.draining or s.closing is not None:
            return
        s.draining = True
        self.note(ShutdownNote(ev.drain_timeout))
        if ev.drain_timeout is not None:
            s.deadlines["drain"] = self.now + ev.drain_timeout

    def _close(self, ev: Close) -> None:
        self._begin_closing(ev.why, ev.detail)

    def _journal_failed(self, ev: JournalFailed) -> None:
        s = self.state
        if s.journal_failed is not None:
            return
        s.journal_failed = ev.error
        self._signal(JournalFailedSignal(ev.error).to_json())
        self._begin_closing("journal", ev.error)

    # -- engine inputs -----------------------------------------------------------

    def current(self, generation: int) -> bool:
        return generation == self.state.engine.generation

    def _spawned(self, ev: Spawned) -> None:
        e = self.state.engine
        if not self.current(ev.generation) or e.phase != EnginePhase.SPAWNING:
            return
        e.pid = ev.pid
        e.clearing = list(ev.clearing)
        e.seal = ev.seal
        self.note(EngineStartNote(ev.pid, ev.generation, list(ev.argv)))
        self.emit(Notify(EngineStartedNotice(ev.pid, ev.generation, e.new_conversation)))
        if self.state.closing is not None:
            self._stop_engine(requested=True)
        elif ev.startup:
            e.phase = EnginePhase.CHECKING
            e.in_startup = True
            for cmd in ev.startup:
                self.emit(Write(ev.generation, dict(cmd), "startup"))
            self.state.deadlines["startup"] = self.now + self.config.startup_timeout
        else:
            e.phase = EnginePhase.READY

    def _spawn_failed(self, ev: SpawnFailed) -> None:
        e = self.state.engine
        if not self.current(ev.generation) or e.phase != EnginePhase.SPAWNING:
            return
        e.phase = EnginePhase.NONE
        self.state.setup_failed = True
        self._go_down(ev.error)

    def _startup_checked(self, ev: StartupChecked) -> None:
        e = self.state.engine
        if not self.current(ev.generation) or e.phase != EnginePhase.CHECKING:
            return
        e.config = ev.config
        self._end_check(list(ev.problems), answered=True)

    def _end_check(self, problems: list[str], *, answered: bool) -> None:
        """The start-up check ended: ``problems`` empty means sealed. ``answered``: the engine
        answered every start-up command, so its problems are a refusal (see the package's
        rules: down at once); False: it did not answer in time (a failure, counted)."""
        s, e = self.state, self.state.engine
        s.deadlines.pop("startup", None)
        e.in_startup = False
        self.note(SealCheckNote(e.generation, problems, e.seal))
        if not problems:
            e.phase = EnginePhase.READY
            return
        self._signal(SealCheckSignal(problems, self.config.seal_check).to_json())
        if self.config.seal_check == "warn" and e.phase == EnginePhase.CHECKING:
            e.phase = EnginePhase.READY
            return
        if e.phase != EnginePhase.CHECKING:
            return
        # The engine is stopped on purpose either way, so its exit does not count (again).
        self._stop_engine(requested=True)
        if answered:
            # A refusal: the answers are a function of the launch (its flags, config folder,
            # models, keys, extensions, sandbox), which a restart repeats: down now.
            s.setup_failed = True
            self._go_down("seal check failed: " + "; ".join(problems))
        else:
            # Not answered in time (a slow start, a loaded machine): one failure, one crash.
            self._crash("seal check failed: " + "; ".join(problems))

    def _acked(self, ev: Acked) -> None:
        rec = self.held()
        if rec is not None and rec.request == ev.request and self.current(ev.generation):
            rec.acked = True
            self.state.deadlines.pop("ack", None)

    def _decided(self, ev: Decided) -> None:
        s = self.state
        request = ev.receipt.request
        rec = s.prompts.get(request) if isinstance(request, str) else None
        if rec is None or rec.phase != PromptPhase.HELD:
            return  # not ours (a raw send's prompt), or already delivered
        self._deliver(rec, ev.receipt)

    def _unsealed(self, ev: Unsealed) -> None:
        e = self.state.engine
        if not self.current(ev.generation):
            return
        e.sealed = False
        rec = self.held()
        if (
            rec is not None
            and rec.phase == PromptPhase.HELD
            and rec.gave_up is None
            and "taint" not in self.state.deadlines
        ):
            self.state.deadlines["taint"] = self.now + self.config.taint_grace

    def _signal_seen(self, ev: SignalSeen) -> None:
        e = self.state.engine
        if not self.current(ev.generation):
            return
        # An unsealed engine can flood: past SIGNALS_PER_GENERATION the rest are
        # counted, not sent (the journal keeps every line, so replay has them all).
        e.signals += 1
        if e.signals > SIGNALS_PER_GENERATION + 1:
            return
        payload = ev.payload
        if e.signals == SIGNALS_PER_GENERATION + 1:
            payload = SignalsSuppressed(SIGNALS_PER_GENERATION).to_json()
        self._signal(payload)

    def _write_failed(self, ev: WriteFailed) -> None:
        e = self.state.engine
        if ev.unsent and self.current(ev.generation):
            self._unsent(ev)
        if not self.current(ev.generation) or not e.running:
            return
        if not ev.stuck:
            # Its stdin is closed: it can take no command, so it is stopped like
            # an engine that closed its stdout (a crash); its exit settles the held prompt.
            self._stop_engine(requested=False)
            return
        e.recycle = True
        rec = self.held()
        if rec is not None and rec.phase == PromptPhase.CONFIGURING:
            why = "the engine stopped reading its configuration commands"
            self.configuring.compaction_lost(
                rec, f"{why}: the engine is replaced, and the conversation is lost with it"
            )
            self.reject(rec, Reason.CONFIG, why)
        elif rec is not None and rec.request == ev.request and not rec.acked:
            self._give_up(rec, "ack")

    def _unsent(self, ev: WriteFailed) -> None:
        """The held prompt was journaled and given to the session as sent, but not one byte of it
        reached the engine (its stdin closed first: it was dying). It is certainly undelivered:
        the ``unsent`` note tells the session, which decides it ``rejected``/``engine-down``
        (decide's first row) -- and tells replay the same. A prompt of which part went in is
        not unsent: the engine's exit decides it (``delivery-unknown``)."""
        rec = self.held()
        if (
            rec is None
            or rec.request != ev.request
            or rec.phase != PromptPhase.HELD
            or rec.acked
            or rec.gave_up is not None
        ):
            return
        how = f" ({ev.error})" if ev.error else ""
        tail = " | ".join(line for line in ev.stderr if line.strip())
        why = f"never written: the engine's stdin closed before any of the prompt went in{how}" + (
            f"; its last stderr: {tail}" if tail else ""
        )
        self.note(UnsentNote(rec.request, ev.generation, why))
        if self.current(ev.generation):
            self.state.engine.prompted = rec.engine_was_prompted  # none of it went in

    def _not_written(self, ev: NotWritten) -> None:
        s = self.state
        rec = self.held()
        if rec is None or rec.request != ev.request or rec.acked or rec.stop is not None or rec.gave_up is not None:
            return
        s.held = None
        for name in HELD_DEADLINES:
            s.deadlines.pop(name, None)
        rec.phase = PromptPhase.QUEUED
        s.queue.insert(0, rec.request)
        if self.current(ev.generation):
            s.engine.prompted = rec.engine_was_prompted  # none of it went in
        if self.current(ev.generation) and s.engine.running:
            # Not onto this engine again: it is replaced before the prompt is sent.
            s.engine.recycle = True

    def _stdout_closed(self, ev: StdoutClosed) -> None:
        e = self.state.engine
        if self.current(ev.generation) and e.running:
            # An engine that closed its stdout can tell us nothing more.
            self._stop_engine(requested=False)

    def _exited(self, ev: EngineExited) -> None:
        s, e = self.state, self.state.engine
        if not self.current(ev.generation) or e.phase in (EnginePhase.NONE, EnginePhase.BACKOFF):
            return
        requested = e.phase == EnginePhase.STOPPING and e.stop_requested
        if e.in_startup and not requested:
            e.in_startup = False
            said = exit_words(ev.code, ev.signal, ev.stderr, when=" during its start-up check")
            problems = [said] if ev.refusal is None else [ev.refusal, said]
            self.note(SealCheckExitNote(e.generation, e.seal, problems))
            self._signal(SealCheckSignal(problems, self.config.seal_check).to_json())
            if ev.refusal is None:
                self._crash(said)
            else:
                # It said why, and a restart repeats the launch: a refusal (see the package's
                # rules), down now.
                s.setup_failed = True
                self._go_down(ev.refusal)
        elif not requested:
            self._crash(exit_words(ev.code, ev.signal, ev.stderr))
        self.emit(Notify(EngineExitedNotice(e.pid, e.generation, ev.code, ev.signal, requested)))
        s.deadlines.pop("startup", None)
        s.deadlines.pop("close", None)
        s.deadlines.pop("busy", None)
        e.busy = None
        e.phase = EnginePhase.NONE
        e.pid = None
        self.dialogs.end_all(dialogs.BY_ENGINE_EXIT, generation=ev.generation, write=False)
        self.questions.engine_gone()  # its questions are asked again of the next one
        rec = self.held()
        if rec is not None and rec.phase == PromptPhase.CONFIGURING:
            # Never written: it waits for the next engine, a new conversation with nothing to compact.
            self.configuring.compaction_lost(
                rec, "the engine exited before it answered compact: the conversation is lost with it"
            )
            self.requeue(rec)
        elif rec is not None and rec.gave_up is None:
            # The evidence half decides it on the exit; this asks in case it did not.
            self._give_up(rec, "exited")

    def _activity(self, ev: Activity) -> None:
        rec = self.held()
        s = self.state
        if (
            rec is None
            or rec.request != ev.request
            or not self.current(ev.generation)
            or "stall" not in s.deadlines
            or rec.stall is None
        ):
            return
        since = max(ev.at, rec.written or 0.0, rec.resumed or 0.0)
        rec.tool_quiet = ev.pause == math.inf and self.config.tool_timeout is not None
        if rec.tool_quiet:
            # A tool runs: the engine's silence is bounded by the tool bound (issue 42).
            s.deadlines["stall"] = since + (self.config.tool_timeout or 0.0)
        elif ev.pause == math.inf:
            # A tool runs, unbounded: nothing to measure, so look again one stall timeout from now.
            s.deadlines["stall"] = self.now + rec.stall
        else:
            s.deadlines["stall"] = since + ev.pause + rec.stall

    # -- time ----------------------------------------------------------------------

    def _tick(self, ev: Tick) -> None:
        s = self.state
        due = sorted((at, DEADLINES.index(name), name) for name, at in s.deadlines.items() if at <= self.now)
        for _, _, name in due:
            if s.deadlines.pop(name, None) is not None:
                self._deadlines[name]()

    def _deadline_ack(self) -> None:
        rec = self.held()
        if rec is not None and not rec.acked:
            self.state.engine.recycle = True
            self._give_up(rec, "ack")

    def _deadline_settle(self) -> None:
        rec = self.held()
        if rec is None or rec.gave_up is not None:
            return
        if rec.stop is None:
            self.stops.send(rec, StopBy.TIMEOUT, f"the prompt's timeout ({rec.timeout:g} s) passed")
        self.state.deadlines["stop"] = self.now + self.config.stop_grace

    def _deadline_stall(self) -> None:
        rec = self.held()
        if rec is None or rec.gave_up is not None or rec.stop is not None or rec.stall is None:
            return
        if not rec.acked:
            # No ack yet: no run is known to be there to stop, and a prompt without an ack is
            # row 4's (delivery-unknown/no-ack), whichever of its deadlines passes first; a stop
            # sent now went unanswered and ended it settle-timeout (issue 42).
            self._deadline_ack()
            return
        if rec.tool_quiet and self.config.tool_timeout is not None:
            after = self.config.tool_timeout
            why = f"a tool ran for {after:g} s and the engine showed nothing (--tool-timeout)"
        else:
            after, why = rec.stall, f"the run showed nothing for {rec.stall:g} s while it waited on the model"
        self.stops.send(rec, StopBy.STALL, why)
        self._signal(StalledSignal(rec.request, after, rec.stop).to_json())
        self.state.deadlines["stop"] = self.now + self.config.stop_grace

    def _deadline_stop(self) -> None:
        rec = self.held()
        if rec is not None and rec.gave_up is None:
            self.state.engine.recycle = True
            self._give_up(rec, "settle")

    def _deadline_taint(self) -> None:
        rec = self.held()
        if rec is not None and rec.gave_up is None:
            self.state.engine.recycle = True
            self._give_up(rec, "taint")

    def _deadline_close(self) -> None:
        if self.state.engine.running:
            self._stop_engine(requested=True)

    def _deadline_startup(self) -> None:
        if self.state.engine.phase == EnginePhase.CHECKING:
            self._end_check(["the engine did not answer the seal check in time"], answered=False)

    def _deadline_backoff(self) -> None:
        e = self.state.engine
        if e.phase == EnginePhase.BACKOFF:
            e.phase = EnginePhase.NONE
            if self._wants_engine():
                self._spawn()

    def _deadline_drain(self) -> None:
        self._begin_closing("drain-timeout", "the drain bound passed")

    # -- the pump: what follows from the state ---------------------------------------

    def _pump(self) -> None:
        s, e = self.state, self.state.engine
        self.questions.open_ended()
        self.budgets.refuse_unbudgeted()
        if s.closing is not None or s.down is not None:
            why = Reason.CLOSING if s.closing is not None else Reason.ENGINE_DOWN
            while s.queue:
                self.reject(s.prompts[s.queue[0]], why, s.down if why == Reason.ENGINE_DOWN else None)
        if self.questions.waiting and (s.closing is not None or s.down is not None):
            self.questions.answer_all(
                "the bridge is closing" if s.closing is not None else f"the engine is down: {s.down}"
            )
        if e.phase == EnginePhase.READY and self.questions.unwritten:
            self.questions.write()
        if s.draining and s.closing is None and not s.prompts and not self.questions.waiting:
            self._begin_closing("close", "shutdown: every prompt has its receipt")
        if s.held is None:
            if e.running and (s.closing is not None or e.recycle or not e.sealed):
                self._stop_engine(requested=True)
            elif e.phase == EnginePhase.READY and s.queue and e.busy is None:
                self._write_prompt()
            elif e.phase == EnginePhase.NONE and self._wants_engine():
                self._spawn_or_wait()
            elif e.phase == EnginePhase.BACKOFF and s.closing is not None:
                e.phase = EnginePhase.NONE
                s.deadlines.pop("backoff", None)
        if s.draining and s.closing is None and not s.prompts and not self.questions.waiting:
            # The last prompt's receipt can come from the steps above (the engine going down
            # rejects the queue): shutdown is over then too.
            self._begin_closing("close", "shutdown: every prompt has its receipt")
            if e.running and s.held is None:
                self._stop_engine(requested=True)
        self.questions.open_ended()  # (again: the steps above may have gone down or begun closing)
        if s.closing is not None and not s.prompts and e.phase == EnginePhase.NONE and not s.closed:
            s.closed = True
            s.deadlines.clear()
            self.emit(Closed())

    def _wants_engine(self) -> bool:
        s = self.state
        waits = s.queue or self.questions.waiting or s.questions.opening is not None
        return bool(waits) and s.closing is None and s.down is None

    def _spawn_or_wait(self) -> None:
        s, cfg = self.state, self.config
        horizon = self.now - cfg.crash_window
        s.crashes = [c for c in s.crashes if c >= horizon]
        if len(s.crashes) >= cfg.crash_limit:
            self._go_down(f"{len(s.crashes)} engine failures in {cfg.crash_window:g}s; last: {s.last_crash}")
            return
        if s.crashes:
            backoff = cfg.restart_backoff
            wait = backoff[min(len(s.crashes), len(backoff)) - 1] if backoff else 0.0
            if wait > 0:
                s.engine.phase = EnginePhase.BACKOFF
                s.deadlines["backoff"] = self.now + wait
                return
        self._spawn()

    def _spawn(self) -> None:
        e = self.state.engine
        e.generation += 1
        e.new_conversation = e.prompted and self.config.conversation is None
        e.prompted = False
        e.phase = EnginePhase.SPAWNING
        e.pid = None
        e.stop_requested = False
        e.sealed = True
        e.recycle = False
        e.signals = 0
        e.in_startup = False
        e.config = None
        e.configs = 0
        e.busy = None
        self.emit(Spawn(e.generation))

    def _write_prompt(self) -> None:
        """The queue's first prompt takes the slot: configured first if it asks for what the
        engine is not known to have (or a new conversation, or a compaction), else written."""
        s, e = self.state, self.state.engine
        rec = s.prompts[s.queue.pop(0)]
        s.held = rec.request
        satisfied = rec.wanted.empty or (e.config is not None and e.config.satisfies(rec.wanted))
        if satisfied and not rec.fresh and rec.compact is None:
            self.send_prompt(rec)
        else:
            self.configuring.begin(rec)

    def requeue(self, rec: PromptRec) -> None:
        """A prompt holding the slot but never written goes back to the front of the queue."""
        s = self.state
        s.held = None
        for name in HELD_DEADLINES:
            s.deadlines.pop(name, None)
        rec.phase = PromptPhase.QUEUED
        s.queue.insert(0, rec.request)

    def send_prompt(self, rec: PromptRec) -> None:
        s, e = self.state, self.state.engine
        rec.engine_was_prompted, e.prompted = e.prompted, True
        rec.phase = PromptPhase.HELD
        s.held = rec.request
        rec.config = e.config
        if e.config is not None:
            self.note(ConfigNote(rec.request, e.config))
        cmd: dict[str, Any] = {"type": "prompt", "id": rec.request, "message": rec.message}
        if rec.images:
            cmd["images"] = rec.images
        self.emit(
            Write(
                e.generation,
                cmd,
                "prompt",
                request=rec.request,
                stream=rec.stream,
                events=rec.events,
                submitted=rec.submitted,
                traced=rec.traced,
            )
        )
        rec.written = self.now
        s.deadlines["ack"] = self.now + self.config.ack_timeout
        if rec.timeout is not None:
            s.deadlines["settle"] = self.now + rec.timeout
        if rec.stall is not None:
            s.deadlines["stall"] = self.now + rec.stall

    def _stop_engine(self, *, requested: bool) -> None:
        e = self.state.engine
        if requested:
            # Answered before it is stopped: an extension waiting on one may then end cleanly.
            self.dialogs.end_all(dialogs.BY_ENGINE_STOP, generation=e.generation, write=e.running)
        else:
            # It broke (closed its stdout or stdin, died): nothing it waits on can be answered.
            self.dialogs.end_all(dialogs.BY_ENGINE_EXIT, generation=e.generation, write=False)
        e.phase = EnginePhase.STOPPING
        e.stop_requested = requested
        self.state.deadlines.pop("startup", None)
        self.emit(StopEngine(e.generation, requested))

    def _crash(self, why: str) -> None:
        self.state.crashes.append(self.now)
        self.state.last_crash = why

    def _go_down(self, why: str) -> None:
        s = self.state
        s.down = why
        while s.queue:
            self.reject(s.prompts[s.queue[0]], Reason.ENGINE_DOWN, why)
        if self.questions.waiting:
            self.questions.answer_all(f"the engine is down: {why}")
        self._signal(EngineDownSignal(why).to_json())
        self.emit(Notify(EngineDownNotice(why)))

    # -- stops and closing ---------------------------------------------------------

    def _begin_closing(self, why: str, detail: str | None) -> None:
        s = self.state
        if s.closing is not None:
            return
        s.closing = why
        self.note(ClosingNote(why, detail))
        self.dialogs.end_all(dialogs.BY_CLOSING, write=s.engine.running)
        if self.questions.waiting:
            self.questions.answer_all("the bridge is closing")
        for name in ("drain", "backoff"):
            s.deadlines.pop(name, None)
        rec = self.held()
        if rec is not None and rec.phase == PromptPhase.CONFIGURING:
            self.reject(rec, Reason.CLOSING)  # never written
        elif rec is not None and rec.gave_up is None:
            if rec.stop is None:
                if why == "drain-timeout":
                    self.stops.send(rec, StopBy.TIMEOUT, "the drain bound (--drain-timeout) passed")
                else:
                    self.stops.send(rec, StopBy.CLOSING, f"the bridge is closing ({detail or why})")
            s.deadlines["close"] = self.now + self.config.close_grace

    # -- receipts ----------------------------------------------------------------------

    def held(self) -> PromptRec | None:
        held = self.state.held
        return self.state.prompts.get(held) if held is not None else None

    def _give_up(self, rec: PromptRec, why: GiveUpWhy) -> None:
        if rec.gave_up is None:
            rec.gave_up = why
            self.emit(GiveUp(rec.request, why))

    def reject(self, rec: PromptRec, reason: Reason, native_error: str | None = None) -> None:
        """A prompt never written gets its receipt here (decide's first row)."""
        state, why = decide(Facts(unsent=reason))
        if rec.phase == PromptPhase.QUEUED and rec.request in self.state.queue:
            self.state.queue.remove(rec.request)
        receipt = Receipt(
            request=rec.request,
            state=state,
            reason=why,
            native_error=native_error,
            times=Times(submitted=rec.submitted, settled=self.now),
        )
        self._deliver(rec, receipt)

    def _deliver(self, rec: PromptRec, receipt: Receipt) -> None:
        s = self.state
        # Only a written prompt has a slot in the evidence half to release.
        release = rec.phase == PromptPhase.HELD
        if rec.phase in (PromptPhase.HELD, PromptPhase.CONFIGURING) and s.held == rec.request:
            s.held = None
            for name in HELD_DEADLINES:
                s.deadlines.pop(name, None)
        del s.prompts[rec.request]
        if s.dialogs.open:
            self.dialogs.end_all(dialogs.BY_RECEIPT, request=rec.request)
        s.recent[rec.request] = receipt
        if len(s.recent) > RECENT_IDS:
            del s.recent[next(iter(s.recent))]
        s.receipts += 1
        self.emit(Deliver(receipt, release))

    def note(self, record: LifeNote) -> None:
        """A journal note (:mod:`~bridge.core.lifecycle.notes`), made its JSON here, once."""
        self.emit(Note(record.to_json()))

    def _signal(self, payload: dict[str, Any]) -> None:
        """A signal, stamped with the generation it is about (the current one)."""
        self.emit(Signal({**payload, "generation": self.state.engine.generation}))


def step(
    state: LifeState, event: Input, now: float, config: BridgeConfig | None = None
) -> tuple[LifeState, list[Action]]:
    """The pure form: a new state and the actions; ``state`` is left as it was."""
    machine = Lifecycle(config, copy.deepcopy(state))
    actions = machine.step(event, now)
    return machine.state, actions
