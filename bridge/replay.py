"""Replay a transcript through a :class:`~bridge.session.Session` (SPEC §6).

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

from bridge.framing import RawLine
from bridge.receipts import Receipt
from bridge.session import PromptState, Session
from bridge.transcript import open_transcript


@attrs.define
class ReplayResult:
    path: str
    observations: int
    overlaps: list[dict[str, Any]]
    working: list[dict[str, Any]]
    settled: list[dict[str, Any]]
    receipts: list[Receipt]
    truncated: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "observations": self.observations,
            "overlaps": self.overlaps,
            "working": self.working,
            "settled": self.settled,
            "receipts": [r.to_json() for r in self.receipts],
        }


def _raw_from_text(text: str) -> RawLine:
    why = "oversize" if text.startswith("[oversize line:") else "malformed"
    return RawLine(why, text, len(text.encode("utf-8", "surrogatepass")))


def replay(path: str) -> ReplayResult:
    """Replay one transcript file. Raises :class:`~bridge.transcript.TranscriptError`."""
    stream, reader = open_transcript(path)
    with stream:
        session = Session(reader.header.clearing, collect=True)
        # Every prompt in order of first appearance: a sent prompt's state, or
        # the receipt recorded for one that was never sent (queue-full, ...).
        story: list[PromptState | Receipt] = []
        sent_ids: set[Any] = set()
        recorded: dict[Any, dict[str, Any]] = {}
        for entry in reader:
            kind, value = entry.kind, entry.value
            if kind == "recv":
                session.observe(value, t=entry.t)
            elif kind == "send":
                session.send(value, t=entry.t)
                if value.get("type") == "prompt":
                    request = value.get("id")
                    story.append(session.open[request])
                    sent_ids.add(request)
            elif kind == "recv_raw":
                session.observe(_raw_from_text(value), t=entry.t)
            elif kind == "release":
                session.release(value, t=entry.t, recorded=recorded.get(value))
            elif kind == "exit":
                session.engine_exited(t=entry.t)
            elif kind == "receipt" and isinstance(value, dict):
                request = value.get("request")
                recorded[request] = value
                if request not in sent_ids:
                    try:
                        story.append(Receipt.from_json(value))
                    except Exception:  # noqa: BLE001 - a bad record is not evidence
                        pass
            elif kind == "note" and isinstance(value, dict) and value.get("event") == "engine-start":
                pid, generation = value.get("pid"), value.get("generation")
                session.engine_started(
                    pid if isinstance(pid, int) else None,
                    generation if isinstance(generation, int) else None,
                )
        receipts = [_final(item, session) for item in story]
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
    slot = session.tracker.slot
    run = slot.run_id if slot is not None and item is session.held else None
    return Receipt(
        request=item.request,
        state="pending",
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
        lines.append(f"    {str(r.request):<12} {r.state}{why}" + (f"  run={r.run}" if r.run else ""))
    return "\n".join(lines)
