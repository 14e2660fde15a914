"""One engine actor of a Ray pool: a Ray worker process running one bridge and its sealed engine.

Why a thread running ``trio.run`` and not Ray's async actors with the asyncio door: the bridge
is a block (``async with open_bridge(...)``) that must open and close in one task, and an actor
lives across many method calls. A dedicated thread runs that block for the actor's whole life
(:func:`_serve`); the actor's methods are plain, none ``async`` (so Ray runs them in its own
threads, ``max_concurrency``, and a ``stop`` is taken while a ``run`` waits), and reach into
it with ``trio.from_thread``. The structured-concurrency rules hold inside: every prompt task is in the thread's nursery, and the bridge's close
settles every receipt, stops the engine and reaps it. Under Ray's async actors the bridge would
run as trio's guest on Ray's own event loop, with its block's enter and exit in different
method calls: more moving parts for the same thing.

What the driver learns, in order, from :meth:`EngineActor.run` (a Ray streaming generator):
``{"stage": "running"}`` at the prompt's first event (its run started on the engine: the model
had it), then ``{"receipt": …}`` (the receipt's JSON), last. If the actor or its node dies in
between, the driver's read raises, and its dispatch (:mod:`bridge.core.dispatch`) decides the
prompt's receipt from what it had heard.
"""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import trio

from bridge.core.config import BridgeConfig
from bridge.core.receipts import Receipt
from bridge.live.api import open_bridge
from bridge.live.protocols import BridgeAPI
from bridge.profiles.command import EngineProfile

#: Seconds the actor waits for its bridge to open (the engine's start and start-up check: a
#: real Pi starts in 1-3 s here; a loaded CI machine is slower).
OPEN_TIMEOUT: Final = 120.0
#: How often a waiting method checks that the bridge's thread still runs (a backstop: the
#: bridge settles every prompt's receipt, so the wait normally ends on its own).
POLL: Final = 1.0


class EngineActor:
    """The actor's body (:func:`bridge.ray.pool.RayPool` makes it a Ray actor class).

    ``journal``: True (the default folder on this node), False (none), or a folder on this
    node in which the actor writes its own new file. ``options`` go to ``open_bridge``
    (``config``, ``start_engine``)."""

    def __init__(self, engine: EngineProfile, name: str, journal: bool | str, options: dict[str, Any]) -> None:
        self._engine = engine
        self._name = name
        self._journal: bool | Path = (
            Path(journal) / f"ray-{name}-{os.getpid()}.jsonl" if isinstance(journal, str) else journal
        )
        self._options = options
        self._opened = threading.Event()
        self._failed: BaseException | None = None
        self._bridge: BridgeAPI | None = None
        self._token: trio.lowlevel.TrioToken | None = None
        self._nursery: trio.Nursery | None = None
        self._close: trio.Event | None = None
        #: Prompts submitted to the bridge, and stops that came before their submit (both
        #: touched only in the bridge's thread).
        self._submitted: set[str] = set()
        self._stop_first: set[str] = set()
        #: A prompt ran on this actor's engine: the next starts a new conversation.
        self._used = False
        self._thread = threading.Thread(target=self._main, name=f"pi-bridge-{name}", daemon=True)
        self._thread.start()
        # A bridge that cannot open is told by where() (its one line, as open_bridge raised
        # it), not raised here: Ray would wrap it in a creation-task traceback.
        if not self._opened.wait(OPEN_TIMEOUT) and self._failed is None:
            self._failed = RuntimeError(f"the bridge of {name} did not open in {OPEN_TIMEOUT:g} s")

    def where(self) -> dict[str, Any]:
        """Where this actor runs: its node's id and address, its own id, its journal's path;
        and ``error``, why its bridge could not open (None: it is open)."""
        import ray  # (a worker of the pool has it; the module imports without it)

        failed = self._failed
        context = ray.get_runtime_context()
        journal = self._bridge.journal if self._bridge is not None else None
        return {
            "node": context.get_node_id(),
            "address": ray.util.get_node_ip_address(),
            "actor": context.get_actor_id(),
            "journal": str(journal.path) if journal is not None else None,
            "pid": os.getpid(),
            "error": f"{type(failed).__name__}: {failed}" if failed is not None else None,
        }

    def run(self, request: str, message: str, options: dict[str, Any]) -> Iterator[dict[str, Any]]:
        """Run one prompt (``options``: the bridge's ``submit`` options, checked by the driver,
        and ``continues``: it continues this actor's conversation, else it starts afresh):
        yields ``{"stage": "running"}`` once its run started, then ``{"receipt": JSON}``, last.
        Ends with the receipt (the bridge settles every prompt's, at the latest when it
        closes); raises RuntimeError if the bridge's thread ended first."""
        out: queue.SimpleQueue[tuple[str, Any]] = queue.SimpleQueue()
        assert self._nursery is not None and self._token is not None
        trio.from_thread.run_sync(
            self._nursery.start_soon, _prompt, self, request, message, options, out, trio_token=self._token
        )
        while True:
            try:
                kind, value = out.get(timeout=POLL)
            except queue.Empty:
                if not self._thread.is_alive():
                    raise RuntimeError(f"the bridge of {self._name} ended without a receipt for {request}") from None
                continue
            if kind == "error":
                raise RuntimeError(value)
            yield {kind: value}
            if kind == "receipt":
                return

    def stop(self, request: str) -> bool:
        """Stop a prompt this actor holds (its bridge's ``stop``: the receipt its rules give goes
        out through :meth:`run`). A stop that comes before :meth:`run`'s task has submitted the
        prompt is kept and carried out right after the submit. False when the bridge is gone."""
        if self._token is None or not self._thread.is_alive():
            return False
        try:
            trio.from_thread.run(_stop, self, request, trio_token=self._token)
        except trio.RunFinishedError:
            return False
        return True

    def close(self) -> None:
        """Close the bridge (a running prompt is stopped: ``failed``/``closing``; its receipt
        still goes out) and wait for its thread. Ends when the bridge has closed (bounded by
        its close's graces)."""
        if self._token is not None and self._close is not None and self._thread.is_alive():
            try:
                trio.from_thread.run_sync(self._close.set, trio_token=self._token)
            except trio.RunFinishedError:
                pass
        self._thread.join()

    # -- the bridge's thread

    def _main(self) -> None:
        try:
            trio.run(_serve, self)
        except BaseException as e:
            self._failed = self._failed or e
        finally:
            self._opened.set()


# -- the bridge's thread's tasks. Not methods of the actor: a class with an ``async def`` is an
# asyncio actor to Ray, whose methods all run on one event loop, so a ``run`` waiting for its
# receipt would hold up every other call (``stop``, ``where``) until it ended.


async def _serve(actor: EngineActor) -> None:
    """The bridge's whole life: open, serve prompts until :meth:`close`, close."""
    actor._close = trio.Event()
    config = actor._options.get("config") or BridgeConfig()
    async with trio.open_nursery() as nursery:
        try:
            async with open_bridge(
                actor._engine,
                journal=actor._journal,
                config=config,
                start_engine=bool(actor._options.get("start_engine", True)),
            ) as bridge:
                actor._bridge, actor._nursery = bridge, nursery
                actor._token = trio.lowlevel.current_trio_token()
                actor._opened.set()
                await actor._close.wait()
        except BaseException as e:
            actor._failed = e
            raise
        # The bridge has closed: every prompt task has its receipt and ends by itself.


async def _stop(actor: EngineActor, request: str) -> None:
    """:meth:`EngineActor.stop` in the bridge's thread. Returns at once (the bridge's stop
    does not wait for the engine)."""
    if request in actor._submitted:
        assert actor._bridge is not None
        await actor._bridge.stop(request)
    else:
        actor._stop_first.add(request)


async def _prompt(
    actor: EngineActor, request: str, message: str, options: dict[str, Any], out: queue.SimpleQueue[tuple[str, Any]]
) -> None:
    """Submit one prompt and report its stage and its receipt to :meth:`run`. Ends with its
    receipt (the bridge settles every prompt's, at the latest when it closes)."""
    try:
        assert actor._bridge is not None
        options = dict(options)
        continues = bool(options.pop("continues", False))
        if actor._used and not continues:
            # A prompt starts afresh unless it continues this actor's conversation (the
            # dispatch's D10, as a pool's R2): the engine ran another prompt before, and its
            # context held that prompt's words (issue 42: user 3's model request carried user
            # 0's secret, and the tokens grew with each prompt).
            actor._bridge.new_conversation()
        actor._used = True
        handle = await actor._bridge.submit(message, request=request, events=True, **options)
        actor._submitted.add(request)
        if request in actor._stop_first:
            actor._stop_first.discard(request)
            await actor._bridge.stop(request)
        started = False
        async for item in handle.messages():
            if isinstance(item, Receipt):
                out.put(("receipt", item.to_json()))
            elif not started:
                started = True
                out.put(("stage", "running"))
    except Exception as e:  # a bug on this side: told to the driver, the actor goes on
        out.put(("error", f"{type(e).__name__}: {e}"))
    except BaseException:  # cancelled (the thread's end): run() sees the thread gone
        out.put(("error", f"the bridge of {actor._name} ended without a receipt for {request}"))
        raise
    finally:
        actor._submitted.discard(request)
