#!/usr/bin/env python3
"""One ``open_bridge`` prompt over a stream from ``tools/bench/bench_engine.py --write``: the driver to
count instructions with (load on a shared machine cannot move an instruction count)::

    tools/bench/bench_engine.py --gen pi16 --lines 100000 --write /tmp/pi16.jsonl
    valgrind --tool=cachegrind --cache-sim=no --cachegrind-out-file=/dev/null \\
        .venv/bin/python tools/bench/bench_instr.py --tree . --load /tmp/pi16.jsonl
    # the same with --prompts 0 gives the fixed cost (imports, spawn, warm-up) to subtract;
    # --events: the measured prompts ask for their events (read to the end)

``--tree DIR`` is the checkout whose ``bridge`` is imported (an old tree against a new one); the
driver refuses to run if another copy is imported (an editable install's finder comes after
``sys.path`` in ``sys.meta_path``, so the tree put first on ``sys.path`` wins, and this checks it).
Only the bridge runs under valgrind: the engine is a child process (no ``--trace-children``).
``--engines N`` runs N bridges in the one process, each on its own engine, prompted at once
(the scale row's shape): their instructions against one bridge's N prompts tell whether many
engines cost the bridge more work per byte or only more time per instruction.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--tree", required=True, help="the checkout whose bridge/ is measured")
    p.add_argument("--load", required=True, help="a stream written by bench_engine.py --write")
    p.add_argument("--prompts", type=int, default=1, help="measured prompts after the warm-up (0: the fixed cost)")
    p.add_argument("--full", action="store_true", help="a full journal instead of a lean one")
    p.add_argument("--events", action="store_true", help="the measured prompts ask for their events (read to the end)")
    p.add_argument(
        "--engines", type=int, default=1, help="bridges (one engine each) in the one process, prompted at once"
    )
    a = p.parse_args()
    tree = Path(a.tree).resolve()
    sys.path.insert(0, str(tree))
    import trio

    import bridge
    from bridge.live.api import BridgeConfig, open_bridge
    from bridge.profiles.command import CommandProfile

    if Path(bridge.__file__).resolve().parent != tree / "bridge":
        raise SystemExit(f"imported {bridge.__file__}, not {tree}/bridge")
    engine = [sys.executable, str(Path(__file__).resolve().parent / "bench_engine.py"), "--load", a.load]

    async def one(jdir: str, k: int, warm: trio.MemorySendChannel[int], go: trio.Event) -> None:
        config = BridgeConfig(journal_full=a.full)
        async with open_bridge(CommandProfile(engine), journal=Path(jdir) / f"j{k}.jsonl", config=config) as b:
            receipt = await b.prompt("warmup", request="warmup")
            assert receipt.state == "finished", receipt
            await warm.send(k)
            await go.wait()
            for n in range(a.prompts):
                if a.events:
                    handle = await b.submit("go", request=f"go{n}", events=True)
                    async for _ in handle.events():
                        pass
                    receipt = await handle.receipt()
                else:
                    receipt = await b.prompt("go", request=f"go{n}")
                assert receipt.state == "finished", receipt
            print(f"observations {b.supervision.session.observations}", file=sys.stderr)

    async def run(jdir: str) -> None:
        warm, warmed = trio.open_memory_channel[int](a.engines)
        go = trio.Event()
        async with trio.open_nursery() as nursery:
            for k in range(a.engines):
                nursery.start_soon(one, jdir, k, warm, go)
            for _ in range(a.engines):
                await warmed.receive()
            go.set()

    with tempfile.TemporaryDirectory(prefix="bench-instr-") as jdir:
        trio.run(run, jdir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
