"""Issue 35: an engine's stderr in the journal is bounded per engine generation
(``bridge/core/stderr.py``); the receipt's stderr quote is unchanged, replay and diagnose read
such journals."""

from __future__ import annotations

from pathlib import Path

import trio

from bridge.core.config import BridgeConfig
from bridge.core.receipts import Receipt
from bridge.core.session import STDERR_QUOTED
from bridge.core.stderr import STDERR_DROPPED, TAIL_LINES, StderrBudget, tail_room
from bridge.live import api
from bridge.profiles.command import CommandProfile
from bridge.readers.diagnose.command import diagnose
from bridge.readers.replay import replay
from tests.helpers_live import fake_engine_argv, read_journal

MB = 1 << 20


def test_a_budget_journals_the_first_lines_then_holds_only_the_last():
    budget = StderrBudget(10_000)
    taken = [budget.take(f"line {k:05d} " + "x" * 89, float(k)) for k in range(1_000)]  # 100 chars + 1 each
    first = taken.index(False)
    assert all(taken[:first]) and not any(taken[first:])
    assert budget.journaled <= 10_000 - tail_room(10_000) < budget.journaled + 101
    note, held = budget.flush(3)
    assert held == [f"line {k:05d} " + "x" * 89 for k in range(1_000 - len(held), 1_000)]
    assert sum(len(h) + 1 for h in held) <= tail_room(10_000) and len(held) <= TAIL_LINES
    assert note == {
        "event": STDERR_DROPPED,
        "generation": 3,
        "lines": 1_000 - first - len(held),
        "chars": (1_000 - first - len(held)) * 101,
        "kept": len(held),
        "cap": 10_000,
        "from": float(first),
        "to": 999.0,
    }


def test_a_budget_under_its_cap_drops_nothing_and_none_is_no_cap():
    for cap in (None, 1 << 20):
        budget = StderrBudget(cap)
        assert all(budget.take("hello", 0.0) for _ in range(100))
        assert budget.flush(1) == (None, [])


def test_the_lines_a_receipt_quotes_are_kept_whatever_the_cap():
    budget = StderrBudget(8)
    for k in range(50):
        budget.take(f"a long line {k} " * 10, 0.0)
    note, held = budget.flush(1)
    assert note is not None and len(held) == STDERR_QUOTED and held[-1].startswith("a long line 49 ")


async def flood(tmp_path: Path, name: str, cap: int | None, **prompt: object) -> tuple[Path, Receipt]:
    scenario = {"on_start": {"stderr_flood": {"lines": 50_000, "size": 1_000}}, "prompts": [prompt]}
    journal = tmp_path / name
    with trio.fail_after(120):
        async with api.open_bridge(
            CommandProfile(fake_engine_argv(scenario)), journal=journal, config=BridgeConfig(stderr_journal_max=cap)
        ) as bridge:
            receipt = await bridge.prompt("hi")
    return journal, receipt


async def test_a_50_mb_stderr_flood_makes_a_small_journal_with_a_note_and_the_last_lines(tmp_path: Path):
    journal, receipt = await flood(tmp_path, "j.jsonl", BridgeConfig().stderr_journal_max)
    assert receipt.state == "finished"
    assert journal.stat().st_size < 1.5 * MB, journal.stat().st_size
    entries = read_journal(journal)
    notes = [e["note"] for e in entries if "note" in e and e["note"].get("event") == STDERR_DROPPED]
    assert len(notes) == 1 and notes[0]["generation"] == 1 and notes[0]["lines"] > 45_000, notes
    stderr = [e["stderr"] for e in entries if "stderr" in e]
    floods = [s for s in stderr if s.startswith("flood ")]
    assert floods[0].startswith("flood 1: ") and floods[-1] == "flood done"
    assert floods[-2].startswith("flood 50000: ")
    # The held last lines come right after the note, before the engine's exit.
    kinds = [next(iter(k for k in e if k not in ("t", "i"))) for e in entries]
    at = next(n for n, e in enumerate(entries) if e.get("note", {}).get("event") == STDERR_DROPPED)
    assert kinds[at + 1 : at + 1 + notes[0]["kept"]] == ["stderr"] * notes[0]["kept"]
    assert "exit" in kinds[at + 1 + notes[0]["kept"] :]
    assert [r.state for r in replay(str(journal)).receipts] == ["finished"]
    found = diagnose(str(journal))
    assert found is not None


async def test_the_receipts_stderr_quote_is_the_same_with_or_without_the_cap(tmp_path: Path):
    _, capped = await flood(tmp_path, "capped.jsonl", 64 * 1024, crash_at=3)
    _, whole = await flood(tmp_path, "whole.jsonl", None, crash_at=3)
    assert capped.reason == "engine-exited"
    native = capped.native_error
    assert native == whole.native_error and "Node.js" in native, native
    # Replay quotes the same lines from the capped journal.
    again = replay(str(tmp_path / "capped.jsonl")).receipts
    assert [r.native_error for r in again] == [native]
    assert (tmp_path / "capped.jsonl").stat().st_size < 200 * 1024
