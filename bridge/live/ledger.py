"""The ledger on disk: one SQLite record per accepted prompt, made to outlive the bridge (issue 44).

The rules it keeps are :mod:`bridge.core.ledger`'s (records, digests, admission, schemas); this
module carries them out. Rules of its own, and where they come from:

1. **SQLite, the standard library's** (``sqlite3``): one file, no server, transactions, and a
   reader in another process that never sees half a write. WAL mode (``PRAGMA
   journal_mode=WAL``, persistent in the file): readers do not block the writer nor it them,
   and a commit appends to the ``-wal`` file instead of rewriting pages
   (https://sqlite.org/wal.html).
2. **Durable where a controller is told.** ``synchronous=FULL`` for the accept and the receipt:
   in WAL mode a FULL commit fsyncs the WAL before it returns
   (https://sqlite.org/pragma.html#pragma_synchronous), so once :meth:`Ledger.accept` answers
   the record survives a crash of the machine, and the controller hears "accepted" after
   that; the same for a receipt before it is delivered. The ``written`` mark commits with
   ``synchronous=NORMAL``: written to the OS (it survives a crash of the bridge, as the
   journal's ``send`` entry, flushed before the prompt goes to the engine, does), fsynced with
   the next FULL commit; a crash of the machine may lose it, never corrupt the file.
   Two fsyncs per prompt, then: the accept and the receipt (``tools/bench/bench_ledger`` measures).
3. **Several processes at once.** Each process opens its own connection; a writer takes
   SQLite's write lock at the start of its transaction (``BEGIN IMMEDIATE``: an accept reads
   and inserts under one lock, so two bridges given one id at once admit it once) and waits
   up to :data:`BUSY_TIMEOUT` for another writer's commit (``busy_timeout``); readers read a
   snapshot and wait for nobody. SQLite's locks are POSIX advisory locks and a shared-memory
   index beside the file: not for a network file system (https://sqlite.org/wal.html#noshm).
   In one process a :class:`Ledger` serialises its calls (one connection, a lock), so
   threads may share it.
4. **Private.** The file is created 0600 in a 0700 folder (it holds receipts, which hold
   replies); SQLite gives its ``-wal`` and ``-shm`` files the database file's mode.
5. **Its schema checked at opening** (``PRAGMA user_version``): a file of a newer schema is
   refused with one line (:class:`LedgerError`), a fresh file gets this one, in one
   transaction.
6. **Blocking calls, run off the event loop.** Each call waits for SQLite (a lock, an fsync):
   :class:`AsyncLedger` runs them in a worker thread (``trio.to_thread.run_sync``), never
   abandoned: a cancelled caller waits for the call it made, so what it committed is known
   (the wait is bounded by :data:`BUSY_TIMEOUT` and one fsync). The measured reason:
   ``tools/bench/bench_ledger`` (an accept inline blocks the loop for its fsync).

Default location: ``$PI_BRIDGE_LEDGER_DIR``, else ``$XDG_STATE_HOME/pi-bridge/ledger``, else
``~/.local/state/pi-bridge/ledger``, file ``ledger.sqlite3``: a folder of its own beside the
journals (SQLite keeps two files beside the database, and a sandbox hides a folder).
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, TypeVar

import orjson

from bridge.core.ledger import (
    DEFAULT_SCOPE,
    SCHEMA_VERSION,
    Admission,
    Admitted,
    Record,
    admit,
    digest_input,
    schema_problem,
)
from bridge.core.receipts import Receipt
from bridge.core.words import RequestId
from bridge.live.journal import private_dir
from bridge.profiles.orphans import state_folder

if TYPE_CHECKING:
    import trio

#: The database's name in its folder.
LEDGER_FILE: Final = "ledger.sqlite3"
#: How long a write waits for another process's (SQLite's ``busy_timeout``): generous, as a
#: pool's bridges commit a few milliseconds each; past it the call raises :class:`LedgerError`.
BUSY_TIMEOUT: Final = 10.0

_SCHEMA: Final = (
    """CREATE TABLE prompts (
        scope TEXT NOT NULL,
        request TEXT NOT NULL,
        digest TEXT NOT NULL,
        accepted REAL NOT NULL,
        journal TEXT,
        written REAL,
        receipt TEXT,
        settled REAL,
        PRIMARY KEY (scope, request)
    ) WITHOUT ROWID""",
    # Recovery reads the records without a receipt: few, in a ledger of many.
    "CREATE INDEX prompts_open ON prompts (scope, request) WHERE receipt IS NULL",
)
_COLUMNS: Final = "scope, request, digest, accepted, journal, written, receipt, settled"

T = TypeVar("T")


class LedgerError(Exception):
    """The ledger cannot be opened or written; the message names the file and the problem."""


def default_ledger_dir() -> Path:
    return state_folder("PI_BRIDGE_LEDGER_DIR", "ledger")


def default_ledger_path() -> Path:
    return default_ledger_dir() / LEDGER_FILE


def prompt_digest(text: str, options: Mapping[str, Any]) -> str:
    """SHA-256 of the prompt's canonical bytes (:func:`bridge.core.ledger.digest_input`), hex."""
    return hashlib.sha256(digest_input(text, options)).hexdigest()


class Ledger:
    """The ledger at ``path`` (None: :func:`default_ledger_path`), made when absent if
    ``create`` (else :class:`LedgerError` names it). ``clock``: seconds since the epoch."""

    def __init__(
        self, path: Path | None = None, *, create: bool = True, clock: Callable[[], float] = time.time
    ) -> None:
        self.path = default_ledger_path() if path is None else Path(path)
        self._clock = clock
        self._lock = threading.Lock()
        self._db = self._connect(create)

    # -- opening -----------------------------------------------------------------

    def _connect(self, create: bool) -> sqlite3.Connection:
        path = self.path
        if not path.exists():
            if not create:
                raise LedgerError(f"there is no ledger at {path}")
            try:
                private_dir(path.parent)
                os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600))
            except FileExistsError:
                pass  # another process made it meanwhile
            except OSError as e:
                raise LedgerError(f"cannot create the ledger {path}: {e.strerror or e}") from None
        elif path.is_dir():
            raise LedgerError(f"the ledger {path} is a folder (give a file's path)")
        try:
            db = sqlite3.connect(
                f"file:{path}?mode=rw", uri=True, timeout=BUSY_TIMEOUT, isolation_level=None, check_same_thread=False
            )
        except sqlite3.Error as e:
            raise LedgerError(f"cannot open the ledger {path}: {e}") from None
        try:
            self._prepare(db)
        except sqlite3.DatabaseError as e:
            db.close()
            raise LedgerError(f"cannot open the ledger {path}: {e}") from None
        except LedgerError:
            db.close()
            raise
        return db

    def _prepare(self, db: sqlite3.Connection) -> None:
        """Rule 5, then WAL and the durability of rule 2."""
        self._check(db.execute("PRAGMA user_version").fetchone()[0])
        mode = db.execute("PRAGMA journal_mode=WAL").fetchone()[0]
        if str(mode).lower() != "wal":
            raise LedgerError(f"the ledger {self.path} cannot use SQLite's WAL mode (it is in {mode!r} mode)")
        db.execute("PRAGMA synchronous=FULL")
        if db.execute("PRAGMA user_version").fetchone()[0] != 0:
            return  # made already: a reader takes no write lock to open it (rule 3)
        db.execute("BEGIN IMMEDIATE")
        try:
            found = db.execute("PRAGMA user_version").fetchone()[0]
            self._check(found)
            if found == 0:
                for statement in _SCHEMA:
                    db.execute(statement)
                db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise

    def _check(self, found: int) -> None:
        problem = schema_problem(found)
        if problem is not None:
            raise LedgerError(f"the ledger {self.path} cannot be read: {problem}")

    # -- the three steps ------------------------------------------------------------

    def accept(
        self,
        request: RequestId,
        text: str,
        options: Mapping[str, Any],
        *,
        scope: str = DEFAULT_SCOPE,
        journal: str | Path | None = None,
    ) -> Admission:
        """Admit a prompt (:func:`bridge.core.ledger.admit`): a new id's record is on disk
        (fsynced) when this returns :class:`~bridge.core.ledger.Admitted`; an id held already
        is answered from its record, and nothing is written."""
        digest = prompt_digest(text, options)
        where = None if journal is None else str(journal)

        def work(db: sqlite3.Connection) -> Admission:
            held = _record(db.execute(f"SELECT {_COLUMNS} FROM prompts WHERE scope=? AND request=?", (scope, request)))
            decision = admit(held, request, digest)
            if isinstance(decision, Admitted):
                db.execute(
                    "INSERT INTO prompts (scope, request, digest, accepted, journal) VALUES (?, ?, ?, ?, ?)",
                    (scope, request, digest, self._clock(), where),
                )
            return decision

        return self._write(work, durable=True)

    def written(self, request: RequestId, *, scope: str = DEFAULT_SCOPE, journal: str | Path | None = None) -> None:
        """Mark the prompt written to an engine (its journal, when given, recorded with it):
        in the OS when this returns, on the disk with the next durable commit (rule 2)."""
        where = None if journal is None else str(journal)

        def work(db: sqlite3.Connection) -> None:
            db.execute(
                "UPDATE prompts SET written=?, journal=COALESCE(?, journal) WHERE scope=? AND request=?",
                (self._clock(), where, scope, request),
            )

        self._write(work, durable=False)

    def settle(self, receipt: Receipt, *, scope: str = DEFAULT_SCOPE) -> bool:
        """Record ``receipt`` as its prompt's (on disk, fsynced, when this returns): False, and
        nothing written, when the prompt has a receipt already (the first one stands) or the
        ledger holds no such prompt."""
        if receipt.request is None:
            raise ValueError("a receipt without a request id has no place in the ledger")
        body = receipt_bytes(receipt).decode()

        def work(db: sqlite3.Connection) -> bool:
            cursor = db.execute(
                "UPDATE prompts SET receipt=?, settled=? WHERE scope=? AND request=? AND receipt IS NULL",
                (body, self._clock(), scope, receipt.request),
            )
            return cursor.rowcount == 1

        return self._write(work, durable=True)

    # -- reading ----------------------------------------------------------------------

    def get(self, request: RequestId, *, scope: str = DEFAULT_SCOPE) -> Record | None:
        """The record of ``request``, or None."""
        with self._lock:
            return _record(
                self._db.execute(f"SELECT {_COLUMNS} FROM prompts WHERE scope=? AND request=?", (scope, request))
            )

    def records(self, *, scope: str | None = None) -> list[Record]:
        """Every record (of ``scope``, when given), in order of acceptance."""
        where, args = ("WHERE scope=?", (scope,)) if scope is not None else ("", ())
        with self._lock:
            rows = self._db.execute(f"SELECT {_COLUMNS} FROM prompts {where} ORDER BY accepted, scope, request", args)
            return [_from_row(row) for row in rows.fetchall()]

    def unsettled(self) -> list[Record]:
        """Every record without a receipt, in order of acceptance."""
        with self._lock:
            rows = self._db.execute(f"SELECT {_COLUMNS} FROM prompts WHERE receipt IS NULL ORDER BY accepted")
            return [_from_row(row) for row in rows.fetchall()]

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def __enter__(self) -> Ledger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- one transaction -----------------------------------------------------------

    def _write(self, work: Callable[[sqlite3.Connection], T], *, durable: bool) -> T:
        """``work`` in one write transaction (rule 3), committed FULL or NORMAL (rule 2)."""
        with self._lock:
            db = self._db
            try:
                if not durable:
                    db.execute("PRAGMA synchronous=NORMAL")
                db.execute("BEGIN IMMEDIATE")
                try:
                    result = work(db)
                    db.execute("COMMIT")
                except BaseException:
                    db.execute("ROLLBACK")
                    raise
                return result
            except sqlite3.Error as e:
                raise LedgerError(f"cannot write the ledger {self.path}: {e}") from None
            finally:
                if not durable:
                    db.execute("PRAGMA synchronous=FULL")


def receipt_bytes(receipt: Receipt) -> bytes:
    """A receipt's wire JSON, as the ledger keeps it (the core's rule 5)."""
    return orjson.dumps(receipt.to_json())


def _record(cursor: sqlite3.Cursor) -> Record | None:
    row = cursor.fetchone()
    return None if row is None else _from_row(row)


def _from_row(row: tuple[Any, ...]) -> Record:
    scope, request, digest, accepted, journal, written, receipt, settled = row
    return Record(
        scope=scope,
        request=request,
        digest=digest,
        accepted=accepted,
        journal=journal,
        written=written,
        receipt=None if receipt is None else Receipt.from_json(orjson.loads(receipt)),
        settled=settled,
    )


class AsyncLedger:
    """A :class:`Ledger` for the trio layer: each call in a worker thread (rule 6)."""

    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger

    async def accept(
        self,
        request: RequestId,
        text: str,
        options: Mapping[str, Any],
        *,
        scope: str = DEFAULT_SCOPE,
        journal: str | Path | None = None,
    ) -> Admission:
        """:meth:`Ledger.accept` off the event loop. Ends when the record is committed (or the
        id's record read); a cancel waits for that (bounded by :data:`BUSY_TIMEOUT` and an fsync)."""
        import trio

        def call() -> Admission:
            return self.ledger.accept(request, text, options, scope=scope, journal=journal)

        return await trio.to_thread.run_sync(call)

    async def written(
        self, request: RequestId, *, scope: str = DEFAULT_SCOPE, journal: str | Path | None = None
    ) -> None:
        """:meth:`Ledger.written` off the event loop. Ends when it is committed; a cancel waits for that."""
        import trio

        def call() -> None:
            self.ledger.written(request, scope=scope, journal=journal)

        await trio.to_thread.run_sync(call)

    async def settle(self, receipt: Receipt, *, scope: str = DEFAULT_SCOPE) -> bool:
        """:meth:`Ledger.settle` off the event loop. Ends when the receipt is committed (fsynced);
        a cancel waits for that."""
        import trio

        def call() -> bool:
            return self.ledger.settle(receipt, scope=scope)

        return await trio.to_thread.run_sync(call)

    async def get(self, request: RequestId, *, scope: str = DEFAULT_SCOPE) -> Record | None:
        """:meth:`Ledger.get` off the event loop. Ends when the record is read."""
        import trio

        def call() -> Record | None:
            return self.ledger.get(request, scope=scope)

        return await trio.to_thread.run_sync(call)


class LedgerWrites:
    """A bridge's ledger writes, in order, in one task (:meth:`run`): a prompt marked written
    (NORMAL), a receipt recorded (FULL: fsynced) and only then delivered (``deliver``), so
    receipts are delivered in the order the bridge settled them. A write that fails delivers the
    receipt all the same (the journal has it) and says so once (``notify``: a ``ledger-failed``
    signal; :attr:`failed`)."""

    def __init__(
        self,
        ledger: AsyncLedger,
        scope: str,
        deliver: Callable[[Receipt], None],
        notify: Callable[[dict[str, Any]], None],
    ) -> None:
        import trio

        self.ledger, self.scope = ledger, scope
        self._deliver, self._notify = deliver, notify
        self._send, self._recv = trio.open_memory_channel[tuple[str, Any, str | None]](float("inf"))
        self._todo = 0
        self._quiet = trio.Event()
        self._quiet.set()
        #: Why the ledger could not be written, or None.
        self.failed: str | None = None

    def written(self, request: RequestId, journal: str | None) -> None:
        """Queue the mark of ``request`` written (its journal recorded with it)."""
        self._queue(("written", request, journal))

    def settle(self, receipt: Receipt) -> None:
        """Queue ``receipt``: recorded, then delivered."""
        self._queue(("settle", receipt, None))

    def _queue(self, item: tuple[str, Any, str | None]) -> None:
        import trio

        self._todo += 1
        if self._quiet.is_set():
            self._quiet = trio.Event()
        self._send.send_nowait(item)

    async def run(self, scope: trio.CancelScope) -> None:
        """Carry out the writes as they come, each in a worker thread. Ends when ``scope`` (the
        bridge's shielded scope for its tasks) is cancelled: a write in its thread is waited for."""
        with scope:
            async for what, arg, journal in self._recv:
                try:
                    await self._write(what, arg, journal)
                finally:
                    self._todo -= 1
                    if self._todo == 0:
                        self._quiet.set()

    async def _write(self, what: str, arg: Any, journal: str | None) -> None:
        """One write. Ends when it is committed (or failed), and its receipt delivered."""
        try:
            if what == "written":
                await self.ledger.written(arg, scope=self.scope, journal=journal)
            else:
                await self.ledger.settle(arg, scope=self.scope)
        except LedgerError as e:
            if self.failed is None:
                self.failed = str(e)
                self._notify({"type": "signal", "signal": "ledger-failed", "detail": str(e)})
        if what == "settle":
            self._deliver(arg)

    async def flushed(self) -> None:
        """Wait until the writes queued so far are done. Ends then (each bounded by the busy
        timeout and an fsync)."""
        await self._quiet.wait()
