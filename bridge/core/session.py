"""The session: the sans-IO object the live bridge and replay both drive.

A :class:`Session` is fed what the bridge does and what it reads -- commands it
wrote (:meth:`~Session.send`), lines it read (:meth:`~Session.observe_batch`, one
read's lines at a time; replay feeds parsed journal entries to :meth:`~Session.observe`
and elided runs to :meth:`~Session.observe_updates`), slots it released, engine
exits -- and returns the events that follow, in order. It owns the observation index, drives the
:class:`~bridge.core.tracker.Tracker` by SPEC §4's table, and decides each sent
prompt's receipt (SPEC §5). It has no clock and does no I/O: times are passed
in by the caller (``t``, seconds since the bridge started) and only copied into
receipts. Replaying a journal through a Session gives what the live bridge
reported, because the live bridge used a Session too.

SPEC §4, the driving table:

=========================================  ======================================
the bridge ...                              the tracker ...
=========================================  ======================================
writes a ``prompt`` with id R               attaches a slot whose request is R
reads R's ``prompt`` response with          marks the slot acked at that index
``success: true`` while R's slot is held
writes an ``abort`` with id S               links stop S until the slot is released
releases the slot                           releases it; the stop link clears
writes a command in the ``clearing`` list   opens a clear window until that
                                            command's response is read
reads a line that is not a JSON object      sets the gap (it stays set)
reads any other JSON object                 ``event(obj, idx)``
=========================================  ======================================

The bridge's own rules on top (SPEC §5):

- An ack whose ``data.disposition`` is not ``started`` means the seal failed;
  like an overlap or a gap it *taints* the engine (an ``aborted-without-stop``
  overlap taints it with that word, the seed's own unknown): the controller is told at
  once (:class:`SealBroken`), and the held slot settles ``outcome-unknown`` with
  the taint as its reason as soon as its own run settles (or when the trio
  layer gives up after a grace, :meth:`Session.give_up`).
- A ``prompt`` response with ``success: false`` is the engine refusing it:
  ``rejected`` / ``engine``.
- When the tracker settles ``failed`` (or with no final assistant message) but
  our stop is linked and ``agent_settled.aborted`` is true, the run was
  interrupted by our stop during a retry backoff, where Pi writes no aborted
  message: the receipt says ``failed`` / ``interrupted``. The tracker's own
  output stays the seed's.
- A ``prompt`` written while another prompt holds the slot (never by the
  bridge itself; only a deliberate ``send_raw``) breaks the seal: a
  ``second-prompt`` signal names both requests (the bridge's own, not the seed's;
  it goes on the displaced prompt's receipt), the engine is tainted (``overlap``)
  and the displaced prompt, which keeps its run id and its signals, settles
  ``outcome-unknown`` when its own run settles. Its responses are no longer read
  (the slot is the new prompt's): a refusal of it settles nothing.
- A prompt the bridge sent whose write then failed before one byte of it went in
  (the engine's stdin was closed: it was dying) was never read: the ``unsent`` note
  the lifecycle journals for it settles it ``rejected`` / ``engine-down``, live and
  in replay alike, naming no stop (every stop came before it was sent: SPEC §5).
  One of which part went in is not: its engine's exit decides it.
- A receipt's ``stop`` is the first abort written while the prompt was held, and only
  that decides whose stop aborted its run: an abort written before the prompt links
  the tracker (the seed's stop link spans the attach), never the receipt
  (``outcome-unknown`` / ``aborted-without-stop``, decide's row 10). In replay a
  recorded receipt gives the verdict; the stop is still the evidence's.
- When the engine exits, the held slot settles ``outcome-unknown`` /
  ``engine-exited`` if the model had it (working), else ``delivery-unknown`` /
  ``engine-exited``. Whatever the engine writes after an exit comes from a new
  engine: the next command or line starts a fresh tracker (the observation
  index carries on, so ``i`` stays unique in one journal).
"""

from __future__ import annotations

import collections
import math
from collections.abc import Iterator, Sequence
from typing import Any, Final

from bridge.core import framing
from bridge.core.budget import compaction_spent
from bridge.core.deltas import lean_update, read_run, run_deltas
from bridge.core.dialogs import diagnostic_of
from bridge.core.events import (
    NO_EVENTS,
    Acked,
    Diagnostic,
    DispositionSignal,
    Event,
    GapOpened,
    Observation,
    Observed,
    ReceiptReady,
    Retrying,
    SealBroken,
    SecondPrompt,
    Skipped,
    StopUnheard,
    Streamed,
    TextDelta,
)
from bridge.core.framing import (
    LEAN_MIN,
    MESSAGE_UPDATE,
    JsonCheck,
    Oversize,
    RawLine,
    UpdateRun,
    lean_kind,
    parse_line,
    sized_update_runs,
)
from bridge.core.progress import EVENT_LINES, TextEvent, ThinkingEvent, UsageEvent, delta_of, translate
from bridge.core.prompts import PromptState, add_signal, message_text
from bridge.core.receipts import GIVE_UP_WHYS, Facts, GiveUpWhy, Receipt, Times, Usage, Verdict, decide, exit_words
from bridge.core.steering import EngineConfig
from bridge.core.tracker import Overlap, Settled, Tracker, Working
from bridge.core.words import Reason, RequestId, Signal, StopBy

#: The ``by`` words a journal's ``stop`` note may carry.
_STOP_BY: Final = frozenset(StopBy)

#: Runs, overlaps and loose settles a live tracker remembers (see Tracker.keep).
TRACKER_KEEP: Final = 256

#: Last stderr lines an ``engine-exited`` receipt quotes in ``nativeError``.
STDERR_QUOTED: Final = 5


class Session:
    """Drive the tracker by SPEC §4 and decide receipts by SPEC §5.

    ``collect=True`` keeps the tracker's outputs in :attr:`overlaps`,
    :attr:`working` and :attr:`settled` (replay); the live bridge passes False so
    memory does not grow with the stream.
    """

    def __init__(
        self,
        clearing: tuple[str, ...] | frozenset[str] = (),
        *,
        collect: bool = False,
        skip_updates: bool = True,
        dialogs: bool = False,
    ) -> None:
        self.clearing = frozenset(clearing)
        #: The engine's extensions were allowed: their UI requests are the controller's
        #: (:mod:`bridge.core.dialogs`), not seal diagnostics on the held prompt's receipt.
        self.dialogs = dialogs
        self.collect = collect
        #: Skip parsing ``message_update`` lines nobody streams (off for full journals, which
        #: keep every line's payload and so need it parsed).
        self.skip_updates = skip_updates
        #: Each skipped line is still checked to be one JSON text (SPEC §3).
        self._json = JsonCheck()
        self.tracker = self._new_tracker(0)
        self.observations = 0
        self.generation = 1
        self.pid: int | None = None
        #: Why the engine is no longer sealed, or None.
        self.taint: Reason | None = None
        self.exited = False
        self._fresh_needed = False
        self._pending_clears: list[tuple[str, Any]] = []
        #: Sent prompts that have no receipt yet, by request id.
        self.open: dict[RequestId | None, PromptState] = {}
        #: The prompt in the tracker's slot (sent, not released).
        self.held: PromptState | None = None
        #: Prompts a later ``prompt`` command displaced from the slot before
        #: their receipt (only a deliberate unsealing does that).
        self._displaced: list[PromptState] = []
        self.overlaps: list[Overlap] = []
        self.working: list[Working] = []
        self.settled: list[Settled] = []
        self.receipts: list[Receipt] = []
        #: Whose stop each stop id is, from the ``stop`` notes (a stop with no
        #: note is the controller's: journals before the notes existed).
        self._stop_by: dict[RequestId, StopBy] = {}
        #: Configurations noted for prompts about to be sent (``config`` notes), by request.
        self._configs: dict[RequestId, EngineConfig] = {}
        #: The current engine's last stderr lines, for ``engine-exited`` receipts.
        self.stderr_tail: collections.deque[str] = collections.deque(maxlen=STDERR_QUOTED)

    # -- inputs ------------------------------------------------------------

    def engine_started(self, pid: int | None, generation: int | None = None) -> None:
        """A (new) engine process is running; lines from here on are its own."""
        if self._fresh_needed or self.exited:
            self._fresh_tracker()
        self.stderr_tail.clear()
        self.pid = pid
        if generation is not None:
            self.generation = generation

    def send(
        self,
        cmd: dict[str, Any],
        *,
        t: float | None = None,
        stream: bool = False,
        events: bool = False,
        traced: bool = False,
    ) -> Sequence[Event]:
        """The bridge wrote ``cmd`` to the engine."""
        if self._fresh_needed:
            self._fresh_tracker()
        kind = cmd.get("type")
        out: list[Event] = []
        if kind == "prompt":
            request = cmd.get("id")
            previous = self.held
            if previous is not None and previous.receipt is None:
                # Two prompts on the engine at once: the seal is broken, and the
                # first keeps what it needs to settle on its own run.
                slot = self.tracker.slot
                if slot is not None and slot.request == previous.request:
                    previous.run_id = slot.run_id
                self._displaced.append(previous)
                second = SecondPrompt(self.tracker.idx, request, previous.request)
                add_signal(previous, second.to_json())
                out.append(second)
                self._taint(Reason.OVERLAP, self.tracker.idx, out)
            self.tracker.attach(request)
            state = PromptState(request, stream, events, traced, pid=self.pid, generation=self.generation)
            if self._configs and isinstance(request, str):
                state.config = self._configs.pop(request, None)
            if t is not None:
                state.times["sent"] = t
            self.open[request] = state
            self.held = state
        elif kind == "abort":
            stop = cmd.get("id")
            self.tracker.link_stop(stop)
            by = self._stop_by.pop(stop, StopBy.CONTROLLER) if isinstance(stop, str) else StopBy.CONTROLLER
            if self.held is not None and self.held.stop is None:
                self.held.stop = stop
                self.held.stop_by = by
        if kind in self.clearing:
            self.tracker.open_clear_window()
            self._pending_clears.append((kind, cmd.get("id")))
        return out or NO_EVENTS

    def observe_batch(
        self, lines: Sequence[bytes | Oversize | UpdateRun], *, t: float | None = None
    ) -> Iterator[Observation]:
        """One read's lines from the engine's stdout, in order: the one entry point for them.

        Yields one :class:`Skipped` per run of ``message_update`` lines nobody streams (they
        take their indices and are not parsed: the fast path, a splitter's
        :class:`~bridge.core.framing.UpdateRun` of candidates, and runs found among other lines
        by :func:`bridge.core.framing.sized_update_runs`; each line one observation), one
        :class:`Streamed` per such run the held prompt reads (:meth:`_stream_run`; among other
        lines, from :data:`~bridge.core.framing.BULK_MIN_LINES` on, as the splitter's: a few
        lines a read stay one text piece each) and one :class:`Observed` per other line.
        Consume it whole: each item is yielded after its lines were observed, and what the caller does between items (journal a line, answer a
        start-up check) sees the session as of that line."""
        # An UpdateRun (like an Oversize) fails the per-line checks' C-level maps: it lands in
        # a run of other lines, met below.
        for start, end, is_update, nbytes in sized_update_runs(lines, MESSAGE_UPDATE, b"}"):  # type: ignore[arg-type]
            if is_update and self.skip_updates and not self._fresh_needed:
                run: Sequence[bytes] = lines[start:end]  # type: ignore[assignment]  # update runs are bytes
                if not self._streaming():
                    if self._json.lines(run):
                        yield Skipped(self.observe_updates(len(run)), run, nbytes)
                        continue
                elif len(run) >= framing.BULK_MIN_LINES and (streamed := self._stream_run(run, nbytes)):
                    yield streamed
                    continue
            for line in lines[start:end]:  # one of them is not JSON, or not simdjson's
                if type(line) is UpdateRun:
                    yield from self._observe_run(line, t)
                else:
                    yield self._receive_line(line, t)  # type: ignore[arg-type]  # not a run

    def _observe_run(self, run: UpdateRun, t: float | None) -> Iterator[Observation]:
        """A splitter's run of ``message_update`` candidates: in bulk when nobody streams
        them and each is one JSON text, parsed in one pass when the held prompt reads them
        (:meth:`_stream_run`), else line by line."""
        if self._updates_skippable():
            if self._json.run(run):
                yield Skipped(self.observe_updates(len(run)), run, run.nbytes)
                return
        elif self.skip_updates and not self._fresh_needed:
            streamed = self._stream_run(run, run.nbytes)
            if streamed is not None:
                yield streamed
                return
        for line in run:
            yield self._receive_line(line, t)

    def _stream_run(self, run: UpdateRun | Sequence[bytes], nbytes: int) -> Streamed | None:
        """A run of candidates (``nbytes`` together) while the held prompt reads its ``message_update`` lines: when
        every one is a JSON object whose ``type`` is ``message_update`` (a duplicate key can
        make it another) they are observed together, as line by line would: the tracker reads
        none of them and nothing else of the session moves between them, so they take their
        indices at once and what comes of them is their deltas, each line read for them only
        (:mod:`bridge.core.deltas`). Else None: line by line, where a line orjson refuses is
        decided by :func:`~bridge.core.framing.parse_line`. Not for a session that reports every
        line it parsed (``skip_updates`` off: a full journal keeps each)."""
        read = read_run(run)
        if read is None:
            return None
        first = self.observe_updates(len(run))
        held = self.held
        events: Sequence[Event] = NO_EVENTS
        if held is not None and self.taint is None and self._in_slots_run():  # as _update decides
            held.retry_delay = 0.0
            events = run_deltas(read, first, held.request, held.events, held.stream)
        return Streamed(first, run, nbytes, events)

    def observe_updates(self, count: int) -> int:
        """``count`` ``message_update`` lines (or their elided journal entries) the tracker
        never reads: they only take their indices. Returns the first index."""
        if self._fresh_needed:
            self._fresh_tracker()
        self.observations += count
        return self.tracker.read_many(count)

    def _receive_line(self, line: bytes | Oversize, t: float | None) -> Observed:
        if (
            self.skip_updates
            and type(line) is bytes
            and line.startswith(MESSAGE_UPDATE)
            and line.endswith(b"}")
            and not self._streaming()
            and not self._fresh_needed
            and self._json.line(line)
        ):
            self.observations += 1
            return Observed(self.tracker.read(), line, None, NO_EVENTS)
        if type(line) is bytes and len(line) >= LEAN_MIN and line.startswith(MESSAGE_UPDATE):
            # A long update the held prompt reads (its text, its events), or any with a full
            # journal (which writes the line as it came: it needs to know it is one JSON object,
            # not its members): read for its delta only, never built whole (issue 42: a 60 MB
            # line of small objects built by orjson peaked at 1.9 GB); a line msgspec refuses
            # is decided exactly below.
            update = lean_update(line)
            if update is not None:
                idx, events = self.observe(update, t=t)
                return Observed(idx, line, update, events)
        kind = lean_kind(line) if self.skip_updates and type(line) is bytes else None
        if kind is not None and not (kind in EVENT_LINES and self._events_wanted()):
            # A line of which only the type and the top-level scalars are read (on the settle's
            # path, agent_end is the run's whole message list): checked, not built, it stands
            # as its top-level scalars (framing.CONTENTS_READ).
            lean = self._json.top_scalars(line)  # type: ignore[arg-type]  # bytes
            if lean is not None and lean.get("type") == kind:
                idx, events = self.observe(lean, t=t)
                return Observed(idx, line, lean, events)
        value = parse_line(line)
        if type(value) is dict and value.get("type") != "message_update" and line.startswith(MESSAGE_UPDATE):  # type: ignore[union-attr]  # bytes: an Oversize parses to a RawLine
            # A second "type" key (JSON.stringify never writes one; the parser keeps the last):
            # the line is the update its first bytes say, as the fast path and replay read it.
            value["type"] = "message_update"
        idx, events = self.observe(value, t=t)
        return Observed(idx, line, value, events)

    def _updates_skippable(self) -> bool:
        """``message_update`` lines need no parse: nobody streams the slot's text and the
        tracker is this engine's."""
        return self.skip_updates and not self._fresh_needed and not self._streaming()

    def observe(self, value: Any, *, t: float | None = None) -> tuple[int, Sequence[Event]]:
        """One observation: a parsed JSON object, or a :class:`RawLine`. SPEC §4's table, in
        order: give it its index; a line that is not an object opens a gap; a response is
        matched to what the bridge sent; anything else goes to the tracker, whose outputs are
        then applied, and the session's own rules follow (streamed text, dialogs, retries,
        tainted slots settling)."""
        if self._fresh_needed:
            self._fresh_tracker()
        self.observations += 1
        idx = self.tracker.read()
        if type(value) is not dict:
            return idx, self._gap(value, idx, t)
        kind = value.get("type")
        if kind == "response":
            return idx, self._response(value, idx, t)
        if kind == "message_update":
            # The tracker reads none of them (the fast path skips them whole): only streamed
            # text and the prompt's events come of one.
            return idx, self._update(value, idx)
        events: list[Event] = self.tracker.event(value, idx)  # type: ignore[assignment]  # a fresh list we extend
        self._apply_tracker(events, value, idx, t)
        if kind == "agent_start" and self.held is not None and self.held.stop_unheard and self._in_slots_run():
            self.held.stop_unheard = False
            if self.held.receipt is None:
                events.append(StopUnheard(self.held.request, self.held.stop, idx))
        self._engine_event(kind, value, idx, events)
        if self.taint is not None and self.held is not None and self.held.receipt is None:
            self._settle_tainted(idx, t, events)
        if self._displaced and self.taint is not None:
            self._settle_displaced(idx, t, events)
        return idx, events

    def _update(self, value: dict[str, Any], idx: int) -> Sequence[Event]:
        """A ``message_update``: a text delta for a streamed prompt (:class:`TextDelta`) and,
        for a prompt that asked for its events, its text or thinking delta; only for the held
        prompt's own run while the engine is sealed."""
        held = self.held
        if held is None or held.receipt is not None or self.taint is not None or not (held.stream or held.events):
            return NO_EVENTS
        if not self._in_slots_run():
            return NO_EVENTS
        held.retry_delay = 0.0
        found = delta_of(value)
        if found is None:
            return NO_EVENTS
        kind, piece = found
        if kind == "text_delta":
            if held.events and held.stream:
                return (TextEvent(held.request, idx, piece), TextDelta(held.request, piece))
            return (TextEvent(held.request, idx, piece),) if held.events else (TextDelta(held.request, piece),)
        if kind == "thinking_delta" and held.events:
            return (ThinkingEvent(held.request, idx, piece),)
        return NO_EVENTS

    def _gap(self, value: Any, idx: int, t: float | None) -> list[Event]:
        """A line that is not a JSON object: the gap, and the taint it brings."""
        if not isinstance(value, RawLine):
            value = RawLine("not-object", repr(value), 0)
        self.tracker.mark_gap(idx)
        gap = GapOpened(idx, value.why, value.length)
        events: list[Event] = [gap]
        if self.held is not None:
            add_signal(self.held, gap.to_json())
        self._taint(Reason.GAP, idx, events)
        self._settle_tainted(idx, t, events)
        return events

    def _apply_tracker(self, events: list[Event], value: dict[str, Any], idx: int, t: float | None) -> None:
        """The tracker's outputs for this line: overlaps taint the engine and go on the held
        (and displaced) prompts' receipts; ``working`` marks the held prompt; a settlement
        decides its receipt. ``events`` (the outputs) is extended in place."""
        for out in list(events):
            if type(out) is Overlap:
                if self.collect:
                    self.overlaps.append(out)
                if self.held is not None:
                    add_signal(self.held, out.to_json())
                for displaced in self._displaced:
                    add_signal(displaced, out.to_json())
                # An `aborted` nobody asked for is the seed's own unknown: the
                # receipt names it rather than the generic "overlap".
                aborted = out.signal == Signal.ABORTED_WITHOUT_STOP
                self._taint(Reason.ABORTED_WITHOUT_STOP if aborted else Reason.OVERLAP, idx, events)
            elif type(out) is Working:
                if self.collect:
                    self.working.append(out)
                if self.held is not None and self.held.request == out.request:
                    self.held.working_idx = idx
                    if t is not None:
                        self.held.times["working"] = t
            elif type(out) is Settled:
                if self.collect:
                    self.settled.append(out)
                self._settle_from_tracker(out, value, t, events)

    def _engine_event(self, kind: Any, value: dict[str, Any], idx: int, events: list[Event]) -> None:
        """What the session itself makes of an engine event: streamed text, the prompt's events
        and what its run is doing (a tool, a retry's wait), extension dialogs and errors (seal
        diagnostics), the engine's own retries."""
        held = self.held
        if held is not None and held.receipt is None:
            if (held.events or held.traced) and kind in EVENT_LINES and self.taint is None and self._in_slots_run():
                event = translate(value, idx, held.request)
                if event is not None:
                    events.append(event)
            self._track_run(held, kind, value)
        if kind == "message_end":
            self._capture_reply(value, idx, events)
        elif kind == "extension_ui_request" or kind == "extension_error":
            events.append(self._diagnostic(kind, value, idx))
        elif kind == "compaction_end":
            events.extend(compaction_spent(self.held, value))
        elif kind == "auto_retry_start" and self.held is not None and self.held.receipt is None:
            error, attempts = value.get("errorMessage"), (value.get("attempt"), value.get("maxAttempts"))
            error = error[:500] if isinstance(error, str) else None
            events.append(Retrying(self.held.request, *attempts, value.get("delayMs"), error))

    def release(
        self, request: RequestId | None, *, t: float | None = None, recorded: dict[str, Any] | None = None
    ) -> list[Event]:
        """The bridge released ``request``'s slot.

        ``recorded`` is the receipt the journal recorded for it (replay): a
        decision the session could not make from evidence alone (a timeout, a
        grace) is taken from there; without it the prompt stays ``pending``.
        Its ``stop`` is not: the evidence names the first stop sent while it was held.
        """
        events: list[Event] = []
        state = self.open.get(request)
        if state is not None and state.receipt is None and recorded is not None:
            self._conclude(
                state,
                Facts(recorded=(recorded.get("state", "pending"), recorded.get("reason"))),
                t,
                events,
                # The verdict is the record's (a deadline is not in the evidence); the stop is the
                # evidence's, the first abort the journal shows sent while it was held (so an
                # edited stop is found, not echoed).
                native_error=recorded.get("nativeError"),
            )
        self.tracker.release()
        if self.held is not None and self.held.request == request:
            self.held = None
        self._displaced = [p for p in self._displaced if p.request != request]
        self.open.pop(request, None)
        return events

    def give_up(self, request: RequestId, why: GiveUpWhy, *, t: float | None = None) -> list[Event]:
        """The lifecycle stopped waiting for ``request``'s evidence: ``why`` is the
        deadline that passed (``ack``, ``settle``, ``taint``) or ``exited``.

        Always returns the prompt's receipt unless it already has one; a prompt
        this session never saw sent (an earlier engine's) is decided from the
        same facts with no evidence."""
        events: list[Event] = []
        prompt = self.open.get(request)
        if prompt is None:
            prompt = PromptState(request)
        elif prompt.receipt is not None:
            return events
        self._conclude(prompt, self._give_up_facts(prompt, why), t, events)
        return events

    def give_up_verdicts(self, request: RequestId) -> frozenset[Verdict]:
        """The ``(state, reason)`` each give-up of ``request`` would decide now (``replay --check``:
        what a recorded receipt may be when the evidence decided nothing); empty once decided."""
        prompt = self.open.get(request)
        if prompt is None or prompt.receipt is not None:
            return frozenset()
        return frozenset(decide(self._give_up_facts(prompt, why)) for why in GIVE_UP_WHYS)

    def _give_up_facts(self, prompt: PromptState, why: GiveUpWhy) -> Facts:
        taint = self.taint if prompt is self.held or prompt in self._displaced else None
        if why == "exited":
            return Facts(exited=True, taint=taint, working=prompt.working_idx is not None)
        return Facts(gave_up=why, taint=taint, working=prompt.working_idx is not None)

    def stderr(self, text: str) -> None:
        """A line the engine wrote to stderr (kept for ``engine-exited`` receipts)."""
        self.stderr_tail.append(text)

    def note(self, value: Any, *, t: float | None = None) -> list[Event]:
        """A journal ``note`` the bridge wrote: an engine start, whose stop is coming, a prompt's
        configuration, or a prompt that was never written (``unsent``: decided here)."""
        events: list[Event] = []
        if not isinstance(value, dict):
            return events
        event = value.get("event")
        if event == "unsent":
            self._unsent(value.get("request"), value.get("why"), t, events)
        if event == "stop":
            stop, by = value.get("stop"), value.get("by")
            if isinstance(stop, str) and by in _STOP_BY:
                self._stop_by[stop] = StopBy(by)
        elif event == "config":
            request, config = value.get("request"), value.get("config")
            if isinstance(request, str) and isinstance(config, dict):
                self._configs[request] = EngineConfig.from_json(config)
        elif event == "engine-start":
            pid, generation = value.get("pid"), value.get("generation")
            self.engine_started(
                pid if isinstance(pid, int) else None, generation if isinstance(generation, int) else None
            )
        return events

    def _unsent(self, request: Any, why: Any, t: float | None, events: list[Event]) -> None:
        """The held prompt ``request`` was sent here but no byte of it reached the engine (its
        stdin was closed): never delivered, ``rejected``/``engine-down`` (decide's first row).
        Not for a prompt the engine acked (it read that one) or one already decided."""
        held = self.held
        if held is None or held.request != request or held.receipt is not None or held.ack_idx is not None:
            return
        words = why if isinstance(why, str) else "never written: the engine's stdin was closed"
        self._conclude(held, Facts(unsent=Reason.ENGINE_DOWN), t, events, native_error=words)

    def engine_exited(
        self, code: int | None = None, signal: int | None = None, *, t: float | None = None
    ) -> list[Event]:
        """The engine process is gone: the held slot gets its receipt now."""
        events: list[Event] = []
        words = exit_words(code, signal, list(self.stderr_tail))
        for prompt in [*self._displaced, self.held]:
            if prompt is None or prompt.receipt is not None:
                continue
            facts = Facts(exited=True, taint=self.taint, working=prompt.working_idx is not None)
            self._conclude(prompt, facts, t, events, native_error=words)
        self._displaced.clear()
        self.exited = True
        self._fresh_needed = True
        return events

    # -- queries -------------------------------------------------------------

    @property
    def sealed(self) -> bool:
        return self.taint is None

    def prompt(self, request: RequestId | None) -> PromptState | None:
        return self.open.get(request)

    # -- internals -------------------------------------------------------------

    def _events_wanted(self) -> bool:
        """The held prompt asked for its events (and is not settled)."""
        held = self.held
        return held is not None and held.events and held.receipt is None

    def _streaming(self) -> bool:
        """The held prompt wants its ``message_update`` lines read (its text or its events)."""
        held = self.held
        return held is not None and (held.stream or held.events) and held.receipt is None

    def _in_slots_run(self) -> bool:
        slot = self.tracker.slot
        return slot is not None and slot.run_id is not None and self.tracker.current == slot.run_id

    @staticmethod
    def _track_run(held: PromptState, kind: Any, value: dict[str, Any]) -> None:
        """What the held prompt's run is doing, for the stall timeout: a tool running, or the
        engine's wait before a retry (any other line ends that wait)."""
        if kind == "tool_execution_start":
            call = value.get("toolCallId")
            held.tools_running.add(call if isinstance(call, str) else "")
        elif kind == "tool_execution_end":
            call = value.get("toolCallId")
            held.tools_running.discard(call if isinstance(call, str) else "")
        if kind == "auto_retry_start":
            delay = value.get("delayMs")
            if isinstance(delay, (int, float)) and not isinstance(delay, bool) and 0 < delay < 86_400_000:
                held.retry_delay = delay / 1000
            else:
                held.retry_delay = 0.0
        elif held.retry_delay:
            held.retry_delay = 0.0

    def stall_pause(self, request: RequestId | None) -> float:
        """How long past its last line ``request``'s run may stay quiet before the stall
        timeout counts: ``inf`` while a tool runs, the retry's wait after ``auto_retry_start``,
        else 0."""
        prompt = self.open.get(request)
        if prompt is None or prompt.receipt is not None:
            return 0.0
        return math.inf if prompt.tools_running else prompt.retry_delay

    def _new_tracker(self, idx: int) -> Tracker:
        # Replay keeps everything (the seed's tracker does); the live bridge
        # bounds what a long-lived engine's tracker remembers.
        return Tracker(idx=idx, keep=None if self.collect else TRACKER_KEEP)

    def _fresh_tracker(self) -> None:
        self.tracker = self._new_tracker(self.tracker.idx)
        self.taint = None
        self._pending_clears.clear()
        self.held = None
        self._displaced.clear()
        self.exited = False
        self._fresh_needed = False

    def _response(self, value: dict[str, Any], idx: int, t: float | None) -> Sequence[Event]:
        rid = value.get("id")
        slot = self.tracker.slot
        if value.get("command") == "prompt" and slot is not None and rid == slot.request and rid is not None:
            held = self.held
            if value.get("success") is True:
                self.tracker.acked(idx)
                if held is None or held.receipt is not None:
                    return NO_EVENTS
                events: list[Event] = []
                data = value.get("data")
                disposition = data.get("disposition") if isinstance(data, dict) else None
                if held.ack_idx is None:
                    held.ack_idx = idx
                    held.disposition = disposition if isinstance(disposition, str) else None
                    if t is not None:
                        held.times["acked"] = t
                    events.append(Acked(held.request, idx, held.disposition))
                if disposition != "started":
                    sig = DispositionSignal(idx, held.request, disposition)
                    add_signal(held, sig.to_json())
                    events.append(sig)
                    self._taint(Reason.DISPOSITION, idx, events)
                return events
            if value.get("success") is False and held is not None and held.ack_idx is None and held.receipt is None:
                events = []
                error = value.get("error")
                self._conclude(
                    held, Facts(refused=True), t, events, native_error=error if isinstance(error, str) else None
                )
                return events
            return NO_EVENTS
        if value.get("command") == "abort" and rid is not None:
            held = self.held
            if (
                held is not None
                and rid == held.stop
                and held.receipt is None
                and slot is not None
                and slot.request == held.request
                and slot.run_id is None
            ):
                held.stop_unheard = True  # answered with no run to abort: see StopUnheard
        if self._pending_clears:
            command = value.get("command")
            for n, (kind, cid) in enumerate(self._pending_clears):
                if cid == rid and (command is None or command == kind):
                    del self._pending_clears[n]
                    self.tracker.close_clear_window()
                    break
        return NO_EVENTS

    def _taint(self, cause: Reason, idx: int, events: list[Event]) -> None:
        if self.taint is None:
            self.taint = cause
            request = self.held.request if self.held is not None else None
            events.append(SealBroken(cause, idx, request))

    def _settle_tainted(self, idx: int, t: float | None, events: list[Event]) -> None:
        """A tainted slot settles as soon as its own run (or its loose settle) has."""
        held = self.held
        slot = self.tracker.slot
        if held is None or held.receipt is not None or slot is None or slot.request != held.request:
            return
        done = slot.settle_seen or (slot.run_id is not None and self.tracker.settle_idx(slot.run_id) is not None)
        if done:
            self._conclude(held, Facts(taint=self.taint, own_settled=True), t, events, settle_idx=idx)

    def _settle_displaced(self, idx: int, t: float | None, events: list[Event]) -> None:
        for prompt in list(self._displaced):
            if prompt.receipt is not None:
                self._displaced.remove(prompt)
            elif prompt.run_id is not None and self.tracker.settle_idx(prompt.run_id) is not None:
                self._displaced.remove(prompt)
                self._conclude(prompt, Facts(taint=self.taint, own_settled=True), t, events, settle_idx=idx)

    def _settle_from_tracker(self, out: Settled, settle: dict[str, Any], t: float | None, events: list[Event]) -> None:
        held = self.held
        if held is None or held.request != out.request or held.receipt is not None:
            return
        # Its stop is the first sent while it was held (it decides the word as it names the
        # stop): not the tracker's link, which is the last one sent, maybe before the prompt.
        stop = held.stop
        facts = Facts(
            tracker=(out.state, out.reason),
            taint=self.taint,
            own_settled=True,
            working=held.working_idx is not None,
            stop_by=(held.stop_by or StopBy.CONTROLLER) if stop else None,
            aborted=settle.get("aborted") is True,
        )
        self._conclude(held, facts, t, events, settle_idx=out.idx, stop=stop, native_error=out.native_error)

    def _conclude(
        self,
        prompt: PromptState,
        facts: Facts,
        t: float | None,
        events: list[Event],
        *,
        settle_idx: int | None = None,
        stop: Any = None,
        native_error: str | None = None,
    ) -> None:
        """Decide ``prompt``'s receipt by the table (:func:`bridge.core.receipts.decide`)
        and add it to ``events``, with the evidence the session holds."""
        state, reason = decide(facts)
        if t is not None:
            prompt.times["settled"] = t
        slot = self.tracker.slot
        if slot is not None and slot.request == prompt.request and prompt is self.held:
            run = slot.run_id
        else:
            run = prompt.run_id
        if facts.recorded is None and not (state in ("failed", "rejected") or reason == "engine-exited"):
            native_error = None
        if facts.unsent is not None:
            # Never written: every stop came before it was sent, so none is its stop (SPEC §5).
            stop = None
        elif stop is None:
            stop = prompt.stop
        receipt = Receipt(
            request=prompt.request,
            state=state,
            reason=reason,
            stop=stop,
            native_error=native_error,
            run=run,
            reply=prompt.reply,
            ack_idx=prompt.ack_idx,
            working_idx=prompt.working_idx,
            settle_idx=settle_idx,
            disposition=prompt.disposition,
            signals=tuple(prompt.signals),
            times=Times(**prompt.times),
            pid=prompt.pid,
            generation=prompt.generation,
            usage=prompt.usage if run is not None else None,
            config=prompt.config,
        )
        prompt.receipt = receipt
        if self.collect:
            self.receipts.append(receipt)
        events.append(ReceiptReady(receipt))

    def _capture_reply(self, value: dict[str, Any], idx: int, events: list[Event]) -> None:
        """An assistant ``message_end`` of the held prompt's own run: its reply text (the last
        one wins) and its usage (summed; a ``usage`` event, which the supervision counts toward
        the budgets and hands on to a prompt that wants events)."""
        held = self.held
        if held is None or held.receipt is not None or not self._in_slots_run():
            return
        message = value.get("message")
        if isinstance(message, dict) and message.get("role") == "assistant":
            held.usage = held.usage.add(message)
            if self.taint is None:
                stop = message.get("stopReason")
                stop = stop if isinstance(stop, str) else None
                events.append(UsageEvent(held.request, idx, Usage().add(message), held.usage, stop))
            text = message_text(message)
            if text:
                held.reply = text

    def _diagnostic(self, kind: str, value: dict[str, Any], idx: int) -> Diagnostic:
        diag = diagnostic_of(kind, value, idx)
        if self.held is not None and not (self.dialogs and kind == "extension_ui_request"):
            add_signal(self.held, diag.to_json())
        return diag
