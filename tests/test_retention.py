"""Issue 35: journals in the default folder are kept by age and total size
(``bridge/live/retention.py``); one a bridge holds open, a path the user named, and anything not
named like a journal are never removed."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
import trio

from bridge.core.config import BridgeConfig
from bridge.live import api
from bridge.live.retention import Keep, keep_from, sweep
from bridge.profiles.command import CommandProfile
from tests.helpers_live import fake_engine_argv

DAY = 86400.0


def journal(folder: Path, name: str, age_days: float, size: int = 100) -> Path:
    path = folder / name
    path.write_bytes(b"x" * size)
    then = time.time() - age_days * DAY
    os.utime(path, (then, then))
    return path


@pytest.fixture
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.delenv("PI_BRIDGE_JOURNAL_DIR", raising=False)
    for env in ("PI_BRIDGE_JOURNAL_KEEP_DAYS", "PI_BRIDGE_JOURNAL_KEEP_MB"):
        monkeypatch.delenv(env, raising=False)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    folder = tmp_path / "state" / "pi-bridge" / "journals"
    folder.mkdir(parents=True)
    return folder


async def open_one(config: BridgeConfig | None = None, journal: object = True) -> Path | None:
    with trio.fail_after(30):
        async with api.open_bridge(CommandProfile(fake_engine_argv()), journal=journal, config=config) as bridge:
            return bridge.journal.path if bridge.journal is not None else None


async def test_old_journals_go_and_others_stay_when_a_bridge_opens_a_default_journal(state: Path, tmp_path: Path):
    old = journal(state, "20250101-000000-1-1.jsonl", 40)
    old_acp = journal(state, "20250101-000000-1-2-s1.2.jsonl", 40)
    recent = journal(state, "20251201-000000-1-1.jsonl", 2)
    not_ours = journal(state, "notes.jsonl", 400)
    link = state / "20250101-000000-9-9.jsonl"
    link.symlink_to(not_ours)
    os.utime(link, (0, 0), follow_symlinks=False)
    mine = await open_one()
    assert mine is not None and mine.parent == state and mine.exists()
    assert not old.exists() and not old_acp.exists()
    assert recent.exists() and not_ours.exists() and link.is_symlink()


async def test_the_oldest_go_past_the_total_size(state: Path):
    mib = 1 << 20
    files = [journal(state, f"2025110{k}-000000-1-1.jsonl", 10 - k, mib) for k in range(1, 6)]  # 5 MiB
    await open_one(BridgeConfig(journal_keep_mb=3))
    assert [f.exists() for f in files] == [False, False, True, True, True]


async def test_a_journal_held_open_by_a_live_bridge_is_kept(state: Path):
    with trio.fail_after(60):
        async with api.open_bridge(CommandProfile(fake_engine_argv()), journal=True) as first:
            assert first.journal is not None
            held = first.journal.path
            then = time.time() - 400 * DAY
            os.utime(held, (then, then))  # as old as can be: only its lock keeps it
            control = journal(state, "20240101-000000-1-1.jsonl", 400)
            await open_one()
            assert held.exists(), "a journal a live bridge has open was removed"
            assert not control.exists(), "the control was kept: retention did not run"
        # Closed (its last lines made it new again: made old once more), the next bridge removes it.
        os.utime(held, (then, then))
        await open_one()
        assert not held.exists()


async def test_a_path_the_user_named_is_never_touched(state: Path, tmp_path: Path):
    named_folder = tmp_path / "mine"
    named_folder.mkdir()
    theirs = journal(named_folder, "20240101-000000-1-1.jsonl", 400)
    in_default = journal(state, "20240101-000000-2-1.jsonl", 400)
    await open_one(journal=named_folder / "20240101-000000-3-1.jsonl")
    assert theirs.exists() and in_default.exists(), "a named journal's open ran retention"
    sweep(named_folder, Keep(days=1, bytes=None), spare=None)  # (the sweep itself would remove it)
    assert not theirs.exists()


async def test_retention_is_changed_and_turned_off_by_the_variables(state: Path, monkeypatch: pytest.MonkeyPatch):
    old = journal(state, "20250101-000000-1-1.jsonl", 40)
    monkeypatch.setenv("PI_BRIDGE_JOURNAL_KEEP_DAYS", "0")
    monkeypatch.setenv("PI_BRIDGE_JOURNAL_KEEP_MB", "0")
    assert keep_from() == Keep(None, None)
    await open_one()
    assert old.exists()
    monkeypatch.setenv("PI_BRIDGE_JOURNAL_KEEP_DAYS", "50")
    await open_one()
    assert old.exists()
    await open_one(BridgeConfig(journal_keep_days=30))  # the option over the variable
    assert not old.exists()
