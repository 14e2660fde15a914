"""The Python API where a library user meets its edges (found by a new user's trial), through the
fake engine as a real subprocess: what the caller's block raises comes out as raised, a
cancelled ``prompt`` stops its prompt, notification channels opened on a closed bridge end, and
a bridge killed mid-prompt leaves a journal that says what it sent.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import trio

from bridge.live.api import open_bridge
from bridge.profiles.command import CommandProfile
from tests.conftest import ROOT

FAKE = [sys.executable, str(ROOT / "tools" / "fake_engine.py")]


def fake(scenario: dict[str, Any] | None = None) -> CommandProfile:
    return CommandProfile([*FAKE, *(["--scenario-json", json.dumps(scenario)] if scenario else [])])


async def test_what_the_block_raises_comes_out_as_raised_not_in_a_group() -> None:
    with pytest.raises(KeyError, match="boom"):
        async with open_bridge(fake(), journal=False):
            raise KeyError("boom")
    with pytest.raises(ValueError, match="inner"):
        async with open_bridge(fake(), journal=False), open_bridge(fake(), journal=False) as b2:
            assert (await b2.prompt("hi")).state == "finished"
            raise ValueError("inner")
    # A cancel from outside still just cancels.
    with trio.move_on_after(0.5) as scope:
        async with open_bridge(fake(), journal=False):
            await trio.sleep(30)
    assert scope.cancelled_caught


async def test_a_cancelled_prompt_call_stops_its_prompt_and_the_next_one_runs() -> None:
    """``prompt`` is submit and wait: cancelled while waiting, it stops the prompt it submitted
    (nobody else holds its handle), so the prompts after it are not stuck behind it."""
    slow = {"prompts": [{"deltas": 200, "delta_delay": 0.05}, {}]}
    async with open_bridge(fake(slow), journal=False) as bridge:
        notes = bridge.signals()
        with trio.move_on_after(1) as scope:
            await bridge.prompt("slow one")
        assert scope.cancelled_caught
        with trio.fail_after(20):
            second = await bridge.prompt("next one")
        assert second.state == "finished", second
        receipts = []
        while True:
            note = notes.receive_nowait()
            if note.get("type") == "receipt":
                receipts.append(note["receipt"])
            if len(receipts) == 2:
                break
    first = receipts[0]
    assert (first["request"], first["state"], first["reason"]) == ("p1", "failed", "interrupted"), first


async def test_channels_opened_on_a_closed_bridge_end_at_once() -> None:
    async with open_bridge(fake(), journal=False) as bridge:
        before = bridge.signals()
    with trio.fail_after(5):
        async for _ in before:  # opened before closing: it ends
            pass
        async for _ in bridge.signals():
            raise AssertionError("a closed bridge sends nothing more")
        async for _ in bridge.dialogs():
            raise AssertionError("a closed bridge asks nothing more")


def test_a_killed_bridge_leaves_a_journal_with_its_prompt_sent(tmp_path: Path) -> None:
    """SIGKILL while the engine works: the journal has the prompt's ``send`` (flushed before it
    went to the engine), and diagnose says the journal ends before the bridge closed."""
    journal = tmp_path / "k.jsonl"
    engine = [*FAKE, "--scenario-json", json.dumps({"defaults": {"hang": True}})]
    proc = subprocess.Popen(
        [sys.executable, "-m", "bridge", "serve", "--journal", str(journal), "--", *engine],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    engine_pid = None
    try:
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(json.dumps({"type": "prompt", "id": "a", "message": "x"}) + "\n")
        proc.stdin.flush()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            line = json.loads(proc.stdout.readline())
            if line["type"] == "engine":
                engine_pid = line["pid"]
                break
        assert engine_pid is not None
        deadline = time.monotonic() + 30
        while b'"prompt"' not in journal.read_bytes() and time.monotonic() < deadline:
            time.sleep(0.05)
        proc.kill()
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
        if engine_pid is not None:
            try:
                os.kill(engine_pid, signal.SIGKILL)  # its stdin's EOF ends it anyway
            except ProcessLookupError:
                pass
    sends = [json.loads(x)["send"] for x in journal.read_text().splitlines() if x.startswith('{"send"')]
    assert [s.get("id") for s in sends if s.get("type") == "prompt"] == ["a"], sends
    diagnosed = subprocess.run(
        [sys.executable, "-m", "bridge", "diagnose", str(journal)], capture_output=True, text=True, timeout=60
    )
    assert diagnosed.returncode == 0, diagnosed.stderr
    assert "journal ends before the bridge closed" in diagnosed.stdout, diagnosed.stdout


def test_diagnose_calls_out_a_live_journal_with_nothing_after_its_header(tmp_path: Path) -> None:
    journal = tmp_path / "h.jsonl"
    header = {"transcript": "pi-bridge", "version": 2, "clearing": [], "bridge": "0.1.0", "lean": True}
    journal.write_text(json.dumps(header) + "\n")
    diagnosed = subprocess.run(
        [sys.executable, "-m", "bridge", "diagnose", str(journal)], capture_output=True, text=True, timeout=60
    )
    assert diagnosed.returncode == 0, diagnosed.stderr
    assert "journal ends before the bridge closed" in diagnosed.stdout, diagnosed.stdout


@pytest.mark.parametrize("journal", ["", 0, 1.5])
async def test_a_journal_that_is_neither_a_path_nor_a_yes_or_no_is_refused(journal: Any) -> None:
    with pytest.raises(ValueError, match="journal: True"):
        async with open_bridge(fake(), journal=journal):
            raise AssertionError("opened")


async def test_steering_once_no_prompt_can_follow_is_an_error_as_in_serve() -> None:
    """serve answers configure/new_conversation/compact after ``shutdown`` with an error line;
    the API returned quietly, changing nothing. Now the same words, as a RuntimeError."""
    async with open_bridge(fake({"prompts": [{"deltas": 40, "delta_delay": 0.05}]}), journal=False) as bridge:
        bridge.configure(thinking="high")  # while prompts can follow: taken
        await bridge.submit("keeps the bridge draining")
        bridge.shutdown()
        for call in (lambda: bridge.configure(thinking="low"), bridge.new_conversation, lambda: bridge.compact("x")):
            with pytest.raises(RuntimeError, match="after shutdown changes nothing"):
                call()
    with pytest.raises(RuntimeError, match="while the bridge closes changes nothing"):
        bridge.new_conversation()
