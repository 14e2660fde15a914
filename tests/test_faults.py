"""Randomized faults through the Python API, with real engine subprocesses (the fake engine).

The fake engine misbehaves at random (``random_faults``, its own seed per process) and the
controller does too (stops at random moments, prompts queued while busy, random settle
timeouts). For every run: exactly one receipt per accepted prompt (handles, notifications and
journal agree, no duplicates), no hang, no zombie, every engine gone after close, and the
journal replays to the receipts and overlap signals the live bridge gave.

``PI_BRIDGE_FAULT_SEED`` picks the master seed (printed in the summary) to reproduce a run.
"""

from __future__ import annotations

import os
import random
import time
from collections import Counter
from pathlib import Path
from typing import Any

import trio

from bridge.core.receipts import Receipt
from bridge.live.api import PromptHandle, open_bridge
from bridge.profiles.command import CommandProfile
from tests.helpers_live import (
    STOP_PLANS,
    SeededFakeProfile,
    SequenceProfile,
    check_receipt,
    collect_text,
    compare_journal,
    controller_action,
    fake_engine_argv,
    fast_config,
    faults_in_journal,
    leaves,
    leftovers,
    read_journal,
    zombie_children,
)

MASTER_SEED = int(os.environ.get("PI_BRIDGE_FAULT_SEED", "20260101"))
BRIDGES = 6
RUNS_PER_BRIDGE = 50  # 300 prompts in all

FAULT_KINDS = [
    "crash",
    "kill",
    "close_stdout",
    "hang",
    "garbage",
    "oversize",
    "invalid_utf8",
    "array",
    "self_start_after",
    "second_settle",
    "no_ack",
    "ack_without_start",
    "failure_no_run",
    "reject",
    "hang_run",
]

_RANDOM = {
    "deltas": 3,
    "oversize_bytes": 100_000,  # past the bridge's max_line below
    "random_faults": {"p": 0.4, "kinds": FAULT_KINDS},
}

#: Bridge k runs SCENARIOS[k % len(SCENARIOS)]: plain runs; automatic retries (a stop can
#: land in the retry backoff) with an engine that ignores SIGTERM; tool calls, responses out
#: of order and an extension notification before each ack (a seal diagnostic).
SCENARIOS = [
    {"defaults": dict(_RANDOM)},
    {"defaults": {**_RANDOM, "retries": 1, "retry_delay": 0.05}, "on_start": {"ignore_sigterm": True}},
    {
        "defaults": {
            **_RANDOM,
            "tools": 1,
            "tool_updates": 2,
            "responses_out_of_order": True,
            "extension_ui": {"method": "notify", "message": "hello from an extension"},
        }
    },
]


class Stats:
    def __init__(self) -> None:
        self.runs = 0
        self.accepted = 0
        self.receipts = 0
        self.engines = 0
        self.pids: list[int] = []
        self.faults: Counter[str] = Counter()
        self.states: Counter[str] = Counter()
        self.plans: Counter[str] = Counter()
        self.problems: list[str] = []

    def table(self) -> str:
        lines = [
            f"master seed {MASTER_SEED}: runs {self.runs}, prompts accepted {self.accepted}, "
            f"receipts {self.receipts}, engines spawned {self.engines}",
            "faults by kind: " + ", ".join(f"{k} {n}" for k, n in sorted(self.faults.items())),
            "receipts by state/reason: " + ", ".join(f"{k} {n}" for k, n in sorted(self.states.items())),
            "controller stops: " + ", ".join(f"{k} {n}" for k, n in sorted(self.plans.items())),
        ]
        return "\n".join(lines)


async def _one_bridge(k: int, tmp_path: Path, stats: Stats, total: int) -> None:
    rng = random.Random(f"{MASTER_SEED}/{k}")
    profile = SeededFakeProfile(SCENARIOS[k % len(SCENARIOS)], random.Random(f"{MASTER_SEED}/engine/{k}"))
    journal = tmp_path / f"j{k}.jsonl"
    notes: list[dict[str, Any]] = []
    handles: dict[str, PromptHandle] = {}
    stops: dict[str, list[str | None]] = {}
    streamed: dict[str, str] = {}
    problems: list[str] = []
    crash: Exception | None = None
    opened: list[Any] = []
    try:
        with trio.fail_after(90):
            async with open_bridge(profile, journal=journal, config=fast_config()) as bridge:
                opened.append(bridge)
                bridge.listeners.append(notes.append)
                async with trio.open_nursery() as nursery:
                    n = 0
                    while n < total:
                        batch = min(total - n, rng.choice([1, 1, 1, 2, 3]))
                        mine = []
                        for _ in range(batch):
                            n += 1
                            timeout = rng.choice([None, None, None, 0.3, 0.8, 1.2])
                            stream = rng.random() < 0.3
                            h = await bridge.submit(
                                f"k{k} n{n} " + "x" * rng.randrange(60),
                                request=f"b{k}-{n}",
                                timeout=timeout,
                                stream=stream,
                            )
                            handles[h.request] = h
                            mine.append(h)
                            if stream:
                                nursery.start_soon(collect_text, h, streamed)
                            plan = rng.choice(STOP_PLANS)
                            stats.plans[plan] += 1
                            if plan == "before-send":
                                stops[h.request] = [await bridge.stop(h.request)]
                            elif plan != "none":
                                nursery.start_soon(controller_action, bridge, h, plan, rng, stops, problems)
                        with trio.fail_after(30):
                            for h in mine:
                                await h.receipt()
    except Exception as e:
        crash = e
    if not opened:
        raise AssertionError(f"bridge {k} did not open") from crash
    bridge = opened[0]
    # -- the bridge is closed: check everything --------------------------------------------
    receipts: dict[str, Receipt] = {}
    for rid, h in handles.items():
        r = h.receipt_nowait
        if r is None:
            problems.append(f"{rid}: no receipt after close")
            continue
        receipts[rid] = r
        check_receipt(r, rid, stops.get(rid, []), problems)
        stats.states[f"{r.state}/{r.reason}" if r.reason else r.state] += 1
        if r.state == "finished" and rid in streamed and streamed[rid] != (r.reply or ""):
            problems.append(f"{rid}: streamed {streamed[rid]!r} != reply {r.reply!r}")
    if bridge.receipts_issued != len(handles):
        problems.append(f"bridge issued {bridge.receipts_issued} receipts for {len(handles)} prompts")
    problems += compare_journal(journal, receipts, notes)
    pids = [n["pid"] for n in notes if n.get("type") == "engine" and n.get("event") == "started"]
    for pid in pids:
        left = leftovers(pid, os.getpid())
        if left:
            problems.append(f"engine {pid} not gone after close: {left}")
    zombies = set(zombie_children()) & set(pids)
    if zombies:
        problems.append(f"zombie engines after close: {sorted(zombies)}")
    stats.runs += len(handles)
    stats.accepted += len(handles)
    stats.receipts += len(receipts)
    stats.engines += len(pids)
    stats.pids += pids
    stats.faults += faults_in_journal(read_journal(journal))
    if crash is not None:
        problems.append(f"the bridge raised: {'; '.join(leaves(crash))}")
    stats.problems += [f"bridge {k} (journal {journal}): {p}" for p in problems]


async def test_random_faults(tmp_path: Path) -> None:
    stats = Stats()
    t0 = time.monotonic()
    with trio.fail_after(120):
        async with trio.open_nursery() as nursery:
            for k in range(BRIDGES):
                nursery.start_soon(_one_bridge, k, tmp_path, stats, RUNS_PER_BRIDGE)
    elapsed = time.monotonic() - t0
    await trio.sleep(0.05)
    # only our engines: another test's unreaped child is not this test's finding
    zombies = sorted(set(zombie_children()) & set(stats.pids))
    summary = stats.table() + f"\nwall time {elapsed:.1f} s"
    print("\n" + summary)
    assert not zombies, f"zombie children: {zombies}\n{summary}"
    assert not stats.problems, "\n".join(stats.problems[:40]) + "\n" + summary
    assert stats.runs >= 200 and stats.receipts == stats.accepted, summary
    assert len(stats.faults) >= 10, f"too few fault kinds exercised\n{summary}"


# -- recycling and going down --------------------------------------------------------------------


async def test_overlap_recycles_engine(tmp_path: Path) -> None:
    profile = SequenceProfile(
        [
            {"prompts": [{"self_start_after": True}]},  # generation 1: O1 after the first prompt settles
            {"prompts": [{}, {"insert_at": {"3": {"type": "agent_start"}}}]},  # generation 2: O-signal mid-run
            {},
        ]
    )
    notes: list[dict[str, Any]] = []
    journal = tmp_path / "j.jsonl"
    with trio.fail_after(30):
        async with open_bridge(profile, journal=journal, config=fast_config(), start_engine=False) as bridge:
            bridge.listeners.append(notes.append)
            r1 = await bridge.prompt("one", request="r1")
            assert r1.state == "finished" and r1.generation == 1
            with trio.fail_after(5):  # the engine's own run after the settle: O1
                while not any(n.get("signal") == "O1" for n in notes):
                    await trio.sleep(0.01)
            assert bridge.supervision.session.sealed is False
            r2 = await bridge.prompt("two", request="r2")
            # a fresh engine and a fresh tracker: generation 2, run numbering restarts
            assert r2.state == "finished", r2
            assert r2.generation == 2 and r2.run == "run-1" and r2.signals == ()
            assert bridge.supervision.session.sealed is True
            # an overlap while the slot is held: the held prompt is tainted, the engine recycled
            r3 = await bridge.prompt("three", request="r3")
            assert (r3.state, r3.reason) == ("outcome-unknown", "overlap"), r3
            assert r3.generation == 2 and any(s["signal"].startswith("O") for s in r3.signals)
            r4 = await bridge.prompt("four", request="r4")
            assert r4.state == "finished" and r4.generation == 3 and r4.run == "run-1"
    starts = [(n["generation"], n["pid"]) for n in notes if n.get("type") == "engine" and n["event"] == "started"]
    exits = [n for n in notes if n.get("type") == "engine" and n["event"] == "exited"]
    assert [g for g, _ in starts] == [1, 2, 3]
    assert all(e["requested"] for e in exits), exits
    o1 = next(n for n in notes if n.get("signal") == "O1")
    assert o1["generation"] == 1
    assert compare_journal(journal, {r.request: r for r in (r1, r2, r3, r4)}, notes) == []
    for _, pid in starts:
        assert leftovers(pid, os.getpid()) == []


async def test_repeated_crashes_take_the_bridge_down(tmp_path: Path) -> None:
    scenario = {
        "on_start": {"stderr": ["config error: models.json is broken (line 3)"]},
        "defaults": {"crash_at": 0, "exit_code": 7},
    }
    notes: list[dict[str, Any]] = []
    journal = tmp_path / "j.jsonl"
    config = fast_config(crash_limit=3, crash_window=60.0)
    with trio.fail_after(30):
        async with open_bridge(
            CommandProfile(fake_engine_argv(scenario)), journal=journal, config=config, start_engine=False
        ) as bridge:
            bridge.listeners.append(notes.append)
            early = [await bridge.prompt("x", request=f"c{n}") for n in range(3)]
            for r in early:
                assert r.state in ("delivery-unknown", "outcome-unknown"), r
                assert r.reason == "engine-exited", r
            later = [await bridge.prompt("y", request=f"d{n}") for n in range(3)]
            handles = [await bridge.submit("z", request=f"e{n}") for n in range(2)]
            for h in handles:
                r = await h.receipt()
                later.append(r)
            for r in later:
                assert (r.state, r.reason) == ("rejected", "engine-down"), r
                assert r.native_error and "3 engine failures" in r.native_error, r.native_error
                assert "code 7" in r.native_error, r.native_error
            assert bridge.status()["engine"]["down"]
    assert [n for n in notes if n.get("type") == "engine" and n["event"] == "down"]
    starts = [n["pid"] for n in notes if n.get("type") == "engine" and n["event"] == "started"]
    assert len(starts) == 3
    receipts = {r.request: r for r in early + later}
    assert compare_journal(journal, receipts, notes) == []


async def test_down_reason_carries_last_stderr_lines(tmp_path: Path) -> None:
    """nativeError of an engine-down rejection carries the dying engine's last stderr lines."""
    scenario = {"defaults": {"crash_at": 0}}
    config = fast_config(crash_limit=2)
    with trio.fail_after(30):
        async with open_bridge(CommandProfile(fake_engine_argv(scenario)), journal=False, config=config) as bridge:
            for n in range(2):
                await bridge.prompt("x", request=f"c{n}")
            r = await bridge.prompt("y", request="down")
    assert (r.state, r.reason) == ("rejected", "engine-down")
    assert r.native_error is not None
    # the fake engine's crash trace ends "...processTicksAndRejections ... Node.js v24.11.0 (fake-engine exit 1)"
    assert "fake-engine exit 1" in r.native_error, r.native_error
    assert "processTicksAndRejections" in r.native_error, r.native_error


# -- drain --------------------------------------------------------------------------------------


#: The first engine exits at start; the restart after it waits out a 0.5 s backoff,
#: during which the dispatcher holds the next prompt, popped from the queue but not sent.
CRASH_THEN_OK = [{"exit_at_start": 3}, {}]


async def test_drain_waits_for_a_prompt_being_dispatched() -> None:
    """Regression (fixed in 25436c7): drain() returned while the dispatcher held a popped, unsent prompt."""
    config = fast_config(restart_backoff=(0.5,))
    with trio.fail_after(20):
        async with open_bridge(SequenceProfile(CRASH_THEN_OK), journal=False, config=config) as bridge:
            first = await bridge.prompt("into the crash")
            assert first.reason == "engine-exited"
            h = await bridge.submit("hello")
            await trio.sleep(0.1)  # it waits in the queue while the lifecycle sleeps the backoff
            assert bridge.status()["queued"] == [h.request] and bridge.status()["held"] is None
            await bridge.drain()
            assert h.receipt_nowait is not None, "drain() returned before the prompt had its receipt"
    assert (await h.receipt()).state == "finished"


async def test_aclose_drain_runs_a_prompt_being_dispatched() -> None:
    """Regression (fixed in 25436c7): aclose(drain=True) rejected such a prompt 'closing'."""
    config = fast_config(restart_backoff=(0.5,))
    with trio.fail_after(20):
        async with open_bridge(SequenceProfile(CRASH_THEN_OK), journal=False, config=config) as bridge:
            await bridge.prompt("into the crash")
            h = await bridge.submit("hello")
            await trio.sleep(0.1)
            await bridge.aclose(drain=True)
    r = await h.receipt()
    assert r.state == "finished", r


async def test_stop_of_a_prompt_being_dispatched(tmp_path: Path) -> None:
    journal = tmp_path / "j.jsonl"
    config = fast_config(restart_backoff=(0.5,))
    with trio.fail_after(30):
        async with open_bridge(SequenceProfile(CRASH_THEN_OK), journal=journal, config=config) as bridge:
            await bridge.prompt("into the crash")
            h = await bridge.submit("hello", request="victim")
            await trio.sleep(0.1)  # the dispatcher has taken it and sleeps the backoff
            assert await bridge.stop("victim") is None
            r = await h.receipt()
            assert (r.state, r.reason) == ("rejected", "cancelled")
            await trio.sleep(0.8)  # past the backoff: the dispatcher goes on
            drained = False
            with trio.move_on_after(3):
                await bridge.drain()
                drained = True
            status = bridge.status()
    sent = [e["send"]["id"] for e in read_journal(journal) if "send" in e and e["send"].get("type") == "prompt"]
    assert "victim" not in sent, "a prompt receipted rejected/cancelled was written to the engine"
    assert status["held"] is None, status
    assert drained, "drain() did not return"


async def test_close_after_stop_of_a_prompt_being_dispatched() -> None:
    config = fast_config(restart_backoff=(0.5,))
    with trio.fail_after(30):
        async with open_bridge(SequenceProfile(CRASH_THEN_OK), journal=False, config=config) as bridge:
            await bridge.prompt("into the crash")
            h = await bridge.submit("hello", request="victim")
            await trio.sleep(0.1)
            await bridge.stop("victim")
    r = await h.receipt()
    assert (r.state, r.reason) == ("rejected", "cancelled")
