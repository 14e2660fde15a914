#!/usr/bin/env python3
"""One measurement of ``tools/bench/bench``'s pool section (issue 32): P prompts over N engines, either
through one ``open_pool(engines=N)`` or through N separate ``open_bridge`` contexts in one trio
process (prompt k to bridge k mod N, each bridge's queue holding its share), on the fake engine
(``tools/fake_engine.py``: each prompt a reply of ``--deltas`` text deltas ``--delta-delay`` s
apart, standing in for a model's time). Prints one JSON object: ``wall`` (s, from before the
open to after the close, so both include starting and stopping N engines), ``states`` (each receipt's),
``cpu`` (this process's user+system s) and ``rss_mb`` (its peak).

    .venv/bin/python tools/bench/bench_pool.py --mode pool --engines 8 --prompts 64
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import trio  # noqa: E402

from bridge import CommandProfile, open_bridge, open_pool  # noqa: E402
from bridge.core.lifecycle import BridgeConfig  # noqa: E402


def profile(deltas: int, delay: float) -> CommandProfile:
    scenario = {"defaults": {"deltas": deltas, "delta_delay": delay}}
    return CommandProfile(
        [sys.executable, str(ROOT / "tools" / "fake_engine.py"), "--scenario-json", json.dumps(scenario)]
    )


async def through_pool(a: argparse.Namespace, journals: Path) -> list[str]:
    async with open_pool(profile(a.deltas, a.delta_delay), engines=a.engines, journal=journals) as pool:
        handles = [await pool.submit(f"task {k}") for k in range(a.prompts)]
        return [str((await h.receipt()).state) for h in handles]


async def through_bridges(a: argparse.Namespace, journals: Path) -> list[str]:
    states: list[str] = [""] * a.prompts
    config = BridgeConfig(queue_max=a.prompts)

    async def one(i: int) -> None:
        """Bridge i: its share of the prompts. Ends when each has its receipt."""
        async with open_bridge(
            profile(a.deltas, a.delta_delay), journal=journals / f"bridge-{i}.jsonl", config=config
        ) as bridge:
            mine = range(i, a.prompts, a.engines)
            handles = [await bridge.submit(f"task {k}") for k in mine]
            for k, h in zip(mine, handles):
                states[k] = str((await h.receipt()).state)

    async with trio.open_nursery() as nursery:
        for i in range(a.engines):
            nursery.start_soon(one, i)
    return states


def main() -> int:
    p = argparse.ArgumentParser(prog="tools/bench/bench_pool.py")
    p.add_argument("--mode", choices=("pool", "bridges"), required=True)
    p.add_argument("--engines", type=int, default=8)
    p.add_argument("--prompts", type=int, default=64)
    p.add_argument("--deltas", type=int, default=50)
    p.add_argument("--delta-delay", type=float, default=0.002)
    a = p.parse_args()
    run = through_pool if a.mode == "pool" else through_bridges
    with tempfile.TemporaryDirectory(prefix="bench-pool-") as tmp:
        t0 = time.perf_counter()
        states = trio.run(run, a, Path(tmp))
        wall = time.perf_counter() - t0
    ru = resource.getrusage(resource.RUSAGE_SELF)
    print(json.dumps({"wall": wall, "states": states, "cpu": ru.ru_utime + ru.ru_stime, "rss_mb": ru.ru_maxrss / 1024}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
