"""``bridge replay --check`` and diagnose's ``contradiction`` findings: a journal whose recorded
receipts are not what its evidence gives, or whose responses answer commands it never sent, is
named by prompt and observation; every journal the project recorded is intact.

The edited journals are made the way the issue found them: the bridge's ``clear_queue``/``abort``
for a stop deleted from a real Pi journal; a give-up receipt changed by hand in a journal the
live bridge writes here (the fake engine never acks); a receipt added for a prompt never sent.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bridge.readers.check import check
from tests.conftest import FIXTURES, ROOT
from tests.helpers_live import fake_engine_argv

REAL = FIXTURES / "pi-1.6.0" / "stopped_mid_stream.jsonl"


def bridge(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bridge", *args], cwd=ROOT, capture_output=True, text=True, timeout=120
    )


def lines_of(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def write(path: Path, entries: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(e) + "\n" for e in entries))
    return path


def without_the_stops_sends(tmp_path: Path) -> tuple[Path, dict[str, int]]:
    """The real journal with the bridge's clear_queue and abort sends deleted; and the observation
    index of each response that now answers nothing, by its id."""
    entries = [e for e in lines_of(REAL) if not ("send" in e and e["send"].get("type") in ("clear_queue", "abort"))]
    answers = {
        e["recv"]["id"]: e["i"]
        for e in entries
        if "recv" in e and e["recv"].get("type") == "response" and str(e["recv"].get("id")).startswith("stop-")
    }
    return write(tmp_path / "edited.jsonl", entries), answers


@pytest.mark.parametrize("path", sorted(FIXTURES.rglob("*.jsonl")), ids=lambda p: str(p.relative_to(FIXTURES)))
def test_every_recorded_journal_and_fixture_is_intact(path: Path) -> None:
    assert check(str(path)) == []


def test_a_real_journal_with_its_stop_deleted_names_the_prompt_and_the_observations(tmp_path: Path) -> None:
    edited, answers = without_the_stops_sends(tmp_path)
    assert set(answers) == {"stop-1", "stop-1:clear"}
    found = check(str(edited))
    differs = [c for c in found if c.kind == "receipt-differs"]
    assert [c.request for c in differs] == ["p1"]
    assert "records failed (interrupted)" in differs[0].words and "gives outcome-unknown (overlap)" in differs[0].words
    unsent = sorted((c.idx, c.request) for c in found if c.kind == "answer-to-unsent")
    assert unsent == sorted((i, "p1") for i in answers.values())

    done = bridge("replay", "--check", str(edited))
    assert done.returncode == 1, done.stdout + done.stderr
    assert "p1" in done.stdout and f"#{answers['stop-1']}" in done.stdout

    original = bridge("replay", "--check", str(REAL))
    assert original.returncode == 0, original.stdout + original.stderr
    assert "intact" in original.stdout


def test_check_json_is_one_line_per_file_and_a_bad_file_exits_2(tmp_path: Path) -> None:
    edited, _ = without_the_stops_sends(tmp_path)
    models = tmp_path / "models.json"
    models.write_text('{\n  "providers": {}\n}\n')
    done = bridge("replay", "--check", "--json", str(REAL), str(edited), str(models))
    assert done.returncode == 2
    rows = [json.loads(line) for line in done.stdout.splitlines()]
    assert [len(r.get("contradictions", ())) for r in rows[:2]] == [0, 3]
    assert "not a pi-bridge transcript" in rows[2]["error"]


def test_a_give_up_receipt_changed_by_hand_is_not_what_the_evidence_allows(tmp_path: Path) -> None:
    """The live bridge gives up on an engine that never acks (delivery-unknown, no-ack): intact.
    The same journal saying ``finished`` contradicts its evidence, which decided nothing."""
    journal = tmp_path / "noack.jsonl"
    engine = fake_engine_argv({"defaults": {"no_ack": True, "hang": True}})
    done = bridge("run", "--journal", str(journal), "--ack-timeout", "0.5", "hello", "--", *engine)
    assert done.returncode == 1, done.stderr
    assert check(str(journal)) == []

    entries = lines_of(journal)
    for e in entries:
        if "receipt" in e:
            assert (e["receipt"]["state"], e["receipt"]["reason"]) == ("delivery-unknown", "no-ack")
            e["receipt"].update(state="finished", reason=None)
    found = check(str(write(tmp_path / "finished.jsonl", entries)))
    assert [(c.kind, c.request) for c in found] == [("receipt-differs", "p1")]
    assert "delivery-unknown (no-ack)" in found[0].words


def test_a_delivered_receipt_for_a_prompt_never_sent(tmp_path: Path) -> None:
    entries = lines_of(REAL)
    at = next(n for n, e in enumerate(entries) if "receipt" in e)
    ghost = {**entries[at]["receipt"], "request": "p9"}
    entries.insert(at, {"receipt": ghost, "t": entries[at]["t"]})
    found = check(str(write(tmp_path / "ghost.jsonl", entries)))
    assert [(c.kind, c.request, c.line) for c in found] == [("receipt-without-send", "p9", at + 1)]


def test_diagnose_raises_a_contradiction_finding_for_each(tmp_path: Path) -> None:
    edited, answers = without_the_stops_sends(tmp_path)
    done = bridge("diagnose", "--json", str(edited))
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    found = [f for f in report["findings"] if f["signal"] == "contradiction"]
    assert sorted((f["detail"]["kind"], f["request"]) for f in found) == [
        ("answer-to-unsent", "p1"),
        ("answer-to-unsent", "p1"),
        ("receipt-differs", "p1"),
    ]
    assert sorted(f["idx"] for f in found if f["detail"]["kind"] == "answer-to-unsent") == sorted(answers.values())
    assert report["summary"]["signals"]["contradiction"] == 3
    original = json.loads(bridge("diagnose", "--json", str(REAL)).stdout)
    assert not [f for f in original["findings"] if f["signal"] == "contradiction"]


def test_conform_names_the_prompt_and_the_observation(tmp_path: Path) -> None:
    edited, _ = without_the_stops_sends(tmp_path)
    folder = tmp_path / "fixtures"
    folder.mkdir()
    (folder / "x.jsonl").write_bytes(edited.read_bytes())
    (folder / "x.expected.json").write_text(REAL.with_name("stopped_mid_stream.expected.json").read_text())
    done = bridge("conform", str(folder))
    assert done.returncode == 1
    assert "expected 0 items, got 2; first unexpected: O5 at #" in done.stdout and "for p1" in done.stdout


@pytest.mark.parametrize(
    "content", ['{\n  "providers": {}\n}\n', "hello world\n", '{"a": 1}\n'], ids=["models.json", "text", "json"]
)
def test_a_file_that_is_not_a_journal_is_called_that_in_one_line(tmp_path: Path, content: str) -> None:
    path = tmp_path / "f"
    path.write_text(content)
    for command in ("diagnose", "replay"):
        done = bridge(command, str(path))
        assert done.returncode == 2
        assert done.stdout == ""
        assert done.stderr.count("\n") == 1 and "not a pi-bridge transcript" in done.stderr, done.stderr


def test_a_deleted_receipt_is_a_release_without_one_and_the_differing_receipt_s_own_line_is_named(
    tmp_path: Path,
) -> None:
    """Found by a new-user trial: deleting p1's recorded receipt said ``intact``; a differing receipt
    named its release's line, not its own; an answer to no prompt printed ``None``."""
    entries = lines_of(REAL)
    at = next(n for n, e in enumerate(entries) if "receipt" in e)
    found = check(str(write(tmp_path / "norec.jsonl", entries[:at] + entries[at + 1 :])))
    assert [(c.kind, c.request) for c in found] == [("release-without-receipt", "p1")]

    edited, _ = without_the_stops_sends(tmp_path)
    receipt_line = next(n for n, e in enumerate(lines_of(edited), 1) if "receipt" in e)
    (differs,) = [c for c in check(str(edited)) if c.kind == "receipt-differs"]
    assert differs.line == receipt_line

    entries = lines_of(REAL)
    entries.insert(at, {"recv": {"type": "response", "id": "x-9", "command": "get_state", "success": True}})
    for e in entries[at + 1 :]:
        if "i" in e:
            e["i"] += 1
    text = bridge("replay", "--check", str(write(tmp_path / "stray.jsonl", entries))).stdout
    assert "answer-to-unsent" in text and "None" not in text


def test_an_answer_whose_stop_note_is_gone_names_the_prompt_holding_the_slot(tmp_path: Path) -> None:
    """The issue's independent check: with the stop's note deleted too, nothing ties 'stop-1:clear'
    to p1, but p1 held the slot; a prompt's ack to a prompt never sent names that prompt."""
    edited, answers = without_the_stops_sends(tmp_path)
    entries = [e for e in lines_of(edited) if not ("note" in e and e["note"].get("event") == "stop")]
    found = check(str(write(tmp_path / "nonote.jsonl", entries)))
    (clear,) = [c for c in found if c.kind == "answer-to-unsent" and c.idx == answers["stop-1:clear"]]
    assert clear.request == "p1" and "while p1 held the slot" in clear.words

    entries = [e for e in lines_of(REAL) if not ("send" in e and e["send"].get("id") == "p1")]
    found = check(str(write(tmp_path / "nosend.jsonl", entries)))
    ack = observation_of(entries, lambda v: v.get("type") == "response" and v.get("command") == "prompt")
    assert ("answer-to-unsent", "p1", ack) in [(c.kind, c.request, c.idx) for c in found]


def observation_of(entries: list[dict[str, Any]], predicate: Any) -> int:
    return next(int(e["i"]) for e in entries if "recv" in e and isinstance(e["recv"], dict) and predicate(e["recv"]))


def test_diagnose_says_why_a_journal_agrees_with_itself_once_and_points_at_the_receipt_line(tmp_path: Path) -> None:
    edited, _ = without_the_stops_sends(tmp_path)
    report = json.loads(bridge("diagnose", "--json", str(edited)).stdout)
    found = [f for f in report["findings"] if f["signal"] == "contradiction"]
    assert len(found) == 3
    assert all("a journal it wrote whole agrees with itself" not in f["explanation"] for f in found)
    text = bridge("diagnose", str(edited)).stdout
    assert text.count("agrees with itself") == 1
    first = found[0]["n"]
    assert text.count(f"same as [{first}]: entries removed") == 2
    (differs,) = [f for f in found if f["detail"]["kind"] == "receipt-differs"]
    (focus,) = [e for e in differs["evidence"] if e["focus"]]
    assert focus["line"] == differs["line"] == differs["detail"]["line"]
    assert focus["entry"] == "receipt"


# -- issue 42: what --check let pass, and what made every reader crash ------------------------------

PLAIN = FIXTURES / "pi-1.6.0" / "plain.jsonl"


@pytest.mark.parametrize(
    ("field", "value"),
    [("stop", "stop-9"), ("run", "run-9"), ("ackIdx", 3), ("workingIdx", 8), ("settleIdx", 23), ("reply", "forged")],
)
def test_an_edited_stop_run_index_or_reply_is_a_contradiction(tmp_path: Path, field: str, value: Any) -> None:
    """Only the state and reason were compared: a receipt whose stop, run, index or reply was
    edited was "intact". Each now differs from what its evidence gives, named."""
    entries = lines_of(PLAIN)
    for e in entries:
        if "receipt" in e:
            assert e["receipt"][field] != value
            e["receipt"][field] = value
    found = check(str(write(tmp_path / "edited.jsonl", entries)))
    assert [(c.kind, c.request) for c in found] == [("receipt-differs", "p1")]
    assert f"{field} {value!r}" in found[0].words


def _bad_pair(tmp_path: Path) -> Path:
    """A live journal of a prompt never acked, its recorded receipt ``delivery-unknown`` with
    ``interrupted`` (no verdict: the evidence decides nothing, so the record was taken)."""
    journal = tmp_path / "noack.jsonl"
    engine = fake_engine_argv({"defaults": {"no_ack": True, "hang": True}})
    done = bridge("run", "--journal", str(journal), "--ack-timeout", "0.5", "hello", "--", *engine)
    assert done.returncode == 1, done.stderr
    entries = lines_of(journal)
    for e in entries:
        if "receipt" in e:
            e["receipt"]["reason"] = "interrupted"
    return write(tmp_path / "bad-pair.jsonl", entries)


def test_a_receipt_whose_state_and_reason_do_not_go_together_is_a_finding_not_a_crash(tmp_path: Path) -> None:
    """It crashed replay, --check, diagnose and conform with exit 70 and stopped the batch. Now:
    --check names it (exit 1) and goes on; replay calls the file invalid (exit 2) and goes on;
    diagnose shows the finding; conform reports the fixture as it does an unreadable one."""
    bad = _bad_pair(tmp_path)
    found = check(str(bad))
    assert [(c.kind, c.request) for c in found] == [("receipt-invalid", "p1")]
    assert "'interrupted' does not go with state 'delivery-unknown'" in found[0].words
    checked = bridge("replay", "--check", str(bad), str(PLAIN))
    assert checked.returncode == 1, checked.stderr
    assert "receipt-invalid" in checked.stdout and "plain.jsonl: intact" in checked.stdout
    replayed = bridge("replay", str(bad), str(PLAIN))
    assert replayed.returncode == 2 and "Traceback" not in replayed.stderr, replayed.stderr
    assert "is none: reason 'interrupted' does not go with state 'delivery-unknown'" in replayed.stderr
    assert "p1           finished" in replayed.stdout  # the next file was replayed
    diagnosed = bridge("diagnose", "--json", str(bad))
    assert diagnosed.returncode == 0, diagnosed.stderr
    kinds = [f["detail"]["kind"] for f in json.loads(diagnosed.stdout)["findings"] if f["signal"] == "contradiction"]
    assert kinds == ["receipt-invalid"]
    folder = tmp_path / "fixtures"
    folder.mkdir()
    (folder / "x.jsonl").write_bytes(bad.read_bytes())
    (folder / "x.expected.json").write_text("{}")
    conformed = bridge("conform", str(folder))
    assert conformed.returncode in (1, 2) and "Traceback" not in conformed.stderr, conformed.stderr


def test_a_journal_cut_short_with_a_prompt_sent_and_no_receipt_is_not_intact(tmp_path: Path) -> None:
    """A kill or a full disk cuts a journal between a prompt's send and its receipt: it was
    "intact". Now each prompt sent and never settled is named (``cut-short``); the same journal
    with the bridge's closing note and a prompt without a receipt (``send_raw``) stays intact."""
    entries = lines_of(PLAIN)
    at = next(n for n, e in enumerate(entries) if "recv" in e and e["recv"].get("type") == "agent_end")
    found = check(str(write(tmp_path / "cut.jsonl", entries[:at])))
    assert [(c.kind, c.request, c.line) for c in found] == [("cut-short", "p1", at)]
    assert "cut short" in found[0].words
    raw = [e for e in entries if "receipt" not in e and "release" not in e]
    assert check(str(write(tmp_path / "raw.jsonl", raw))) == []
