"""What recovery decides for a prompt a lost bridge accepted and never settled (issue 44), sans-IO.

A bridge opened on a ledger whose previous process died first settles every record that has no
receipt (the reading of journals is :mod:`bridge.live.recovery`; the ledger's rules
:mod:`bridge.core.ledger`). Rules:

1. **From the evidence, never by running it again.** Nothing is written to an engine: the
   receipt is what the prompt's journal and the ledger say, decided by the receipt table
   (:func:`bridge.core.receipts.decide`), through the same :class:`~bridge.core.session.Session`
   that replays journals for every prompt the journal shows sent.
2. **Never written → ``rejected`` / ``bridge-lost``** (the table's row 1): its journal shows no
   ``send`` of it (a prompt is journaled, and flushed to the OS, before any byte of it goes to
   the engine), or it has no journal; and the ledger never marked it written (a mark is
   evidence of a write the journal does not show: then rule 4). Queued in a bridge
   or a pool when the process died, it reached no engine.
3. **Written → what its journal says.** A receipt the journal recorded stands (the journal was
   cut after it, before the ledger had it), and so does one its evidence decides (the engine's
   settle is in the journal: ``finished``, ``failed``, ...). One the evidence leaves open is
   decided as its engine's exit, because the engine went with the bridge (the reaper kills it
   when its bridge dies: :mod:`bridge.live.reaper`): ``outcome-unknown`` when the model had it
   (``engine-exited``, or the engine's taint), else ``delivery-unknown`` / ``engine-exited``
   (rows 6, 8 and 9).
4. **Written, and no journal to read** (removed, unreadable, never named, or one that does not
   show it sent): no evidence the model had it: ``delivery-unknown`` / ``engine-exited`` (row 8).
5. **Said so.** A receipt decided at recovery (rules 2 to 4) carries in ``nativeError`` that the
   bridge was lost and where it was decided from (:func:`lost_words`); one the journal decided
   (rule 3's first two) is kept exactly as the journal's replay gives it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from bridge.core.events import ReceiptReady
from bridge.core.prompts import PromptState
from bridge.core.receipts import Facts, Receipt, decide
from bridge.core.session import Session
from bridge.core.words import Reason, RequestId


def lost_words(journal: str | None, problem: str | None = None) -> str:
    """The ``nativeError`` of a receipt decided at recovery (rule 5)."""
    where = f"its journal {journal}" if journal else "the ledger (no journal was recorded for it)"
    if journal and problem:
        where = f"the ledger: its journal {journal} cannot be read ({problem})"
    return f"the bridge was lost (its process ended) before this prompt settled; decided at recovery from {where}"


def never_written(request: RequestId, journal: str | None, problem: str | None = None) -> Receipt:
    """Rule 2: ``rejected`` / ``bridge-lost``."""
    state, reason = decide(Facts(unsent=Reason.BRIDGE_LOST))
    return Receipt(request=request, state=state, reason=reason, native_error=lost_words(journal, problem))


def without_evidence(request: RequestId, journal: str | None, problem: str | None = None) -> Receipt:
    """Rule 4: written, and nothing to read what became of it from."""
    state, reason = decide(Facts(exited=True))
    return Receipt(request=request, state=state, reason=reason, native_error=lost_words(journal, problem))


def decided_at_recovery(receipt: Receipt, journal: str) -> Receipt:
    """Rule 5: a receipt the session decided at the journal's end (the engine's exit), saying so."""
    return attrs.evolve(receipt, native_error=lost_words(journal))


def settle_open(
    session: Session, recorded: Mapping[Any, dict[str, Any]], story: Iterable[PromptState | Receipt]
) -> dict[str, tuple[Receipt, bool]]:
    """At a replayed journal's end (``session`` fed it all; ``recorded``: the receipts the journal
    recorded, by request; ``story``: every prompt it shows, in order): every prompt it shows, with
    its receipt and whether it was decided now (True: rule 3's engine's exit, rule 5 says so).

    A prompt whose ``receipt`` entry the journal holds but whose ``release`` it does not (cut
    between the two) is released with that receipt, as replay would; then the engine is told
    gone (the reaper killed it with the bridge): the prompt it held settles as an engine's exit
    settles it; one released with no receipt the journal kept is given up the same way."""
    for request, entry in list(recorded.items()):
        held = session.open.get(request)
        if held is not None and held.receipt is None:
            session.release(request, recorded=entry)
    at_end = {_request_of(event) for event in session.engine_exited()}
    out: dict[str, tuple[Receipt, bool]] = {}
    for item in story:
        receipt, decided_now = _receipt_of(item, session, at_end)
        if receipt.request is not None:
            out[receipt.request] = (receipt, decided_now)
    return out


def _receipt_of(item: PromptState | Receipt, session: Session, at_end: set[str | None]) -> tuple[Receipt, bool]:
    if isinstance(item, Receipt):
        return item, False
    if item.receipt is not None:
        return item.receipt, item.request in at_end
    # Released with no receipt the journal kept: given up as the engine's exit would.
    assert item.request is not None
    events = session.give_up(item.request, "exited")
    receipts = [e.receipt for e in events if isinstance(e, ReceiptReady)]
    return receipts[0], True


def _request_of(event: object) -> str | None:
    return event.receipt.request if isinstance(event, ReceiptReady) else None
