"""A pool of sealed engines across a Ray cluster (docs: guide/ray.md; SPEC §5 "Across machines").

:class:`RayPool` places ``engines`` engine actors (:class:`~bridge.ray.actor.EngineActor`: each a
Ray worker process running one bridge and its engine) across the cluster, one *lane* each, and
runs prompts on them: :meth:`RayPool.run` keeps input order, :meth:`RayPool.submit` gives a
``concurrent.futures.Future`` of one receipt, :meth:`RayPool.submit_all` one of the list.

The driver's side is one thread per lane: it takes the next prompt from the pool's FIFO when
its actor is free, calls the actor's ``run`` (a Ray streaming generator: "running", then the
receipt) and tells the pool's :class:`~bridge.core.dispatch.Dispatch` what it heard. That pure
object decides what a lost node or actor costs (its rules, D1-D9, are in its module): a prompt
whose run had started there is ``outcome-unknown``/``node-lost``, one handed to the actor with no
run reported ``delivery-unknown``/``node-lost``, each naming the node; a prompt never handed to
an actor waits for another; no prompt gets two receipts. The lane threads only carry that out.
"""

from __future__ import annotations

import concurrent.futures as cf
import itertools
import threading
from collections.abc import Iterable, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Final, Unpack

try:
    import ray
    import ray.exceptions
except ImportError as e:  # (the extra is optional: say which one)
    raise ImportError(f"bridge.ray needs Ray: pip install 'pi-bridge[ray]' ({e})") from e

from bridge.core.config import BridgeConfig
from bridge.core.dispatch import Dispatch, Lane
from bridge.core.framing import DEFAULT_MAX_LINE
from bridge.core.prompts import RayPromptOptions, check_prompt
from bridge.core.receipts import Receipt, Where
from bridge.live.submits import check_size, prompt_door
from bridge.profiles.command import EngineProfile
from bridge.ray.actor import EngineActor

__all__ = ["RayPool"]

#: Seconds the pool waits for its actors to be placed and their bridges to open.
OPEN_TIMEOUT: Final = 180.0
#: Seconds :meth:`RayPool.close` gives the actors to close their bridges (a running prompt's
#: stop and its settle, the engine's stop: the bridge's own graces, about 10 s at most), before
#: it kills them.
CLOSE_TIMEOUT: Final = 30.0
#: Seconds a lane in doubt (its node lost another lane) has to answer before it is handed a prompt.
PING_TIMEOUT: Final = 10.0
#: Seconds :meth:`RayPool.stop` waits for the actor holding the prompt to take its stop.
STOP_TIMEOUT: Final = 30.0
#: How often a waiting lane thread looks again (a backstop: every change notifies it).
POLL: Final = 1.0
#: Characters of Ray's error kept in a ``node-lost`` receipt.
WHY_CHARS: Final = 600


class RayPool:
    """``engines`` sealed engines across a Ray cluster, one receipt per prompt.

    Connect to the cluster first (``ray.init(address=...)``; without it, Ray starts a local
    one). Use it as a ``with`` block: its end waits for every receipt, then closes the actors'
    bridges and ends the actors (:meth:`close`).

    Args:
        engine: The engine profile each actor opens a bridge on
            (:func:`~bridge.profiles.pi.scripted_profile`, :class:`~bridge.profiles.pi.PiProfile`,
            :class:`~bridge.profiles.command.CommandProfile`); sent to the actors pickled, so
            what it names (Pi's install, a ``models.json``) must be at the same path on every node.
        engines: How many engine actors (lanes).
        journal: True: each actor writes its journal in the default folder on its node; False:
            none; a folder (the same path on every node): each actor its own new file there.
            Journals stay on their nodes; each receipt's ``where`` says which node and file.
        config: The bridges' limits and timeouts (as ``open_bridge``'s).
        start_engine: As ``open_bridge``'s (True: each actor starts its engine at open).
        num_cpus: CPUs each actor reserves (Ray's ``num_cpus``).
        actor_options: More Ray actor options (``resources``, ``scheduling_strategy``, ...);
            the default strategy is ``SPREAD``: the actors across the nodes.

    Raises:
        RuntimeError: An actor could not be placed or its bridge could not open (the actor's
            error in the message), or not within :data:`OPEN_TIMEOUT`; every actor made is ended.
        ValueError: ``engines`` is not a positive number.
    """

    def __init__(
        self,
        engine: EngineProfile,
        engines: int = 4,
        *,
        journal: bool | str | Path = True,
        config: BridgeConfig | None = None,
        start_engine: bool = True,
        num_cpus: float = 1.0,
        actor_options: dict[str, Any] | None = None,
    ) -> None:
        if isinstance(engines, bool) or not isinstance(engines, int) or engines < 1:
            raise ValueError(f"engines must be a positive number, not {engines!r}")
        self._dispatch = Dispatch()
        self._cv = threading.Condition()
        self._futures: dict[str, cf.Future[Receipt]] = {}
        self._jobs: dict[str, tuple[str, dict[str, Any]]] = {}
        self._ids = itertools.count(1)
        self._closed = False
        self._actors: dict[str, Any] = {}
        self._threads: list[threading.Thread] = []
        options = {"num_cpus": num_cpus, "max_concurrency": 4, "max_restarts": 0, "scheduling_strategy": "SPREAD"}
        options |= actor_options or {}
        remote = ray.remote(EngineActor).options(**options)
        folder = str(journal) if isinstance(journal, (str, Path)) else journal
        bridge_options = {"config": config, "start_engine": start_engine}
        #: The engines' line limit, which bounds a prompt (:func:`~bridge.live.submits.check_size`).
        self._max_line = config.max_line if config is not None else DEFAULT_MAX_LINE
        names = [f"engine-{n + 1}" for n in range(engines)]
        for name in names:
            self._actors[name] = remote.remote(engine, name, folder, bridge_options)
        try:
            places = ray.get([self._actors[n].where.remote() for n in names], timeout=OPEN_TIMEOUT)
        except (ray.exceptions.RayError, TimeoutError) as e:
            self._kill_all()
            raise RuntimeError(f"the pool's engine actors did not open: {_why(e)}") from e
        refused = [f"{n}: {p['error']}" for n, p in zip(names, places) if p.get("error")]
        if refused:
            self._close_actors()
            raise RuntimeError("the pool's engine actors did not open: " + "; ".join(refused))
        for name, place in zip(names, places):
            where = Where(place["node"], address=place["address"], actor=place["actor"], journal=place["journal"])
            self._dispatch.add_lane(Lane(name, where))
        for name in names:
            thread = threading.Thread(target=self._lane, args=(name,), name=f"pi-bridge-ray-{name}", daemon=True)
            self._threads.append(thread)
            thread.start()

    # -- the calls

    @prompt_door(RayPromptOptions)
    def submit(
        self, message: str, *, request: str | None = None, **options: Unpack[RayPromptOptions]
    ) -> cf.Future[Receipt]:
        """Accept a prompt; returns at once with a future of its one receipt (maybe already
        done: ``rejected``/``closing`` or ``engine-down``). Its options
        (:class:`~bridge.core.prompts.RayPromptOptions`): ``conversation``, a key whose
        prompts run on one actor, each continuing the conversation of the ones before (rule
        D10 of :mod:`bridge.core.dispatch`; without one the prompt starts afresh), and the
        bridge's own (:meth:`Bridge.submit <bridge.live.supervisor.Bridge.submit>`'s but
        ``stream`` and ``events``: a future has no handle to show them), checked here the same
        way and carried out by the actor's bridge.

        Raises:
            TypeError: A message that is not text, a keyword it does not take, an option of the
                wrong type (nothing is accepted).
            ValueError: An empty id or one this pool has had, a bad timeout, image or budget,
                an empty or non-string ``conversation`` (likewise)."""
        check_prompt(message, options)
        check_size(message, None, self._max_line)
        if request is not None and (not isinstance(request, str) or not request):
            raise ValueError(f"request must be a non-empty str, not {request!r}")
        conversation = options.pop("conversation", None)
        trace = options.get("trace")
        if trace is not None:  # a plain dict crosses to the actor (any Mapping may not pickle)
            options["trace"] = dict(trace)
        future: cf.Future[Receipt] = cf.Future()
        with self._cv:
            if request is None:
                request = f"p{next(self._ids)}"
                while request in self._futures:
                    request = f"p{next(self._ids)}"
            elif request in self._futures:
                raise ValueError(f"prompt id {request!r} was already submitted to this pool")
            now = self._dispatch.submit(request, conversation)
            self._futures[request] = future
            if now is None:
                self._jobs[request] = (message, dict(options))
                self._cv.notify_all()
        if now is not None:
            future.set_result(now)
        return future

    def stop(self, request: str) -> bool:
        """Stop a prompt (D9): one still in the pool's queue is ``rejected``/``cancelled`` at once,
        never written; one an actor holds is stopped by that actor's bridge, as one bridge stops
        it (its receipt, e.g. ``failed``/``interrupted``, comes to the prompt's future). True when
        the stop was carried out; False for a settled or unknown prompt, or an actor that did
        not answer within :data:`STOP_TIMEOUT` (its loss, if it is lost, decides the receipt)."""
        with self._cv:
            receipt, lane = self._dispatch.stop(request)
        if receipt is not None:
            self._deliver([receipt])
            return True
        if lane is None:
            return False
        try:
            return bool(ray.get(self._actors[lane].stop.remote(request), timeout=STOP_TIMEOUT))
        except (ray.exceptions.RayError, TimeoutError):
            return False

    def end_conversation(self, conversation: str) -> None:
        """End a conversation (D10): the prompts already submitted under its key keep it; the
        key's next prompt starts afresh, and its actor takes other prompts again."""
        with self._cv:
            self._dispatch.end_conversation(conversation)
            self._cv.notify_all()

    def submit_all(self, messages: Iterable[str], *, timeout: float | None = None) -> cf.Future[list[Receipt]]:
        """Submit every message in order; a future of their receipts, in that order (for a
        prompt's own options, :meth:`submit` each)."""
        futures = [self.submit(m, timeout=timeout) for m in messages]
        return _gathered(futures)

    def run(self, messages: Iterable[str], *, timeout: float | None = None) -> list[Receipt]:
        """Run the messages over the pool: their receipts in input order. Ends when every one
        has its receipt (each does: a finished run, or what a lost node costs)."""
        return self.submit_all(messages, timeout=timeout).result()

    def status(self) -> dict[str, Any]:
        """Each lane (its node, live or lost, the prompt it holds and what is known of it, the
        conversation it is home to), what waits in the FIFO, how many prompts have no receipt
        yet, and the conversations that lost their actor (``released``: key -> why; the key's
        next prompt starts afresh)."""
        with self._cv:
            return {
                "lanes": self._dispatch.status(),
                "queued": self._dispatch.queued,
                "outstanding": self._dispatch.outstanding,
                "released": self._dispatch.released,
            }

    def where(self) -> list[Where]:
        """Where each actor runs and writes its journal (lost ones included)."""
        with self._cv:
            lanes = [self._dispatch.lane(name) for name in self._actors]
        return [lane.where for lane in lanes]

    def close(self) -> None:
        """Close the pool: prompts still in the FIFO are ``rejected``/``closing``; each actor
        closes its bridge (a running prompt is stopped: ``failed``/``closing``; its receipt still
        comes); then the actors are ended. Ends when every receipt is out and every actor is
        gone (bounded by :data:`CLOSE_TIMEOUT`, then the actors are killed)."""
        with self._cv:
            if self._closed:
                return
            self._closed = True
            out = self._dispatch.close()
            self._cv.notify_all()
        self._deliver(out)
        with self._cv:
            live = [self._actors[n] for n in self._dispatch.live_lanes]
        try:
            ray.get([a.close.remote() for a in live], timeout=CLOSE_TIMEOUT)
        except (ray.exceptions.RayError, TimeoutError):
            pass  # an actor lost on the way: its lane tells the dispatch
        for thread in self._threads:
            thread.join(CLOSE_TIMEOUT)
        self._kill_all()
        for thread in self._threads:
            thread.join()  # a killed actor's stream ends at once

    def drain(self) -> None:
        """Wait until every prompt submitted so far has its receipt. Ends when they have (each
        does: a finished run, or what a lost node costs)."""
        with self._cv:
            futures = list(self._futures.values())
        cf.wait(futures)

    def __enter__(self) -> RayPool:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None) -> None:
        try:
            if kind is None:
                self.drain()
        finally:
            self.close()

    # -- a lane's thread

    def _lane(self, name: str) -> None:
        """One lane: take the next prompt while its actor is free, run it, tell the dispatch.
        Ends when the pool closes with nothing left for it, or its actor is lost."""
        while True:
            with self._cv:
                request = self._take(name)
            if request is None:
                return
            if not self._run_one(name, request):
                return

    def _answers(self, name: str) -> bool:
        """A lane in doubt (D7) still answers: its actor replies to ``where`` in time; if not,
        it is counted lost with nothing handed to it. Ends within :data:`PING_TIMEOUT`."""
        try:
            ray.get(self._actors[name].where.remote(), timeout=PING_TIMEOUT)
        except (ray.exceptions.RayError, TimeoutError) as e:
            self._lost(name, _why(e))
            return False
        return True

    def _take(self, name: str) -> str | None:
        """The next prompt for ``name`` (called holding the lock); None: nothing more for it."""
        while True:
            if name not in self._dispatch.live_lanes:
                return None
            if self._dispatch.queued and self._dispatch.in_doubt(name):
                self._cv.release()  # (the ping waits on the cluster: not under the lock)
                try:
                    if not self._answers(name):
                        return None
                finally:
                    self._cv.acquire()
                if name not in self._dispatch.live_lanes:
                    return None
            request = self._dispatch.take(name)
            if request is not None:
                return request
            if self._closed:
                return None
            self._cv.wait(POLL)

    def _run_one(self, name: str, request: str) -> bool:
        """Run one prompt on ``name``'s actor; False when the actor was lost doing it."""
        message, options = self._jobs[request]
        with self._cv:
            options = {**options, "continues": self._dispatch.continues(request)}
        settled: list[Receipt] = []
        got = False
        try:
            for ref in self._actors[name].run.remote(request, message, options):
                item = ray.get(ref)
                with self._cv:
                    if "receipt" in item:
                        settled += self._dispatch.settled(name, Receipt.from_json(item["receipt"]))
                        got = True
                        self._cv.notify_all()
                    else:
                        self._dispatch.running(name, request)
            if not got:
                raise RuntimeError(f"the actor's stream for {request} ended without its receipt")
        except (ray.exceptions.RayError, RuntimeError) as e:
            self._deliver(settled)
            self._lost(name, _why(e))
            return False
        self._deliver(settled)
        with self._cv:
            retired = self._dispatch.retired(name)  # its bridge is down (D8): the prompt went back
        if retired:
            self._close_actor(name)
            return False
        return True

    def _lost(self, name: str, why: str) -> None:
        """``name``'s actor is gone: it, and every lane on its node if the node is gone too."""
        with self._cv:
            node = self._dispatch.lane(name).where.node
            names = [name] + ([n for n in self._dispatch.lanes_on(node) if n != name] if not _node_alive(node) else [])
            out: list[Receipt] = []
            for n in names:
                out += self._dispatch.lost(n, why if n == name else f"its node {node} is gone ({why})")
            self._cv.notify_all()
        self._deliver(out)
        for n in names:
            try:
                ray.kill(self._actors[n], no_restart=True)
            except ray.exceptions.RayError:
                pass

    def _deliver(self, receipts: Sequence[Receipt]) -> None:
        """Each receipt to its future (outside the lock: a future's callbacks run here)."""
        for r in receipts:
            assert r.request is not None
            with self._cv:
                future = self._futures[r.request]
                self._jobs.pop(r.request, None)
            future.set_result(r)

    def _close_actors(self) -> None:
        """Each actor's bridge closed (what did open), then every actor ended. Ends within
        :data:`CLOSE_TIMEOUT`, then the actors are killed."""
        try:
            ray.get([a.close.remote() for a in self._actors.values()], timeout=CLOSE_TIMEOUT)
        except (ray.exceptions.RayError, TimeoutError):
            pass
        self._kill_all()

    def _close_actor(self, name: str) -> None:
        """One actor's bridge closed and the actor ended (a lane retired, D8). Ends within
        :data:`CLOSE_TIMEOUT`, then it is killed."""
        try:
            ray.get(self._actors[name].close.remote(), timeout=CLOSE_TIMEOUT)
        except (ray.exceptions.RayError, TimeoutError):
            pass
        try:
            ray.kill(self._actors[name], no_restart=True)
        except ray.exceptions.RayError:
            pass

    def _kill_all(self) -> None:
        for actor in self._actors.values():
            try:
                ray.kill(actor, no_restart=True)
            except ray.exceptions.RayError:
                pass


def _gathered(futures: list[cf.Future[Receipt]]) -> cf.Future[list[Receipt]]:
    """A future of every receipt, in order, done when the last one is."""
    out: cf.Future[list[Receipt]] = cf.Future()
    left = [len(futures)]
    lock = threading.Lock()

    def one_done(_: cf.Future[Receipt]) -> None:
        with lock:
            left[0] -= 1
            last = left[0] == 0
        if last:
            out.set_result([f.result() for f in futures])

    if not futures:
        out.set_result([])
    for f in futures:
        f.add_done_callback(one_done)
    return out


def _node_alive(node: str) -> bool:
    """The cluster still counts ``node`` alive (True when it cannot say: then only the actor
    that failed is counted lost, and its node's other lanes find out for themselves)."""
    try:
        nodes: list[dict[str, Any]] = ray.nodes()
    except Exception:
        return True
    return any(n.get("NodeID") == node and n.get("Alive") for n in nodes) or not any(
        n.get("NodeID") == node for n in nodes
    )


def _why(e: BaseException) -> str:
    """Ray's error in one line a receipt keeps."""
    words = " ".join(str(e).split())
    return f"{type(e).__name__}: {words}"[:WHY_CHARS]
