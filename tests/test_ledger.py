"""The ledger (issue 44): one durable record per accepted prompt, idempotent ids, its schema, several
processes at once, and its calls off the event loop (bridge/core/ledger.py, bridge/live/ledger.py)."""

from __future__ import annotations

import json
import os
import sqlite3
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import trio

from bridge.core.ledger import (
    DELIVERY_OPTIONS,
    SCHEMA_VERSION,
    Admitted,
    Conflict,
    Known,
    Record,
    admit,
    digest_input,
)
from bridge.core.receipts import Receipt
from bridge.core.words import Reason, State
from bridge.live.ledger import AsyncLedger, Ledger, LedgerError, default_ledger_path, prompt_digest
from tests.conftest import ROOT


def finished(request: str) -> Receipt:
    return Receipt(request=request, state=State.FINISHED, run="run-1", reply="hi")


# -- the pure rules --------------------------------------------------------------------


def test_an_id_not_held_is_admitted_the_same_prompt_is_known_another_is_refused_in_one_line() -> None:
    assert isinstance(admit(None, "p1", "d1"), Admitted)
    held = Record(scope="default", request="p1", digest="d1", accepted=1.0)
    assert admit(held, "p1", "d1") == Known(held)
    conflict = admit(held, "p1", "d2")
    assert isinstance(conflict, Conflict)
    assert "\n" not in conflict.line and "'p1'" in conflict.line and "new id" in conflict.line


def test_the_digest_covers_text_and_what_is_asked_not_how_the_answer_is_delivered() -> None:
    base = digest_input("hello", {"model": "m"})
    assert digest_input("hello", {"model": "m", "stream": True, "events": True, "trace": {"a": "b"}}) == base
    assert digest_input("hello", {"model": "m", "thinking": None}) == base, "None is an option not given"
    assert digest_input("hello", {"model": "other"}) != base
    assert digest_input("hello!", {"model": "m"}) != base
    assert digest_input("hello", {"timeout": 5}) != digest_input("hello", {})
    assert {"stream", "events", "trace"} <= DELIVERY_OPTIONS
    # A lone surrogate (a JSON string may hold one) still has one spelling.
    assert digest_input("\ud800", {}) == digest_input("\ud800", {})


# -- the store ---------------------------------------------------------------------------


def test_an_accept_is_recorded_and_a_resubmission_runs_nothing(tmp_path: Path) -> None:
    path = tmp_path / "l" / "ledger.sqlite3"
    with Ledger(path, clock=lambda: 10.0) as ledger:
        assert isinstance(ledger.accept("p1", "hello", {"model": "m"}, journal="/j.jsonl"), Admitted)
        again = ledger.accept("p1", "hello", {"model": "m", "stream": True})
        assert isinstance(again, Known) and again.record.receipt is None and again.record.journal == "/j.jsonl"
        other = ledger.accept("p1", "goodbye", {"model": "m"})
        assert isinstance(other, Conflict)
        # Another scope is another controller's ids.
        assert isinstance(ledger.accept("p1", "goodbye", {}, scope="other"), Admitted)
    # Reopened (a restart): the same answers from disk.
    with Ledger(path) as ledger:
        record = ledger.get("p1")
        assert record is not None and record.digest == prompt_digest("hello", {"model": "m"})
        assert record.state == "accepted" and record.accepted == 10.0
        assert isinstance(ledger.accept("p1", "hello", {"model": "m"}), Known)


def test_written_then_the_first_receipt_stands(tmp_path: Path) -> None:
    with Ledger(tmp_path / "ledger.sqlite3") as ledger:
        ledger.accept("p1", "hello", {})
        ledger.written("p1", journal="/j.jsonl")
        record = ledger.get("p1")
        assert record is not None and record.state == "written" and record.journal == "/j.jsonl"
        assert ledger.settle(finished("p1"))
        assert not ledger.settle(Receipt(request="p1", state=State.REJECTED, reason=Reason.BRIDGE_LOST))
        assert not ledger.settle(finished("never-accepted"))
        record = ledger.get("p1")
        assert record is not None and record.receipt == finished("p1") and record.state == "finished"
        assert ledger.unsettled() == []
        known = ledger.accept("p1", "hello", {})
        assert isinstance(known, Known) and known.record.receipt == finished("p1")


def test_the_file_is_private_and_in_wal_mode(tmp_path: Path) -> None:
    folder = tmp_path / "state" / "ledger"
    with Ledger(folder / "ledger.sqlite3") as ledger:
        ledger.accept("p1", "hello", {})
        mode = sqlite3.connect(folder / "ledger.sqlite3").execute("PRAGMA journal_mode").fetchone()[0]
        assert mode == "wal"
        for name in os.listdir(folder):
            assert stat.S_IMODE(os.stat(folder / name).st_mode) == 0o600, name
    assert stat.S_IMODE(os.stat(folder).st_mode) == 0o700


def test_the_default_ledger_is_beside_the_journals(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("PI_BRIDGE_LEDGER_DIR", raising=False)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    assert default_ledger_path() == tmp_path / "pi-bridge" / "ledger" / "ledger.sqlite3"
    monkeypatch.setenv("PI_BRIDGE_LEDGER_DIR", str(tmp_path / "x"))
    assert default_ledger_path() == tmp_path / "x" / "ledger.sqlite3"


def test_a_newer_schema_is_refused_in_one_line_naming_both_versions(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite3"
    Ledger(path).close()
    db = sqlite3.connect(path)
    assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    db.execute(f"PRAGMA user_version={SCHEMA_VERSION + 1}")
    db.close()
    with pytest.raises(LedgerError) as e:
        Ledger(path)
    words = str(e.value)
    assert "\n" not in words and str(path) in words
    assert f"schema {SCHEMA_VERSION + 1}" in words and f"up to {SCHEMA_VERSION}" in words and "newer" in words


def test_no_ledger_and_a_file_that_is_no_database_are_one_line_each(tmp_path: Path) -> None:
    with pytest.raises(LedgerError, match="there is no ledger at"):
        Ledger(tmp_path / "absent.sqlite3", create=False)
    junk = tmp_path / "junk.sqlite3"
    junk.write_bytes(b"not a database, " * 100)
    with pytest.raises(LedgerError, match="cannot open the ledger") as e:
        Ledger(junk)
    assert "\n" not in str(e.value)
    with pytest.raises(LedgerError, match="is a folder"):
        Ledger(tmp_path)


_RACE = """
import sys
from bridge.core.ledger import Admitted
from bridge.live.ledger import Ledger
ledger = Ledger(__import__("pathlib").Path(sys.argv[1]))
won = sum(isinstance(ledger.accept(f"p{i}", "hello", {}), Admitted) for i in range(int(sys.argv[2])))
print(won)
"""


def test_several_processes_admit_each_id_once(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite3"
    Ledger(path).close()
    n = 60
    procs = [
        subprocess.Popen([sys.executable, "-c", _RACE, str(path), str(n)], stdout=subprocess.PIPE, text=True, cwd=ROOT)
        for _ in range(3)
    ]
    won = [int(p.communicate(timeout=120)[0]) for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert sum(won) == n, f"each id admitted exactly once across the processes: {won}"
    with Ledger(path) as ledger:
        assert len(ledger.records()) == n


def test_a_reader_is_not_blocked_by_a_writer_holding_its_transaction(tmp_path: Path) -> None:
    """`bridge receipts` while serve writes: opening a made ledger and reading it take no write
    lock (a writer mid-transaction would otherwise hold the reader for the busy timeout)."""
    path = tmp_path / "ledger.sqlite3"
    with Ledger(path) as ledger:
        ledger.accept("p1", "hello", {})
    writer = sqlite3.connect(path, isolation_level=None)
    writer.execute("BEGIN IMMEDIATE")
    writer.execute("UPDATE prompts SET written=1")
    try:
        with Ledger(path, create=False) as reader:
            record = reader.get("p1")
            assert record is not None and record.written is None, "the reader sees the last commit"
            assert [r.request for r in reader.records()] == ["p1"]
    finally:
        writer.execute("ROLLBACK")
        writer.close()


# -- off the event loop ------------------------------------------------------------------


async def test_the_async_ledger_runs_each_call_in_a_thread_and_a_cancel_waits_for_the_commit(tmp_path: Path) -> None:
    entered, go_on = threading.Event(), threading.Event()
    loop_thread = threading.get_ident()
    threads: list[int] = []

    def clock() -> float:
        threads.append(threading.get_ident())
        if threads and len(threads) == 2:  # the second call: hold it in its thread
            entered.set()
            go_on.wait(30)
        return 5.0

    ledger = AsyncLedger(Ledger(tmp_path / "ledger.sqlite3", clock=clock))
    assert isinstance(await ledger.accept("p1", "hello", {}), Admitted)
    assert loop_thread not in threads, "the call ran off the event loop"

    async def release_after_cancel(scope: trio.CancelScope) -> None:
        await trio.to_thread.run_sync(entered.wait, 30)
        scope.cancel()
        await trio.sleep(0)
        go_on.set()

    async with trio.open_nursery() as nursery:
        with trio.CancelScope() as scope:
            nursery.start_soon(release_after_cancel, scope)
            await ledger.accept("p2", "hello", {})
            await trio.sleep_forever()  # (the cancel lands here, after the commit)
    record = await ledger.get("p2")
    assert record is not None, "a cancelled accept that had begun was committed, and the caller waited for it"
    assert await ledger.settle(finished("p2"))
    ledger.ledger.close()


# -- `bridge receipts` ---------------------------------------------------------------------


def receipts_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bridge", "receipts", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        env={**os.environ, **(env or {})},
    )


def test_bridge_receipts_lists_ids_and_states_and_prints_one_receipt_as_json(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite3"
    with Ledger(path) as ledger:
        ledger.accept("p1", "hello", {})
        ledger.settle(finished("p1"))
        ledger.accept("p2", "again", {})
        ledger.written("p2", journal="/j.jsonl")
        ledger.accept("p3", "x", {})
        ledger.settle(Receipt(request="p3", state=State.REJECTED, reason=Reason.BRIDGE_LOST, native_error="lost"))
        ledger.accept("p1", "other", {}, scope="ci")
    listed = receipts_cli("--ledger", str(path))
    assert listed.returncode == 0, listed.stderr
    rows = [line.split("\t") for line in listed.stdout.splitlines()]
    assert [(r[0], r[1]) for r in rows] == [
        ("p1", "finished"),
        ("p2", "written"),
        ("p3", "rejected (bridge-lost)"),
        ("p1", "accepted"),
    ]
    assert rows[3][-1] == "scope ci"
    as_json = receipts_cli("--ledger", str(path), "--json", "--scope", "default")
    assert [json.loads(line)["state"] for line in as_json.stdout.splitlines()] == ["finished", "written", "rejected"]
    one = receipts_cli("p1", "--ledger", str(path))
    assert one.returncode == 0 and json.loads(one.stdout) == finished("p1").to_json()
    assert Receipt.from_json(json.loads(one.stdout)) == finished("p1")


def test_bridge_receipts_exit_status_names_what_is_missing_in_one_line(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite3"
    with Ledger(path) as ledger:
        ledger.accept("p2", "again", {})
    unsettled = receipts_cli("p2", "--ledger", str(path))
    assert unsettled.returncode == 1 and unsettled.stdout == ""
    assert "no receipt yet (accepted" in unsettled.stderr and unsettled.stderr.count("\n") == 1
    unknown = receipts_cli("nope", "--ledger", str(path))
    assert unknown.returncode == 1 and "holds no prompt 'nope'" in unknown.stderr
    missing = receipts_cli("--ledger", str(tmp_path / "absent.sqlite3"))
    assert missing.returncode == 2 and "there is no ledger at" in missing.stderr
    assert not (tmp_path / "absent.sqlite3").exists(), "reading makes no ledger"
    db = sqlite3.connect(path)
    db.execute(f"PRAGMA user_version={SCHEMA_VERSION + 1}")
    db.close()
    newer = receipts_cli("--ledger", str(path))
    assert newer.returncode == 2 and "newer pi-bridge" in newer.stderr and newer.stderr.count("\n") == 1


def test_bridge_receipts_reads_the_default_ledger(tmp_path: Path) -> None:
    env = {"XDG_STATE_HOME": str(tmp_path), "PI_BRIDGE_LEDGER_DIR": ""}
    empty = receipts_cli(env=env)
    assert empty.returncode == 2 and str(tmp_path / "pi-bridge" / "ledger" / "ledger.sqlite3") in empty.stderr
    with Ledger(tmp_path / "pi-bridge" / "ledger" / "ledger.sqlite3") as ledger:
        ledger.accept("p1", "hello", {})
    listed = receipts_cli(env=env)
    assert listed.returncode == 0 and listed.stdout.startswith("p1\taccepted\taccepted ")


def test_the_ledger_bench_prints_every_row_and_its_ratio() -> None:
    """``tools/bench/bench_ledger`` runs (speed is never asserted: the ratios are for people)."""
    proc = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "bench" / "bench_ledger"), "--rounds", "1", "--prompts", "5", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = json.loads(proc.stdout.splitlines()[-1])["rows"]
    assert set(rows) == {
        "journal receipt (baseline)",
        "ledger accept",
        "ledger written",
        "ledger receipt",
        "ledger per prompt",
        "ledger per prompt, in trio",
        "loop tick, idle",
        "loop tick, inline accepts",
        "loop tick, accepts in threads",
    }
    assert rows["journal receipt (baseline)"]["median_ratio"] == 1.0 == rows["loop tick, idle"]["median_ratio"]
    assert "ledger per prompt" in proc.stdout and "x, " in proc.stdout
