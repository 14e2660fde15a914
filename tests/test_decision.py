"""The decision table: the docs' "How a receipt is decided" (docs/pages/design/receipts.md),
row by row, against `decide`.

The page's table is read here, so the table and the code cannot drift: every
row has examples that must land on it (with the receipt the page gives), and
examples where several rows match check that the earlier row wins.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from bridge.core.receipts import REASONS, Facts, decide

PAGE = Path(__file__).resolve().parent.parent / "docs" / "pages" / "design" / "receipts.md"


def table_rows() -> dict[int, tuple[str, str]]:
    """Row number -> (when, receipt) as the page's table writes them."""
    text = PAGE.read_text(encoding="utf-8")
    section = text.split("\n## The table\n", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        m = re.match(r"\|\s*(\d+)\s*\|(.*?)\|(.*?)\|(.*)\|\s*$", line)
        if m:
            rows[int(m.group(1))] = (m.group(2).strip(), m.group(3).strip())
    return rows


#: (row, facts, expected receipt). The expected receipt is also checked against
#: the page's receipt column (its words in backticks, in order).
EXAMPLES: list[tuple[int, Facts, tuple[str, str | None]]] = [
    (1, Facts(unsent="queue-full"), ("rejected", "queue-full")),
    (1, Facts(unsent="closing", taint="overlap", exited=True), ("rejected", "closing")),
    (1, Facts(unsent="engine-down"), ("rejected", "engine-down")),
    (1, Facts(unsent="budget"), ("rejected", "budget")),
    (2, Facts(recorded=("delivery-unknown", "no-ack")), ("delivery-unknown", "no-ack")),
    (2, Facts(recorded=("failed", "timeout"), tracker=("finished", None)), ("failed", "timeout")),
    (3, Facts(refused=True), ("rejected", "engine")),
    (3, Facts(refused=True, taint="gap"), ("rejected", "engine")),
    (4, Facts(gave_up="ack"), ("delivery-unknown", "no-ack")),
    (4, Facts(gave_up="ack", taint="overlap"), ("delivery-unknown", "no-ack")),
    (5, Facts(gave_up="settle", working=True), ("outcome-unknown", "settle-timeout")),
    (5, Facts(gave_up="settle", taint="disposition"), ("outcome-unknown", "settle-timeout")),
    (6, Facts(taint="overlap", own_settled=True), ("outcome-unknown", "overlap")),
    (6, Facts(taint="gap", exited=True, working=True), ("outcome-unknown", "gap")),
    (6, Facts(taint="aborted-without-stop", gave_up="taint"), ("outcome-unknown", "aborted-without-stop")),
    (6, Facts(taint="disposition", tracker=("finished", None), own_settled=True), ("outcome-unknown", "disposition")),
    (7, Facts(gave_up="taint"), ("outcome-unknown", "overlap")),
    (8, Facts(exited=True, working=True), ("outcome-unknown", "engine-exited")),
    (9, Facts(exited=True), ("delivery-unknown", "engine-exited")),
    (11, Facts(tracker=("failed", "interrupted"), stop_by="controller", own_settled=True), ("failed", "interrupted")),
    (11, Facts(tracker=("failed", "interrupted"), stop_by="timeout"), ("failed", "timeout")),
    (11, Facts(tracker=("failed", "interrupted"), stop_by="closing"), ("failed", "closing")),
    (10, Facts(tracker=("failed", "interrupted")), ("outcome-unknown", "aborted-without-stop")),
    (
        10,
        Facts(tracker=("failed", "interrupted"), own_settled=True, aborted=True),
        ("outcome-unknown", "aborted-without-stop"),
    ),
    (11, Facts(tracker=("failed", "interrupted"), stop_by="budget", own_settled=True), ("failed", "budget")),
    (12, Facts(tracker=("failed", None), stop_by="timeout", aborted=True), ("failed", "timeout")),
    (
        12,
        Facts(tracker=("outcome-unknown", "no-final-assistant-message"), stop_by="controller", aborted=True),
        ("failed", "interrupted"),
    ),
    (12, Facts(tracker=("failed", None), stop_by="closing", aborted=True), ("failed", "closing")),
    (12, Facts(tracker=("failed", None), stop_by="budget", aborted=True), ("failed", "budget")),
    (13, Facts(tracker=("failed", None), stop_by="timeout", aborted=False), ("failed", None)),
    (13, Facts(tracker=("failed", None), aborted=True), ("failed", None)),
    (13, Facts(tracker=("finished", None), stop_by="controller"), ("finished", None)),
    (13, Facts(tracker=("delivery-unknown", "ack-without-start")), ("delivery-unknown", "ack-without-start")),
    (
        13,
        Facts(tracker=("outcome-unknown", "unrecognised-stop-reason"), stop_by="timeout", aborted=True),
        ("outcome-unknown", "unrecognised-stop-reason"),
    ),
    (13, Facts(tracker=("finished", None), lost=True), ("finished", None)),
    (14, Facts(lost=True, working=True), ("outcome-unknown", "node-lost")),
    (15, Facts(lost=True), ("delivery-unknown", "node-lost")),
]


def test_the_table_has_every_row_and_only_those() -> None:
    assert sorted(table_rows()) == list(range(1, 16))
    assert {row for row, _, _ in EXAMPLES} == set(range(1, 16))


@pytest.mark.parametrize(
    ("row", "facts", "expected"), EXAMPLES, ids=[f"row{r}-{i}" for i, (r, _, _) in enumerate(EXAMPLES)]
)
def test_decide_follows_the_table_row_by_row(row: int, facts: Facts, expected: tuple[str, str | None]) -> None:
    assert decide(facts) == expected
    state, reason = expected
    assert reason in REASONS[state]
    when, receipt = table_rows()[row]
    words = re.findall(r"`([^`]+)`", receipt)
    # The page's receipt column names the state (or stands for it with a letter)
    # and, where it is fixed, the reason.
    if words:
        assert words[0] == state
        if len(words) > 1 and reason is not None and row not in (11, 12):
            assert words[1] == reason


def test_a_fact_set_with_no_trigger_is_a_bug_not_a_receipt() -> None:
    with pytest.raises(ValueError):
        decide(Facts(working=True, stop_by="controller"))


def test_interrupted_only_for_the_controllers_stop() -> None:
    for by in ("timeout", "closing", "stall", "budget"):
        for facts in (
            Facts(tracker=("failed", "interrupted"), stop_by=by),
            Facts(tracker=("failed", None), stop_by=by, aborted=True),
        ):
            assert decide(facts) != ("failed", "interrupted")
