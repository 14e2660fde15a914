"""The checks the scenarios share.

:func:`check_common` is what every scenario must show besides its own check: one receipt
per prompt, every engine stopped, the journal private (0600), and ``replay(journal)`` giving
exactly the tracker output, overlap signals and receipts the live bridge reported
(:func:`live_vs_replay`). The rest are the helpers the scenarios' own checks are written
with: a receipt's state and reason, the overlap signals in order, counting and finding
engine lines.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Callable, Iterable
from typing import Any

from bridge.core.receipts import Receipt, describe
from tests.shared.pi_scenarios.outcome import Outcome, ScenarioError, expect


def comparable_receipt(r: dict[str, Any]) -> dict[str, Any]:
    """A receipt's JSON form without its timings (replay times come from the journal's rounded ``t``)."""
    return {k: v for k, v in r.items() if k != "times"}


def live_vs_replay(o: Outcome) -> tuple[dict[str, Any], dict[str, Any]]:
    """What the live bridge reported and what the replay of its journal says, in one shape."""
    rep = o.replay.to_json()
    replayed = {r["request"]: r for r in rep["receipts"]}
    live = {
        "tracker": o.live,
        "overlap signals": o.overlaps,
        "receipts": {k: comparable_receipt(r.to_json()) for k, r in o.receipts.items()},
    }
    again = {
        "tracker": {k: rep[k] for k in ("overlaps", "working", "settled")},
        "overlap signals": rep["overlaps"],
        "receipts": {k: comparable_receipt(replayed[k]) for k in o.receipts if k in replayed},
    }
    return live, again


def check_common(o: Outcome, submitted: Iterable[str]) -> None:
    submitted = list(submitted)
    counts: dict[str, int] = {}
    for n in o.notes:
        if n.get("type") == "receipt":
            counts[n["id"]] = counts.get(n["id"], 0) + 1
    for request in submitted:
        expect(counts.get(request) == 1, f"{o.name}: {request} got {counts.get(request, 0)} receipts, not one")
    started = [n["pid"] for n in o.notes if n.get("type") == "engine" and n.get("event") == "started"]
    exited = [n["pid"] for n in o.notes if n.get("type") == "engine" and n.get("event") == "exited"]
    expect(started and sorted(started) == sorted(exited), f"{o.name}: engines started {started}, exited {exited}")
    mode = stat.S_IMODE(os.stat(o.journal).st_mode)
    expect(mode == 0o600, f"{o.name}: journal mode {oct(mode)}, not 0600")
    live, again = live_vs_replay(o)
    expect(
        live == again,
        f"{o.name}: replay of the journal differs from the live bridge:\n"
        f"live:   {json.dumps(live, sort_keys=True)}\nreplay: {json.dumps(again, sort_keys=True)}",
    )
    for r in o.receipts.values():
        expect(r.times.settled is not None and r.times.submitted is not None, f"{o.name}: {r.request} lacks times")


def expect_receipt(
    o: Outcome, request: str, state: str, reason: str | None = None, *, stop: Any = None, reply: str | None = None
) -> Receipt:
    r = o.receipt(request)
    got = (r.state, r.reason, r.stop)
    want = (state, reason, stop)
    expect(got == want, f"{o.name}: {request} receipt is {got} (state, reason, stop), expected {want}: {describe(r)}")
    if reply is not None:
        expect(r.reply == reply, f"{o.name}: {request} reply {r.reply!r}, expected {reply!r}")
    return r


def expect_overlaps(o: Outcome, *want: tuple[str, str | None]) -> None:
    """The overlap signals, as (signal, why-or-cause), in order."""
    got = [(s["signal"], s.get("why") or s.get("cause")) for s in o.overlaps]
    expect(got == list(want), f"{o.name}: overlap signals {got}, expected {list(want)}")


def count_types(events: Iterable[dict[str, Any]], kind: str) -> int:
    return sum(1 for e in events if e.get("type") == kind)


def first_index(o: Outcome, pred: Callable[[dict[str, Any]], bool], what: str) -> int:
    for i, v in o.recv():
        if pred(v):
            return i
    raise ScenarioError(f"{o.name}: no {what} in the journal")
