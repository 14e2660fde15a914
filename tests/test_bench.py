"""Smoke test of ``tools/bench/bench``: the quick mode runs end to end and prints its table.

Only the shape of the output is checked -- never a speed (the numbers depend on the machine
and on whatever else it is doing).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bridge.profiles.orphans import private_root
from tests.conftest import ROOT

BENCH = ROOT / "tools" / "bench" / "bench"


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
    for heading in (
        "machine: nproc",
        "steadiness at start",
        "steadiness at end",
        "MB/s",
        "obs/s",
        "CPU s",
        "RSS MB",
        "wall s",
        "targets:",
    ):
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
    for key in ("steadiness", "steadiness_end"):
        probe = data["machine"][key]
        assert probe["windows"] == len(probe["ms"]) == 3 and 0 < probe["min"] <= probe["median"] <= probe["max"]
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
    assert {r[2] for r in rows if r[0] == "pool"} == {"open_pool", "2 open_bridge"}
    for row in data["rows"]:
        med = row["median"]
        assert med["wall"] > 0 and med["obsps"] > 0
        assert med["mbps"] > 0 or row["section"] == "pool", row  # (the pool's rows count prompts, not bytes)
    names = {t["target"] for t in data["targets"]}
    assert any(n.endswith("pool time / 2 open_bridge") for n in names)
    assert any(n.startswith("pi16 API obs/s / orjson loop") for n in names)
    assert any(n.startswith("RSS(") for n in names)
    assert not data["notes"], data["notes"]


def _left_behind(tmp: Path, pid: int | None = None) -> list[str]:
    """What a bench_sandbox run, and the bridge it drives, made in the temporary folder and
    left there: its own ``bench-sandbox-*`` and the engines' ``pi-bridge-*`` folders, and, given
    the run's ``pid``, the engines' folders named for it in the bridges' per-user root
    (bridge/profiles/orphans.py). (What an unconfined Pi makes there itself -- Node's compile
    cache, a folder named for its pid when it is stopped under load -- is Pi's, not the bench's.)"""
    made = sorted(p.name for p in tmp.iterdir() if p.name.startswith(("bench-sandbox-", "pi-bridge-")))
    return made + ([] if pid is None else [p.name for p in private_root().iterdir() if f"-{pid}-" in p.name])


@pytest.mark.pi
def test_sandbox_bench_prints_the_ratios(tmp_path: Path) -> None:
    """``tools/bench/bench_sandbox`` (what confinement costs at start-up) runs, reports every mode and
    leaves nothing behind in the temporary folder."""
    proc = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "bench" / "bench_sandbox"), "--rounds", "1", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env={**os.environ, "TMPDIR": str(tmp_path)},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert _left_behind(tmp_path) == []
    modes = json.loads(proc.stdout)["modes"]
    assert set(modes) == {
        "unconfined (--no-sandbox)",
        "sandbox (default)",
        "sandbox --no-network",
        "sandbox, limits lifted",
    }
    assert modes["unconfined (--no-sandbox)"]["ratio"] == 1.0
    for row in modes.values():
        assert set(row) == {"start_ms", "start_min_ms", "stop_ms", "ratio", "cpu_ms", "cpu_ratio"}


@pytest.mark.pi
def test_sandbox_bench_stopped_midway_removes_its_folders_and_its_engine(tmp_path: Path) -> None:
    """A SIGTERM while an engine is starting: the run's folders are removed and no engine is left."""
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "tools" / "bench" / "bench_sandbox"), "--rounds", "5", "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=ROOT,
        env={**os.environ, "TMPDIR": str(tmp_path)},
    )
    try:
        deadline = time.monotonic() + 60
        while not any(p.name.startswith(f"pi-bridge-pi-{proc.pid}-") for p in private_root().iterdir()):
            assert proc.poll() is None and time.monotonic() < deadline, "no engine was started"
            time.sleep(0.05)
        made = _left_behind(tmp_path)
        assert any(n.startswith("bench-sandbox-") for n in made), made
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 128 + signal.SIGTERM
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert _left_behind(tmp_path, proc.pid) == []
    # The engine's private config folder named its process; none runs with it any more.
    mark = f"pi-bridge-pi-{proc.pid}-"
    engines = [pid for pid in os.listdir("/proc") if pid.isdigit() and _cmdline_mentions(pid, mark)]
    assert engines == [], [_describe(pid) for pid in engines]


def _describe(pid: str) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmd = f.read().replace(b"\0", b" ")[:300].decode(errors="replace")
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read().split()
        return f"{pid} ppid {stat[3]} pgrp {stat[4]} state {stat[2]}: {cmd}"
    except OSError:
        return f"{pid} gone"


def _cmdline_mentions(pid: str, text: str) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmd = f.read()
        with open(f"/proc/{pid}/environ", "rb") as f:
            env = f.read()
    except OSError:
        return False
    return text.encode() in cmd or text.encode() in env


def test_startup_bench_prints_every_row_and_the_ratios(pinned_pi: object) -> None:
    """``tools/bench/bench_startup --rounds 1`` (how long ``bridge --version`` and ``bridge acp``'s
    answer to ``initialize`` take, against the interpreter's start-up) runs and prints each row,
    its ratio to its floor and the targets; no time is asserted."""
    proc = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "bench" / "bench_startup"), "--rounds", "1", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    text = "\n".join(lines[:-1])
    for row in (
        "python -c pass",
        "bridge --version",
        'python -c "import trio"',
        "bridge acp -> initialize (fake engine)",
        "bridge acp -> initialize (sealed Pi)",
        "targets (the median):",
    ):
        assert row in text, text
    assert "x python -c pass" in text and 'x python -c "import trio"' in text
    data = json.loads(lines[-1])
    assert data["rounds"] == 1 and data["left_out"] == {}
    for name, row in data["rows"].items():
        assert row["rounds"] == 1 and 0 < row["best_ms"] <= row["median_ms"], name
    assert data["rows"]["bridge acp -> initialize (fake engine)"]["floor"] == 'python -c "import trio"'
    assert {t["target"] for t in data["targets"]} == {"bridge --version", "bridge acp -> initialize (fake engine)"}
