"""Recovery (issue 44): every prompt a lost bridge accepted and never settled gets its receipt from
its journal's evidence, never by running it again (bridge/core/recovery.py,
bridge/live/recovery.py).

The journals are real: the pinned Pi against the scripted model server (the ``plain`` scenario of
:mod:`tests.shared.pi_scenarios`), then cut at each step of the prompt's life, as a bridge
killed there leaves it (each entry is one line: the journal writes whole lines); and the fake engine
for a fault the real Pi cannot be made to do (a line that is no JSON mid-run)."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
import trio

from bridge.core.ledger import Admitted, unsettled_journals
from bridge.core.receipts import Receipt
from bridge.core.words import Reason, State
from bridge.live.api import open_bridge
from bridge.live.ledger import Ledger
from bridge.live.recovery import recover
from bridge.live.supervisor import BridgeConfig
from bridge.profiles.command import CommandProfile
from tests.conftest import TOOLS
from tests.shared import pi_scenarios as sc


@pytest.fixture(scope="module")
def plain_journal(tmp_path_factory: pytest.TempPathFactory, pinned_pi: object) -> list[bytes]:
    """The lines of a real journal: one prompt (``p1``), sent, acked, streamed, settled, released."""
    path = tmp_path_factory.mktemp("recovery") / "plain.jsonl"
    outcome = sc.run_sync("plain", path)
    assert outcome.receipts["p1"].state == "finished"
    assert len(outcome.requests) == 1
    return path.read_bytes().splitlines(keepends=True)


def _is(kind: str, **fields: Any) -> Callable[[dict[str, Any]], bool]:
    def match(entry: dict[str, Any]) -> bool:
        value = entry.get(kind)
        return isinstance(value, dict) and all(value.get(k) == v for k, v in fields.items())

    return match


#: Where a bridge may die, as the last journal line kept: (step, that line, the receipt recovery gives).
STEPS: list[tuple[str, Callable[[dict[str, Any]], bool] | None, tuple[str, str | None], str]] = [
    ("accepted", None, ("rejected", "bridge-lost"), "recovery"),
    ("written", _is("send", type="prompt", id="p1"), ("delivery-unknown", "engine-exited"), "recovery"),
    ("acked", _is("recv", type="response", id="p1"), ("delivery-unknown", "engine-exited"), "recovery"),
    ("streaming", lambda e: "updates" in e, ("outcome-unknown", "engine-exited"), "recovery"),
    ("settled", _is("recv", type="agent_settled"), ("finished", None), "journal"),
    ("receipt recorded", lambda e: "receipt" in e, ("finished", None), "journal"),
    ("released", lambda e: e.get("release") == "p1", ("finished", None), "journal"),
]


def _cut(lines: list[bytes], last: Callable[[dict[str, Any]], bool] | None) -> bytes:
    """The journal up to and including the first line ``last`` matches (None: up to the prompt's send, excluded)."""
    kept = [lines[0]]
    for line in lines[1:]:
        entry = orjson.loads(line)
        if last is None and _is("send", type="prompt")(entry):
            break
        kept.append(line)
        if last is not None and last(entry):
            break
    else:
        raise AssertionError("the step's line is not in the journal")
    return b"".join(kept)


@pytest.mark.parametrize(("step", "last", "verdict", "by"), STEPS, ids=[s[0] for s in STEPS])
def test_a_bridge_lost_at_each_step_is_settled_from_its_journal(
    plain_journal: list[bytes], tmp_path: Path, step: str, last: Any, verdict: tuple[str, str | None], by: str
) -> None:
    journal = tmp_path / "cut.jsonl"
    journal.write_bytes(_cut(plain_journal, last))
    with Ledger(tmp_path / "ledger.sqlite3") as ledger:
        assert isinstance(ledger.accept("p1", "Say hello.", {}, journal=journal), Admitted)
        assert unsettled_journals(ledger.records()) == {str(journal)}
        [settled] = recover(ledger)
        receipt = settled.receipt
        assert (receipt.state, receipt.reason) == verdict, f"{step}: {receipt!r}"
        assert settled.by == by and settled.recorded
        if by == "recovery":
            assert receipt.native_error is not None and "the bridge was lost" in receipt.native_error
            assert str(journal) in receipt.native_error or step == "accepted"
        else:
            assert receipt.reply == "Hello from the scripted model, through the sealed Pi."
        # Recorded, durable, and recovery is done: a second one finds nothing to settle.
        record = ledger.get("p1")
        assert record is not None and record.receipt == receipt
        assert recover(ledger) == []


def test_a_prompt_the_journal_never_shows_sent_is_rejected_and_one_it_does_keeps_its_own(
    plain_journal: list[bytes], tmp_path: Path
) -> None:
    """Two prompts on one journal: p1 ran to its end; p2 was queued behind it when the bridge died."""
    journal = tmp_path / "whole.jsonl"
    journal.write_bytes(b"".join(plain_journal))
    with Ledger(tmp_path / "ledger.sqlite3") as ledger:
        ledger.accept("p1", "Say hello.", {}, journal=journal)
        ledger.accept("p2", "And again.", {}, journal=journal)
        settled = {s.record.request: s for s in recover(ledger)}
    assert (settled["p1"].receipt.state, settled["p1"].by) == ("finished", "journal")
    p2 = settled["p2"].receipt
    assert (p2.state, p2.reason, p2.stop, p2.run) == (State.REJECTED, Reason.BRIDGE_LOST, None, None)


def test_a_send_cut_inside_its_line_is_no_proof_it_was_not_written(plain_journal: list[bytes], tmp_path: Path) -> None:
    """The journal's last line cut off inside the prompt's ``send``: the prompt may have gone out
    (a write was under way), so it is ``delivery-unknown``, never ``rejected``."""
    whole = _cut(plain_journal, _is("send", type="prompt", id="p1"))
    journal = tmp_path / "cut.jsonl"
    journal.write_bytes(whole[:-20])
    with Ledger(tmp_path / "ledger.sqlite3") as ledger:
        ledger.accept("p1", "Say hello.", {}, journal=journal)
        [settled] = recover(ledger)
    assert (settled.receipt.state, settled.receipt.reason) == ("delivery-unknown", "engine-exited")
    assert settled.receipt.native_error is not None and "was cut off" in settled.receipt.native_error


def test_without_a_journal_the_ledgers_written_mark_decides(tmp_path: Path) -> None:
    with Ledger(tmp_path / "ledger.sqlite3") as ledger:
        ledger.accept("queued", "a", {})  # queued in a pool: no bridge, no journal yet
        ledger.accept("sent", "b", {})
        ledger.written("sent")
        ledger.accept("gone", "c", {}, journal=tmp_path / "removed.jsonl")  # its journal is gone
        ledger.accept("done", "d", {})
        ledger.settle(Receipt(request="done", state=State.FINISHED))
        settled = {s.record.request: s.receipt for s in recover(ledger)}
    assert set(settled) == {"queued", "sent", "gone"}, "a settled record is left as it is"
    assert (settled["queued"].state, settled["queued"].reason) == ("rejected", "bridge-lost")
    assert (settled["sent"].state, settled["sent"].reason) == ("delivery-unknown", "engine-exited")
    assert (settled["gone"].state, settled["gone"].reason) == ("delivery-unknown", "engine-exited")
    assert "cannot be read" in (settled["gone"].native_error or "")


def test_recovery_takes_no_receipt_another_process_recorded_meanwhile(tmp_path: Path) -> None:
    """The first receipt stands: a record settled between recovery's read and its write keeps its own."""

    class Racing(Ledger):
        def unsettled(self) -> list[Any]:
            records = super().unsettled()
            self.settle(Receipt(request="p1", state=State.FINISHED))
            return records

    with Racing(tmp_path / "ledger.sqlite3") as ledger:
        ledger.accept("p1", "a", {})
        [settled] = recover(ledger)
        assert not settled.recorded
        record = ledger.get("p1")
        assert record is not None and record.receipt is not None and record.receipt.state == "finished"


def test_a_written_mark_the_journal_does_not_show_is_no_proof_it_was_never_written(
    plain_journal: list[bytes], tmp_path: Path
) -> None:
    """``rejected`` claims certainty: a prompt the ledger marked written is never ``rejected``,
    even when the journal it names does not show it sent (another journal has its story)."""
    journal = tmp_path / "whole.jsonl"
    journal.write_bytes(b"".join(plain_journal))
    with Ledger(tmp_path / "ledger.sqlite3") as ledger:
        ledger.accept("p9", "Elsewhere.", {}, journal=journal)
        ledger.written("p9")
        [settled] = recover(ledger)
    assert (settled.receipt.state, settled.receipt.reason) == ("delivery-unknown", "engine-exited")


async def test_a_tainted_run_cut_before_it_settled_is_outcome_unknown_with_its_taint(tmp_path: Path) -> None:
    """The fake engine writes a line that is no JSON mid-run (a gap: the engine is tainted); the
    bridge dies right after it. Recovery decides through the same Session: the taint is the reason."""
    live = tmp_path / "live.jsonl"
    argv = [
        sys.executable,
        str(TOOLS / "fake_engine.py"),
        "--scenario-json",
        json.dumps({"prompts": [{"garbage_at": 6}]}),
    ]
    config = BridgeConfig(taint_grace=1.0, stop_grace=1.0, restart_backoff=(0.0,), close_grace=2.0)
    with trio.fail_after(30):
        async with open_bridge(CommandProfile(argv), journal=live, config=config) as bridge:
            receipt = await bridge.prompt("a", request="p1")
    assert (receipt.state, receipt.reason) == ("outcome-unknown", "gap")
    journal = tmp_path / "cut.jsonl"
    journal.write_bytes(_cut(live.read_bytes().splitlines(keepends=True), lambda e: "recv_raw" in e))
    with Ledger(tmp_path / "ledger.sqlite3") as ledger:
        ledger.accept("p1", "a", {}, journal=journal)
        [settled] = recover(ledger)
    assert (settled.receipt.state, settled.receipt.reason, settled.by) == ("outcome-unknown", "gap", "recovery")
    assert [s["signal"] for s in settled.receipt.signals][:1] == ["gap"]


async def test_a_serve_killed_mid_stream_leaves_a_journal_recovery_settles(tmp_path: Path) -> None:
    """``bridge serve`` SIGKILLed while p1 streams and p2 waits in its queue: p2 is ``rejected`` /
    ``bridge-lost``, p1 one of the unknowns with ``engine-exited``, and the engine went with the
    bridge (its reaper killed it). (p1 is ``delivery-unknown`` today, though the model had it: the
    journal flushes at sends and receipts, and the ack and the stream were still in its buffer.)"""
    from tests.shared.checks import ServeProc, proc_stat

    journal = tmp_path / "j.jsonl"
    engine = [sys.executable, str(TOOLS / "fake_engine.py"), "--scenario-json"]
    engine.append(json.dumps({"defaults": {"deltas": 100, "delta_delay": 0.1}}))
    sp = await ServeProc.start(tmp_path, engine, "--journal", str(journal))
    try:
        await sp.until(lambda line: line["type"] == "ready")
        await sp.send({"type": "prompt", "id": "p1", "message": "slow one", "stream": True})
        await sp.send({"type": "prompt", "id": "p2", "message": "queued one"})
        await sp.until(lambda line: line["type"] == "text" and line["id"] == "p1")
        [pid] = sp.engine_pids()
    finally:
        await sp.kill()
    with trio.fail_after(10):
        while proc_stat(pid) is not None and proc_stat(pid)[0] != "Z":  # type: ignore[index]
            await trio.sleep(0.05)
    with Ledger(tmp_path / "ledger.sqlite3") as ledger:
        ledger.accept("p1", "slow one", {}, journal=journal)
        ledger.accept("p2", "queued one", {}, journal=journal)
        settled = {s.record.request: s.receipt for s in recover(ledger)}
    assert (settled["p2"].state, settled["p2"].reason) == ("rejected", "bridge-lost")
    assert settled["p1"].state in ("delivery-unknown", "outcome-unknown") and settled["p1"].reason == "engine-exited"
