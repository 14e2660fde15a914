"""Run tracking, overlap signals and slot settlement: the sans-IO tracker.

This is a port of the reference tracker (seed ``003``, ``turns.mjs``) to Python.
The rules, the signal names and every ``why`` / ``cause`` string are the seed's;
the shape is Python's: instead of callbacks, each feeding method returns the
outputs it caused (:class:`Overlap`, :class:`Working`, :class:`Settled`), in
order, and the whole state is a plain attrs tree that cattrs can checkpoint.

The model, in the seed's words:

- Pinned Pi ties no event to a prompt. Under the seal the prompt in the slot is
  the only thing that can start a run, so a run that follows the slot's ack is
  attributed to it by order. The tracker watches for signs that the seal failed
  (O1-O6) and for an ``aborted`` with no stop in progress
  (``aborted-without-stop``), and settles the slot only on evidence tied to its
  own prompt.
- A *run* is one prompt's run, from its first ``agent_start`` to its
  ``agent_settled``. Automatic retries and overflow compaction add further
  ``agent_start`` ... ``agent_end`` pairs inside it; ``agent_end`` is never
  final, only ``agent_settled`` is.
- Every line read from the engine has an observation index (1, 2, 3, ...), so
  "before the ack" and "after the slot's run" are integer comparisons. The
  caller assigns the index (:meth:`Tracker.read`) and passes it with each event.

The signals:

====================  ==========================================================
O1                    a run started while no slot was held, before the slot's
                      ack, or after the slot already had its run
O2                    an ``agent_settled`` that settles nothing of ours: no slot,
                      before the ack, a second settle for one ack, a run that is
                      not the slot's, or the slot's run after the slot moved on
O3                    ``agent_settled`` while the current run still has an
                      ``agent_start`` without its ``agent_end``
O4                    a settle after the ack with no ``agent_start`` and no
                      failure message
O5                    a ``queue_update`` (anything queued means someone else is
                      talking to the engine); an empty one inside a clear window
                      is caused by our own ``clear_queue`` and is not a signal
O6                    a second user message inside one run
aborted-without-stop  an assistant message ``aborted`` while no stop of ours is
                      linked (only the controller's abort produces ``aborted``)
====================  ==========================================================

Invariants (tested in ``tests/test_tracker.py``): at most one settlement per
slot; no settlement once any overlap or gap has been seen; no exception for any
sequence of events; the same inputs always give the same outputs.
"""

from __future__ import annotations

from typing import Any

import attrs

from bridge.core.wire import Wire, form
from bridge.core.words import Cause, Reason, Signal, State, Why

#: Stop reasons that mean the model finished its answer (seed ``DONE_STOPS``).
DONE_STOPS = frozenset({"stop", "length", "toolUse"})

#: ``lastError`` keeps at most this many characters (SPEC §4).
LAST_ERROR_MAX = 2000

# --------------------------------------------------------------------------
# Outputs


@form(flatten="detail")
@attrs.frozen
class Overlap(Wire):
    """An overlap signal. ``detail`` keeps the seed's keys in the seed's order."""

    signal: Signal
    idx: int
    request: str | None
    detail: dict[str, Any] = attrs.field(factory=dict)


@form()
@attrs.frozen
class Working(Wire):
    """The slot's own run delivered the slot's user message: the model has it."""

    request: str | None
    idx: int


@form(rename={"native_error": "nativeError"})
@attrs.frozen
class Settled(Wire):
    """The slot settled on evidence tied to its own prompt.

    ``state`` is the seed's state; the seed's ``{outcomeUnknown: word}`` is
    written as ``state="outcome-unknown"`` with the word in ``reason``.
    """

    request: str | None
    idx: int
    state: State
    reason: Reason | None = None
    stop: str | None = None
    native_error: str | None = None


Output = Overlap | Working | Settled


# --------------------------------------------------------------------------
# State


@attrs.define
class Slot:
    """The prompt the bridge holds on the engine (at most one at a time)."""

    request: str | None
    ack_idx: int | None = None
    run_id: str | None = None
    working: bool = False
    settle_seen: bool = False
    failure_no_run: bool = False


@attrs.define
class Run:
    """One prompt's run: first ``agent_start`` to its ``agent_settled``."""

    id: str
    start_idx: int
    settle_idx: int | None = None
    #: ``agent_start`` events not yet closed by an ``agent_end``.
    open_starts: int = 1
    user_starts: int = 0
    last_stop: str | None = None
    last_error: str | None = None
    failure_before_user: bool = False
    #: True when this run was attributed to the slot.
    slot: bool = False


@attrs.frozen
class RunFacts:
    """What a reader (``bridge diagnose``) may know of one run: a copy, so reading it changes nothing."""

    id: str
    start_idx: int
    settle_idx: int | None
    open_starts: int
    last_stop: str | None


@attrs.define
class Tracker:
    """The overlap tracker. Feed it in observation order; it returns outputs.

    The driver (:class:`bridge.core.session.Session`) applies SPEC §4: it calls
    :meth:`attach` when it writes a ``prompt``, :meth:`acked` when it reads that
    prompt's successful response, :meth:`link_stop` when it writes an
    ``abort``, :meth:`release` when the slot's receipt is settled, opens and
    closes the clear window around a clearing command, marks a gap for a line
    that is not a JSON object, and passes every other JSON object to
    :meth:`event`.
    """

    idx: int = 0
    slot: Slot | None = None
    last_slot: Slot | None = None
    #: Every run seen, by id, in start order.
    runs: dict[str, Run] = attrs.field(factory=dict)
    #: The id of the run between its first ``agent_start`` and its settle.
    current: str | None = None
    overlaps: list[Overlap] = attrs.field(factory=list)
    #: Index of the first observation that was not a JSON object, or None.
    gap: int | None = None
    clear_window: int = 0
    run_serial: int = 0
    ignored_agent_ends: int = 0
    #: Indices of ``agent_settled`` events read while no run was current.
    loose_settles: list[int] = attrs.field(factory=list)
    #: The stop id an ``aborted`` may be linked to (the seed's ``stopLink()``).
    stop: str | None = None
    #: Bounded memory for a long-lived engine (None: keep everything, as the seed
    #: does; replay and the tests do). With a bound, settled runs other than the
    #: slot's and the current one are forgotten oldest first, and only the first
    #: ``keep`` overlaps and the last ``keep`` loose settles are kept (counted in
    #: ``overlap_count``). Event handling never looks at what is forgotten: it
    #: reads the current run and the slot's run only. What changes is the reach
    #: of the history queries (``started_after``, ``settled_after``).
    keep: int | None = None
    overlap_count: int = 0

    # -- bookkeeping the driver calls ------------------------------------

    @property
    def overlapped(self) -> bool:
        return bool(self.overlaps)

    def read(self) -> int:
        """Give the next observation its index: where every observation gets its index."""
        self.idx += 1
        return self.idx

    def read_many(self, count: int) -> int:
        """``count`` observations the tracker never looks at (``message_update`` lines taken
        in bulk) take their indices; returns the first."""
        first = self.idx + 1
        self.idx += count
        return first

    def open_clear_window(self) -> None:
        """A clearing command was written: an empty ``queue_update`` is ours until its answer."""
        self.clear_window += 1

    def close_clear_window(self) -> None:
        """A clearing command was answered."""
        self.clear_window -= 1

    def attach(self, request: str | None) -> Slot:
        self.slot = Slot(request=request)
        return self.slot

    def acked(self, idx: int) -> None:
        if self.slot is not None:
            self.slot.ack_idx = idx

    def link_stop(self, stop: str | None) -> None:
        self.stop = stop

    def release(self) -> None:
        """Release the slot; the stop link clears with it."""
        if self.slot is not None:
            self.last_slot = self.slot
        self.slot = None
        self.stop = None

    def mark_gap(self, idx: int) -> None:
        """A line that was not a JSON object: the evidence may be incomplete."""
        if self.gap is None:
            self.gap = idx

    # -- queries -----------------------------------------------------------

    def started_after(self, idx: int) -> list[Run]:
        """Runs whose first ``agent_start`` was read after ``idx``."""
        return [r for r in self.runs.values() if r.start_idx > idx]

    def settled_after(self, idx: int) -> bool:
        if any(r.settle_idx is not None and r.settle_idx > idx for r in self.runs.values()):
            return True
        return any(i > idx for i in self.loose_settles)

    def slot_run(self) -> Run | None:
        """The run in the slot's window, or None."""
        if self.slot is None or self.slot.run_id is None:
            return None
        return self.runs.get(self.slot.run_id)

    def current_run(self) -> Run | None:
        return self.runs.get(self.current) if self.current is not None else None

    def settle_idx(self, run_id: str) -> int | None:
        """Where ``run_id`` settled, or None while it has not.

        The seed's ``waitSettle(run, ms)`` without the clock: the trio layer
        checks this after each observation and owns the timeout.
        """
        run = self.runs.get(run_id)
        return run.settle_idx if run is not None else None

    # -- read-only views for readers (never called on the hot path) ----------

    def run_facts(self, run_id: str | None) -> RunFacts | None:
        """Run ``run_id``'s facts, or None when there is no such run (or ``keep`` forgot it)."""
        run = self.runs.get(run_id) if run_id is not None else None
        if run is None:
            return None
        return RunFacts(run.id, run.start_idx, run.settle_idx, run.open_starts, run.last_stop)

    def loose_settle_before(self, idx: int) -> int | None:
        """The last ``agent_settled`` read with no run current before ``idx`` (within ``keep``), or None."""
        earlier = [i for i in self.loose_settles if i < idx]
        return earlier[-1] if earlier else None

    # -- events ------------------------------------------------------------

    def event(self, ev: dict[str, Any], idx: int) -> list[Output]:
        """Feed one JSON object read from the engine (responses included)."""
        out: list[Output] = []
        kind = ev.get("type")
        if kind == "agent_start":
            self._agent_start(idx, out)
        elif kind == "agent_end":
            run = self.current_run()
            if run is not None and run.open_starts > 0:
                run.open_starts -= 1
            else:
                self.ignored_agent_ends += 1
        elif kind == "message_start":
            if _role(ev) == "user":
                self._user_start(idx, out)
        elif kind == "message_end":
            if _role(ev) == "assistant":
                self._assistant_end(ev["message"], idx, out)
        elif kind == "agent_settled":
            self._settled(idx, out)
        elif kind == "queue_update":
            steering, follow_up = ev.get("steering"), ev.get("followUp")
            empty = (len(steering) if isinstance(steering, list) else 1) == 0 and (
                len(follow_up) if isinstance(follow_up, list) else 1
            ) == 0
            # Pi's own clear emits an empty queue_update before its response:
            # inside our clear window that one is caused.
            if not (empty and self.clear_window > 0):
                items = (len(steering) if isinstance(steering, list) else 0) + (
                    len(follow_up) if isinstance(follow_up, list) else 0
                )
                cause = Cause.UNCAUSED_QUEUE_UPDATE if empty else Cause.QUEUE_UPDATE
                self._overlap(Signal.O5, idx, out, cause=cause, items=items)
        return out

    def _overlap(self, signal: Signal, idx: int, out: list[Output], **detail: Any) -> None:
        held = self.slot if self.slot is not None else self.last_slot
        entry = Overlap(signal, idx, held.request if held is not None else None, detail)
        self.overlap_count += 1
        if self.keep is None or len(self.overlaps) < self.keep:
            self.overlaps.append(entry)
        out.append(entry)

    def _agent_start(self, idx: int, out: list[Output]) -> None:
        current = self.current_run()
        if current is not None:
            current.open_starts += 1
            return
        self.run_serial += 1
        run = Run(id=f"run-{self.run_serial}", start_idx=idx)
        self.runs[run.id] = run
        self.current = run.id
        s = self.slot
        if s is None or s.ack_idx is None or s.run_id is not None:
            if s is None:
                why = Why.NO_SLOT
            elif s.ack_idx is None:
                why = Why.BEFORE_ACK
            else:
                why = Why.AFTER_SLOTS_RUN
            self._overlap(Signal.O1, idx, out, run=run.id, why=why)
            return
        s.run_id = run.id
        run.slot = True

    def _user_start(self, idx: int, out: list[Output]) -> None:
        run = self.current_run()
        if run is None:
            return
        run.user_starts += 1
        if run.user_starts == 2:
            self._overlap(Signal.O6, idx, out, run=run.id)
        s = self.slot
        if (
            s is not None
            and run.id == s.run_id
            and run.user_starts == 1
            and not s.working
            and not self.overlapped
            and not self.gap
        ):
            s.working = True
            out.append(Working(s.request, idx))

    def _assistant_end(self, message: Any, idx: int, out: list[Output]) -> None:
        raw_stop = message.get("stopReason") if isinstance(message, dict) else None
        stop_reason = raw_stop if isinstance(raw_stop, str) else None
        # Only the controller's abort produces `aborted`.
        if stop_reason == "aborted" and not self.stop:
            self._overlap(Signal.ABORTED_WITHOUT_STOP, idx, out, run=self.current)
        run = self.current_run()
        if run is None:
            # Pi's run-failure handler can emit a failure message with no
            # agent_start (pi-agent-core agent.js 349-364).
            s = self.slot
            if s is not None and s.ack_idx is not None and stop_reason in ("error", "aborted"):
                s.failure_no_run = True
            return
        run.last_stop = stop_reason
        error = message.get("errorMessage") if isinstance(message, dict) else None
        run.last_error = js_slice(error, LAST_ERROR_MAX) if isinstance(error, str) else None
        if stop_reason in ("error", "aborted") and run.user_starts == 0:
            run.failure_before_user = True

    def _settled(self, idx: int, out: list[Output]) -> None:
        run = self.current_run()
        s = self.slot
        if run is None:
            self.loose_settles.append(idx)
            if self.keep is not None and len(self.loose_settles) > self.keep:
                del self.loose_settles[: -self.keep]
            if s is None or s.ack_idx is None:
                why = Why.NO_SLOT if s is None else Why.BEFORE_ACK
                self._overlap(Signal.O2, idx, out, why=why)
                return
            if s.settle_seen:
                self._overlap(Signal.O2, idx, out, why=Why.SECOND_SETTLE)
                return
            s.settle_seen = True
            if s.run_id is not None:
                self._overlap(Signal.O2, idx, out, why=Why.SECOND_SETTLE)
                return
            if not s.failure_no_run:
                self._overlap(Signal.O4, idx, out, why=Why.SETTLE_WITHOUT_START)
                return
            if self.overlapped or self.gap:
                return
            out.append(Settled(s.request, idx, State.DELIVERY_UNKNOWN, Reason.ACK_WITHOUT_START))
            return
        if run.open_starts > 0:
            # The settle does not close this run; the run stays current.
            self._overlap(Signal.O3, idx, out, run=run.id)
            return
        run.settle_idx = idx
        self.current = None
        if self.keep is not None and len(self.runs) > self.keep:
            self._forget_runs()
        if not run.slot:
            if s is None or s.ack_idx is None:
                self._overlap(Signal.O2, idx, out, run=run.id, why=Why.NOT_THE_SLOTS_RUN)
            return
        if s is None or s.run_id != run.id:
            self._overlap(Signal.O2, idx, out, run=run.id, why=Why.SLOT_MOVED_ON)
            return
        if s.settle_seen:
            self._overlap(Signal.O2, idx, out, why=Why.SECOND_SETTLE)
            return
        s.settle_seen = True
        if self.overlapped or self.gap:
            return
        out.append(classify(s, run, self.stop, idx))

    def _forget_runs(self) -> None:
        assert self.keep is not None
        keep_ids = {
            self.current,
            self.slot.run_id if self.slot else None,
            self.last_slot.run_id if self.last_slot else None,
        }
        excess = len(self.runs) - self.keep
        for run_id in list(self.runs):
            if excess <= 0:
                break
            if run_id not in keep_ids and self.runs[run_id].settle_idx is not None:
                del self.runs[run_id]
                excess -= 1


def classify(slot: Slot, run: Run, stop: str | None, idx: int) -> Settled:
    """Settle the slot from its own run's evidence (no overlap, no gap seen)."""
    request = slot.request
    if not slot.working:
        return Settled(request, idx, State.DELIVERY_UNKNOWN, Reason.ACK_WITHOUT_START)
    s = run.last_stop
    if s in DONE_STOPS:
        return Settled(request, idx, State.FINISHED)
    if s == "error":
        return Settled(request, idx, State.FAILED, native_error=run.last_error)
    if s == "aborted":
        # Without a stop this is unreachable: _assistant_end raised the overlap.
        if stop:
            return Settled(request, idx, State.FAILED, Reason.INTERRUPTED, stop=stop)
        return Settled(request, idx, State.OUTCOME_UNKNOWN, Reason.ABORTED_WITHOUT_STOP)
    word = Reason.NO_FINAL_ASSISTANT_MESSAGE if s is None else Reason.UNRECOGNISED_STOP_REASON
    return Settled(request, idx, State.OUTCOME_UNKNOWN, word)


def js_slice(text: str, units: int) -> str:
    """``text.slice(0, units)`` as JavaScript counts: in UTF-16 code units.

    An astral character (an emoji) is two units, so the cut can fall inside
    it and keep a lone high surrogate, exactly as the seed's ``slice`` does.
    """
    if 2 * len(text) <= units:
        return text
    encoded = text.encode("utf-16-le", "surrogatepass")
    if len(encoded) <= 2 * units:
        return text
    return encoded[: 2 * units].decode("utf-16-le", "surrogatepass")


def _role(ev: dict[str, Any]) -> Any:
    message = ev.get("message")
    return message.get("role") if isinstance(message, dict) else None
