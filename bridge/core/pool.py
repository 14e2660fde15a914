"""The pool's rules (issue 32): which engine gets a prompt, and when an engine is started,
reaped or taken from a conversation -- sans-IO (no trio, no clock, no I/O), like the
lifecycle. :mod:`bridge.live.pool` feeds it what happened and carries out what it answers.

The model. A pool runs at most ``engines`` engines at once, each one ordinary bridge with its
own journal, numbered 1, 2, 3, ... in the order they are started (a number is never reused, so
a journal and a notice name one engine for good). An engine runs one prompt at a time (Pi is
single-run), so a prompt is given to an engine only while it is *idle*; the others wait in the
pool's FIFO. A prompt may carry a *conversation* key: the conversation's prompts run on one
engine, in the order submitted, and no other prompt is given to that engine meanwhile (Pi keeps
one conversation per process: a stranger's prompt would read it).

Rules (numbered for the tests, ``tests/test_pool_rules.py``, one test per rule):

- R1 routing. A waiting prompt without a conversation goes to an idle engine that holds no
  conversation, the one used most recently (the others come to their idle timeout sooner); a
  prompt whose conversation holds an engine goes to that engine alone, when it is idle. The
  queue is worked in order; a prompt waits behind an earlier one of its own conversation, never
  behind a stranger that cannot be placed.
- R2 fresh context. A prompt given to an engine that has run a prompt before is *fresh* (its
  bridge starts a new conversation first) unless it continues the engine's own conversation:
  no prompt reads another prompt's context.
- R3 affinity. A conversation holds the engine of its first prompt until
  :meth:`PoolRules.end_conversation`, the engine's end, its reaping or an eviction (R6); each
  of those last three is told (``conversation-lost``), and the conversation's next prompt starts
  afresh on whichever engine R1 gives it.
- R4 starting. While a prompt waits that no running engine could take, and fewer than
  ``engines`` run or start, an engine is started (one per such prompt; a start in progress
  counts).
- R5 spares. The pool keeps ``spares`` engines free (holding no conversation) and idle or
  starting, as far as the cap allows: at open, and after every change.
- R6 eviction. At the cap, a waiting prompt no engine can take while every engine is idle
  or busy and no start is coming: the idle conversation-holding engine used longest ago is
  taken from its conversation (R3's notice) and given the prompt.
- R7 reaping. An idle engine idle for ``idle_timeout`` seconds is stopped, unless it is one of
  the ``spares`` free ones the pool keeps.
- R8 queue cap. A prompt submitted while ``queue_max`` wait already, or whose bytes would take the
  waiting prompts' past ``queue_bytes`` (each holds its whole text: issue 42), is rejected
  ``queue-full``; so is one bigger than ``queue_bytes`` alone.
- R9 down. An engine that cannot be started (its profile or start-up check refused it), or
  whose bridge went down for its crash limit, stops the pool starting engines; a prompt that
  then has no engine left to run on is rejected ``engine-down`` with the reason.
- R10 closing. From :meth:`PoolRules.close`, waiting prompts are rejected ``closing``, no
  engine is started or given a prompt, every engine is stopped (its bridge stops its running
  prompt, ``failed``/``closing``), and :class:`Closed` comes once no engine runs and every
  prompt has its receipt. :meth:`PoolRules.shutdown` first lets every accepted prompt run to
  its receipt (new ones are rejected ``closing``), bounded by its drain timeout.
- R11 stops. A waiting prompt that is stopped is rejected ``cancelled`` without touching an
  engine; a running one is its bridge's to stop.
- R12 moves (``PoolConfig.moves``: the pool keeps each conversation's history, as
  :mod:`bridge.live.pool_moves` does for Pi; design/conversations.md, "A pool's conversations").
  A conversation's context is then the pool's stored copy, not one engine's memory, so R3's
  end, reaping and eviction *release* the conversation without losing it (no
  ``conversation-lost``). A conversation's prompt waits while an earlier one of it runs (it reads
  that exchange); otherwise it goes to its engine when that is idle, and when its engine is
  gone, busy with another's prompt, starting or stopping, to an idle free engine (R1's choice;
  at the cap R6's eviction gives it one), which takes the conversation up first: the Dispatch
  says ``take_up`` (the engine switches to the stored copy, checked, before the prompt is
  written) and ``{"event": "conversation-moved", "conversation", "from", "to"}`` is told when
  it had an engine before. An engine also takes its own conversation up again when what its
  engine holds is not the stored copy: after a prompt whose exchange was not recorded
  (:meth:`PoolRules.settled` ``kept=False``: a receipt the bridge does not vouch for, rule 3 of
  the conversations) and after its engine process ended (its bridge starts a new one)
  (:meth:`PoolRules.restarted`). A take-up the engine fails is the prompt's receipt
  (``rejected``/``engine``, never written) and the engine is stopped (:meth:`PoolRules.unusable`).
- R13 tenants (``PoolConfig.clean``: the I/O layer can clean an engine, as :mod:`bridge.live.tenants`
  does for a confined Pi; issue 41). An engine that has run a prompt and holds no conversation
  -- after a prompt without a key, or once its conversation ended, was evicted (R6) or moved
  away (R12) -- is *cleaned* before anything else is given to it: :class:`Clean`, then
  :meth:`PoolRules.cleaned`. Cleaning kills every process its tools left in its sandbox and
  empties its working folder, ``/tmp`` and what else a tool could write there, so a prompt
  without a key (and a new key's first prompt) starts with nothing of the prompts before it,
  and nothing a keyless prompt's tools started outlives its receipt by more than the clean-up.
  A conversation's engine is not cleaned between its own prompts (its folder is its own). While
  it is cleaned an engine takes no prompt, and counts as one coming for R4 and R6 (no second
  engine is started or evicted for the prompt it will take); a clean-up that fails
  (:meth:`PoolRules.unclean`) stops the engine -- never is the dirt handed on -- and R4/R5
  start another.

Determinism: the same inputs at the same times give the same actions (no set iteration, no
randomness).
"""

from __future__ import annotations

from collections import deque
from typing import Any

import attrs

from bridge.core.config import DEFAULT_QUEUE_BYTES
from bridge.core.words import Reason

# -- what the pool does: actions --------------------------------------------------------------


@attrs.frozen
class StartEngine:
    """Start engine ``engine`` (a new bridge on the pool's profile) and report :meth:`PoolRules.started`."""

    engine: int


@attrs.frozen
class Dispatch:
    """Give prompt ``request`` to engine ``engine``'s bridge; ``fresh``: a new conversation first
    (R2); ``take_up``: first switch the engine to this conversation's stored copy (R12)."""

    request: str
    engine: int
    fresh: bool
    take_up: str | None = None


@attrs.frozen
class Reject:
    """Give prompt ``request`` its receipt now, ``rejected`` for ``reason``: it never reached an engine."""

    request: str
    reason: Reason
    detail: str | None = None


@attrs.frozen
class StopEngine:
    """Close engine ``engine``'s bridge (``drain_expired``: its running prompt is stopped as past a
    drain's bound, ``failed``/``timeout``; else ``failed``/``closing``) and report
    :meth:`PoolRules.gone`."""

    engine: int
    drain_expired: bool = False


@attrs.frozen
class Notice:
    """Tell the pool's listeners (``{"type": "pool", "event": ..., ...}``)."""

    payload: dict[str, Any]


@attrs.frozen
class Closed:
    """The pool has closed: no engine runs and every prompt has its receipt."""


@attrs.frozen
class Clean:
    """R13: clean engine ``engine`` (kill what its tools left, empty its folders) and report
    :meth:`PoolRules.cleaned` (or :meth:`PoolRules.unclean`)."""

    engine: int


PoolAction = StartEngine | Dispatch | Reject | StopEngine | Notice | Closed | Clean


# -- what it knows --------------------------------------------------------------------------


class EngineState:
    STARTING = "starting"
    IDLE = "idle"
    BUSY = "busy"
    #: R13: being cleaned; idle again once :meth:`PoolRules.cleaned`.
    CLEANING = "cleaning"
    STOPPING = "stopping"


@attrs.define
class PoolEngine:
    """One engine of the pool, as the rules see it."""

    number: int
    state: str = EngineState.STARTING
    #: The conversation it holds (R3), or None.
    conversation: str | None = None
    #: It has run a prompt: the next one is fresh unless it continues :attr:`conversation` (R2).
    used: bool = False
    #: When it last became idle (for R1's most-recent and R7's timeout).
    idle_since: float = 0.0
    #: The prompt it runs, while busy.
    request: str | None = None
    #: R12: what its engine holds is :attr:`conversation`'s stored copy and what followed it.
    current: bool = False
    #: R13: it has run a prompt since it was started or last cleaned.
    dirty: bool = False


@attrs.frozen
class Waiting:
    request: str
    conversation: str | None
    #: Its text's and images' bytes (:func:`~bridge.core.framing.prompt_bytes`), held while it waits.
    size: int = 0


def _positive_or_none(_: Any, attribute: Any, value: float | None) -> None:
    if value is not None and not value > 0:
        raise ValueError(f"{attribute.name} must be a positive number of seconds or None, got {value!r}")


@attrs.frozen
class PoolConfig:
    """The pool's bounds: ``engines`` (the cap, at least 1), ``spares`` (free engines kept warm;
    default: all of them), ``idle_timeout`` (seconds an idle engine beyond the spares lives;
    None: for ever), ``queue_max`` (prompts waiting for an engine)."""

    engines: int = attrs.field(default=1)
    spares: int | None = None
    idle_timeout: float | None = attrs.field(default=None, validator=_positive_or_none)
    queue_max: int = 1024
    #: R8 in bytes: what the waiting prompts' texts and images may hold (each holds its whole
    #: text), at least 1.
    queue_bytes: int = DEFAULT_QUEUE_BYTES
    #: R12: conversations are kept by the pool and move between engines.
    moves: bool = False
    #: R13: an engine is cleaned before it is given to another tenant.
    clean: bool = False

    def __attrs_post_init__(self) -> None:
        if isinstance(self.engines, bool) or not isinstance(self.engines, int) or self.engines < 1:
            raise ValueError(f"engines must be a whole number of at least 1, got {self.engines!r}")
        if self.spares is not None and (not isinstance(self.spares, int) or self.spares < 0):
            raise ValueError(f"spares must be a whole number of at least 0 (or None: all), got {self.spares!r}")
        if isinstance(self.queue_max, bool) or not isinstance(self.queue_max, int) or self.queue_max < 0:
            raise ValueError(f"queue_max must be a whole number of at least 0, got {self.queue_max!r}")
        if isinstance(self.queue_bytes, bool) or not isinstance(self.queue_bytes, int) or self.queue_bytes < 1:
            raise ValueError(f"queue_bytes must be a whole number of at least 1, got {self.queue_bytes!r}")

    @property
    def warm(self) -> int:
        """Free engines kept idle or starting (R5)."""
        return self.engines if self.spares is None else min(self.spares, self.engines)


class PoolRules:
    """The pool's decisions. Each door takes ``now`` (seconds, the caller's clock) and returns the
    actions to carry out, in order."""

    def __init__(self, config: PoolConfig) -> None:
        self.config = config
        self.engines: dict[int, PoolEngine] = {}
        self.waiting: deque[Waiting] = deque()
        #: Prompts given to an engine and not yet settled: request -> engine number.
        self.running: dict[str, int] = {}
        #: Conversation -> the engine it holds (R3).
        self.held: dict[str, int] = {}
        #: Running prompts of a conversation: request -> conversation (R12's order).
        self.running_conversation: dict[str, str] = {}
        #: Running prompts whose receipt is out while their engine records the exchange (R12):
        #: :meth:`status` shows them done and their engine ``recording``; the engine is not
        #: free until :meth:`settled` (issue 42: status said "running" after the receipt).
        self.recording: set[str] = set()
        self._numbers = 0
        #: Why no engine is started any more (R9), or None.
        self.down: str | None = None
        self.closing = False
        self.draining = False
        self.drain_until: float | None = None
        self.closed = False

    # -- doors ---------------------------------------------------------------------------

    def open(self, now: float) -> list[PoolAction]:
        """The pool opens: its spares start (R5)."""
        return self._step(now)

    def submit(self, request: str, conversation: str | None, now: float, size: int = 0) -> list[PoolAction]:
        """A prompt (``size`` bytes: :func:`~bridge.core.framing.prompt_bytes`) is accepted:
        placed now, queued, or rejected (R8, R9, R10)."""
        if self.closing or self.draining:
            return [Reject(request, Reason.CLOSING)]
        if self.down is not None and not self._live():
            return [Reject(request, Reason.ENGINE_DOWN, self.down)]
        full = len(self.waiting) >= self.config.queue_max
        full = full or sum(w.size for w in self.waiting) + size > self.config.queue_bytes
        if size > self.config.queue_bytes or (full and self._engine_for(conversation) is None):
            return [Reject(request, Reason.QUEUE_FULL)]
        self.waiting.append(Waiting(request, conversation, size))
        return self._step(now)

    def started(self, engine: int, now: float) -> list[PoolAction]:
        """Engine ``engine``'s bridge is open and its engine checked: it is idle."""
        e = self.engines.get(engine)
        if e is None or e.state != EngineState.STARTING:
            return []
        e.state, e.idle_since = EngineState.IDLE, now
        actions: list[PoolAction] = [Notice({"type": "pool", "event": "engine-started", "engine": engine})]
        if self.closing:
            e.state = EngineState.STOPPING
            return [*actions, StopEngine(engine)]
        return actions + self._step(now)

    def failed(self, engine: int, why: str, now: float) -> list[PoolAction]:
        """Engine ``engine`` cannot run: it could not be started, or its bridge went down (R9)."""
        self.down = self.down or why
        actions: list[PoolAction] = [Notice({"type": "pool", "event": "engine-down", "engine": engine, "why": why})]
        e = self.engines.get(engine)
        if e is not None and e.state != EngineState.STOPPING:
            e.state = EngineState.STOPPING
            actions.append(StopEngine(engine))
        return actions + self._step(now)

    def receipted(self, request: str) -> None:
        """A given prompt's receipt went out; its engine still records the exchange (R12) and
        is not free until :meth:`settled`. Only what :meth:`status` shows changes."""
        if request in self.running:
            self.recording.add(request)

    def settled(self, request: str, now: float, *, kept: bool = True) -> list[PoolAction]:
        """A given prompt's receipt came: its engine is idle again. ``kept=False`` (R12): its
        conversation's exchange was not recorded, so its engine no longer holds the stored copy."""
        number = self.running.pop(request, None)
        self.running_conversation.pop(request, None)
        self.recording.discard(request)
        e = self.engines.get(number) if number is not None else None
        if e is not None and e.state == EngineState.BUSY and e.request == request:
            e.state, e.request, e.idle_since = EngineState.IDLE, None, now
            e.current = e.current and kept
        return self._step(now)

    def restarted(self, engine: int, now: float) -> list[PoolAction]:
        """R12: engine ``engine``'s engine process ended or was replaced (a crash, a kill, a recycle):
        the conversation it holds is not in it."""
        e = self.engines.get(engine)
        if e is not None:
            e.current = False
        return self._step(now)

    def unusable(self, engine: int, now: float) -> list[PoolAction]:
        """R12: engine ``engine`` failed to take a conversation up: it is stopped."""
        e = self.engines.get(engine)
        if e is None or e.state == EngineState.STOPPING:
            return self._step(now)
        if e.conversation is not None:
            self.held.pop(e.conversation, None)
            e.conversation = None
        e.state = EngineState.STOPPING
        return [StopEngine(engine), *self._step(now)]

    def cleaned(self, engine: int, now: float) -> list[PoolAction]:
        """R13: engine ``engine`` is clean: idle again, free for any prompt."""
        e = self.engines.get(engine)
        if e is None or e.state != EngineState.CLEANING:
            return self._step(now)
        e.state, e.dirty, e.idle_since = EngineState.IDLE, False, now
        return self._step(now)

    def unclean(self, engine: int, why: str, now: float) -> list[PoolAction]:
        """R13: engine ``engine`` could not be cleaned (``why``): stopped, never given a prompt."""
        e = self.engines.get(engine)
        if e is None or e.state == EngineState.STOPPING:
            return self._step(now)
        e.state = EngineState.STOPPING
        note = Notice({"type": "pool", "event": "clean-failed", "engine": engine, "why": why})
        return [note, StopEngine(engine), *self._step(now)]

    def gone(self, engine: int, now: float) -> list[PoolAction]:
        """Engine ``engine``'s bridge has closed (stopped, or ended on its own)."""
        e = self.engines.pop(engine, None)
        if e is None:
            return self._step(now)
        actions: list[PoolAction] = [Notice({"type": "pool", "event": "engine-stopped", "engine": engine})]
        if e.conversation is not None and self.config.moves:
            self.held.pop(e.conversation, None)  # R12: released, not lost
        elif e.conversation is not None:
            lost = self._lose(e, "its engine ended")
            if not self.closing:  # (closing ends every conversation: nothing to tell)
                actions += lost
        return actions + self._step(now)

    def stop(self, request: str, now: float) -> list[PoolAction]:
        """Stop a prompt: a waiting one is rejected ``cancelled`` (R11); else nothing here."""
        for w in self.waiting:
            if w.request == request:
                self.waiting.remove(w)
                return [Reject(request, Reason.CANCELLED), *self._step(now)]
        return []

    def end_conversation(self, conversation: str, now: float) -> list[PoolAction]:
        """The conversation is over: its engine is free again (its next prompt is fresh)."""
        number = self.held.pop(conversation, None)
        if number is not None and number in self.engines:
            self.engines[number].conversation, self.engines[number].current = None, False
        return self._step(now)

    def shutdown(self, now: float, drain_timeout: float | None = None) -> list[PoolAction]:
        """No new prompts; the accepted ones run to their receipts (past ``drain_timeout``: R10's
        close, running prompts stopped ``failed``/``timeout``); then the pool closes."""
        if self.closing or self.draining:
            return []
        self.draining = True
        self.drain_until = now + drain_timeout if drain_timeout is not None else None
        return self._step(now)

    def close(self, now: float, *, drain_expired: bool = False) -> list[PoolAction]:
        """Close now (R10)."""
        if self.closing:
            return self._step(now)
        self.closing = True
        actions: list[PoolAction] = [Reject(w.request, Reason.CLOSING) for w in self.waiting]
        self.waiting.clear()
        for e in self.engines.values():
            if e.state in (EngineState.IDLE, EngineState.BUSY, EngineState.CLEANING):
                e.state = EngineState.STOPPING
                actions.append(StopEngine(e.number, drain_expired=drain_expired and e.request is not None))
        return actions + self._step(now)

    def tick(self, now: float) -> list[PoolAction]:
        """The time is ``now``: a drain's bound, idle timeouts (R7)."""
        if self.draining and not self.closing and self.drain_until is not None and now >= self.drain_until:
            return self.close(now, drain_expired=True)
        return self._step(now)

    def next_deadline(self) -> float | None:
        """When :meth:`tick` has something to do next, or None."""
        times: list[float] = []
        if self.draining and not self.closing and self.drain_until is not None:
            times.append(self.drain_until)
        timeout = self.config.idle_timeout
        if timeout is not None and not self.closing:
            times += [e.idle_since + timeout for e in self._reapable()]
        return min(times) if times else None

    # -- what is known -------------------------------------------------------------------

    @property
    def outstanding(self) -> int:
        """Prompts accepted and without their receipt (waiting or running)."""
        return len(self.waiting) + len(self.running)

    def status(self) -> dict[str, Any]:
        """Each engine (``state``: ``recording`` while it records a conversation's exchange
        whose receipt is out, R12), the waiting prompts, the running ones (receipt not out)."""
        return {
            "engines": [self._engine_status(e) for e in self.engines.values()],
            "waiting": [w.request for w in self.waiting],
            "running": {r: n for r, n in self.running.items() if r not in self.recording},
            "down": self.down,
            "closing": self.closing,
            "draining": self.draining,
        }

    def _engine_status(self, e: PoolEngine) -> dict[str, Any]:
        if e.request is not None and e.request in self.recording:
            return {"engine": e.number, "state": "recording", "conversation": e.conversation, "request": None}
        return {"engine": e.number, "state": e.state, "conversation": e.conversation, "request": e.request}

    # -- the one step after every door ----------------------------------------------------

    def _step(self, now: float) -> list[PoolAction]:
        if self.closed:
            return []
        actions = self._clean()
        actions += self._place(now)
        actions += self._clean()
        if not self.closing:
            actions += self._start(now)
            actions += self._reap(now)
            actions += self._give_up()
        if self.draining and not self.closing and not self.waiting and not self.running:
            actions += self.close(now)
        if self.closing and not self.engines and not self.running and not self.waiting:
            self.closed = True
            actions.append(Closed())
        return actions

    def _clean(self) -> list[PoolAction]:
        """R13: every idle engine that has run a prompt and holds no conversation is cleaned."""
        if not self.config.clean or self.closing:
            return []
        actions: list[PoolAction] = []
        for e in self.engines.values():
            if e.state == EngineState.IDLE and e.conversation is None and e.dirty:
                e.state = EngineState.CLEANING
                actions.append(Clean(e.number))
        return actions

    def _ready(self, e: PoolEngine) -> bool:
        """Idle and free, and clean if R13 applies: a prompt without a conversation (or a new one) may have it."""
        return e.state == EngineState.IDLE and e.conversation is None and not (self.config.clean and e.dirty)

    def _place(self, now: float) -> list[PoolAction]:
        """R1, R2, R3, R6: give each waiting prompt an engine, in order."""
        if self.closing:
            return []
        actions: list[PoolAction] = []
        blocked: set[str] = set()
        for w in list(self.waiting):
            if w.conversation is not None and w.conversation in blocked:
                continue
            if w.conversation is not None and w.conversation in self.running_conversation.values():
                blocked.add(w.conversation)  # R12: it reads the exchange that runs now
                continue
            e = self._engine_for(w.conversation)
            if e is None and (w.conversation not in self.held or self._movable(w.conversation)):
                e = self._free_engine() if w.conversation is not None and self.config.moves else None
                if e is None and not self._start_helps():
                    e, lost = self._evict()
                    actions += lost
                    if e is not None and self.config.clean and e.dirty:
                        e = None  # R13: cleaned first (below), then it takes the prompt
                        actions += self._clean()
            if e is None:
                if w.conversation is not None:
                    blocked.add(w.conversation)
                continue
            self.waiting.remove(w)
            actions += self._give(w, e)
        return actions

    def _give(self, w: Waiting, e: PoolEngine) -> list[PoolAction]:
        """Give ``w`` to ``e`` (R1, R2, R3, R12)."""
        actions: list[PoolAction] = []
        take_up: str | None = None
        if w.conversation is not None and self.config.moves and not (e.conversation == w.conversation and e.current):
            take_up = w.conversation
            before = self.held.get(w.conversation)
            if before is not None and before != e.number:
                self.engines[before].conversation, self.engines[before].current = None, False
                actions.append(
                    Notice(
                        {
                            "type": "pool",
                            "event": "conversation-moved",
                            "conversation": w.conversation,
                            "from": before,
                            "to": e.number,
                        }
                    )
                )
            e.conversation, e.current = w.conversation, True
            self.held[w.conversation] = e.number
        fresh = e.used and take_up is None and not (w.conversation is not None and e.conversation == w.conversation)
        if w.conversation is not None and e.conversation is None:
            e.conversation = w.conversation
            self.held[w.conversation] = e.number
        if w.conversation is None and self.config.moves:
            e.current = False
        e.state, e.request, e.used, e.dirty = EngineState.BUSY, w.request, True, True
        self.running[w.request] = e.number
        if w.conversation is not None:
            self.running_conversation[w.request] = w.conversation
        actions.append(Dispatch(w.request, e.number, fresh, take_up))
        return actions

    def _movable(self, conversation: str | None) -> bool:
        """R12: the conversation's engine cannot take it now (busy with another's, starting, stopping)."""
        return self.config.moves and conversation is not None

    def _free_engine(self) -> PoolEngine | None:
        free = [e for e in self.engines.values() if self._ready(e)]
        return max(free, key=lambda e: (e.idle_since, e.number)) if free else None

    def _engine_for(self, conversation: str | None) -> PoolEngine | None:
        if conversation is not None and conversation in self.held:
            e = self.engines[self.held[conversation]]
            return e if e.state == EngineState.IDLE else None
        free = [e for e in self.engines.values() if self._ready(e)]
        return max(free, key=lambda e: (e.idle_since, e.number)) if free else None

    def _start_helps(self) -> bool:
        """A start is coming or can be made: no eviction yet (R6)."""
        counted = [e for e in self.engines.values() if e.state != EngineState.STOPPING]
        starting = any(e.state in (EngineState.STARTING, EngineState.CLEANING) for e in counted)
        return starting or (self.down is None and len(counted) < self.config.engines)

    def _evict(self) -> tuple[PoolEngine | None, list[PoolAction]]:
        held = [e for e in self.engines.values() if e.state == EngineState.IDLE and e.conversation is not None]
        if not held:
            return None, []
        e = min(held, key=lambda e: (e.idle_since, e.number))
        return e, self._lose(e, "its engine was needed for another prompt")

    def _lose(self, e: PoolEngine, why: str) -> list[PoolAction]:
        """R3: ``e``'s conversation no longer holds it; told (R12: released, kept by the pool)."""
        conversation, e.conversation = e.conversation, None
        assert conversation is not None
        self.held.pop(conversation, None)
        if self.config.moves:
            e.current = False
            return []
        lost = {"type": "pool", "event": "conversation-lost", "conversation": conversation, "engine": e.number}
        return [Notice({**lost, "why": why})]

    def _start(self, now: float) -> list[PoolAction]:
        """R4, R5: start engines for unplaceable waiting prompts and for the spares."""
        if self.down is not None:
            return []
        counted = [e for e in self.engines.values() if e.state != EngineState.STOPPING]
        # R13: an engine being cleaned is a free one coming, as a start is.
        starting = sum(1 for e in counted if e.state in (EngineState.STARTING, EngineState.CLEANING))
        free_ready = sum(1 for e in counted if e.conversation is None and e.state != EngineState.BUSY)
        # Waiting prompts that a new engine could take (a conversation's first counts once).
        unplaced = sum(1 for w in self.waiting if w.conversation is None)
        homeless = set(self.held)
        if self.config.moves:  # R12: a conversation whose engine is busy with another's can move
            running = set(self.running_conversation.values())
            homeless = {c for c, n in self.held.items() if self.engines[n].state == EngineState.IDLE or c in running}
        unplaced += len({w.conversation for w in self.waiting if w.conversation is not None} - homeless)
        wanted = max(unplaced - starting, self.config.warm - free_ready, 0)
        room = self.config.engines - len(counted)
        actions: list[PoolAction] = []
        for _ in range(min(wanted, room)):
            self._numbers += 1
            self.engines[self._numbers] = PoolEngine(self._numbers, idle_since=now)
            actions.append(StartEngine(self._numbers))
        return actions

    def _reapable(self) -> list[PoolEngine]:
        """Idle engines R7 may stop: all but the ``spares`` free ones used most recently."""
        idle = [e for e in self.engines.values() if e.state == EngineState.IDLE]
        free = sorted((e for e in idle if e.conversation is None), key=lambda e: (e.idle_since, e.number))
        kept = {e.number for e in free[len(free) - self.config.warm :]} if self.config.warm else set()
        return [e for e in idle if e.number not in kept]

    def _reap(self, now: float) -> list[PoolAction]:
        timeout = self.config.idle_timeout
        if timeout is None:
            return []
        actions: list[PoolAction] = []
        for e in self._reapable():
            if now >= e.idle_since + timeout:
                if e.conversation is not None:
                    actions += self._lose(e, "its engine was idle for the pool's idle timeout")
                e.state = EngineState.STOPPING
                actions.append(StopEngine(e.number))
                actions.append(Notice({"type": "pool", "event": "engine-reaped", "engine": e.number}))
        return actions

    def _give_up(self) -> list[PoolAction]:
        """R9: once down, waiting prompts with no engine left to run on are rejected."""
        if self.down is None or self._live():
            return []
        actions: list[PoolAction] = [Reject(w.request, Reason.ENGINE_DOWN, self.down) for w in self.waiting]
        self.waiting.clear()
        return actions

    def _live(self) -> bool:
        return any(e.state != EngineState.STOPPING for e in self.engines.values())
