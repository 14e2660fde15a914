"""`bridge diagnose`: every signal, gap and uncertain receipt explained, with evidence.

Per fixture the tests check the key facts of the wording (the signal, the indices, the
request, the run); synthetic journals cover what fixtures/core has no story for (dispositions,
seal diagnostics, engine exits, recorded receipts, seal checks, engine-down, the bridge's own
timeout and closing stops, journal failures, a journal that ends before the bridge closed). The HTML page
is rendered in a real headless Chromium; a ~200 MB journal checks memory stays bounded.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from bridge.readers.diagnose import BEFORE, diagnose, format_text
from bridge.readers.replay import replay
from tests.conftest import FIXTURES

ROOT = Path(__file__).resolve().parent.parent
CORE = FIXTURES / "core"
ALL_CORE = sorted(CORE.glob("*.jsonl"))
REAL = sorted((FIXTURES / "pi-1.6.0").glob("*.jsonl")) if (FIXTURES / "pi-1.6.0").is_dir() else []
OVERLAP_SIGNALS = {"O1", "O2", "O3", "O4", "O5", "O6", "aborted-without-stop"}
UNCERTAIN = {"pending", "delivery-unknown", "outcome-unknown"}


def bridge(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bridge", *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT
    )


def findings(path: Path | str) -> list[dict[str, Any]]:
    return diagnose(str(path)).to_json()["findings"]


def one(fs: list[dict[str, Any]], signal: str, **match: Any) -> dict[str, Any]:
    hits = [f for f in fs if f["signal"] == signal and all(f.get(k) == v for k, v in match.items())]
    assert len(hits) == 1, f"expected one {signal} {match}, got {[(f['signal'], f['idx'], f['request']) for f in fs]}"
    return hits[0]


def says(f: dict[str, Any], *phrases: str) -> None:
    for phrase in phrases:
        assert phrase in f["explanation"], f"{phrase!r} not in: {f['explanation']}"


def write(tmp_path: Path, name: str, entries: list[dict[str, Any]], **header: Any) -> Path:
    path = tmp_path / name
    head = {"transcript": "pi-bridge", "version": 1, **header}
    path.write_text("\n".join(json.dumps(e) for e in [head, *entries]) + "\n")
    return path


# --------------------------------------------------------------------------
# Every fixture: one finding per signal and per uncertain receipt


@pytest.mark.parametrize("path", ALL_CORE + REAL, ids=[p.stem for p in ALL_CORE + REAL])
def test_every_signal_and_uncertain_receipt_gets_a_finding(path: Path):
    rep = replay(str(path))
    diag = diagnose(str(path))
    data = diag.to_json()
    fs = data["findings"]
    assert sorted((o["signal"], o["idx"]) for o in rep.overlaps) == sorted(
        (f["signal"], f["idx"]) for f in fs if f["signal"] in OVERLAP_SIGNALS
    )
    # Uncertain receipts, the runs the bridge itself stopped (failed/timeout, /closing, /stalled), and a
    # configuration not applied (rejected/config).
    uncertain = [
        r for r in rep.receipts if r.state in UNCERTAIN or r.reason in ("timeout", "closing", "stalled", "config")
    ]
    got = [f for f in fs if f["kind"] == "receipt"]
    assert sorted((str(r.request), r.state, r.reason) for r in uncertain) == sorted(
        (str(f["request"]), f["detail"]["state"], f["detail"]["reason"]) for f in got
    )
    want: dict[str, dict[str, int]] = {}
    for r in rep.receipts:
        by = want.setdefault(r.state, {})
        by[r.reason or "-"] = by.get(r.reason or "-", 0) + 1
    assert data["summary"]["receipts"] == want
    assert data["summary"]["observations"] == rep.observations
    for f in fs:
        assert f["explanation"] and f["title"] and f["causes"], f
        assert f["slot"]["generation"] >= 1
        assert f["evidence"], f


def test_diagnose_agrees_with_replay_on_generated_transcripts(tmp_path: Path):
    """The chaotic transcripts of tools/reference/gen.py: reused ids, early releases, noise."""
    subprocess.run(
        [
            sys.executable,
            str(ROOT / "tools" / "reference" / "gen.py"),
            "--seed",
            "11",
            "--count",
            "150",
            "--out",
            str(tmp_path),
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )
    paths = sorted(tmp_path.glob("*.jsonl"))
    assert len(paths) == 150
    for path in paths:
        rep = replay(str(path))
        diag = diagnose(str(path), timeline=True)
        data = diag.to_json()
        fs = data["findings"]
        assert sorted((o["signal"], o["idx"]) for o in rep.overlaps) == sorted(
            (f["signal"], f["idx"]) for f in fs if f["signal"] in OVERLAP_SIGNALS
        ), path.name
        assert sorted(str(r.request) for r in rep.receipts if r.state in UNCERTAIN) == sorted(
            str(f["request"]) for f in fs if f["kind"] == "receipt"
        ), path.name
        assert sum(sum(v.values()) for v in data["summary"]["receipts"].values()) == len(rep.receipts), path.name
        assert all(f["explanation"] and f["evidence"] for f in fs), path.name
        format_text(diag)


def test_the_evidence_is_three_observations_before_and_two_after():
    f = one(findings(CORE / "o1_no_slot_held.jsonl"), "O1")
    obs = [e["idx"] for e in f["evidence"] if e["idx"] is not None]
    assert obs == [11, 12, 13, 14, 15, 16]
    focus = [e for e in f["evidence"] if e["focus"]]
    assert [e["idx"] for e in focus] == [14] and focus[0]["type"] == "agent_start"
    # the bridge's own entries between them are part of the story
    assert any(e["summary"] == "bridge released p1" for e in f["evidence"])
    assert BEFORE == 3


def test_evidence_names_responses_and_message_ends():
    f = one(findings(CORE / "ack_for_other_request.jsonl"), "O1")
    summaries = [e["summary"] for e in f["evidence"]]
    assert "response prompt id=p1 success=true disposition=started" in summaries
    f = one(findings(CORE / "classify_unrecognised_stop_reason.jsonl"), "receipt")
    assert any("message_end role=assistant stopReason=deferred" in e["summary"] for e in f["evidence"])


# --------------------------------------------------------------------------
# The wording, per fixture


def test_o1_no_slot_held():
    fs = findings(CORE / "o1_no_slot_held.jsonl")
    f = one(fs, "O1", idx=14, request="p1", run="run-2")
    says(
        f,
        "a run (run-2) started at observation 14 while no prompt was held",
        "p1",
        "something other than the bridge started it",
    )
    assert f["slot"]["held"] is False and f["slot"]["lastRequest"] == "p1" and f["slot"]["currentRun"] == "run-2"
    assert "seal.extensions" in f["causes"][0]["check"] or "records no seal" in f["causes"][0]["check"]
    assert any("unsealed" in n for n in f["notes"])
    o2 = one(fs, "O2", idx=27, run="run-2")
    says(o2, "run run-2 (started at #14", "settled at observation 27")
    assert o2["related"] == [f["n"]]


def test_o1_before_ack_and_a_stale_ack():
    f = one(findings(CORE / "o1_before_ack.jsonl"), "O1", idx=1, request="p1", run="run-1")
    says(f, "a run (run-1) started at observation 1 after p1 was sent but before its ack")
    assert f["slot"]["held"] and f["slot"]["ackIdx"] is None
    fs = findings(CORE / "ack_for_other_request.jsonl")
    f = one(fs, "O1", idx=15, request="p2", run="run-2")
    says(f, "(#14) acknowledges prompt p1, not p2")
    assert "stale ack" in f["causes"][0]["cause"]
    pending = one(fs, "receipt", request="p2")
    says(pending, "p2 was released", "never acked")


def test_o1_after_the_slots_run():
    f = one(findings(CORE / "o1_after_slot_run.jsonl"), "O1", idx=14, request="p1", run="run-2")
    says(f, "a second run (run-2) started at observation 14 while p1 was still held", "own run (run-1, settled at #13)")
    assert f["slot"]["run"] == "run-1" and f["slot"]["working"] is True


@pytest.mark.parametrize(
    "name, idx, phrases",
    [
        ("o2_no_slot_held", 14, ["an agent_settled at observation 14 settled nothing of ours", "no prompt was held"]),
        ("o2_before_ack", 1, ["observation 1 arrived after p1 was sent but before its ack"]),
        (
            "o2_second_settle_loose",
            14,
            ["a second agent_settled at observation 14 for p1's single ack", "already settled at #13"],
        ),
        ("o2_second_settle_run", 16, ["a second agent_settled at observation 16", "already settled at #4"]),
        ("o2_settle_not_slots_run", 12, ["run run-1 (started at #1", "settled at observation 12", "never p1's run"]),
        (
            "o2_slot_moved_on",
            17,
            ["p1's run (run-1) settled at observation 17", "after the bridge had already released p1"],
        ),
    ],
)
def test_o2_each_why_has_its_own_words(name: str, idx: int, phrases: list[str]):
    f = one(findings(CORE / f"{name}.jsonl"), "O2", idx=idx, request="p1")
    says(f, *phrases)
    assert f["title"] == f"O2: {f['detail']['why']}"


def test_o3_o4_o6():
    f = one(findings(CORE / "o3_settle_with_open_start.jsonl"), "O3", idx=12, request="p1", run="run-1")
    says(f, "agent_settled at observation 12", "run run-1 still had 1 agent_start(s) without agent_end")
    f = one(findings(CORE / "o4_settle_without_start.jsonl"), "O4", idx=2, request="p1")
    says(f, "p1 was acked at #1", "agent_settled at observation 2", "no agent_start and no failure message")
    f = one(findings(CORE / "o6_second_user_message.jsonl"), "O6", idx=13, request="p1", run="run-1")
    says(f, "a second user message started at observation 13 inside run run-1", "(the first, p1's, at #4)")


def test_o5_items_and_uncaused():
    f = one(findings(CORE / "o5_queue_update_items.jsonl"), "O5", idx=11, request="p1")
    says(
        f,
        "a queue_update with 2 queued item(s) at observation 11",
        "(steering 1, followUp 1)",
        "someone sent steer/follow_up or a queued prompt",
    )
    f = one(findings(CORE / "o5_uncaused_empty_queue_update.jsonl"), "O5", idx=8, request="p1")
    says(f, "an empty queue_update at observation 8 outside any clear window", "clearing list: clear_queue")
    assert findings(CORE / "o5_caused_empty_queue_update.jsonl") == []


def test_aborted_without_stop_signal_and_classify():
    fs = findings(CORE / "aborted_without_stop.jsonl")
    f = one(fs, "aborted-without-stop", idx=10, request="p1", run="run-1")
    says(f, "an assistant message ended 'aborted' at observation 10 in run run-1", "no stop of this controller")
    r = one(fs, "receipt", request="p1")
    says(r, "tainted by aborted-without-stop at #10")
    assert r["related"] == [f["n"]]
    r = one(findings(CORE / "classify_aborted_without_stop_link_cleared.jsonl"), "receipt", request="p1")
    says(
        r,
        "p1's run (run-1) settled at #13",
        "ended 'aborted'",
        "the bridge had sent stop s1",
        "An abort with no id (journal line 17) cleared the link",
    )


@pytest.mark.parametrize(
    "name, idx, words",
    [
        ("gap_malformed_json", 6, "malformed JSON"),
        ("gap_invalid_utf8", 6, "invalid UTF-8"),
        ("gap_oversize_line", 4, "an oversize line"),
        ("gap_json_array", 4, "JSON, but not an object"),
        ("gap_json_number", 4, "JSON, but not an object"),
    ],
)
def test_each_gap_kind(name: str, idx: int, words: str):
    fs = findings(CORE / f"{name}.jsonl")
    g = one(fs, "gap", idx=idx)
    says(g, f"observation {idx} was not a JSON object ({words}", "lines may be missing from here on")
    p1 = one(fs, "receipt", request="p1")
    says(p1, f"tainted by gap at #{idx}")
    p2 = one(fs, "receipt", request="p2")
    says(p2, "the engine was already unsealed (gap) when p2 was sent", f"see finding {g['n']}")
    assert p2["related"] == [g["n"]]


@pytest.mark.parametrize(
    "name, state, reason, phrases",
    [
        (
            "classify_ack_without_start",
            "delivery-unknown",
            "ack-without-start",
            ["p1 was acked at #1 and its run (run-1) settled at #11", "without ever showing p1's user message"],
        ),
        (
            "classify_failure_no_run",
            "delivery-unknown",
            "ack-without-start",
            ["failure message with no run and settled at #4"],
        ),
        (
            "classify_no_final_assistant_message",
            "outcome-unknown",
            "no-final-assistant-message",
            ["p1's run (run-1) settled at #8", "working at #4", "no assistant message ended"],
        ),
        (
            "classify_unrecognised_stop_reason",
            "outcome-unknown",
            "unrecognised-stop-reason",
            ["stopReason 'deferred'", "run (run-1)"],
        ),
        (
            "ends_mid_run",
            "pending",
            None,
            ["the transcript ends while p1 is still open", "acked at #1", "working since #4", "run run-1"],
        ),
        ("o2_slot_moved_on", "pending", None, ["p1 was released at t=0.058", "working since #4"]),
        ("o4_settle_without_start", "outcome-unknown", "overlap", ["tainted by O4 at #2"]),
        ("o2_settle_not_slots_run", "outcome-unknown", "overlap", ["tainted by O1 at #1, O2 at #12", "run (run-2)"]),
    ],
)
def test_uncertain_receipts(name: str, state: str, reason: str | None, phrases: list[str]):
    f = one(findings(CORE / f"{name}.jsonl"), "receipt", request="p1")
    assert (f["detail"]["state"], f["detail"]["reason"]) == (state, reason)
    says(f, *phrases)


# --------------------------------------------------------------------------
# Real Pi 1.6.0 recordings

PI = FIXTURES / "pi-1.6.0"


def test_real_extension_autorun_names_the_extension_in_the_header():
    fs = findings(PI / "extension_autorun.jsonl")
    f = one(fs, "O1", request="p1", run="run-2")
    says(f, f"a run (run-2) started at observation {f['idx']} while no prompt was held")
    assert "seal.extensions lists" in f["causes"][0]["check"] and "autorun.ts" in f["causes"][0]["check"]
    assert "matches the pin 1.6.0" in f["causes"][-1]["check"]


def test_real_second_prompt_while_streaming():
    fs = findings(PI / "refused_while_streaming.jsonl")
    second = one(fs, "second-prompt")
    says(second, "prompt raw-2 was written", "while p1 still held the slot", "its run run-1")
    assert second["request"] == "p1" and any("unsealed" in n for n in second["notes"])
    o2 = one(fs, "O2", request="raw-2", run="run-1")
    says(o2, "p1's run (run-1) settled at observation", "moved on to raw-2")
    assert o2["related"] == [second["n"]]
    r = one(fs, "receipt", request="p1")
    says(r, f"unsealed first by finding {second['n']}", "tainted by second-prompt at #")  # the receipt's own signal


def test_real_follow_up_delivery_and_handled_prompt():
    fs = findings(PI / "follow_up_unsealed.jsonl")
    # The first O5 is the follow_up's queue_update (its index moves when the recording's start-up does).
    items, empty = [f for f in fs if f["signal"] == "O5"]
    says(items, f"1 queued item(s) at observation {items['idx']}", "followUp 1")
    says(empty, "emptied its queue to deliver", f"queued earlier on this engine (finding {items['n']})")
    fs = findings(PI / "extension_dialog.jsonl")
    says(one(fs, "seal-check"), "command /pick from an extension is loaded")
    says(one(fs, "disposition", request="p2"), "'handled'")
    says(one(fs, "receipt", request="p2"), "never had a run of its own (its ack said 'handled')")


# --------------------------------------------------------------------------
# What only a live journal records


def _run(p: str, start: int, *, user: bool = True, stop: str = "stop") -> list[dict[str, Any]]:
    """The lines of one plain run, observation indices from ``start``."""
    lines: list[dict[str, Any]] = [{"type": "agent_start"}, {"type": "turn_start"}]
    if user:
        lines.append({"type": "message_start", "message": {"role": "user", "content": [{"type": "text", "text": p}]}})
    lines += [
        {
            "type": "message_end",
            "message": {"role": "assistant", "content": [{"type": "text", "text": "ok"}], "stopReason": stop},
        },
        {"type": "agent_end", "willRetry": False},
        {"type": "agent_settled", "aborted": False},
    ]
    return [{"recv": line, "i": start + k} for k, line in enumerate(lines)]


def _ack(p: str, i: int, disposition: str = "started") -> dict[str, Any]:
    return {
        "recv": {
            "type": "response",
            "id": p,
            "command": "prompt",
            "success": True,
            "data": {"disposition": disposition},
        },
        "i": i,
    }


def test_disposition_queued_and_handled(tmp_path: Path):
    entries = [
        {"note": {"event": "engine-start", "pid": 10, "generation": 1}},
        {"send": {"type": "prompt", "id": "p1", "message": "hi"}},
        _ack("p1", 1, "queued"),
        *_run("hi", 2),
        {"release": "p1"},
        {"exit": {"code": 0, "signal": None}},
        {"note": {"event": "engine-start", "pid": 11, "generation": 2}},
        {"send": {"type": "prompt", "id": "p2", "message": "/cmd"}},
        _ack("p2", 8, "handled"),
        {"receipt": {"request": "p2", "state": "outcome-unknown", "reason": "disposition"}},
        {"release": "p2"},
    ]
    fs = findings(write(tmp_path, "disp.jsonl", entries))
    q = one(fs, "disposition", request="p1", idx=1)
    says(q, "p1's ack at observation 1 said disposition 'queued'", "queued the prompt behind other work")
    h = one(fs, "disposition", request="p2", idx=8)
    says(h, "'handled'", "without a run")
    assert any("'/'" in c["check"] for c in h["causes"])
    r1 = one(fs, "receipt", request="p1")
    says(r1, "tainted by disposition at #1")
    r2 = one(fs, "receipt", request="p2")
    assert r2["detail"]["reason"] == "disposition" and r2["generation"] == 2


def test_seal_diagnostics_and_a_failed_seal_check(tmp_path: Path):
    header = {
        "engine": "pi",
        "pin": "1.6.0",
        "engine_version": "1.5.2",
        "seal": {"extensions": ["./ext.ts"], "flags": ["--no-extensions"]},
    }
    entries = [
        {"note": {"event": "engine-start", "pid": 10, "generation": 1}},
        {
            "note": {
                "event": "seal-check",
                "generation": 1,
                "problems": ["get_commands lists extension command /x"],
                "enforced": {},
            }
        },
        {
            "signal": {
                "signal": "seal-check",
                "problems": ["get_commands lists extension command /x"],
                "action": "warn",
                "generation": 1,
            }
        },
        {"send": {"type": "prompt", "id": "p1", "message": "hi"}},
        {"recv": {"type": "extension_error", "extensionPath": "./ext.ts", "error": "boom"}, "i": 1},
        {"recv": {"type": "extension_ui_request", "id": "ui-1", "method": "confirm", "title": "ok?"}, "i": 2},
        {"send": {"type": "extension_ui_response", "id": "ui-1", "cancelled": True}},
        _ack("p1", 3),
        *_run("hi", 4),
        {"release": "p1"},
    ]
    fs = findings(write(tmp_path, "seal.jsonl", entries, **header))
    sc = one(fs, "seal-check")
    says(sc, "generation 1", "get_commands lists extension command /x")
    assert any("'warn'" in n for n in sc["notes"])
    err = one(fs, "seal-diagnostic", idx=1)
    says(err, "an extension_error at observation 1 (boom)")
    ui = one(fs, "seal-diagnostic", idx=2)
    says(ui, "extension_ui_request (method confirm, id ui-1) at observation 2", "answered the dialog 'cancelled'")
    checks = " ".join(c["check"] for c in ui["causes"])
    assert "./ext.ts" in checks and "get_commands lists extension command /x" in checks
    version = [c for c in sc["causes"] if "pinned" in c["cause"]][0]
    assert "1.5.2 differs from the pin 1.6.0" in version["check"]


def test_a_refusing_seal_check_does_not_claim_another_engine_started(tmp_path: Path):
    """A refused engine may be the last one (a --model Pi does not offer takes the bridge down
    at once): the seal-check finding says what the setting did, not that another engine came
    (it said "and started another" of a journal with one engine start; a README trial)."""
    entries = [
        {"note": {"event": "engine-start", "pid": 10, "generation": 1}},
        {"note": {"event": "seal-check", "generation": 1, "problems": ["model nope is not offered"], "enforced": {}}},
        {
            "signal": {
                "signal": "seal-check",
                "problems": ["model nope is not offered"],
                "action": "refuse",
                "generation": 1,
            }
        },
        {"exit": {"code": 1, "signal": None, "generation": 1}},
        {"signal": {"signal": "engine-down", "why": "the engine's start-up check refused it", "generation": 1}},
    ]
    sc = one(findings(write(tmp_path, "refused.jsonl", entries, engine="pi")), "seal-check")
    notes = " ".join(sc["notes"])
    assert "'refuse'" in notes and "refused the engine" in notes and "started another" not in notes


def test_engine_exits_and_engine_exited_receipts(tmp_path: Path):
    entries = [
        {"note": {"event": "engine-start", "pid": 10, "generation": 1}},
        {"send": {"type": "prompt", "id": "p1", "message": "hi"}},
        _ack("p1", 1),
        {"recv": {"type": "agent_start"}, "i": 2},
        {"recv": {"type": "message_start", "message": {"role": "user", "content": "hi"}}, "i": 3},
        {"stderr": "Error: out of memory", "t": 1.0},
        {"stderr": "    at crash (x.js:1:1)", "t": 1.01},
        {"exit": {"code": 1, "signal": None}, "t": 1.02},
        {"note": {"event": "engine-start", "pid": 11, "generation": 2}},
        {"send": {"type": "prompt", "id": "p2", "message": "hi"}},
        {"exit": {"code": None, "signal": 9}, "t": 2.0},
        {"note": {"event": "engine-start", "pid": 12, "generation": 3}},
        {
            "signal": {
                "signal": "engine-down",
                "why": "3 engine failures in 60s; last: engine exited (code 1)",
                "generation": 3,
            }
        },
    ]
    fs = findings(write(tmp_path, "exit.jsonl", entries))
    e1 = one(fs, "engine-exit", generation=1)
    says(e1, "exited: code 1", "Error: out of memory")
    assert [s["text"] for s in e1["stderr"]] == ["Error: out of memory", "    at crash (x.js:1:1)"]
    r1 = one(fs, "receipt", request="p1")
    assert (r1["detail"]["state"], r1["detail"]["reason"]) == ("outcome-unknown", "engine-exited")
    says(r1, "the engine exited (code 1) at t=1.020 while p1's run (run-1) was working (since #3)")
    assert e1["n"] in r1["related"]
    assert "Error: out of memory" in r1["causes"][0]["check"]
    e2 = one(fs, "engine-exit", generation=2)
    says(e2, "killed by SIGKILL (signal 9)")
    r2 = one(fs, "receipt", request="p2")
    assert (r2["detail"]["state"], r2["detail"]["reason"]) == ("delivery-unknown", "engine-exited")
    says(r2, "before p2 was working (never acked)")
    down = one(fs, "engine-down")
    says(down, "3 engine failures in 60s")
    summary = diagnose(str(tmp_path / "exit.jsonl")).summary()
    assert summary["engine_starts"] == 3 and summary["engine_exits"] == {"count": 2, "abnormal": 2}
    assert summary["engine_down"] == 1


def test_recorded_receipts_no_ack_and_settle_timeout(tmp_path: Path):
    entries = [
        {"send": {"type": "prompt", "id": "p1", "message": "hi"}, "t": 0.0},
        {"receipt": {"request": "p1", "state": "delivery-unknown", "reason": "no-ack"}, "t": 30.0},
        {"release": "p1", "t": 30.0},
        {"send": {"type": "prompt", "id": "p2", "message": "hi"}},
        _ack("p2", 1),
        {"recv": {"type": "agent_start"}, "i": 2},
        {"recv": {"type": "message_start", "message": {"role": "user", "content": "hi"}}, "i": 3},
        {"send": {"type": "abort", "id": "stop-1"}},
        {"receipt": {"request": "p2", "state": "outcome-unknown", "reason": "settle-timeout", "stop": "stop-1"}},
        {"release": "p2"},
        {"receipt": {"request": "p3", "state": "rejected", "reason": "queue-full"}},
    ]
    fs = findings(write(tmp_path, "timeouts.jsonl", entries))
    says(one(fs, "receipt", request="p1"), "p1 was sent but no ack arrived")
    says(one(fs, "receipt", request="p2"), "stopped waiting for p2's run", "acked at #1", "working since #3")
    assert len([f for f in fs if f["kind"] == "receipt"]) == 2  # rejected is certain: no finding
    s = diagnose(str(tmp_path / "timeouts.jsonl")).summary()
    assert s["receipts"] == {
        "delivery-unknown": {"no-ack": 1},
        "outcome-unknown": {"settle-timeout": 1},
        "rejected": {"queue-full": 1},
    }
    assert s["prompts"] == {"sent": 2, "receipts": 3}


def test_a_live_journals_gap_signal_names_the_kind(tmp_path: Path):
    entries = [
        {"send": {"type": "prompt", "id": "p1", "message": "hi"}},
        _ack("p1", 1),
        {"recv_raw": '{"type":"message_update","delta":"caf"}', "i": 2},
        {"signal": {"signal": "gap", "idx": 2, "why": "invalid-utf8", "bytes": 40, "generation": 1}},
    ]
    fs = findings(write(tmp_path, "gap.jsonl", entries))
    g = one(fs, "gap", idx=2)
    says(g, "(invalid UTF-8, 40 bytes)")
    s = diagnose(str(tmp_path / "gap.jsonl")).summary()
    assert s["gaps"] == {"count": 1, "why": {"invalid-utf8": 1}}


# --------------------------------------------------------------------------
# Whose stop: the bridge's timeouts and closing stops, journal failures (SPEC section 5)


def _stopped(
    p: str, start: int, stop: str, *, by: str | None = None, why: str = "", t: float = 2.0
) -> list[dict[str, Any]]:
    """p's acked run, stopped mid-answer by ``stop``: the bridge's note first when ``by`` is given."""
    lines: list[dict[str, Any]] = [
        _ack(p, start),
        {"recv": {"type": "agent_start"}, "i": start + 1},
        {"recv": {"type": "message_start", "message": {"role": "user", "content": p}}, "i": start + 2},
        {"recv": {"type": "message_start", "message": {"role": "assistant", "content": []}}, "i": start + 3},
    ]
    if by is not None:
        lines.append({"note": {"event": "stop", "stop": stop, "request": p, "by": by, "why": why}, "t": t})
    lines += [
        {"send": {"type": "clear_queue", "id": f"{stop}:clear"}, "t": t},
        {"send": {"type": "abort", "id": stop}, "t": t},
    ]
    events = [
        {"type": "queue_update", "steering": [], "followUp": []},
        {"type": "response", "id": f"{stop}:clear", "command": "clear_queue", "success": True},
        {"type": "message_end", "message": {"role": "assistant", "content": [], "stopReason": "aborted"}},
        {"type": "agent_end", "willRetry": False},
        {"type": "agent_settled", "aborted": True},
    ]
    return lines + [{"recv": ev, "i": start + 4 + k, "t": t + 0.01} for k, ev in enumerate(events)]


def stop_journal(
    tmp_path: Path,
    reason: str,
    *,
    by: str | None,
    why: str = "",
    before: list[dict[str, Any]] | None = None,
    closed: bool = True,
) -> Path:
    """A live journal: one prompt p1 whose run is stopped by stop-2 (see _stopped)."""
    entries = [
        {"note": {"event": "engine-start", "pid": 10, "generation": 1}, "t": 0.0},
        {"send": {"type": "prompt", "id": "p1", "message": "hi"}, "t": 0.01},
        *(before or []),
        *_stopped("p1", 1, "stop-2", by=by, why=why),
        {"receipt": {"request": "p1", "state": "failed", "reason": reason, "stop": "stop-2"}, "t": 2.1},
        {"release": "p1", "t": 2.1},
        {"exit": {"code": 0, "signal": None}, "t": 2.2},
    ]
    if closed:
        entries.append({"note": {"event": "bridge-closed", "receipts": 1}, "t": 2.3})
    return write(tmp_path, f"{reason}.jsonl", entries, clearing=["clear_queue"], created="2026-11-30T10:00:00+00:00")


def test_timeout_receipt_names_the_bridges_stop(tmp_path: Path):
    path = stop_journal(tmp_path, "timeout", by="timeout", why="the prompt's timeout (2 s) passed")
    diag = diagnose(str(path))
    fs = diag.to_json()["findings"]
    assert [f["signal"] for f in fs] == ["receipt"]
    f = one(fs, "receipt", request="p1")
    assert (f["detail"]["state"], f["detail"]["reason"], f["detail"]["stop"]) == ("failed", "timeout", "stop-2")
    assert "stopped by the bridge, not the controller" in f["title"]
    says(
        f,
        "the bridge itself stopped p1's run (run-1), not the controller",
        "its own stop stop-2 (journal line",
        "t=2.000",
        "because the prompt's timeout (2 s) passed",
        "settled at #9",
    )
    assert 'raise --timeout (or the prompt\'s "timeout")' in f["causes"][0]["check"]
    assert "--drain-timeout" not in f["causes"][0]["check"]
    assert diag.summary()["receipts"] == {"failed": {"timeout": 1}}
    assert [(r.state, r.reason) for r in replay(str(path)).receipts] == [("failed", "timeout")]  # one decision
    assert diag.summary()["journal"] == {"live": True, "closed": True, "failed": None}
    lead = f["evidence"][0]  # the stop's note leads the evidence, however long ago it was
    assert lead["summary"] == "note: the bridge's stop stop-2 for p1, by timeout: the prompt's timeout (2 s) passed"
    assert lead["line"] < f["evidence"][1]["line"] and not lead["focus"]


def test_drain_timeout_receipt_says_raise_drain_timeout(tmp_path: Path):
    closing = [{"note": {"event": "closing", "why": "drain-timeout", "detail": "--drain-timeout 5 s"}, "t": 1.9}]
    path = stop_journal(
        tmp_path, "timeout", by="timeout", why="the drain bound (--drain-timeout 5 s) passed", before=closing
    )
    f = one(findings(path), "receipt", request="p1")
    says(f, "because the drain bound (--drain-timeout 5 s) passed")
    assert "raise --drain-timeout" in f["causes"][0]["check"]


def test_closing_receipt_names_what_closed_the_bridge(tmp_path: Path):
    closing = [{"note": {"event": "closing", "why": "signal", "detail": "SIGTERM"}, "t": 1.9}]
    path = stop_journal(tmp_path, "closing", by="closing", why="the bridge is closing (SIGTERM)", before=closing)
    diag = diagnose(str(path))
    f = one(diag.to_json()["findings"], "receipt", request="p1")
    assert (f["detail"]["state"], f["detail"]["reason"]) == ("failed", "closing")
    says(
        f,
        "the bridge itself stopped p1's run (run-1), not the controller",
        "stop stop-2",
        "because the bridge is closing (SIGTERM)",
        "The bridge began closing at t=1.900",
        "because it got a signal (SIGTERM)",
    )
    assert "what sent it" in f["causes"][0]["check"] and "shutdown command" in f["causes"][0]["check"]
    assert diag.summary()["receipts"] == {"failed": {"closing": 1}}


def test_a_closing_stop_without_a_closing_note_says_so(tmp_path: Path):
    path = stop_journal(tmp_path, "closing", by="closing", why="the bridge is closing (close)")
    f = one(findings(path), "receipt", request="p1")
    says(f, "because the bridge is closing (close)", "The journal has no closing note saying why the bridge closed.")


def test_a_stop_without_a_note_is_the_controllers(tmp_path: Path):
    for by in (None, "controller"):
        path = stop_journal(tmp_path, "interrupted", by=by, why="the controller's stop")
        diag = diagnose(str(path))
        assert diag.summary()["receipts"] == {"failed": {"interrupted": 1}}, by
        assert diag.to_json()["findings"] == [], by  # failed/interrupted: as certain as before


NO_SPACE = "[Errno 28] No space left on device"


def failed_journal(tmp_path: Path) -> Path:
    """The journal fails (its note made it), the bridge closes, stops p1, and its last line is cut."""
    failing = [
        {"note": {"event": "journal-failed", "error": NO_SPACE}, "t": 1.8},
        {"note": {"event": "closing", "why": "journal"}, "t": 1.8},
    ]
    path = stop_journal(
        tmp_path,
        "closing",
        by="closing",
        why="the bridge is closing (its journal failed)",
        before=failing,
        closed=False,
    )
    with path.open("a") as fh:
        fh.write('{"note":{"event":"bridge-clo')
    return path


def test_journal_failed_note_and_a_journal_cut_short(tmp_path: Path):
    error = NO_SPACE
    diag = diagnose(str(failed_journal(tmp_path)))
    fs = diag.to_json()["findings"]
    jf = one(fs, "journal-failed")
    assert jf["kind"] == "journal" and jf["title"] == "journal failed: the bridge could not write its journal"
    says(jf, "could not write its journal at t=1.800: [Errno 28] No space left on device", "costs no receipt")
    assert jf["causes"][0]["cause"] == "the disk the journal is on is full"
    rc = one(fs, "receipt", request="p1")
    says(rc, "because its journal could not be written ([Errno 28] No space left on device)")
    assert rc["related"] == [jf["n"]] and "df -h" in rc["causes"][0]["check"]
    end = one(fs, "journal-ends-early")
    assert end["kind"] == "journal" and end["related"] == [jf["n"]]
    says(
        end,
        "the journal ends before the bridge closed: the bridge was killed, or its journal could not be "
        "written (a full disk, an I/O error); receipts after this point reached the controller only.",
        "Its last line was cut off mid-write.",
        f"(finding {jf['n']}): {error}",
    )
    assert [f["signal"] for f in fs] == ["journal-failed", "receipt", "journal-ends-early"]
    s = diag.summary()
    assert s["journal"] == {"live": True, "closed": False, "failed": error} and s["truncated"] is True
    assert s["signals"] == {"journal-failed": 1, "journal-ends-early": 1}
    text = format_text(diag)
    assert "journal ends before the bridge closed (no bridge-closed note)" in text
    assert f"  journal: ends before the bridge closed; could not be written: {error}" in text


def test_journal_failed_with_an_io_error_names_the_disk(tmp_path: Path):
    entries = [
        {"note": {"event": "engine-start", "pid": 10, "generation": 1}, "t": 0.0},
        {"note": {"event": "journal-failed", "error": "[Errno 5] Input/output error"}, "t": 0.5},
    ]
    fs = findings(write(tmp_path, "eio.jsonl", entries))
    jf = one(fs, "journal-failed")
    says(jf, "at t=0.500: [Errno 5] Input/output error")
    assert "an I/O error" in jf["causes"][0]["cause"] and "dmesg" in jf["causes"][0]["check"]
    end = one(fs, "journal-ends-early")
    assert end["related"] == [jf["n"]] and "an I/O error" in end["causes"][0]["cause"]


def test_a_live_journal_without_bridge_closed_ends_early(tmp_path: Path):
    entries = [
        {"note": {"event": "engine-start", "pid": 10, "generation": 1}, "t": 0.0},
        {"send": {"type": "prompt", "id": "p1", "message": "hi"}, "t": 0.01},
        _ack("p1", 1),
        {"recv": {"type": "agent_start"}, "i": 2, "t": 0.4},
    ]
    fs = findings(write(tmp_path, "killed.jsonl", entries, created="2026-11-30T10:00:00+00:00"))
    end = one(fs, "journal-ends-early")
    says(end, "the journal ends before the bridge closed", "1 prompt(s) sent have no receipt in it")
    assert "cut off" not in end["explanation"] and end["related"] == []
    assert end["t"] == 0.4 and end["idx"] is None and end["evidence"]
    assert "the bridge was killed" in end["causes"][0]["cause"]
    assert "t=0.400 after the header's created time 2026-11-30T10:00:00+00:00" in end["causes"][0]["check"]
    pending = one(fs, "receipt", request="p1")
    assert pending["detail"]["state"] == "pending" and pending["related"] == [end["n"]]


def test_fixtures_are_not_journals_and_recorded_journals_closed():
    for path in ALL_CORE:
        s = diagnose(str(path)).summary()
        assert s["journal"] == {"live": False, "closed": False, "failed": None}, path.name
        assert "journal-ends-early" not in s["signals"], path.name
    for path in REAL:
        s = diagnose(str(path)).summary()
        assert s["journal"] == {"live": True, "closed": True, "failed": None}, path.name
        assert "journal-ends-early" not in s["signals"], path.name


def test_bridge_stops_in_json_and_text(tmp_path: Path):
    path = stop_journal(tmp_path, "timeout", by="timeout", why="the prompt's timeout (2 s) passed")
    p = bridge("diagnose", "--json", str(path))
    assert p.returncode == 0, p.stderr
    data = json.loads(p.stdout)
    (f,) = data["findings"]
    assert (f["kind"], f["signal"], f["request"]) == ("receipt", "receipt", "p1")
    assert (f["detail"]["reason"], f["detail"]["stop"]) == ("timeout", "stop-2")
    assert data["summary"]["receipts"] == {"failed": {"timeout": 1}}
    p = bridge("diagnose", str(path))
    assert "[1] receipt: p1: failed (timeout): stopped by the bridge, not the controller" in p.stdout
    assert "journal: the bridge closed cleanly" in p.stdout
    assert "note: the bridge's stop stop-2 for p1, by timeout: the prompt's timeout (2 s) passed" in p.stdout


# --------------------------------------------------------------------------
# The command line


def test_text_report_and_summary():
    p = bridge("diagnose", str(CORE / "o2_settle_not_slots_run.jsonl"))
    assert p.returncode == 0, p.stderr
    out = p.stdout
    assert "[1] O1: a run started before the prompt's ack" in out
    assert "What happened: a run (run-1) started at observation 1" in out
    assert "Slot right after it: p1 held, not acked" in out
    assert re.search(r">> L\d+ +#1 ", out)
    assert "Likely causes, and what to check:" in out
    assert "Summary\n  prompts: 1 sent, 1 receipt(s)\n  receipts: outcome-unknown 1 (overlap 1)" in out
    assert "signals: O1 1, O2 1" in out and "gaps: 0" in out and "engine: 0 start(s)" in out


def test_json_has_stable_keys():
    p = bridge("diagnose", "--json", str(CORE / "gap_malformed_json.jsonl"))
    assert p.returncode == 0, p.stderr
    data = json.loads(p.stdout)
    assert list(data) == ["findings", "summary"]
    assert list(data["findings"][0]) == [
        "n",
        "kind",
        "signal",
        "title",
        "explanation",
        "idx",
        "t",
        "line",
        "request",
        "run",
        "generation",
        "detail",
        "slot",
        "slotWords",
        "evidence",
        "causes",
        "stderr",
        "notes",
        "related",
    ]
    assert list(data["findings"][0]["evidence"][0]) == ["line", "entry", "idx", "t", "type", "summary", "focus", "raw"]
    assert list(data["summary"]) == [
        "file",
        "engine",
        "entries",
        "observations",
        "truncated",
        "journal",
        "prompts",
        "receipts",
        "usage",
        "dialogs",
        "signals",
        "gaps",
        "engine_starts",
        "engine_exits",
        "engine_down",
        "findings",
        "conversation",
    ]
    assert data["summary"]["gaps"] == {"count": 1, "why": {"malformed": 1}}
    assert data["summary"]["signals"] == {"gap": 1}
    assert data["summary"]["dialogs"] == {}


def test_a_clean_transcript_has_no_findings():
    p = bridge("diagnose", str(CORE / "two_prompts_released_between.jsonl"))
    assert p.returncode == 0
    assert "0 finding(s)" in p.stdout and "receipts: finished 2" in p.stdout


def test_an_invalid_transcript_exits_2_naming_file_and_line(tmp_path: Path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"transcript":"pi-bridge","version":1}\n{"wat":1}\n')
    p = bridge("diagnose", str(bad))
    assert p.returncode == 2
    assert f'bridge diagnose: {bad}:2: unknown entry kind "wat"' in p.stderr
    p = bridge("diagnose", str(tmp_path / "missing.jsonl"))
    assert p.returncode == 2 and "cannot open" in p.stderr
    newer = tmp_path / "newer.jsonl"
    newer.write_text('{"transcript":"pi-bridge","version":9}\n')
    p = bridge("diagnose", "--json", str(newer))
    assert p.returncode == 2 and f"{newer}:1:" in p.stderr and "newer" in p.stderr


def test_a_cut_off_last_line_is_reported(tmp_path: Path):
    text = (CORE / "ends_mid_run.jsonl").read_text()
    cut = tmp_path / "cut.jsonl"
    cut.write_text(text + '{"recv":{"type":"agent_e')
    diag = diagnose(str(cut))
    assert diag.summary()["truncated"] is True
    f = one(diag.to_json()["findings"], "receipt", request="p1")
    says(f, "the journal's last line was cut off")
    assert "the last line was cut off" in format_text(diag)
    # A prompt the journal does not finish has no receipt: counted as pending, not as one.
    assert "  prompts: 1 sent, 0 receipt(s), 1 pending (no receipt in the journal)\n" in format_text(diag)


def test_progress_is_shown_on_a_terminal_only(tmp_path: Path):
    import pty

    path = CORE / "o1_no_slot_held.jsonl"
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "bridge", "diagnose", str(path)], stdout=subprocess.DEVNULL, stderr=slave, cwd=ROOT
    )
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 4096)
        except OSError:
            break
        if not data:
            break
        chunks.append(data)
    proc.wait(timeout=60)
    os.close(master)
    err = b"".join(chunks).decode()
    assert proc.returncode == 0
    size = path.stat().st_size / 1e6
    assert f"/ {size:,.1f} MB" in err and "(100%)" in err
    p = bridge("diagnose", str(path))  # stderr is a pipe: no progress
    assert "MB" not in p.stderr


# --------------------------------------------------------------------------
# The HTML page, in a real headless browser

CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--virtual-time-budget=2000",
]


def chromium() -> str:
    exe = shutil.which("chromium")
    if exe is None:
        pytest.fail(
            "chromium is not installed: run tools/setup/setup_chromium (apt-get install chromium) "
            "to test `bridge diagnose --html` in a real browser"
        )
    return exe


def render(pages: list[Path], tmp_path: Path, fragment: str = "") -> list[str]:
    """Each page's DOM after its scripts ran (one headless Chromium per page, in parallel)."""
    exe = chromium()
    procs = []
    for n, page in enumerate(pages):
        profile = tmp_path / f"profile-{n}"
        procs.append(
            subprocess.Popen(
                [exe, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "--dump-dom", page.as_uri() + fragment],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    doms = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err[-2000:]
        doms.append(out)
    return doms


def body_attrs(dom: str) -> dict[str, str]:
    m = re.search(r"<body([^>]*)>", dom)
    assert m, dom[:500]
    return dict(re.findall(r'([\w-]+)="([^"]*)"', m.group(1)))


HOSTILE = '<img src=x onerror="document.body.dataset.pwned=1"></script><script>document.body.dataset.pwned=2</script>'


def hostile_journal(tmp_path: Path) -> Path:
    """Engine output that tries to inject HTML and script, plus every lane kind."""
    entries = [
        {"note": {"event": "engine-start", "pid": 10, "generation": 1}},
        {"send": {"type": "prompt", "id": "p<b>1</b>", "message": "hi"}},
        _ack("p<b>1</b>", 1),
        {"recv": {"type": "agent_start"}, "i": 2},
        {"recv": {"type": "message_start", "message": {"role": "user", "content": HOSTILE}}, "i": 3},
        {"recv_raw": HOSTILE, "i": 4},
        {"recv": {"type": "extension_error", "error": HOSTILE}, "i": 5},
        {"stderr": HOSTILE},
        {"exit": {"code": 1, "signal": None}},
        {"note": {"event": "engine-start", "pid": 11, "generation": 2}},
        {"send": {"type": "prompt", "id": "p2", "message": "hi"}},
        _ack("p2", 6),
        *_run("hi", 7),
        {"release": "p2"},
        {"recv": {"type": "agent_start"}, "i": 13},
        {"recv": {"type": "agent_settled", "aborted": False}, "i": 14},
    ]
    return write(tmp_path, "hostile.jsonl", entries, engine="<script>alert(1)</script>")


def test_html_renders_in_headless_chromium(tmp_path: Path):
    sources = [
        CORE / "o1_no_slot_held.jsonl",
        CORE / "gap_oversize_line.jsonl",
        CORE / "two_prompts_released_between.jsonl",
        failed_journal(tmp_path),
        hostile_journal(tmp_path),
    ]
    pages = []
    for n, src in enumerate(sources):
        out = tmp_path / f"page-{n}.html"
        p = bridge("diagnose", "--html", str(out), str(src))
        assert p.returncode == 0, p.stderr
        html = out.read_text()
        # self-contained: nothing fetched from anywhere
        assert not re.search(r"<(link|img|iframe|object|embed)\b", html, re.I)
        # (engine text is in the cards too, escaped: only a real tag could fetch)
        assert not re.search(r"<[^>]*\bsrc\s*=", html.split('<script type="application/json"')[0], re.I)
        assert "<img" not in html and "</script><script>" not in html.replace("</script>\n<script>", "")
        pages.append(out)
    doms = render(pages, tmp_path)
    for src, dom in zip(sources, doms):
        diag = diagnose(str(src), timeline=True)
        tl = diag.timeline
        attrs = body_attrs(dom)
        assert attrs.get("data-ok") == "1", (src.name, attrs.get("data-errors"))
        assert attrs.get("data-errors") == ""
        assert int(attrs["data-markers"]) == len(diag.findings)
        assert int(attrs["data-slot-lanes"]) == len(tl.prompts) == diag.summary()["prompts"]["receipts"]
        assert int(attrs["data-run-lanes"]) == len(tl.runs)
        assert int(attrs["data-ticks"]) == diag.driver.session.observations
        assert dom.count('class="marker finding') == len(diag.findings)  # the first one also "selected"
        assert "pwned" not in attrs
    hostile = doms[-1]
    assert "<img" not in hostile and "<b>1</b>" not in hostile
    assert len(body_attrs(hostile)) and int(body_attrs(hostile)["data-run-lanes"]) == 3


def test_html_details_show_the_raw_line_escaped(tmp_path: Path):
    src = hostile_journal(tmp_path)
    out = tmp_path / "hostile.html"
    assert bridge("diagnose", "--html", str(out), str(src)).returncode == 0
    gap = one(findings(src), "gap", idx=4)
    (tick,) = render([out], tmp_path, "#tick-4")
    (finding,) = render([out], tmp_path, f"#finding-{gap['n']}")
    for dom in (tick, finding):
        attrs = body_attrs(dom)
        assert attrs["data-ok"] == "1" and "pwned" not in attrs
        detail = dom.split('id="detail"', 1)[1].split('id="findings"', 1)[0]
        assert "&lt;img src=x onerror=" in detail  # shown as text
        assert "<img" not in detail
    assert "observation #4" in tick


# --------------------------------------------------------------------------
# A large journal: streamed, memory bounded

_SEND = b'{"send":{"type":"prompt","id":"p%d","message":"please summarise section %d"},"t":%d.1}\n'
_REPLY = ("The section explains how the bridge settles each prompt. " * 16).strip()


def _run_template() -> bytes:
    usage = {
        "input": 412,
        "output": 96,
        "cacheRead": 0,
        "cacheWrite": 0,
        "totalTokens": 508,
        "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "total": 0},
    }
    user = {"role": "user", "content": [{"type": "text", "text": "please summarise section %d"}], "timestamp": 1}
    assistant = {
        "role": "assistant",
        "content": [{"type": "text", "text": _REPLY}],
        "api": "openai-completions",
        "provider": "scripted",
        "model": "scripted-1",
        "usage": usage,
        "stopReason": "stop",
        "timestamp": 2,
    }
    events: list[Any] = [
        {"id": "p%d", "type": "response", "command": "prompt", "success": True, "data": {"disposition": "started"}},
        {"type": "agent_start"},
        {"type": "turn_start"},
        {"type": "message_start", "message": user},
        {"type": "message_end", "message": user},
        {"type": "message_start", "message": {**assistant, "content": []}},
        *[{"type": "message_update", "elided": 251} for _ in range(8)],
        {"type": "message_end", "message": assistant},
        {"type": "turn_end", "message": assistant, "toolResults": []},
        {"type": "agent_end", "messages": [user, assistant], "willRetry": False},
        {"type": "agent_settled", "aborted": False},
    ]
    out = []
    for ev in events:
        line = json.dumps({"recv": ev}, separators=(",", ":"))
        out.append(line[:-1] + ',"i":%d,"t":%d.2}\n')
    receipt = {"request": "p%d", "state": "finished", "reason": None, "run": "run-%d", "ackIdx": "ACK", "signals": []}
    out.append(json.dumps({"receipt": receipt}, separators=(",", ":")).replace('"ACK"', "%d") + "\n")
    out.append('{"release":"p%d","t":%d.3}\n')
    return "".join(out).replace("%d", "\x00").replace("%", "%%").replace("\x00", "%d").encode()


def write_big_journal(path: Path | str, target: int) -> dict[str, int]:
    """A live-journal-shaped file of about ``target`` bytes: plain runs, a few signals.

    Each plain run is one template filled by ``%`` (fast: ~1 s per 100 MB). Four
    runs are special: two get a foreign queue_update (O5), one a non-JSON line (a
    gap), one is followed by a run nobody asked for (O1, then O2); after each the
    engine is recycled (an exit, a new engine-start), as the live bridge does.
    """
    template = _run_template()
    pieces = template.split(b"%d")[:-1]
    # What each %d is: ("i", k) the k-th observation of the run, or a name.
    fills: list[tuple[str, int]] = []
    k = 0
    for piece in pieces:
        if piece.endswith(b'"i":'):
            k += 1
            fills.append(("i", k))
        elif piece.endswith(b',"ackIdx":'):
            fills.append(("i", 1))
        elif piece.endswith(b'"run":"run-'):
            fills.append(("run", 0))
        elif piece.endswith(b'"t":'):
            fills.append(("t", 0))
        else:
            fills.append(("p", 0))
    n_obs = k
    sample = _SEND % (1, 1, 1) + template % tuple(1 for _ in fills)
    total_runs = max(10, target // len(sample))
    special = {total_runs * n // 5: kind for n, kind in enumerate(("O5", "gap", "O1", "O5"), start=1)}
    prompts = obs = gen = run_no = written = 0
    signals = {"O5": 0, "gap": 0, "O1": 0}
    with open(path, "wb", buffering=1 << 22) as fh:

        def put(data: bytes) -> None:
            nonlocal written
            fh.write(data)
            written += len(data)

        def restart() -> None:
            nonlocal gen, run_no
            if gen:
                put(b'{"exit":{"code":0,"signal":null},"t":%d.5}\n' % prompts)
            gen += 1
            run_no = 0
            put(b'{"note":{"event":"engine-start","pid":%d,"generation":%d},"t":%d.6}\n' % (1000 + gen, gen, prompts))

        put(b'{"transcript":"pi-bridge","version":1,"clearing":["clear_queue"],"engine":"generated"}\n')
        restart()
        while written < target:
            prompts += 1
            run_no += 1
            named = {"run": run_no, "t": prompts, "p": prompts}
            values = tuple(obs + n if what == "i" else named[what] for what, n in fills)
            data = _SEND % (prompts, prompts, prompts) + template % values
            obs += n_obs
            kind = special.get(prompts)
            if kind in ("O5", "gap"):
                extra = (
                    b'{"recv":{"type":"queue_update","steering":["x"],"followUp":[]},"i":%d}\n' % obs
                    if kind == "O5"
                    else b'{"recv_raw":"debug: not json","i":%d}\n' % obs
                )
                cut = data.index(b'{"recv":{"type":"agent_settled"')
                tail = data[cut:].replace(b'"i":%d,' % obs, b'"i":%d,' % (obs + 1), 1)
                data = data[:cut] + extra + tail
                obs += 1
            elif kind == "O1":
                data += (
                    b'{"recv":{"type":"agent_start"},"i":%d}\n{"recv":{"type":"agent_end"},"i":%d}\n'
                    b'{"recv":{"type":"agent_settled","aborted":false},"i":%d}\n' % (obs + 1, obs + 2, obs + 3)
                )
                obs += 3
            put(data)
            if kind is not None:
                signals[kind] += 1
                restart()
    return {"prompts": prompts, "observations": obs, "generations": gen, **signals}


_MEASURE = r"""
import gc, json, sys, time
import bridge.readers.diagnose as d
from bridge.cli import build_parser

def status_kb(key):
    # From /proc/self/status: VmRSS, the current resident set (the baseline), and VmHWM, the
    # peak of this process image. Not ru_maxrss: Linux carries that across exec, so it held
    # the pytest worker's own peak when it spawned this (255 MB "growth" seen in CI after a
    # memory-heavy test ran in the same worker).
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    raise RuntimeError(key + " not in /proc/self/status")

gc.collect()
base = status_kb("VmRSS")
t0 = time.monotonic()
diag = d.diagnose(sys.argv[1])
text = d.format_text(diag)
out = json.dumps(diag.to_json())
peak = status_kb("VmHWM")
print(json.dumps({"base_kb": base, "peak_kb": peak, "seconds": time.monotonic() - t0,
                  "summary": diag.summary()}))
"""


def test_a_200_mb_journal_streams_in_bounded_memory(tmp_path: Path):
    path = tmp_path / "big.jsonl"
    t0 = time.monotonic()
    info = write_big_journal(path, 200_000_000)
    made = time.monotonic() - t0
    size = path.stat().st_size
    assert size >= 200_000_000
    p = subprocess.run(
        [sys.executable, "-c", _MEASURE, str(path)], capture_output=True, text=True, timeout=300, cwd=ROOT
    )
    assert p.returncode == 0, p.stderr[-3000:]
    got = json.loads(p.stdout)
    growth_mb = (got["peak_kb"] - got["base_kb"]) / 1024
    s = got["summary"]
    print(
        f"\n{size / 1e6:.0f} MB, {info['prompts']} prompts, {s['observations']} observations: written in "
        f"{made:.1f} s, diagnosed in {got['seconds']:.1f} s, peak RSS growth {growth_mb:.1f} MB"
    )
    # ~5 MB (2026-12-01; the 37-74 MB measured before were ru_maxrss, which carried the
    # spawning worker's own peak); a diagnoser that kept the journal would hold its 200 MB.
    assert growth_mb < 100, got
    assert s["observations"] == info["observations"]
    assert s["prompts"]["sent"] == info["prompts"]
    assert s["signals"].get("O5") == info["O5"] and s["signals"].get("gap") == info["gap"]
    assert s["signals"].get("O1") == info["O1"] and s["signals"].get("O2") == info["O1"]
    assert s["receipts"]["finished"]["-"] == info["prompts"] - info["O5"] - info["gap"]
    assert s["engine_starts"] == info["generations"]


def test_html_report_is_as_private_as_its_journal_and_never_follows_a_symlink(tmp_path: Path):
    import os

    src = FIXTURES / "core" / "o1_no_slot_held.jsonl"
    out = tmp_path / "r.html"
    assert bridge("diagnose", "--html", str(out), str(src)).returncode == 0
    assert (os.stat(out).st_mode & 0o777) == 0o600
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    link = tmp_path / "link.html"
    link.symlink_to(victim)
    assert bridge("diagnose", "--html", str(link), str(src)).returncode == 0
    assert victim.read_text() == "keep me"  # the link was replaced, not written through
    assert not link.is_symlink() and (os.stat(link).st_mode & 0o777) == 0o600
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".diagnose-")] == []


def test_html_report_never_replaces_what_is_not_a_file(tmp_path: Path):
    """``--html`` onto something that is not a regular file (a FIFO here; /dev/full or
    /dev/stdout for a user) is one line and exit 2, and the thing is left as it was: it was
    renamed over -- run as root, ``--html /dev/full`` replaced the device node with a regular
    file and said "timeline written" (a new-user trial)."""
    import stat

    src = FIXTURES / "core" / "o1_no_slot_held.jsonl"
    fifo = tmp_path / "pipe.html"
    os.mkfifo(fifo)
    p = bridge("diagnose", "--html", str(fifo), str(src))
    assert p.returncode == 2, (p.returncode, p.stderr)
    assert p.stderr.strip().splitlines() == [f"bridge diagnose: cannot write {fifo}: not a regular file"], p.stderr
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert [q.name for q in tmp_path.iterdir() if q.name.startswith(".diagnose-")] == []


def test_html_report_never_overwrites_the_journal_it_reads(tmp_path: Path):
    """``bridge diagnose --html J J`` (a slip of the fingers): the journal -- the only
    evidence -- was replaced by the page, and the command said "timeline written". Now it is
    one line and exit 2, and the journal is left as it was."""
    journal = tmp_path / "j.jsonl"
    journal.write_bytes((FIXTURES / "core" / "o1_no_slot_held.jsonl").read_bytes())
    before = journal.read_bytes()
    p = bridge("diagnose", "--html", str(journal), str(journal))
    assert p.returncode == 2, (p.returncode, p.stderr)
    assert p.stderr.strip().splitlines() == [
        f"bridge diagnose: --html {journal} is the journal being read: give the page another path"
    ], p.stderr
    assert journal.read_bytes() == before


def test_wording_is_true_when_no_prompt_is_held_and_never_a_python_repr(tmp_path: Path):
    text = bridge("diagnose", str(FIXTURES / "core" / "o1_no_slot_held.jsonl")).stdout
    assert "no prompt was held, so no receipt is tainted" in text
    assert "the held prompt None" not in text and "engine null" not in text
    assert "no sign yet that the seal broke" in text or "unsealed" in text
    bad = tmp_path / "v.jsonl"
    bad.write_text('{"transcript":"pi-bridge","version":true}\n')
    p = bridge("diagnose", str(bad))
    assert p.returncode == 2 and "(got true)" in p.stderr and "True" not in p.stderr
