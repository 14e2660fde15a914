"""The Ray pool's dispatch (bridge/core/dispatch.py), rule by rule, with no Ray and no
process: D1-D9 and the invariant that every accepted prompt gets exactly one receipt."""

from __future__ import annotations

import random

import pytest

from bridge.core.dispatch import Dispatch, Lane, Stage
from bridge.core.receipts import Receipt, Where


def lane(name: str, node: str = "node-a") -> Lane:
    return Lane(name, Where(node, address="10.0.0.1", actor=f"actor-{name}", journal=f"/j/{name}.jsonl"))


def pool(*names: str) -> Dispatch:
    d = Dispatch()
    for n in names:
        d.add_lane(lane(n, node=f"node-{n}"))
    return d


def finished(request: str) -> Receipt:
    return Receipt(request, "finished", reply="ok")


def test_d1_prompts_go_to_idle_live_lanes_in_submit_order() -> None:
    d = pool("a", "b")
    for r in ("p1", "p2", "p3"):
        assert d.submit(r) is None
    assert d.take("a") == "p1" and d.take("b") == "p2"
    assert d.stage("p1") is Stage.HANDED and d.stage("p3") is Stage.QUEUED
    with pytest.raises(ValueError, match="holds p1"):
        d.take("a")  # one prompt per lane at a time
    assert d.settled("a", finished("p1"))
    assert d.take("a") == "p3"
    assert d.queued == []


def test_d2_the_receipt_from_the_prompts_own_lane_settles_it_with_where_it_ran() -> None:
    d = pool("a", "b")
    d.submit("p1")
    d.take("a")
    assert d.settled("b", finished("p1")) == [], "not the lane it was handed to"
    (r,) = d.settled("a", finished("p1"))
    assert r.state == "finished" and r.where == lane("a", "node-a").where
    assert d.settled("a", finished("p1")) == [], "a second receipt is dropped"
    assert d.stage("p1") is Stage.SETTLED and d.outstanding == 0


def test_d3_a_lost_lane_costs_its_prompt_an_honest_unknown_naming_the_node() -> None:
    d = pool("a", "b")
    for r in ("p1", "p2"):
        d.submit(r)
    d.take("a")
    d.take("b")
    d.running("b", "p2")
    (ra,) = d.lost("a", "ActorDiedError: the node died")
    (rb,) = d.lost("b", "ActorDiedError: the node died")
    assert (ra.state, ra.reason) == ("delivery-unknown", "node-lost"), "handed, no run reported"
    assert (rb.state, rb.reason) == ("outcome-unknown", "node-lost"), "its run had started"
    for r, name in ((ra, "a"), (rb, "b")):
        assert r.native_error is not None and f"node-{name}" in r.native_error and f"/j/{name}.jsonl" in r.native_error
        assert r.where is not None and r.where.node == f"node-{name}"
    # A receipt that comes back late from a lost lane is not a second one.
    assert d.settled("a", finished("p1")) == []
    assert d.lost("a", "again") == []


def test_d4_a_queued_prompt_is_not_lost_with_a_lane_it_goes_to_another() -> None:
    d = pool("a", "b")
    for r in ("p1", "p2", "p3"):
        d.submit(r)
    d.take("a")
    d.take("b")
    assert [r.request for r in d.lost("a", "gone")] == ["p1"]
    assert d.stage("p3") is Stage.QUEUED
    d.settled("b", finished("p2"))
    assert d.take("b") == "p3"
    assert d.settled("b", finished("p3"))


def test_d5_with_no_live_lane_left_what_waits_and_what_comes_is_rejected_engine_down() -> None:
    d = pool("a")
    for r in ("p1", "p2", "p3"):
        d.submit(r)
    d.take("a")
    out = d.lost("a", "the node died")
    assert [(r.request, r.state, r.reason) for r in out] == [
        ("p1", "delivery-unknown", "node-lost"),
        ("p2", "rejected", "engine-down"),
        ("p3", "rejected", "engine-down"),
    ]
    late = d.submit("p4")
    assert late is not None and (late.state, late.reason) == ("rejected", "engine-down")
    assert late.native_error is not None and "node-a" in late.native_error
    assert d.outstanding == 0


def test_d6_closing_rejects_what_waits_and_lets_handed_prompts_finish() -> None:
    d = pool("a")
    for r in ("p1", "p2"):
        d.submit(r)
    d.take("a")
    assert [(r.request, r.reason) for r in d.close()] == [("p2", "closing")]
    new = d.submit("p3")
    assert new is not None and (new.state, new.reason) == ("rejected", "closing")
    assert d.settled("a", finished("p1"))
    assert d.outstanding == 0


def test_d7_a_lane_is_in_doubt_once_its_node_lost_another() -> None:
    d = Dispatch()
    for name, node in (("a", "n1"), ("b", "n1"), ("c", "n2")):
        d.add_lane(lane(name, node))
    assert not any(d.in_doubt(n) for n in "abc")
    d.lost("a", "actor died")
    assert d.in_doubt("b") and not d.in_doubt("c")
    assert d.lanes_on("n1") == ["b"]


def test_d8_a_lane_whose_bridge_is_down_is_retired_and_its_prompt_goes_to_another() -> None:
    d = pool("a", "b")
    for r in ("p1", "p2", "p3"):
        d.submit(r)
    d.take("a")
    d.take("b")
    down = Receipt("p1", "rejected", "engine-down", native_error="the crash limit was reached")
    assert d.settled("a", down) == [], "not the prompt's receipt: it was never written"
    assert d.retired("a") and d.queued == ["p1", "p3"] and d.stage("p1") is Stage.QUEUED
    assert d.settled("b", finished("p2"))
    assert d.take("b") == "p1"
    (r,) = d.settled("b", finished("p1"))
    assert r.where is not None and r.where.node == "node-b"
    # The last lane's bridge down: what waits is rejected, the prompt with it.
    d.take("b")
    out = d.settled("b", Receipt("p3", "rejected", "engine-down"))
    assert [(x.request, x.state, x.reason) for x in out] == [("p3", "rejected", "engine-down")]
    assert out[0].native_error is not None and "crash limit" in out[0].native_error
    assert d.outstanding == 0


def test_d8_a_rejection_for_the_prompt_itself_is_its_receipt() -> None:
    d = pool("a")
    d.submit("p1")
    d.take("a")
    (r,) = d.settled("a", Receipt("p1", "rejected", "config"))
    assert (r.state, r.reason) == ("rejected", "config") and not d.retired("a")
    d.close()
    d.submit("p2")
    d2 = pool("a")
    d2.submit("p1")
    d2.take("a")
    d2.close()
    (c,) = d2.settled("a", Receipt("p1", "rejected", "closing"))
    assert c.reason == "closing", "closing while the pool closes is the prompt's receipt"


def test_d9_a_stop_takes_a_queued_prompt_out_unsent_and_leaves_a_handed_one_to_its_lane() -> None:
    d = pool("a")
    for r in ("p1", "p2", "p3"):
        d.submit(r)
    assert d.take("a") == "p1"
    r2, lane2 = d.stop("p2")
    assert lane2 is None and r2 is not None and (r2.state, r2.reason) == ("rejected", "cancelled")
    assert r2.where is None, "it never reached a lane"
    assert d.queued == ["p3"] and d.stage("p2") is Stage.SETTLED
    assert d.stop("p1") == (None, "a"), "a handed prompt is its lane's bridge's to stop"
    d.running("a", "p1")
    assert d.stop("p1") == (None, "a")
    assert d.stage("p1") is Stage.RUNNING, "the stop alone decides nothing: the lane's receipt will"
    (r1,) = d.settled("a", Receipt("p1", "failed", "interrupted"))
    assert (r1.state, r1.reason) == ("failed", "interrupted")
    assert d.stop("p1") == (None, None) and d.stop("p2") == (None, None), "settled: left alone"
    assert d.stop("never") == (None, None)
    assert d.take("a") == "p3", "the FIFO goes on without the stopped prompt"


def test_an_id_is_submitted_once_and_a_lane_added_once() -> None:
    d = pool("a")
    d.submit("p1")
    with pytest.raises(ValueError, match="already submitted"):
        d.submit("p1")
    with pytest.raises(ValueError, match="already in the pool"):
        d.add_lane(lane("a"))


def test_a_pool_with_no_lanes_rejects_at_once() -> None:
    r = Dispatch().submit("p1")
    assert r is not None and (r.state, r.reason) == ("rejected", "engine-down")


@pytest.mark.parametrize("seed", range(30))
def test_every_prompt_gets_exactly_one_receipt_whatever_is_lost_when(seed: int) -> None:
    """Random interleavings of submits, takes, run reports, receipts (late ones too), bridges
    down, losses and a close: each accepted prompt ends with exactly one receipt, and each
    ``node-lost`` one says where."""
    rng = random.Random(seed)
    names = [f"l{i}" for i in range(rng.randint(1, 4))]
    d = pool(*names)
    receipts: list[Receipt] = []
    submitted: list[str] = []
    handed: dict[str, str] = {}
    for step in range(200):
        op = rng.random()
        live = d.live_lanes
        if op < 0.3:
            request = f"p{len(submitted) + 1}"
            submitted.append(request)
            r = d.submit(request)
            receipts += [r] if r is not None else []
        elif op < 0.55 and live:
            n = rng.choice(live)
            if n not in handed.values():
                got = d.take(n)
                if got is not None:
                    handed[got] = n
        elif op < 0.65 and handed:
            request = rng.choice(list(handed))
            d.running(handed[request], request)
        elif op < 0.9 and handed:
            request = rng.choice(list(handed))
            back = Receipt(request, "rejected", "engine-down") if rng.random() < 0.1 else finished(request)
            receipts += d.settled(handed.pop(request), back)
        elif op < 0.97 and live and len(live) + rng.random() > 1.5:
            n = rng.choice(live)
            receipts += d.lost(n, f"lost at step {step}")
            handed = {k: v for k, v in handed.items() if v != n}
        elif op >= 0.995:
            receipts += d.close()
        elif op >= 0.98 and submitted:
            stopped, _ = d.stop(rng.choice(submitted))
            receipts += [stopped] if stopped is not None else []
    receipts += d.close()
    for request, n in list(handed.items()):  # what is still out comes back
        receipts += d.settled(n, finished(request))
    got = [r.request for r in receipts]
    assert sorted(got) == sorted(submitted) and len(got) == len(set(got)), "exactly one receipt each"
    assert all(r.reason != "node-lost" or r.where is not None for r in receipts)
    assert d.outstanding == 0


def test_d10_a_conversation_keeps_the_lane_of_its_first_prompt_and_continues_there_in_order() -> None:
    d = pool("a", "b")
    d.submit("x1", "x")
    d.submit("x2", "x")
    d.submit("s1")
    assert d.take("a") == "x1" and not d.continues("x1"), "a conversation's first prompt starts afresh"
    assert d.take("b") == "s1", "x2 waits for its home; the stranger passes it"
    d.settled("b", finished("s1"))
    assert d.take("b") is None, "x2 is a's alone"
    d.settled("a", finished("x1"))
    assert d.take("a") == "x2" and d.continues("x2")
    assert d.status()["a"]["conversation"] == "x"


def test_d10_a_stranger_never_continues_a_lane_s_conversation_and_takes_a_lane_that_is_no_home() -> None:
    d = pool("a", "b")
    d.submit("x1", "x")
    assert d.take("a") == "x1"
    d.settled("a", finished("x1"))
    d.submit("s1")
    assert d.take("a") is None, "a is x's home and b is free: the stranger waits for b"
    assert d.take("b") == "s1" and not d.continues("s1")


def test_d10_when_every_lane_is_a_home_the_idle_one_used_longest_ago_gives_it_up() -> None:
    d = pool("a", "b")
    for r, k in (("x1", "x"), ("y1", "y")):
        d.submit(r, k)
    assert d.take("a") == "x1" and d.take("b") == "y1"
    d.settled("a", finished("x1"))
    d.settled("b", finished("y1"))
    d.submit("s1")
    assert d.take("b") is None, "y was handed later than x: a gives its home up, not b"
    assert d.take("a") == "s1" and not d.continues("s1")
    assert "x" in d.released and d.status()["a"]["conversation"] is None
    d.submit("x2", "x")
    d.settled("a", finished("s1"))
    assert d.take("b") is None and d.take("a") == "x2" and not d.continues("x2"), "x starts afresh"
    assert "x" not in d.released


def test_d10_a_home_lost_with_its_lane_is_released_and_its_next_prompt_starts_afresh() -> None:
    d = pool("a", "b")
    d.submit("x1", "x")
    d.take("a")
    d.settled("a", finished("x1"))
    d.lost("a", "ActorDiedError")
    assert "ActorDiedError" in d.released["x"]
    d.submit("x2", "x")
    assert d.take("b") == "x2" and not d.continues("x2")


def test_d10_an_ended_conversation_ends_after_the_prompts_submitted_before_the_end() -> None:
    d = pool("a")
    d.submit("x1", "x")
    d.submit("x2", "x")
    d.end_conversation("x")
    d.submit("x3", "x")
    assert d.take("a") == "x1"
    d.settled("a", finished("x1"))
    assert d.take("a") == "x2" and d.continues("x2"), "submitted before the end: it continues"
    d.settled("a", finished("x2"))
    assert d.take("a") == "x3" and not d.continues("x3"), "after the end: a new conversation"


def test_d10_under_random_keys_and_losses_every_prompt_gets_one_receipt_and_order_holds() -> None:
    rng = random.Random(10)
    for _ in range(200):
        d = pool("a", "b", "c")
        submitted, got, handed = [], [], []
        for n in range(rng.randint(1, 12)):
            r = f"p{n}"
            key = rng.choice([None, "x", "y", "z"])
            submitted.append((r, key))
            out = d.submit(r, key)
            if out is not None:
                got.append(out.request)
        for _ in range(200):
            live = d.live_lanes
            if not live or len(got) == len(submitted):
                break
            name = rng.choice(live)
            st = d.status()[name]
            if st["holding"] is None:
                r = d.take(name)
                if r is not None:
                    handed.append(r)
            elif rng.random() < 0.1:
                got += [x.request for x in d.lost(name, "gone")]
            else:
                got += [x.request for x in d.settled(name, finished(st["holding"]))]
            if rng.random() < 0.05:
                d.end_conversation(rng.choice(["x", "y", "z"]))
        assert len(got) == len(set(got)), "never two receipts"
        for key in ("x", "y", "z"):
            mine = [r for r, k in submitted if k == key]
            order = [r for r in handed if r in mine]
            assert order == sorted(order, key=mine.index), f"{key}'s prompts handed in order"
