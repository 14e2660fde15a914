"""Findings and their evidence: what a finding holds, the words it carries, and the sliding window.

Rules for the evidence (the module docstring of :mod:`bridge.readers.diagnose` states them for a
reader): a finding shows the :data:`BEFORE` observations before its focus and the :data:`AFTER`
after it, with the bridge's own entries between them. Memory is bounded: the window holds at most
:data:`WINDOW_MAX` entries, a finding collects at most :data:`AFTER_MAX` entries after its focus,
and only :data:`MAX_FINDINGS` findings keep their evidence (later ones are only counted).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from typing import Any, Final

import attrs

from bridge.core.wire import Wire, form
from bridge.readers.diagnose.render import Item, item_json
from bridge.readers.diagnose.slot import slot_words

#: Observations shown before and after the one a finding is about.
BEFORE: Final = 3
AFTER: Final = 2
#: Entries the sliding window holds at most (observations and the bridge's own
#: entries between them); a flood of stderr lines cannot grow it.
WINDOW_MAX: Final = 32
#: Entries recorded after a finding's focus at most (while waiting for AFTER observations).
AFTER_MAX: Final = 16
#: Findings kept with their evidence; later ones are only counted.
MAX_FINDINGS: Final = 1000


@form(
    omit=["x", "after_left", "after_items"],
    computed=[("slotWords", "slot", lambda f: slot_words(f.slot))],
)
@attrs.define
class Finding(Wire):
    """One thing in the journal worth a person's attention, with its evidence (``to_json`` is the
    ``--json`` form; ``x``, ``after_left`` and ``after_items`` are the diagnoser's own)."""

    n: int
    kind: str  # "signal" | "receipt" | "engine" | "seal" | "journal" | "dialog"
    # O1..O6, aborted-without-stop, gap, disposition, seal-diagnostic, seal-check, engine-down, engine-exit,
    # receipt, journal-failed, journal-ends-early, dialog
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


@attrs.define
class Words:
    """What a finding says: its title, what happened, the likely causes (with what to check) and the
    findings it points to. The diagnoser decides *when* a finding is raised; the wording modules
    (:mod:`~bridge.readers.diagnose.signals`, :mod:`~bridge.readers.diagnose.receipts`) decide *what*
    it says."""

    title: str
    text: str
    causes: list[dict[str, str]] = attrs.field(factory=list)
    related: list[int] = attrs.field(factory=list)


def is_observation(item: Item) -> bool:
    """An engine line (``recv`` / ``recv_raw``), as opposed to one of the bridge's own entries."""
    return item[0] == "recv" or item[0] == "recv_raw"


@attrs.define
class Window:
    """The last entries read (up to :data:`BEFORE` observations back), and the findings still
    collecting the entries after their focus."""

    _items: deque[Item] = attrs.field(factory=deque)
    _observations: int = 0
    _open: list[Finding] = attrs.field(factory=list)

    def __iter__(self) -> Iterator[Item]:
        return iter(self._items)

    def __reversed__(self) -> Iterator[Item]:
        return reversed(self._items)

    def push(self, item: Item) -> None:
        """One more entry: open findings get it as evidence after their focus, then the window slides."""
        window = self._items
        is_obs = is_observation(item)
        if self._open:
            as_json = item_json(item, False)
            for f in self._open:
                f.evidence.append(as_json)
                f.after_items += 1
                if is_obs:
                    f.after_left -= 1
            self._open = [f for f in self._open if f.after_left > 0 and f.after_items < AFTER_MAX]
        window.append(item)
        if is_obs:
            self._observations += 1
            while self._observations > BEFORE + 1:
                old = window.popleft()
                if is_observation(old):
                    self._observations -= 1
        while len(window) > WINDOW_MAX:
            old = window.popleft()
            if is_observation(old):
                self._observations -= 1

    def evidence(self, focus: Item | None) -> list[dict[str, Any]]:
        """The evidence before (and at) ``focus``, the entry just pushed or None for the end."""
        items = list(self._items)
        if focus is None or not is_observation(focus):
            # The focus is a bridge entry (or the end): keep BEFORE observations before it.
            obs = sum(1 for it in items if is_observation(it))
            while obs > BEFORE and items:
                old = items.pop(0)
                if is_observation(old):
                    obs -= 1
        return [item_json(it, it is focus) for it in items]

    def collect_after(self, f: Finding) -> None:
        """``f`` goes on collecting the entries after its focus (until :data:`AFTER` observations)."""
        self._open.append(f)

    def close(self) -> None:
        """The end of the file: nothing more comes after any focus."""
        self._open.clear()
