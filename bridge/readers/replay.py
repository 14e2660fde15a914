"""Replay a transcript through a :class:`~bridge.core.session.Session` (SPEC §6).

The result is the tracker's own output (``overlaps``, ``working``, ``settled``,
with the seed's key names) and the bridge-level receipt of every prompt in the
transcript. A decision the session cannot make from the evidence (the live
bridge gave up after a timeout) is taken from the ``receipt`` entry the journal
recorded before the ``release``; a prompt whose story the transcript does not
finish is ``pending``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs

from bridge.core.events import NO_EVENTS, Event, ReceiptReady
from bridge.core.framing import RAW_LINE_NOTE, RAW_WHYS, RawLine, RawWhy, raw_from_text
from bridge.core.prompts import PromptState
from bridge.core.receipts import Receipt, verdict_problem
from bridge.core.session import Session
from bridge.core.wire import Wire, form
from bridge.core.words import State
from bridge.transcript import Entry, TranscriptError, open_transcript


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


class Driver:
    """Feed a transcript's entries to a :class:`Session`, the way replay reads them.

    The one place that knows how each entry kind drives the session (replay and
    ``bridge diagnose`` both use it). :meth:`feed` takes one entry and returns
    the session's events for it; a ``receipt`` entry for a prompt that was
    never sent (queue-full, closing, ...) is returned as a :class:`ReceiptReady`
    too, since that recorded receipt is the prompt's only story.

    ``bounded=False`` (replay) keeps every prompt in :attr:`story`, in order of
    first appearance. ``bounded=True`` (diagnose on a journal of any size) keeps
    nothing per prompt once its story is over: no story, and a recorded receipt
    is forgotten at its prompt's release.
    """

    def __init__(self, session: Session, *, bounded: bool = False) -> None:
        self.session = session
        self.bounded = bounded
        # Every prompt in order of first appearance: a sent prompt's state, or
        # the receipt recorded for one that was never sent (queue-full, ...).
        self.story: list[PromptState | Receipt] = []
        self.sent_ids: set[Any] = set()
        self.recorded: dict[Any, dict[str, Any]] = {}
        #: Recorded receipts whose state and reason are no verdict: (journal line, request, why).
        self.invalid: list[tuple[int, Any, str]] = []
        # The journal's ``raw-line`` note: the kind and length of the next recv_raw's line.
        self._raw: tuple[RawWhy, int] | None = None

    def feed(self, entry: Entry) -> Sequence[Event]:
        session = self.session
        kind, value = entry.kind, entry.value
        if kind == "recv":
            return session.observe(value, t=entry.t)[1]
        if kind == "updates":
            session.observe_updates(value)
            return NO_EVENTS
        if kind == "send":
            events = session.send(value, t=entry.t)
            if value.get("type") == "prompt":
                request = value.get("id")
                self.sent_ids.add(request)
                if not self.bounded:
                    self.story.append(session.open[request])
            return events
        if kind == "recv_raw":
            raw = raw_from_text(value)
            if self._raw is not None:
                raw, self._raw = RawLine(self._raw[0], value, self._raw[1]), None
            return session.observe(raw, t=entry.t)[1]
        if kind == "release":
            recorded = self.recorded.pop(value, None) if self.bounded else self.recorded.get(value)
            return session.release(value, t=entry.t, recorded=recorded)
        if kind == "exit":
            code = value.get("code") if isinstance(value, dict) else None
            sig = value.get("signal") if isinstance(value, dict) else None
            return session.engine_exited(
                code if isinstance(code, int) else None, sig if isinstance(sig, int) else None, t=entry.t
            )
        if kind == "stderr":
            if isinstance(value, str):
                session.stderr(value)
            return NO_EVENTS
        if kind == "receipt" and isinstance(value, dict):
            request = value.get("request")
            problem = verdict_problem(value.get("state"), value.get("reason"))
            if problem is not None:
                # No receipt's verdict (an edited or damaged journal): never taken as the prompt's
                # story (building it raised, and stopped replay, --check, diagnose and conform
                # with exit 70); the readers name it (issue 42).
                self.invalid.append((entry.line, request, problem))
                return NO_EVENTS
            if request not in self.sent_ids:
                if not self.bounded:
                    self.recorded[request] = value
                try:
                    receipt = Receipt.from_json(value)
                except Exception:
                    return NO_EVENTS
                if not self.bounded:
                    self.story.append(receipt)
                return (ReceiptReady(receipt),)
            self.recorded[request] = value
            if self.bounded:
                # Its prompt's story ends with this record (and its release).
                self.sent_ids.discard(request)
            return NO_EVENTS
        if kind == "note":
            if isinstance(value, dict) and value.get("event") == RAW_LINE_NOTE:
                why, size = value.get("why"), value.get("bytes")
                if why in RAW_WHYS and type(size) is int and size >= 0:
                    self._raw = (why, size)
                return NO_EVENTS
            return session.note(value, t=entry.t)
        return NO_EVENTS


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
