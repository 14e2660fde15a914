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
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any, cast

import sniffio
import trio

from bridge import __version__
from bridge.core.lifecycle import BridgeConfig
from bridge.live.handles import Message, PromptHandle
from bridge.live.journal import Journal, default_journal_dir, private_dir
from bridge.live.supervisor import Bridge
from bridge.profiles.command import EngineProfile
from bridge.profiles.pi import PiProfile

__all__ = ["Bridge", "BridgeConfig", "Message", "PromptHandle", "open_bridge", "query"]


@asynccontextmanager
async def open_bridge(
    profile: EngineProfile,
    *,
    journal: str | Path | bool | None = True,
    config: BridgeConfig | None = None,
    drain_on_exit: bool = False,
    collect: bool = False,
    start_engine: bool = True,
) -> AsyncIterator[Bridge]:
    """Open a bridge on an engine profile; close it (every receipt settled) on exit.

    The same under trio and asyncio: the running library is found (``sniffio``). Under asyncio
    the bridge runs as trio's guest on the asyncio loop (:mod:`bridge.live.aio` says how and
    why), and what the block gets is :class:`~bridge.live.aio.AsyncioBridge`, with the same
    calls, whose handles, dialogs and channels are asyncio's.

    ``journal``: True for a new file in the default location, a path (refused if it exists), or
    False/None for none. The engine's private folders (its key) are removed however this ends.
    ``collect``: keep the tracker's outputs in ``bridge.session`` (``overlaps``, ``working``,
    ``settled``), as replay does; memory then grows with the stream (tools that compare the
    live bridge with replay use it).
    ``start_engine``: the engine is started now and its start-up check awaited, so the block
    begins with an engine that runs the prompts (the first prompt then waits for no start: the
    user pays one engine start, at open rather than at that prompt); False: the first prompt
    (or :meth:`~bridge.live.supervisor.Bridge.models`) starts it, as ``bridge run``, ``serve``
    and ``acp`` do.

    Raises :class:`~bridge.profiles.command.ProfileError`, one line, for what the CLI refuses,
    after everything is cleaned up (the engine reaped, its folders removed): a profile that
    can't be prepared (no Pi, a provider without a model, ...), and -- ``start_engine`` --
    an engine that cannot be launched or whose start-up check refused the launch (a model Pi
    does not offer: ``the engine cannot be set up: seal check failed: Pi does not offer
    --model ...``, the words ``bridge run`` prints). An engine that crashed at start is no
    such error: the block begins, and the next prompt starts the next engine, as after any crash.
    """

    def opener() -> AbstractAsyncContextManager[Bridge]:
        return _open_on_trio(
            profile,
            journal=journal,
            config=config,
            drain_on_exit=drain_on_exit,
            collect=collect,
            start_engine=start_engine,
        )

    try:
        library = sniffio.current_async_library()
    except sniffio.AsyncLibraryNotFoundError:
        raise RuntimeError(
            "open_bridge (and query) run inside an async function under trio.run(main) or asyncio.run(main())"
        ) from None
    if library == "asyncio":
        from bridge.live.aio import open_on_asyncio

        async with open_on_asyncio(opener) as on_asyncio:
            yield cast(Bridge, on_asyncio)  # the same calls: see AsyncioBridge
    else:
        async with opener() as bridge:
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
) -> AsyncIterator[Bridge]:
    """:func:`open_bridge` under trio (and, as trio's guest, under asyncio). Its exit ends when
    the bridge has closed (bounded by the close's graces and the backstop)."""
    config = config or BridgeConfig()
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
    profile = _hide_journals(profile, folder)
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
                bridge=__version__,
                created=_utc_now(),
                lean=not config.journal_full,
                **launch.header,
            )
        raised: BaseException | None = None
        try:
            async with trio.open_nursery() as nursery:
                bridge = Bridge(nursery, profile, launch, jr, config, collect=collect)
                nursery.start_soon(bridge._clock)
                nursery.start_soon(bridge._fsync_journal)
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
            bridge.engines.clean_up()
        launch.run_cleanup()
        if jr is not None and not jr.closed:  # (the bridge's close closes it when it got that far)
            jr.on_failure = None
            jr.close()


async def query(
    prompt: str,
    *,
    engine: EngineProfile | None = None,
    journal: str | Path | bool | None = True,
    config: BridgeConfig | None = None,
    timeout: float | None = None,
    images: list[dict[str, Any]] | None = None,
    provider: str | None = None,
    model: str | None = None,
    thinking: str | None = None,
) -> AsyncIterator[Message]:
    """One prompt, in one call: a bridge is opened on ``engine`` (default: the sealed, pinned
    Pi, ``PiProfile()``), the prompt is sent, and what comes of it is yielded as it happens --
    text and thinking deltas, tool calls, retries, turns, usage (:mod:`bridge.core.progress`) -- and
    its :class:`~bridge.core.receipts.Receipt` last; then the bridge closes (the engine reaped,
    its private folders removed). Under trio and asyncio alike. Leaving the loop early stops
    the prompt (its receipt is still journaled). ``journal``, ``config`` as
    :func:`open_bridge`; ``timeout``, ``images``, ``provider``, ``model``, ``thinking`` as
    :meth:`Bridge.submit <bridge.live.supervisor.Bridge.submit>`. Ends after the receipt.

    ::

        async for message in bridge.query("Explain this repo"):
            if isinstance(message, TextEvent):
                print(message.delta, end="")
            elif isinstance(message, Receipt):
                print(message)
    """
    async with open_bridge(engine if engine is not None else PiProfile(), journal=journal, config=config) as bridge:
        handle = await bridge.submit(
            prompt, events=True, timeout=timeout, images=images, provider=provider, model=model, thinking=thinking
        )
        async for message in handle.messages():
            yield message


def _hide_journals(profile: EngineProfile, folder: Path | None) -> EngineProfile:
    """A confined Pi does not see the journal's folder, nor the default one (SPEC §2)."""
    if not isinstance(profile, PiProfile) or not profile.sandbox.enabled:
        return profile
    folders = [default_journal_dir()]
    if folder is not None:
        try:
            private_dir(folder)  # made now, as the journal would, so it can be hidden
        except OSError:
            pass  # the journal says why when it is opened
        folders.append(folder)
    for hidden in folders:
        if hidden.is_dir():
            profile = profile.hiding(hidden)
    return profile


def _utc_now() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
