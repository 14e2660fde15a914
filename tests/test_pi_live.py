"""Integration tests against the real, pinned Pi 1.6.0 through the live bridge.

Every scenario of :mod:`tests.shared.pi_scenarios` (the ones ``tools/record`` records
into ``fixtures/pi-1.6.0``) runs end to end: the scripted model server
in-process, :func:`bridge.profiles.pi.scripted_profile` (the real sealed Pi),
:func:`bridge.live.api.open_bridge`. Each test asserts the receipts, the
signals raised, that ``replay(journal)`` gives the tracker output, overlap
signals and receipts the live bridge reported, and that Pi still behaves as
recorded (the normal form of the recording; re-record with ``tools/record``
when a change is intended). Plus: every recorded fixture replays to its
``.expected.json``; ``tools/record --check`` and ``bridge demo`` work.

The pinned Pi must be installed (``tools/test`` runs ``tools/setup/setup`` first);
without it these tests FAIL, naming ``tools/setup/setup`` -- they never skip.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import trio

from bridge.core.events import ReceiptReady
from bridge.core.session import Session
from bridge.profiles.pi import PI_PIN
from bridge.readers.replay import replay
from tests.conftest import FIXTURES, ROOT, TOOLS
from tests.shared import pi_scenarios as sc

PI_FIXTURES_DIR = FIXTURES / f"pi-{PI_PIN}"
PI_FIXTURES = sorted(PI_FIXTURES_DIR.glob("*.jsonl"))


async def run_scenario(name: str, tmp_path: Path) -> Any:
    """Run one scenario (its own checks included) with a hard bound on the time."""
    with trio.fail_after(sc.SCENARIOS[name].timeout + 15):
        return await sc.run(name, tmp_path / f"{name}.jsonl")


def assert_replay_matches_live(o: Any) -> None:
    live, again = sc.live_vs_replay(o)
    assert again == live, "replay(journal) differs from what the live bridge reported"
    # Not only the receipts of our own prompts: replay has nothing the live tracker lacked.
    rep = o.replay.to_json()
    assert (rep["overlaps"], rep["working"], rep["settled"]) == (
        o.live["overlaps"],
        o.live["working"],
        o.live["settled"],
    )


def assert_as_recorded(o: Any) -> None:
    recorded = PI_FIXTURES_DIR / f"{o.name}.jsonl"
    assert recorded.exists(), f"no recording {recorded}: run tools/record --only {o.name}"
    diff = sc.diff_forms(sc.normal_form(recorded, o.name), sc.normal_form(o.journal, o.name))
    assert not diff, (
        f"Pi (or the bridge) no longer behaves as recorded in {recorded.relative_to(ROOT)}; "
        f"if that is intended, re-record: tools/record --only {o.name}\n" + "\n".join(diff)
    )


def states(o: Any) -> dict[str, tuple[Any, ...]]:
    return {k: (r.state, r.reason, r.stop) for k, r in o.receipts.items()}


def signal_names(o: Any) -> list[str]:
    return [n["signal"] for n in o.signals]


def overlap_whys(o: Any) -> list[tuple[str, Any]]:
    return [(s["signal"], s.get("why") or s.get("cause")) for s in o.overlaps]


# --------------------------------------------------------------------------- scenarios


async def test_plain(pinned_pi: Any, tmp_path: Path) -> None:
    o = await run_scenario("plain", tmp_path)
    assert states(o) == {"p1": ("finished", None, None)}
    assert o.receipts["p1"].reply == o.texts["p1"] == sc.PLAIN_REPLY
    assert signal_names(o) == []
    assert_replay_matches_live(o)
    assert_as_recorded(o)


async def test_tool_use(pinned_pi: Any, tmp_path: Path) -> None:
    o = await run_scenario("tool_use", tmp_path)
    assert states(o) == {"p1": ("finished", None, None)}
    assert o.receipts["p1"].reply == sc.TOOL_REPLY
    tools = [v for _, v in o.recv("tool_execution_end")]
    assert [t["toolName"] for t in tools] == ["bash"]
    assert tools[0]["result"]["structuredContent"]["output"] == "tool says hi\n"
    assert signal_names(o) == []
    assert_replay_matches_live(o)
    assert_as_recorded(o)


async def test_thinking_tool_usage(pinned_pi: Any, tmp_path: Path) -> None:
    o = await run_scenario("thinking_tool_usage", tmp_path)
    assert states(o) == {"p1": ("finished", None, None)}
    assert [e["event"] for e in o.facts["events"]][:2] == ["turn-start", "thinking"]
    assert signal_names(o) == []
    assert_replay_matches_live(o)
    assert_as_recorded(o)


async def test_stalled(pinned_pi: Any, tmp_path: Path) -> None:
    o = await run_scenario("stalled", tmp_path)
    assert states(o) == {"p1": ("failed", "stalled", o.receipts["p1"].stop)}
    assert signal_names(o) == ["stalled"]
    assert_replay_matches_live(o)
    assert_as_recorded(o)


async def test_two_prompts(pinned_pi: Any, tmp_path: Path) -> None:
    o = await run_scenario("two_prompts", tmp_path)
    assert states(o) == {"p1": ("finished", None, None), "p2": ("finished", None, None)}
    assert [o.receipts[k].reply for k in ("p1", "p2")] == ["first reply", "second reply"]
    assert [o.receipts[k].run for k in ("p1", "p2")] == ["run-1", "run-2"]
    assert [w["request"] for w in o.live["working"]] == ["p1", "p2"]
    assert signal_names(o) == []
    assert_replay_matches_live(o)
    assert_as_recorded(o)


async def test_stopped_mid_stream(pinned_pi: Any, tmp_path: Path) -> None:
    o = await run_scenario("stopped_mid_stream", tmp_path)
    stop = o.facts["stop"]
    assert stop and states(o) == {"p1": ("failed", "interrupted", stop)}
    assert o.receipts["p1"].reply  # the partial text of the aborted message
    assert o.live["settled"] == [
        {
            "request": "p1",
            "idx": o.receipts["p1"].settle_idx,
            "state": "failed",
            "reason": "interrupted",
            "stop": stop,
            "nativeError": None,
        }
    ]
    assert signal_names(o) == []  # the bridge's own clear_queue before the abort raises nothing
    assert_replay_matches_live(o)
    assert_as_recorded(o)


async def test_retry_after_500(pinned_pi: Any, tmp_path: Path) -> None:
    o = await run_scenario("retry_after_500", tmp_path)
    assert states(o) == {"p1": ("finished", None, None)}
    assert o.receipts["p1"].reply == "recovered after a 500"
    events = o.run_events("p1")
    assert [e["type"] for e in events if e["type"] in ("agent_start", "agent_end", "agent_settled")] == [
        "agent_start",
        "agent_end",
        "agent_start",
        "agent_end",
        "agent_settled",
    ]
    assert len(o.live["working"]) == len(o.live["settled"]) == 1
    assert signal_names(o) == []
    assert_replay_matches_live(o)
    assert_as_recorded(o)


async def test_retries_exhausted(pinned_pi: Any, tmp_path: Path) -> None:
    o = await run_scenario("retries_exhausted", tmp_path)
    assert states(o) == {"p1": ("failed", None, None)}
    assert "scripted error 500" in o.receipts["p1"].native_error
    assert o.live["settled"][0]["nativeError"] == o.receipts["p1"].native_error
    assert signal_names(o) == []
    assert_replay_matches_live(o)
    assert_as_recorded(o)


async def test_refused_while_streaming(pinned_pi: Any, tmp_path: Path) -> None:
    o = await run_scenario("refused_while_streaming", tmp_path)
    assert o.response("raw-2")["success"] is False
    assert states(o) == {"p1": ("outcome-unknown", "overlap", None)}
    assert overlap_whys(o) == [("O2", "the slot's run settled after the slot moved on")]
    # The seal breaks when the second prompt is written, and the bridge's own signal says why.
    assert signal_names(o) == ["second-prompt", "unsealed", "O2"]
    assert [s["signal"] for s in o.receipts["p1"].signals] == ["second-prompt", "O2"]
    assert [(r.request, r.state, r.reason) for r in o.replay.receipts] == [
        ("p1", "outcome-unknown", "overlap"),
        ("raw-2", "rejected", "engine"),
    ]
    assert_replay_matches_live(o)
    assert_as_recorded(o)


@pytest.mark.parametrize("name,kind", [("steer_unsealed", "steer"), ("follow_up_unsealed", "follow_up")])
async def test_queued_message_delivered(pinned_pi: Any, tmp_path: Path, name: str, kind: str) -> None:
    o = await run_scenario(name, tmp_path)
    r1 = o.receipts["p1"]
    assert (r1.state, r1.reason, r1.stop, r1.run) == ("outcome-unknown", "overlap", None, "run-1")
    assert overlap_whys(o) == [("O5", "queue-update"), ("O5", "uncaused-queue-update"), ("O6", None)]
    assert [s["signal"] for s in r1.signals] == ["O5", "O5", "O6"]
    assert signal_names(o) == ["O5", "unsealed", "O5", "O6"]
    assert o.response(f"raw-{kind}")["data"] == {"disposition": "queued"}
    # p1 is never settled on evidence once an overlap was seen
    assert [x["request"] for x in o.live["settled"]] == (["p2"] if name == "steer_unsealed" else [])
    if name == "steer_unsealed":  # the next prompt runs on a fresh engine and tracker
        r2 = o.receipts["p2"]
        assert (r2.state, r2.generation, r2.run, r2.reply) == ("finished", 2, "run-1", "a fresh engine answers")
    assert_replay_matches_live(o)
    assert_as_recorded(o)


async def test_clear_queue_unsealed(pinned_pi: Any, tmp_path: Path) -> None:
    o = await run_scenario("clear_queue_unsealed", tmp_path)
    assert states(o) == {"p1": ("outcome-unknown", "overlap", None)}
    assert overlap_whys(o) == [("O5", "queue-update")]  # the clear's empty queue_update is caused
    assert signal_names(o) == ["O5", "unsealed"]
    assert o.response("raw-clear")["data"] == {"steering": [], "followUp": [sc.FOLLOW_TEXT]}
    assert_replay_matches_live(o)
    assert_as_recorded(o)


async def test_extension_dialog(pinned_pi: Any, tmp_path: Path) -> None:
    o = await run_scenario("extension_dialog", tmp_path)
    assert states(o) == {"p1": ("finished", None, None), "p2": ("outcome-unknown", "disposition", None)}
    assert o.receipts["p1"].reply == "hello despite the dialog"
    assert o.receipts["p2"].disposition == "handled"
    assert signal_names(o) == [
        "seal-check",
        "seal-diagnostic",
        "seal-diagnostic",
        "seal-diagnostic",
        "seal-diagnostic",
        "disposition",
        "unsealed",
    ]
    assert "/pick" in o.signals[0]["problems"][0] and o.signals[0]["action"] == "warn"
    assert [a.get("cancelled") for a in o.sends("extension_ui_response")] == [True, True]
    assert o.overlaps == []
    assert_replay_matches_live(o)
    assert_as_recorded(o)


async def test_extension_autorun(pinned_pi: Any, tmp_path: Path) -> None:
    o = await run_scenario("extension_autorun", tmp_path)
    r = o.receipts["p1"]
    assert (r.state, r.reason, r.signals) == ("finished", None, ())
    whys = overlap_whys(o)
    assert whys[0] in (("O1", "no slot held"), ("O1", "after the slot's run"))
    if o.facts["ending"] == "O2":
        assert whys[1:] == [("O2", "settle of a run that is not the slot's")]
        assert signal_names(o) == ["O1", "unsealed", "O2"]
    else:  # the bridge retired the tainted engine before the extension's run settled
        assert whys[1:] == [] and signal_names(o) == ["O1", "unsealed"]
    assert_replay_matches_live(o)
    assert_as_recorded(o)


def test_every_scenario_has_a_test() -> None:
    tested = {
        "plain",
        "tool_use",
        "thinking_tool_usage",
        "stalled",
        "two_prompts",
        "stopped_mid_stream",
        "retry_after_500",
        "retries_exhausted",
        "refused_while_streaming",
        "steer_unsealed",
        "follow_up_unsealed",
        "clear_queue_unsealed",
        "extension_dialog",
        "extension_autorun",
    }
    assert set(sc.SCENARIOS) == tested


# --------------------------------------------------------------------------- fixtures


def test_every_scenario_is_recorded() -> None:
    assert {p.stem for p in PI_FIXTURES} == set(sc.SCENARIOS), "run tools/record"
    for p in PI_FIXTURES:
        assert p.with_suffix("").with_suffix(".expected.json").exists(), f"{p.name} has no .expected.json"


@pytest.mark.parametrize("path", PI_FIXTURES, ids=[p.stem for p in PI_FIXTURES])
def test_fixture_replays_to_its_expected_output(path: Path) -> None:
    expected = json.loads(path.with_suffix("").with_suffix(".expected.json").read_text())
    assert replay(str(path)).to_json() == expected


_ALL_FIXTURES = PI_FIXTURES + sorted((FIXTURES / "matrix").glob("pi-*/*.jsonl"))


@pytest.mark.parametrize("path", _ALL_FIXTURES, ids=[f"{p.parent.name}/{p.stem}" for p in _ALL_FIXTURES])
def test_fixture_leaks_no_machine_paths(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    assert str(ROOT) not in text
    # nor another checkout's (recorded where tools/pi/node_modules was a symlink to it)
    assert not re.search(r'"/[^"]*/tools/pi(-matrix)?/', text), re.search(r'"/[^"]*/tools/pi[^"]*', text)
    assert "/pi-bridge-cwd-" not in text.replace("<tmp>/pi-bridge-cwd-XXXXXXXX", "")
    header = json.loads(text.split("\n", 1)[0])
    assert all(not e.startswith("/") for e in header["seal"]["extensions"])


# --------------------------------------------------------------------------- the tools


def test_record_check_reports_same_and_changed(pinned_pi: Any, tmp_path: Path) -> None:
    record = [sys.executable, str(TOOLS / "record")]
    p = subprocess.run([*record, "--check", "--only", "plain"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "plain" in p.stdout and "same" in p.stdout and "all as recorded" in p.stdout
    # A recording that differs: --check says so, exits 1 and writes nothing.
    other = tmp_path / "out"
    other.mkdir()
    shutil.copy(PI_FIXTURES_DIR / "two_prompts.jsonl", other / "plain.jsonl")
    before = (other / "plain.jsonl").read_bytes()
    p = subprocess.run(
        [*record, "--check", "--only", "plain", "--out", str(other)], capture_output=True, text=True, timeout=60
    )
    assert p.returncode == 1, p.stdout + p.stderr
    assert "changed" in p.stdout and "second reply" in p.stdout
    assert (other / "plain.jsonl").read_bytes() == before and not (other / "plain.expected.json").exists()


def test_record_writes_a_recording(pinned_pi: Any, tmp_path: Path) -> None:
    out = tmp_path / "rec"
    p = subprocess.run(
        [sys.executable, str(TOOLS / "record"), "--only", "retry_after_500", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 0, p.stdout + p.stderr
    assert "new" in p.stdout
    journal, expected = out / "retry_after_500.jsonl", out / "retry_after_500.expected.json"
    assert json.loads(expected.read_text()) == replay(str(journal)).to_json()
    assert str(ROOT) not in journal.read_text()


def test_demo(pinned_pi: Any, tmp_path: Path) -> None:
    journal = tmp_path / "demo.jsonl"
    p = subprocess.run(
        [sys.executable, "-m", "bridge", "demo", "--json", "--journal", str(journal)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert p.returncode == 0, p.stdout + p.stderr
    receipts = [json.loads(line) for line in p.stdout.splitlines()]
    assert [(r["request"], r["state"], r["reason"]) for r in receipts] == [
        ("p1", "finished", None),
        ("p2", "finished", None),
        ("p3", "failed", "interrupted"),
        ("p4", "finished", None),
    ]
    assert receipts[2]["stop"] == "stop-1"
    assert "every receipt is what the showcase expects" in p.stderr and str(journal) in p.stderr
    assert [r.state for r in replay(str(journal)).receipts] == [r["state"] for r in receipts]


def test_demo_closed_by_a_signal_says_so_and_leaves_nothing(pinned_pi: Any, tmp_path: Path) -> None:
    """SIGTERM to ``bridge demo`` once its first prompt has its receipt: the bridge closes as
    ``bridge run``'s does (exit 143, every receipt given, one line saying why), and its
    folders (the scripted server's models, Pi's config and working folders) are removed."""
    import os
    import signal
    import time

    journal, tmp = tmp_path / "demo.jsonl", tmp_path / "tmp"
    tmp.mkdir()
    proc = subprocess.Popen(
        [sys.executable, "-m", "bridge", "demo", "--json", "--journal", str(journal)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "TMPDIR": str(tmp)},
    )
    deadline = time.monotonic() + 60
    while not (journal.exists() and b'{"receipt"' in journal.read_bytes()):
        assert proc.poll() is None and time.monotonic() < deadline, "the demo's first receipt never came"
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err
    assert "stopped by SIGTERM" in err and "Traceback" not in err
    receipts = [json.loads(line) for line in out.splitlines()]
    assert receipts and receipts[0]["state"] == "finished", receipts
    assert all(r["state"] in ("finished", "failed", "rejected") for r in receipts), receipts
    assert [r.request for r in replay(str(journal)).receipts] == [r["request"] for r in receipts]
    assert list(tmp.iterdir()) == []


def test_demo_without_pi_names_the_fix(tmp_path: Path) -> None:
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "bridge",
            "demo",
            "--pi-dir",
            str(tmp_path / "no-pi"),
            "--journal",
            str(tmp_path / "j.jsonl"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 2
    assert "not installed" in p.stderr and "tools/setup/setup" in p.stderr


# --------------------------------------------------------------------------- bugs found


def _feed(session: Session, *objs: dict[str, Any]) -> list[Any]:
    events: list[Any] = []
    for obj in objs:
        events += session.observe(obj)[1]
    return events


def test_refused_raw_prompt_leaves_the_held_prompt_its_evidence() -> None:
    assistant = {"role": "assistant", "content": [{"type": "text", "text": "slow"}], "stopReason": "stop"}
    s = Session(("clear_queue",))
    s.send({"type": "prompt", "id": "p1", "message": "slow"})
    _feed(
        s,
        {"id": "p1", "type": "response", "command": "prompt", "success": True, "data": {"disposition": "started"}},
        {"type": "agent_start"},
        {"type": "message_start", "message": {"role": "user", "content": [{"type": "text", "text": "slow"}]}},
        {"type": "message_start", "message": {"role": "assistant", "content": []}},
    )
    s.send({"type": "prompt", "id": "raw-2", "message": "second"})  # what Bridge.send_raw does
    _feed(
        s,
        {
            "id": "raw-2",
            "type": "response",
            "command": "prompt",
            "success": False,
            "error": "Agent is already processing.",
        },
    )
    events = _feed(
        s,
        {"type": "message_end", "message": assistant},
        {"type": "agent_end", "messages": [], "willRetry": False},
        {"type": "agent_settled", "aborted": False},
    )
    decided = [e.receipt for e in events if isinstance(e, ReceiptReady) and e.receipt.request == "p1"]
    assert decided, "p1's own run settled but no receipt was decided for it"
    r = decided[0]
    assert r.run == "run-1"
    assert r.state == "finished" or any(sig.get("signal") == "O2" for sig in r.signals), r
