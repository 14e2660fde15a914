"""A bridge's status: what ``Bridge.status()`` returns and ``bridge serve`` answers a
``{"type": "status"}`` with (docs: reference/serve-protocol.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from bridge.core.lifecycle import LifeState
    from bridge.live.journal import Journal


def status_of(st: LifeState, alive: bool, pid: int | None, journal: Journal | None) -> dict[str, Any]:
    """The status of a bridge whose lifecycle is in ``st``, its engine ``alive`` as ``pid``: the engine, the held and queued prompts, receipts so far, the journal, whether
    it shuts down or closes, and what its prompts spent (``spent``: ``usd``, ``tokens``)."""
    return {
        "engine": {
            "pid": pid if alive else None,
            "generation": st.engine.generation,
            "alive": alive,
            "sealed": st.engine.sealed,
            "down": st.down,
        },
        "held": st.held,
        "queued": list(st.queue),
        "receipts": st.receipts,
        "journal": str(journal.path) if journal is not None else None,
        "shutdown": st.draining,
        "closing": st.closing,
        "spent": st.budgets.spent.to_json(),
    }
