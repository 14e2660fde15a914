"""The timeline ``--html`` draws: observation ticks, prompt lanes, run lanes and engine events.

Collected as the file streams by, and bounded (the rules): a short journal (up to
:data:`HEAD_TICKS` observations) is drawn whole; a long one is drawn in pieces, its head and
:data:`CONTEXT` observations either side of each finding, the rest collapsing into breaks; past
the caps (:data:`MAX_TICKS`, :data:`MAX_TICK_RAW`, :data:`MAX_LANES`) things are only counted.
The diagnoser tells it what happened (a tick, a prompt sent, acked, working or receipted, a run
started or ended, an engine started or exited); it decides what to keep. A lane is a plain dict
because it goes to the page as JSON as it is.
"""

from __future__ import annotations

from collections import deque
from typing import Any, Final

import attrs

from bridge.core.receipts import Receipt
from bridge.readers.diagnose.render import describe, raw_text

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
    """The tick's colour on the page: a gap, a response, a run boundary, a user or other message, an alert."""
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
        """Observation ``idx``: kept when in view, else held back in case a finding follows."""
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
            raw = raw_text(kind, value)
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
        self._open_prompts[_key(request)] = _prompt_lane(request, generation, x, t)

    def prompt_acked(self, request: Any, idx: int) -> None:
        lane = self._open_prompts.get(_key(request))
        if lane is not None and lane["ack"] is None:
            lane["ack"] = idx

    def prompt_working(self, request: Any, idx: int) -> None:
        lane = self._open_prompts.get(_key(request))
        if lane is not None and lane["working"] is None:
            lane["working"] = idx

    def receipt(self, receipt: Receipt, x: float, *, unsent: bool = False, finding: int | None = None) -> None:
        """A prompt's receipt closes its lane (``unsent``: a receipt for a prompt never written gets its own)."""
        lane = None if unsent else self._open_prompts.pop(_key(receipt.request), None)
        if lane is None:
            lane = _prompt_lane(receipt.request, receipt.generation, None, None)
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
            "owner": None,
            "words": None,
        }

    def run_owner(self, key: str, owner: str, request: Any) -> None:
        """Whose run ``key`` ("generation:run") is by its words (``own``, ``late``: the bridge's
        prompt ``request``, delivered after its receipt; ``foreign``; ``undecided``: ``request``'s
        words, which another run had too): what the page names and paints it. The run may be open
        or one of the last ended ones (the words of a later run can undecide it)."""
        lane = self._open_runs.get(key)
        if lane is None:
            generation, _, run_id = key.partition(":")
            for lane in (*self._recent_runs, *self.runs[-RECENT_LANES:]):
                if f"{lane['generation']}:{lane['id']}" == f"{generation}:{run_id}":
                    break
            else:
                return
        lane["owner"], lane["request"] = owner, (None if owner == "undecided" else request)
        if owner == "undecided":
            lane["words"] = request

    def run_ended(self, generation: int, run_id: str, x: float, how: str) -> None:
        lane = self._open_runs.pop(f"{generation}:{run_id}", None)
        if lane is None:
            return
        lane["end"], lane["how"] = x, how
        if lane["start"] <= self.keep_until:
            self._keep_run(lane)
        else:
            self._recent_runs.append(lane)

    def abandon_open_runs(self, x: float) -> None:
        """The engine exited at ``x``: every run still open ends there, abandoned."""
        for lane in list(self._open_runs.values()):
            self.run_ended(lane["generation"], lane["id"], x, "abandoned")

    def open_runs(self) -> None:
        """The end: runs still open are drawn up to the end when they are in view."""
        for lane in self._open_runs.values():
            if lane["start"] <= self.keep_until:
                self._keep_run(lane)
        self._open_runs.clear()

    def engine(self, event: str, x: float, t: float | None, label: str) -> None:
        """An engine start or exit at ``x``."""
        if len(self.engines) < MAX_LANES:
            self.engines.append({"event": event, "x": x, "t": t, "label": label})


def _prompt_lane(request: Any, generation: int | None, sent: float | None, t: float | None) -> dict[str, Any]:
    """A prompt lane as the page reads it (its keys in the page's order)."""
    return {
        "request": request,
        "generation": generation,
        "sent": sent,
        "t": t,
        "ack": None,
        "working": None,
        "end": None,
        "state": None,
        "reason": None,
        "run": None,
        "finding": None,
    }


def _key(request: Any) -> Any:
    """A request id as a dict key (a journal may hold an unhashable id: its repr stands in)."""
    try:
        hash(request)
    except TypeError:
        return repr(request)
    return request
