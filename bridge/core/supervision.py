"""The supervision: one sans-IO object that *is* a supervised engine.

A :class:`Supervision` owns the bridge's two pure halves and is the only thing the trio layer
talks to (the style of h11's ``Connection``: bytes and time in, events out):

- :class:`~bridge.core.lifecycle.Lifecycle` -- the queue, the slot, deadlines, stops,
  closing, engine restarts;
- :class:`~bridge.core.session.Session` -- the evidence: observation indices, the tracker,
  and each prompt's receipt decided from the engine's lines (SPEC §4, §5).

Its doors take what the world did, with the time (seconds since the bridge started), and
return the :data:`Action` list to carry out, in order:

===============================  ===================================================
the world ...                    door
===============================  ===================================================
the controller asks something    :meth:`feed` (a :data:`Request`: ``Submit``, ``Stop``, ...)
an engine was launched           :meth:`spawned`
an engine could not be launched  :meth:`spawn_failed`
an engine wrote lines            :meth:`lines` (one read's lines at a time)
an engine wrote to stderr        :meth:`stderr`
an engine closed its stdout      :meth:`stdout_closed`
a write to an engine failed      :meth:`write_failed`
a recorded write was not made    :meth:`not_written` (the journal failed between the two)
an engine exited                 :meth:`exited`
the key endpoint forwarded       :meth:`model_called` (a model call, with its usage)
a deadline passed                :meth:`tick` (sleep until :meth:`next_deadline`)
the journal failed               :meth:`journal_failed`
a command is written by hand     :meth:`sent_raw` (``send_raw``: unsealing on purpose)
the bridge gives up waiting      :meth:`force_close` (the close backstop)
===============================  ===================================================

Everything that decides lives here, not in the trio layer:

- **One step at a time.** An input that a step causes (a receipt the session decides, an
  ack, a signal, the answer to a command) waits its turn in :attr:`_inputs`: steps never
  nest, and the order of their actions is the order of their inputs.
- **Give-ups.** The lifecycle's :class:`~bridge.core.lifecycle.GiveUp` is answered by the
  session at once (its receipt comes back as a decision): no round trip through the world.
- **Our own commands' answers.** The responses to the start-up (seal) check, to a prompt's
  configuration commands and to the controller's questions are matched here, by id, before
  the engine's other lines reach the lifecycle.
- **What is written is recorded first.** A :class:`~bridge.core.lifecycle.Write` is fed to the
  session and journaled (:class:`RecordSend`) when the lifecycle decides it, before the
  trio layer queues its bytes: every line the engine writes in answer is read after it, and
  the journal's order is the order things happened in.
- **The slot is released in the step that settles it** (with the receipt): nothing the
  engine writes after the settle is read while the slot is held.
- **Extension dialogs.** An allowed extension's dialog goes to the lifecycle to be asked
  (when someone answers dialogs: :attr:`listening`) or cancelled; a notification goes to the
  controller; any UI request of an extension that was not allowed is a seal diagnostic.
- **The stall deadline** is measured from the engine's last line of its own (answers to our
  questions say nothing of the run), brought up to date only when a deadline is due.

Its vocabulary is declared once (:mod:`bridge.core.doors`) and exported here, for every layer
above it: the :data:`Request` a
controller makes (:meth:`feed`), every :data:`Action` a door returns, and what the doors may
read of it, a frozen :class:`View` (:meth:`view`; h11's ``Connection`` shows ``our_state``
and ``their_state`` the same way) with :meth:`knows`, :meth:`receipt` and :meth:`collected`.
The layers above import the core only through this module and the vocabulary modules
(:mod:`bridge.core.config`, :mod:`bridge.core.receipts`, :mod:`bridge.core.words`, ...:
tests/test_layers.py), never the lifecycle or the session themselves.

It has no clock, no trio and no I/O: journal entries are actions (``Record*``) like the
rest, and the journal's own failure comes back in as :meth:`journal_failed`. Replay drives
the :class:`~bridge.core.session.Session` alone from a journal and gets the same receipts,
because the session saw exactly what the journal holds, in that order.
"""

from __future__ import annotations

import collections
import math
from collections.abc import Callable, Sequence
from typing import Any

from bridge.core.config import BridgeConfig
from bridge.core.dialogs import DIALOG_METHODS, UI_METHODS
from bridge.core.doors import (
    _REQUESTS,
    Action,
    Collected,
    LaunchFacts,
    Progress,
    Record,
    RecordExit,
    RecordNote,
    RecordRaw,
    RecordReceipt,
    RecordRecv,
    RecordRelease,
    RecordSend,
    RecordSignal,
    RecordStderr,
    RecordUpdates,
    Request,
    Tell,
    Text,
    View,
)
from bridge.core.events import Acked as SessionAcked
from bridge.core.events import (
    CompactionSpent,
    Diagnostic,
    DispositionSignal,
    Event,
    GapOpened,
    ReceiptReady,
    Retrying,
    SealBroken,
    SecondPrompt,
    Skipped,
    StopUnheard,
    Streamed,
    TextDelta,
)
from bridge.core.framing import MESSAGE_UPDATE, Oversize, RawLine, UpdateRun
from bridge.core.lifecycle import (
    Acked,
    Activity,
    Answer,
    AnswerDialog,
    Answered,
    Ask,
    AskDialog,
    Close,
    Closed,
    Compact,
    Configure,
    Configured,
    Decided,
    Deliver,
    DialogEnded,
    DialogOpened,
    DialogReply,
    EngineExited,
    GiveUp,
    Input,
    JournalFailed,
    Lifecycle,
    ModelCalled,
    NewConversation,
    NobodyAnswers,
    Note,
    Notify,
    NotWritten,
    Open,
    Shutdown,
    Signal,
    SignalSeen,
    Spawn,
    Spawned,
    SpawnFailed,
    Spent,
    StartupChecked,
    StdoutClosed,
    Stop,
    StopAnswer,
    StopEngine,
    StopMissed,
    Submit,
    Tick,
    Unsealed,
    Write,
    WriteFailed,
)
from bridge.core.notices import JournalFailedSignal
from bridge.core.progress import DELTA_TYPES, PROGRESS_TYPES, UsageEvent, join_deltas
from bridge.core.receipts import Receipt, Usage
from bridge.core.session import Session
from bridge.core.stderr import StderrBudget
from bridge.core.steering import from_state
from bridge.core.tracker import Overlap

__all__ = [
    "Action",
    "Answer",
    "AnswerDialog",
    "Ask",
    "AskDialog",
    "Close",
    "Closed",
    "Collected",
    "Compact",
    "Configure",
    "Deliver",
    "DialogEnded",
    "DialogReply",
    "LaunchFacts",
    "NewConversation",
    "NobodyAnswers",
    "Notify",
    "Open",
    "Progress",
    "Record",
    "RecordExit",
    "RecordNote",
    "RecordRaw",
    "RecordReceipt",
    "RecordRecv",
    "RecordRelease",
    "RecordSend",
    "RecordSignal",
    "RecordStderr",
    "RecordUpdates",
    "Request",
    "Shutdown",
    "Spawn",
    "Stop",
    "StopAnswer",
    "StopEngine",
    "Submit",
    "Supervision",
    "Tell",
    "Text",
    "View",
    "Write",
]

# --------------------------------------------------------------------------
# The supervision


class Supervision:
    """One supervised engine at a time, for one controller.

    ``journal``: whether a journal is kept (the ``Record*`` actions are left out without one);
    ``listening``: asked when an allowed extension opens a dialog -- is anyone there to answer
    it (the controller, or an open dialogs channel)? ``collect`` keeps the tracker's outputs
    (as replay does)."""

    def __init__(
        self,
        config: BridgeConfig,
        clearing: Sequence[str] = (),
        *,
        dialogs: bool = False,
        journal: bool = True,
        listening: Callable[[], bool] = lambda: False,
        collect: bool = False,
    ) -> None:
        self.config = config
        self.lifecycle = Lifecycle(config)
        self.session = Session(tuple(clearing), collect=collect, skip_updates=not config.journal_full, dialogs=dialogs)
        self.listening = listening
        self._journal = journal
        #: Each engine generation's stderr budget in the journal, until its exit.
        self._stderr: dict[int, StderrBudget] = {}
        self._lean = journal and not config.journal_full
        self._journal_broken = False
        self._inputs: collections.deque[Input] = collections.deque()
        self._stepping = False
        self._out: list[Action] = []
        self._now = 0.0
        #: The engine whose lines count (a stopped one's late lines are ignored), and the
        #: launch of each engine not yet exited.
        self._current: int | None = None
        self._launches: dict[int, LaunchFacts] = {}
        #: When the current engine's last line of its own was read (the stall counts from it).
        self._last_seen: float | None = None
        #: The held prompt and whether a tool of its ran, as last told to the lifecycle.
        self._tool_told: tuple[str, bool] | None = None
        #: Our own commands awaiting their answers: the start-up check's, a prompt's
        #: configuration's (for ``_config_for``), the controller's questions'.
        self._startup_waiting: dict[str, dict[str, Any] | None] = {}
        self._config_waiting: dict[str, dict[str, Any] | None] = {}
        self._config_for: tuple[int, str] | None = None
        self._asked: set[str] = set()
        #: Steps of the lifecycle so far: a door that made none changed no deadline, no queue
        #: and no count (the trio layer wakes its clock and its waiters only after one that did).
        self.steps = 0
        #: The last :meth:`view`, and the step it was taken after (only a step changes it).
        self._view: tuple[int, View] | None = None

    # -- queries ----------------------------------------------------------------------------

    def next_deadline(self) -> float | None:
        """When :meth:`tick` is next due (seconds since start), or None: no deadline is set."""
        return self.lifecycle.next_deadline()

    @property
    def generation(self) -> int:
        return self.lifecycle.state.engine.generation

    def view(self) -> View:
        """What the doors may read of this supervision, as of its last step (the same record
        until the next step: nothing else changes it)."""
        cached = self._view
        if cached is not None and cached[0] == self.steps:
            return cached[1]
        st = self.lifecycle.state
        engine = st.engine
        held = st.prompts.get(st.held) if st.held is not None else None
        view = View(
            generation=engine.generation,
            engine_phase=engine.phase,
            sealed=engine.sealed,
            engine_config=engine.config,
            held=st.held,
            held_stop_by=held.stop_by if held is not None else None,
            queued=tuple(st.queue),
            outstanding=self.lifecycle.outstanding,
            receipts=st.receipts,
            down=st.down,
            setup_failed=st.setup_failed,
            opening=st.questions.opening is not None,
            draining=st.draining,
            closing=st.closing,
            closed=st.closed,
            wanted=st.configuring.wanted,
            spent=st.budgets.spent,
        )
        self._view = (self.steps, view)
        return view

    def knows(self, request: str) -> bool:
        """True if ``request`` is outstanding or among the last ``RECENT_IDS`` settled."""
        return self.lifecycle.knows(request)

    def receipt(self, request: str) -> Receipt | None:
        """``request``'s receipt if it is among the last ``RECENT_IDS`` settled, else None."""
        return self.lifecycle.state.recent.get(request)

    def collected(self) -> Collected:
        """The tracker's outputs so far (empty unless made with ``collect=True``)."""
        session = self.session
        return Collected(tuple(session.overlaps), tuple(session.working), tuple(session.settled))

    def model_gate(self) -> str | None:
        """The prompt the key endpoint may forward model calls for now (None: it refuses them):
        the held prompt, written and not stopped (:mod:`bridge.core.lifecycle.budgets`)."""
        return self.lifecycle.model_gate()

    @property
    def stderr_tail(self) -> list[str]:
        """The current engine's last stderr lines."""
        return list(self.session.stderr_tail)

    # -- doors ------------------------------------------------------------------------------

    def feed(self, request: Request, now: float) -> list[Action]:
        """A controller's request (:data:`Request`), taken by the lifecycle as it is. Raises
        TypeError for anything else: what the world does has a door of its own."""
        if type(request) not in _REQUESTS:
            raise TypeError(f"feed takes a controller's request, not {type(request).__name__}")
        return self._run(now, request)

    def spawn_failed(self, generation: int, why: str, now: float) -> list[Action]:
        """Engine ``generation`` could not be prepared or launched (``why``: the words for it)."""
        return self._run(now, SpawnFailed(generation, why))

    def stdout_closed(self, generation: int, now: float) -> list[Action]:
        """Engine ``generation`` closed its stdout: it can take nothing more (its exit follows)."""
        return self._run(now, StdoutClosed(generation))

    def not_written(self, generation: int, request: str, now: float) -> list[Action]:
        """A :class:`~bridge.core.lifecycle.Write` of ``request``'s (a prompt or its
        configuration) was recorded and then not carried out: its engine was gone, or the
        journal failed between the two. The session lets go of it as the lifecycle takes it back."""
        held = self.session.held
        if held is not None and held.request == request and held.ack_idx is None:
            self.session.release(request, t=now)
        return self._run(now, NotWritten(generation, request))

    def spawned(self, generation: int, pid: int | None, launch: LaunchFacts, now: float) -> list[Action]:
        """Engine ``generation`` runs as ``pid``; its start-up commands are written next."""
        self._current = generation
        self._launches[generation] = launch
        self._startup_waiting = {cmd["id"]: None for cmd in launch.startup}
        spawned = Spawned(
            generation,
            pid,
            list(launch.argv),
            [dict(c) for c in launch.startup],
            list(launch.clearing),
            launch.header.get("seal"),
        )
        return self._run(now, spawned)

    def lines(self, generation: int, lines: Sequence[bytes | Oversize | UpdateRun], now: float) -> list[Action]:
        """One read of engine ``generation``'s stdout, in order (a stopped engine's late lines are
        ignored). The session observes them (its fast path takes runs of ``message_update``
        lines nobody streams in bulk); each is journaled, and what each caused is stepped
        before the next line is observed."""
        if generation != self._current:
            return []
        return self._run(now, None, lambda: self._observe(lines, now))

    def stderr(self, generation: int, text: str, now: float) -> list[Action]:
        """A line engine ``generation`` wrote to stderr: kept for its receipts, and journaled
        within the generation's budget (:mod:`bridge.core.stderr`)."""
        if generation == self._current:
            self.session.stderr(text)
        if not self._journal:
            return []
        budget = self._stderr.get(generation)
        if budget is None:
            budget = self._stderr[generation] = StderrBudget(self.config.stderr_journal_max)
        return [RecordStderr(text, now)] if budget.take(text, now) else []

    def write_failed(
        self,
        generation: int,
        request: str | None,
        *,
        stuck: bool = False,
        unsent: bool = False,
        error: str | None = None,
        now: float,
    ) -> list[Action]:
        """A write to engine ``generation`` did not complete (``stuck``: it stopped reading;
        ``unsent``: it was ``request``'s prompt and not one byte of it went in)."""
        return self._run(now, WriteFailed(generation, request, stuck, unsent, error, self.stderr_tail))

    def exited(
        self, generation: int, code: int | None, signal: int | None, unsent: Sequence[str], now: float
    ) -> list[Action]:
        """Engine ``generation`` exited; ``unsent`` are the prompts none of whose bytes reached its
        pipe (still queued for its writer, or being written with nothing taken yet)."""
        return self._run(now, None, lambda: self._exited(generation, code, signal, unsent, now))

    def model_called(self, generation: int, request: str | None, usage: Usage | None, now: float) -> list[Action]:
        """Engine ``generation``'s key endpoint forwarded a model call while ``request`` held the
        gate (:meth:`model_gate`); ``usage``: what the provider's answer said it cost."""
        return self._run(now, ModelCalled(generation, request, usage))

    def tick(self, now: float) -> list[Action]:
        """The next deadline passed (or time jumped): every deadline at or before ``now`` fires."""
        return self._run(now, None, lambda: self._tick(now))

    def journal_failed(self, why: str, now: float) -> list[Action]:
        """The journal could not be written. Nothing more is written to the engine from here
        (closing begins: no prompt is written that the journal cannot hold)."""
        self._journal_broken = True
        if self.lifecycle.state.closed:
            # Its last flush, after the lifecycle closed: the controller is still told.
            return [Tell({"type": "signal", **JournalFailedSignal(why).to_json(), "generation": self.generation})]
        return self._run(now, JournalFailed(why))

    def sent_raw(self, cmd: dict[str, Any], now: float) -> list[Action]:
        """The trio layer is writing ``cmd`` by hand (``send_raw``, outside the slot rules:
        unsealing on purpose); the session sees it as the engine will."""
        return self._run(now, None, lambda: self._record_send(cmd, now))

    def force_close(self, alive: int | None, now: float) -> list[Action]:
        """The close backstop: the lifecycle did not close in time. Engine ``alive`` (if any)
        was abandoned; every outstanding prompt is given its receipt now, from the evidence
        there is. Returns Deliver actions (not journaled: the journal may be what is stuck)."""
        out: list[Action] = []
        if alive is not None:
            out += self._run(now, EngineExited(alive, None, None, self.stderr_tail))
        out += self._run(now, Tick())
        for request in list(self.lifecycle.state.prompts):
            for event in self.session.give_up(request, "exited", t=now):
                if type(event) is ReceiptReady:
                    out.append(Deliver(event.receipt))
        return out

    # -- stepping ---------------------------------------------------------------------------

    def _run(self, now: float, event: Input | None, first: Callable[[], None] | None = None) -> list[Action]:
        """Do ``first`` (observing what the world did), then step the lifecycle with ``event``
        and every input that follows from it, one at a time; return the actions. A door called
        while a step runs (never, from the trio layer) only queues its input."""
        if event is not None:
            self._inputs.append(event)
        if self._stepping:
            return []
        self._stepping = True
        self._now = now
        out = self._out = []
        try:
            if first is not None:
                first()
            self._drain()
        finally:
            self._stepping = False
            self._out = []
        return out

    def _drain(self) -> None:
        inputs = self._inputs
        while inputs:
            self.steps += 1
            for action in self.lifecycle.step(inputs.popleft(), self._now):
                self._carry(action)

    def _queue(self, event: Input) -> None:
        self._inputs.append(event)

    def _carry(self, action: Any) -> None:
        """One lifecycle action: what the evidence half answers is done here; the rest goes out."""
        kind = type(action)
        now = self._now
        out = self._out
        if kind is Write:
            self._write(action)
        elif kind is Deliver:
            receipt = action.receipt
            if self._journal:
                out.append(RecordReceipt(receipt, now))
            if action.release:
                # Released in the same step the receipt is settled: nothing the
                # engine writes after the settle is read while the slot is held.
                self.session.release(receipt.request, t=now)
                if self._journal:
                    out.append(RecordRelease(receipt.request, now))
            out.append(action)
        elif kind is GiveUp:
            for event in self.session.give_up(action.request, action.why, t=now):
                if type(event) is ReceiptReady:
                    self._queue(Decided(event.receipt))
        elif kind is Note:
            if self._journal:
                out.append(RecordNote(action.payload, now))
            self._handle(self.session.note(action.payload, t=now))  # an ``unsent`` note decides a receipt
        elif kind is Signal:
            note = {"type": "signal", **action.payload}
            note.setdefault("generation", self.generation)
            if self._journal:
                out.append(RecordSignal({k: v for k, v in note.items() if k != "type"}, now))
            out.append(Tell(note))
        elif kind is StopEngine:
            if action.generation == self._current and action.generation in self._launches:
                out.append(action)
        else:
            out.append(action)

    def _write(self, action: Write) -> None:
        """A command the lifecycle writes: recorded (journal, session) now, its bytes queued by
        the trio layer. Not written at all once the journal failed: a prompt goes back to the
        lifecycle unwritten (closing is about to begin), a start-up command is dropped."""
        if action.generation != self._current or action.generation not in self._launches:
            # No engine to take it (its exit is on the way).
            if action.kind in ("prompt", "config") and action.request is not None:
                self._queue(NotWritten(action.generation, action.request))
            return
        if self._journal_broken and action.kind in ("prompt", "startup"):
            if action.kind == "prompt" and action.request is not None:
                self._queue(NotWritten(action.generation, action.request))
            return
        cmd = action.cmd
        if action.kind == "ask":
            self._asked.add(cmd["id"])
        elif action.kind == "config" and action.request is not None:
            if self._config_for != (action.generation, action.request):
                self._config_for = (action.generation, action.request)
                self._config_waiting = {}
            self._config_waiting[cmd["id"]] = None
        self._record_send(cmd, self._now, stream=action.stream, events=action.events, traced=action.traced)
        if action.kind == "prompt" and action.submitted is not None:
            state = self.session.prompt(action.request)
            if state is not None:
                state.times["submitted"] = action.submitted
        self._out.append(action)

    def _record_send(
        self, cmd: dict[str, Any], now: float, *, stream: bool = False, events: bool = False, traced: bool = False
    ) -> None:
        """Journal a command and feed it to the session, before it is written."""
        if self._journal:
            self._out.append(RecordSend(cmd, now))
        seen = self.session.send(cmd, t=now, stream=stream, events=events, traced=traced)
        if seen:
            self._handle(seen)

    # -- the engine's lines -----------------------------------------------------------------

    def _observe(self, lines: Sequence[bytes | Oversize | UpdateRun], t: float) -> None:
        shown = False  # a line of the engine's own (not an answer to a command of ours)
        journal, lean, out = self._journal, self._lean, self._out
        # message_update lines a lean journal keeps no text of, parsed (streamed) or not: one
        # ``updates`` entry for each run of them (first index, count, bytes), written before
        # any other entry and before any event is handled, so the journal's order is the read's.
        run = _ElidedRun(self, t)
        deltas: list[Any] = []  # a prompt's text / thinking deltas of this read, joined when handed on
        for seen in self.session.observe_batch(lines, t=t):
            if isinstance(seen, (Skipped, Streamed)):
                shown = True
                if journal:
                    run.add(seen.first, len(seen.lines), seen.nbytes)
                if isinstance(seen, Skipped) or not seen.events:
                    continue
                handed: Sequence[Sequence[Event]] = [(event,) for event in seen.events]  # each as if its line's
            else:
                parsed = seen.parsed
                if not shown and (type(parsed) is not dict or parsed.get("type") != "response"):
                    shown = True
                if journal:
                    if type(parsed) is RawLine:
                        run.flush()
                        out.append(RecordRaw(seen.idx, parsed, t))
                    elif lean and seen.line.startswith(MESSAGE_UPDATE):  # type: ignore[union-attr]  # bytes
                        run.add(seen.idx, 1, len(seen.line))  # type: ignore[arg-type]  # bytes
                    else:
                        run.flush()
                        out.append(RecordRecv(seen.idx, seen.line, parsed, t))  # type: ignore[arg-type]  # bytes
                waiting = self._startup_waiting or self._config_waiting or self._asked
                if waiting and type(parsed) is dict and parsed.get("type") == "response":
                    run.flush()
                    self._answer(parsed)
                    self._drain()
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
                self._drain()
        run.flush()
        if deltas:
            self._handle((join_deltas(deltas),))
        if shown:
            # The stall timeout counts from the engine's own lines: answers to the bridge's
            # questions (a controller asking for the models) say nothing of the run.
            self._last_seen = t
            self._tool_moved(t)

    def _tool_moved(self, t: float) -> None:
        """A tool of the held prompt started or ended in this read: the lifecycle learns it now,
        not at the stall deadline's next tick, since the tool bound (``tool_timeout``) may be
        nearer than the deadline armed (issue 42: a 1 s tool bound fired at the 300 s stall).
        One dictionary look-up a read."""
        state = self.lifecycle.state
        held = state.held
        if held is None or "stall" not in state.deadlines or self.config.tool_timeout is None:
            return
        pause = self.session.stall_pause(held)
        told = (held, pause == math.inf)
        if told != self._tool_told:
            self._tool_told = told
            self._queue(Activity(self.generation, held, t, pause))
            self._drain()

    def _handle(self, events: Sequence[Event]) -> None:
        """The session's events: receipts and signals become the lifecycle's inputs, text and
        progress go out to whoever reads them."""
        generation = self.generation
        out = self._out
        for event in events:
            kind = type(event)
            if kind is ReceiptReady:
                self._queue(Decided(event.receipt))  # type: ignore[union-attr]
            elif kind is TextDelta:
                out.append(Text(event.request, event.text))  # type: ignore[union-attr]
            elif kind is SessionAcked:
                self._queue(Acked(generation, event.request))  # type: ignore[union-attr, arg-type]
            elif kind is SealBroken:
                self._queue(SignalSeen(generation, event.to_json()))  # type: ignore[union-attr]
                self._queue(Unsealed(generation, event.cause))  # type: ignore[union-attr]
            elif kind is Overlap or kind is GapOpened or kind is DispositionSignal or kind is SecondPrompt:
                self._queue(SignalSeen(generation, event.to_json()))  # type: ignore[union-attr]
            elif kind is Retrying:
                out.append(Tell(event.to_json()))  # type: ignore[union-attr]
            elif kind is StopUnheard:
                self._queue(StopMissed(generation, event.request))  # type: ignore[union-attr, arg-type]
            elif kind is CompactionSpent:
                self._queue(Spent(generation, event.request, event.usage))  # type: ignore[union-attr]
            elif kind is UsageEvent:
                self._queue(Spent(generation, event.request, event.usage))  # type: ignore[union-attr]
                held = self.session.held
                if held is not None and held.request == event.request and (held.events or held.traced):  # type: ignore[union-attr]
                    out.append(Progress(event.request, event))  # type: ignore[union-attr, arg-type]
            elif kind in PROGRESS_TYPES:
                out.append(Progress(event.request, event))  # type: ignore[union-attr, arg-type]
            elif kind is Diagnostic:
                self._extension_ui(event, generation)  # type: ignore[arg-type]

    def _extension_ui(self, event: Diagnostic, generation: int) -> None:
        """An extension's UI request or error. With its extensions allowed, a dialog goes to
        the lifecycle to be asked and a notification to the controller (``ui``); otherwise it
        is a seal diagnostic, and a dialog is answered ``cancelled`` at once."""
        launch = self._launches.get(self._current) if self._current is not None else None
        allowed = event.kind == "extension-ui" and launch is not None and launch.dialogs
        method, engine_id = event.detail.get("method"), event.detail.get("id")
        if allowed and method in UI_METHODS:
            self._out.append(
                Tell({"type": "ui", "method": method, "id": self.lifecycle.state.held, **(event.ui or {})})
            )
            return
        if not allowed:
            self._queue(SignalSeen(generation, event.to_json()))
        if event.answer is not None and method in DIALOG_METHODS:
            listened = bool(allowed and self.listening())
            self._queue(DialogOpened(generation, engine_id, method, event.ui or {}, listened, bool(allowed)))

    def _answer(self, response: dict[str, Any]) -> None:
        """A response to one of our own commands: the start-up check's and a configuration's
        are gathered until all are in; a question's goes back to whoever asked."""
        rid = response.get("id")
        if not isinstance(rid, str) or self._current is None:
            return
        generation = self._current
        if rid in self._asked:
            self._asked.discard(rid)
            self._queue(Answered(generation, rid, response))
            return
        if rid in self._config_waiting and self._config_for is not None:
            self._config_waiting[rid] = response
            if all(v is not None for v in self._config_waiting.values()):
                answers = {k: v for k, v in self._config_waiting.items() if v is not None}
                (for_generation, request), self._config_for = self._config_for, None
                self._config_waiting = {}
                self._queue(Configured(for_generation, request, answers))
            return
        if rid not in self._startup_waiting:
            return
        self._startup_waiting[rid] = response
        if all(v is not None for v in self._startup_waiting.values()):
            answers = {k: v for k, v in self._startup_waiting.items() if v is not None}
            self._startup_waiting = {}
            launch = self._launches.get(generation)
            problems = launch.check(answers) if launch is not None and launch.check is not None else []
            if launch is not None and launch.confinement is not None and self._journal:
                note = {"event": "confinement", "generation": generation, **launch.confinement()}
                self._out.append(RecordNote(note, self._now))
            state = answers.get("seal-state")
            config = from_state(state.get("data")) if state is not None and state.get("success") else None
            self._queue(StartupChecked(generation, problems, config))

    # -- exits and time ---------------------------------------------------------------------

    def _exited(self, generation: int, code: int | None, signal: int | None, unsent: Sequence[str], t: float) -> None:
        # First the lifecycle learns the engine can take nothing more (its stdout
        # may still be held open by a grandchild), so the receipt decided below
        # does not let the next prompt be written to a dead engine.
        self._queue(StdoutClosed(generation))
        self._drain()
        # A prompt none of which reached the pipe before the exit was never read: said before
        # the exit decides the held prompt (rejected, not delivery-unknown).
        for request in unsent:
            self._queue(WriteFailed(generation, request, False, True, "the engine had exited", self.stderr_tail))
            self._drain()
        # Journaled here, after those notes: replay applies entries in order, and the session
        # took the notes before the exit (else replay settles delivery-unknown where we said
        # rejected: found by tools/soak/soak).
        if self._journal:
            budget = self._stderr.pop(generation, None)
            note, held = budget.flush(generation) if budget is not None else (None, [])
            self._out += [RecordNote(note, t)] if note is not None else []
            self._out += [RecordStderr(text, t) for text in held]
            self._out.append(RecordExit(code, signal, t))
        current = generation == self._current
        if current:
            self._handle(self.session.engine_exited(code, signal, t=t))
            self._drain()
        tail = self.stderr_tail
        launch = self._launches.pop(generation, None)
        refusal = launch.refusal(tail) if launch is not None and launch.refusal is not None else None
        self._queue(EngineExited(generation, code, signal, tail, refusal))

    def _tick(self, now: float) -> None:
        """Before a Tick: the lifecycle learns when the held prompt's run last showed anything
        (the engine's last line of its own), so its stall deadline is measured from there.
        Costs one step per deadline, not one per line."""
        state = self.lifecycle.state
        held = state.held
        if held is not None and "stall" in state.deadlines and self._last_seen is not None:
            self._queue(Activity(self.generation, held, self._last_seen, self.session.stall_pause(held)))
            self._drain()
        self._queue(Tick())


class _ElidedRun:
    """Consecutive ``message_update`` lines of one read, journaled as one ``updates`` entry
    when the next entry is written (:meth:`flush`)."""

    __slots__ = ("count", "first", "nbytes", "supervision", "t")

    def __init__(self, supervision: Supervision, t: float) -> None:
        self.supervision = supervision
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
        if self.count:
            self.supervision._out.append(RecordUpdates(self.first, self.count, self.nbytes, self.t))
        self.count = self.nbytes = 0
