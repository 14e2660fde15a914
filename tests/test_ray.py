"""The Ray pool (bridge/ray/, issue 32) on Ray's own multi-node test cluster
(``ray.cluster_utils.Cluster``: a head and a worker node on this machine, one cluster for the
module): prompts in input order over engine actors on both nodes, a node removed mid-run
(exactly one receipt each, honest unknowns naming the lost node, what was never handed out
run elsewhere), and the real sealed, confined Pi inside an actor against the scripted model
server. Nothing of the cluster or its engines is left running afterwards.

The fake engine stands in for Pi where a run must be slow and many engines cheap; one test
runs the real Pi."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ray = pytest.importorskip("ray", reason="the ray extra (tools/setup/setup installs it)")

from ray.cluster_utils import Cluster  # noqa: E402

from bridge.core.receipts import Receipt  # noqa: E402
from bridge.demo.model_server import start_server  # noqa: E402
from bridge.demo.model_server.server import models_json  # noqa: E402
from bridge.profiles.command import CommandProfile  # noqa: E402
from bridge.profiles.pi import scripted_profile  # noqa: E402
from bridge.ray import RayPool  # noqa: E402
from bridge.testing import ScriptedModel  # noqa: E402
from tests.helpers_live import fake_engine_argv  # noqa: E402

#: Each node's CPUs: two engine actors (one CPU each) fit on each.
NODE_CPUS = 2
#: Small object stores: receipts are a few KB.
STORE = 80 * 1024 * 1024


def _mine(session: str) -> list[str]:
    """The processes (pid and command line) of this test cluster's session still running."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if session in cmd:
            found.append(f"{entry.name}: {cmd[:160]}")
    return found


@pytest.fixture(scope="module")
def cluster() -> Iterator[Any]:
    """A head and one worker node, this process connected as the driver; at the end the
    driver disconnects, the cluster shuts down and none of its processes is left."""
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    c = Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": NODE_CPUS, "include_dashboard": False, "object_store_memory": STORE},
    )
    c.add_node(num_cpus=NODE_CPUS, object_store_memory=STORE)
    c.wait_for_nodes()
    ray.init(address=c.address, log_to_driver=False)
    session = Path(c.head_node.get_session_dir_path()).name
    try:
        yield c
    finally:
        ray.shutdown()
        c.shutdown()
        deadline = time.monotonic() + 30
        while _mine(session) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not _mine(session), f"processes of the Ray test cluster left running: {_mine(session)}"


def _worker(c: Any) -> Any:
    (node,) = c.worker_nodes
    return node


def _engines_left(tag: str) -> list[str]:
    """The fake engines marked ``tag`` still running."""
    return _mine(f"--seed {tag}")


def fake(tag: str, **defaults: Any) -> CommandProfile:
    """The fake engine, its argv marked with ``tag`` (``--seed``) to find its processes after."""
    return CommandProfile(fake_engine_argv({"defaults": defaults}, seed=int(tag)))


def test_twelve_prompts_over_four_engines_on_two_nodes_finish_in_input_order(cluster: Any, tmp_path: Path) -> None:
    tag = "917301"
    messages = [f"prompt number {n}" for n in range(12)]
    with RayPool(fake(tag), engines=4, journal=str(tmp_path)) as pool:
        receipts = pool.run(messages)
        nodes = {w.node for w in pool.where()}
        one = pool.submit("one more", request="extra").result(timeout=60)
        more = pool.submit_all(["a", "b"]).result(timeout=60)
    assert nodes == {cluster.head_node.node_id, _worker(cluster).node_id}, "the actors spread over both nodes"
    assert [r.state for r in receipts] == ["finished"] * 12
    assert [r.reply for r in receipts] == [f"ok: {m}" for m in messages], "in input order"
    assert [r.request for r in receipts] == [f"p{n}" for n in range(1, 13)]
    assert (one.request, one.reply) == ("extra", "ok: one more")
    assert [r.reply for r in more] == ["ok: a", "ok: b"]
    # Every receipt says where it ran; each journal stays on its node and holds its prompts.
    by_journal: dict[str, list[str]] = {}
    for r in receipts:
        assert r.where is not None and r.where.node in nodes and r.where.journal is not None
        assert Receipt.from_json(json.loads(json.dumps(r.to_json()))) == r, "where round-trips"
        by_journal.setdefault(r.where.journal, []).append(str(r.request))
    assert len(by_journal) >= 2
    for journal, requests in by_journal.items():
        recorded = [
            json.loads(line)["receipt"]["request"]
            for line in Path(journal).read_text().splitlines()
            if '"receipt"' in line and json.loads(line).get("receipt")
        ]
        assert set(requests) <= set(recorded), journal
    assert not _engines_left(tag), "every engine the actors started was reaped"


def test_the_real_sealed_pi_runs_inside_a_ray_actor(cluster: Any, pinned_pi: object) -> None:
    with ScriptedModel(default={"text": "hello from the scripted model"}) as model:
        profile = model.profile()
        with RayPool(profile, engines=1, journal=False) as pool:
            receipts = pool.run(["hi", "and again", "once more"])
        seen = [r.user_text for r in model.requests if r.is_completion]
    assert [(r.state, r.reply) for r in receipts] == [("finished", "hello from the scripted model")] * 3
    assert all(r.pid is not None and r.where is not None for r in receipts)
    assert {"hi", "and again", "once more"} <= set(seen), "each prompt reached the model, from the actors"
    assert all(r.config is not None for r in receipts), "the sealed Pi's start-up check verified its model"
    # Issue 42: each prompt starts afresh on its actor's engine (user 3's request carried user
    # 0's secret): every model request carries its own prompt alone.
    for r in model.requests:
        if r.is_completion:
            users = [m for m in r.messages if m.get("role") == "user"]
            assert len(users) == 1, f"{r.user_text!r} carried earlier prompts: {users}"


def test_conversation_keys_keep_each_conversation_on_its_actor_and_strangers_start_afresh(
    cluster: Any, pinned_pi: object
) -> None:
    """Issue 42: the Ray pool takes ``conversation=`` keys as a local pool does (D10): a key's
    later prompts carry its earlier exchange and nothing of another key's; a prompt without a
    key carries only itself, though both actors held conversations."""
    with ScriptedModel(default={"text": "noted"}) as model:
        with RayPool(model.profile(), engines=2, journal=False) as pool:
            first = [
                pool.submit("x: my secret is XXX", conversation="x"),
                pool.submit("y: my secret is YYY", conversation="y"),
            ]
            assert [f.result().state for f in first] == ["finished", "finished"]
            later = [
                pool.submit("x: what is my secret?", conversation="x"),
                pool.submit("y: what is my secret?", conversation="y"),
            ]
            assert [f.result().state for f in later] == ["finished", "finished"]
            stranger = pool.submit("s: hello").result()
            homes = {lane["conversation"] for lane in pool.status()["lanes"].values()}
        users = {
            r.user_text: [m.get("content") for m in r.messages if m.get("role") == "user"]
            for r in model.requests
            if r.is_completion
        }
    assert stranger.state == "finished", stranger

    def said(text: str) -> list[str]:
        return [" ".join(str(c).split()) for c in users[text]]

    assert any("XXX" in c for c in said("x: what is my secret?")), users
    assert not any("YYY" in c for c in said("x: what is my secret?")), "x read nothing of y's"
    assert any("YYY" in c for c in said("y: what is my secret?")), users
    assert not any("XXX" in c for c in said("y: what is my secret?")), "y read nothing of x's"
    assert len(said("s: hello")) == 1, f"the stranger carried others' words: {said('s: hello')}"
    assert len(homes - {None}) == 1, "the stranger took one actor's home (D10's give-up)"


def test_a_pool_whose_engine_cannot_start_says_why_and_leaves_no_actor(cluster: Any, tmp_path: Path) -> None:
    missing = str(tmp_path / "no-such-engine")
    with pytest.raises(RuntimeError, match="did not open") as caught:
        RayPool(CommandProfile([missing]), engines=1, journal=False)
    assert "no-such-engine" in str(caught.value), "the actor's own error, in the message"
    deadline = time.monotonic() + 30
    while ray.available_resources().get("CPU", 0) < 2 * NODE_CPUS:
        assert time.monotonic() < deadline, f"the actors' CPUs never came back: {ray.available_resources()}"
        time.sleep(0.1)


def test_a_node_removed_mid_run_costs_no_receipt(cluster: Any) -> None:
    """12 slow prompts over 4 engines, 2 on each node; the worker node is removed while its two
    engines each run a prompt. Exactly 12 receipts, in order: the prompts running there are
    ``outcome-unknown``/``node-lost`` naming the node (or ``finished``, had their receipt
    already left it), and every prompt not yet handed to an actor then finishes on the head."""
    tag = "917302"
    worker = _worker(cluster)
    lost = worker.node_id
    with RayPool(fake(tag, deltas=6, delta_delay=0.15), engines=4, journal=False) as pool:
        future = pool.submit_all([f"slow prompt {n}" for n in range(12)])
        deadline = time.monotonic() + 120
        while True:
            status = pool.status()
            there = [lane for lane in status["lanes"].values() if lane["node"] == lost]
            if len(there) == 2 and all(lane["stage"] == "running" for lane in there):
                break
            assert time.monotonic() < deadline, f"the worker's engines never both ran a prompt: {status}"
            time.sleep(0.05)
        running_there = {lane["holding"] for lane in there}
        queued = set(status["queued"])
        cluster.remove_node(worker)
        receipts = future.result(timeout=180)
        status = pool.status()
    assert [r.request for r in receipts] == [f"p{n}" for n in range(1, 13)], "exactly 12, in order"
    for r in receipts:
        assert r.where is not None
        if r.state == "finished":
            continue
        assert r.request in running_there, f"only what ran on the lost node is unknown: {r!r}"
        assert (r.state, r.reason) == ("outcome-unknown", "node-lost"), r
        assert r.native_error is not None and lost in r.native_error and r.where.node == lost
    unknown = [r for r in receipts if r.state != "finished"]
    assert unknown, "the node went with prompts running on it"
    for r in receipts:
        if r.request in queued:
            assert r.state == "finished" and r.where is not None and r.where.node == cluster.head_node.node_id, r
    assert queued, "some prompts waited in the pool's queue when the node went"
    assert sorted(n for n, lane in status["lanes"].items() if not lane["alive"]) == sorted(
        n for n, lane in status["lanes"].items() if lane["node"] == lost
    )
    assert not _engines_left(tag), "the engines of the lost node went with it"


#: Every model call asks for one more tool call and reports 1000 tokens in, 50 out; priced so
#: that each message costs 0.0115 dollars (as tests/test_budget_live.py).
ENDLESS = {
    "tool_call": {"name": "bash", "arguments": {"command": "echo again"}},
    "usage": {"prompt_tokens": 1000, "completion_tokens": 50},
}
PRICES = {"input": 10.0, "output": 30.0}


def _until_running(pool: RayPool, request: str) -> None:
    deadline = time.monotonic() + 120
    while not any(
        lane["holding"] == request and lane["stage"] == "running" for lane in pool.status()["lanes"].values()
    ):
        assert time.monotonic() < deadline, f"{request} never ran: {pool.status()}"
        time.sleep(0.05)


def test_a_prompts_budget_and_stop_reach_the_actors_real_pi(cluster: Any, pinned_pi: object, tmp_path: Path) -> None:
    """The real Pi in one actor, a model that never stops calling tools: p1's own budget is
    carried out by the actor's bridge (``failed``/``budget``); p2, stopped while it waits in the
    pool's queue, is ``rejected``/``cancelled`` and never reaches the model; p3, stopped while it
    runs, is ``failed``/``interrupted`` (D9); a stop of a settled prompt does nothing."""
    server = start_server([], default=ENDLESS)
    models = tmp_path / "models.json"
    models.write_text(json.dumps(models_json(server.base_url, cost=PRICES)))
    try:
        with RayPool(scripted_profile(str(models)), engines=1, journal=False) as pool:
            # A budget p1 cannot pass before p2 is submitted and stopped: at 0.02 it could, on a
            # loaded machine, and p2 then went to the freed actor while the pool still stopped
            # it as queued (its text reached the model; a race left for the Ray pool's D9).
            f1 = pool.submit("spend it", request="p1", budget_usd=0.1)
            _until_running(pool, "p1")
            f2 = pool.submit("this one never goes out", request="p2")
            assert pool.stop("p2") is True
            r2 = f2.result(timeout=5)
            r1 = f1.result(timeout=120)
            f3 = pool.submit("keep going", request="p3")
            _until_running(pool, "p3")
            assert pool.stop("p3") is True
            r3 = f3.result(timeout=120)
            assert pool.stop("p3") is False and pool.stop("nobody") is False
            with pytest.raises(ValueError, match="budget"):
                pool.submit("x", budget_usd=-1)
            with pytest.raises(TypeError, match="trace"):
                pool.submit("x", trace="00-abc")  # type: ignore[arg-type]
        sent = json.dumps(server.requests)
    finally:
        server.close()
    assert (r1.state, r1.reason) == ("failed", "budget"), r1
    assert r1.usage is not None and r1.usage.cost > 0.1 and r1.stop is not None, r1.usage
    assert (r2.state, r2.reason, r2.where) == ("rejected", "cancelled", None), r2
    assert (r3.state, r3.reason) == ("failed", "interrupted"), r3
    assert r3.where is not None and r3.stop is not None, "stopped by the actor's bridge, which names its stop"
    assert "never goes out" not in sent and "keep going" in sent
