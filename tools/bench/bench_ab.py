#!/usr/bin/env python3
"""Two checkouts side by side on one stream, rounds interleaved: the raw drain, then each tree's
``bridge API`` (and ``bridge serve`` with ``--serve``, the API with every event read with
``--events``), round after round, so load from other
work falls on all of them alike. Prints wall and CPU (median and best) and the ratio to the raw
drain: of the medians, of the best rounds, and the median of each round's own ratio (paired)::

    tools/bench/bench_engine.py --gen legacy --mb 143 --write /tmp/legacy.jsonl
    git worktree add /tmp/old main
    .venv/bin/python tools/bench/bench_ab.py /tmp/legacy.jsonl --trees /tmp/old,. --rounds 15 --serve

Each tree's own ``tools/bench/bench`` runs its readers (so its own ``bridge`` is imported); the
interpreter is this one (the trees need not have a venv). Never asserts a speed.
"""

from __future__ import annotations

import argparse
import functools
import importlib.machinery
import importlib.util
import os
import statistics
import sys
from pathlib import Path
from typing import Any


def load_bench(tree: Path, name: str) -> Any:
    os.environ["PI_BRIDGE_BENCH_REEXEC"] = "1"  # the interpreter is this one
    script = tree / "tools" / "bench" / "bench"
    if not script.is_file():  # a tree from before tools/ was grouped (2026-12-07): tools/bench
        script = tree / "tools" / "bench"
    loader = importlib.machinery.SourceFileLoader(name, str(script))
    spec = importlib.util.spec_from_loader(name, loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("stream", help="a stream written by tools/bench/bench_engine.py --write")
    p.add_argument("--trees", default=".", help="checkouts, comma-separated (default: this one)")
    p.add_argument("--rounds", type=int, default=9)
    p.add_argument("--serve", action="store_true", help="also each tree's bridge serve")
    p.add_argument("--events", action="store_true", help="also each tree's bridge API with every event read")
    p.add_argument("--engines", type=int, default=1, help="engines under one bridge, each with the stream (default 1)")
    p.add_argument("--timeout", type=float, default=600)
    a = p.parse_args()
    trees = [Path(t).resolve() for t in a.trees.split(",")]
    benches = [load_bench(t, f"bench_{k}") for k, t in enumerate(trees)]
    first = benches[0]
    rows: dict[str, list[tuple[float, float]]] = {"raw drain": []}
    for rnd in range(a.rounds):
        print(f"round {rnd + 1}/{a.rounds}", file=sys.stderr)
        d = first.run_pipe_reader([first.PY, first.SELF, "_role", "drain"], a.stream, a.timeout)
        rows["raw drain"].append((d["wall"], d["cpu"]))
        for tree, bench in zip(trees, benches):
            runs: list[tuple[str, Any]] = [("bridge API", bench.run_api)]
            if a.serve:
                runs.append(("bridge serve", bench.run_serve))
            if a.events:
                runs.append(("bridge API, events", functools.partial(bench.run_api, events=True)))
            for label, run in runs:
                res = run(a.stream, a.engines, 1, a.timeout)
                for engine in res["engines"]:
                    if any(s != "finished" for s in engine["states"]):
                        raise SystemExit(f"{tree} {label}: receipt {engine['states']}")
                end = max(engine["t_end"] for engine in res["engines"])
                rows.setdefault(f"{tree} {label}", []).append((end - res["t0"], res["cpu"]))
    size = os.path.getsize(a.stream) / 1e6
    print(f"{a.stream}: {size:.1f} MB, {a.rounds} rounds interleaved, load average now {os.getloadavg()[0]:.1f}")
    print(f"{'reader':<44} {'wall med':>8} {'best':>6} {'CPU med':>8} {'best':>6}   drain/x: med  best  paired")
    drain = [w for w, _ in rows["raw drain"]]
    for name, vals in rows.items():
        wall = [w for w, _ in vals]
        cpu = [c for _, c in vals]
        paired = statistics.median(d / w for d, w in zip(drain, wall))
        print(
            f"{name:<44} {statistics.median(wall):8.3f} {min(wall):6.3f} {statistics.median(cpu):8.3f} "
            f"{min(cpu):6.3f}   {statistics.median(drain) / statistics.median(wall):11.2f} "
            f"{min(drain) / min(wall):5.2f} {paired:7.2f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
