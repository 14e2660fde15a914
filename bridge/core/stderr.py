"""How much of an engine's stderr the journal holds (issue 35): a budget per engine generation.

Stderr is for people: the bridge never parses it, and a receipt quotes only its last lines
(:data:`bridge.core.session.STDERR_QUOTED`, kept apart from this and never cut). An engine
that writes 50 MB to stderr made a 57 MB journal; now each generation's stderr entries are
at most :attr:`~bridge.core.config.BridgeConfig.stderr_journal_max` characters
(:data:`STDERR_JOURNAL_MAX` by default; None: no bound):

- the first lines are journaled as they come, up to the cap less the room for the last ones
  (:func:`tail_room`: a quarter of the cap, at most :data:`TAIL_ROOM`);
- past that, the lines are held back, only the last ones (within that room, at most
  :data:`TAIL_LINES` lines) -- what says why an engine died is at the end;
- when the engine exits, a ``stderr-dropped`` note says how much was left out (lines,
  characters, and when), then the held lines follow, journaled at the exit's time, before its
  ``exit`` entry. (An engine that never exits while the bridge runs -- the bridge killed --
  leaves the note unwritten: its journal then holds the first part only.)

Characters, not bytes, are counted (each line one more, for its entry): a journal's stderr
is within a small factor of the cap either way (JSON escapes of control characters).
Precedents: journald's rate limit drops a service's lines past a burst and logs how many it
suppressed (the note); docker's ``json-file`` log driver with ``max-size`` keeps the newest.
"""

from __future__ import annotations

import collections
from typing import Any, Final

import attrs

from bridge.core.session import STDERR_QUOTED
from bridge.core.wire import Wire, form

#: The default cap, characters per engine generation: 1 MiB, the journal's own buffer between
#: receipts; Pi writes a few lines at start and a stack trace when it dies.
STDERR_JOURNAL_MAX: Final = 1 << 20
#: The room kept for the last lines, at most (and a quarter of a smaller cap).
TAIL_ROOM: Final = 64 << 10
#: The last lines kept, at most (the live stderr ring's size, :data:`bridge.live.engine.STDERR_RING`).
TAIL_LINES: Final = 200
#: The note's event.
STDERR_DROPPED: Final = "stderr-dropped"


@form(tag={"event": STDERR_DROPPED}, rename={"first_t": "from", "last_t": "to"})
@attrs.frozen
class StderrDroppedNote(Wire):
    """The journal's note of what a generation's stderr left out: ``lines`` and ``chars``
    dropped, the last ``kept`` lines journaled after it, the ``cap``, and when the first and
    the last line held back were read (``from``, ``to``)."""

    generation: int
    lines: int
    chars: int
    kept: int
    cap: int | None
    first_t: float | None
    last_t: float | None


def tail_room(cap: int) -> int:
    return min(TAIL_ROOM, cap // 4)


@attrs.define
class StderrBudget:
    """One engine generation's stderr in the journal: :meth:`take` each line (True: journal it
    now), :meth:`flush` at the exit (the note and the held lines)."""

    cap: int | None
    journaled: int = 0
    dropped_lines: int = 0
    dropped_chars: int = 0
    #: When the first line was held back, and the last.
    first_t: float | None = None
    last_t: float | None = None
    held: collections.deque[str] = attrs.field(factory=collections.deque)
    held_chars: int = 0

    def take(self, text: str, t: float) -> bool:
        """One line read at ``t``: True when it is journaled now, else held back."""
        size = len(text) + 1
        if self.cap is None or (self.first_t is None and self.journaled + size <= self.cap - tail_room(self.cap)):
            self.journaled += size
            return True
        if self.first_t is None:
            self.first_t = t
        self.last_t = t
        self.held.append(text)
        self.held_chars += size
        room = tail_room(self.cap)
        # The lines a receipt quotes are always kept, whatever the room: replay quotes them from
        # the journal, and must quote what the live bridge did.
        while len(self.held) > STDERR_QUOTED and (self.held_chars > room or len(self.held) > TAIL_LINES):
            gone = len(self.held.popleft()) + 1
            self.held_chars -= gone
            self.dropped_lines += 1
            self.dropped_chars += gone
        return False

    def flush(self, generation: int) -> tuple[dict[str, Any] | None, list[str]]:
        """At the engine's exit: the ``stderr-dropped`` note (None: nothing was left out) and the
        held last lines, in order, to journal after it."""
        held, self.held, self.held_chars = list(self.held), collections.deque(), 0
        if not self.dropped_lines:
            return None, held
        note = StderrDroppedNote(
            generation, self.dropped_lines, self.dropped_chars, len(held), self.cap, self.first_t, self.last_t
        )
        return note.to_json(), held
