"""``tools/soak/soak`` in CI, a 1 GiB engine line through the live bridge, and the bugs the soak found.

- :func:`test_soak_ci` runs ``tools/soak/soak`` (100 seeded schedules, most through ``bridge serve``
  as a subprocess, some through the Python API) and checks its table: no receipt lost or
  duplicated, no hang, no zombie, no engine left behind, every bridge exiting as it must, every
  journal replaying to the live receipts (or, when its disk filled up, reading back and agreeing
  with them), exit 0. ``PI_BRIDGE_SOAK_SEED`` picks the master seed; a failing schedule is
  printed with its own seed (``tools/soak/soak --only-seed X`` runs it again).
- :func:`test_a_1gib_line_costs_bounded_memory`: the fake engine writes one 1 GiB line (in 1 MiB
  pieces) in the middle of a run; ``bridge serve`` with its default 64 MiB line limit takes it
  as one gap and its peak RSS stays bounded.
- Regression tests for the bugs the soak found: a close that fsynced a closed journal, an
  oversize line that cost twice the line limit, a journal that failed before the fsync task
  first ran.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
import trio

from bridge.core.framing import LineSplitter, Oversize
from bridge.live.api import open_bridge
from bridge.profiles.command import CommandProfile
from tests.helpers_live import (
    ROOT,
    ServeProc,
    check_journal_readable,
    failing_journal,
    fake_engine_argv,
    fast_config,
    generations_argv,
    read_journal,
    vm_hwm,
)

SOAK = ROOT / "tools" / "soak" / "soak"
SEED = int(os.environ.get("PI_BRIDGE_SOAK_SEED", "2026"))
#: The CI run is bound by CPU, not by the timeouts it waits on: a schedule costs about 1.2
#: CPU-seconds (``bridge serve``'s own start-up, about 0.6 s, is most of it; 90 schedules with 8
#: at once took 109 CPU-seconds, 67 s, on this idle 2-core machine, 2026-12-02), so 100 schedules
#: take about 120 CPU-seconds. Fewer than the 135 of before, for the suite's time (issue 28): the
#: first 90 of seed 2026 exercise every kind this test asks for; ``tools/soak/soak`` runs any number.
CI_SCHEDULES = 100
CI_JOBS = 8
#: The new fault kinds that must show up in the CI run (each is in roughly 1 schedule in 10-15).
CI_MUST_EXERCISE = ("after_shutdown", "journal_failed", "second_shutdown", "prompt_after_shutdown")

MiB = 1 << 20


def _row(table: str, name: str) -> list[str]:
    m = re.search(rf"^{re.escape(name)}\s+(\S+)\s+(\S+)\s+(\S+)\s*$", table, re.M)
    assert m, f"no row {name!r} in the table:\n{table}"
    return list(m.groups())


def test_soak_ci(tmp_path: Path) -> None:
    t0 = time.monotonic()
    proc = subprocess.run(
        [
            sys.executable,
            str(SOAK),
            "--schedules",
            str(CI_SCHEDULES),
            "--seed",
            str(SEED),
            "--jobs",
            str(CI_JOBS),
            "--dir",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=str(ROOT),
    )
    elapsed = time.monotonic() - t0
    out = proc.stdout
    print(out + f"\n(test wall time {elapsed:.1f} s)")
    assert "schedules" in out, proc.stderr[-3000:]
    assert _row(out, "schedules")[2] == str(CI_SCHEDULES), out
    for name in ("lost", "duplicated", "hangs", "zombies", "engines left behind"):
        assert _row(out, name)[2] == "0", f"{name} is not 0:\n{out}"
    accepted, receipts = _row(out, "prompts accepted")[2], _row(out, "receipts")[2]
    assert accepted == receipts and int(accepted) >= CI_SCHEDULES, out
    assert "zombie children of the soak" not in out, out
    # a broad mix of faults was exercised
    engine_kinds = re.search(r"^engine faults by kind.*?(?=^controller faults)", out, re.M | re.S)
    controller_kinds = re.search(r"^controller faults by kind.*?(?=^receipts by state)", out, re.M | re.S)
    assert engine_kinds and len(engine_kinds.group(0).splitlines()) > 20, out
    assert controller_kinds and len(controller_kinds.group(0).splitlines()) > 20, out
    kinds = {line.split()[0] for line in controller_kinds.group(0).splitlines()[1:]}
    missing = [k for k in CI_MUST_EXERCISE if k not in kinds]
    assert not missing, f"fault kinds not exercised: {missing}\n{out}"
    assert kinds & {"startup_sigterm", "startup_sighup", "close_at_start_listener", "close_at_start_task"}, out
    assert proc.returncode == 0, out
    exits = _row(out, "bridge exit as due (0; 143/129 SIGTERM/HUP; 1 journal)")
    assert exits[0].split("/")[0] == exits[0].split("/")[1], out
    replayed = _row(out, "journals replay to the live receipts")[2].split("/")
    failed = _row(out, "failed journals read back and agree")[2].split("/")
    assert replayed[0] == replayed[1] and failed[0] == failed[1], out
    assert int(replayed[1]) + int(failed[1]) == CI_SCHEDULES and int(failed[1]) > 0, out


def _plans(*args: str) -> list[dict[str, Any]]:
    """``tools/soak/soak ARGS --plans``: the schedules' plans, run in a process of their own."""
    p = subprocess.run(
        [sys.executable, str(SOAK), *args, "--plans"], capture_output=True, text=True, timeout=60, cwd=str(ROOT)
    )
    assert p.returncode == 0, p.stderr
    return [json.loads(line) for line in p.stdout.splitlines()]


def test_soak_json_and_only_seed(tmp_path: Path) -> None:
    """``--json`` gives the same numbers as one object; ``--only-seed`` reruns one schedule, whose
    plan (``--plans``) depends on its seed only: the same in another process, alone or not."""
    run = subprocess.run(
        [sys.executable, str(SOAK), "--schedules", "3", "--seed", "5", "--json", "--dir", str(tmp_path / "a")],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=str(ROOT),
    )
    data = json.loads(run.stdout.splitlines()[-1])
    total = data["rows"]["total"]
    assert total["schedules"] == 3 and total["lost"] == 0 and total["hangs"] == 0, data
    assert total["prompts accepted"] == total["receipts"], data
    assert set(data["faults"]) == {"engine", "controller"}
    plans = _plans("--schedules", "3", "--seed", "5")
    assert len(plans) == 3 and _plans("--schedules", "3", "--seed", "5") == plans
    seed, mode = plans[1]["seed"], plans[1]["mode"]
    assert _plans("--only-seed", str(seed)) == [plans[1]], "a schedule's plan must depend on its seed only"
    again = subprocess.run(
        [sys.executable, str(SOAK), "--only-seed", str(seed), "--json", "--dir", str(tmp_path / "b")],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=str(ROOT),
    )
    one = json.loads(again.stdout.splitlines()[-1])
    assert one["rows"]["total"]["schedules"] == 1
    assert one["rows"][mode]["schedules"] == 1


# -- a 1 GiB line ----------------------------------------------------------------------------------

#: The bound on ``bridge serve``'s peak RSS (VmHWM) while a 1 GiB line goes by: the default line
#: limit (64 MiB) plus 100 MiB for the interpreter, trio, the bridge and the read buffers.
#: (Measured: about 34 MiB for a plain session, about 100 MiB with the line: the pending
#: bytes up to the limit, held once; test_an_oversize_line_holds_at_most_max_line.)
PEAK_RSS_BOUND = 64 * MiB + 100 * MiB


async def test_a_1gib_line_costs_bounded_memory(tmp_path: Path) -> None:
    gib = 1 << 30
    # generation 1: the prompt is acked, then one 1 GiB line, then its run goes on as normal;
    # generation 2 (after the gap recycles the engine): a plain fake engine.
    argv = generations_argv(tmp_path / "engines", [{"prompts": [{"oversize_at": 2, "oversize_bytes": gib}]}])
    journal = tmp_path / "j.jsonl"
    sp = await ServeProc.start(tmp_path, argv, "--journal", str(journal), "--ack-timeout", "10")
    peak = 0
    try:
        with trio.fail_after(20):
            ready = await sp.next()
            assert ready is not None and ready["type"] == "ready", sp.stderr
            pid = sp.proc.pid
            async with trio.open_nursery() as nursery:

                async def poll() -> None:
                    nonlocal peak
                    while True:
                        peak = max(peak, vm_hwm(pid) or 0)
                        await trio.sleep(0.02)

                nursery.start_soon(poll)
                await sp.send({"type": "prompt", "id": "big", "message": "write a gigabyte"})
                big = (await sp.until(lambda line: line["type"] == "receipt"))["receipt"]
                await sp.send({"type": "prompt", "id": "after", "message": "hello"})
                after = (await sp.until(lambda line: line["type"] == "receipt"))["receipt"]
                peak = max(peak, vm_hwm(pid) or 0)  # VmHWM is the peak so far: read before exit
                nursery.cancel_scope.cancel()
            await sp.send({"type": "shutdown"})
            await sp.read_all()
            code = await sp.wait()
    finally:
        await sp.kill()
    # SPEC §3/§5: the line is one observation that opens a gap; the held prompt is outcome-unknown/gap
    assert (big["state"], big["reason"]) == ("outcome-unknown", "gap"), big
    assert [s["signal"] for s in big["signals"]] == ["gap"], big
    assert big["ackIdx"] is not None
    # the engine is recycled and the next prompt runs normally
    assert (after["state"], after["reply"], after["generation"]) == ("finished", "ok: hello", 2), after
    assert code == 0, sp.stderr
    raws = [e["recv_raw"] for e in read_journal(journal) if "recv_raw" in e]
    assert len(raws) == 1 and raws[0].startswith(f"[oversize line: {gib} bytes, first 1024 kept]"), raws
    assert peak < PEAK_RSS_BOUND, f"bridge serve peak RSS {peak / MiB:.0f} MiB >= {PEAK_RSS_BOUND / MiB:.0f} MiB"


def test_an_oversize_line_holds_at_most_max_line() -> None:
    max_line = 8 * MiB
    size = 256 * 1024
    splitter = LineSplitter(max_line)
    tracemalloc.start()
    try:
        for _ in range(3 * max_line // size):
            assert splitter.feed(b"x" * size) == []  # a fresh buffer per read, as from a pipe
        lines = splitter.feed(b"\n")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(lines) == 1 and isinstance(lines[0], Oversize) and lines[0].length == 3 * max_line
    # what a line must be held for until it is known to be too long, and a little slack
    assert peak < max_line + 2 * MiB, f"peak {peak / MiB:.1f} MiB for max_line {max_line / MiB:.0f} MiB"


# -- the close/fsync race ----------------------------------------------------------------------------


async def test_close_does_not_fsync_a_closed_journal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Regression (found by tools/soak/soak, fixed in 063428d): ``Bridge.aclose`` cancelled the fsync task
    and closed the journal at once; an fsync already handed to its worker thread then hit a closed
    (or reused) descriptor, EBADF escaped ``open_bridge`` and ``bridge serve`` exited 1 with no
    ``bye`` (~2% of soak schedules under load: 194 of 10,000)."""
    real_fsync = os.fsync

    def slow_thread_fsync(fd: int) -> None:
        # A worker thread descheduled between its start and its syscall (as on a loaded machine).
        if threading.current_thread() is not threading.main_thread():
            time.sleep(0.5)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", slow_thread_fsync)
    with trio.fail_after(20):
        async with open_bridge(CommandProfile(fake_engine_argv({})), journal=tmp_path / "j.jsonl") as bridge:
            r = await bridge.prompt("hello")  # its receipt asks the fsync task for an fsync
            assert r.state == "finished"
        # leaving the block closes the bridge while that fsync's thread has not run it yet


# -- a journal that fails before the fsync task runs -------------------------------------------------------


async def test_a_journal_that_fails_at_once_closes_cleanly(tmp_path: Path) -> None:
    """Found by tools/soak/soak (api schedules whose journal fills up at once): a prompt stopped while
    queued gets its receipt in the same step, before any checkpoint; its journal write fails
    (disk full), the journal closes; the fsync task, started but not yet run, then asks the closed
    journal for its descriptor and ``ValueError: I/O operation on closed file`` escapes
    ``open_bridge``. The same happens on a real full disk (RLIMIT_FSIZE: EFBIG) — the receipt's
    flush is where it fails. Wanted: the bridge closes as for any journal failure."""
    notes: list[dict[str, Any]] = []
    with trio.fail_after(20), failing_journal(0):
        async with open_bridge(
            CommandProfile(fake_engine_argv({})),
            journal=tmp_path / "j.jsonl",
            config=fast_config(),
            start_engine=False,  # the prompt is queued before any engine, whose note would fail first
        ) as bridge:
            bridge.listeners.append(notes.append)
            h = await bridge.submit("hello", request="a")
            assert await bridge.stop("a") is None  # queued: rejected at once, its receipt is journaled
            assert bridge.journal_failed is not None
            later = await bridge.submit("after the failure", request="b")
            await bridge.wait_closed()
    r, r2 = h.receipt_nowait, later.receipt_nowait
    assert r is not None and (r.state, r.reason) == ("rejected", "cancelled")
    assert r2 is not None and (r2.state, r2.reason) == ("rejected", "closing")
    assert [n["signal"] for n in notes if n.get("type") == "signal"] == ["journal-failed"]
    assert check_journal_readable(tmp_path / "j.jsonl")[0] == []


def test_a_disk_full_at_the_header_is_one_line(tmp_path: Path) -> None:
    """Found by tools/soak/soak (serve schedules whose RLIMIT_FSIZE is below the journal header's size):
    the journal file is created, its header's flush fails (EFBIG), and the OSError escapes
    ``bridge serve`` as a 36-line traceback with exit 1 and no ``ready``. Wanted: as for any
    journal that cannot be created, one line naming the journal on stderr and a non-zero exit."""
    import resource

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (64, 64))

    journal = tmp_path / "j.jsonl"
    proc = subprocess.run(
        [sys.executable, "-m", "bridge", "serve", "--journal", str(journal), "--", *fake_engine_argv({})],
        input=b'{"type":"prompt","id":"a","message":"hi"}\n',
        capture_output=True,
        timeout=60,
        cwd=str(ROOT),
        preexec_fn=limit,
        check=False,
    )
    err = proc.stderr.decode("utf-8", "replace").strip().splitlines()
    assert proc.returncode in (1, 2), (proc.returncode, err)
    assert len(err) == 1 and "journal" in err[0], err
    assert b'"type":"ready"' not in proc.stdout or b"journal-failed" in proc.stdout, proc.stdout


def test_a_disk_full_at_the_last_flush_is_signalled(tmp_path: Path) -> None:
    """Found by tools/soak/soak (serve schedules whose RLIMIT_FSIZE falls in the journal's last few
    hundred bytes): what follows the last receipt (the release, the closing note, the engine's
    exit, ``bridge-closed``) is flushed when the journal closes, after the lifecycle has closed;
    that flush fails, ``Journal.fail`` reports it, the lifecycle ignores the input, and bridge
    serve exits 1 with its stderr line, but the controller was never sent ``journal-failed``
    (SPEC §5: "the controller is told at once what failed"), though ``bye`` comes after it."""
    import resource

    lines = b'{"type":"prompt","id":"a","message":"hi"}\n{"type":"shutdown"}\n'
    no_deltas = {"prompts": [{"deltas": 0}]}

    def run(journal: Path, limit: int) -> subprocess.CompletedProcess[bytes]:
        def preexec() -> None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

        return subprocess.run(
            [sys.executable, "-m", "bridge", "serve", "--journal", str(journal), "--", *fake_engine_argv(no_deltas)],
            input=lines,
            capture_output=True,
            timeout=60,
            cwd=str(ROOT),
            preexec_fn=preexec,
            check=False,
        )

    full = run(tmp_path / "full.jsonl", 1 << 30)
    assert full.returncode == 0, full.stderr
    data = (tmp_path / "full.jsonl").read_bytes()
    # Inside what the close flushes (the ~240 bytes after the receipt's line), in its middle.
    # A cut 40 bytes before the end was past the second journal's end in 1 run in 3 (exit 0):
    # the engine's deltas made one to four ``updates`` entries (~60 bytes each) as the reads
    # fell; with none, the two journals differ only in the digits of times.
    after_receipt = data.index(b"\n", data.index(b'{"receipt":')) + 1
    cut = run(tmp_path / "cut.jsonl", (after_receipt + len(data)) // 2)
    out = [json.loads(x) for x in cut.stdout.splitlines()]
    assert cut.returncode == 1, cut.stderr
    assert [x["id"] for x in out if x["type"] == "receipt"] == ["a"]
    assert any(x["type"] == "signal" and x["signal"] == "journal-failed" for x in out), out


def test_a_signal_while_the_bridge_closes_by_itself(tmp_path: Path) -> None:
    """Found by tools/soak/soak (seed 822292423854: a journal that failed, then the soak's SIGTERM):
    once the bridge has closed by itself (a drain done, a failed journal), ``_serve_loop`` leaves
    ``open_signal_receiver`` and SIGTERM / SIGHUP have their default action again, while the bye,
    the receipts still queued for stdout and the journal-failed stderr line are not yet written.
    A supervisor's SIGTERM in that window kills bridge serve: exit -15, no ``bye`` (and a receipt
    still in the output queue would be lost to the controller). Wanted: 143 (or 0) and ``bye``."""
    import signal

    outcomes = []
    for _ in range(3):
        p = subprocess.Popen(
            [sys.executable, "-m", "bridge", "serve", "--no-journal", "--", *fake_engine_argv({})],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=str(ROOT),
        )
        assert p.stdin is not None and p.stdout is not None
        try:
            p.stdin.write(b'{"type":"prompt","id":"a","message":"hi"}\n{"type":"shutdown"}\n')
            p.stdin.flush()
            lines = []
            for raw in p.stdout:
                lines.append(json.loads(raw))
                if lines[-1]["type"] == "engine" and lines[-1]["event"] == "exited":
                    # the drain is done and the engine stopped: the bridge is on its way out
                    deadline = time.monotonic() + 2
                    while p.poll() is None and time.monotonic() < deadline:
                        p.send_signal(signal.SIGTERM)
                        time.sleep(0.0005)
            code = p.wait(timeout=20)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
            p.stdin.close()
            p.stdout.close()
            assert p.stderr is not None
            p.stderr.close()
        outcomes.append((code, [x["type"] for x in lines][-1:]))
    assert all(code in (0, 143) and last == ["bye"] for code, last in outcomes), outcomes


# -- the fake engine's soak faults -----------------------------------------------------------------------


def _fake(scenario: dict[str, Any], stdin: bytes, timeout: float = 10) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, str(ROOT / "tools" / "fake_engine.py"), "--scenario-json", json.dumps(scenario)],
        input=stdin,
        capture_output=True,
        timeout=timeout,
    )


def test_fake_engine_reads_lone_surrogates_like_json_parse() -> None:
    out = _fake({}, b'{"type":"prompt","id":"a","message":"x\\ud800y"}\n').stdout.splitlines()
    ack = json.loads(out[0])
    assert ack["id"] == "a" and ack["success"] is True
    user = json.loads(out[3])
    assert user["type"] == "message_start" and user["message"]["content"][0]["text"] == "x\ud800y"
    end = [json.loads(x) for x in out if b'"message_end"' in x][-1]
    assert end["message"]["content"][0]["text"] == "ok: x\ud800y"


def test_fake_engine_close_stdin_makes_the_next_write_fail() -> None:
    proc = subprocess.Popen(
        [
            sys.executable,
            str(ROOT / "tools" / "fake_engine.py"),
            "--scenario-json",
            json.dumps({"prompts": [{"close_stdin": True}]}),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(b'{"type":"prompt","id":"a","message":"hi"}\n')
        proc.stdin.flush()
        for _ in range(14):  # the whole run still comes
            assert proc.stdout.readline()
        deadline = time.monotonic() + 5
        with pytest.raises(BrokenPipeError):
            while time.monotonic() < deadline:
                proc.stdin.write(b'{"type":"get_state","id":"s"}\n')
                proc.stdin.flush()
                time.sleep(0.01)
        assert proc.poll() is None, "the engine lingers (until the bridge's ladder stops it)"
    finally:
        proc.kill()
        proc.wait()


def test_a_prompt_never_written_before_the_exit_replays_as_it_settled(tmp_path: Path) -> None:
    """Found by tools/soak/soak (seeds 328691679316, 393567013775): a prompt queued for an engine that
    exited before one byte of it went in settles rejected/engine-down through an ``unsent``
    note; the journal had the ``exit`` entry before that note, so replay settled the prompt at
    the exit, delivery-unknown; and the soak's check called any written prompt's rejection
    wrong, the note notwithstanding. The schedule's timing makes it show about one run in
    three: three runs of both, side by side (each in a folder of its own)."""
    procs = [
        subprocess.Popen(
            [sys.executable, str(SOAK), "--only-seed", "328691679316", "--only-seed", "393567013775"]
            + ["--dir", str(tmp_path / str(k))],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            stdin=subprocess.DEVNULL,
            text=True,
            cwd=str(ROOT),
        )
        for k in range(3)
    ]
    try:
        outputs = [proc.communicate(timeout=180)[0] for proc in procs]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    for proc, out in zip(procs, outputs, strict=True):
        assert proc.returncode == 0 and "FAIL" not in out, out[-3000:]
