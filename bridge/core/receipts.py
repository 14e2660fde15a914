"""Receipts: what became of one prompt, with the evidence (SPEC §5).

Every prompt the bridge accepts gets exactly one receipt. The states and
reasons are a closed vocabulary, listed here once:

==================  ===============================================================
finished            (no reason) the slot's own run settled after ``stop``,
                    ``length`` or ``toolUse``
failed              (no reason) the run ended in ``error``; ``nativeError`` says why
failed              ``interrupted``: aborted by this controller's stop (``stop``)
rejected            ``engine``, ``queue-full``, ``cancelled``, ``closing``,
                    ``engine-down``: certainly not delivered
delivery-unknown    ``ack-without-start``, ``no-ack``, ``engine-exited``
outcome-unknown     the seed's ``aborted-without-stop``, ``no-final-assistant-message``,
                    ``unrecognised-stop-reason``; the bridge's ``overlap``, ``gap``,
                    ``disposition``, ``engine-exited``, ``settle-timeout``
pending             replay only: the transcript does not finish the prompt's story
==================  ===============================================================

The JSON form uses camelCase keys (``nativeError``, ``ackIdx``, ...) like the
engine's protocol; :data:`converter` is the one place that knows it, and
``structure(unstructure(r)) == r`` for every receipt (tested).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

import attrs
import cattrs
from cattrs.gen import make_dict_structure_fn, make_dict_unstructure_fn, override

STATES: Final = frozenset({"finished", "failed", "rejected", "delivery-unknown", "outcome-unknown", "pending"})

#: The reasons each state admits (None: no reason).
REASONS: Final[dict[str, frozenset[str | None]]] = {
    "finished": frozenset({None}),
    "failed": frozenset({None, "interrupted", "timeout", "closing"}),
    "rejected": frozenset({"engine", "queue-full", "cancelled", "closing", "engine-down"}),
    "delivery-unknown": frozenset({"ack-without-start", "no-ack", "engine-exited"}),
    "outcome-unknown": frozenset(
        {
            "aborted-without-stop",
            "no-final-assistant-message",
            "unrecognised-stop-reason",
            "overlap",
            "gap",
            "disposition",
            "engine-exited",
            "settle-timeout",
        }
    ),
    "pending": frozenset({None}),
}


@attrs.frozen
class Times:
    """Seconds since the bridge started, as the trio layer saw them."""

    submitted: float | None = None
    sent: float | None = None
    acked: float | None = None
    working: float | None = None
    settled: float | None = None


@attrs.frozen
class Receipt:
    request: Any
    state: str
    reason: str | None = None
    stop: Any = None
    native_error: str | None = None
    run: str | None = None
    #: The final assistant reply text of the slot's own run, when there is one.
    reply: str | None = None
    ack_idx: int | None = None
    working_idx: int | None = None
    settle_idx: int | None = None
    disposition: str | None = None
    #: Overlap, gap and seal signals seen while the slot was held.
    signals: tuple[dict[str, Any], ...] = ()
    times: Times = Times()
    pid: int | None = None
    generation: int | None = None

    def __attrs_post_init__(self) -> None:
        if self.state not in STATES:
            raise ValueError(f"unknown receipt state {self.state!r}")
        if self.reason not in REASONS[self.state]:
            raise ValueError(f"reason {self.reason!r} does not go with state {self.state!r}")

    def to_json(self) -> dict[str, Any]:
        return converter.unstructure(self)  # type: ignore[no-any-return]

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Receipt:
        return converter.structure(data, cls)


# --------------------------------------------------------------------------
# The decision table: the one place a receipt's state and reason are decided.
#
# The evidence half (bridge/core/session.py) and the lifecycle (bridge/core/lifecycle.py)
# each know some of a prompt's story; whichever learns the *trigger* (the slot's
# run settled, the engine refused or exited, a deadline passed, the prompt was
# never written) gathers what is known into :class:`Facts` and asks
# :func:`decide`. The rows are tried in order; the first that matches decides.
# README "How a receipt is decided" is this table in words, row by row, with the
# reasons for its order; tests/test_decision.py checks every row.

#: Who sent the stop linked to a prompt, and the reason its aborted run gets.
STOP_REASONS: Final[dict[str, str]] = {"controller": "interrupted", "timeout": "timeout", "closing": "closing"}

#: The tracker's settlements that our own stop may have caused (Pi aborted in a
#: retry backoff writes no aborted message; SPEC §2).
_ABORTABLE: Final = frozenset({("failed", None), ("outcome-unknown", "no-final-assistant-message")})


@attrs.frozen
class Facts:
    """What is known of one prompt when its receipt is decided: the table's columns."""

    #: Never written to the engine, and why: queue-full, cancelled, closing, engine-down.
    unsent: str | None = None
    #: Replay only: the receipt the journal recorded before the prompt's release.
    recorded: tuple[str, str | None] | None = None
    #: The engine answered the prompt ``success: false`` before any ack.
    refused: bool = False
    #: A deadline passed: ``ack`` (no ack), ``settle`` (the stop after a timeout
    #: was not obeyed), ``taint`` (a tainted slot's own run did not settle).
    gave_up: str | None = None
    #: The engine's first taint while the prompt was held: ``overlap``, ``gap``,
    #: ``disposition`` or ``aborted-without-stop``.
    taint: str | None = None
    #: The engine exited before anything else decided.
    exited: bool = False
    #: The model had the prompt (the tracker's ``working``).
    working: bool = False
    #: The tracker's settlement of the slot: the seed's ``classify``.
    tracker: tuple[str, str | None] | None = None
    #: The slot's own run (or its loose settle) settled; with a taint this is the trigger.
    own_settled: bool = False
    #: Whose stop is linked to the slot: ``controller``, ``timeout`` or ``closing``.
    stop_by: str | None = None
    #: ``agent_settled.aborted`` of the settle that closed the slot's run.
    aborted: bool = False


def decide(f: Facts) -> tuple[str, str | None]:
    """The receipt's ``(state, reason)`` for what is known: README "How a receipt
    is decided", row by row (the first row that matches decides). Raises
    ValueError when nothing in ``f`` is a trigger (a bug in the caller)."""
    if f.unsent is not None:  # row 1: never written
        return "rejected", f.unsent
    if f.recorded is not None:  # row 2: replay takes the live bridge's decision
        return f.recorded
    if f.refused:  # row 3: the engine said no
        return "rejected", "engine"
    if f.gave_up == "ack":  # row 4: no ack in time, whatever else came
        return "delivery-unknown", "no-ack"
    if f.gave_up == "settle":  # row 5: our stop after a timeout was not obeyed
        return "outcome-unknown", "settle-timeout"
    if f.taint is not None and (f.own_settled or f.exited or f.gave_up == "taint" or f.tracker is not None):
        return "outcome-unknown", f.taint  # row 6: tainted evidence settles nothing
    if f.gave_up == "taint":  # row 7
        return "outcome-unknown", "overlap"
    if f.exited:  # rows 8, 9: the engine died first
        return ("outcome-unknown" if f.working else "delivery-unknown"), "engine-exited"
    if f.tracker is None:
        raise ValueError(f"no trigger to decide a receipt from: {f!r}")
    if f.tracker == ("failed", "interrupted"):  # row 10: the seed saw our stop's abort
        return "failed", STOP_REASONS.get(f.stop_by or "controller", "interrupted")
    if f.tracker in _ABORTABLE and f.stop_by is not None and f.aborted:  # row 11: aborted in a backoff
        return "failed", STOP_REASONS.get(f.stop_by, "interrupted")
    return f.tracker  # row 12: the seed's own verdict


def exit_words(code: int | None, signal: int | None, stderr: Sequence[str] = (), *, when: str = "") -> str:
    """An engine's exit in words, with its last stderr lines: what a user needs to fix it
    (the ``nativeError`` of an ``engine-exited`` receipt and of ``engine-down``)."""
    how = f"signal {signal}" if signal is not None else f"code {code}" if code is not None else "status unknown"
    tail = " | ".join(line for line in stderr if line.strip())
    return f"the engine exited{when} ({how})" + (f": {tail}" if tail else "")


def _make_converter() -> cattrs.Converter:
    c = cattrs.Converter(unstruct_collection_overrides={tuple: list})
    renames = {
        "native_error": "nativeError",
        "ack_idx": "ackIdx",
        "working_idx": "workingIdx",
        "settle_idx": "settleIdx",
    }
    overrides = {name: override(rename=wire) for name, wire in renames.items()}
    # cattrs' stubs type **overrides loosely; these are AttributeOverrides.
    c.register_unstructure_hook(Receipt, make_dict_unstructure_fn(Receipt, c, **overrides))  # type: ignore[arg-type]
    c.register_structure_hook(Receipt, make_dict_structure_fn(Receipt, c, **overrides))  # type: ignore[arg-type]
    return c


converter: Final = _make_converter()


def describe(r: Receipt) -> str:
    """One receipt in a line a person reads."""
    head = f"{r.request}: {r.state}" + (f" ({r.reason})" if r.reason else "")
    parts = []
    if r.run:
        parts.append(r.run)
    if r.stop:
        parts.append(f"stop {r.stop}")
    if r.times.sent is not None and r.times.settled is not None:
        parts.append(f"{r.times.settled - r.times.sent:.2f} s")
    if r.signals:
        parts.append("signals " + ", ".join(f"{s.get('signal')}@{s.get('idx')}" for s in r.signals))
    if r.native_error:
        parts.append(f"error: {r.native_error[:200]}")
    return head + (f" [{'; '.join(parts)}]" if parts else "")
