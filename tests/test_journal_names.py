"""The default journal's name never collides: any number of bridges a process opens in one
second (one after another, or at once in one nursery) get a file each, every one replayable; a
name another process took already is passed over; a path the caller gives that exists is still
refused. Through the fake engine as a real subprocess; the default folder is under ``tmp_path``
(``$XDG_STATE_HOME``), never the user's."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import trio

import bridge.live.journal as journal_module
from bridge.controller.acp.agent import journal_for
from bridge.live.api import open_bridge
from bridge.live.journal import JournalError, default_journal_path
from bridge.profiles.command import CommandProfile
from bridge.readers.replay import replay
from tests.helpers_live import fake_engine_argv

NAME = re.compile(r"\d{8}-\d{6}-(\d+)-(\d+)\.jsonl")


@pytest.fixture
def journals(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The default journal folder, under ``tmp_path``."""
    monkeypatch.delenv("PI_BRIDGE_JOURNAL_DIR", raising=False)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    return tmp_path / "state" / "pi-bridge" / "journals"


async def _one(profile: CommandProfile, made: list[Path], text: str) -> None:
    async with open_bridge(profile) as bridge:
        assert bridge.journal is not None
        made.append(bridge.journal.path)
        assert (await bridge.prompt(text)).state == "finished"


def _check(journals: Path, made: list[Path], count: int) -> None:
    assert len(made) == count and len(set(made)) == count, made
    assert sorted(p.name for p in journals.iterdir()) == sorted(p.name for p in made)
    for path in made:
        m = NAME.fullmatch(path.name)
        assert m is not None and int(m[1]) == os.getpid(), path.name
        receipts = replay(str(path)).receipts
        assert [(r.request, r.state) for r in receipts] == [("p1", "finished")], path


async def test_five_bridges_opened_at_once_each_get_their_own_default_journal(journals: Path) -> None:
    profile = CommandProfile(fake_engine_argv())
    made: list[Path] = []
    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            for n in range(5):
                nursery.start_soon(_one, profile, made, f"bridge {n}")
    _check(journals, made, 5)


async def test_ten_bridges_opened_one_after_another_each_get_their_own_default_journal(journals: Path) -> None:
    profile = CommandProfile(fake_engine_argv())
    made: list[Path] = []
    with trio.fail_after(60):
        for n in range(10):
            await _one(profile, made, f"bridge {n}")
    _check(journals, made, 10)
    # Named in order: this process's count of journals after the time and the pid.
    counts = [int(m[2]) for m in (NAME.fullmatch(p.name) for p in made) if m is not None]
    assert len(counts) == 10 and counts == sorted(counts), counts


async def test_a_default_name_another_process_took_is_passed_over(
    journals: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file of the same name (another process with our pid, in another pid namespace or
    before a reboot, in the same second) is never appended to, nor is it an error: the journal
    takes the next name. Past FRESH_ATTEMPTS names taken in a row, it says so."""
    taken = [default_journal_path(), default_journal_path()]
    names = iter([*taken, journals / "free.jsonl"])
    monkeypatch.setattr(journal_module, "default_journal_path", lambda: next(names))
    journals.mkdir(parents=True)
    for path in taken:
        path.write_text("another process's\n")
    async with open_bridge(CommandProfile(fake_engine_argv())) as bridge:
        assert bridge.journal is not None and bridge.journal.path == journals / "free.jsonl"
        assert (await bridge.prompt("hi")).state == "finished"
    assert all(p.read_text() == "another process's\n" for p in taken)
    assert [r.state for r in replay(str(journals / "free.jsonl")).receipts] == ["finished"]

    monkeypatch.setattr(journal_module, "default_journal_path", lambda: taken[0])
    with pytest.raises(JournalError, match=re.escape(f"cannot create a journal in {journals}: 100 new names")):
        async with open_bridge(CommandProfile(fake_engine_argv())):
            pass


async def test_a_given_path_that_exists_is_still_refused(tmp_path: Path) -> None:
    given = tmp_path / "j.jsonl"
    given.write_text("kept\n")
    with pytest.raises(JournalError, match="already exists"):
        async with open_bridge(CommandProfile(fake_engine_argv()), journal=given):
            pass
    assert given.read_text() == "kept\n"


def test_acp_sessions_opened_in_one_second_by_two_agents_get_their_own_journals(journals: Path) -> None:
    """``bridge acp``'s default: ``STEM-SESSION.jsonl`` beside a default name. Two agents of one
    process (each numbering its sessions from s1) in the same second: four names, no two alike."""
    names = [journal_for(True, session) for _agent in range(2) for session in ("s1", "s2")]
    assert len(set(names)) == 4, names
    assert all(n is not None and re.fullmatch(r"\d{8}-\d{6}-\d+-\d+-s[12]\.jsonl", Path(n).name) for n in names)


def test_bridge_run_writes_its_default_journal_under_a_counted_name(tmp_path: Path) -> None:
    """The CLI's default ``--journal`` is the same default (``bridge run``, ``serve``, ``acp``)."""
    env = {k: v for k, v in os.environ.items() if k != "PI_BRIDGE_JOURNAL_DIR"}
    env["XDG_STATE_HOME"] = str(tmp_path / "state")
    argv = [sys.executable, "-m", "bridge", "run", "hi", "--", *fake_engine_argv()]
    done = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    made = list((tmp_path / "state" / "pi-bridge" / "journals").iterdir())
    assert len(made) == 1 and NAME.fullmatch(made[0].name), made
    assert [r.state for r in replay(str(made[0])).receipts] == ["finished"]
