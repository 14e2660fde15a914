"""What the diagnoser remembers of a journal as it streams by: the facts its words cite, and the tally.

Rules: everything here is bounded (a stderr tail of :data:`STDERR_TAIL` lines, the latest
:data:`STOPS_KEPT` stop notes and :data:`CONFIGS_KEPT` prompts' configuration notes, the first
:data:`CLOSING_KEPT` closing notes, per-generation and
per-run maps that grow with engines and runs, not with lines), because a journal can be GiB.
:class:`Facts` is what a finding's words and causes cite (the header's pin and seal, seal checks,
gaps, stderr, the bridge's stop, configuration and closing notes, exits, and earlier findings they
point to);
:class:`Tally` is only counted, for the summary.
"""

from __future__ import annotations

from collections import deque
from typing import Any, Final

import attrs

from bridge.core.receipts import Usage
from bridge.readers import hashable
from bridge.readers.diagnose.findings import Finding
from bridge.readers.diagnose.render import CLOSING_WORDS, Item, fmt_t, short
from bridge.transcript import Header

#: stderr lines remembered for "the last stderr lines before it".
STDERR_TAIL: Final = 5
#: Stop notes remembered by stop id for the receipt that names them (a stop's
#: receipt follows it within its prompt's story, so the latest few are enough).
STOPS_KEPT: Final = 256
#: Closing notes remembered (the first says what made the bridge close).
CLOSING_KEPT: Final = 4
#: A prompt's ``configure`` / ``configured`` notes remembered by request, for a ``rejected``/``config``
#: receipt (it follows them within its prompt's story, so the latest few are enough).
CONFIGS_KEPT: Final = 256


@attrs.define
class Facts:
    """What the words of a finding may cite, as of the entry being read."""

    header: Header
    # -- the header's engine, pin and seal
    engine: Any = attrs.field(init=False)
    pin: Any = attrs.field(init=False)
    version: Any = attrs.field(init=False)
    seal: dict[str, Any] | None = attrs.field(init=False)
    # -- what the journal has shown so far
    #: Problems of each engine generation's seal-check note.
    seal_checks: dict[Any, list[Any]] = attrs.field(factory=dict)
    #: extension_ui_request / extension_error lines seen.
    ext_seen: int = 0
    #: Gaps by why (the summary counts them too), and the index of the first.
    gaps: dict[str, int] = attrs.field(factory=dict)
    first_gap: int | None = None
    stderr: deque[tuple[float | None, str]] = attrs.field(factory=lambda: deque(maxlen=STDERR_TAIL))
    #: The bridge's own stops by id (its ``stop`` notes), and its ``closing`` notes.
    stops: dict[Any, dict[str, Any]] = attrs.field(factory=dict)
    closing: list[dict[str, Any]] = attrs.field(factory=list)
    #: A prompt's configuration (its ``configure`` note, then its ``configured`` note), by request.
    configs: dict[Any, dict[str, Any]] = attrs.field(factory=dict)
    journal_error: str | None = None
    last_exit: dict[str, Any] | None = None
    last_t: float | None = None
    truncated: bool = False
    # -- earlier findings later ones point to
    #: (engine generation, finding) of the first sign that unsealed the engine.
    taint_finding: tuple[Any, int] | None = None
    #: The O1 finding of each run ("generation:run"), and the second-prompt finding that displaced it.
    o1_by_run: dict[str, int] = attrs.field(factory=dict)
    displaced_runs: dict[str, tuple[Any, int]] = attrs.field(factory=dict)
    #: The latest O5 with queued items, by engine generation.
    o5_items: dict[int, int] = attrs.field(factory=dict)
    journal_failed: Finding | None = None
    journal_end: Finding | None = None

    def __attrs_post_init__(self) -> None:
        meta = self.header.meta
        self.engine = meta.get("engine")
        self.pin = meta.get("pin")
        self.version = meta.get("engine_version")
        self.seal = meta.get("seal") if isinstance(meta.get("seal"), dict) else None

    def stderr_json(self) -> list[dict[str, Any]]:
        """The stderr tail as a finding carries it (each line capped at 500 characters)."""
        return [{"t": t, "text": text if len(text) <= 500 else text[:500] + "…"} for t, text in self.stderr]

    def note_stop(self, stop: Any, note: dict[str, Any], item: Item) -> None:
        """Remember a ``stop`` note by its stop id (the latest :data:`STOPS_KEPT`)."""
        by = note.get("by")
        self.stops.pop(stop, None)
        self.stops[stop] = {
            "by": by if isinstance(by, str) else None,
            "why": note.get("why"),
            "request": note.get("request"),
            "t": item[2],
            "line": item[1],
            "item": item,
        }
        if len(self.stops) > STOPS_KEPT:
            del self.stops[next(iter(self.stops))]

    def stop_note(self, stop: Any) -> dict[str, Any] | None:
        """The remembered ``stop`` note for ``stop``, or None."""
        return self.stops.get(stop) if hashable(stop) else None

    def note_config(self, note: dict[str, Any], item: Item) -> None:
        """Remember a prompt's ``configure`` note (a new configuration: what was there is
        forgotten) or ``configured`` note, by its request (the latest :data:`CONFIGS_KEPT`)."""
        request = note.get("request")
        if request is None or not hashable(request):
            return  # the controller's configure for what follows: no prompt's yet
        kept = self.configs.pop(request, {})  # re-inserted last: the latest are the ones kept
        if note.get("event") == "configure":
            kept = {}
        kept[str(note.get("event"))] = {"note": note, "t": item[2], "line": item[1], "item": item}
        self.configs[request] = kept
        if len(self.configs) > CONFIGS_KEPT:
            del self.configs[next(iter(self.configs))]

    def config_notes(self, request: Any) -> dict[str, Any]:
        """The remembered ``configure`` / ``configured`` notes of ``request`` (either may be missing)."""
        return self.configs.get(request, {}) if hashable(request) else {}

    def note_closing(self, note: dict[str, Any], t: float | None, line: int) -> None:
        """Remember a ``closing`` note (the first :data:`CLOSING_KEPT`)."""
        if len(self.closing) < CLOSING_KEPT:
            why = note.get("why")
            self.closing.append(
                {"why": why if isinstance(why, str) else None, "detail": note.get("detail"), "t": t, "line": line}
            )

    def closing_why(self) -> str | None:
        """The ``why`` of the first closing note, or None."""
        why: str | None = self.closing[0]["why"] if self.closing else None
        return why

    def closing_words(self) -> str:
        """What made the bridge close, from its first ``closing`` note."""
        if not self.closing:
            return "The journal has no closing note saying why the bridge closed."
        first = self.closing[0]
        why = first["why"]
        words = CLOSING_WORDS.get(why) if why is not None else None
        if words is None:
            words = f"the note says {short(why, 80)}" if why is not None else "of something its note does not name"
        detail = first["detail"]
        if detail is None and why == "journal":
            detail = self.journal_error
        return (
            f"The bridge began closing at {fmt_t(first['t'])} (journal line {first['line']}) because {words}"
            + (f" ({short(detail, 120)})" if detail is not None else "")
            + "."
        )


@attrs.define
class Tally:
    """What the summary counts (besides :attr:`Facts.gaps`)."""

    entries: int = 0
    prompts_sent: int = 0
    #: Receipts by state, then by reason ("-" for none).
    receipts: dict[str, dict[str, int]] = attrs.field(factory=dict)
    #: Findings by signal name (and signals that raise none, like "second-prompt").
    signals: dict[str, int] = attrs.field(factory=dict)
    engine_starts: int = 0
    engine_exits: int = 0
    abnormal_exits: int = 0
    engine_down: int = 0
    #: Receipts that had a run, and their usage summed.
    runs: int = 0
    usage: Usage = attrs.field(factory=Usage)
    #: Extension dialogs by who gave each its one response.
    dialogs: dict[str, int] = attrs.field(factory=dict)

    def count(self, name: str) -> None:
        self.signals[name] = self.signals.get(name, 0) + 1
