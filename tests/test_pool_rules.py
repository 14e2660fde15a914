"""The pool's rules (bridge/core/pool.py), without processes: a fake clock, inputs fed, actions
read. One test per rule (R1-R13 in the module's opening comment)."""

from __future__ import annotations

from typing import Any

import pytest

from bridge.core.pool import (
    Clean,
    Closed,
    Dispatch,
    Notice,
    PoolAction,
    PoolConfig,
    PoolRules,
    Reject,
    StartEngine,
    StopEngine,
)
from bridge.core.words import Reason


def of(kind: type, actions: list[PoolAction]) -> list[Any]:
    return [a for a in actions if isinstance(a, kind)]


def events(actions: list[PoolAction]) -> list[str]:
    return [a.payload["event"] for a in of(Notice, actions)]


def ready(config: PoolConfig, now: float = 0.0) -> PoolRules:
    """A pool whose engines at open have all started."""
    rules = PoolRules(config)
    for start in of(StartEngine, rules.open(now)):
        rules.started(start.engine, now)
    return rules


def test_r5_spares_start_at_open_and_default_to_every_engine() -> None:
    assert [a.engine for a in of(StartEngine, PoolRules(PoolConfig(engines=3)).open(0))] == [1, 2, 3]
    assert [a.engine for a in of(StartEngine, PoolRules(PoolConfig(engines=3, spares=1)).open(0))] == [1]
    assert of(StartEngine, PoolRules(PoolConfig(engines=3, spares=0)).open(0)) == []


def test_r5_a_busy_spare_is_replaced_while_the_cap_allows() -> None:
    rules = ready(PoolConfig(engines=2, spares=1))
    actions = rules.submit("p1", None, 1.0)
    assert of(Dispatch, actions) == [Dispatch("p1", 1, False)]
    assert of(StartEngine, actions) == [StartEngine(2)]
    rules.started(2, 1.5)
    assert of(StartEngine, rules.submit("p2", None, 2.0)) == [], "the cap: two engines"


def test_r1_a_prompt_goes_to_an_idle_engine_the_most_recently_used() -> None:
    rules = ready(PoolConfig(engines=3))
    assert of(Dispatch, rules.submit("p1", None, 1)) == [Dispatch("p1", 3, False)]  # all idle since 0: highest
    assert of(Dispatch, rules.submit("p2", None, 1)) == [Dispatch("p2", 2, False)]
    rules.settled("p2", 2)
    rules.settled("p1", 3)
    assert of(Dispatch, rules.submit("p3", None, 4)) == [Dispatch("p3", 3, True)], "used at 3, after engine 2"


def test_r1_prompts_wait_in_order_when_every_engine_is_busy() -> None:
    rules = ready(PoolConfig(engines=1))
    rules.submit("p1", None, 0)
    assert rules.submit("p2", None, 0) == [] and rules.submit("p3", None, 0) == []
    assert [w.request for w in rules.waiting] == ["p2", "p3"]
    assert of(Dispatch, rules.settled("p1", 1)) == [Dispatch("p2", 1, True)]
    assert of(Dispatch, rules.settled("p2", 2)) == [Dispatch("p3", 1, True)]


def test_r2_a_prompt_on_a_used_engine_is_fresh_unless_it_continues_its_conversation() -> None:
    rules = ready(PoolConfig(engines=1))
    assert of(Dispatch, rules.submit("p1", "a", 0)) == [Dispatch("p1", 1, False)], "a new engine: nothing to clear"
    rules.settled("p1", 1)
    assert of(Dispatch, rules.submit("p2", "a", 1)) == [Dispatch("p2", 1, False)], "its own conversation goes on"
    rules.settled("p2", 2)
    rules.end_conversation("a", 2)
    assert of(Dispatch, rules.submit("p3", None, 3)) == [Dispatch("p3", 1, True)], "no stranger reads a's context"


def test_r3_a_conversation_keeps_its_engine_and_waits_for_it_while_others_pass() -> None:
    rules = ready(PoolConfig(engines=2))
    assert of(Dispatch, rules.submit("a1", "a", 0)) == [Dispatch("a1", 2, False)]
    assert rules.submit("a2", "a", 0) == [], "a's engine is busy: a2 waits for it"
    assert of(Dispatch, rules.submit("x", None, 0)) == [Dispatch("x", 1, False)], "a stranger passes"
    rules.settled("x", 1)
    assert of(Dispatch, rules.submit("b1", "b", 1)) == [Dispatch("b1", 1, True)]
    assert of(Dispatch, rules.settled("a1", 2)) == [Dispatch("a2", 2, False)]
    assert rules.held == {"a": 2, "b": 1}


def test_r3_the_order_of_a_conversation_is_kept_when_it_has_no_engine_yet() -> None:
    rules = ready(PoolConfig(engines=1))
    rules.submit("x", None, 0)
    rules.submit("a1", "a", 0)
    rules.submit("a2", "a", 0)
    assert of(Dispatch, rules.settled("x", 1)) == [Dispatch("a1", 1, True)], "a2 waits behind a1, not beside it"
    assert of(Dispatch, rules.settled("a1", 2)) == [Dispatch("a2", 1, False)]


def test_r3_an_engine_that_ends_loses_its_conversation_and_says_so() -> None:
    rules = ready(PoolConfig(engines=2, spares=0))
    rules.submit("a1", "a", 0)  # no engine: one starts
    rules.started(1, 0)
    rules.settled("a1", 1)
    actions = rules.gone(1, 2)
    assert events(actions) == ["engine-stopped", "conversation-lost"]
    assert of(Notice, actions)[1].payload["conversation"] == "a" and rules.held == {}


def test_r4_an_engine_starts_for_each_prompt_no_engine_can_take_up_to_the_cap() -> None:
    rules = PoolRules(PoolConfig(engines=2, spares=0))
    assert rules.open(0) == []
    assert of(StartEngine, rules.submit("p1", None, 0)) == [StartEngine(1)]
    assert of(StartEngine, rules.submit("p2", None, 0)) == [StartEngine(2)]
    assert of(StartEngine, rules.submit("p3", None, 0)) == [], "the cap"
    assert of(Dispatch, rules.started(2, 1)) == [Dispatch("p1", 2, False)]
    assert of(Dispatch, rules.started(1, 1)) == [Dispatch("p2", 1, False)]
    assert of(Dispatch, rules.settled("p1", 2)) == [Dispatch("p3", 2, True)]


def test_r4_a_conversation_waiting_for_its_busy_engine_starts_nothing() -> None:
    rules = PoolRules(PoolConfig(engines=3, spares=0))
    rules.submit("a1", "a", 0)
    rules.started(1, 0)
    assert of(StartEngine, rules.submit("a2", "a", 0)) == []
    assert of(StartEngine, rules.submit("b1", "b", 0)) == [StartEngine(2)]
    assert of(StartEngine, rules.submit("b2", "b", 0)) == [], "b's first prompt has a start coming"


def test_r6_at_the_cap_the_longest_idle_conversation_gives_its_engine_up() -> None:
    rules = ready(PoolConfig(engines=2))
    rules.submit("a1", "a", 0)
    rules.submit("b1", "b", 0)
    rules.settled("a1", 1)
    rules.settled("b1", 2)
    actions = rules.submit("c1", "c", 3)
    assert events(actions) == ["conversation-lost"]
    assert of(Notice, actions)[0].payload["conversation"] == "a"
    assert of(Dispatch, actions) == [Dispatch("c1", rules.held["c"], True)]
    assert "a" not in rules.held and rules.held["b"] != rules.held["c"]


def test_r6_no_eviction_while_a_start_is_coming() -> None:
    rules = ready(PoolConfig(engines=2, spares=1))
    rules.submit("a1", "a", 0)  # engine 1; engine 2 starts as the spare
    rules.settled("a1", 1)
    assert events(rules.submit("b1", "b", 2)) == [], "engine 2 is starting: b1 waits for it"


def test_r7_an_idle_engine_beyond_the_spares_is_reaped_at_its_idle_timeout() -> None:
    rules = ready(PoolConfig(engines=3, spares=1, idle_timeout=10))
    rules.submit("p1", None, 0)  # engine 1, engine 2 starts
    rules.started(2, 0)
    rules.submit("p2", None, 0)  # engine 2, engine 3 starts
    rules.started(3, 0)
    rules.settled("p1", 1)
    rules.settled("p2", 2)
    # Idle since: engine 3 at 0 (it never ran), engine 1 at 1, engine 2 at 2 (the kept spare).
    assert rules.next_deadline() == 10
    assert of(StopEngine, rules.tick(9.5)) == []
    actions = rules.tick(10)
    assert of(StopEngine, actions) == [StopEngine(3)] and "engine-reaped" in events(actions)
    assert rules.next_deadline() == 11
    assert of(StopEngine, rules.tick(11)) == [StopEngine(1)]
    assert rules.next_deadline() is None, "engine 2, the one spare, stays"
    rules.gone(1, 12)
    rules.gone(3, 12)
    assert [e.number for e in rules.engines.values()] == [2]


def test_r7_without_an_idle_timeout_nothing_is_reaped() -> None:
    rules = ready(PoolConfig(engines=2, spares=0))
    assert rules.next_deadline() is None and of(StopEngine, rules.tick(1e9)) == []


def test_r7_reaping_an_engine_loses_its_conversation_and_says_so() -> None:
    rules = PoolRules(PoolConfig(engines=1, spares=0, idle_timeout=5))
    rules.submit("a1", "a", 0)
    rules.started(1, 0)
    rules.settled("a1", 1)
    actions = rules.tick(6)
    assert events(actions) == ["conversation-lost", "engine-reaped"] and rules.held == {}


def test_r8_a_full_queue_rejects_but_a_prompt_an_idle_engine_takes_is_never_queued() -> None:
    rules = ready(PoolConfig(engines=2, queue_max=0))
    assert of(Dispatch, rules.submit("p1", None, 0)) != []
    assert of(Dispatch, rules.submit("p2", None, 0)) != []
    assert rules.submit("p3", None, 0) == [Reject("p3", Reason.QUEUE_FULL)]
    rules = ready(PoolConfig(engines=1, queue_max=1))
    rules.submit("p1", None, 0)
    assert rules.submit("p2", None, 0) == []
    assert rules.submit("p3", None, 0) == [Reject("p3", Reason.QUEUE_FULL)]


def test_r8_the_queue_is_bounded_in_bytes_too() -> None:
    """Issue 42: a waiting prompt holds its whole text, so the waiting prompts' bytes are bounded
    (``queue_bytes``) as well as their count; a prompt bigger than the bound alone is rejected
    even when an engine is free."""
    rules = ready(PoolConfig(engines=1, queue_bytes=1000))
    assert rules.submit("big", None, 0, size=1001) == [Reject("big", Reason.QUEUE_FULL)]
    assert of(Dispatch, rules.submit("p1", None, 0, size=1000)) != []  # an engine takes it: not waiting
    assert rules.submit("p2", None, 0, size=600) == []
    assert rules.submit("p3", None, 0, size=401) == [Reject("p3", Reason.QUEUE_FULL)]
    assert rules.submit("p4", None, 0, size=400) == []
    assert [w.request for w in rules.waiting] == ["p2", "p4"]


def test_r9_an_engine_that_cannot_start_stops_the_starts_and_rejects_what_has_no_engine() -> None:
    rules = PoolRules(PoolConfig(engines=2, spares=0))
    rules.submit("p1", None, 0)
    rules.submit("p2", None, 0)
    assert of(Reject, rules.failed(1, "seal check failed", 1)) == [], "engine 2 may still start"
    assert rules.down == "seal check failed"
    actions = rules.failed(2, "seal check failed", 1)
    assert of(Reject, actions) == [
        Reject("p1", Reason.ENGINE_DOWN, "seal check failed"),
        Reject("p2", Reason.ENGINE_DOWN, "seal check failed"),
    ]
    assert rules.submit("p3", None, 2) == [Reject("p3", Reason.ENGINE_DOWN, "seal check failed")]


def test_r9_a_down_engine_leaves_the_others_working() -> None:
    rules = ready(PoolConfig(engines=2))
    assert of(Dispatch, rules.submit("p1", None, 0)) == [Dispatch("p1", 2, False)]
    actions = rules.failed(1, "crash limit", 1)
    assert of(StopEngine, actions) == [StopEngine(1)]
    rules.gone(1, 1)
    assert rules.submit("p2", None, 1) == [], "down: no new engine, p2 waits for engine 2"
    assert of(Dispatch, rules.settled("p1", 2)) == [Dispatch("p2", 2, True)]


def test_r10_close_rejects_the_waiting_stops_every_engine_and_closes_when_all_is_settled() -> None:
    rules = ready(PoolConfig(engines=2, spares=1))
    rules.submit("p1", None, 0)  # engine 1; engine 2 starts
    rules.submit("p2", None, 0)  # waits for engine 2
    actions = rules.close(1)
    assert of(Reject, actions) == [Reject("p2", Reason.CLOSING)]
    assert of(StopEngine, actions) == [StopEngine(1)]
    assert of(StopEngine, rules.started(2, 1)) == [StopEngine(2)], "it started while closing"
    assert rules.submit("p3", None, 1) == [Reject("p3", Reason.CLOSING)]
    rules.gone(1, 2)
    rules.gone(2, 2)
    assert of(Closed, rules.settled("p1", 2)) == [Closed()], "closed once p1 has its receipt"
    assert rules.close(3) == [] and rules.tick(4) == []


def test_r10_shutdown_runs_the_accepted_prompts_then_closes() -> None:
    rules = ready(PoolConfig(engines=1))
    rules.submit("p1", None, 0)
    rules.submit("p2", None, 0)
    assert of(StopEngine, rules.shutdown(1)) == []
    assert rules.submit("p3", None, 1) == [Reject("p3", Reason.CLOSING)]
    assert of(Dispatch, rules.settled("p1", 2)) == [Dispatch("p2", 1, True)]
    assert of(StopEngine, rules.settled("p2", 3)) == [StopEngine(1)]
    assert of(Closed, rules.gone(1, 4)) == [Closed()]


def test_r10_a_drain_past_its_bound_stops_the_running_prompts_as_timed_out() -> None:
    rules = ready(PoolConfig(engines=2))
    rules.submit("p1", None, 0)
    rules.submit("p2", None, 0)
    rules.submit("p3", None, 0)
    rules.shutdown(1, drain_timeout=5)
    assert rules.next_deadline() == 6
    actions = rules.tick(6)
    assert of(Reject, actions) == [Reject("p3", Reason.CLOSING)]
    assert sorted(a.engine for a in of(StopEngine, actions)) == [1, 2]
    assert all(a.drain_expired for a in of(StopEngine, actions))


def test_r11_a_waiting_prompt_stopped_is_rejected_cancelled_and_a_running_one_is_left_to_its_bridge() -> None:
    rules = ready(PoolConfig(engines=1))
    rules.submit("p1", None, 0)
    rules.submit("p2", None, 0)
    assert rules.stop("p2", 1) == [Reject("p2", Reason.CANCELLED)]
    assert rules.stop("p1", 1) == [] and rules.running == {"p1": 1}
    assert of(Dispatch, rules.settled("p1", 2)) == [], "p2 was cancelled"


def test_the_same_inputs_give_the_same_actions() -> None:
    def script() -> list[PoolAction]:
        rules = PoolRules(PoolConfig(engines=3, spares=1, idle_timeout=4))
        out = rules.open(0)
        for k, (conversation, at) in enumerate([("a", 0), (None, 0), ("b", 1), ("a", 1), (None, 2)]):
            out += rules.submit(f"p{k}", conversation, at)
        out += rules.started(1, 2) + rules.started(2, 2) + rules.started(3, 3)
        for request in list(rules.running):
            out += rules.settled(request, 4)
        return out + rules.tick(9) + rules.close(10)

    assert script() == script()


@pytest.mark.parametrize(
    "kw",
    [
        {"engines": 0},
        {"engines": True},
        {"engines": 2, "spares": -1},
        {"idle_timeout": 0},
        {"queue_max": -1},
        {"queue_bytes": 0},
    ],
)
def test_a_bad_bound_is_refused(kw: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        PoolConfig(**kw)


# -- R12 moves ----------------------------------------------------------------------------


def test_r12_a_conversation_is_taken_up_at_its_first_prompt_and_continues_without_a_switch() -> None:
    rules = ready(PoolConfig(engines=2, moves=True))
    [first] = of(Dispatch, rules.submit("a1", "a", 1))
    assert (first.take_up, first.fresh) == ("a", False), "its first prompt switches to the stored copy (empty)"
    rules.settled("a1", 2)
    [second] = of(Dispatch, rules.submit("a2", "a", 3))
    assert (second.engine, second.take_up, second.fresh) == (first.engine, None, False)
    rules.settled("a2", 4, kept=False)  # not vouched: its engine holds what the pool did not record
    [third] = of(Dispatch, rules.submit("a3", "a", 5))
    assert (third.engine, third.take_up) == (first.engine, "a"), "taken up again from the stored copy"
    rules.settled("a3", 6)
    rules.restarted(first.engine, 7)  # its bridge started a new engine process
    [fourth] = of(Dispatch, rules.submit("a4", "a", 8))
    assert fourth.take_up == "a"


def test_r12_a_conversation_waits_for_its_own_running_prompt_then_moves_when_its_engine_is_busy() -> None:
    rules = ready(PoolConfig(engines=2, moves=True))
    [a1] = of(Dispatch, rules.submit("a1", "a", 1))
    assert of(Dispatch, rules.submit("a2", "a", 1)) == [], "a2 reads a1's exchange: it waits, though an engine is free"
    [a2] = of(Dispatch, rules.settled("a1", 2))
    assert (a2.engine, a2.take_up) == (a1.engine, None)
    rules.settled("a2", 3)
    other = 3 - a1.engine
    [b1] = of(Dispatch, rules.submit("b1", "b", 4))
    assert b1.engine == other
    # A stranger at the cap: every idle engine held, no start can come: a's (idle longest) is taken.
    [s] = of(Dispatch, rules.submit("s", None, 5))
    assert s.engine == a1.engine and s.fresh
    assert events(rules.submit("a3", "a", 6)) == [], "nothing lost: no conversation-lost"
    assert rules.status()["waiting"] == ["a3"], "no engine idle: it waits"
    actions = rules.settled("b1", 7)  # b's engine is idle; a's is busy with the stranger
    [a3] = of(Dispatch, actions)
    assert (a3.engine, a3.take_up) == (other, "a"), "a moves, taking its stored copy up"
    assert rules.held == {"a": other}
    assert [a.payload for a in of(Notice, actions)] == [], "b was released (kept), a had no engine"


def test_r12_an_engine_s_end_or_reaping_releases_its_conversation_and_the_next_prompt_moves() -> None:
    rules = ready(PoolConfig(engines=2, spares=1, idle_timeout=10, moves=True))
    opened = rules.submit("a1", "a", 1)
    [a1] = of(Dispatch, opened)
    for start in of(StartEngine, opened):  # the busy spare is replaced
        rules.started(start.engine, 1)
    rules.settled("a1", 2)
    actions = rules.tick(12)  # a's engine is idle past the timeout and beyond the spare
    assert of(StopEngine, actions) == [StopEngine(a1.engine)]
    assert "conversation-lost" not in events(actions)
    rules.gone(a1.engine, 13)
    actions = rules.submit("a2", "a", 14)
    [a2] = of(Dispatch, actions)
    assert a2.engine != a1.engine and a2.take_up == "a"
    # Moved from an engine it still held (busy here) is told.
    rules2 = ready(PoolConfig(engines=2, moves=True))
    [x1] = of(Dispatch, rules2.submit("x1", "x", 1))
    rules2.settled("x1", 2)
    rules2.engines[x1.engine].state = "busy"  # (as if given away by the live layer's error path)
    moved = rules2.submit("x2", "x", 3)
    assert [a.payload for a in of(Notice, moved)] == [
        {"type": "pool", "event": "conversation-moved", "conversation": "x", "from": x1.engine, "to": 3 - x1.engine}
    ]


def test_r12_an_engine_that_fails_a_take_up_is_stopped_and_without_moves_nothing_changes() -> None:
    rules = ready(PoolConfig(engines=2, moves=True))
    [a1] = of(Dispatch, rules.submit("a1", "a", 1))
    assert of(StopEngine, rules.unusable(a1.engine, 2)) == [StopEngine(a1.engine)]
    assert rules.held == {}
    rules.settled("a1", 2)  # its receipt (rejected/engine) came from the live layer
    plain = ready(PoolConfig(engines=2))
    [p1] = of(Dispatch, plain.submit("a1", "a", 1))
    assert p1.take_up is None


# -- R13 tenants ------------------------------------------------------------------------------


def test_r13_an_engine_is_cleaned_after_a_prompt_without_a_key_before_the_next_prompt() -> None:
    rules = ready(PoolConfig(engines=1, clean=True))
    assert of(Dispatch, rules.submit("p1", None, 0)) == [Dispatch("p1", 1, False)], "a new engine is clean"
    assert rules.submit("p2", None, 0) == []
    actions = rules.settled("p1", 1)
    assert of(Clean, actions) == [Clean(1)] and of(Dispatch, actions) == [], "not before it is clean"
    assert of(StartEngine, actions) == [], "the engine being cleaned is the one coming (R4)"
    assert rules.status()["engines"][0]["state"] == "cleaning"
    assert of(Dispatch, rules.cleaned(1, 2)) == [Dispatch("p2", 1, True)]
    assert of(Clean, rules.settled("p2", 3)) == [Clean(1)], "nothing a keyless prompt started outlives it"


def test_r13_a_conversation_keeps_its_engine_uncleaned_until_it_ends() -> None:
    rules = ready(PoolConfig(engines=1, clean=True))
    rules.submit("p1", "a", 0)
    actions = rules.settled("p1", 1)
    assert of(Clean, actions) == [], "its folder is its own between its prompts"
    assert of(Dispatch, rules.submit("p2", "a", 1)) == [Dispatch("p2", 1, False)]
    rules.settled("p2", 2)
    assert of(Clean, rules.end_conversation("a", 3)) == [Clean(1)]
    assert of(Dispatch, rules.submit("p3", "b", 4)) == [], "a new key waits for the clean-up too"
    assert of(Dispatch, rules.cleaned(1, 5)) == [Dispatch("p3", 1, True)]


def test_r13_an_engine_evicted_at_the_cap_is_cleaned_first_and_no_second_is_evicted() -> None:
    rules = ready(PoolConfig(engines=2, clean=True))
    rules.submit("p1", "a", 0)
    rules.submit("p2", "b", 0)
    rules.settled("p1", 1)
    rules.settled("p2", 2)
    actions = rules.submit("p3", None, 3) + rules.submit("p4", None, 3)
    assert of(Clean, actions) == [Clean(2)], "the one idle longest (R6), once"
    assert of(Dispatch, actions) == [] and [w.request for w in rules.waiting] == ["p3", "p4"]
    assert of(Dispatch, rules.cleaned(2, 4)) == [Dispatch("p3", 2, True)]


def test_r13_a_clean_up_that_fails_stops_the_engine_and_another_is_started() -> None:
    rules = ready(PoolConfig(engines=1, clean=True))
    rules.submit("p1", None, 0)
    rules.submit("p2", None, 0)
    rules.settled("p1", 1)
    actions = rules.unclean(1, "a process would not die", 2)
    assert of(StopEngine, actions) == [StopEngine(1)] and of(Dispatch, actions) == []
    assert events(actions) == ["clean-failed"]
    assert of(StartEngine, actions) == [StartEngine(2)], "R4: the waiting prompt needs an engine"
    assert rules.cleaned(1, 2.5) == [], "a late report changes nothing"
    rules.gone(1, 3)
    assert of(Dispatch, rules.started(2, 4)) == [Dispatch("p2", 2, False)]


def test_r13_without_clean_nothing_is_cleaned() -> None:
    rules = ready(PoolConfig(engines=1))
    rules.submit("p1", None, 0)
    rules.submit("p2", None, 0)
    actions = rules.settled("p1", 1)
    assert of(Clean, actions) == [] and of(Dispatch, actions) == [Dispatch("p2", 1, True)]


def test_r12_a_receipted_prompt_shows_done_while_its_engine_records_and_the_engine_stays_taken() -> None:
    """Issue 42: between a conversation's receipt and its recording the status said "running".
    ``receipted`` changes only what the status shows: the engine is not free until ``settled``."""
    rules = ready(PoolConfig(engines=1, moves=True))
    [first] = of(Dispatch, rules.submit("a1", "a", 1))
    rules.receipted("a1")
    status = rules.status()
    assert status["running"] == {} and status["engines"][0]["state"] == "recording", status
    assert of(Dispatch, rules.submit("b1", None, 2)) == [], "the recording engine takes nothing"
    [b1] = of(Dispatch, rules.settled("a1", 3))
    assert b1.engine == first.engine and rules.status()["running"] == {"b1": first.engine}
