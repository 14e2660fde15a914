"""The pure lifecycle (bridge/core/lifecycle.py) against SPEC §5 and §7.

Two parts:

- :class:`LifecycleMachine`, a hypothesis state machine over the pure core.
  The harness (:class:`Harness`) plays the trio layer and the engine the way
  bridge/live/supervisor.py does, abstractly: it keeps the clock (a float that only
  grows), carries out every action a step returns (a ``GiveUp`` is answered at
  once with a ``Decided``, fed back before the next input, like the trio
  layer's input queue), models the engine processes (spawn pending, running,
  asked to stop, gone) and records what the controller sees. It checks the
  contract after every input and after every rule;
- small scripted sequences, one per contract break the spec names.

``decide``'s table is tested elsewhere (tests/test_decision.py).

Set ``LIFECYCLE_EXAMPLES`` (and ``LIFECYCLE_STEPS``) to search harder than CI
does; with them set the search is randomised too.
"""

from __future__ import annotations

import copy
import json
import math
import os
import sys
from collections import deque
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from bridge.core.lifecycle import (
    DEADLINES,
    HELD_DEADLINES,
    SIGNALS_PER_GENERATION,
    Acked,
    Activity,
    Answer,
    AnswerDialog,
    Answered,
    Ask,
    AskDialog,
    BridgeConfig,
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
    LifeState,
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
    Submit,
    Tick,
    Unsealed,
    Write,
    WriteFailed,
    restore,
    snapshot,
    step,
)
from bridge.core.receipts import Facts, Receipt, Usage, decide
from bridge.core.steering import Wanted
from bridge.core.words import Reason

SEAL_STATE = {"type": "get_state", "id": "seal-state"}
LICENCE = "fatal: licence file expired"


def small_config(**changes: Any) -> BridgeConfig:
    """Short timeouts and limits, so every path is a few steps away."""
    base: dict[str, Any] = {
        "queue_max": 3,
        "ack_timeout": 5.0,
        "stop_grace": 2.0,
        "taint_grace": 2.0,
        "startup_timeout": 4.0,
        "crash_limit": 3,
        "crash_window": 12.0,
        "close_grace": 3.0,
        "restart_backoff": (0.0, 1.0, 2.5),
        "stall_timeout": None,
    }
    return BridgeConfig(**{**base, **changes})


def receipt(request: str, facts: Facts, stop: str | None = None) -> Receipt:
    state, reason = decide(facts)
    return Receipt(request=request, state=state, reason=reason, stop=stop)


# --------------------------------------------------------------------------
# The harness: the trio layer and the engine, abstractly


class Harness:
    """Feeds a :class:`Lifecycle` and carries out its actions as the supervisor does.

    ``check``: after every input, step a deep copy with the module-level
    :func:`step` and compare (determinism, purity), and round-trip the state
    through :func:`snapshot` / :func:`restore`."""

    def __init__(self, config: BridgeConfig | None = None, *, check: bool = True) -> None:
        self.cfg = config or small_config()
        self.lc = Lifecycle(self.cfg)
        self.check = check
        self.now = 0.0
        #: Every action, in order.
        self.log: list[Any] = []
        #: Engine processes: generation -> "running" | "stopping"; spawns not answered yet.
        self.procs: dict[int, str] = {}
        self.pending_spawns: set[int] = set()
        self.stop_requested: dict[int, bool] = {}
        #: What each engine was given: its prompt, the stop ids it was sent, start-up commands.
        self.engine_has: dict[int, str] = {}
        self.aborts: dict[int, set[str]] = {}
        self.startup_pending: set[int] = set()
        #: The configuration command each engine was last given (generation -> (request, command)).
        self.config_pending: dict[int, tuple[str, dict[str, Any]]] = {}
        #: Questions asked, written to each engine, and the answers the controller got.
        self.asked: list[str] = []
        self.asks_written: dict[int, list[dict[str, Any]]] = {}
        self.answers: dict[str, list[Any]] = {}
        #: (write, closing had begun when it was written)
        self.writes: list[tuple[Write, bool]] = []
        self.closing_noted = False
        self.down_signalled = False
        #: What the controller sees.
        self.receipts: dict[str, list[Receipt]] = {}
        self.accepted: list[str] = []
        self.refused: list[str] = []
        self.controller_stopped: set[str] = set()
        self.stop_notes: dict[str, tuple[str, str]] = {}
        self.acked: set[str] = set()
        self.closed = 0
        self.violations: list[str] = []
        #: The journal: it fails at the next action journaled (``breaks``), and
        #: from then on prompt and start-up writes are held back (``failed``).
        self.journal_breaks: str | None = None
        self.journal_failed: str | None = None
        #: Extension dialogs: the engine ids opened, the ones asked of the controller (dialog ->
        #: engine id), the responses written per engine id, and each dialog's ends.
        self.dialogs_opened = 0
        self.dialogs_asked: dict[str, Any] = {}
        self.dialog_writes: dict[Any, list[dict[str, Any]]] = {}
        self.dialog_ends: dict[str, list[DialogEnded]] = {}

    # -- the door -------------------------------------------------------------

    def feed(self, event: Any, *, check: bool | None = None) -> list[Any]:
        """Step with ``event`` and carry out the actions; inputs the actions cause
        (a GiveUp's Decided) are fed next, before anything else. Returns every action."""
        check = self.check if check is None else check
        inputs: deque[Any] = deque([event])
        out: list[Any] = []
        while inputs:
            ev = inputs.popleft()
            data = snapshot(self.lc.state) if check else None
            actions = self.lc.step(ev, self.now)
            if data is not None:
                self._check_step(data, ev, actions)
            failure = None
            for action in actions:
                breaks = self.journal_breaks is not None and type(action) in (Write, Deliver, Note, Signal)
                if breaks and type(action) is Write:
                    self._carry_out(action, inputs)  # journaled (badly) and written all the same
                if breaks:
                    # The journal fails writing this action down; what the step writes
                    # after it is held back, and JournalFailed is fed once the step's
                    # actions have run (as the supervisor does).
                    failure = self.journal_failed = self.journal_breaks
                    self.journal_breaks = None
                if not (breaks and type(action) is Write):
                    self._carry_out(action, inputs)
            if failure is not None:
                inputs.append(JournalFailed(failure))
            out.extend(actions)
            self.log.extend(actions)
        return out

    def _check_step(self, data: dict[str, Any], ev: Any, actions: list[Any]) -> None:
        """``data``: the state before the step, as :func:`snapshot` gave it. The
        same input on a copy of that state (made by the round trip) gives the
        same state and actions, and leaves the copy as it was."""
        state = self.lc.state
        before = restore(data)
        again, again_actions = step(before, ev, self.now, self.cfg)
        assert snapshot(before) == data, "step() changed the state it was given"
        assert again == state, f"step is not deterministic for {ev!r}"
        assert again_actions == actions, f"step is not deterministic for {ev!r}"
        # (The state after it round-trips: LifecycleMachine.the_state_round_trips.)
        # One crash per unrequested exit or failed check, never two.
        assert len(state.crashes) <= len(before.crashes) + 1, f"two crashes counted for {ev!r}"

    def _carry_out(self, action: Any, inputs: deque[Any]) -> None:
        s = self.lc.state
        kind = type(action)
        if kind is Spawn:
            if self.closing_noted:
                self.violations.append(f"{action!r} after closing began")
            if self.procs or self.pending_spawns:
                self.violations.append(f"{action!r} while another engine lives: {self.procs} {self.pending_spawns}")
            self.pending_spawns.add(action.generation)
        elif kind is Write and self.journal_failed is not None and action.kind in ("prompt", "startup"):
            # Held back: the journal failed first, so closing is about to begin.
            if action.kind == "prompt":
                inputs.append(NotWritten(action.generation, action.request))
        elif kind is Write:
            self.writes.append((action, self.closing_noted))
            if action.kind in ("prompt", "startup") and self.closing_noted:
                self.violations.append(f"{action.kind} written after closing began: {action!r}")
            if self.procs.get(action.generation) != "running":
                self.violations.append(f"{action!r} to an engine that is not running: {self.procs}")
            if action.kind == "prompt":
                self.engine_has[action.generation] = action.request
                if s.prompts[action.request].compact is not None:
                    self.violations.append(f"{action!r} written before the compaction asked for it")
                if action.request != s.held:
                    self.violations.append(f"{action!r} is not the held prompt {s.held!r}")
            elif action.kind == "abort":
                self.aborts.setdefault(action.generation, set()).add(action.cmd["id"])
            elif action.kind == "startup":
                self.startup_pending.add(action.generation)
            elif action.kind == "config":
                if action.request != s.held or s.prompts[action.request].phase != "configuring":
                    self.violations.append(f"{action!r} for a prompt not being configured")
                self.config_pending[action.generation] = (action.request, action.cmd)
            elif action.kind == "ask":
                self.asks_written.setdefault(action.generation, []).append(action.cmd)
            elif action.kind == "dialog":
                self.dialog_writes.setdefault(action.cmd["id"], []).append(action.cmd)
                if len(self.dialog_writes[action.cmd["id"]]) > 1:
                    self.violations.append(f"a second response for dialog {action.cmd['id']!r}")
        elif kind is AskDialog:
            if action.dialog in self.dialogs_asked:
                self.violations.append(f"{action.dialog!r} asked twice")
            self.dialogs_asked[action.dialog] = s.dialogs.open[action.dialog].engine_id
        elif kind is DialogEnded:
            self.dialog_ends.setdefault(action.dialog, []).append(action)
            # (Cancelled at once, never asked: nobody reads dialogs, closing, or its prompt is being stopped.)
            never_asked = action.dialog not in self.dialogs_asked and action.by not in (
                "no-controller",
                "closing",
                "stop",
            )
            if len(self.dialog_ends[action.dialog]) > 1 or never_asked:
                self.violations.append(f"{action!r}: a second end, or of a dialog never asked")
            if action.by != "controller" and action.answer not in (None, {"cancelled": True}):
                self.violations.append(f"{action!r}: an answer nobody gave")
        elif kind is GiveUp:
            rec = s.prompts.get(action.request)
            if rec is None or rec.phase != "held":
                self.violations.append(f"{action!r} for a prompt not held")
            # The evidence half's answer (bridge/core/session.py give_up), with "the model
            # had it" approximated by "it was acked".
            working = action.request in self.acked
            facts = (
                Facts(exited=True, working=working)
                if action.why == "exited"
                else Facts(gave_up=action.why, working=working)
            )
            inputs.append(Decided(receipt(action.request, facts)))
        elif kind is StopEngine:
            if self.procs.get(action.generation) == "running":
                self.procs[action.generation] = "stopping"
                self.stop_requested[action.generation] = action.requested
                self.startup_pending.discard(action.generation)
            else:  # the supervisor only stops a live engine of that generation
                self.violations.append(f"{action!r} for an engine not running: {self.procs}")
        elif kind is Deliver:
            request = action.receipt.request
            self.receipts.setdefault(request, []).append(action.receipt)
            if len(self.receipts[request]) > 1:
                self.violations.append(f"a second receipt for {request!r}: {self.receipts[request]}")
            if request not in self.accepted:
                self.violations.append(f"a receipt for {request!r}, never accepted")
            if request in s.prompts:
                self.violations.append(f"{request!r} delivered and still outstanding")
        elif kind is Note:
            payload = action.payload
            if payload.get("event") == "unsent":
                # The evidence half's answer (bridge/core/session.py note): never delivered.
                rec = s.prompts.get(payload["request"])
                if rec is None or rec.phase != "held" or payload["request"] != s.held or rec.acked:
                    self.violations.append(f"{action!r} for a prompt not held, or acked")
                inputs.append(Decided(receipt(payload["request"], Facts(unsent=Reason.ENGINE_DOWN))))
            elif payload.get("event") == "closing":
                if self.closing_noted:
                    self.violations.append("closing noted twice")
                self.closing_noted = True
            elif payload.get("event") == "stop":
                if payload["by"] not in ("controller", "timeout", "closing", "stall", "budget"):
                    self.violations.append(f"a stop by {payload['by']!r}")
                if payload["request"] in self.stop_notes:
                    self.violations.append(f"a second stop for {payload['request']!r}")
                self.stop_notes[payload["request"]] = (payload["stop"], payload["by"])
        elif kind is Signal:
            if action.payload.get("signal") == "engine-down":
                self.down_signalled = True
        elif kind is Closed:
            self.closed += 1
            if self.closed > 1:
                self.violations.append("Closed twice")
        elif kind is Answer:
            self.answers.setdefault(action.token, []).append(action)
            if len(self.answers[action.token]) > 1 or action.token not in self.asked:
                self.violations.append(f"{action!r}: a second answer, or one never asked for")
        elif kind in (Notify, StopAnswer, DialogReply):
            pass
        else:
            self.violations.append(f"an unknown action {action!r}")

    # -- the engine's side ------------------------------------------------------

    def spawned(self, generation: int, *, startup: bool = False, clearing: bool = True) -> list[Any]:
        self.pending_spawns.discard(generation)
        self.procs[generation] = "running"
        return self.feed(
            Spawned(
                generation,
                1000 + generation,
                argv=["pi", "--mode", "rpc"],
                startup=[dict(SEAL_STATE)] if startup else [],
                clearing=["clear_queue"] if clearing else [],
            )
        )

    def spawn_failed(self, generation: int) -> list[Any]:
        self.pending_spawns.discard(generation)
        return self.feed(SpawnFailed(generation, "cannot start"))

    def exited(
        self,
        generation: int,
        code: int | None = 0,
        signal: int | None = None,
        stderr: list[str] | None = None,
        refusal: str | None = None,
    ) -> list[Any]:
        self.procs.pop(generation, None)
        self.startup_pending.discard(generation)
        return self.feed(EngineExited(generation, code, signal, stderr=list(stderr or []), refusal=refusal))

    def settle(self, request: str, facts: Facts, stop: str | None = None) -> list[Any]:
        """The evidence half decided ``request``'s receipt (a settle, or the exit)."""
        return self.feed(Decided(receipt(request, facts, stop)))

    def advance(self, dt: float) -> list[Any]:
        self.now += dt
        return self.feed(Tick())

    def submit(self, request: str, timeout: float | None = None, stall: float | None = None) -> list[Any]:
        self.accepted.append(request)
        return self.feed(Submit(request, f"message {request}", timeout=timeout, stall_timeout=stall))

    def stop(self, request: str) -> list[Any]:
        if request in self.lc.state.prompts:
            self.controller_stopped.add(request)
        return self.feed(Stop(request))

    # -- the end ----------------------------------------------------------------

    def drive_to_completion(self) -> None:
        """Close, then answer every spawn, let every engine exit and tick far
        ahead until the lifecycle is closed (bounded)."""
        if self.lc.state.closing is None and not self.lc.state.closed:
            self.feed(Close("close"))
        for _ in range(50):
            if self.lc.state.closed:
                break
            if self.pending_spawns:
                self.spawned(min(self.pending_spawns))
            elif any(phase == "stopping" for phase in self.procs.values()):
                for generation in [g for g, phase in self.procs.items() if phase == "stopping"]:
                    self.exited(generation)
            else:
                self.advance(10_000.0)
        s = self.lc.state
        assert s.closed and self.closed == 1, f"not closed: {s!r}"
        assert not s.prompts and not s.queue and s.held is None
        assert sorted(self.receipts) == sorted(self.accepted)
        assert all(len(r) == 1 for r in self.receipts.values())
        assert s.deadlines == {}
        assert s.engine.phase == "none"
        assert not self.procs and not self.pending_spawns
        assert self.lc.next_deadline() is None
        assert self.violations == [], self.violations
        # Every question was answered, once.
        assert sorted(self.answers) == sorted(self.asked) and all(len(a) == 1 for a in self.answers.values())


def of(actions: list[Any], kind: type) -> list[Any]:
    return [a for a in actions if type(a) is kind]


def delivered(actions: list[Any]) -> dict[str, tuple[str, str | None]]:
    return {a.receipt.request: (a.receipt.state, a.receipt.reason) for a in of(actions, Deliver)}


def payloads(actions: list[Any]) -> list[dict[str, Any]]:
    """The signals' payloads, without the generation they are stamped with."""
    return [{k: v for k, v in a.payload.items() if k != "generation"} for a in of(actions, Signal)]


def notes(actions: list[Any], event: str) -> list[dict[str, Any]]:
    return [a.payload for a in of(actions, Note) if a.payload.get("event") == event]


# --------------------------------------------------------------------------
# The model-based test


EXAMPLES = int(os.environ.get("LIFECYCLE_EXAMPLES", "0"))
STEPS = int(os.environ.get("LIFECYCLE_STEPS", "0"))

STDERRS = st.sampled_from([[], [LICENCE], ["warning: slow disk", "panic: out of memory"]])


class LifecycleMachine(RuleBasedStateMachine):
    """Random interleavings of the controller, the engine, the journal and time."""

    def __init__(self) -> None:
        super().__init__()
        self.h = Harness(small_config())
        self.serial = 0
        self.unknown = 0
        #: Rules run so far, and how many must run before the rules that end the
        #: bridge's life (shutdown, close, a journal failure, finish) may: without
        #: it most runs close within a few steps and exercise little else.
        self.rules_run = 0
        self.patience = 0

    @initialize(
        seal_check=st.sampled_from(["refuse", "refuse", "warn"]),
        queue_max=st.integers(1, 3),
        stop_clears=st.booleans(),
        patience=st.integers(5, 80),
        prompts=st.lists(st.sampled_from([None, None, 1.0, 6.0]), max_size=4),
        stall=st.sampled_from([None, 7.0]),
        budgets=st.sampled_from([(None, None), (None, None), (0.5, None), (None, 1.0), (0.5, 1.0)]),
    )
    def configure(
        self,
        seal_check: str,
        queue_max: int,
        stop_clears: bool,
        patience: int,
        prompts: list[float | None],
        stall: float | None,
        budgets: tuple[float | None, float | None],
    ) -> None:
        cfg = small_config(seal_check=seal_check, queue_max=queue_max, stop_clears_queue=stop_clears)
        cfg.stall_timeout = stall
        cfg.prompt_budget_usd, cfg.total_budget_usd = budgets
        self.h = Harness(cfg)
        self.patience = patience
        for timeout in prompts:
            self.submit(timeout)

    # -- helpers for preconditions ----------------------------------------------------

    @property
    def lc(self) -> Lifecycle:
        return self.h.lc

    def _may_end(self) -> bool:
        return self.rules_run >= self.patience

    def _held_on_live_engine(self) -> tuple[str, int] | None:
        """The held prompt and the engine that has it, if that engine still lives."""
        held = self.lc.state.held
        g = self.lc.state.engine.generation
        if held is not None and self.h.engine_has.get(g) == held and g in self.h.procs:
            return held, g
        return None

    def _abort_reached_the_engine(self) -> bool:
        """The held prompt's stop was written to the engine that has it."""
        found = self._held_on_live_engine()
        return (
            found is not None
            and found[0] in self.h.stop_notes
            and self.h.stop_notes[found[0]][0] in self.h.aborts.get(found[1], set())
        )

    def _running(self) -> int | None:
        g = self.lc.state.engine.generation
        return g if self.h.procs.get(g) == "running" else None

    def _unchanged_by(self, event: Any) -> None:
        before = snapshot(self.lc.state)
        assert self.h.feed(event) == [], event
        assert snapshot(self.lc.state) == before, event

    # -- the controller --------------------------------------------------------------

    @rule(timeout=st.sampled_from([None, None, None, 1.0, 6.0, 30.0]), stall=st.sampled_from([None, None, 0, 3.0]))
    def submit(self, timeout: float | None, stall: float | None = None) -> None:
        s = self.lc.state
        self.serial += 1
        request = f"p{self.serial}"
        closing = s.closing is not None or s.draining or s.closed
        down, full = s.down is not None, len(s.queue) >= self.h.cfg.queue_max
        spent = self.h.cfg.total_budget.spent(s.budgets.spent) is not None  # the total is spent
        breaking = self.h.journal_breaks is not None  # the step's first note fails the journal: closing
        got = delivered(self.h.submit(request, timeout, stall)).get(request)
        if breaking and got == ("rejected", "closing"):
            pass
        elif closing:
            assert got == ("rejected", "closing"), got
        elif down:
            assert got == ("rejected", "engine-down"), got
        elif full:
            assert got == ("rejected", "queue-full"), got
        elif spent:
            assert got == ("rejected", "budget"), got
        else:  # queued; or the engine it wants finds the crash limit reached: down now
            assert got is None or (got == ("rejected", "engine-down") and self.lc.state.down is not None), got
        assert self.lc.knows(request)

    @rule(data=st.data())
    def stop(self, data: st.DataObject) -> None:
        self.unknown += 1
        request = data.draw(st.sampled_from([*self.h.accepted, f"unknown-{self.unknown}"]))
        rec = self.lc.state.prompts.get(request)
        was = (rec.phase, rec.stop, rec.gave_up) if rec is not None else None
        closed = self.lc.state.closed
        out = self.h.stop(request)
        answers = of(out, StopAnswer)
        if closed:  # a closed lifecycle takes only Submit; the supervisor reads no answer as None
            assert out == []
            return
        assert len(answers) == 1 and answers[0].request == request
        if was is None:
            assert answers[0].stop is None and not of(out, Deliver)
        elif was[0] in ("queued", "configuring"):  # never written
            assert delivered(out)[request] == ("rejected", "cancelled")
            assert answers[0].stop is None
        elif was[1] is None:
            assert answers[0].stop == self.h.stop_notes[request][0]
            assert self.h.stop_notes[request][1] == "controller"
        else:
            assert answers[0].stop == was[1]

    @rule(data=st.data(), kind=st.sampled_from(["duplicate", "late-decision", "stale-generation"]))
    def changes_nothing(self, data: st.DataObject, kind: str) -> None:
        """A duplicate Submit (raises, accepts nothing), a receipt decided again for
        a prompt that has one, an input from an engine generation that is gone."""
        h, s = self.h, self.lc.state
        if kind == "duplicate" and h.accepted:
            request = data.draw(st.sampled_from(h.accepted))
            before, seen = snapshot(s), len(h.log)
            with pytest.raises(ValueError):
                h.feed(Submit(request, "again"), check=False)
            h.refused.append(request)
            assert snapshot(self.lc.state) == before and len(h.log) == seen
        elif kind == "late-decision" and h.receipts:
            request = data.draw(st.sampled_from(sorted(h.receipts)))
            self._unchanged_by(Decided(receipt(request, Facts(tracker=("finished", None)))))
        elif kind == "stale-generation" and s.engine.generation > 1:
            g = s.engine.generation - 1
            assert g not in h.procs
            self._unchanged_by(
                data.draw(
                    st.sampled_from(
                        [
                            Spawned(g, 7, startup=[dict(SEAL_STATE)]),
                            SpawnFailed(g, "late"),
                            StartupChecked(g, ["late"]),
                            Acked(g, s.held or "p1"),
                            Unsealed(g, "overlap"),
                            SignalSeen(g, {"signal": "overlap"}),
                            WriteFailed(g, s.held, True),
                            WriteFailed(g, s.held, False),
                            StdoutClosed(g),
                            EngineExited(g, 1, None, [LICENCE]),
                        ]
                    )
                )
            )

    @precondition(lambda self: self._may_end() and not self.lc.state.draining and self.lc.state.closing is None)
    @rule(drain=st.sampled_from([None, 0.5, 3.0, 8.0]))
    def shutdown(self, drain: float | None) -> None:
        out = self.h.feed(Shutdown(drain))
        assert notes(out, "shutdown") == [{"event": "shutdown", "drain_timeout": drain}]

    @precondition(lambda self: self._may_end() and self.lc.state.closing is None)
    @rule(why=st.sampled_from(["close", "signal"]))
    def close(self, why: str) -> None:
        out = self.h.feed(Close(why))
        assert [n["why"] for n in notes(out, "closing")] == [why]
        assert not self.lc.state.queue

    @precondition(lambda self: self.lc.state.draining or self.lc.state.closing is not None)
    @rule(again=st.sampled_from(["shutdown", "close", "signal"]), drain=st.sampled_from([None, 1.0]))
    def a_second_shutdown_or_close_changes_nothing(self, again: str, drain: float | None) -> None:
        if again == "shutdown":
            self._unchanged_by(Shutdown(drain))
        elif self.lc.state.closing is not None:  # (a Close after a Shutdown is not a second one)
            self._unchanged_by(Close(again))

    @precondition(lambda self: self._may_end())
    @rule(error=st.sampled_from(["disk full", "I/O error"]))
    def the_journal_fails(self, error: str) -> None:
        first = self.lc.state.journal_failed is None and not self.lc.state.closed
        self.h.journal_failed = self.h.journal_failed or error
        out = self.h.feed(JournalFailed(error))
        if first:
            assert payloads(out)[0] == {"signal": "journal-failed", "error": error}
            assert self.lc.state.closing is not None

    @precondition(lambda self: self._may_end() and self.h.journal_failed is None)
    @rule(error=st.sampled_from(["disk full", "I/O error"]))
    def the_journal_will_fail_mid_step(self, error: str) -> None:
        """The next action journaled fails: writes after it in the same step are held back."""
        self.h.journal_breaks = error

    # -- the engine ----------------------------------------------------------------------

    @rule(startup=st.booleans(), finished=st.sampled_from([True, True, False]))
    def the_engine_gets_on(self, startup: bool, finished: bool) -> None:
        """The engine's next ordinary step, whatever it is: its spawn answered, its
        start-up check passed, its exit after a stop, the held prompt acked, its
        run settled (or aborted by its stop). The rules below do the unusual."""
        h, s = self.h, self.lc.state
        found = self._held_on_live_engine()
        if h.pending_spawns:
            h.spawned(min(h.pending_spawns), startup=startup)
        elif s.engine.generation in h.startup_pending and self._running() is not None:
            h.startup_pending.discard(s.engine.generation)
            h.feed(StartupChecked(s.engine.generation, []))
        elif any(phase == "stopping" for phase in h.procs.values()):
            self.a_stopped_engine_exits(0, [], True, False)
        elif found is not None and found[0] not in h.acked:
            self.engine_acks()
        elif found is not None and found[0] in h.stop_notes:
            if self._abort_reached_the_engine():
                self.the_run_is_aborted_by_its_stop()
        elif found is not None and finished:
            self.the_run_settles(("finished", None))

    @precondition(lambda self: self.h.pending_spawns)
    @rule(ok=st.sampled_from([True] * 7 + [False]), startup=st.booleans(), clearing=st.booleans())
    def answer_spawn(self, ok: bool, startup: bool, clearing: bool) -> None:
        generation = min(self.h.pending_spawns)
        if ok:
            self.h.spawned(generation, startup=startup, clearing=clearing)
        else:
            out = self.h.spawn_failed(generation)
            assert self.lc.state.down is not None
            assert any(a.payload.get("signal") == "engine-down" for a in of(out, Signal))

    @precondition(
        lambda self: self.lc.state.engine.generation in self.h.startup_pending and self._running() is not None
    )
    @rule(problems=st.sampled_from([[], [], ["extensions were loaded"]]))
    def startup_checked(self, problems: list[str]) -> None:
        generation = self._running()
        assert generation is not None
        self.h.startup_pending.discard(generation)
        crashes = len(self.lc.state.crashes)
        down = self.lc.state.down
        out = self.h.feed(StartupChecked(generation, problems))
        if problems and self.h.cfg.seal_check == "refuse":
            # A refusal is not retried: down at once (unless it was already), not a crash.
            assert len(self.lc.state.crashes) == crashes
            assert of(out, StopEngine) == [StopEngine(generation, True)]
            assert not of(out, Spawn)
            if down is None and self.lc.state.closing is None:
                assert self.lc.state.setup_failed
                assert self.lc.state.down == "seal check failed: " + "; ".join(problems)
                assert self.lc.state.queue == [] and not self.lc.state.questions.asks
                assert any(a.payload.get("signal") == "engine-down" for a in of(out, Signal))

    @precondition(lambda self: self._held_on_live_engine() is not None and self.lc.state.held not in self.h.acked)
    @rule()
    def engine_acks(self) -> None:
        found = self._held_on_live_engine()
        assert found is not None
        request, generation = found
        self.h.acked.add(request)
        self.h.feed(Acked(generation, request))

    @precondition(lambda self: self._config_to_answer() is not None)
    @rule(confirms=st.sampled_from([True, True, True, False]))
    def the_engine_answers_a_configuration_command(self, confirms: bool) -> None:
        """Pi answers the configuration command it was given; ``get_state`` shows the level
        asked for, or (``confirms`` False) another one the model offers: not confirmed."""
        found = self._config_to_answer()
        assert found is not None
        generation, request, cmd = found
        del self.h.config_pending[generation]
        wanted = self.lc.state.prompts[request].wanted
        reply: dict[str, Any] = {"type": "response", "id": cmd["id"], "command": cmd["type"], "success": True}
        if cmd["type"] == "get_available_thinking_levels":
            reply["data"] = {"levels": ["off", "low", "high"]}
        elif cmd["type"] == "compact" and not confirms:
            reply = {**reply, "success": False, "error": "Nothing to compact (session too small)"}
        elif cmd["type"] == "compact":
            reply["data"] = {"summary": "s", "tokensBefore": 100, "estimatedTokensAfter": 10}
        elif cmd["type"] == "get_state":
            level = wanted.thinking if confirms else "low"
            reply["data"] = {
                "model": {"provider": wanted.provider or "p", "id": wanted.model or "m"},
                "thinkingLevel": level,
            }
        out = self.h.feed(Configured(generation, request, {cmd["id"]: reply}))
        got = delivered(out).get(request)
        if cmd["type"] == "get_state":
            assert got == (None if confirms or wanted.thinking in (None, "low") else ("rejected", "config")), got

    @rule(instructions=st.sampled_from([None, "keep the numbers"]), fresh=st.booleans())
    def the_controller_compacts(self, instructions: str | None, fresh: bool) -> None:
        """A compaction (and maybe a new conversation, which makes it moot) for the next prompt."""
        self.h.feed(Compact(instructions))
        if fresh:
            self.h.feed(NewConversation())

    @rule(thinking=st.sampled_from(["high", "low"]))
    def the_controller_configures(self, thinking: str) -> None:
        closed = self.lc.state.closed  # a closed lifecycle takes only Submit
        self.h.feed(Configure(Wanted(thinking=thinking)))
        assert closed or self.lc.state.configuring.wanted.thinking == thinking

    @rule()
    def open_the_bridge(self) -> None:
        """``open_bridge`` asks for the engine now (normally once, first; any time here)."""
        self.h.feed(Open())

    @rule()
    def ask_the_engine(self) -> None:
        self.unknown += 1
        token = f"ask-{self.unknown}"
        self.h.asked.append(token)
        self.h.feed(Ask(token, {"type": "get_available_models"}))

    @precondition(lambda self: any(self.h.asks_written.get(g) for g in self.h.procs if self.h.procs[g] == "running"))
    @rule()
    def the_engine_answers_a_question(self) -> None:
        g = next(g for g in self.h.procs if self.h.procs[g] == "running" and self.h.asks_written.get(g))
        cmd = self.h.asks_written[g].pop(0)
        self.h.feed(Answered(g, cmd["id"], {"type": "response", "id": cmd["id"], "success": True, "data": {}}))

    def _config_to_answer(self) -> tuple[int, str, dict[str, Any]] | None:
        for g, (request, cmd) in self.h.config_pending.items():
            rec = self.lc.state.prompts.get(request)
            if self.h.procs.get(g) == "running" and rec is not None and rec.phase == "configuring":
                return g, request, cmd
        return None

    @precondition(lambda self: self._held_on_live_engine() is not None)
    @rule(
        tracker=st.sampled_from(
            [
                ("finished", None),
                ("finished", None),
                ("failed", None),
                ("outcome-unknown", "no-final-assistant-message"),
            ]
        )
    )
    def the_run_settles(self, tracker: tuple[str, str | None]) -> None:
        found = self._held_on_live_engine()
        assert found is not None
        request = found[0]
        out = self.h.settle(request, Facts(tracker=tracker))
        assert delivered(out)[request] == tracker
        assert self.lc.state.held != request

    @precondition(lambda self: self._held_on_live_engine() is not None)
    @rule(cost=st.sampled_from([0.0, 0.2, 0.6]))
    def the_run_spends(self, cost: float) -> None:
        """An assistant message of the held run ended (Pi's ``message_end``): a spend past the
        prompt's budget or the bridge's total sends the bridge's stop, once, and nothing else."""
        found = self._held_on_live_engine()
        assert found is not None
        request, generation = found
        rec = self.lc.state.prompts[request]
        stopped = rec.stop is not None or rec.gave_up is not None
        out = self.h.feed(Spent(generation, request, Usage(cost=cost, messages=1)))
        passed = rec.budget.passed(rec.spent) or self.lc.config.total_budget.passed(self.lc.state.budgets.spent)
        stops = notes(out, "stop")
        if passed and not stopped:
            assert [n["by"] for n in stops] == ["budget"], out
        else:
            assert stops == [], out

    @precondition(lambda self: self._abort_reached_the_engine())
    @rule()
    def the_run_is_aborted_by_its_stop(self) -> None:
        found = self._held_on_live_engine()
        assert found is not None
        request = found[0]
        stop, by = self.h.stop_notes[request]
        out = self.h.settle(request, Facts(tracker=("failed", "interrupted"), stop_by=by), stop=stop)
        assert delivered(out)[request] == ("failed", {"controller": "interrupted", "stall": "stalled"}.get(by, by))

    @precondition(lambda self: self._running() is not None)
    @rule(
        method=st.sampled_from(["confirm", "select", "input"]),
        listened=st.sampled_from([True, True, True, False]),
        own=st.sampled_from([None, None, 500, 50_000]),
        allowed=st.sampled_from([True, True, True, False]),
    )
    def an_extension_opens_a_dialog(self, method: str, listened: bool, own: int | None, allowed: bool) -> None:
        g = self._running()
        assert g is not None
        self.h.dialogs_opened += 1
        fields: dict[str, Any] = {"title": "sure?"}
        if method == "select":
            fields["options"] = ["a", "b"]
        if own is not None:
            fields["timeout"] = own
        engine_id = f"ui-{self.h.dialogs_opened}"
        closing = self.lc.state.closing is not None
        held = self.lc.state.prompts.get(self.lc.state.held) if self.lc.state.held is not None else None
        stopped = held is not None and held.phase == "held" and held.gave_up is None and held.stop is not None
        actions = self.h.feed(DialogOpened(g, engine_id, method, fields, listened, allowed))
        asked = of(actions, AskDialog)
        if not allowed or not listened or closing or stopped:
            # A sealed engine's, nobody to ask, closing, or its prompt being stopped: cancelled
            # at once, never asked.
            assert not asked and self.h.dialog_writes[engine_id] == [
                {"type": "extension_ui_response", "id": engine_id, "cancelled": True}
            ]
            # (Others may end in the same feed: a journal that fails noting this one closes.)
            ends = [e for e in of(actions, DialogEnded) if e.dialog == f"dialog-{self.lc.state.dialogs.serial}"]
            assert len(ends) == (1 if allowed else 0) and all(e.answer == {"cancelled": True} for e in ends)
        else:
            assert len(asked) == 1 and asked[0].payload["timeout"] <= self.h.cfg.dialog_timeout

    @precondition(lambda self: bool(self.lc.state.dialogs.open))
    @rule()
    def nobody_answers_any_more(self) -> None:
        actions = self.h.feed(NobodyAnswers())
        assert not self.lc.state.dialogs.open
        assert all(e.by in ("no-controller", "closing") for e in of(actions, DialogEnded))

    @precondition(lambda self: bool(self.h.dialogs_asked))
    @rule(data=st.data(), how=st.sampled_from(["fits", "fits", "cancel", "misfit"]))
    def the_controller_answers_a_dialog(self, data: st.DataObject, how: str) -> None:
        dialog = data.draw(st.sampled_from(sorted(self.h.dialogs_asked)))
        rec = self.lc.state.dialogs.open.get(dialog)
        answer: dict[str, Any] = {"cancelled": True} if how == "cancel" else {}
        method = rec.method if rec is not None else "confirm"
        if how == "fits":
            answer = {"confirmed": True} if method == "confirm" else {"value": "a"}
        elif how == "misfit":
            answer = {"value": "a"} if method == "confirm" else {"confirmed": True}
        actions = self.h.feed(AnswerDialog(dialog, **answer))
        (reply,) = of(actions, DialogReply)
        # (Other dialogs may end in the same feed: a journal that fails noting this end closes.)
        ends = [e for e in of(actions, DialogEnded) if e.dialog == dialog]
        if rec is None or how == "misfit":
            assert reply.error is not None and not of(actions, Write) and not ends
            assert (dialog in self.lc.state.dialogs.open) == (rec is not None)
        else:
            assert reply.error is None and dialog not in self.lc.state.dialogs.open
            (end,) = ends
            assert end.by == "controller" and end.answer == answer
            assert self.h.dialog_writes[rec.engine_id] == [
                {"type": "extension_ui_response", "id": rec.engine_id, **answer}
            ]

    @precondition(lambda self: self._held_on_live_engine() is not None)
    @rule(pause=st.sampled_from([0.0, 0.0, 2.0, math.inf]), ago=st.sampled_from([0.0, 0.0, 1.0, 50.0]))
    def the_run_shows_activity(self, pause: float, ago: float) -> None:
        """The engine wrote a line for the held run ``ago`` seconds back (the trio layer brings
        this up to date before each tick): the stall deadline moves, never before now unless
        it was due anyway, and a run that is stopped or has no stall timeout has none."""
        found = self._held_on_live_engine()
        assert found is not None
        request, generation = found
        rec = self.lc.state.prompts[request]
        had = "stall" in self.lc.state.deadlines
        self.h.feed(Activity(generation, request, self.h.now - ago, pause))
        stall = self.lc.state.deadlines.get("stall")
        if rec.stall is None or rec.stop is not None or not had:
            assert stall is None
        elif pause == math.inf and self.h.cfg.tool_timeout is not None:  # a tool runs: the tool bound
            assert stall == max(self.h.now - ago, rec.written or 0.0, rec.resumed or 0.0) + self.h.cfg.tool_timeout
        elif pause == math.inf:
            assert stall == self.h.now + rec.stall
        else:
            assert stall == max(self.h.now - ago, rec.written or 0.0) + pause + rec.stall

    @precondition(lambda self: self._running() is not None)
    @rule(
        how=st.sampled_from(
            [
                "unsealed",
                "signal",
                "stuck",
                "stdin-broken",
                "stdin-closed-before-the-prompt",
                "stdout-closed",
                "dies",
                "dies",
                "refuses",
                "flood",
            ]
        ),
        for_held=st.booleans(),
        stderr=STDERRS,
    )
    def the_engine_misbehaves(self, how: str, for_held: bool, stderr: list[str]) -> None:
        h, g = self.h, self._running()
        assert g is not None
        held = self.lc.state.held if for_held else None
        if how == "unsealed":
            h.feed(Unsealed(g, "overlap"))
            assert not self.lc.state.engine.sealed or self.lc.state.engine.phase == "stopping"
        elif how in ("flood", "signal"):
            count = SIGNALS_PER_GENERATION + 3 if how == "flood" else 1
            sent = 0
            for i in range(count):
                out = h.feed(SignalSeen(g, {"signal": "overlap", "idx": i}), check=i < 2 or i >= count - 2)
                sent += len([p for p in payloads(out) if p["signal"] in ("overlap", "signals-suppressed")])
            assert sent <= SIGNALS_PER_GENERATION + 1
        elif how == "stuck":  # it stopped reading: replaced before the next prompt
            h.feed(WriteFailed(g, held, True))
            assert self.lc.state.engine.recycle
        elif how == "stdin-broken":  # stopped like an engine that closed its stdout
            assert of(h.feed(WriteFailed(g, held, False)), StopEngine) == [StopEngine(g, False)]
        elif how == "stdin-closed-before-the-prompt":
            # Not one byte of the held prompt went in: it is rejected, never given up on.
            rec = self.lc.state.prompts.get(held) if held is not None else None
            unsent = rec is not None and rec.phase == "held" and not rec.acked and rec.gave_up is None
            out = h.feed(WriteFailed(g, held, False, True, "EPIPE", stderr))
            assert of(out, StopEngine) == [StopEngine(g, False)]
            assert delivered(out).get(held) == (("rejected", "engine-down") if unsent else None)
            assert [n["request"] for n in notes(out, "unsent")] == ([held] if unsent else [])
        elif how == "stdout-closed":
            assert of(h.feed(StdoutClosed(g)), StopEngine) == [StopEngine(g, False)]
        elif how == "refuses":  # it exits saying why (Pi's `Model "x" not found`)
            checking, crashes = self.lc.state.engine.in_startup, list(self.lc.state.crashes)
            h.exited(g, 1, None, stderr, refusal="Pi refused the configuration: nope")
            if checking:  # a refusal: down at once, no crash counted
                assert self.lc.state.setup_failed and self.lc.state.crashes == crashes
                assert self.lc.state.down == "Pi refused the configuration: nope"
            else:  # past its check the words change nothing: a crash
                assert self.lc.state.crashes[-1] == h.now
        else:
            h.exited(g, 1 if stderr else None, None if stderr else 9, stderr)
            # An unrequested exit counts, now (and only once: checked on every step).
            assert self.lc.state.crashes[-1] == h.now

    @precondition(lambda self: any(phase == "stopping" for phase in self.h.procs.values()))
    @rule(
        code=st.sampled_from([0, 143]),
        stderr=STDERRS,
        evidence_first=st.booleans(),
        never_written=st.sampled_from([False, False, True]),
    )
    def a_stopped_engine_exits(self, code: int, stderr: list[str], evidence_first: bool, never_written: bool) -> None:
        """``evidence_first``: the supervisor's order, the session deciding the held
        prompt on the exit before EngineExited is fed (safe once the engine is stopping).
        ``never_written``: the held prompt's bytes were still queued for the engine at its exit
        (the supervisor says so first): rejected, engine-down."""
        generation = next(g for g, phase in self.h.procs.items() if phase == "stopping")
        requested = self.h.stop_requested[generation]
        crashes = len(self.lc.state.crashes)
        held = self._held_on_live_engine()
        if never_written and held is not None and held[0] not in self.h.acked:
            rec = self.lc.state.prompts[held[0]]
            out = self.h.feed(WriteFailed(generation, held[0], False, True, "the engine had exited"))
            if rec.gave_up is None:
                assert delivered(out) == {held[0]: ("rejected", "engine-down")}, out
            held = self._held_on_live_engine()
        if evidence_first and held is not None:
            self.h.procs[generation] = "gone"
            out = self.h.settle(held[0], Facts(exited=True, working=held[0] in self.h.acked))
            assert not of(out, Write), "a write to an engine that has exited"
        self.h.exited(generation, code, None, stderr)
        if requested:  # our own stop: never a crash (the list may only shrink, on a respawn)
            assert len(self.lc.state.crashes) <= crashes

    @rule(dt=st.sampled_from([0.0, 0.25, 0.5, 1.0, 1.0, 2.0, 2.0, 3.0, 4.0, 5.0, 6.0, 100.0, 10_000.0]))
    def time_passes(self, dt: float) -> None:
        due = {name for name, at in self.lc.state.deadlines.items() if at <= self.h.now + dt}
        self.h.advance(dt)
        # Every due deadline fired (one that fires may arm another, later).
        for name in due:
            at = self.lc.state.deadlines.get(name)
            assert at is None or at > self.h.now, (name, at, self.h.now)

    @precondition(lambda self: self._may_end())
    @rule()
    def finish(self) -> None:
        self.h.drive_to_completion()

    # -- invariants ---------------------------------------------------------------------

    @invariant()
    def count_the_rules(self) -> None:
        """Not a check: invariants run after every rule, so this counts them (see patience)."""
        self.rules_run += 1

    @invariant()
    def an_open_waits_only_for_a_start_up_check_under_way(self) -> None:
        """``opening`` is cleared as soon as its engine's check has ended (or none will run):
        an open never waits on a ready engine, a down or closing bridge, or nothing."""
        s, e = self.lc.state, self.lc.state.engine
        if s.questions.opening is not None:
            assert s.closing is None and s.down is None, (s.closing, s.down)
            # (stopping: an engine on its way out, the one waited for starts after its exit)
            assert (
                e.phase in ("spawning", "checking", "backoff") or e.in_startup or e.generation < s.questions.opening
            ), e.phase

    @invariant()
    def nothing_broke_while_carrying_out(self) -> None:
        assert self.h.violations == [], self.h.violations

    @invariant()
    def exactly_one_receipt_per_accepted_prompt(self) -> None:
        s, h = self.lc.state, self.h
        assert all(len(r) == 1 for r in h.receipts.values())
        assert set(h.receipts) <= set(h.accepted)
        assert len(set(h.accepted)) == len(h.accepted)
        # Every accepted prompt is outstanding or has its receipt, never both.
        assert set(s.prompts).isdisjoint(h.receipts)
        assert set(s.prompts) | set(h.receipts) == set(h.accepted)
        assert s.receipts == len(h.receipts)
        # A Submit that raised was a duplicate: it added nothing.
        assert set(h.refused) <= set(h.accepted)

    @invariant()
    def nothing_unwritten_is_written_once_closing_begins(self) -> None:
        assert not [w for w, closing in self.h.writes if closing and w.kind in ("prompt", "startup")]
        if self.lc.state.closing is not None:
            assert not self.lc.state.queue

    @invariant()
    def whose_stop_is_never_guessed(self) -> None:
        for request, (r,) in self.h.receipts.items():
            if r.state != "failed" or r.reason is None:
                continue
            stop = self.h.stop_notes.get(request)
            assert stop is not None, r
            assert stop[1] == {"interrupted": "controller", "stalled": "stall"}.get(r.reason, r.reason), (r, stop)
            if r.reason == "interrupted":
                assert request in self.h.controller_stopped

    @invariant()
    def every_dialog_gets_one_response(self) -> None:
        s, h = self.lc.state, self.h
        for dialog, engine_id in h.dialogs_asked.items():
            ends = h.dialog_ends.get(dialog, [])
            assert len(ends) == (0 if dialog in s.dialogs.open else 1), (dialog, ends)
            written = h.dialog_writes.get(engine_id, [])
            assert len(written) <= 1
            if ends and ends[0].answer is not None:
                assert written == [{"type": "extension_ui_response", "id": engine_id, **ends[0].answer}]
            elif ends:  # not written: its engine was gone
                assert ends[0].by == "engine-exit" and written == []
        for rec in s.dialogs.open.values():
            # An open dialog is of the running engine, and holds its prompt's ack and stall.
            assert rec.generation == s.engine.generation and s.engine.phase in ("checking", "ready")
            assert s.deadlines.get("dialog", math.inf) <= rec.deadline
            if rec.request is not None and rec.request == s.held:
                assert not {"ack", "stall"} & set(s.deadlines), s.deadlines
        if s.closed or s.closing is not None:
            assert not s.dialogs.open

    @invariant()
    def the_state_round_trips(self) -> None:
        state = self.lc.state
        assert restore(json.loads(json.dumps(snapshot(state)))) == state

    @invariant()
    def one_slot_and_a_bounded_queue(self) -> None:
        s = self.lc.state
        # (One more than the bound while a prompt that took the slot, unwritten -- it was being
        # configured when its engine died -- waits at the front again.)
        assert len(s.queue) <= self.h.cfg.queue_max + 1
        assert len(set(s.queue)) == len(s.queue)
        assert s.held not in s.queue
        assert all(s.prompts[r].phase == "queued" for r in s.queue)
        if s.held is not None:
            assert s.prompts[s.held].phase in ("held", "configuring")
        # Every outstanding prompt is queued or held: none is lost.
        assert set(s.prompts) == set(s.queue) | ({s.held} if s.held is not None else set())
        assert set(s.deadlines) <= set(DEADLINES)
        if s.held is None:
            assert not set(s.deadlines) & set(HELD_DEADLINES), s.deadlines

    @invariant()
    def the_queries_agree(self) -> None:
        lc, h = self.lc, self.h
        assert all(lc.knows(r) for r in h.accepted)
        assert not lc.knows(f"unknown-{self.unknown + 1}")
        deadlines = lc.state.deadlines
        assert lc.next_deadline() == (min(deadlines.values()) if deadlines else None)
        assert lc.outstanding == len(lc.state.prompts)

    @invariant()
    def the_lifecycle_knows_its_engine(self) -> None:
        s, e, h = self.lc.state, self.lc.state.engine, self.h
        assert len(h.procs) + len(h.pending_spawns) <= 1, (h.procs, h.pending_spawns)
        if e.phase == "spawning":
            assert h.pending_spawns == {e.generation}
        elif e.phase in ("checking", "ready"):
            assert h.procs == {e.generation: "running"}
        elif e.phase == "stopping":
            assert h.procs == {e.generation: "stopping"}
        else:
            assert e.phase in ("none", "backoff")
            assert not h.procs and not h.pending_spawns
        assert "gone" not in h.procs.values()
        if s.held is not None:
            # The held prompt was written to this engine, which still lives (or is being
            # configured on it, not written yet).
            if s.prompts[s.held].phase == "held":
                assert h.engine_has.get(e.generation) == s.held
            assert e.phase in ("ready", "stopping")
        if s.down is not None or s.closing is not None:
            assert ("backoff" not in s.deadlines and e.phase != "backoff") or s.down is not None
        if s.closed:
            assert not s.prompts and s.deadlines == {} and e.phase == "none"

    def teardown(self) -> None:
        if sys.exc_info()[0] is not None:
            return  # a rule or an invariant failed: that is the report
        self.h.drive_to_completion()


LifecycleMachine.TestCase.settings = settings(
    max_examples=EXAMPLES or 100,
    stateful_step_count=STEPS or 50,
    derandomize=not EXAMPLES,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
TestLifecycleMachine = LifecycleMachine.TestCase


# --------------------------------------------------------------------------
# The contract breaks, one scripted sequence each


def ready_engine(h: Harness, *requests: str, startup: bool = False, ack: bool = True) -> int:
    """Submit ``requests``; answer the spawn; ack the first prompt. Returns the generation."""
    for request in requests:
        h.submit(request)
    (spawn,) = of(h.log, Spawn)
    h.spawned(spawn.generation, startup=startup)
    if startup:
        h.startup_pending.discard(spawn.generation)
        h.feed(StartupChecked(spawn.generation, []))
    if ack and requests:
        h.acked.add(requests[0])
        h.feed(Acked(spawn.generation, requests[0]))
    return spawn.generation


def test_closing_during_the_startup_check_writes_no_prompt() -> None:
    h = Harness()
    assert of(h.submit("p1"), Spawn) == [Spawn(1)]
    out = h.spawned(1, startup=True)
    assert [(w.kind, w.cmd) for w in of(out, Write)] == [("startup", SEAL_STATE)]
    assert h.lc.state.engine.phase == "checking"
    h.now = 1.0
    out = h.feed(Close("signal"))
    assert notes(out, "closing") == [{"event": "closing", "why": "signal", "detail": None}]
    assert delivered(out) == {"p1": ("rejected", "closing")}
    assert of(out, StopEngine) == [StopEngine(1, True)]
    assert "startup" not in h.lc.state.deadlines
    # The check's answer, late: nothing is written.
    assert h.feed(StartupChecked(1, [])) == []
    out = h.exited(1, 0)
    assert of(out, Closed) == [Closed()]
    assert not [w for w in of(h.log, Write) if w.kind == "prompt"]
    assert h.lc.state.crashes == []
    assert h.violations == []
    h.drive_to_completion()


def test_after_shutdown_stop_is_honoured_and_a_new_prompt_is_rejected_closing() -> None:
    h = Harness()
    generation = ready_engine(h, "p1", "p2")
    assert [w.request for w in of(h.log, Write) if w.kind == "prompt"] == ["p1"]
    out = h.feed(Shutdown())
    assert notes(out, "shutdown") == [{"event": "shutdown", "drain_timeout": None}]
    assert h.lc.state.closing is None
    # status is answered
    assert h.lc.knows("p1") and h.lc.outstanding == 2
    # a new prompt gets its receipt, rejected/closing
    assert delivered(h.submit("p3")) == {"p3": ("rejected", "closing")}
    # stop is honoured, for the held prompt and the queued one
    out = h.stop("p1")
    (stop,) = notes(out, "stop")
    assert stop["by"] == "controller" and stop["request"] == "p1"
    assert [(w.kind, w.cmd["type"]) for w in of(out, Write)] == [("clear", "clear_queue"), ("abort", "abort")]
    assert of(out, StopAnswer) == [StopAnswer("p1", stop["stop"])]
    out = h.stop("p2")
    assert delivered(out) == {"p2": ("rejected", "cancelled")}
    assert of(out, StopAnswer) == [StopAnswer("p2", None)]
    # a second shutdown changes nothing
    before = copy.deepcopy(h.lc.state)
    assert h.feed(Shutdown(1.0)) == []
    assert h.lc.state == before
    # the stop's abort settles p1: interrupted; then the bridge closes
    out = h.settle("p1", Facts(tracker=("failed", "interrupted"), stop_by=stop["by"]))
    assert delivered(out) == {"p1": ("failed", "interrupted")}
    assert notes(out, "closing")[0]["why"] == "close"
    assert of(out, StopEngine) == [StopEngine(generation, True)]
    assert of(h.exited(generation), Closed) == [Closed()]
    assert h.violations == []
    h.drive_to_completion()


def test_a_timeout_stop_is_noted_as_the_bridges_and_decides_failed_timeout() -> None:
    h = Harness()
    h.submit("p1", timeout=10.0)
    generation = ready_engine(h)
    assert h.lc.state.deadlines["settle"] == 10.0
    h.acked.add("p1")
    h.feed(Acked(generation, "p1"))
    assert h.advance(9.5) == []
    out = h.advance(0.5)
    # the note naming the stop's owner comes first, then clear and abort
    assert [type(a) for a in out] == [Note, Write, Write]
    assert out[0].payload["by"] == "timeout" and out[0].payload["request"] == "p1"
    stop = out[0].payload["stop"]
    assert [(w.kind, w.cmd) for w in out[1:]] == [
        ("clear", {"type": "clear_queue", "id": f"{stop}:clear"}),
        ("abort", {"type": "abort", "id": stop}),
    ]
    assert h.lc.state.deadlines["stop"] == 10.0 + h.cfg.stop_grace
    out = h.settle("p1", Facts(tracker=("failed", "interrupted"), stop_by="timeout"))
    assert delivered(out) == {"p1": ("failed", "timeout")}
    assert of(out, Deliver)[0].release
    assert h.lc.state.deadlines == {}
    # The same timeout, its stop not obeyed: settle-timeout, and the engine is recycled.
    h.submit("p2", timeout=3.0)
    assert h.engine_has[generation] == "p2"
    h.acked.add("p2")
    h.feed(Acked(generation, "p2"))
    h.advance(3.0)
    out = h.advance(h.cfg.stop_grace)
    assert of(out, GiveUp) == [GiveUp("p2", "settle")]
    assert delivered(out) == {"p2": ("outcome-unknown", "settle-timeout")}
    assert of(out, StopEngine) == [StopEngine(generation, True)]
    assert h.violations == []
    h.drive_to_completion()


def test_a_controllers_stop_that_is_not_obeyed_ends_at_the_stop_grace() -> None:
    """The controller stops a running prompt (no timeout of its own) and the engine obeys no
    abort (SIGSTOPped, hung): the stop's grace, then ``settle-timeout`` and a recycle, as for
    the bridge's own stops. There was no bound at all: the stop took the stall deadline away
    and armed nothing, so the slot and every prompt queued behind it waited until the bridge
    closed (found by a trial: ``bridge serve`` and an engine that SIGSTOPs itself mid-run)."""
    h = Harness(small_config(stall_timeout=4.0))
    generation = ready_engine(h, "p1", "p2")
    h.now = 1.0
    out = h.stop("p1")
    (note,) = notes(out, "stop")
    assert note["by"] == "controller"
    assert h.lc.state.deadlines == {"stop": 1.0 + h.cfg.stop_grace}
    out = h.advance(h.cfg.stop_grace)
    assert of(out, GiveUp) == [GiveUp("p1", "settle")]
    assert delivered(out) == {"p1": ("outcome-unknown", "settle-timeout")}
    assert of(out, StopEngine) == [StopEngine(generation, True)]
    # ... and p2 runs on a fresh engine.
    h.exited(generation, None, 9)
    h.drive_to_completion()
    assert h.violations == []
    # Obeyed in time, it is the controller's: failed/interrupted, nothing left armed.
    h = Harness()
    generation = ready_engine(h, "p1")
    out = h.stop("p1")
    out = h.settle(
        "p1", Facts(tracker=("failed", "interrupted"), stop_by="controller"), stop=notes(out, "stop")[0]["stop"]
    )
    assert delivered(out) == {"p1": ("failed", "interrupted")}
    assert h.lc.state.deadlines == {}
    h.drive_to_completion()


def test_drain_bound_stops_the_running_prompt_as_a_timeout() -> None:
    h = Harness()
    generation = ready_engine(h, "p1", "p2")
    h.feed(Shutdown(drain_timeout=20.0))
    assert h.lc.state.deadlines["drain"] == 20.0
    h.now = 20.0
    out = h.feed(Tick())
    assert notes(out, "closing") == [{"event": "closing", "why": "drain-timeout", "detail": "the drain bound passed"}]
    (stop,) = notes(out, "stop")
    assert stop["by"] == "timeout" and stop["request"] == "p1"
    assert [w.kind for w in of(out, Write)] == ["clear", "abort"]
    assert delivered(out) == {"p2": ("rejected", "closing")}
    out = h.settle("p1", Facts(tracker=("failed", "interrupted"), stop_by=stop["by"]))
    assert delivered(out) == {"p1": ("failed", "timeout")}
    assert of(out, StopEngine) == [StopEngine(generation, True)]
    assert of(h.exited(generation), Closed) == [Closed()]
    assert h.violations == []
    h.drive_to_completion()


def test_a_drain_bound_whose_stop_is_ignored_ends_at_the_close_grace() -> None:
    h = Harness()
    generation = ready_engine(h, "p1")
    h.feed(Shutdown(drain_timeout=2.0))
    h.advance(2.0)
    assert h.lc.state.deadlines == {"close": 2.0 + h.cfg.close_grace}
    out = h.advance(h.cfg.close_grace)
    assert of(out, StopEngine) == [StopEngine(generation, True)]
    out = h.exited(generation, None, 15)
    assert of(out, GiveUp) == [GiveUp("p1", "exited")]
    assert delivered(out) == {"p1": ("outcome-unknown", "engine-exited")}
    assert of(out, Closed) == [Closed()]
    assert h.lc.state.crashes == []
    h.drive_to_completion()


def test_an_engine_dying_in_its_startup_check_counts_one_crash_and_names_its_stderr() -> None:
    h = Harness()
    h.submit("p1")
    deaths = 0
    while h.lc.state.down is None:
        assert deaths < h.cfg.crash_limit, "never went down"
        if not h.pending_spawns:
            backoff = h.lc.next_deadline()
            assert backoff is not None
            h.advance(backoff - h.now)
        (generation,) = h.pending_spawns
        h.spawned(generation, startup=True)
        assert h.lc.state.engine.phase == "checking"
        out = h.exited(generation, 1, None, [LICENCE])
        deaths += 1
        assert len(h.lc.state.crashes) == deaths
        (signal,) = [p for p in payloads(out) if p["signal"] == "seal-check"]
        assert LICENCE in signal["problems"][0] and "start-up check" in signal["problems"][0]
        assert notes(out, "seal-check")[0]["problems"] == signal["problems"]
    assert deaths == h.cfg.crash_limit
    (r,) = h.receipts["p1"]
    assert (r.state, r.reason) == ("rejected", "engine-down")
    assert r.native_error is not None and LICENCE in r.native_error
    assert h.down_signalled
    assert not [w for w in of(h.log, Write) if w.kind == "prompt"]
    # down: a new prompt is rejected at once, naming the same stderr
    (r2,) = of(h.submit("p2"), Deliver)
    assert (r2.receipt.state, r2.receipt.reason) == ("rejected", "engine-down")
    assert LICENCE in r2.receipt.native_error
    assert h.violations == []
    h.drive_to_completion()


def test_a_journal_failure_closes_and_every_prompt_gets_its_receipt() -> None:
    h = Harness()
    generation = ready_engine(h, "p1", "p2", "p3")
    out = h.feed(JournalFailed("No space left on device"))
    assert type(out[0]) is Signal
    assert payloads(out)[0] == {"signal": "journal-failed", "error": "No space left on device"}
    assert notes(out, "closing") == [{"event": "closing", "why": "journal", "detail": "No space left on device"}]
    assert delivered(out) == {"p2": ("rejected", "closing"), "p3": ("rejected", "closing")}
    (stop,) = notes(out, "stop")
    assert stop["by"] == "closing" and stop["request"] == "p1"
    assert [w.kind for w in of(out, Write)] == ["clear", "abort"]
    # a second failure changes nothing
    before = copy.deepcopy(h.lc.state)
    assert h.feed(JournalFailed("again")) == []
    assert h.lc.state == before
    out = h.settle("p1", Facts(tracker=("failed", "interrupted"), stop_by=stop["by"]))
    assert delivered(out) == {"p1": ("failed", "closing")}
    assert of(out, StopEngine) == [StopEngine(generation, True)]
    assert of(h.exited(generation), Closed) == [Closed()]
    assert {r: len(v) for r, v in h.receipts.items()} == {"p1": 1, "p2": 1, "p3": 1}
    assert h.violations == []
    h.drive_to_completion()


def test_a_startup_check_answered_with_a_refusal_goes_down_at_once_not_retried() -> None:
    """A check the engine answered and the answers fail (a model it does not offer): a fresh
    engine would answer the same, so no second engine is started and nothing is counted as a
    crash; every prompt is rejected engine-down with the problems, and the bridge is down as a
    set-up failure (run and serve exit 2)."""
    problem = "Pi does not offer --model nope (scripted: scripted-model)"
    h = Harness()
    h.submit("p1")
    h.submit("p2")
    h.spawned(1, startup=True)
    out = h.feed(StartupChecked(1, [problem]))
    assert h.lc.state.crashes == []
    assert of(out, StopEngine) == [StopEngine(1, True)]
    assert not of(out, Write)
    assert payloads(out) == [
        {"signal": "seal-check", "problems": [problem], "action": "refuse"},
        {"signal": "engine-down", "why": f"seal check failed: {problem}"},
    ]
    assert delivered(out) == {"p1": ("rejected", "engine-down"), "p2": ("rejected", "engine-down")}
    assert all(problem in (r.native_error or "") for (r,) in h.receipts.values())
    assert h.lc.state.down == f"seal check failed: {problem}" and h.lc.state.setup_failed
    # Its exit (our own stop) starts nothing, and counts nothing.
    out = h.exited(1, 0)
    assert not of(out, Spawn) and h.lc.state.crashes == []
    (r3,) = of(h.submit("p3"), Deliver)
    assert (r3.receipt.state, r3.receipt.reason) == ("rejected", "engine-down")
    assert [a for a in h.log if type(a) is Spawn] == [Spawn(1)]
    assert h.violations == []
    h.drive_to_completion()


def test_an_engine_exiting_in_its_check_with_a_refusal_goes_down_at_once_not_retried() -> None:
    """An exit during the start-up check whose stderr the launch reads as a refusal (Pi's
    ``Model "nope" not found``: its own check of ``--model``): down at once as a set-up
    failure, like a refused check, no crash counted and no second engine; the signal and the
    receipts carry the refusal's words and the exit's."""
    refusal = 'Pi refused the configuration: Model "nope" not found.'
    h = Harness()
    h.submit("p1")
    h.spawned(1, startup=True)
    out = h.exited(1, 1, None, ['Error: Model "nope" not found.'], refusal)
    assert h.lc.state.crashes == [] and h.lc.state.setup_failed and h.lc.state.down == refusal
    (check,) = [p for p in payloads(out) if p["signal"] == "seal-check"]
    assert check["problems"][0] == refusal and "start-up check" in check["problems"][1]
    assert delivered(out) == {"p1": ("rejected", "engine-down")}
    assert refusal in (h.receipts["p1"][0].native_error or "")
    h.advance(60.0)
    assert [a for a in h.log if type(a) is Spawn] == [Spawn(1)]
    assert h.violations == []
    h.drive_to_completion()


def test_open_starts_the_engine_and_ends_when_its_check_passes_then_the_prompt_uses_it() -> None:
    """``open_bridge`` (:class:`Open`): one engine started before any prompt; the open ends at
    its clean check, and the first prompt is written to that engine, not to a second one."""
    h = Harness()
    assert of(h.feed(Open()), Spawn) == [Spawn(1)] and h.lc.state.questions.opening == 1
    h.spawned(1, startup=True)
    assert h.lc.state.questions.opening == 1
    h.feed(StartupChecked(1, []))
    assert h.lc.state.questions.opening is None and not h.lc.state.setup_failed
    out = h.submit("p1")
    assert not of(out, Spawn) and [w.request for w in of(out, Write)] == ["p1"]
    assert [a for a in h.log if type(a) is Spawn] == [Spawn(1)]
    assert h.violations == []
    h.drive_to_completion()


@pytest.mark.parametrize("how", ["refused-check", "refusal-exit", "spawn-failed"])
def test_open_ends_at_a_refusal_with_the_words_and_starts_nothing_more(how: str) -> None:
    """A refused launch ends the open with ``setup_failed`` and ``down`` (what ``open_bridge``
    raises): a check answered with problems, an exit its launch reads as a refusal, an engine
    that cannot be launched. No second engine."""
    h = Harness()
    h.feed(Open())
    if how == "spawn-failed":
        h.spawn_failed(1)
    else:
        h.spawned(1, startup=True)
        if how == "refused-check":
            h.feed(StartupChecked(1, ["Pi does not offer --model nope"]))
            assert h.lc.state.questions.opening is None  # at the answers, not at the stopped engine's exit
            h.exited(1, 0)
        else:
            h.feed(StdoutClosed(1))  # Pi closes its stdout first: the exit tells whether it refused
            assert h.lc.state.questions.opening == 1
            h.exited(1, 1, None, ['Error: Model "nope" not found.'], 'Pi refused: Model "nope" not found.')
    s = h.lc.state
    assert s.questions.opening is None and s.setup_failed and s.down is not None and s.crashes == []
    h.advance(60.0)
    assert [a for a in h.log if type(a) is Spawn] == [Spawn(1)]
    assert h.violations == []
    h.drive_to_completion()


def test_open_ends_at_a_crash_without_a_second_start_and_the_prompt_restarts_it() -> None:
    """An engine that died in its check at open is a crash, as at a prompt: the open ends
    (not refused), no engine is restarted for the open alone, and the first prompt starts the
    next one as the crash rules say."""
    h = Harness()
    h.feed(Open())
    h.spawned(1, startup=True)
    h.exited(1, 1, None, [LICENCE])
    s = h.lc.state
    assert s.questions.opening is None and not s.setup_failed and s.down is None and len(s.crashes) == 1
    h.advance(60.0)
    assert [a for a in h.log if type(a) is Spawn] == [Spawn(1)]
    assert of(h.submit("p1"), Spawn) == [Spawn(2)]
    assert h.violations == []
    h.drive_to_completion()


def test_open_on_a_closing_or_down_bridge_waits_for_nothing() -> None:
    h = Harness()
    h.feed(Close())
    h.feed(Open())
    assert h.lc.state.questions.opening is None and not [a for a in h.log if type(a) is Spawn]


def test_a_startup_check_answered_sealed_after_crashes_sends_the_prompt() -> None:
    """The control: an engine that died in its check is a crash (restarted after the backoff),
    and the next one's clean check lets the prompt through; no set-up failure."""
    h = Harness()
    h.submit("p1")
    h.spawned(1, startup=True)
    out = h.exited(1, 1, None, [LICENCE])
    assert len(h.lc.state.crashes) == 1 and of(out, Spawn) == [Spawn(2)]
    h.spawned(2, startup=True)
    out = h.feed(StartupChecked(2, []))
    assert [w.request for w in of(out, Write)] == ["p1"]
    assert not h.lc.state.setup_failed and h.lc.state.down is None
    assert h.violations == []
    h.drive_to_completion()


def test_a_startup_check_never_answered_counts_once() -> None:
    h = Harness()
    h.submit("p1")
    h.spawned(1, startup=True)
    out = h.advance(h.cfg.startup_timeout)
    assert len(h.lc.state.crashes) == 1
    assert of(out, StopEngine) == [StopEngine(1, True)]
    out = h.exited(1, None, 15)
    assert len(h.lc.state.crashes) == 1
    # Not answered is not a refusal (a slow start may pass next time): retried, not down.
    assert of(out, Spawn) == [Spawn(2)] and h.lc.state.down is None and not h.lc.state.setup_failed
    h.drive_to_completion()


def test_step_is_pure_and_state_round_trips() -> None:
    cfg = small_config()
    state = LifeState()
    inputs: list[tuple[Input, float]] = [
        (Submit("p1", "hi", images=[{"type": "image", "data": "AA=="}], stream=True, timeout=4.0), 0.0),
        (Submit("p2", "there"), 0.5),
        (Spawned(1, 42, ["pi"], [dict(SEAL_STATE)], ["clear_queue"], seal={"extensions": False}), 1.0),
        (StartupChecked(1, []), 1.5),
        (Acked(1, "p1"), 2.0),
        (Stop("p1"), 2.5),
        (Decided(Receipt("p1", "failed", "interrupted", stop="stop-1")), 3.0),
        (Unsealed(1, "overlap"), 3.5),
        (SignalSeen(1, {"signal": "overlap", "idx": 9}), 3.6),
        (Tick(), 9.0),
    ]
    seen: list[list[Any]] = []
    for event, now in inputs:
        frozen = copy.deepcopy(state)
        new, actions = step(state, event, now, cfg)
        assert state == frozen, f"step changed its input state on {event!r}"
        again, again_actions = step(copy.deepcopy(state), event, now, cfg)
        assert (again, again_actions) == (new, actions)
        data = snapshot(new)
        assert restore(json.loads(json.dumps(data))) == new
        # stepping the restored state gives the same as stepping the original
        if seen:
            assert step(restore(snapshot(state)), event, now, cfg) == (new, actions)
        seen.append(actions)
        state = new
    assert [type(a) for a in seen[0]] == [Spawn]
    assert state.recent["p1"].reason == "interrupted"
    assert state.prompts["p2"].phase == "held"
    # The class form gives the same.
    lc = Lifecycle(cfg)
    assert [lc.step(event, now) for event, now in inputs] == seen
    assert lc.state == state


def test_every_deadline_has_its_handler_in_deadlines_order(monkeypatch: pytest.MonkeyPatch) -> None:
    """A passing deadline is dispatched by the machine's table, one handler per name of
    ``DEADLINES`` in its order; a deadline added without a handler fails at construction."""
    from bridge.core.lifecycle import machine

    assert tuple(Lifecycle()._deadlines) == DEADLINES
    monkeypatch.setattr(machine, "DEADLINES", (*DEADLINES, "new"))
    with pytest.raises(AssertionError, match="not DEADLINES"):
        Lifecycle()


def test_an_engine_that_closes_stdout_in_its_startup_check_counts_one_crash() -> None:
    h = Harness()
    h.submit("p1")
    h.spawned(1, startup=True)
    out = h.feed(StdoutClosed(1))
    assert of(out, StopEngine) == [StopEngine(1, False)]
    assert h.lc.state.crashes == []
    out = h.exited(1, 1, None, [LICENCE])
    assert len(h.lc.state.crashes) == 1
    (signal,) = [p for p in payloads(out) if p["signal"] == "seal-check"]
    assert LICENCE in signal["problems"][0]
    assert of(out, Spawn) == [Spawn(2)]
    h.drive_to_completion()


def test_an_engine_that_dies_is_stopping_before_its_exit_is_decided() -> None:
    """The supervisor's order on a death: stdout closes (StdoutClosed), then the
    session decides the held prompt on the exit (Decided), then EngineExited.
    Fed so, the next prompt waits for the next engine: nothing is written to
    the dead one, and it gets no receipt for a send that never happened."""
    h = Harness()
    generation = ready_engine(h, "p1", "p2")
    assert of(h.feed(StdoutClosed(generation)), StopEngine) == [StopEngine(generation, False)]
    h.procs[generation] = "gone"
    out = h.settle("p1", Facts(exited=True, working=True))
    assert delivered(out) == {"p1": ("outcome-unknown", "engine-exited")}
    assert not of(out, Write)
    out = h.exited(generation, None, 9, [LICENCE])
    assert len(h.lc.state.crashes) == 1
    assert of(out, Spawn) == [Spawn(generation + 1)]
    assert "p2" not in h.receipts and h.lc.state.queue == ["p2"]
    h.spawned(generation + 1)
    assert h.engine_has[generation + 1] == "p2"
    assert h.violations == []
    h.drive_to_completion()


def test_a_prompt_held_back_by_a_failed_journal_is_rejected_closing() -> None:
    """The journal fails writing p1's receipt down; p2's Write, in the same step,
    is held back (NotWritten), then JournalFailed: p2 was never written, so it is
    rejected/closing, not given up on an engine that never had it."""
    h = Harness()
    generation = ready_engine(h, "p1", "p2")
    h.journal_breaks = "No space left on device"
    out = h.settle("p1", Facts(tracker=("finished", None)))
    assert [w.request for w in of(out, Write) if w.kind == "prompt"] == ["p2"]
    assert "p2" not in h.engine_has.values()
    assert delivered(out) == {"p1": ("finished", None), "p2": ("rejected", "closing")}
    assert notes(out, "closing")[0]["why"] == "journal"
    assert not notes(out, "stop")
    assert of(out, StopEngine) == [StopEngine(generation, True)]
    assert of(h.exited(generation), Closed) == [Closed()]
    assert h.violations == []
    h.drive_to_completion()


def test_a_stall_is_measured_from_the_runs_last_line_and_stops_it_as_the_bridges() -> None:
    """The stall deadline starts at the write, moves with each Activity (plus a retry's wait;
    while a tool runs it is looked at again one stall timeout later), and when it passes the
    bridge signals ``stalled``, notes its stop ``by: stall``, aborts, and decides
    ``failed``/``stalled``; a stop that is not obeyed ends ``settle-timeout``."""
    h = Harness(small_config(stall_timeout=4.0, tool_timeout=None))
    generation = ready_engine(h, "p1")
    assert h.lc.state.deadlines["stall"] == 4.0
    h.now = 3.0
    h.feed(Activity(generation, "p1", at=2.5))  # a line at 2.5 s
    assert h.lc.state.deadlines["stall"] == 6.5
    h.feed(Activity(generation, "p1", at=2.5, pause=2.0))  # ... an auto_retry_start announcing 2 s
    assert h.lc.state.deadlines["stall"] == 8.5
    h.feed(Activity(generation, "p1", at=2.9, pause=math.inf))  # a tool runs
    assert h.lc.state.deadlines["stall"] == 3.0 + 4.0
    assert h.advance(3.9) == []  # 6.9 s: the deadline (7 s) is not due
    h.feed(Activity(generation, "p1", at=6.0))  # the tool ended at 6 s; nothing since
    assert h.lc.state.deadlines["stall"] == 10.0
    out = h.advance(10.0 - h.now)
    assert payloads(out) == [{"signal": "stalled", "request": "p1", "after": 4.0, "stop": "stop-1"}]
    (note,) = notes(out, "stop")
    assert (note["by"], note["stop"]) == ("stall", "stop-1")
    assert [w.cmd["type"] for w in of(out, Write)] == ["clear_queue", "abort"]
    assert "stall" not in h.lc.state.deadlines and h.lc.state.deadlines["stop"] == 10.0 + h.cfg.stop_grace
    assert h.feed(Activity(generation, "p1", at=10.0)) == [] and "stall" not in h.lc.state.deadlines
    out = h.settle("p1", Facts(tracker=("failed", "interrupted"), stop_by=note["by"]), stop=note["stop"])
    assert delivered(out) == {"p1": ("failed", "stalled")}
    # The same, its stop not obeyed: the stop's grace, then settle-timeout.
    h.submit("p2")
    h.acked.add("p2")
    h.feed(Acked(generation, "p2"))
    out = h.advance(4.0)
    assert notes(out, "stop")[0]["by"] == "stall"
    out = h.advance(h.cfg.stop_grace)
    (give_up,) = of(out, GiveUp)
    assert (give_up.request, give_up.why) == ("p2", "settle")


def test_a_tool_that_shows_nothing_past_the_tool_timeout_stops_its_prompt_as_a_stall() -> None:
    """Issue 42: the stall timer rests while a tool runs, and a tool that blocked (a stopped Pi
    during ``sleep 3``) held its prompt for ever. While a tool runs the deadline is the tool
    bound from the last line; a line (a tool's output) moves it; when it passes the bridge
    signals ``stalled`` (``after``: the tool bound), stops the run ``by: stall`` naming the
    tool, and decides ``failed``/``stalled``."""
    h = Harness(small_config(stall_timeout=4.0, tool_timeout=20.0))
    generation = ready_engine(h, "p1")
    h.now = 1.0
    h.feed(Activity(generation, "p1", at=1.0, pause=math.inf))  # a tool starts at 1 s
    assert h.lc.state.deadlines["stall"] == 21.0
    h.now = 15.0
    h.feed(Activity(generation, "p1", at=15.0, pause=math.inf))  # its output at 15 s
    assert h.lc.state.deadlines["stall"] == 35.0
    assert h.advance(19.9) == []
    out = h.advance(0.2)
    assert payloads(out) == [{"signal": "stalled", "request": "p1", "after": 20.0, "stop": "stop-1"}]
    (note,) = notes(out, "stop")
    assert note["by"] == "stall" and "a tool ran for 20 s" in note["why"]
    out = h.settle("p1", Facts(tracker=("failed", "interrupted"), stop_by=note["by"]), stop=note["stop"])
    assert delivered(out) == {"p1": ("failed", "stalled")}


def test_the_tool_timeout_has_a_default_so_no_tool_waits_for_ever() -> None:
    """The timeouts page says every wait is bounded: a tool's too, by default."""
    assert BridgeConfig().tool_timeout == 1800.0
    with pytest.raises(ValueError, match="tool_timeout must be more than 0"):
        BridgeConfig(tool_timeout=0)


def test_a_prompt_without_a_stall_timeout_has_no_stall_deadline() -> None:
    h = Harness(small_config(stall_timeout=4.0))
    h.feed(Submit("p1", "m", stall_timeout=0))
    h.accepted.append("p1")
    generation = ready_engine(h)
    h.acked.add("p1")
    h.feed(Acked(generation, "p1"))
    assert "stall" not in h.lc.state.deadlines
    h.feed(Activity(generation, "p1", at=1.0))
    assert "stall" not in h.lc.state.deadlines
    # A controller's stop ends the stall clock too.
    h.submit("p2")
    h.settle("p1", Facts(tracker=("finished", None)))
    h.acked.add("p2")
    h.feed(Acked(generation, "p2"))
    assert "stall" in h.lc.state.deadlines
    h.stop("p2")
    assert "stall" not in h.lc.state.deadlines


def test_a_shutdown_closes_when_the_engine_going_down_gave_the_last_receipts() -> None:
    """Shutdown while prompts wait, then the engine crashes until it is down: the queue's
    rejections are the last receipts, given inside the step that goes down -- and closing
    follows in that same step (it used to wait for an input that never came)."""
    h = Harness(small_config(crash_limit=2, restart_backoff=(0.0,)))
    for request in ("p1", "p2", "p3"):
        h.submit(request)
    h.feed(Shutdown(None))
    for _ in range(4):
        if h.lc.state.closed:
            break
        (spawn,) = [a for a in h.log if isinstance(a, Spawn) and a.generation in h.pending_spawns]
        h.spawned(spawn.generation)
        h.exited(spawn.generation, 3)
    assert h.lc.state.down is not None and h.lc.state.closed, h.lc.state
    assert sorted(h.receipts) == ["p1", "p2", "p3"] and h.closed == 1
    assert (h.receipts["p3"][0].state, h.receipts["p3"][0].reason) == ("rejected", "engine-down")


def test_a_dialog_of_an_engine_that_broke_gets_no_response() -> None:
    """The engine closed its stdout (killed) while a dialog was open: the dialog ends
    ``engine-exit`` with no response written -- not ``engine-stop`` with one journaled that
    could never be delivered (found by a new-user trial). A dialog of an engine the bridge
    stops on purpose is answered first."""
    h = Harness()
    g = ready_engine(h, "p1")
    h.feed(DialogOpened(g, "ui-1", "confirm", {"title": "sure?"}))
    actions = h.feed(StdoutClosed(g))
    (end,) = of(actions, DialogEnded)
    assert (end.by, end.answer) == ("engine-exit", None)
    assert not [w for w in of(actions, Write) if w.kind == "dialog"]
    h2 = Harness()
    g2 = ready_engine(h2, "p1")
    h2.feed(DialogOpened(g2, "ui-1", "confirm", {"title": "sure?"}))
    actions = h2.feed(Close("close"))
    (end,) = of(actions, DialogEnded)
    assert (end.by, end.answer) == ("closing", {"cancelled": True})
    assert [w.cmd for w in of(actions, Write) if w.kind == "dialog"] == [
        {"type": "extension_ui_response", "id": "ui-1", "cancelled": True}
    ]


def test_a_dialog_opened_after_its_prompts_stop_is_cancelled_at_once_not_asked() -> None:
    """The prompt is stopped while its extension waits on a dialog: the stop answers that
    dialog, the extension goes on and asks another before Pi's abort lands. The second is
    cancelled at once by the stop too, never asked: Pi's abort does not free it, so asking it
    held the stop (and the editor's ``session/cancel``) until ``--dialog-timeout`` and asked the
    user about a turn already cancelled (found by a new-user trial of ``bridge acp``)."""
    h = Harness()
    g = ready_engine(h, "p1")
    assert of(h.feed(DialogOpened(g, "ui-1", "confirm", {"title": "first?"})), AskDialog)
    actions = h.feed(Stop("p1"))
    assert [(e.by, e.answer) for e in of(actions, DialogEnded)] == [("stop", {"cancelled": True})]
    actions = h.feed(DialogOpened(g, "ui-2", "confirm", {"title": "second?"}))
    assert not of(actions, AskDialog) and not h.lc.state.dialogs.open
    assert [(e.by, e.answer) for e in of(actions, DialogEnded)] == [("stop", {"cancelled": True})]
    assert [w.cmd for w in of(actions, Write) if w.kind == "dialog"] == [
        {"type": "extension_ui_response", "id": "ui-2", "cancelled": True}
    ]
    assert "dialog" not in h.lc.state.deadlines
    # A dialog of a running prompt nobody stopped is asked, as before.
    h2 = Harness()
    g2 = ready_engine(h2, "p1")
    assert of(h2.feed(DialogOpened(g2, "ui-1", "confirm", {"title": "sure?"})), AskDialog)


def test_a_compaction_stopped_and_never_answered_holds_prompts_then_replaces_the_engine() -> None:
    """A prompt stopped while Pi compacts for it: ``abort`` is written and no prompt is written
    until the compaction is answered; when no answer comes within ``ack_timeout`` (the ``busy``
    deadline) the engine is replaced and the next prompt goes to the new one."""
    h = Harness()
    h.feed(Compact("keep it"))
    g = ready_engine(h, "p1", ack=False)
    writes = [w for w in of(h.log, Write) if w.kind == "config"]
    assert writes and writes[0].cmd["type"] == "compact"
    actions = h.feed(Stop("p1"))
    assert delivered(actions)["p1"] == ("rejected", "cancelled")
    assert [w.cmd["type"] for w in of(actions, Write)] == ["abort"]
    h.submit("p2")
    assert not [w for w in of(h.log, Write) if w.kind == "prompt"]  # held back: Pi still compacts
    actions = h.advance(h.cfg.ack_timeout + 0.1)
    assert [a.generation for a in of(actions, StopEngine)] == [g]  # replaced
    assert not [w for w in of(h.log, Write) if w.kind == "prompt"]


def compacted(actions: list[Any]) -> list[dict[str, Any]]:
    return [a.payload.to_json() for a in of(actions, Notify) if a.payload.to_json()["type"] == "compacted"]


def started(actions: list[Any]) -> list[dict[str, Any]]:
    return [a.payload.to_json() for a in of(actions, Notify) if a.payload.to_json().get("event") == "started"]


def test_a_compaction_the_engine_never_answers_is_compacted_not_ok_before_the_receipt() -> None:
    """docs: guide/steering.md: the compaction is bounded by the prompt's stall timeout; past it the
    prompt is rejected/config and the engine replaced -- and the controller gets ``compacted``
    ``ok: false`` saying so, before the receipt (it used to get none, while the conversation
    it asked to compact was lost with the engine)."""
    h = Harness()
    h.feed(Compact("keep it"))
    h.submit("p1", stall=30.0)
    (spawn,) = of(h.log, Spawn)
    h.spawned(spawn.generation)
    assert [w.cmd["type"] for w in of(h.log, Write) if w.kind == "config"] == ["compact"]
    out = h.advance(30.1)
    (notice,) = compacted(out)
    assert notice["id"] == "p1" and notice["ok"] is False
    assert notice["error"] == (
        "the engine did not answer compact in 30 s: the engine is replaced, and the conversation is lost with it"
    )
    assert delivered(out) == {"p1": ("rejected", "config")}
    kinds = [type(a).__name__ for a in out if type(a) in (Notify, Deliver)]
    assert kinds.index("Notify") < kinds.index("Deliver")
    assert [n["ok"] for n in notes(out, "compacted")] == [False]  # journaled, for replay and diagnose
    assert h.violations == []


def test_an_engine_exit_during_a_compaction_is_compacted_not_ok_and_a_new_conversation() -> None:
    """The engine exits while it compacts for a prompt: ``compacted`` ``ok: false`` (the
    conversation is lost with it), the prompt goes to the next engine without a compaction
    (there is nothing to compact in a new conversation), and that engine's ``started`` notice
    says ``newConversation``: it replaces one that had been written a prompt."""
    h = Harness()
    g1 = ready_engine(h, "p1")
    assert [n["newConversation"] for n in started(h.log)] == [False]
    h.settle("p1", Facts(tracker=("finished", None)))
    h.feed(Compact("keep it"))
    h.submit("p2")
    assert [w.cmd["type"] for w in of(h.log, Write) if w.kind == "config"] == ["compact"]
    out = h.exited(g1, 1, None, ["boom"])
    (notice,) = compacted(out)
    assert notice["id"] == "p2" and notice["ok"] is False
    assert notice["error"] == "the engine exited before it answered compact: the conversation is lost with it"
    assert "p2" not in delivered(out)  # never written: it waits for the next engine
    h.advance(5.0)  # past the restart backoff
    (spawn,) = [s for s in of(h.log, Spawn) if s.generation > g1]
    out = h.spawned(spawn.generation)
    assert [n["newConversation"] for n in started(out)] == [True]
    configs = [w.cmd["type"] for w in of(h.log, Write) if w.kind == "config" and w.generation == spawn.generation]
    assert configs == []  # nothing to compact any more
    assert [w.request for w in of(h.log, Write) if w.kind == "prompt"] == ["p1", "p2"]
    assert h.violations == []


def test_an_engine_that_took_none_of_its_prompt_is_replaced_by_one_that_says_no_new_conversation() -> None:
    """``newConversation`` is for an engine that replaces one written a prompt: a prompt of
    which not one byte went in (the engine's stdin closed first: ``-- false``) leaves the
    engine without a conversation (it said true: a new user's trial)."""
    h = Harness()
    g1 = ready_engine(h, "p1", ack=False)
    out = h.feed(WriteFailed(g1, "p1", False, True, "EPIPE", []))
    assert delivered(out) == {"p1": ("rejected", "engine-down")}
    h.exited(g1, 1, None, [])
    h.submit("p2")
    h.advance(5.0)  # past the restart backoff
    (spawn,) = [s for s in of(h.log, Spawn) if s.generation > g1]
    assert [n["newConversation"] for n in started(h.spawned(spawn.generation))] == [False]
    g2 = spawn.generation
    h.acked.add("p2")
    h.feed(Acked(g2, "p2"))
    h.settle("p2", Facts(tracker=("finished", None)))
    h.exited(g2, 1, None, [])
    h.submit("p3")
    h.advance(5.0)
    (spawn3,) = [s for s in of(h.log, Spawn) if s.generation > g2]
    assert [n["newConversation"] for n in started(h.spawned(spawn3.generation))] == [True]
    assert h.violations == []
