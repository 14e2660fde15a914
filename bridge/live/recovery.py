"""Recovery: settle every prompt a lost bridge accepted and never settled, from its journal (issue 44).

A bridge opened on a ledger whose previous process died calls :func:`recover` before it takes
new work (:func:`bridge.live.api.open_bridge` with ``ledger=``: in a worker thread). The rules
are :mod:`bridge.core.recovery`'s; this module reads the journals. It is in the live layer, which
calls it, and so may not use the readers (tests/test_layers.py): each journal the open records
name is replayed once, through the same :class:`~bridge.transcript.driver.Driver` and
:class:`~bridge.core.session.Session` as ``bridge replay``; at its end
(:func:`bridge.core.recovery.settle_open`):

- a prompt whose ``receipt`` entry the journal holds but whose ``release`` it does not (the
  journal was cut between the two) is released with that receipt, as replay would;
- the engine is told gone (:meth:`~bridge.core.session.Session.engine_exited`): the prompt it
  held settles as an engine's exit would settle it (the reaper killed the engine with the
  bridge); one the journal shows released with no receipt is given up the same way.

What "the journal shows it sent" is worth depends on how the journal ends (rule 2 of the
core's recovery rests on it: a prompt's ``send`` entry is flushed before any byte of it goes to
the engine). A journal read to its end, or cut inside a line that is no ``send`` entry, shows
every prompt the bridge wrote. One whose reading stopped on damage, or whose cut last line is a
``send``, may not: a prompt it does not show sent is then ``delivery-unknown``, never
``rejected``.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Final, Literal

import attrs
import trio

from bridge.core.ledger import LedgerStore, Record
from bridge.core.receipts import Receipt
from bridge.core.recovery import decided_at_recovery, never_written, settle_open, without_evidence
from bridge.live.ledger import AsyncLedger, Ledger
from bridge.transcript import TranscriptError, open_transcript
from bridge.transcript.driver import Driver, session_for

#: Who decided a recovered receipt: the journal's evidence, or recovery's rules.
DecidedBy = Literal["journal", "recovery"]

#: The start of a journal's ``send`` entry (the writer puts the kind first).
_SEND = b'{"send":'
#: How much of a journal's end is read to find its cut last line.
_TAIL = 1 << 16


@attrs.frozen
class Recovered:
    """One record settled at recovery."""

    record: Record
    receipt: Receipt
    #: ``journal``: the journal's evidence decided it (its settle, its recorded receipt);
    #: ``recovery``: decided at recovery (the core's rules 2 to 4; ``nativeError`` says so).
    by: DecidedBy
    #: The ledger took it (False: another process settled the prompt meanwhile).
    recorded: bool = True


@attrs.frozen
class Evidence:
    """What one journal says: the receipt of each prompt it shows, and how complete it is."""

    #: Receipts by request, each with whether recovery decided it.
    receipts: dict[str, tuple[Receipt, bool]]
    #: It shows every prompt the bridge wrote (read to its end, or cut inside no ``send``).
    whole: bool
    #: Why it could not be read (whole or at all), or None.
    problem: str | None


def recover(ledger: LedgerStore) -> list[Recovered]:
    """Settle every record of ``ledger`` without a receipt, from its journal's evidence, and
    record each receipt in the ledger. Returns what was settled, in the ledger's order."""
    records = ledger.unsettled()
    read: dict[str, Evidence] = {}
    out: list[Recovered] = []
    for record in records:
        evidence = None
        if record.journal is not None:
            if record.journal not in read:
                read[record.journal] = read_journal(record.journal)
            evidence = read[record.journal]
        receipt, by = settle_record(record, evidence)
        out.append(Recovered(record, receipt, by, ledger.settle(receipt, scope=record.scope)))
    return out


def settle_record(record: Record, evidence: Evidence | None) -> tuple[Receipt, DecidedBy]:
    """One record's receipt (the core's rules), and ``journal`` or ``recovery`` for who decided it."""
    request, journal = record.request, record.journal
    if evidence is None:  # no journal recorded for it: the ledger's mark is all there is
        if record.written is None:
            return never_written(request, None), "recovery"
        return without_evidence(request, None), "recovery"
    found = evidence.receipts.get(request)
    if found is not None:
        receipt, at_recovery = found
        return receipt, "recovery" if at_recovery else "journal"
    if evidence.whole and record.written is None:
        return never_written(request, journal), "recovery"
    return without_evidence(request, journal, evidence.problem), "recovery"


def read_journal(path: str) -> Evidence:
    """Replay the journal at ``path`` to its end (or to where it cannot be read), then settle
    what it leaves open as the engine's exit (the module's docstring)."""
    try:
        stream, reader = open_transcript(path)
    except TranscriptError as e:
        return Evidence({}, whole=False, problem=str(e))
    problem: str | None = None
    with stream:
        driver = Driver(session_for(reader.header))
        try:
            for entry in reader.skipping_updates():
                driver.feed(entry)
        except TranscriptError as e:
            problem = str(e)
        whole = problem is None and not (reader.truncated and _cut_line(path).startswith(_SEND))
        if problem is None and not whole:
            problem = "its last line, a prompt's send, was cut off"
    return Evidence(_settle_open(driver, path), whole=whole, problem=problem)


def _settle_open(driver: Driver, path: str) -> dict[str, tuple[Receipt, bool]]:
    """Every prompt the journal shows, with its receipt: its own, or decided now (True, and said so)."""
    found = settle_open(driver.session, driver.recorded, driver.story)
    return {
        request: (decided_at_recovery(receipt, path) if now else receipt, now)
        for request, (receipt, now) in found.items()
    }


def _cut_line(path: str) -> bytes:
    """The journal's last line when it has no line end (what the reader dropped), else b''."""
    try:
        with open(path, "rb") as f:
            size = f.seek(0, os.SEEK_END)
            f.seek(max(0, size - _TAIL))
            tail = f.read()
    except OSError:
        return b""
    if tail.endswith(b"\n"):
        return b""
    return tail.rsplit(b"\n", 1)[-1]


#: Beside the ledger: the lock each bridge open on it holds (shared), and the one that opens it
#: alone takes whole first to recover (issue 44: never the prompts of a bridge still running).
LEASE_SUFFIX: Final = ".lease"


@asynccontextmanager
async def opened_ledger(ledger: str | Path | bool | None) -> AsyncIterator[AsyncLedger | None]:
    """The ledger ``open_bridge(ledger=...)`` names (None or False: none; True: the default one;
    a path), open for one bridge's life, recovered first when no other bridge has it open.

    Each bridge on a ledger holds a shared ``flock`` on the file beside it
    (:data:`LEASE_SUFFIX`) while it is open; the kernel lets go of it when the process ends, a
    SIGKILL too. At open, a bridge that can take the lock whole (no other bridge has the ledger
    open) runs :func:`recover` under it, then holds it shared; one that cannot (another bridge
    runs, whose prompts without a receipt are in flight, not lost) waits for the shared lock
    (for the whole holder's recovery, if one runs) and recovers nothing: the next bridge that
    opens it alone does. Opening, the lock and recovery run in worker threads. Ends (its exit)
    once the ledger and the lock are closed."""
    if ledger is None or ledger is False:
        yield None
        return
    if ledger is True:
        path = None
    elif isinstance(ledger, (str, os.PathLike)) and os.fspath(ledger):
        path = Path(ledger)
    else:
        raise ValueError(f"ledger: True (the default location), a file's path, or False/None for none; not {ledger!r}")
    store = await trio.to_thread.run_sync(Ledger, path)
    lease = -1
    try:
        lease = os.open(str(store.path) + LEASE_SUFFIX, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        await trio.to_thread.run_sync(_take_lease, lease, store)
        yield AsyncLedger(store)
    finally:
        if lease >= 0:
            os.close(lease)  # (lets go of the lock)
        store.close()


def _take_lease(lease: int, store: Ledger) -> None:
    """Recover under the whole lock when it is free, then hold it shared (:func:`opened_ledger`)."""
    try:
        fcntl.flock(lease, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        fcntl.flock(lease, fcntl.LOCK_SH)  # another bridge has it open: its prompts are its own
        return
    recover(store)
    fcntl.flock(lease, fcntl.LOCK_SH)
