"""The dispatch of a pool across machines (a Ray pool, :mod:`bridge.ray`): which prompt goes to
which engine, and what a lost node or actor costs (SPEC §5 "Across machines", §7).

The model. A *lane* is one engine actor: a worker process on some node running one bridge and
its sealed engine. The driver holds every prompt until a lane is free, and a lane holds at
most one prompt at a time, so what the driver knows of a prompt is exactly its *stage*:

- ``queued``: in the driver's FIFO; certainly never written to any engine;
- ``handed``: given to a lane; from here it may have been written to that lane's engine;
- ``running``: the lane reported the prompt's run started (its first event): the model had it;
- ``settled``: its one receipt is decided.

What cannot be known, and is not guessed: a lane reports over the network, so a report lags
what the lane did. A lane lost after ``handed`` may have written the prompt, and one lost
after ``running`` may have finished it a moment ago. Only the driver's own queue is certain.

The rules (tests/test_dispatch.py, one test per rule):

- D1 a prompt is handed only to a live, idle lane, in submit order (the FIFO).
- D2 a receipt that comes back from the lane the prompt was handed to settles it, with
  :class:`~bridge.core.receipts.Where` it ran; any other receipt (a late or a second one, one
  from a lane that was already counted lost) is dropped: never two receipts.
- D3 a lane lost (its actor died, its node went) settles the prompt it held:
  ``outcome-unknown``/``node-lost`` if the lane had reported it running, else
  ``delivery-unknown``/``node-lost`` (the decision table's rows 14 and 15); ``nativeError``
  names the node and says where its journal stays. Such a prompt is never sent again: it may
  have been written, and a second run is not the first one's receipt.
- D4 a queued prompt is not lost with a lane: it waits for the next live lane.
- D5 with no live lane left, every queued prompt and every new one is ``rejected``/
  ``engine-down``: never written, nothing left to write it.
- D6 closing: queued prompts and new ones are ``rejected``/``closing``; handed ones keep their
  lanes until their receipts come back (or their lanes are lost).
- D7 a lane whose node has lost another lane is *in doubt* (:meth:`Dispatch.in_doubt`): the
  node may be gone before the cluster says so, and a prompt handed to a dead actor would cost
  an unknown for a prompt never written. Before it is handed a prompt, the live layer asks
  the actor whether it still answers; one that does not is lost with nothing handed.
- D8 a lane whose bridge rejects a prompt ``engine-down`` (its engine is down for good) or
  ``closing`` (while the pool is not closing) can run nothing more: it is retired, and the
  prompt -- certainly never written -- goes back to the head of the FIFO for another lane.
- D9 a stop (:meth:`Dispatch.stop`): a queued prompt leaves the FIFO ``rejected``/``cancelled``,
  never written (as one bridge's queued prompt: the decision table's row 1); a handed or running
  one is its lane's to stop -- the live layer asks that actor's bridge, and the receipt its rules
  give comes back as any other (D2), or the lane's loss decides it (D3); a settled prompt, or
  one never submitted, is left alone.
- D10 conversations (issue 42: the Ray pool takes ``conversation=`` keys as a local pool does,
  its rules R1-R3 and R6 without R12's moves: a conversation's context lives in one actor's
  engine). A prompt may carry a *conversation* key. Its conversation's *home* is the lane that
  took its first prompt; the key's later prompts go to that lane alone, in order, and continue
  its conversation there. Every other prompt -- no key, or a key with no home -- starts afresh
  (a lane that ran a prompt before starts a new conversation first: no prompt reads another's
  words), on a lane that is home to no conversation. When every live lane is a home, the idle
  one whose conversation was handed a prompt longest ago and has none waiting gives its home
  up (R6's eviction; the conversation is *released*: its next prompt starts afresh). A home
  lost with its lane (D3, D8) or given up is told in :meth:`Dispatch.status`'s ``released``
  (key -> why), until the key's next prompt is handed; :meth:`Dispatch.end_conversation` ends
  a key after the prompts already submitted under it, and its next prompt starts afresh.

Invariant: every prompt :meth:`Dispatch.submit` accepts gets exactly one receipt, returned by
exactly one of :meth:`~Dispatch.submit`, :meth:`~Dispatch.settled`, :meth:`~Dispatch.lost`,
:meth:`~Dispatch.stop` or :meth:`~Dispatch.close`. Pure: no Ray, no trio, no clock; the live layer (``bridge/ray/pool.py``)
tells it what happened and delivers the receipts it returns.
"""

from __future__ import annotations

from collections import deque
from enum import StrEnum
from typing import Final

import attrs

from bridge.core.receipts import Facts, Receipt, Where, decide
from bridge.core.words import Reason, State

#: Rejections by a lane's bridge that say it can run nothing more (its engine is down for good:
#: the crash limit, an engine that cannot start; or it is closing while the pool is not), so
#: the prompt, certainly never written, goes to another lane (D8).
_LANE_DOWN: Final = frozenset({Reason.ENGINE_DOWN, Reason.CLOSING})


class Stage(StrEnum):
    """What the driver knows of one prompt (the module's docstring says what each means)."""

    QUEUED = "queued"
    HANDED = "handed"
    RUNNING = "running"
    SETTLED = "settled"


@attrs.frozen
class Lane:
    """One engine actor, as the driver knows it: a name of the pool's and where it runs."""

    name: str
    where: Where


@attrs.define
class _LaneState:
    lane: Lane
    alive: bool = True
    #: The prompt handed to it and not yet settled.
    holding: str | None = None
    #: Why it was lost (once it was).
    lost_why: str | None = None
    #: The conversation it is home to (D10), or None.
    conversation: str | None = None
    #: When it was last handed a prompt (the dispatch's own count: D10's "longest ago").
    handed_at: int = 0


@attrs.define
class _Prompt:
    request: str
    stage: Stage = Stage.QUEUED
    lane: str | None = None
    #: Its conversation's key (D10), or None.
    conversation: str | None = None
    #: It continues its lane's conversation (D10); False: the lane starts a new one first.
    continues: bool = False


class Dispatch:
    """One pool's prompts and lanes (the module's docstring has the rules)."""

    def __init__(self) -> None:
        self._lanes: dict[str, _LaneState] = {}
        self._prompts: dict[str, _Prompt] = {}
        self._queue: deque[str] = deque()
        self._closing = False
        #: D10: each conversation's home lane; why a conversation lost its home; the last
        #: request submitted under a key that is to end after it.
        self._homes: dict[str, str] = {}
        self._released: dict[str, str] = {}
        self._ends: dict[str, str] = {}
        self._handed = 0

    # -- lanes

    def add_lane(self, lane: Lane) -> None:
        """A lane is up (its actor answered). Raises ValueError for a name already used."""
        if lane.name in self._lanes:
            raise ValueError(f"lane {lane.name!r} is already in the pool")
        self._lanes[lane.name] = _LaneState(lane)

    @property
    def live_lanes(self) -> list[str]:
        return [name for name, s in self._lanes.items() if s.alive]

    def in_doubt(self, lane: str) -> bool:
        """``lane``'s node has lost another lane (D7): ask its actor before handing it a prompt."""
        node = self._lanes[lane].lane.where.node
        return any(not s.alive and s.lane.where.node == node for s in self._lanes.values())

    def lane(self, name: str) -> Lane:
        """A lane by its name. Raises KeyError for a name not in the pool."""
        return self._lanes[name].lane

    def lanes_on(self, node: str) -> list[str]:
        """The live lanes on ``node``."""
        return [name for name, s in self._lanes.items() if s.alive and s.lane.where.node == node]

    def status(self) -> dict[str, dict[str, str | bool | None]]:
        """Each lane: its node, whether it is live, the prompt it holds and that prompt's stage."""
        return {
            name: {
                "node": s.lane.where.node,
                "alive": s.alive,
                "holding": s.holding,
                "stage": self._prompts[s.holding].stage.value if s.holding is not None else None,
                "conversation": s.conversation,
            }
            for name, s in self._lanes.items()
        }

    @property
    def released(self) -> dict[str, str]:
        """D10: conversations that lost their home (their lane lost, or given up to another
        prompt), and why; each until its key's next prompt is handed (it starts afresh)."""
        return dict(self._released)

    def lane_of(self, request: str) -> Lane | None:
        """The lane a prompt was handed to (None: never handed)."""
        p = self._prompts.get(request)
        return self._lanes[p.lane].lane if p is not None and p.lane is not None else None

    # -- prompts

    def submit(self, request: str, conversation: str | None = None) -> Receipt | None:
        """Accept a prompt, under a conversation's key or none (D10): None (it waits in the
        FIFO), or its receipt at once (D5, D6). Raises ValueError for an id already submitted
        to this pool."""
        if request in self._prompts:
            raise ValueError(f"prompt id {request!r} was already submitted to this pool")
        self._prompts[request] = _Prompt(request, conversation=conversation)
        if self._closing:
            return self._settle(request, decide(Facts(unsent=Reason.CLOSING)), "the pool is closing")
        if not self.live_lanes:
            return self._settle(request, decide(Facts(unsent=Reason.ENGINE_DOWN)), _no_lanes(self._lanes))
        self._queue.append(request)
        return None

    def stage(self, request: str) -> Stage:
        """A submitted prompt's stage. Raises KeyError for an id never submitted."""
        return self._prompts[request].stage

    @property
    def queued(self) -> list[str]:
        return list(self._queue)

    @property
    def outstanding(self) -> int:
        """Prompts without their receipt yet."""
        return sum(1 for p in self._prompts.values() if p.stage is not Stage.SETTLED)

    def take(self, lane: str) -> str | None:
        """The next queued prompt ``lane`` may run, now handed to it (D1, D10); None when there
        is none. Raises ValueError for a lane that is lost or already holds a prompt."""
        s = self._lanes[lane]
        if not s.alive or s.holding is not None:
            raise ValueError(f"lane {lane!r} cannot take a prompt ({'holds ' + s.holding if s.holding else 'lost'})")
        request = self._next_for(lane)
        if request is None:
            return None
        self._queue.remove(request)
        p = self._prompts[request]
        p.stage, p.lane = Stage.HANDED, lane
        s.holding = request
        self._handed += 1
        s.handed_at = self._handed
        key = p.conversation
        if key is not None and self._homes.get(key) == lane:
            p.continues = True
        else:
            if s.conversation is not None:  # given up (D10's eviction): told, and forgotten
                self._released[s.conversation] = f"its engine actor {lane} was needed for another prompt"
                del self._homes[s.conversation]
                s.conversation = None
            if key is not None:
                self._homes[key], s.conversation = lane, key
                self._released.pop(key, None)
        return request

    def continues(self, request: str) -> bool:
        """D10: a handed prompt continues its lane's conversation (False: the lane starts a new
        conversation first, if it ran a prompt before). Raises KeyError for an unknown id."""
        return self._prompts[request].continues

    def end_conversation(self, conversation: str) -> None:
        """D10: the key's conversation ends after the prompts already submitted under it; the
        key's next prompt starts afresh (its home lane takes other prompts again)."""
        last = [r for r, p in self._prompts.items() if p.conversation == conversation and p.stage is not Stage.SETTLED]
        if last:
            self._ends[conversation] = last[-1]
        else:
            self._end_now(conversation)

    def _end_now(self, conversation: str) -> None:
        self._ends.pop(conversation, None)
        self._released.pop(conversation, None)
        lane = self._homes.pop(conversation, None)
        if lane is not None:
            self._lanes[lane].conversation = None
        for p in self._prompts.values():  # (a later prompt under the key is a new conversation)
            if p.conversation == conversation and p.stage is Stage.SETTLED:
                p.conversation = None

    def _next_for(self, lane: str) -> str | None:
        """D10's choice for an idle ``lane``: the first queued prompt it may run, the FIFO's
        order kept within each conversation."""
        s = self._lanes[lane]
        blocked: set[str] = set()  # conversations whose earlier prompt waits for another lane
        homes_free = [n for n, t in self._lanes.items() if t.alive and t.conversation is None]
        for request in self._queue:
            key = self._prompts[request].conversation
            if key is not None:
                if key in blocked:
                    continue
                home = self._homes.get(key)
                if home == lane:
                    return request
                if home is not None:
                    blocked.add(key)
                    continue
            if s.conversation is None:
                return request
            if not homes_free and self._may_give_up(lane):
                return request
            if key is not None:
                blocked.add(key)
        return None

    def _may_give_up(self, lane: str) -> bool:
        """D10: every live lane is a home; ``lane`` gives its home up when it is the idle home
        handed a prompt longest ago and its conversation has no prompt waiting."""
        waiting = {self._prompts[r].conversation for r in self._queue}
        idle = [
            (t.handed_at, n)
            for n, t in self._lanes.items()
            if t.alive and t.holding is None and t.conversation is not None and t.conversation not in waiting
        ]
        return bool(idle) and min(idle)[1] == lane

    def running(self, lane: str, request: str) -> None:
        """``lane`` reported ``request``'s run started. A report about a prompt the lane does
        not hold (late, or from a lane already lost) changes nothing."""
        p = self._prompts.get(request)
        if p is not None and p.lane == lane and p.stage is Stage.HANDED and self._lanes[lane].alive:
            p.stage = Stage.RUNNING

    def settled(self, lane: str, receipt: Receipt) -> list[Receipt]:
        """``lane`` sent back a receipt: the prompt's receipt, with where it ran (D2); nothing
        when it is dropped (not the lane the prompt was handed to, the prompt settled already,
        or the lane was counted lost). A rejection that says the lane's bridge can run nothing
        retires the lane and sends the prompt to another (D8): nothing, or -- with no live lane
        left -- every queued prompt's ``rejected``/``engine-down`` (D5)."""
        request = receipt.request
        p = self._prompts.get(request) if request is not None else None
        s = self._lanes.get(lane)
        if p is None or s is None or p.lane != lane or p.stage is Stage.SETTLED or not s.alive:
            return []
        s.holding = None
        if receipt.state == State.REJECTED and receipt.reason in _LANE_DOWN and not self._closing:
            s.alive, s.lost_why = False, f"its bridge {receipt.reason}: {receipt.native_error or 'no reason given'}"
            self._homeless(s, f"its engine actor {lane} was retired: {s.lost_why}")
            p.stage, p.lane = Stage.QUEUED, None
            self._queue.appendleft(p.request)
            return self._reject_queue(Reason.ENGINE_DOWN, _no_lanes(self._lanes)) if not self.live_lanes else []
        p.stage = Stage.SETTLED
        self._ended(p)
        return [attrs.evolve(receipt, where=s.lane.where)]

    def retired(self, lane: str) -> bool:
        """``lane`` was taken out of the pool (lost, or its bridge down: D8)."""
        return not self._lanes[lane].alive

    def lost(self, lane: str, why: str) -> list[Receipt]:
        """``lane`` is gone (its actor died or its node went; ``why``: what the cluster said).
        The receipt of the prompt it held, if any (D3), and -- when it was the last live lane --
        every queued prompt's ``rejected``/``engine-down`` (D5). A lane lost twice: nothing."""
        s = self._lanes[lane]
        if not s.alive:
            return []
        s.alive, s.lost_why = False, why
        self._homeless(s, f"its engine actor {lane} was lost: {why}")
        out: list[Receipt] = []
        if s.holding is not None:
            request, s.holding = s.holding, None
            working = self._prompts[request].stage is Stage.RUNNING
            verdict = decide(Facts(lost=True, working=working))
            out.append(self._settle(request, verdict, _lost_words(s.lane, working, why), s.lane.where))
        if not self.live_lanes:
            out += self._reject_queue(Reason.ENGINE_DOWN, _no_lanes(self._lanes))
        return out

    def stop(self, request: str) -> tuple[Receipt | None, str | None]:
        """A stop for ``request`` (D9): ``(its receipt, None)`` for a queued prompt, now out of the
        FIFO; ``(None, its lane)`` for a handed or running one, whose bridge is to stop it;
        ``(None, None)`` for a settled prompt or an id never submitted."""
        p = self._prompts.get(request)
        if p is None or p.stage is Stage.SETTLED:
            return None, None
        if p.stage is Stage.QUEUED:
            self._queue.remove(request)
            return self._settle(
                request, decide(Facts(unsent=Reason.CANCELLED)), "stopped before an engine took it"
            ), None
        return None, p.lane

    def close(self) -> list[Receipt]:
        """The pool is closing: every queued prompt's ``rejected``/``closing`` (D6). Handed
        prompts keep their lanes: their receipts (or their lanes' losses) still come."""
        self._closing = True
        return self._reject_queue(Reason.CLOSING, "the pool is closing")

    # -- helpers

    def _homeless(self, s: _LaneState, why: str) -> None:
        """D10: the conversation ``s`` was home to loses it (``s`` is lost or retired)."""
        if s.conversation is not None:
            self._homes.pop(s.conversation, None)
            self._released[s.conversation] = why
            s.conversation = None

    def _ended(self, p: _Prompt) -> None:
        """D10: ``p`` (now settled) was the last prompt before its key's end."""
        if p.conversation is not None and self._ends.get(p.conversation) == p.request:
            self._end_now(p.conversation)

    def _reject_queue(self, reason: Reason, words: str) -> list[Receipt]:
        out = [self._settle(r, decide(Facts(unsent=reason)), words) for r in self._queue]
        self._queue.clear()
        return out

    def _settle(
        self, request: str, verdict: tuple[State, Reason | None], words: str, where: Where | None = None
    ) -> Receipt:
        self._prompts[request].stage = Stage.SETTLED
        self._ended(self._prompts[request])
        state, reason = verdict
        return Receipt(request, state, reason, native_error=words, where=where)


def _lost_words(lane: Lane, working: bool, why: str) -> str:
    """A ``node-lost`` receipt's ``nativeError``: which node, what was known, where its journal stays."""
    w = lane.where
    known = "its run had started there" if working else "it was handed to the actor there, no run reported"
    journal = f"; its journal stays on that node: {w.journal}" if w.journal else ""
    actor = f", actor {w.actor}" if w.actor else ""
    return f"lost the Ray node {w.node}{f' ({w.address})' if w.address else ''}{actor} with the prompt on it ({known}): {why}{journal}"


def _no_lanes(lanes: dict[str, _LaneState]) -> str:
    if not lanes:
        return "the pool has no engine actor"
    gone = "; ".join(f"{s.lane.name} on node {s.lane.where.node}: {s.lost_why}" for s in lanes.values())
    return f"every engine actor of the pool was lost ({gone})"
