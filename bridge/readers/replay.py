"""Replay a transcript through a :class:`~bridge.core.session.Session` (SPEC §6).

The result is the tracker's own output (``overlaps``, ``working``, ``settled``,
with the seed's key names) and the bridge-level receipt of every prompt in the
transcript. A decision the session cannot make from the evidence (the live
bridge gave up after a timeout) is taken from the ``receipt`` entry the journal
recorded before the ``release``; a prompt whose story the transcript does not
finish is ``pending``.
"""

from __future__ import annotations

from typing import Any

import attrs

from bridge.core.prompts import PromptState
from bridge.core.receipts import Receipt
from bridge.core.session import Session
from bridge.core.wire import Wire, form
from bridge.core.words import State
from bridge.transcript import TranscriptError, open_transcript
from bridge.transcript.driver import Driver

__all__ = ["Driver", "ReplayResult", "format_table", "pending_receipt", "replay"]


@form(omit=["path", "truncated"])
@attrs.define
class ReplayResult(Wire):
    """What replay found: its JSON form is what conform's ``*.expected.json`` files hold."""

    path: str
    observations: int
    overlaps: list[dict[str, Any]]
    working: list[dict[str, Any]]
    settled: list[dict[str, Any]]
    receipts: list[Receipt]
    truncated: bool = False


def replay(path: str) -> ReplayResult:
    """Replay one transcript file. Raises :class:`~bridge.transcript.TranscriptError`."""
    stream, reader = open_transcript(path)
    with stream:
        driver = Driver(Session(reader.header.clearing, collect=True, dialogs=reader.header.dialogs))
        feed = driver.feed
        for entry in reader.skipping_updates():
            feed(entry)
        if driver.invalid:
            line, request, why = driver.invalid[0]
            raise TranscriptError(path, line, f"the receipt recorded for {request!r} is none: {why}")
        session = driver.session
        receipts = [_final(item, session) for item in driver.story]
        return ReplayResult(
            path=path,
            observations=session.observations,
            overlaps=[o.to_json() for o in session.overlaps],
            working=[w.to_json() for w in session.working],
            settled=[s.to_json() for s in session.settled],
            receipts=receipts,
            truncated=reader.truncated,
        )


def _final(item: PromptState | Receipt, session: Session) -> Receipt:
    if isinstance(item, Receipt):
        return item
    if item.receipt is not None:
        return item.receipt
    return pending_receipt(item, session)


def pending_receipt(item: PromptState, session: Session) -> Receipt:
    """The ``pending`` receipt of a prompt whose story the transcript does not finish."""
    slot = session.tracker.slot
    run = slot.run_id if slot is not None and item is session.held else None
    return Receipt(
        request=item.request,
        state=State.PENDING,
        stop=item.stop,
        run=run,
        reply=item.reply,
        ack_idx=item.ack_idx,
        working_idx=item.working_idx,
        disposition=item.disposition,
        signals=tuple(item.signals),
        pid=item.pid,
        generation=item.generation,
    )


def format_table(result: ReplayResult) -> str:
    """A readable account of one replay, for people."""
    lines = [f"{result.path}: {result.observations} observations"]
    if result.truncated:
        lines.append("  (the last line was cut off and was not read)")
    lines.append("  signals:" if result.overlaps else "  signals: none")
    for o in result.overlaps:
        extra = ", ".join(f"{k}={v}" for k, v in o.items() if k not in ("signal", "idx", "request"))
        lines.append(f"    #{o['idx']:<6} {o['signal']:<22} request={o['request']}  {extra}")
    lines.append("  working:" if result.working else "  working: none")
    for w in result.working:
        lines.append(f"    #{w['idx']:<6} request={w['request']}")
    lines.append("  settled:" if result.settled else "  settled: none")
    for s in result.settled:
        why = f" ({s['reason']})" if s["reason"] else ""
        more = f"  stop={s['stop']}" if s["stop"] else ""
        if s["nativeError"]:
            more += f"  error={s['nativeError'][:80]!r}"
        lines.append(f"    #{s['idx']:<6} request={s['request']}  {s['state']}{why}{more}")
    lines.append("  receipts:" if result.receipts else "  receipts: none")
    for r in result.receipts:
        why = f" ({r.reason})" if r.reason else ""
        lines.append(f"    {r.request!s:<12} {r.state}{why}" + (f"  run={r.run}" if r.run else ""))
    return "\n".join(lines)
