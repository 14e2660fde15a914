"""The ledger's rules, sans-IO: its records, what a prompt's digest covers, the admission of an id
the ledger may hold already, and which schema a reader may read (issue 44).

The ledger is one durable record per accepted prompt, keyed by its scope and the controller's
id (the store is :mod:`bridge.live.ledger`: SQLite; recovery is
:mod:`bridge.live.recovery`). Its rules:

1. **One record per (scope, id), for good.** A record is made when a prompt is accepted, marked
   when it is written to an engine, and given its receipt when one is decided; it is never
   removed nor made again. The scope names who chose the ids (one controller, one ``serve``):
   two controllers that both call their first prompt ``p1`` into one ledger are told apart by it.
2. **Idempotent admission** (:func:`admit`): an id the ledger does not hold is admitted
   (:class:`Admitted`: the store writes its record before anyone hears "accepted"). An id it
   holds with the same digest is the same prompt submitted again: it is never run again; the
   answer is the first admission, with its receipt once there is one (:class:`Known`). Other
   text or options under a held id is refused with one line (:class:`Conflict`).
3. **The digest** (:func:`digest_input`) covers the text and every option that changes what the
   engine is asked to do (model, provider, thinking, images, timeouts, budgets), not how the
   answer is delivered (:data:`DELIVERY_OPTIONS`: streaming, events, a trace): a controller
   that resubmits without ``stream`` asks for the same prompt. An option given as None is an
   option not given. The bytes are canonical JSON (keys sorted, ASCII only: a lone surrogate
   in a Python string still has one spelling); the store hashes them (SHA-256).
4. **Schemas** (:func:`schema_problem`; seed 001's rule): the store records its schema version.
   A reader reads its own version and older ones (migrating an older file forward); a file of
   a newer version is refused with one line naming both versions and the fix, never misread.
   A field added later with a default (a column with a default) is no new version; a change an
   older reader would misread is.
5. **A receipt is kept as its wire JSON** (:mod:`bridge.core.wire`), the same object a
   controller reads: the ledger adds no form of its own.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any, Final, Protocol

import attrs

from bridge.core.receipts import Receipt
from bridge.core.words import RequestId

#: The schema this code writes and reads (``PRAGMA user_version``).
SCHEMA_VERSION: Final = 1

#: The scope of ids when the controller names none (rule 1).
DEFAULT_SCOPE: Final = "default"

#: Options that say how a prompt's answer is delivered, not what is asked: left out of the digest.
DELIVERY_OPTIONS: Final = frozenset({"stream", "events", "trace", "request"})


def digest_input(text: str, options: Mapping[str, Any]) -> bytes:
    """The canonical bytes a prompt's digest is taken of (rule 3): its text and its options
    but the delivery ones, those given as None left out. Raises TypeError for an option JSON
    cannot hold (the door's own checks come first)."""
    asked = {key: value for key, value in options.items() if value is not None and key not in DELIVERY_OPTIONS}
    doc = {"text": text, "options": asked}
    return json.dumps(doc, sort_keys=True, ensure_ascii=True, separators=(",", ":"), allow_nan=False).encode("ascii")


@attrs.frozen
class Record:
    """One accepted prompt, as the ledger holds it."""

    #: Who chose the id (rule 1).
    scope: str
    #: The controller's id.
    request: RequestId
    #: The digest of its text and options (rule 3), hex.
    digest: str
    #: When it was accepted: seconds since the epoch (the store's clock).
    accepted: float
    #: The journal that holds (or will hold) its story, when known.
    journal: str | None = None
    #: When it was written to an engine (None: not known to have been).
    written: float | None = None
    #: Its receipt, once decided.
    receipt: Receipt | None = None
    #: When the receipt was recorded.
    settled: float | None = None

    @property
    def state(self) -> str:
        """Its receipt's state, or where it stands without one: ``written`` or ``accepted``."""
        if self.receipt is not None:
            return str(self.receipt.state)
        return "written" if self.written is not None else "accepted"


@attrs.frozen
class Admitted:
    """A new id: record it (durably) before the controller hears "accepted"."""


@attrs.frozen
class Known:
    """The same prompt again: never run again; the first admission, and its receipt when there
    is one (:attr:`Record.receipt`)."""

    record: Record


@attrs.frozen
class Conflict:
    """Other text or options under a held id: refused; :attr:`line` says so in one line."""

    record: Record
    line: str


Admission = Admitted | Known | Conflict


def admit(held: Record | None, request: RequestId, digest: str) -> Admission:
    """Rule 2: what becomes of a prompt submitted under ``request`` with ``digest``, given the
    record the ledger holds under that id (None: none)."""
    if held is None:
        return Admitted()
    if held.digest == digest:
        return Known(held)
    return Conflict(
        held,
        f"the id {request!r} was accepted before for another prompt (other text or options); "
        "an id names one prompt for good: give this one a new id",
    )


def schema_problem(found: int, ours: int = SCHEMA_VERSION) -> str | None:
    """Rule 4: why a store of schema ``found`` cannot be read by this code (None: it can)."""
    if found > ours:
        return (
            f"it was written by a newer pi-bridge (ledger schema {found}; this one reads up to {ours}): "
            "use that pi-bridge, or give this one another ledger"
        )
    if found < 0:
        return f"its schema version {found} is none of pi-bridge's"
    return None


class LedgerStore(Protocol):
    """What recovery needs of a ledger (:class:`bridge.live.ledger.Ledger` is one)."""

    def unsettled(self) -> list[Record]:
        """Every record without a receipt."""
        ...

    def settle(self, receipt: Receipt, *, scope: str = DEFAULT_SCOPE) -> bool:
        """Record ``receipt`` as its prompt's, unless the prompt has one already (then False)."""
        ...


def unsettled_journals(records: Iterable[Record]) -> set[str]:
    """The journals recovery still needs: those of records without a receipt (journal retention
    passes over them)."""
    return {r.journal for r in records if r.receipt is None and r.journal is not None}
