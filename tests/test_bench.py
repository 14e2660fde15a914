"""Smoke test of ``tools/bench``: the quick mode runs end to end and prints its table.

Only the shape of the output is checked -- never a speed (the numbers depend on the machine
and on whatever else it is doing).
"""

from __future__ import annotations

import json
import subprocess
import sys

from tests.conftest import ROOT

BENCH = ROOT / "tools" / "bench"


def test_quick_bench_prints_the_table_and_the_targets() -> None:
    proc = subprocess.run(
        [sys.executable, str(BENCH), "--quick", "--quiet", "--json"],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout.splitlines()
    text = "\n".join(out[:-1])
    for heading in ("machine: nproc", "MB/s", "obs/s", "CPU s", "RSS MB", "wall s", "targets:"):
        assert heading in text
    for reader in (
        "raw drain",
        "json loop",
        "orjson loop",
        "node (Pi jsonl)",
        "bridge API",
        "bridge serve",
        "bridge replay --json",
    ):
        assert reader in text
    data = json.loads(out[-1])
    rows = {(r["section"], r["stream"], r["reader"]) for r in data["rows"]}
    for stream in ("pi16", "tools", "legacy"):
        for reader in (
            "raw drain",
            "json loop",
            "orjson loop",
            "node (Pi jsonl)",
            "bridge API",
            "bridge API, events",
            "bridge serve",
        ):
            assert ("stream", stream, reader) in rows
    assert ("replay", "journal", "bridge replay --json") in rows
    assert {r[2] for r in rows if r[0] == "scale"} >= {"bridge API", "bridge serve", "node (Pi jsonl)"}
    assert len([r for r in rows if r[0] == "memory"]) == 2
    for row in data["rows"]:
        med = row["median"]
        assert med["wall"] > 0 and med["mbps"] > 0 and med["obsps"] > 0
    names = {t["target"] for t in data["targets"]}
    assert any(n.startswith("pi16 API obs/s / orjson loop") for n in names)
    assert any(n.startswith("RSS(") for n in names)
    assert not data["notes"], data["notes"]


def test_sandbox_bench_prints_the_ratios() -> None:
    """``tools/bench_sandbox`` (what confinement costs at start-up) runs and reports every mode."""
    proc = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "bench_sandbox"), "--rounds", "1", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    modes = json.loads(proc.stdout)["modes"]
    assert set(modes) == {"unconfined (--no-sandbox)", "sandbox (default)", "sandbox --no-network"}
    assert modes["unconfined (--no-sandbox)"]["ratio"] == 1.0
    for row in modes.values():
        assert set(row) == {"start_ms", "start_min_ms", "stop_ms", "ratio", "cpu_ms", "cpu_ratio"}
