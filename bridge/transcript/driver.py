"""Drive a :class:`~bridge.core.session.Session` with a transcript's entries, the way replay reads
them: the one place that knows how each entry kind drives the session.

Its users: replay, ``bridge check`` and ``bridge diagnose`` (:mod:`bridge.readers`), and recovery
(:mod:`bridge.live.recovery`, which a bridge opened on a ledger runs before it takes new work).
It lives with the format, not the readers, because the live layer calls it and may not import the
readers (tests/test_layers.py); it uses only the core and the format's :class:`Entry`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from bridge.core.events import NO_EVENTS, Event, ReceiptReady
from bridge.core.framing import RAW_LINE_NOTE, RAW_WHYS, RawLine, RawWhy, raw_from_text
from bridge.core.prompts import PromptState
from bridge.core.receipts import Receipt, verdict_problem
from bridge.core.session import Session
from bridge.transcript.format import Entry, Header


def session_for(header: Header) -> Session:
    """A session for a transcript with ``header``, collecting as replay does."""
    return Session(header.clearing, collect=True, dialogs=header.dialogs)


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
