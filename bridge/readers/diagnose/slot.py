"""The slot at a finding's moment: the tracker's slot and run state as plain data, and in words.

Rules: a snapshot is taken when the finding is raised (the tracker moves on right after), holds
only JSON values, and reads the tracker through its public fields and its read-only
:meth:`~bridge.core.tracker.Tracker.run_facts`, never its run table. Its keys are part of
``--json``'s output (``slot`` of each finding); :func:`slot_words` is its one sentence.
"""

from __future__ import annotations

from typing import Any

from bridge.core.session import Session
from bridge.readers.diagnose.render import q


def slot_snapshot(session: Session) -> dict[str, Any]:
    """The tracker's slot and run state right now, as plain data."""
    tr = session.tracker
    s = tr.slot
    snap: dict[str, Any] = {
        "held": s is not None,
        "request": s.request if s is not None else None,
        "ackIdx": s.ack_idx if s is not None else None,
        "run": s.run_id if s is not None else None,
        "runStart": None,
        "runSettle": None,
        "working": bool(s.working) if s is not None else False,
        "settleSeen": bool(s.settle_seen) if s is not None else False,
        "stop": tr.stop,
        "lastRequest": tr.last_slot.request if s is None and tr.last_slot is not None else None,
        "currentRun": tr.current,
        "currentRunStart": None,
        "clearWindow": tr.clear_window,
        "gapAt": tr.gap,
        "unsealed": session.taint,
        "generation": session.generation,
    }
    run = tr.run_facts(s.run_id) if s is not None else None
    if run is not None:
        snap["runStart"], snap["runSettle"] = run.start_idx, run.settle_idx
    current = tr.run_facts(tr.current)
    if current is not None:
        snap["currentRunStart"] = current.start_idx
    return snap


def slot_words(s: dict[str, Any]) -> str:
    """A snapshot as one sentence: who holds the slot, its run, the stop link, the current run, the seal."""
    if not s:
        return ""
    if s.get("held"):
        parts = [f"{q(s['request'])} held"]
        parts.append(f"acked at #{s['ackIdx']}" if s.get("ackIdx") is not None else "not acked")
        if s.get("run") is not None:
            run = f"its run {s['run']}"
            if s.get("runStart") is not None:
                run += f" (started #{s['runStart']}"
                run += f", settled #{s['runSettle']})" if s.get("runSettle") is not None else ")"
            parts.append(run)
        else:
            parts.append("no run of its own yet")
        parts.append("working" if s.get("working") else "not working (no user message of its run seen)")
        if s.get("settleSeen"):
            parts.append("settle seen")
        text = "slot: " + ", ".join(parts)
    else:
        last = s.get("lastRequest")
        text = "slot: none held" + (f" (the last prompt, {q(last)}, was released)" if last is not None else "")
    text += f"; stop link: {q(s['stop'])}" if s.get("stop") else "; stop link: none"
    if s.get("currentRun") is not None:
        start = s.get("currentRunStart")
        text += f"; current run: {s['currentRun']}" + (f" (started #{start})" if start is not None else "")
    else:
        text += "; no run in progress"
    if s.get("clearWindow"):
        text += f"; {s['clearWindow']} clear_queue awaiting its response"
    if s.get("gapAt") is not None:
        text += f"; gap since #{s['gapAt']}"
    text += f"; engine generation {s.get('generation')}, " + (
        f"unsealed ({s['unsealed']})" if s.get("unsealed") else "no sign yet that the seal broke"
    )
    return text
