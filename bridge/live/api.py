"""The Python API (SPEC §7): :func:`open_bridge` opens a :class:`~bridge.live.supervisor.Bridge`
on an engine profile, with its journal, and closes it -- every receipt settled, the engine
reaped -- when the ``async with`` ends, however it ends::

    async with open_bridge(profile) as bridge:
        handle = await bridge.submit("hello", stream=True)
        async for text in handle.text():
            print(text, end="")
        receipt = await handle.receipt()
"""

from __future__ import annotations

import datetime
import os
from collections.abc import AsyncIterator, Awaitable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any, Unpack

import attrs
import sniffio
import trio

from bridge import __version__
from bridge.core.config import BridgeConfig
from bridge.core.ledger import DEFAULT_SCOPE
from bridge.core.prompts import RunOptions
from bridge.live.handles import Message, PromptHandle
from bridge.live.journal import Journal, default_journal_dir, private_dir
from bridge.live.ledger import AsyncLedger
from bridge.live.oneshot import Query
from bridge.live.protocols import BridgeAPI
from bridge.live.recovery import opened_ledger
from bridge.live.retention import keep_from
from bridge.live.submits import prompt_door
from bridge.live.supervisor import Bridge
from bridge.profiles.command import EngineProfile, ProfileError
from bridge.profiles.conversation import Conversation, default_conversation_dir
from bridge.profiles.orphans import register_hidden
from bridge.profiles.pi import PiProfile

__all__ = [
    "Bridge",
    "BridgeAPI",
    "BridgeConfig",
    "Message",
    "PromptHandle",
    "Query",
    "open_bridge",
    "open_trio_bridge",
    "query",
]


def open_bridge(
    profile: EngineProfile,
    *,
    journal: str | Path | bool | None = True,
    config: BridgeConfig | None = None,
    drain_on_exit: bool = False,
    collect: bool = False,
    start_engine: bool = True,
    conversation: str | None = None,
    ledger: str | Path | bool | None = None,
    scope: str = DEFAULT_SCOPE,
) -> AbstractAsyncContextManager[BridgeAPI]:
    """Open a bridge on an engine profile; close it (every receipt settled) on exit.

    The same under trio and asyncio: the running library is found (``sniffio``). Under asyncio
    the bridge runs as trio's guest on the asyncio loop (:mod:`bridge.live.aio` says how and
    why), and what the block gets is :class:`~bridge.live.aio.AsyncioBridge`, with the same
    calls, whose handles, dialogs and channels are asyncio's. Typed as what both have,
    :class:`~bridge.live.protocols.BridgeAPI` (every call's parameters written out); trio code
    that wants the trio class itself (its channels as trio's) opens it with
    :func:`open_trio_bridge`.

    Leaving the block closes the bridge however it is left (its end, an exception, a
    cancellation, Ctrl-C): the running prompt is stopped (``failed``/``closing``), queued
    ones are rejected (``closing``), the engine is stopped, every receipt is settled and
    journaled, and the engine's private folders (its key) are removed. What the block raises
    comes out of it as raised, not wrapped in the bridge's own exception group. The exit ends
    when the bridge has closed (bounded by the close's graces and a backstop).

    Args:
        profile: The engine: :class:`~bridge.profiles.pi.PiProfile` (the sealed, pinned Pi),
            :func:`~bridge.profiles.pi.scripted_profile` (it, against the scripted model
            server) or :class:`~bridge.profiles.command.CommandProfile` (any argv speaking
            the same JSONL).
        journal: True (the default) for a new file in the default folder
            (``$PI_BRIDGE_JOURNAL_DIR``, else ``$XDG_STATE_HOME/pi-bridge/journals``, else
            ``~/.local/state/pi-bridge/journals``); a path, not there yet; False or None: none.
        config: Limits and timeouts (:class:`~bridge.core.config.BridgeConfig`;
            default: its defaults).
        drain_on_exit: At the block's normal end, wait until every accepted prompt has its
            receipt before closing (default: the running prompt is stopped).
        collect: Keep the tracker's outputs for ``bridge.collected()`` (``overlaps``, ``working``,
            ``settled``), as replay does; memory then grows with the stream (tools that
            compare the live bridge with replay use it).
        start_engine: True (the default): the engine is started now and its start-up check
            awaited (one engine start, at open rather than at the first prompt). False: the
            first prompt (or ``models()``) starts it, as ``bridge run``, ``serve`` and ``acp``
            do; a refused launch is then that prompt's ``rejected``/``engine-down`` receipt.
        conversation: A named conversation to resume or begin (a Pi profile only;
            docs: guide/conversations.md): its Pi session file is kept in the bridge's private
            state, every engine of this bridge resumes it, and the bridge holds its lock until
            it closes. Default: ``config``'s ``conversation`` (``--conversation``).
        ledger: The durable ledger (docs: guide/ledger.md): None or False (the default) for
            none; True for the default one (``$PI_BRIDGE_LEDGER_DIR``, else
            ``$XDG_STATE_HOME/pi-bridge/ledger``, else ``~/.local/state/pi-bridge/ledger``,
            file ``ledger.sqlite3``); a path. Opened before the engine starts, and recovered
            first when no other bridge has it open: every prompt a lost bridge accepted and never
            settled gets its receipt from its journal (never by running it again). Then each
            prompt is accepted into it before it is (an id it holds for the same text and
            options runs nothing: the handle's receipt is the first one's; other text under it
            raises ValueError), and each receipt is recorded in it (fsynced) before it is
            delivered; ``await bridge.receipt(id)`` reads it.
        scope: Who chose the ids, in the ledger (default ``default``).

    Returns:
        An async context manager (``async with open_bridge(...) as bridge``) whose block gets
        the open bridge: a :class:`~bridge.live.supervisor.Bridge` (trio), an
        :class:`~bridge.live.aio.AsyncioBridge` (asyncio).

    Raises:
        ProfileError: One line, for what the CLI refuses, after everything is cleaned up
            (the engine reaped, its folders removed): the engine cannot be prepared (a missing
            Pi install, a version other than the pin, a ``PiProfile(provider=...)`` without
            its ``model``, a sandbox that cannot be set up); with ``start_engine``, an engine
            that cannot be launched or whose start-up check refused the launch (a model Pi
            does not offer: ``the engine cannot be set up: seal check failed: Pi does not
            offer --model ...``, the words ``bridge run`` prints). A crash at start is not
            one: the block begins, and the next prompt starts the next engine. A
            ``conversation`` that is no folder's name (a ``/``), another live bridge has open,
            is damaged or was written by a newer Pi or pi-bridge, or not with Pi.
        JournalError: The journal cannot be created or its header written (a path that
            exists is refused).
        LedgerError: The ledger cannot be opened (a folder, a newer schema, ...), or its
            recovery could not write it.
        ValueError: ``journal`` or ``ledger`` is neither a boolean, None nor a non-empty path.
        RuntimeError: Called outside ``trio.run`` or ``asyncio.run``.
    """
    return _open_bridge(
        profile,
        journal=journal,
        config=config,
        drain_on_exit=drain_on_exit,
        collect=collect,
        start_engine=start_engine,
        conversation=conversation,
        ledger=ledger,
        scope=scope,
    )


@asynccontextmanager
async def _open_bridge(
    profile: EngineProfile,
    *,
    journal: str | Path | bool | None,
    config: BridgeConfig | None,
    drain_on_exit: bool,
    collect: bool,
    start_engine: bool,
    conversation: str | None,
    ledger: str | Path | bool | None,
    scope: str,
) -> AsyncIterator[BridgeAPI]:
    """:func:`open_bridge`'s block (a plain function in front of it, so that what the reference
    and a reader see is a context manager, not a generator). Its exit ends when the bridge has
    closed."""

    def opener() -> AbstractAsyncContextManager[Bridge]:
        return _open_on_trio(
            profile,
            journal=journal,
            config=config,
            drain_on_exit=drain_on_exit,
            collect=collect,
            start_engine=start_engine,
            conversation=conversation,
            ledger=ledger,
            scope=scope,
        )

    if running_library() == "asyncio":
        from bridge.live.aio import open_on_asyncio

        async with open_on_asyncio(opener) as on_asyncio:
            yield on_asyncio
    else:
        async with opener() as bridge:
            yield bridge


def running_library(what: str = "open_bridge (and query) run") -> str:
    """``trio`` or ``asyncio`` (``sniffio``); RuntimeError outside both, saying ``what``."""
    try:
        return sniffio.current_async_library()
    except sniffio.AsyncLibraryNotFoundError:
        raise RuntimeError(f"{what} inside an async function under trio.run(main) or asyncio.run(main())") from None


@asynccontextmanager
async def open_trio_bridge(
    profile: EngineProfile,
    *,
    journal: str | Path | bool | None = True,
    config: BridgeConfig | None = None,
    drain_on_exit: bool = False,
    collect: bool = False,
    start_engine: bool = True,
    conversation: str | None = None,
    ledger: str | Path | bool | None = None,
    scope: str = DEFAULT_SCOPE,
) -> AsyncIterator[Bridge]:
    """:func:`open_bridge` under trio, typed as the trio :class:`~bridge.live.supervisor.Bridge`
    itself: for trio code that uses what only it has (its channels as trio's, the ``listeners``
    and dialog answering the CLI's controllers use). The parameters, the opening and the close
    are :func:`open_bridge`'s. Raises RuntimeError, before anything is opened, outside trio."""
    try:
        library = sniffio.current_async_library()
    except sniffio.AsyncLibraryNotFoundError:
        library = None
    if library != "trio":
        raise RuntimeError("open_trio_bridge runs under trio.run(main); open_bridge runs under asyncio too")
    async with open_bridge(
        profile,
        journal=journal,
        config=config,
        drain_on_exit=drain_on_exit,
        collect=collect,
        start_engine=start_engine,
        conversation=conversation,
        ledger=ledger,
        scope=scope,
    ) as bridge:
        assert isinstance(bridge, Bridge)  # under trio it is the trio bridge itself
        yield bridge


@asynccontextmanager
async def _open_on_trio(
    profile: EngineProfile,
    *,
    journal: str | Path | bool | None,
    config: BridgeConfig | None,
    drain_on_exit: bool,
    collect: bool,
    start_engine: bool,
    conversation: str | None = None,
    ledger: str | Path | bool | None = None,
    scope: str = DEFAULT_SCOPE,
) -> AsyncIterator[Bridge]:
    """:func:`open_bridge` under trio (and, as trio's guest, under asyncio). Its exit ends when
    the bridge has closed (bounded by the close's graces and the backstop)."""
    config = config or BridgeConfig()
    conv: Conversation | None = None
    conversation = conversation if conversation is not None else config.conversation
    if conversation is not None:
        if not isinstance(profile, PiProfile):
            raise ProfileError(
                "a named conversation needs the Pi engine (its session file is Pi's), not another engine"
            )
        conv = Conversation.open(conversation)  # the lock, held until the bridge has closed
        profile = attrs.evolve(profile, conversation=conv)
        config = attrs.evolve(config, conversation=conversation)
    try:
        async with (
            opened_ledger(ledger) as held,
            _opened(profile, journal, config, drain_on_exit, collect, start_engine, held, scope) as bridge,
        ):
            yield bridge
    finally:
        if conv is not None:
            conv.close()


@asynccontextmanager
async def _opened(
    profile: EngineProfile,
    journal: str | Path | bool | None,
    config: BridgeConfig,
    drain_on_exit: bool,
    collect: bool,
    start_engine: bool,
    ledger: AsyncLedger | None = None,
    scope: str = DEFAULT_SCOPE,
) -> AsyncIterator[Bridge]:
    """:func:`_open_on_trio` once the conversation (if any) is open. Its exit ends when the
    bridge has closed (bounded by the close's graces and the backstop)."""
    # The journal's path (None: a new name in the default location, made as it is opened).
    path: Path | None = None
    if journal is True:
        folder: Path | None = default_journal_dir()
    elif journal is False or journal is None:
        folder = None
    elif isinstance(journal, (str, os.PathLike)) and os.fspath(journal):
        path = Path(journal)
        folder = path.parent
    else:  # "" or 0 would quietly mean no journal at all
        raise ValueError(
            f"journal: True (the default location), a file's path, or False/None for none; not {journal!r}"
        )
    profile = _hide_journals(profile, folder, ledger)
    bridge: Bridge | None = None
    jr: Journal | None = None
    launch = profile.prepare()
    # From here on, whatever ends this (the block's exception or group, a cancellation, a
    # KeyboardInterrupt, a nursery that cannot be opened -- trio's under asyncio -- a Bridge
    # that cannot be made), the private folders and the credentials of every engine launch
    # prepared for this bridge are removed, and the journal is closed, before it goes on.
    try:
        if folder is not None:
            jr = Journal(
                path,
                clearing=launch.clearing,
                full=config.journal_full,
                keep=keep_from(config.journal_keep_days, config.journal_keep_mb),
                bridge=__version__,
                created=_utc_now(),
                lean=not config.journal_full,
                **launch.header,
            )
        raised: BaseException | None = None
        try:
            async with trio.open_nursery() as nursery:
                bridge = Bridge(nursery, profile, launch, jr, config, collect=collect, ledger=ledger, scope=scope)
                nursery.start_soon(bridge._clock)
                nursery.start_soon(bridge._fsync_journal)
                if bridge.ledger_writes is not None:
                    nursery.start_soon(bridge.ledger_writes.run, bridge._shielded())
                try:
                    if start_engine:
                        await bridge.start_engine()  # a refusal raises, and the bridge closes
                    yield bridge
                    if drain_on_exit:
                        await bridge.drain()
                except BaseException as e:
                    raised = e
                    raise
                finally:
                    with trio.CancelScope(shield=True):
                        await bridge.aclose()
                    nursery.cancel_scope.cancel()
        except BaseExceptionGroup as group:
            # The nursery wraps what the caller's block raised in a group of one; the caller
            # catches its own exception as it raised it (``except KeyError``), as if no nursery
            # were there. A group with anything of the bridge's own in it stays a group.
            if raised is None or group.exceptions != (raised,):
                raise
        else:
            return
        raise raised
    finally:
        # Each once (Launch.run_cleanup): what the bridge's close already removed stays removed.
        # Every task of the nursery has ended here: no engine of this bridge runs on them.
        if bridge is not None:
            bridge.launches.clean_up()
        launch.run_cleanup()
        if jr is not None and not jr.closed:  # (the bridge's close closes it when it got that far)
            jr.on_failure = None
            jr.close()


@prompt_door(RunOptions)
def query(
    prompt: str,
    *,
    engine: EngineProfile | None = None,
    journal: str | Path | bool | None = True,
    config: BridgeConfig | None = None,
    **options: Unpack[RunOptions],
) -> Query:
    """One prompt, in one call: open a bridge, send the prompt, yield what comes of it, close.

    A bridge is opened on ``engine``, the prompt is sent, and what comes of it is yielded as it
    happens -- text and thinking deltas, tool calls, retries, turns, usage
    (:mod:`bridge.core.progress`) -- and its :class:`~bridge.core.receipts.Receipt` last;
    then the bridge closes (the engine reaped, its private folders removed). Under trio and
    asyncio alike. Leaving the loop early (``break``, an exception) closes the bridge, which
    stops the prompt (``failed``/``closing``, journaled); ``await stream.aclose()`` (or
    ``contextlib.aclosing(query(...))``) does it and ends when the bridge has closed. The loop
    ends after the receipt, once the bridge has closed. The bridge runs in a task of its own
    for the stream's length (:mod:`bridge.live.oneshot` says why), so leaving early is safe
    under trio and asyncio alike.

    Args:
        prompt: The prompt's text.
        engine: The engine profile (default: ``PiProfile()``, the sealed, pinned Pi).
        journal: As :func:`open_bridge`'s (default: a new file in the default folder).
        config: As :func:`open_bridge`'s.
        **options: The prompt's options (:class:`~bridge.core.prompts.RunOptions`: ``timeout``,
            ``images``, ``stall_timeout``, ``provider``, ``model``, ``thinking``, ``budget_usd``,
            ``budget_tokens``, ``trace``), each optional; its events are always read.

    Returns:
        A :class:`~bridge.live.oneshot.Query`: an async iterator of each
        :data:`~bridge.live.handles.Message` -- the prompt's events as they happen, then its
        receipt, last -- with ``aclose()``. Nothing is opened until it is iterated.

    Raises:
        ProfileError: As :func:`open_bridge` (raised by the loop's first step, as all below).
        JournalError: As :func:`open_bridge`.
        TypeError: A bad argument, as :meth:`Bridge.submit_nowait
            <bridge.live.supervisor.Bridge.submit_nowait>` raises it.
        ValueError: A bad argument, as :meth:`Bridge.submit_nowait
            <bridge.live.supervisor.Bridge.submit_nowait>` raises it.

    Example:
        ```python
        async for message in query("Explain this repo"):
            if isinstance(message, TextEvent):
                print(message.delta, end="")
            elif isinstance(message, Receipt):
                print(message)
        ```
    """
    profile = engine if engine is not None else PiProfile()

    def opener() -> AbstractAsyncContextManager[BridgeAPI]:
        return open_bridge(profile, journal=journal, config=config)

    def submit(bridge: BridgeAPI) -> Awaitable[Any]:
        return bridge.submit(prompt, events=True, **options)

    return Query(opener, submit)


def _hide_journals(profile: EngineProfile, folder: Path | None, ledger: AsyncLedger | None = None) -> EngineProfile:
    """A confined Pi does not see the journal's folder, nor the default journal and conversation
    folders, nor the ledger's (it holds receipts, which hold replies) (SPEC §2): each made now (0700, parents too) so it can be hidden, and registered
    for every other bridge's sandboxes while this process lives (rule 3 of
    :mod:`bridge.profiles.orphans`)."""
    if not isinstance(profile, PiProfile) or not profile.sandbox.enabled:
        return profile
    folders = [default_journal_dir(), default_conversation_dir()]
    if folder is not None:
        folders.append(folder)
    if ledger is not None:
        folders.append(ledger.ledger.path.parent)
    for hidden in folders:
        try:
            private_dir(hidden)  # made now, as the journal would, so it can be hidden
        except OSError:
            pass  # the journal says why when it is opened
        if hidden.is_dir():
            profile = profile.hiding(hidden)
            try:
                register_hidden(hidden)
            except (OSError, ProfileError):
                pass  # the engine's own start refuses a root it cannot use, naming why
    return profile


def _utc_now() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
