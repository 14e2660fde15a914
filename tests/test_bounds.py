"""SPEC §8 / issue 6: a long-lived bridge keeps flat memory."""

from __future__ import annotations

import sys
import tracemalloc
from pathlib import Path

import trio

from bridge.core.lifecycle import machine
from bridge.core.prompts import SIGNALS_PER_PROMPT
from bridge.core.session import TRACKER_KEEP, Session
from bridge.live import api
from bridge.profiles.command import CommandProfile
from tests.conftest import TOOLS

ACK = {"type": "response", "command": "prompt", "success": True, "data": {"disposition": "started"}}
USER = {"type": "message_start", "message": {"role": "user", "content": "hi"}}
DONE = {
    "type": "message_end",
    "message": {"role": "assistant", "content": [{"type": "text", "text": "ok"}], "stopReason": "stop"},
}


def one_prompt(s: Session, n: int) -> None:
    rid = f"p{n}"
    s.send({"type": "prompt", "id": rid, "message": "hi"})
    for ev in (
        {**ACK, "id": rid},
        {"type": "agent_start"},
        USER,
        DONE,
        {"type": "agent_end"},
        {"type": "agent_settled"},
    ):
        s.observe(ev)
    s.release(rid)


def test_a_live_session_forgets_settled_runs_and_keeps_flat_memory():
    s = Session(("clear_queue",), collect=False)
    for n in range(25_000):
        one_prompt(s, n)
    # Traced from here only (tracing doubles the cost of a prompt): what the 60k prompts below
    # allocate and keep is the growth, and a block freed now that was allocated untraced
    # counts for nothing (tracing from the start could only hide growth behind such frees).
    tracemalloc.start()
    first = tracemalloc.get_traced_memory()[0]
    for n in range(25_000, 85_000):
        one_prompt(s, n)
    second = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    assert len(s.tracker.runs) <= TRACKER_KEEP + 2
    assert s.open == {} and s.observations == 85_000 * 6
    assert second - first < 256 * 1024, f"grew {second - first} bytes over 60k prompts"


def test_replay_sessions_keep_everything_like_the_seed():
    s = Session((), collect=True)
    for n in range(TRACKER_KEEP * 2):
        one_prompt(s, n)
    assert len(s.tracker.runs) == TRACKER_KEEP * 2


def test_a_signal_flood_is_bounded_per_prompt_and_in_the_tracker():
    s = Session((), collect=False)
    s.send({"type": "prompt", "id": "p1", "message": "hi"})
    s.observe({**ACK, "id": "p1"})
    for _ in range(10_000):
        s.observe({"type": "queue_update", "steering": ["x"], "followUp": []})
    held = s.prompt("p1")
    assert held is not None and len(held.signals) == SIGNALS_PER_PROMPT + 1
    assert held.signals[-1]["signal"] == "more-signals-not-kept"
    assert len(s.tracker.overlaps) <= TRACKER_KEEP and s.tracker.overlap_count == 10_000


async def test_the_supervisor_keeps_only_outstanding_prompts_and_recent_ids(tmp_path: Path, monkeypatch):
    monkeypatch.setattr(machine, "RECENT_IDS", 10)
    profile = CommandProfile([sys.executable, str(TOOLS / "fake_engine.py")])
    with trio.fail_after(60):
        async with api.open_bridge(profile, journal=False) as bridge:
            for n in range(40):
                assert (await bridge.prompt("hi", request=f"r{n}")).state == "finished"
            assert (
                bridge.supervision.lifecycle.state.prompts == {}
                and len(bridge.supervision.lifecycle.state.recent) == 10
            )
            assert bridge.knows("r39") and not bridge.knows("r0")
            assert bridge.get_receipt("r39") is not None
