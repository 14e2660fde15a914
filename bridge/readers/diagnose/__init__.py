"""``bridge diagnose FILE``: every signal, gap and unknown receipt in a journal, in words.

A transcript (a fixture, or a live bridge's journal, lean or full) is driven
through a :class:`~bridge.core.session.Session` exactly as ``bridge replay`` does
(the shared :class:`~bridge.readers.replay.Driver`), and every event worth a person's
attention becomes a *finding*:

- every overlap the tracker raises (O1-O6, ``aborted-without-stop``), every gap,
  every ack whose disposition is not ``started``, every seal diagnostic
  (``extension_ui_request``, ``extension_error``);
- what the live bridge recorded that replay cannot recompute: a seal check with
  problems, an ``engine-down`` signal, an engine that exited with an error code
  or a signal;
- every receipt that is not certain: ``pending`` (the transcript does not finish
  the prompt's story), ``delivery-unknown`` and ``outcome-unknown``;
- every run the bridge stopped itself (``failed`` / ``timeout`` and ``failed`` /
  ``closing``, SPEC section 5, as the session decides them from the journal's
  ``stop`` notes): which stop, why (its note), and what made the bridge close
  (its ``closing`` note);
- a journal the bridge could not write (a ``journal-failed`` note), and a live
  bridge's journal (one with an ``engine-start`` note) that ends without the
  ``bridge-closed`` note a cleanly closed bridge writes last.

Each finding says what happened in plain words (specific to the signal and its
``why`` / ``cause``), shows the evidence -- the observations around it (3 before,
2 after) with the bridge's own entries between them -- and the slot's state at
that moment, and lists the likely causes with what to check (the journal
header's pin and seal, the seal-check note, gaps, stderr, exits). A summary ends
the report. ``--json`` prints the same as one object ``{"findings", "summary"}``;
``--html OUT`` writes a self-contained page with a timeline.

Memory is bounded: the file is streamed, only a sliding window of recent entries
is kept for the evidence, and nothing per prompt outlives its story (the driver
runs ``bounded``). Findings keep their evidence; past :data:`MAX_FINDINGS` they
are only counted.

Exit status: 0 when the file was read, whatever it contains; 2 when it is not a
readable transcript (``FILE:LINE: what is wrong`` on stderr, like ``replay``).
"""

from __future__ import annotations

import argparse
import os
import signal as _signal
import sys
import time
from collections import deque
from importlib import resources
from typing import IO, Any, Final

import attrs
import orjson

from bridge.core.receipts import Receipt
from bridge.core.session import (
    Diagnostic,
    DispositionSignal,
    GapOpened,
    PromptState,
    ReceiptReady,
    SealBroken,
    Session,
)
from bridge.core.tracker import Overlap
from bridge.readers.replay import Driver, pending_receipt
from bridge.transcript import Entry, Header, TranscriptError, dumps, open_transcript

#: Observations shown before and after the one a finding is about.
BEFORE: Final = 3
AFTER: Final = 2
#: Entries the sliding window holds at most (observations and the bridge's own
#: entries between them); a flood of stderr lines cannot grow it.
WINDOW_MAX: Final = 32
#: Entries recorded after a finding's focus at most (while waiting for AFTER observations).
AFTER_MAX: Final = 16
#: Characters of one raw line kept in a finding's evidence (engine lines can be MiB).
RAW_MAX: Final = 1000
#: Findings kept with their evidence; later ones are only counted.
MAX_FINDINGS: Final = 1000
#: stderr lines remembered for "the last stderr lines before it".
STDERR_TAIL: Final = 5
#: Seconds between progress updates on a terminal.
PROGRESS_EVERY: Final = 0.25

#: States a controller cannot act on without doubt: each gets a finding.
UNCERTAIN: Final = frozenset({"pending", "delivery-unknown", "outcome-unknown"})
#: Reasons of a ``failed`` receipt whose run the bridge itself stopped (SPEC section 5):
#: each gets a finding too. They are also the ``by`` of the bridge's ``stop`` notes.
BRIDGE_STOPS: Final = frozenset({"timeout", "closing"})
#: Stop notes remembered by stop id for the receipt that names them (a stop's
#: receipt follows it within its prompt's story, so the latest few are enough).
STOPS_KEPT: Final = 256
#: Closing notes remembered (the first says what made the bridge close).
CLOSING_KEPT: Final = 4

#: What made the bridge close, by the ``why`` of its ``closing`` note.
_CLOSING_WORDS: Final = {
    "signal": "it got a signal",
    "close": "its controller closed it (the API's close, a shutdown command or the end of its input)",
    "drain-timeout": "the drain's bound (--drain-timeout) passed",
    "journal": "its journal could not be written",
}

_GAP_WORDS: Final = {
    "malformed": "malformed JSON",
    "oversize": "an oversize line, over the line limit",
    "invalid-utf8": "invalid UTF-8",
    "not-object": "JSON, but not an object",
}


# --------------------------------------------------------------------------
# What one journal entry looks like to a person


def _short(value: Any, limit: int = 80) -> str:
    text = value if isinstance(value, str) else dumps(value).decode("utf-8", "replace")
    text = text.replace("\n", "\\n")
    return text if len(text) <= limit else text[: limit - 1] + "…"


def describe(kind: str, value: Any) -> tuple[str, str]:
    """``(type, summary)`` of one journal entry: the few facts that matter."""
    if kind == "recv":
        if not isinstance(value, dict):
            return "not-object", f"JSON but not an object: {_short(value)}"
        typ = value.get("type")
        name = typ if isinstance(typ, str) else "?"
        if name == "response":
            words = [
                f"response {value.get('command')} id={_short(value.get('id'), 40)} success={_short(value.get('success'))}"
            ]
            data = value.get("data")
            if isinstance(data, dict) and "disposition" in data:
                words.append(f"disposition={_short(data.get('disposition'))}")
            if value.get("error") is not None:
                words.append(f"error={_short(value.get('error'), 80)}")
            return name, " ".join(words)
        if name in ("message_start", "message_end", "turn_end"):
            message = value.get("message")
            if isinstance(message, dict):
                words = [f"{name} role={_short(message.get('role'), 30)}"]
                if message.get("role") == "assistant" and name != "message_start":
                    words.append(f"stopReason={_short(message.get('stopReason'), 30)}")
                if message.get("errorMessage"):
                    words.append(f"error={_short(message.get('errorMessage'), 60)}")
                return name, " ".join(words)
        if name == "agent_end":
            return name, f"agent_end willRetry={_short(value.get('willRetry'))}"
        if name == "agent_settled":
            return name, f"agent_settled aborted={_short(value.get('aborted'))}"
        if name == "queue_update":
            s, f = value.get("steering"), value.get("followUp")
            n = len(s) if isinstance(s, list) else "?"
            m = len(f) if isinstance(f, list) else "?"
            return name, f"queue_update steering={n} followUp={m}"
        if name == "extension_ui_request":
            return (
                name,
                f"extension_ui_request method={_short(value.get('method'), 30)} id={_short(value.get('id'), 30)}",
            )
        if name == "extension_error":
            return name, f"extension_error {_short(value.get('error'), 80)}"
        if name in ("message_update", "tool_execution_update") and "elided" in value:
            return name, f"{name} (elided, {value.get('elided')} bytes)"
        if name.startswith("tool_execution"):
            return name, f"{name} tool={_short(value.get('toolName'), 30)}"
        if name.startswith("auto_retry"):
            extra = " ".join(
                f"{k}={_short(value.get(k), 40)}" for k in ("attempt", "success", "errorMessage") if k in value
            )
            return name, f"{name} {extra}".rstrip()
        return name, name
    if kind == "recv_raw":
        return "raw", f"not a JSON object: {_short(value)}"
    if kind == "send":
        cmd = value.get("type") if isinstance(value, dict) else None
        ident = value.get("id") if isinstance(value, dict) else None
        return "send", f"bridge sent {cmd}" + (f" id={_short(ident, 40)}" if ident is not None else " (no id)")
    if kind == "release":
        return "release", f"bridge released {_short(value, 40)}"
    if kind == "exit":
        v = value if isinstance(value, dict) else {}
        return "exit", f"engine exited: {_exit_words(v.get('code'), v.get('signal'))}"
    if kind == "stderr":
        return "stderr", f"stderr: {_short(value, 100)}"
    if kind == "receipt":
        v = value if isinstance(value, dict) else {}
        reason = f" ({v.get('reason')})" if v.get("reason") else ""
        return "receipt", f"journal receipt {_short(v.get('request'), 40)}: {v.get('state')}{reason}"
    if kind == "note":
        if isinstance(value, dict):
            return "note", _note_summary(value)
        return "note", f"note: {_short(value, 100)}"
    return kind, f"{kind}: {_short(value)}"


def _note_summary(value: dict[str, Any]) -> str:
    event = value.get("event")
    if event == "stop":
        return (
            f"note: the bridge's stop {_q(value.get('stop'))} for {_q(value.get('request'))}, "
            f"by {_q(value.get('by'))}: {_short(value.get('why') or '', 70)}"
        )
    if event == "closing":
        detail = f" ({_short(value['detail'], 40)})" if value.get("detail") is not None else ""
        why = value.get("why")
        words = _CLOSING_WORDS.get(why, _short(why, 40)) if isinstance(why, str) else _short(why, 40)
        return f"note: the bridge is closing: {words}{detail}"
    if event == "journal-failed":
        return f"note: the journal could not be written: {_short(value.get('error'), 80)}"
    if event == "bridge-closed":
        return f"note: the bridge closed ({_short(value.get('receipts'))} receipt(s))"
    return f"note {value.get('event', '')}: {_short(value, 90)}"


def _raw(kind: str, value: Any) -> str:
    if kind == "recv_raw" or kind == "stderr":
        text = value
    elif kind == "recv":
        text = dumps(value).decode("utf-8", "replace")
    else:
        text = dumps({kind: value}).decode("utf-8", "replace")
    if len(text) > RAW_MAX:
        text = text[:RAW_MAX] + f"… [{len(text) - RAW_MAX} more characters]"
    return text


def _exit_words(code: Any, sig: Any) -> str:
    if isinstance(sig, int) and sig:
        try:
            name = _signal.Signals(sig).name
        except ValueError:
            name = f"signal {sig}"
        return f"killed by {name} (signal {sig})"
    return f"code {code}"


def _fmt_t(t: float | None) -> str:
    return "t=?" if t is None else f"t={t:.3f}"


def _q(value: Any) -> str:
    """A request or run id as a person reads it."""
    return value if isinstance(value, str) else _short(value, 40)


def classify_gap_text(text: str) -> str:
    """What kind of line a journal's ``recv_raw`` text was (the journal keeps only the text)."""
    if text.startswith(("[oversize line:", "<oversize line:")):
        return "oversize"
    bad_bytes = "\ufffd" in text  # the journal replaced invalid UTF-8 with U+FFFD
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        return "invalid-utf8" if bad_bytes else "malformed"
    if isinstance(value, dict):
        # It parses now, so it was journalled raw for its bytes.
        return "invalid-utf8" if bad_bytes else "malformed"
    return "not-object"


# --------------------------------------------------------------------------
# Findings


@attrs.define
class Finding:
    n: int
    kind: str  # "signal" | "receipt" | "engine" | "seal" | "journal"
    # O1..O6, aborted-without-stop, gap, disposition, seal-diagnostic, seal-check, engine-down, engine-exit,
    # receipt, journal-failed, journal-ends-early
    signal: str
    title: str
    explanation: str
    idx: int | None
    t: float | None
    line: int
    x: float  # where it sits on the timeline (an observation index; .5 between two)
    request: Any = None
    run: str | None = None
    generation: int | None = None
    detail: dict[str, Any] = attrs.field(factory=dict)
    slot: dict[str, Any] = attrs.field(factory=dict)
    evidence: list[dict[str, Any]] = attrs.field(factory=list)
    causes: list[dict[str, str]] = attrs.field(factory=list)
    stderr: list[dict[str, Any]] = attrs.field(factory=list)
    notes: list[str] = attrs.field(factory=list)
    related: list[int] = attrs.field(factory=list)
    after_left: int = AFTER
    after_items: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "n": self.n,
            "kind": self.kind,
            "signal": self.signal,
            "title": self.title,
            "explanation": self.explanation,
            "idx": self.idx,
            "t": self.t,
            "line": self.line,
            "request": self.request,
            "run": self.run,
            "generation": self.generation,
            "detail": self.detail,
            "slot": self.slot,
            "slotWords": slot_words(self.slot),
            "evidence": self.evidence,
            "causes": self.causes,
            "stderr": self.stderr,
            "notes": self.notes,
            "related": self.related,
        }


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
    if s is not None and s.run_id is not None and s.run_id in tr.runs:
        run = tr.runs[s.run_id]
        snap["runStart"], snap["runSettle"] = run.start_idx, run.settle_idx
    if tr.current is not None and tr.current in tr.runs:
        snap["currentRunStart"] = tr.runs[tr.current].start_idx
    return snap


def slot_words(s: dict[str, Any]) -> str:
    if not s:
        return ""
    if s.get("held"):
        parts = [f"{_q(s['request'])} held"]
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
        text = "slot: none held" + (f" (the last prompt, {_q(last)}, was released)" if last is not None else "")
    text += f"; stop link: {_q(s['stop'])}" if s.get("stop") else "; stop link: none"
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


# --------------------------------------------------------------------------
# The timeline the HTML page draws (kept only with --html, and capped)

#: A long journal is drawn in pieces: its first HEAD_TICKS observations, and
#: CONTEXT observations either side of each finding; the rest collapses into
#: breaks. A short one (up to HEAD_TICKS observations) is drawn whole.
HEAD_TICKS: Final = 5000
CONTEXT: Final = 40
#: Caps on what the page holds: ticks, ticks with their raw line, a raw line's
#: length, lanes of each kind (prompts, runs) and engine events.
MAX_TICKS: Final = 20000
MAX_TICK_RAW: Final = 3000
TICK_RAW_MAX: Final = 1500
MAX_LANES: Final = 600
RECENT_LANES: Final = 16


def _tick_class(kind: str, value: Any) -> str:
    if kind == "recv_raw" or not isinstance(value, dict):
        return "gap"
    typ = value.get("type")
    if typ == "response":
        return "response"
    if typ in ("agent_start", "agent_settled", "agent_end"):
        return "run"
    if typ in ("message_start", "message_end"):
        message = value.get("message")
        role = message.get("role") if isinstance(message, dict) else None
        return "user" if role == "user" else "message"
    if typ in ("queue_update", "extension_ui_request", "extension_error"):
        return "alert"
    return "other"


@attrs.define
class Timeline:
    """What the HTML page draws, collected as the file streams by (bounded).

    A tick, a prompt lane or a run lane is kept when it lies in the head of the
    journal or within :data:`CONTEXT` of a finding; the last few of each are held
    back so that a finding can still pull in what came just before it.
    """

    ticks: list[list[Any]] = attrs.field(factory=list)
    prompts: list[dict[str, Any]] = attrs.field(factory=list)
    runs: list[dict[str, Any]] = attrs.field(factory=list)
    engines: list[dict[str, Any]] = attrs.field(factory=list)
    focus: list[float] = attrs.field(factory=list)
    dropped_prompts: int = 0
    dropped_runs: int = 0
    keep_until: float = HEAD_TICKS + 0.5
    _raws: int = 0
    _recent_ticks: deque[tuple[int, float | None, str, Any]] = attrs.field(factory=lambda: deque(maxlen=CONTEXT))
    _recent_prompts: deque[dict[str, Any]] = attrs.field(factory=lambda: deque(maxlen=RECENT_LANES))
    _recent_runs: deque[dict[str, Any]] = attrs.field(factory=lambda: deque(maxlen=RECENT_LANES))
    _open_prompts: dict[Any, dict[str, Any]] = attrs.field(factory=dict)
    _open_runs: dict[str, dict[str, Any]] = attrs.field(factory=dict)

    # -- ticks

    def tick(self, idx: int, t: float | None, kind: str, value: Any) -> None:
        if idx <= self.keep_until:
            self._keep_tick((idx, t, kind, value))
        else:
            self._recent_ticks.append((idx, t, kind, value))

    def _keep_tick(self, tick: tuple[int, float | None, str, Any]) -> None:
        if len(self.ticks) >= MAX_TICKS:
            return
        idx, t, kind, value = tick
        _, summary = describe(kind, value)
        raw = None
        if self._raws < MAX_TICK_RAW:
            self._raws += 1
            raw = _raw(kind, value)
            if len(raw) > TICK_RAW_MAX:
                raw = raw[:TICK_RAW_MAX] + "…"
        self.ticks.append([idx, t, summary, _tick_class(kind, value), raw])

    def add_focus(self, x: float) -> None:
        """A finding at ``x``: keep what is around it."""
        self.focus.append(x)
        lo = x - CONTEXT
        for tick in self._recent_ticks:
            if tick[0] >= lo:
                self._keep_tick(tick)
        self._recent_ticks.clear()
        for lane in self._recent_prompts:
            if (lane["end"] or 0) >= lo:
                self._keep_prompt(lane)
        self._recent_prompts.clear()
        for lane in self._recent_runs:
            if (lane["end"] or 0) >= lo:
                self._keep_run(lane)
        self._recent_runs.clear()
        self.keep_until = max(self.keep_until, x + CONTEXT)

    def segments(self, observations: int) -> list[list[float]]:
        """The index ranges the page draws: the head, and the context of each finding."""
        end = observations + 1
        if observations <= HEAD_TICKS:
            return [[0, end]]
        spans = [[0.0, float(HEAD_TICKS) + 0.5]] + [[max(0.0, x - CONTEXT), min(end, x + CONTEXT)] for x in self.focus]
        spans.sort()
        merged: list[list[float]] = []
        for lo, hi in spans:
            if merged and lo <= merged[-1][1] + 1:
                merged[-1][1] = max(merged[-1][1], hi)
            else:
                merged.append([lo, hi])
        return merged

    # -- prompt lanes

    def _keep_prompt(self, lane: dict[str, Any]) -> None:
        if len(self.prompts) >= MAX_LANES:
            self.dropped_prompts += 1
        else:
            self.prompts.append(lane)

    def prompt_sent(self, request: Any, generation: int, x: float, t: float | None) -> None:
        lane = {
            "request": request,
            "generation": generation,
            "sent": x,
            "t": t,
            "ack": None,
            "working": None,
            "end": None,
            "state": None,
            "reason": None,
            "run": None,
            "finding": None,
        }
        self._open_prompts[_key(request)] = lane

    def prompt_acked(self, request: Any, idx: int) -> None:
        lane = self._open_prompts.get(_key(request))
        if lane is not None and lane["ack"] is None:
            lane["ack"] = idx

    def prompt_working(self, request: Any, idx: int) -> None:
        lane = self._open_prompts.get(_key(request))
        if lane is not None and lane["working"] is None:
            lane["working"] = idx

    def receipt(self, receipt: Receipt, x: float, *, unsent: bool = False, finding: int | None = None) -> None:
        lane = None if unsent else self._open_prompts.pop(_key(receipt.request), None)
        if lane is None:
            lane = {
                "request": receipt.request,
                "generation": receipt.generation,
                "sent": None,
                "t": None,
                "ack": None,
                "working": None,
                "end": None,
                "state": None,
                "reason": None,
                "run": None,
                "finding": None,
            }
        if receipt.ack_idx is not None:
            lane["ack"] = receipt.ack_idx
        if receipt.working_idx is not None:
            lane["working"] = receipt.working_idx
        lane.update(end=x, state=receipt.state, reason=receipt.reason, run=receipt.run, finding=finding)
        start = lane["sent"] if lane["sent"] is not None else x
        if finding is not None or start <= self.keep_until:
            self._keep_prompt(lane)
        else:
            self._recent_prompts.append(lane)

    def open_prompts(self) -> None:
        """The end: prompts still open are drawn up to the end when they are in view."""
        for lane in self._open_prompts.values():
            if lane["sent"] is not None and lane["sent"] <= self.keep_until:
                self._keep_prompt(lane)
        self._open_prompts.clear()

    # -- run lanes

    def _keep_run(self, lane: dict[str, Any]) -> None:
        if len(self.runs) >= MAX_LANES:
            self.dropped_runs += 1
        else:
            self.runs.append(lane)

    def run_started(self, generation: int, run_id: str, idx: int, request: Any) -> None:
        self._open_runs[f"{generation}:{run_id}"] = {
            "id": run_id,
            "generation": generation,
            "start": idx,
            "end": None,
            "how": None,
            "request": request,
        }

    def run_ended(self, generation: int, run_id: str, x: float, how: str) -> None:
        lane = self._open_runs.pop(f"{generation}:{run_id}", None)
        if lane is None:
            return
        lane["end"], lane["how"] = x, how
        if lane["start"] <= self.keep_until:
            self._keep_run(lane)
        else:
            self._recent_runs.append(lane)

    def open_runs(self) -> None:
        for lane in self._open_runs.values():
            if lane["start"] <= self.keep_until:
                self._keep_run(lane)
        self._open_runs.clear()

    def engine(self, event: str, x: float, t: float | None, label: str) -> None:
        if len(self.engines) < MAX_LANES:
            self.engines.append({"event": event, "x": x, "t": t, "label": label})


def _key(request: Any) -> Any:
    try:
        hash(request)
    except TypeError:
        return repr(request)
    return request


# --------------------------------------------------------------------------
# The diagnoser


class Diagnoser:
    """Feed it a transcript's entries in order; it keeps findings and a summary."""

    def __init__(self, path: str, header: Header, *, timeline: bool = False) -> None:
        self.path = path
        self.header = header
        meta = header.meta
        self.engine = meta.get("engine")
        self.pin = meta.get("pin")
        self.version = meta.get("engine_version")
        self.seal = meta.get("seal") if isinstance(meta.get("seal"), dict) else None
        self.driver = Driver(Session(header.clearing, collect=False), bounded=True)
        self.findings: list[Finding] = []
        self.dropped_findings = 0
        self.timeline = Timeline() if timeline else None
        self._window: deque[tuple[str, int, float | None, int | None, Any]] = deque()
        self._window_obs = 0
        self._open: list[Finding] = []
        self._stderr: deque[tuple[float | None, str]] = deque(maxlen=STDERR_TAIL)
        self._gap_findings: dict[int, Finding] = {}
        self._o1_by_run: dict[str, int] = {}
        self._displaced_runs: dict[str, tuple[Any, int]] = {}
        self._shadowed: list[PromptState] = []
        self._o5_items: dict[int, int] = {}
        #: (engine generation, finding) of the first sign that unsealed the engine.
        self._taint_finding: tuple[Any, int] | None = None
        self._seal_checks: dict[Any, list[Any]] = {}
        self._seal_check_finding: dict[Any, Finding] = {}
        self._last_exit: dict[str, Any] | None = None
        self._ext_seen = 0
        self._first_gap: int | None = None
        #: The bridge's own stops by id (its ``stop`` notes), and its ``closing`` notes.
        self._stops: dict[Any, dict[str, Any]] = {}
        self._closing: list[dict[str, Any]] = []
        self._journal_failed: Finding | None = None
        self._journal_end: Finding | None = None
        self.journal_error: str | None = None
        self.closed = False
        self._last_t: float | None = None
        self._n = 0
        self._tracker = self.driver.session.tracker
        self._pos = 0.0
        self.truncated = False
        # Summary counters.
        self.prompts_sent = 0
        self.receipts: dict[str, dict[str, int]] = {}
        self.signals: dict[str, int] = {}
        self.gaps: dict[str, int] = {}
        self.engine_starts = 0
        self.engine_exits = 0
        self.abnormal_exits = 0
        self.engine_down = 0
        self.entries = 0

    # -- feeding ---------------------------------------------------------------

    def feed(self, entry: Entry) -> None:
        self.entries += 1
        if entry.t is not None:
            self._last_t = entry.t
        kind, value = entry.kind, entry.value
        session = self.driver.session
        if kind == "signal":
            # What the live bridge raised. Overlaps, gaps and dispositions are
            # recomputed from the evidence; the rest exists only here.
            self._journal_signal(entry)
            return
        item = (kind, entry.line, entry.t, entry.i, value)
        self._push(item)
        is_obs = kind == "recv" or kind == "recv_raw"
        if is_obs:
            self._pos = float(entry.i or 0)
        else:
            self._pos = session.observations + 0.5
        if kind == "stderr":
            self._stderr.append((entry.t, value))
            return
        if kind == "note":
            self._note(entry)
        elif kind == "exit":
            self.engine_exits += 1
            v = value if isinstance(value, dict) else {}
            self._last_exit = {
                "code": v.get("code"),
                "signal": v.get("signal"),
                "t": entry.t,
                "line": entry.line,
                "stderr": self._stderr_json(),
            }
            if self.timeline is not None:
                self.timeline.engine("exit", self._pos, entry.t, describe(kind, value)[1])
                for lane in list(self.timeline._open_runs.values()):
                    self.timeline.run_ended(lane["generation"], lane["id"], self._pos, "abandoned")
        releasing: PromptState | None = None
        release_snap: dict[str, Any] = {}
        if kind == "release":
            releasing = session.open.get(value) if _hashable(value) else None
            if releasing is not None and releasing.receipt is not None:
                releasing = None
            if releasing is not None:
                release_snap = slot_snapshot(session)
        if kind == "exit":
            self._exit_finding(entry)
        displaced: PromptState | None = None
        displaced_snap: dict[str, Any] = {}
        if kind == "send" and isinstance(value, dict) and value.get("type") == "prompt":
            held = session.held
            if held is not None and held.receipt is None:
                displaced, displaced_snap = held, slot_snapshot(session)
            request = value.get("id")
            earlier = session.open.get(request) if _hashable(request) else None
            if earlier is not None and earlier.receipt is None:
                # The same id sent again: the session forgets the first one by
                # id, but its story still needs an end (replay lists it).
                self._shadowed.append(earlier)
        tracker_before = session.tracker
        current_before = tracker_before.current
        events = self.driver.feed(entry)
        if session.tracker is not self._tracker:
            self._tracker = session.tracker
        if kind == "send" and isinstance(value, dict) and value.get("type") == "prompt":
            self.prompts_sent += 1
            if self.timeline is not None:
                self.timeline.prompt_sent(value.get("id"), session.generation, self._pos, entry.t)
            if displaced is not None:
                self._second_prompt(displaced, displaced_snap, entry, item)
        for event in events:
            self._event(event, entry, item)
        if is_obs and self.timeline is not None:
            self._timeline_obs(entry, tracker_before, current_before)
        if releasing is not None and releasing.receipt is None:
            receipt = pending_receipt(releasing, session)
            self._receipt(receipt, entry, item, snap=release_snap)
        if self._shadowed and kind == "release":
            self._end_shadowed(value, entry, item)

    def _end_shadowed(self, request: Any, entry: Entry | None, item: Any) -> None:
        """Prompts whose id was sent again: pending once their id is released (or at the end)."""
        keep: list[PromptState] = []
        for state in self._shadowed:
            if state.receipt is not None:
                continue
            if entry is None or state.request == request:
                receipt = pending_receipt(state, self.driver.session)
                self._receipt(receipt, entry, item, snap=slot_snapshot(self.driver.session), at_end=entry is None)
            else:
                keep.append(state)
        self._shadowed = keep

    def finish(self, truncated: bool) -> None:
        self.truncated = truncated
        session = self.driver.session
        self._pos = session.observations + 0.5
        self._journal_ends()
        if self._shadowed:
            self._end_shadowed(None, None, None)
        for state in list(session.open.values()):
            if state.receipt is None:
                receipt = pending_receipt(state, session)
                self._receipt(receipt, None, None, snap=slot_snapshot(session), at_end=True)
        self._open.clear()
        if self.timeline is not None:
            self.timeline.open_prompts()
            self.timeline.open_runs()

    # -- the sliding window ------------------------------------------------------

    def _push(self, item: tuple[str, int, float | None, int | None, Any]) -> None:
        window = self._window
        is_obs = item[0] == "recv" or item[0] == "recv_raw"
        if self._open:
            as_json = _item_json(item, False)
            for f in self._open:
                f.evidence.append(as_json)
                f.after_items += 1
                if is_obs:
                    f.after_left -= 1
            self._open = [f for f in self._open if f.after_left > 0 and f.after_items < AFTER_MAX]
        window.append(item)
        if is_obs:
            self._window_obs += 1
            while self._window_obs > BEFORE + 1:
                old = window.popleft()
                if old[0] == "recv" or old[0] == "recv_raw":
                    self._window_obs -= 1
        while len(window) > WINDOW_MAX:
            old = window.popleft()
            if old[0] == "recv" or old[0] == "recv_raw":
                self._window_obs -= 1

    def _evidence_now(self, focus: tuple[str, int, float | None, int | None, Any] | None) -> list[dict[str, Any]]:
        items = list(self._window)
        if focus is None or focus[0] not in ("recv", "recv_raw"):
            # The focus is a bridge entry (or the end): keep BEFORE observations before it.
            obs = sum(1 for it in items if it[0] in ("recv", "recv_raw"))
            while obs > BEFORE and items:
                old = items.pop(0)
                if old[0] in ("recv", "recv_raw"):
                    obs -= 1
        return [_item_json(it, it is focus) for it in items]

    def _stderr_json(self) -> list[dict[str, Any]]:
        return [{"t": t, "text": text if len(text) <= 500 else text[:500] + "…"} for t, text in self._stderr]

    # -- findings ---------------------------------------------------------------

    def _add(self, finding_kw: dict[str, Any], item: Any, *, after: bool = True) -> Finding | None:
        self._n += 1
        if len(self.findings) >= MAX_FINDINGS:
            self.dropped_findings += 1
            return None
        f = Finding(n=self._n, x=self._pos, **finding_kw)
        f.evidence = self._evidence_now(item)
        if self.timeline is not None:
            self.timeline.add_focus(f.x)
        if after:
            self._open.append(f)
        self.findings.append(f)
        return f

    def _count(self, name: str) -> None:
        self.signals[name] = self.signals.get(name, 0) + 1

    def _event(self, event: Any, entry: Entry, item: Any) -> None:
        kind = type(event)
        session = self.driver.session
        if kind is Overlap:
            self._count(event.signal)
            self._overlap(event, entry, item)
        elif kind is GapOpened:
            self._count("gap")
            self._gap(event, entry, item)
        elif kind is DispositionSignal:
            self._count("disposition")
            self._disposition(event, entry, item)
        elif kind is Diagnostic:
            self._count("seal-diagnostic")
            self._ext_seen += 1
            self._diagnostic(event, entry, item)
        elif kind is SealBroken:
            self._sealbroken(event, entry)
        elif kind is ReceiptReady:
            unsent = entry.kind == "receipt"
            self._receipt(event.receipt, entry, item, snap=slot_snapshot(session), unsent=unsent)
        elif self.timeline is not None:
            name = kind.__name__
            if name == "Acked":
                self.timeline.prompt_acked(event.request, event.idx)
            elif name == "Working":
                self.timeline.prompt_working(event.request, event.idx)

    def _base(self, entry: Entry | None, signal: str, kind: str = "signal") -> dict[str, Any]:
        session = self.driver.session
        return {
            "kind": kind,
            "signal": signal,
            "idx": entry.i if entry is not None else None,
            "t": entry.t if entry is not None else None,
            "line": entry.line if entry is not None else 0,
            "generation": session.generation,
            "slot": slot_snapshot(session),
        }

    # -- overlaps

    def _overlap(self, o: Overlap, entry: Entry, item: Any) -> None:
        session = self.driver.session
        tr = session.tracker
        sig, idx, req = o.signal, o.idx, o.request
        d = o.detail
        why = d.get("why")
        run = d.get("run")
        gen = session.generation
        slot = tr.slot
        value = entry.value if isinstance(entry.value, dict) else {}
        related: list[int] = []
        notes: list[str] = []
        causes: list[dict[str, str]] = []
        R = _q(req) if req is not None else "no prompt"
        if sig == "O1":
            if why == "no slot held":
                title = "O1: a run started while no prompt was held"
                last = f" (the last prompt, {R}, had been released)" if req is not None else ""
                text = (
                    f"a run ({run}) started at observation {idx} while no prompt was held{last}: "
                    "something other than the bridge started it."
                )
                causes += [
                    self._c_extension(
                        gen,
                        "an extension started work on its own (typically right after "
                        "the previous prompt's agent_settled)",
                    ),
                    self._c_other_writer("a prompt"),
                    self._c_version(),
                ]
            elif why == "before the slot's ack":
                title = "O1: a run started before the prompt's ack"
                text = (
                    f"a run ({run}) started at observation {idx} after {R} was sent but before its ack: "
                    f"Pi acks a prompt right before that prompt's agent_start, so this run is not {R}'s "
                    "(or the ack was lost)."
                )
                stale = self._stale_ack(req)
                if stale is not None:
                    text += (
                        f" The response just before it (#{stale[0]}) acknowledges prompt {_q(stale[1])}, not "
                        f"{R}: a stale ack, and the run that followed it is not {R}'s."
                    )
                    causes.append(
                        {
                            "cause": f"a stale ack: the response at #{stale[0]} acknowledges prompt "
                            f"{_q(stale[1])}, not {R}, and a run followed it",
                            "check": f"whether {_q(stale[1])} was sent twice or its run was still going when "
                            f"{R} was sent (the evidence above)",
                        }
                    )
                causes += [
                    self._c_extension(gen, "an extension started a run while the prompt waited"),
                    self._c_other_writer("a prompt"),
                    self._c_lost(),
                ]
            else:
                title = "O1: a second run after the prompt's own run"
                own = slot.run_id if slot is not None else None
                settled = tr.runs[own].settle_idx if own in tr.runs else None
                text = (
                    f"a second run ({run}) started at observation {idx} while {R} was still held and already had "
                    f"its own run ({own}"
                    + (f", settled at #{settled}" if settled is not None else "")
                    + "): the engine started more work by itself — the extension-started run the tracker exists for."
                )
                causes += [
                    self._c_extension(gen, "an extension reacted to the prompt's settle by starting a run"),
                    self._c_other_writer("a follow_up or a queued prompt"),
                    self._c_version(),
                ]
        elif sig == "O2":
            title = f"O2: {why}"
            if why == "no slot held":
                text = (
                    f"an agent_settled at observation {idx} settled nothing of ours: no prompt was held"
                    + (f" (the last, {R}, had been released)" if req is not None else "")
                    + (f" and it closed run {run}, not a prompt's" if run else " and no run was open")
                    + ": a settle nobody asked for."
                )
                causes += [self._c_extension(gen, "an extension's own work settled"), self._c_lost(), self._c_version()]
            elif why == "before the slot's ack":
                text = (
                    f"an agent_settled at observation {idx} arrived after {R} was sent but before its ack, with no "
                    f"run open: it cannot be {R}'s settle — a late settle of earlier work or someone else's."
                )
                causes += [
                    self._c_other_writer("a prompt"),
                    self._c_extension(gen, "an extension's work settled"),
                    self._c_lost(),
                ]
            elif why == "a second settle for one ack":
                first = None
                if slot is not None:
                    if slot.run_id in tr.runs and tr.runs[slot.run_id].settle_idx not in (None, idx):
                        first = tr.runs[slot.run_id].settle_idx
                    elif tr.loose_settles and tr.loose_settles[0] != idx:
                        earlier = [i for i in tr.loose_settles if i < idx]
                        first = earlier[-1] if earlier else None
                text = (
                    f"a second agent_settled at observation {idx} for {R}'s single ack"
                    + (f" ({R} had already settled at #{first})" if first is not None else "")
                    + (f", closing run {run}" if run else "")
                    + ": the engine settled twice for one prompt."
                )
                causes += [
                    self._c_extension(gen, "an extension ran and settled its own work"),
                    self._c_version(),
                    self._c_other_writer("a prompt"),
                ]
            elif why == "settle of a run that is not the slot's":
                start = tr.runs[run].start_idx if run in tr.runs else None
                o1 = self._o1_by_run.get(f"{gen}:{run}")
                if o1 is not None:
                    related.append(o1)
                text = (
                    f"run {run}"
                    + (f" (started at #{start}" if start is not None else "")
                    + (f", the O1 of finding {o1})" if o1 is not None else (")" if start is not None else ""))
                    + f" settled at observation {idx}: it was never {R}'s run, so this settle is someone else's "
                    "work ending."
                )
                causes += [
                    self._c_extension(gen, "the run's starter (see the O1 at its start)"),
                    self._c_other_writer("a prompt"),
                ]
            elif why == "the slot's run settled after the slot moved on":
                owner = self._displaced_runs.get(f"{gen}:{run}")
                if owner is not None:
                    related.append(owner[1])
                    text = (
                        f"{_q(owner[0])}'s run ({run}) settled at observation {idx}, after the slot had moved on "
                        f"to {R}, a second prompt written while {_q(owner[0])} held it (finding {owner[1]}): the "
                        "tracker cannot settle a slot on a run that is no longer the slot's."
                    )
                    causes.append(
                        {
                            "cause": "two prompts were on the engine at once",
                            "check": f"the second prompt ({R}) and who sent it (finding {owner[1]})",
                        }
                    )
                else:
                    text = (
                        f"{R}'s run ({run}) settled at observation {idx}, after the bridge had already released "
                        f"{R} (it gave up waiting: a settle timeout or a grace expired): the settle came too late "
                        "to count."
                    )
                    causes.append(
                        {
                            "cause": "the bridge gave up on the prompt before its run settled",
                            "check": f"the receipt recorded for {R} just before its release (reason "
                            "settle-timeout?) and the --timeout / --taint-grace settings; a slow model "
                            "or a hung tool",
                        }
                    )
                    causes.append(self._c_lost())
            else:
                text = f"an agent_settled at observation {idx} settled nothing of {R}'s ({why})."
                causes += [self._c_extension(gen, "an extension's work"), self._c_version()]
        elif sig == "O3":
            title = "O3: a settle while the run still had an open agent_start"
            open_starts = tr.runs[run].open_starts if run in tr.runs else None
            text = (
                f"an agent_settled at observation {idx} arrived while run {run} still had "
                + (f"{open_starts} agent_start(s)" if open_starts is not None else "an agent_start")
                + " without agent_end: the settle does not close the run (it stays current), so "
                f"{R}'s outcome cannot be told."
            )
            causes += [
                self._c_lost("an agent_end was lost"),
                self._c_version(),
                self._c_extension(gen, "an extension's run interleaved with the prompt's"),
            ]
        elif sig == "O4":
            title = "O4: a settle after the ack with no run"
            ack = slot.ack_idx if slot is not None else None
            text = (
                f"{R} was acked"
                + (f" at #{ack}" if ack is not None else "")
                + f" and then an agent_settled at observation {idx} arrived with no agent_start and no failure "
                "message: the prompt settled without any run."
            )
            causes += [
                self._c_extension(gen, "an extension command or prompt template handled the prompt"),
                self._c_lost("the run's agent_start was lost"),
                self._c_version(),
            ]
        elif sig == "O5":
            steering, follow = value.get("steering"), value.get("followUp")
            ns = len(steering) if isinstance(steering, list) else 0
            nf = len(follow) if isinstance(follow, list) else 0
            if d.get("cause") == "queue-update":
                title = "O5: queued items someone else sent"
                text = (
                    f"a queue_update with {d.get('items')} queued item(s) at observation {idx} "
                    f"(steering {ns}, followUp {nf}): someone sent steer/follow_up or a queued prompt — "
                    "the sealed bridge sends none."
                )
                causes += [
                    self._c_other_writer("steer / follow_up, or a prompt while one was running"),
                    self._c_extension(gen, "an extension queued a message"),
                ]
            else:
                title = "O5: an empty queue_update the bridge did not cause"
                clearing = ", ".join(self.header.clearing) or "empty"
                text = (
                    f"an empty queue_update at observation {idx} outside any clear window: no clear_queue of the "
                    f"bridge was awaiting its response (the header's clearing list: {clearing}), so someone else "
                    "cleared a queue, or the engine emptied its queue to deliver what was queued (a user message "
                    "then follows)."
                )
                earlier = self._o5_items.get(gen)
                if earlier is not None:
                    related.append(earlier)
                    text += (
                        f" The item(s) queued earlier on this engine (finding {earlier}) are likely being delivered."
                    )
                causes += [
                    self._c_other_writer("clear_queue (or a queue being drained)"),
                    {
                        "cause": "the bridge's own clear_queue was not recognised",
                        "check": f'the header\'s "clearing" list ({clearing}) and the clear_queue sends/responses '
                        "in the evidence",
                    },
                ]
        elif sig == "O6":
            title = "O6: a second user message inside one run"
            held = session.held
            first = held.working_idx if held is not None and slot is not None and slot.run_id == run else None
            text = (
                f"a second user message started at observation {idx} inside run {run}"
                + (f" (the first, {R}'s, at #{first})" if first is not None else "")
                + f": a steer/follow_up (or an extension) delivered another message into {R}'s run."
            )
            causes += [
                self._c_other_writer("steer / follow_up (look for a queue_update before it)"),
                self._c_extension(gen, "an extension injected a user message"),
            ]
        elif sig == "aborted-without-stop":
            title = "aborted-without-stop: the run was aborted by someone else"
            text = (
                f"an assistant message ended 'aborted' at observation {idx}"
                + (f" in run {run}" if run else " with no run open")
                + " while no stop of this controller was linked: something other than the bridge aborted it."
            )
            causes += [
                self._c_other_writer("an abort"),
                self._c_extension(gen, "an extension aborted the run"),
                self._c_version(),
            ]
        else:
            title = f"{sig}"
            text = f"{sig} at observation {idx}: {o.to_json()}"
        f = self._add(
            {
                **self._base(entry, sig),
                "title": title,
                "explanation": text,
                "request": req,
                "run": run,
                "detail": o.to_json(),
                "causes": causes,
                "related": related,
                "notes": notes,
                "stderr": self._stderr_json(),
            },
            item,
        )
        if f is not None and sig == "O1" and run is not None:
            self._o1_by_run[f"{gen}:{run}"] = f.n
        if f is not None and sig == "O5" and d.get("cause") == "queue-update":
            self._o5_items[gen] = f.n

    def _second_prompt(self, held: PromptState, snap: dict[str, Any], entry: Entry, item: Any) -> None:
        """A prompt written while another still held the slot (only a deliberate send_raw does it)."""
        self._count("second-prompt")
        session = self.driver.session
        new = entry.value.get("id")
        old = _q(held.request)
        state = f"acked at #{held.ack_idx}" if held.ack_idx is not None else "not yet acked"
        if snap.get("run"):
            state += f", its run {snap['run']}"
        if held.working_idx is not None:
            state += f", working since #{held.working_idx}"
        text = (
            f"prompt {_q(new)} was written (journal line {entry.line}) while {old} still held the slot "
            f"({state}, no receipt yet): two prompts on one engine break the seal, so from here no run can be "
            f"told apart; {old} keeps its run and settles outcome-unknown on it."
        )
        f = self._add(
            {
                **self._base(entry, "second-prompt"),
                "title": f"a second prompt ({_q(new)}) while {old} held the slot",
                "explanation": text,
                "request": held.request,
                "run": snap.get("run"),
                "slot": snap,
                "detail": {
                    "signal": "second-prompt",
                    "request": new,
                    "held": held.request,
                    "after": session.observations,
                },
                "causes": [
                    {
                        "cause": "a prompt written around the bridge's queue: Bridge.send_raw (tests and "
                        "seal-failure recordings do this on purpose) or a second writer on the "
                        "engine's stdin",
                        "check": "who sent it: the journal records it as a 'bridge sent' entry, so it came "
                        "through the bridge's own send path; look for send_raw in the controller",
                    },
                    self._c_other_writer("a prompt"),
                ],
                "stderr": self._stderr_json(),
            },
            item,
        )
        if f is not None and snap.get("run"):
            self._displaced_runs[f"{session.generation}:{snap['run']}"] = (held.request, f.n)

    def _stale_ack(self, request: Any) -> tuple[int, Any] | None:
        for kind, _line, _t, idx, value in reversed(self._window):
            if (
                kind == "recv"
                and isinstance(value, dict)
                and value.get("type") == "response"
                and value.get("command") == "prompt"
                and value.get("id") != request
                and idx is not None
            ):
                return idx, value.get("id")
        return None

    # -- gaps, dispositions, diagnostics

    def _gap(self, g: GapOpened, entry: Entry, item: Any) -> None:
        why = g.why
        if entry.kind == "recv_raw" and isinstance(entry.value, str) and why in ("malformed", "oversize"):
            why = classify_gap_text(entry.value)
        self.gaps[why] = self.gaps.get(why, 0) + 1
        if self._first_gap is None:
            self._first_gap = g.idx
        f = self._add(
            {
                **self._base(entry, "gap"),
                "title": "",
                "explanation": "",
                "request": self._held_request(),
                "detail": {**g.to_json(), "why": why},
                "stderr": self._stderr_json(),
            },
            item,
        )
        if f is not None:
            self._gap_findings[g.idx] = f
            self._word_gap(f)

    def _word_gap(self, f: Finding) -> None:
        why = f.detail.get("why")
        idx = f.idx
        size = f.detail.get("bytes")
        words = _GAP_WORDS.get(why, why)
        f.title = f"gap: observation {idx} was not a JSON object ({words})"
        f.explanation = (
            f"observation {idx} was not a JSON object ({words}"
            + (f", {size} bytes" if size else "")
            + "): lines may be missing from here on; "
            "no receipt on this engine settles on evidence after it."
        )
        if why == "oversize":
            first = {
                "cause": "one line longer than the line limit (a huge tool output or message list)",
                "check": "the line's size above and the bridge's line limit (64 MiB by default); the tool that "
                "produced it",
            }
        elif why == "invalid-utf8":
            first = {
                "cause": "bytes that are not UTF-8 on the engine's stdout (binary tool output, a broken encoder)",
                "check": "the replaced characters (U+FFFD) in the line; what the running tool printed",
            }
        elif why == "not-object":
            first = {
                "cause": "something wrote a bare JSON value (not an object) to the engine's stdout",
                "check": "extensions or libraries printing to stdout; the engine version",
            }
        else:
            first = {
                "cause": "something printed non-JSON text to the engine's stdout (debug output from the engine, "
                "an extension or a library), or a line was cut",
                "check": "the text of the line above and the stderr lines around that time",
            }
        f.causes = [first, self._c_extension(f.generation, "an extension printing to stdout"), self._c_version()]

    def _disposition(self, d: DispositionSignal, entry: Entry, item: Any) -> None:
        R = _q(d.request)
        disp = d.disposition
        gen = self.driver.session.generation
        if disp == "queued":
            text = (
                f"{R}'s ack at observation {d.idx} said disposition 'queued', not 'started': Pi queued the prompt "
                "behind other work, so something was already running that the bridge did not start."
            )
            causes = [
                self._c_other_writer("a prompt (its run was going)"),
                self._c_extension(gen, "an extension's run was in progress"),
            ]
        elif disp == "handled":
            text = (
                f"{R}'s ack at observation {d.idx} said disposition 'handled', not 'started': Pi handled the "
                "prompt without a run (an extension command or a prompt template consumed it)."
            )
            causes = [
                self._c_extension(gen, "an extension command or a prompt template"),
                {
                    "cause": "the prompt text looks like a command",
                    "check": "whether the prompt text starts with '/' (Pi treats it as a command)",
                },
            ]
        else:
            text = (
                f"{R}'s ack at observation {d.idx} carried disposition {_short(disp)}, not 'started': "
                "a disposition the pinned Pi does not send."
            )
            causes = [self._c_version()]
        self._add(
            {
                **self._base(entry, "disposition"),
                "title": f"disposition: {R} was acked {_short(disp) if not isinstance(disp, str) else repr(disp)}, not 'started'",
                "explanation": text,
                "request": d.request,
                "detail": d.to_json(),
                "causes": causes,
                "stderr": self._stderr_json(),
            },
            item,
        )

    def _diagnostic(self, diag: Diagnostic, entry: Entry, item: Any) -> None:
        gen = self.driver.session.generation
        if diag.kind == "extension-ui":
            method = diag.detail.get("method")
            text = (
                f"an extension_ui_request (method {_short(method)}, id {_short(diag.detail.get('id'))}) at "
                f"observation {diag.idx}: an extension is loaded in the engine and asked the UI for something"
            )
            text += " — the bridge answered the dialog 'cancelled'." if diag.answer is not None else "."
        else:
            text = (
                f"an extension_error at observation {diag.idx} ({_short(diag.detail.get('error'), 120)}): an "
                "extension is loaded in the engine and failed."
            )
        self._add(
            {
                **self._base(entry, "seal-diagnostic"),
                "title": f"seal diagnostic: {diag.kind}",
                "explanation": text,
                "request": self._held_request(),
                "detail": diag.to_json(),
                "causes": [self._c_extension(gen, "an extension is loaded despite the seal")],
                "stderr": self._stderr_json(),
            },
            item,
        )

    def _sealbroken(self, sb: SealBroken, entry: Entry) -> None:
        target = None
        for f in reversed(self.findings):
            if entry.kind == "send" and f.signal == "second-prompt" and f.line == entry.line:
                target = f
                break
            if f.idx == sb.idx and f.kind == "signal" and entry.kind != "send":
                target = f
                break
        if target is None:
            return
        held = (
            f"the held prompt {_short(sb.request)} settles outcome-unknown ({sb.cause})"
            if sb.request is not None
            else "no prompt was held, so no receipt is tainted"
        )
        target.notes.append(
            f"this is the first sign on engine generation {target.generation}: the engine counts as unsealed "
            f"({sb.cause}) from here — {held}, and the live bridge recycles the engine before the next prompt."
        )
        if self._taint_finding is None or self._taint_finding[0] != target.generation:
            self._taint_finding = (target.generation, target.n)

    # -- receipts

    def _receipt(
        self,
        r: Receipt,
        entry: Entry | None,
        item: Any,
        *,
        snap: dict[str, Any],
        unsent: bool = False,
        at_end: bool = False,
    ) -> None:
        by = self.receipts.setdefault(r.state, {})
        reason = r.reason or "-"
        by[reason] = by.get(reason, 0) + 1
        if not _explained(r):
            if self.timeline is not None:
                self.timeline.receipt(r, self._pos, unsent=unsent)
            return
        session = self.driver.session
        R = _q(r.request)
        run = r.run
        tr = session.tracker
        run_obj = tr.runs.get(run) if run is not None and run in tr.runs else None
        acked = f"acked at #{r.ack_idx}" if r.ack_idx is not None else "never acked"
        gen = r.generation if r.generation is not None else session.generation
        if r.state == "pending":
            title = f"receipt: {R} is pending"
            text, causes, related = self._pending_words(r, R, acked, entry, at_end)
        elif r.reason in BRIDGE_STOPS:
            title = f"receipt: {R}: {r.state} ({r.reason}): stopped by the bridge, not the controller"
            text, causes, related = self._bridge_stop_words(r, R)
        else:
            title = f"receipt: {R}: {r.state} ({r.reason})"
            text, causes, related = self._receipt_words(r, R, run_obj, acked, gen, entry)
        f = self._add(
            {
                **self._base(entry, "receipt", kind="receipt"),
                "title": title,
                "explanation": text,
                "request": r.request,
                "run": run,
                "generation": gen,
                "slot": snap,
                "detail": r.to_json(),
                "causes": causes,
                "related": related,
                "stderr": self._stderr_json(),
            },
            item,
            after=entry is not None,
        )
        if f is not None and r.reason in BRIDGE_STOPS:
            self._show_stop_note(f, r.stop)
        if self.timeline is not None:
            f = self.findings[-1] if self.findings else None
            self.timeline.receipt(
                r,
                self._pos,
                unsent=unsent,
                finding=f.n if f is not None and f.kind == "receipt" and f.request == r.request else None,
            )

    def _show_stop_note(self, f: Finding, stop: Any) -> None:
        """The bridge's stop note leads the evidence (it is often older than the window)."""
        note = self._stops.get(stop) if _hashable(stop) else None
        if note is not None and all(e["line"] != note["line"] for e in f.evidence):
            f.evidence.insert(0, _item_json(note["item"], False))

    def _pending_words(
        self, r: Receipt, R: str, acked: str, entry: Entry | None, at_end: bool
    ) -> tuple[str, list[dict[str, str]], list[int]]:
        run = r.run
        if not at_end:
            text = (
                f"{R} was released at {_fmt_t(entry.t if entry else None)} with no receipt recorded before "
                f"the release and no settlement in the evidence ({acked}"
                + (f", working since #{r.working_idx}" if r.working_idx is not None else "")
                + "): its outcome is not known from this transcript."
            )
            return (
                text,
                [
                    {
                        "cause": "the bridge gave up on the prompt (a timeout or a grace) and the journal "
                        "holds no receipt for it",
                        "check": "a receipt entry for the request elsewhere in the journal; the bridge's "
                        "--timeout / --ack-timeout settings; an O2 'after the slot moved on' later",
                    }
                ],
                [],
            )
        recorded = self.driver.recorded.get(r.request) if _hashable(r.request) else None
        text = (
            f"the transcript ends while {R} is still open ({acked}"
            + (f", working since #{r.working_idx}" if r.working_idx is not None else ", not working")
            + (f", run {run}" if run else "")
            + ", no settle seen): "
            + (
                "the journal's last line was cut off (the bridge died mid-write)."
                if self.truncated
                else "the bridge was stopped, or the journal ends early."
            )
        )
        if recorded is not None:
            text += (
                f" The live bridge recorded a receipt for it: {recorded.get('state')}"
                + (f" ({recorded.get('reason')})" if recorded.get("reason") else "")
                + "."
            )
        causes = [
            {
                "cause": "the journal ends before the prompt's story does",
                "check": "whether the bridge was killed (no 'bridge-closed' note at the end), the "
                "engine's last stderr lines, and the disk the journal was on",
            }
        ]
        related = [self._journal_end.n] if self._journal_end is not None else []
        return text, causes, related

    def _bridge_stop_words(self, r: Receipt, R: str) -> tuple[str, list[dict[str, str]], list[int]]:
        """A run the bridge stopped itself: which stop, why, when, and what to change."""
        note = self._stops.get(r.stop) if _hashable(r.stop) else None
        why = _stop_why(note, r.reason)
        stop = f" {_q(r.stop)}" if r.stop is not None else ""
        when = (
            f" (journal line {note['line']}, {_fmt_t(note['t'])})"
            if note is not None
            else " (the journal has no stop note for it)"
        )
        text = (
            f"the bridge itself stopped {R}'s run"
            + (f" ({r.run})" if r.run else "")
            + f", not the controller: it sent its own stop{stop}{when} because {why}."
        )
        text += (
            f" The run ended aborted and settled at #{r.settle_idx}."
            if r.settle_idx is not None
            else " The journal shows no settle of the run before the bridge gave its receipt."
        )
        if r.reason == "timeout":
            return text, [self._c_timeout(why)], []
        text += " " + self._closing_words()
        failed = self._journal_failed
        related = [failed.n] if failed is not None and self._closing_why() == "journal" else []
        return text, [self._c_closing()], related

    def _closing_why(self) -> str | None:
        return self._closing[0]["why"] if self._closing else None

    def _closing_words(self) -> str:
        """What made the bridge close, from its first ``closing`` note."""
        if not self._closing:
            return "The journal has no closing note saying why the bridge closed."
        first = self._closing[0]
        why = first["why"]
        words = _CLOSING_WORDS.get(why) if why is not None else None
        if words is None:
            words = f"the note says {_short(why, 80)}" if why is not None else "of something its note does not name"
        detail = first["detail"]
        if detail is None and why == "journal":
            detail = self.journal_error
        return (
            f"The bridge began closing at {_fmt_t(first['t'])} (journal line {first['line']}) because {words}"
            + (f" ({_short(detail, 120)})" if detail is not None else "")
            + "."
        )

    def _receipt_words(
        self, r: Receipt, R: str, run_obj: Any, acked: str, gen: int, entry: Entry | None
    ) -> tuple[str, list[dict[str, str]], list[int]]:
        run = r.run
        reason = r.reason
        causes: list[dict[str, str]] = []
        related: list[int] = []
        settled = f" settled at #{r.settle_idx}" if r.settle_idx is not None else ""
        unsettled = (
            " was cut off when the engine exited"
            if entry is not None and entry.kind == "exit"
            else " had not settled when the bridge gave up"
        )
        if reason in ("overlap", "gap", "disposition") or (reason == "aborted-without-stop" and r.signals):
            sigs = [s for s in r.signals if s.get("signal") not in ("seal-diagnostic",)]
            if sigs:
                named = ", ".join(f"{s.get('signal')} at #{s.get('idx')}" for s in sigs)
                if run is None and not settled:
                    text = (
                        f"{R}'s evidence is tainted by {named}, and {R} never had a run of its own"
                        + (" (its ack said 'handled')" if r.disposition == "handled" else "")
                        + ": the bridge settled it after the taint grace, outcome unknown."
                    )
                else:
                    text = (
                        f"{R}'s evidence is tainted by {named}: its run"
                        + (f" ({run})" if run else "")
                        + (settled or unsettled)
                        + ", but the bridge cannot tell whose work it saw, so the outcome "
                        "is unknown."
                    )
                for s in sigs:
                    for f in self.findings:
                        if f.idx == s.get("idx") and f.signal == s.get("signal") and f.n not in related:
                            related.append(f.n)
                first = self._taint_finding
                if first is not None and first[0] == gen and first[1] not in related:
                    related.insert(0, first[1])
                    text += f" The engine was unsealed first by finding {first[1]}."
            else:
                first = self._taint_finding if self._taint_finding and self._taint_finding[0] == gen else None
                text = (
                    f"the engine was already unsealed ({reason}) when {R} was sent"
                    + (f" — see finding {first[1]}" if first else "")
                    + f": {R}'s run"
                    + (f" ({run})" if run else "")
                    + (settled or unsettled)
                    + " on evidence that can no longer be trusted."
                )
                if first:
                    related.append(first[1])
            causes.append(
                {
                    "cause": f"the {reason} signal(s) named above",
                    "check": "the findings listed as related, and why the engine was not recycled before "
                    f"{R} (a journal replayed on one engine keeps the taint)",
                }
            )
        elif reason == "aborted-without-stop":
            last = run_obj.last_stop if run_obj is not None else None
            text = (
                f"{R}'s run" + (f" ({run})" if run else "") + f"{settled} after an assistant message that ended "
                f"'{last or 'aborted'}', and at the settle no stop of this controller was linked"
                + (
                    f" (the bridge had sent stop {_q(r.stop)}, but the link was cleared before the settle)"
                    if r.stop
                    else ""
                )
                + ": nobody known aborted it."
            )
            cleared = next(
                (
                    it
                    for it in reversed(self._window)
                    if it[0] == "send"
                    and isinstance(it[4], dict)
                    and it[4].get("type") == "abort"
                    and it[4].get("id") is None
                ),
                None,
            )
            if cleared is not None:
                text += f" An abort with no id (journal line {cleared[1]}) cleared the link."
            causes += [
                {
                    "cause": "the stop link was cleared before the settle (an abort with no id, or a release)",
                    "check": "the abort commands the bridge sent (their ids) between the message and the settle",
                },
                self._c_other_writer("an abort"),
            ]
        elif reason == "ack-without-start":
            if run is None:
                text = (
                    f"{R} was {acked} and then the engine wrote a failure message with no run and"
                    f"{settled or ' settled'}: the prompt failed before any run, so the model never got it."
                )
            else:
                text = (
                    f"{R} was {acked} and its run ({run}){settled} without ever showing {R}'s user message: "
                    "there is no evidence the model got the prompt."
                )
            causes += [
                {
                    "cause": "the engine failed before the model was called (provider set-up, auth, a bad model "
                    "id) or a retry ran without the user message",
                    "check": "the error message in the evidence and the stderr lines before it",
                },
                self._c_version(),
            ]
        elif reason == "no-final-assistant-message":
            text = (
                f"{R}'s run ({run}){settled}; it showed {R}'s user message (working at #{r.working_idx}) but no "
                "assistant message ended in it: the model's answer is unknown."
            )
            causes += [self._c_lost("the assistant message_end was lost"), self._c_version()]
        elif reason == "unrecognised-stop-reason":
            last = run_obj.last_stop if run_obj is not None else None
            text = (
                f"the last assistant message of {R}'s run ({run}) ended with stopReason "
                f"{repr(last) if isinstance(last, str) else '(unknown)'}, which is none of stop, length, toolUse, "
                f"error, aborted; the run{settled}."
            )
            causes += [
                self._c_version(),
                {
                    "cause": "a provider returning a stop reason Pi passes through",
                    "check": "the provider and model in the header's seal",
                },
            ]
        elif reason == "engine-exited":
            ex = self._last_exit or {}
            how = _exit_words(ex.get("code"), ex.get("signal")) if ex else "an exit"
            when = _fmt_t(ex.get("t")) if ex else "?"
            if r.state == "outcome-unknown":
                text = (
                    f"the engine exited ({how}) at {when} while {R}'s run"
                    + (f" ({run})" if run else "")
                    + f" was working (since #{r.working_idx}): the run's outcome is lost."
                )
            else:
                text = (
                    f"the engine exited ({how}) at {when} before {R} was working ({acked}): no evidence the model "
                    "got it."
                )
            causes.append(self._c_exit(ex))
            if ex.get("finding"):
                related.append(ex["finding"])
        elif reason == "no-ack":
            text = (
                f"{R} was sent but no ack arrived before the bridge stopped waiting (the ack timeout): no "
                "evidence the engine took it."
            )
            causes += [
                {
                    "cause": "the engine was busy or hung (an extension dialog waiting for an answer, a stuck "
                    "start-up)",
                    "check": "the bridge's --ack-timeout and the stderr lines around then",
                },
                self._c_lost("the ack was lost"),
            ]
        elif reason == "settle-timeout":
            text = (
                f"the bridge stopped waiting for {R}'s run"
                + (f" ({run})" if run else "")
                + f" to settle ({acked}"
                + (f", working since #{r.working_idx}" if r.working_idx else "")
                + "): the settle timeout fired, the bridge sent its stop and recycled the engine."
            )
            causes.append(
                {
                    "cause": "a slow model or a tool that did not finish",
                    "check": "the bridge's --timeout and the last observations before the timeout",
                }
            )
        else:
            text = f"{R}: {r.state} ({reason})."
        return text, causes, related

    # -- engine lifecycle, notes, journal signals

    def _note(self, entry: Entry) -> None:
        value = entry.value
        event = value.get("event") if isinstance(value, dict) else None
        handler = (
            {
                "engine-start": self._note_engine_start,
                "seal-check": self._note_seal_check,
                "stop": self._note_stop,
                "closing": self._note_closing,
                "journal-failed": self._note_journal_failed,
                "bridge-closed": self._note_bridge_closed,
            }.get(event)
            if isinstance(event, str)
            else None
        )
        if handler is not None:
            handler(entry, value)

    def _note_engine_start(self, entry: Entry, value: dict[str, Any]) -> None:
        self.engine_starts += 1
        if self.timeline is not None:
            self.timeline.engine(
                "start", self._pos, entry.t, f"engine start pid {value.get('pid')} generation {value.get('generation')}"
            )

    def _note_seal_check(self, entry: Entry, value: dict[str, Any]) -> None:
        gen = value.get("generation")
        problems = value.get("problems") if isinstance(value.get("problems"), list) else []
        self._seal_checks[gen] = problems
        if not problems:
            return
        self._count("seal-check")
        f = self._add(
            {
                **self._base(entry, "seal-check", kind="seal"),
                "title": f"seal check failed for engine generation {gen}",
                "explanation": (
                    f"the seal check at engine start (generation {gen}) found: "
                    + "; ".join(str(p) for p in problems)
                    + "."
                ),
                "detail": value,
                "causes": [
                    self._c_extension(gen, "extensions or resources the seal should have kept out"),
                    self._c_version(),
                ],
                "stderr": self._stderr_json(),
            },
            (entry.kind, entry.line, entry.t, None, value),
        )
        if f is not None:
            self._seal_check_finding[gen] = f

    def _note_stop(self, entry: Entry, value: dict[str, Any]) -> None:
        """Whose stop the bridge is about to send (its abort follows): kept for the receipt naming it."""
        stop = value.get("stop")
        if not _hashable(stop):
            return
        by = value.get("by")
        self._stops.pop(stop, None)
        self._stops[stop] = {
            "by": by if isinstance(by, str) else None,
            "why": value.get("why"),
            "request": value.get("request"),
            "t": entry.t,
            "line": entry.line,
            "item": (entry.kind, entry.line, entry.t, None, value),
        }
        if len(self._stops) > STOPS_KEPT:
            del self._stops[next(iter(self._stops))]

    def _note_closing(self, entry: Entry, value: dict[str, Any]) -> None:
        if len(self._closing) < CLOSING_KEPT:
            why = value.get("why")
            self._closing.append(
                {
                    "why": why if isinstance(why, str) else None,
                    "detail": value.get("detail"),
                    "t": entry.t,
                    "line": entry.line,
                }
            )

    def _note_bridge_closed(self, entry: Entry, value: dict[str, Any]) -> None:
        self.closed = True

    def _note_journal_failed(self, entry: Entry, value: dict[str, Any]) -> None:
        """The bridge's last, best-effort note: its journal cannot be written."""
        error = value.get("error")
        self.journal_error = _short(error, 300) if error is not None else "no error recorded"
        self._count("journal-failed")
        text = (
            f"the bridge could not write its journal at {_fmt_t(entry.t)}: {self.journal_error}. A journal "
            "failure costs no receipt: the bridge told its controller at once and closed (a running prompt is "
            "stopped: failed, closing), and every prompt still got its receipt on the controller's side; this "
            "journal may hold nothing after this point."
        )
        self._journal_failed = self._add(
            {
                **self._base(entry, "journal-failed", kind="journal"),
                "title": "journal failed: the bridge could not write its journal",
                "explanation": text,
                "detail": value,
                "causes": [_c_journal(self.journal_error)],
                "stderr": self._stderr_json(),
            },
            (entry.kind, entry.line, entry.t, None, value),
        )

    def _journal_ends(self) -> None:
        """A live bridge's journal (it has an engine-start note; fixtures do not) that ends
        without the ``bridge-closed`` note a cleanly closed bridge writes last."""
        if self.closed or not self.engine_starts:
            return
        self._count("journal-ends-early")
        text = (
            "the journal ends before the bridge closed: the bridge was killed, or its journal could not be "
            "written (a full disk, an I/O error); receipts after this point reached the controller only."
        )
        if self.truncated:
            text += " Its last line was cut off mid-write."
        failed = self._journal_failed
        if failed is not None:
            text += f" The bridge noted why its journal failed (finding {failed.n}): {self.journal_error}."
        unsettled = sum(1 for st in [*self.driver.session.open.values(), *self._shadowed] if st.receipt is None)
        if unsettled:
            text += f" {unsettled} prompt(s) sent have no receipt in it (pending, below)."
        self._journal_end = self._add(
            {
                **self._base(None, "journal-ends-early", kind="journal"),
                "t": self._last_t,
                "title": "journal ends before the bridge closed (no bridge-closed note)",
                "explanation": text,
                "detail": {"truncated": self.truncated, "journalError": self.journal_error},
                "causes": self._c_journal_end(),
                "related": [failed.n] if failed is not None else [],
                "stderr": self._stderr_json(),
            },
            None,
            after=False,
        )

    def _c_journal_end(self) -> list[dict[str, str]]:
        created = self.header.meta.get("created")
        when = f"{_fmt_t(self._last_t)} after the header's created time" + (
            f" {_short(created, 40)}" if created is not None else ""
        )
        killed = {
            "cause": "the bridge was killed (SIGKILL, the OOM killer, a crash) before it could close",
            "check": f"the system log (journalctl, dmesg) near the journal's end ({when}) for the OOM killer "
            "or a kill, and whatever ran the bridge",
        }
        running = {
            "cause": "the bridge is still running: the journal was read while being written",
            "check": "whether the bridge process is still alive",
        }
        if self._journal_failed is not None:
            return [_c_journal(self.journal_error), killed, running]
        unwritten = {
            "cause": "the journal could not be written (a full disk, an I/O error) and not even that could be noted",
            "check": "free space on the journal's disk (df -h) and the bridge's stderr: its last line says "
            "why it ended",
        }
        return [killed, unwritten, running]

    def _journal_signal(self, entry: Entry) -> None:
        value = entry.value if isinstance(entry.value, dict) else {}
        name = value.get("signal")
        if name == "gap":
            f = self._gap_findings.get(value.get("idx"))
            why = value.get("why")
            if f is not None and isinstance(why, str) and why != f.detail.get("why"):
                old = f.detail.get("why")
                self.gaps[old] = self.gaps.get(old, 1) - 1
                if not self.gaps[old]:
                    del self.gaps[old]
                self.gaps[why] = self.gaps.get(why, 0) + 1
                f.detail["why"] = why
                if isinstance(value.get("bytes"), int):
                    f.detail["bytes"] = value["bytes"]
                self._word_gap(f)
        elif name == "seal-check":
            gen = value.get("generation")
            f = self._seal_check_finding.get(gen)
            action = value.get("action")
            if f is not None:
                f.notes.append(
                    f"the bridge's seal-check setting was '{action}': "
                    + (
                        "it refused the engine and started another."
                        if action == "refuse"
                        else "it warned and used the engine anyway."
                    )
                )
                return
            problems = value.get("problems") if isinstance(value.get("problems"), list) else []
            self._count("seal-check")
            self._add(
                {
                    **self._base(entry, "seal-check", kind="seal"),
                    "title": f"seal check failed for engine generation {gen}",
                    "explanation": "the seal check at engine start found: " + "; ".join(map(str, problems)) + ".",
                    "detail": value,
                    "causes": [
                        self._c_extension(gen, "extensions or resources the seal should have kept out"),
                        self._c_version(),
                    ],
                    "stderr": self._stderr_json(),
                },
                None,
            )
        elif name == "engine-down":
            self.engine_down += 1
            self._count("engine-down")
            why = value.get("why")
            self._add(
                {
                    **self._base(entry, "engine-down", kind="engine"),
                    "title": "engine down: the bridge gave up on the engine",
                    "explanation": f"the bridge stopped starting engines: {_short(why, 400)}. Every prompt after "
                    "this is rejected (engine-down).",
                    "detail": value,
                    "causes": [
                        self._c_exit(self._last_exit or {}),
                        self._c_version(),
                        {
                            "cause": "the engine cannot be launched (a missing install, a bad model config)",
                            "check": "run tools/setup_pi; the error text above",
                        },
                    ],
                    "stderr": self._stderr_json(),
                },
                None,
            )

    def _exit_finding(self, entry: Entry) -> None:
        v = entry.value if isinstance(entry.value, dict) else {}
        code, sig = v.get("code"), v.get("signal")
        if (code in (0, None)) and not sig:
            return
        self.abnormal_exits += 1
        self._count("engine-exit")
        ex = self._last_exit or {}
        how = _exit_words(code, sig)
        text = f"the engine (generation {self.driver.session.generation}) exited: {how}, at {_fmt_t(entry.t)}."
        if sig == 15:
            text += (
                " SIGTERM is the bridge's second step when an engine does not exit after its stdin closes — "
                "or something else stopped it."
            )
        elif sig == 9:
            text += " SIGKILL: the bridge's last resort, the OOM killer, or someone else."
        elif code not in (0, None):
            text += " A non-zero code: the engine failed (a crash, an unhandled error)."
        tail = ex.get("stderr") or []
        if tail:
            text += (
                " Its last stderr lines: " + " | ".join(_short(s["text"], 120) for s in tail if s["text"].strip()) + "."
            )
        f = self._add(
            {
                **self._base(entry, "engine-exit", kind="engine"),
                "title": f"engine exit: {how}",
                "explanation": text,
                "detail": v,
                "causes": [self._c_exit(ex), self._c_version()],
                "stderr": tail,
            },
            (entry.kind, entry.line, entry.t, None, entry.value),
        )
        if f is not None and self._last_exit is not None:
            self._last_exit["finding"] = f.n

    # -- causes, with what to check -------------------------------------------------------

    def _c_extension(self, gen: Any, cause: str) -> dict[str, str]:
        if self.seal is None:
            where = (
                f"the journal header records no seal (engine {_short(self.engine)}): nothing kept extensions, "
                "skills or prompt templates out"
            )
        else:
            ext = self.seal.get("extensions")
            where = (
                f"the journal header's seal.extensions lists {_short(ext)}: the seal was deliberately opened"
                if ext
                else "the journal header's seal.extensions is empty (none loaded on purpose)"
            )
        problems = self._seal_checks.get(gen)
        if problems is None:
            check = f"no seal-check note for engine generation {gen}"
        elif problems:
            check = f"the seal-check note for generation {gen} found: " + "; ".join(map(str, problems))
        else:
            check = f"the seal-check note for generation {gen} found no problem"
        seen = (
            f"; {self._ext_seen} extension_ui_request / extension_error line(s) so far"
            if self._ext_seen
            else "; no extension_ui_request / extension_error line so far"
        )
        return {"cause": cause, "check": f"{where}; {check}{seen}"}

    def _c_timeout(self, why: str) -> dict[str, str]:
        if "drain" in why.lower() or self._closing_why() == "drain-timeout":
            return {
                "cause": "the bridge was shutting down and the run outlasted the drain's bound",
                "check": "raise --drain-timeout so running prompts can finish when the bridge shuts down (after a "
                "shutdown command or the end of its input)",
            }
        return {
            "cause": "the run took longer than the prompt's timeout",
            "check": 'raise --timeout (or the prompt\'s "timeout") if the run needs longer; otherwise the last '
            "observations before the stop (a slow model, a tool that did not finish)",
        }

    def _c_closing(self) -> dict[str, str]:
        why = self._closing_why()
        if why == "signal":
            return {
                "cause": "the bridge was sent a signal while the prompt ran",
                "check": "what sent it (a service manager stopping the bridge, Ctrl-C in its terminal, a parent "
                "process); to let running prompts finish, end the bridge with a shutdown command or the "
                "end of its input (a drain, bounded by --drain-timeout) instead of a signal",
            }
        if why == "close":
            return {
                "cause": "the controller closed the bridge while the prompt ran",
                "check": "the controller's close: await the receipts of running prompts before closing the bridge",
            }
        if why == "drain-timeout":
            return {
                "cause": "the drain's bound passed while the prompt ran",
                "check": "raise --drain-timeout so running prompts can finish when the bridge shuts down",
            }
        if why == "journal":
            return _c_journal(self.journal_error)
        return {
            "cause": "the bridge was closing",
            "check": "the bridge's stderr: its last line says why it ended"
            + (f" (the closing note says {_short(why, 80)})" if why is not None else ""),
        }

    def _c_other_writer(self, what: str) -> dict[str, str]:
        return {
            "cause": f"someone other than the bridge sent the engine {what}",
            "check": "whether anything else can write to the engine's stdin (the journal records only the "
            "bridge's own sends: a command in the evidence with no 'bridge sent' entry before it came "
            "from elsewhere)",
        }

    def _c_version(self) -> dict[str, str]:
        if self.version is None:
            from bridge.profiles.pi import PI_PIN

            check = (
                f"the header records no engine_version (engine {_short(self.engine)}): compare the engine that "
                f"ran with the pinned Pi {self.pin or PI_PIN}"
            )
        elif self.pin is not None and self.version != self.pin:
            check = (
                f"the header's engine_version {self.version} differs from the pin {self.pin}: the pinned "
                "engine's behaviour cannot be assumed"
            )
        else:
            check = f"the header's engine_version {self.version} matches the pin {self.pin}: unlikely"
        return {"cause": "an engine that is not the pinned version behaves differently", "check": check}

    def _c_lost(self, what: str = "lines were lost") -> dict[str, str]:
        gaps = sum(self.gaps.values())
        where = f"{gaps} gap(s) so far, the first at #{self._first_gap}" if gaps else "no gap so far"
        tail = list(self._stderr)
        err = (
            "; the last stderr lines: " + " | ".join(_short(text, 80) for _, text in tail[-3:])
            if tail
            else "; no stderr line so far"
        )
        return {"cause": what, "check": where + err}

    def _c_exit(self, ex: dict[str, Any]) -> dict[str, str]:
        if not ex:
            return {"cause": "the engine exited", "check": "the exit entry and the stderr lines before it"}
        tail = ex.get("stderr") or []
        err = (" | ".join(_short(s["text"], 100) for s in tail if s["text"].strip())) if tail else "none"
        return {
            "cause": f"the engine exited ({_exit_words(ex.get('code'), ex.get('signal'))} at "
            f"{_fmt_t(ex.get('t'))}, journal line {ex.get('line')})",
            "check": f"the last stderr lines before it: {err}",
        }

    # -- helpers ---------------------------------------------------------------------------

    def _held_request(self) -> Any:
        s = self.driver.session.tracker.slot
        return s.request if s is not None else None

    def _timeline_obs(self, entry: Entry, tracker_before: Any, current_before: str | None) -> None:
        tl = self.timeline
        assert tl is not None
        session = self.driver.session
        tr = session.tracker
        idx = entry.i or 0
        tl.tick(idx, entry.t, entry.kind, entry.value)
        gen = session.generation
        if tr is not tracker_before and current_before is not None:
            tl.run_ended(gen, current_before, idx - 0.5, "abandoned")
            current_before = None
        if current_before is not None and tr.current != current_before:
            run = tr.runs.get(current_before)
            tl.run_ended(gen, current_before, idx, "settled" if run is not None and run.settle_idx else "ended")
        if tr.current is not None and tr.current != current_before:
            run = tr.runs[tr.current]
            slot = tr.slot
            request = slot.request if slot is not None and slot.run_id == run.id else None
            tl.run_started(gen, run.id, idx, request)

    # -- the report ------------------------------------------------------------------------

    def summary(self) -> dict[str, Any]:
        total = sum(sum(v.values()) for v in self.receipts.values())
        return {
            "file": self.path,
            "engine": {
                "name": self.engine,
                "pin": self.pin,
                "version": self.version,
                "sealed": self.seal is not None,
                "extensions": self.seal.get("extensions") if self.seal is not None else None,
            },
            "entries": self.entries,
            "observations": self.driver.session.observations,
            "truncated": self.truncated,
            "journal": {"live": self.engine_starts > 0, "closed": self.closed, "failed": self.journal_error},
            "prompts": {"sent": self.prompts_sent, "receipts": total},
            "receipts": {state: dict(sorted(reasons.items())) for state, reasons in sorted(self.receipts.items())},
            "signals": dict(sorted(self.signals.items())),
            "gaps": {"count": sum(self.gaps.values()), "why": dict(sorted(self.gaps.items()))},
            "engine_starts": self.engine_starts,
            "engine_exits": {"count": self.engine_exits, "abnormal": self.abnormal_exits},
            "engine_down": self.engine_down,
            "findings": {"count": self._n, "shown": len(self.findings), "dropped": self.dropped_findings},
        }

    def to_json(self) -> dict[str, Any]:
        return {"findings": [f.to_json() for f in self.findings], "summary": self.summary()}


def _explained(r: Receipt) -> bool:
    """Whether a receipt gets a finding: it is uncertain, or the bridge stopped its run itself."""
    return r.state in UNCERTAIN or (r.state == "failed" and r.reason in BRIDGE_STOPS)


def _stop_why(note: dict[str, Any] | None, reason: str | None) -> str:
    """Why the bridge sent a stop: its note's words, else the receipt's reason in words."""
    why = note.get("why") if note is not None else None
    if isinstance(why, str) and why.strip():
        return _short(why.strip(), 300).rstrip(".")
    return "a timeout passed" if reason == "timeout" else "the bridge was closing"


def _c_journal(error: str | None) -> dict[str, str]:
    """Why a journal could not be written, from the error the bridge noted."""
    move = "--journal PATH or $PI_BRIDGE_JOURNAL_DIR puts journals elsewhere, --no-journal writes none"
    text = (error or "").lower()
    if "errno 28" in text or "no space" in text or "quota" in text:
        return {
            "cause": "the disk the journal is on is full",
            "check": f"free space there (df -h on the journal's folder); {move}",
        }
    return {
        "cause": "the journal's file could not be written (an I/O error, a full or read-only disk)",
        "check": f"the error the bridge noted, the system log (dmesg) for disk errors, and free space; {move}",
    }


def _hashable(value: Any) -> bool:
    try:
        hash(value)
    except TypeError:
        return False
    return True


def _item_json(item: tuple[str, int, float | None, int | None, Any], focus: bool) -> dict[str, Any]:
    kind, line, t, idx, value = item
    typ, summary = describe(kind, value)
    return {
        "line": line,
        "entry": kind,
        "idx": idx,
        "t": t,
        "type": typ,
        "summary": summary,
        "focus": focus,
        "raw": _raw(kind, value),
    }


# --------------------------------------------------------------------------
# Reading a file


class Progress:
    """``bytes read / total`` on a terminal's stderr, at most every :data:`PROGRESS_EVERY` seconds."""

    def __init__(self, out: IO[str], total: int) -> None:
        self.out = out
        self.total = total
        self.last = 0.0
        self.shown = False

    def update(self, done: int, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self.last < PROGRESS_EVERY:
            return
        self.last = now
        pct = 100.0 * done / self.total if self.total else 100.0
        self.out.write(f"\rdiagnose: {done / 1e6:,.1f} MB / {self.total / 1e6:,.1f} MB ({pct:.0f}%)")
        self.out.flush()
        self.shown = True

    def done(self) -> None:
        if self.shown:
            self.update(self.total, force=True)
            self.out.write("\n")
            self.out.flush()


def diagnose(path: str, *, timeline: bool = False, progress: IO[str] | None = None) -> Diagnoser:
    """Read one transcript and explain it. Raises :class:`~bridge.transcript.TranscriptError`."""
    stream, reader = open_transcript(path)
    with stream:
        diag = Diagnoser(path, reader.header, timeline=timeline)
        bar = None
        if progress is not None:
            try:
                total = os.fstat(stream.fileno()).st_size
            except OSError:
                total = 0
            bar = Progress(progress, total)
            bar.update(0, force=True)
        for n, entry in enumerate(reader, 1):
            diag.feed(entry)
            if bar is not None and not n & 1023:
                bar.update(stream.tell())
        diag.finish(reader.truncated)
        if bar is not None:
            bar.done()
    return diag


# --------------------------------------------------------------------------
# Text


def format_text(diag: Diagnoser) -> str:
    s = diag.summary()
    out: list[str] = [f"bridge diagnose: {diag.path}"]
    eng = s["engine"]
    if eng["version"] is not None or eng["pin"] is not None:
        head = f"engine {eng['name']} {eng['version']} (pin {eng['pin']})"
    else:
        name = _short(eng["name"]) if eng["name"] is not None else "not named in the header"
        head = f"engine {name} (no version or pin recorded)"
    head += f"; seal recorded, extensions {_short(eng['extensions'])}" if eng["sealed"] else "; no seal recorded"
    out.append("  " + head)
    out.append(
        f"  {s['observations']} observations, {s['prompts']['sent']} prompt(s) sent, "
        f"{s['findings']['count']} finding(s)" + ("; the last line was cut off" if s["truncated"] else "")
    )
    for f in diag.findings:
        out.append("")
        where = f"observation {f.idx}" if f.idx is not None else (f"journal line {f.line}" if f.line else "the end")
        out.append(f"[{f.n}] {f.title}   ({where}, {_fmt_t(f.t)})")
        out.extend(_wrap("What happened: " + f.explanation, "    "))
        out.extend(_wrap(slot_words(f.slot).replace("slot:", "Slot right after it:", 1), "    "))
        out.append("    Evidence (journal line, observation, t):")
        for ev in f.evidence:
            mark = ">>" if ev["focus"] else "  "
            idx = f"#{ev['idx']}" if ev["idx"] is not None else ""
            t = f"{ev['t']:.3f}" if isinstance(ev["t"], (int, float)) else ""
            out.append(f"    {mark} L{ev['line']:<6} {idx:>7} {t:>9}  {ev['summary']}")
        if f.stderr and f.signal in ("gap", "engine-exit", "receipt", "engine-down"):
            out.append("    Last stderr lines before it:")
            for line in f.stderr:
                out.append(f"       {_fmt_t(line['t'])}  {_short(line['text'], 140)}")
        if f.causes:
            out.append("    Likely causes, and what to check:")
            for c in f.causes:
                out.extend(_wrap("- " + c["cause"], "      "))
                out.extend(_wrap("check: " + c["check"], "          "))
        for note in f.notes:
            out.extend(_wrap("Then: " + note, "    "))
        if f.related:
            out.append("    See also: " + ", ".join(f"[{n}]" for n in f.related))
    if diag.dropped_findings:
        out.append("")
        out.append(f"({diag.dropped_findings} more finding(s) not shown: only the first {MAX_FINDINGS} are kept)")
    out.append("")
    out.append("Summary")
    out.append(f"  prompts: {s['prompts']['sent']} sent, {s['prompts']['receipts']} receipt(s)")
    if s["receipts"]:
        parts = []
        for state, reasons in s["receipts"].items():
            n = sum(reasons.values())
            detail = ", ".join(f"{r} {c}" for r, c in reasons.items() if r != "-")
            parts.append(f"{state} {n}" + (f" ({detail})" if detail else ""))
        out.append("  receipts: " + "; ".join(parts))
    else:
        out.append("  receipts: none")
    out.append("  signals: " + (", ".join(f"{k} {v}" for k, v in s["signals"].items()) or "none"))
    gaps = s["gaps"]
    out.append(
        f"  gaps: {gaps['count']}"
        + (" (" + ", ".join(f"{k} {v}" for k, v in gaps["why"].items()) + ")" if gaps["count"] else "")
    )
    out.append(
        f"  engine: {s['engine_starts']} start(s), {s['engine_exits']['count']} exit(s) "
        f"({s['engine_exits']['abnormal']} abnormal), down {s['engine_down']} time(s)"
    )
    journal = s["journal"]
    if journal["live"] or journal["failed"]:
        how = "the bridge closed cleanly" if journal["closed"] else "ends before the bridge closed"
        out.append(f"  journal: {how}" + (f"; could not be written: {journal['failed']}" if journal["failed"] else ""))
    return "\n".join(out)


def _wrap(text: str, indent: str, width: int = 110) -> list[str]:
    words = text.split(" ")
    lines: list[str] = []
    cur = indent
    for w in words:
        if len(cur) + len(w) + 1 > width and cur.strip():
            lines.append(cur.rstrip())
            cur = indent + "  " + w + " "
        else:
            cur += w + " "
    if cur.strip():
        lines.append(cur.rstrip())
    return lines


# --------------------------------------------------------------------------
# HTML


def _json_for_script(data: Any) -> str:
    """JSON that is safe inside ``<script type="application/json">``: no ``<``, ``>``, ``&``,
    U+2028 or U+2029 appears literally, so no engine text can close the element."""
    text = dumps(data).decode("utf-8")
    return (
        text.replace("<", "\\u003c")
        .replace(">", "\\u003e")
        .replace("&", "\\u0026")
        .replace("\u2028", "\\u2028")
        .replace("\u2029", "\\u2029")
    )


def _template() -> str:
    """The page around the data: ``report.html`` (package data), HTML, CSS and script in one file."""
    return resources.files("bridge.readers.diagnose").joinpath("report.html").read_text(encoding="utf-8")


def html_page(diag: Diagnoser) -> str:
    tl = diag.timeline or Timeline()
    data = {
        "findings": [f.to_json() | {"x": f.x} for f in diag.findings],
        "summary": diag.summary(),
        "ticks": tl.ticks,
        "prompts": tl.prompts,
        "runs": tl.runs,
        "engines": tl.engines,
        "segments": tl.segments(diag.driver.session.observations),
        "dropped": {
            "prompts": tl.dropped_prompts,
            "runs": tl.dropped_runs,
            "ticks": max(0, diag.driver.session.observations - len(tl.ticks)),
        },
    }
    return _template().replace("__DATA__", _json_for_script(data))


# --------------------------------------------------------------------------
# The command line


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "diagnose",
        help="explain every signal, gap and unknown receipt in a journal, in words",
        description="Read a transcript or journal (lean or full) and explain each signal (O1-O6, "
        "aborted-without-stop, gaps, non-started dispositions, seal diagnostics, failed seal checks, "
        "engine exits and engine-down), each pending / delivery-unknown / outcome-unknown receipt, each "
        "run the bridge stopped itself (failed: timeout or closing) and a journal that could not be written "
        "or ends before the bridge closed: what happened, the observations around it, the slot's state, the "
        "likely causes and what to check; then a summary. Exit 0 when the file was read, 2 when it is not a "
        "readable transcript.",
    )
    p.add_argument("file", metavar="FILE")
    p.add_argument("--json", action="store_true", help='print one JSON object {"findings": [...], "summary": {...}}')
    p.add_argument("--html", metavar="OUT", help="also write a self-contained HTML page with a timeline to OUT")
    p.set_defaults(func=run)


def write_private(path: str, data: bytes) -> None:
    """Write a report as private as the journal it comes from: 0600, written to a new
    temporary file beside ``path`` and renamed over it (atomic; a symlink at ``path``
    is replaced, never followed)."""
    import os
    import tempfile

    target = os.path.abspath(path)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(target), prefix=".diagnose-", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:  # mkstemp creates it 0600
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def run(args: argparse.Namespace) -> int:
    progress = sys.stderr if sys.stderr.isatty() else None
    try:
        diag = diagnose(args.file, timeline=bool(getattr(args, "html", None)), progress=progress)
    except TranscriptError as e:
        print(f"bridge diagnose: {e}", file=sys.stderr)
        return 2
    out = sys.stdout.buffer
    if args.json:
        out.write(dumps(diag.to_json()) + b"\n")
    else:
        out.write(format_text(diag).encode("utf-8", "surrogateescape") + b"\n")
    out.flush()
    if getattr(args, "html", None):
        try:
            write_private(args.html, html_page(diag).encode("utf-8", "surrogatepass"))
        except OSError as e:
            print(f"bridge diagnose: cannot write {args.html}: {e.strerror or e}", file=sys.stderr)
            return 2
        print(f"bridge diagnose: timeline written to {args.html}", file=sys.stderr)
    return 0
