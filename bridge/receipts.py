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

from typing import Any, Final

import attrs
import cattrs
from cattrs.gen import make_dict_structure_fn, make_dict_unstructure_fn, override

STATES: Final = frozenset(
    {"finished", "failed", "rejected", "delivery-unknown", "outcome-unknown", "pending"}
)

#: The reasons each state admits (None: no reason).
REASONS: Final[dict[str, frozenset[str | None]]] = {
    "finished": frozenset({None}),
    "failed": frozenset({None, "interrupted"}),
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

    @property
    def settled_cleanly(self) -> bool:
        """True for the states a controller can act on without doubt."""
        return self.state == "finished"

    def to_json(self) -> dict[str, Any]:
        return converter.unstructure(self)  # type: ignore[no-any-return]

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Receipt:
        return converter.structure(data, cls)


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
