"""Running a scenario: what one is, its registry, and the run that drives it.

A :class:`Scenario` is a small async body that drives a live bridge
(:func:`bridge.live.api.open_bridge`) on :func:`bridge.profiles.pi.scripted_profile` -- the
real sealed Pi -- against the scripted model server (:mod:`bridge.demo.model_server`,
started in-process on 127.0.0.1), plus a check of what the pinned Pi is expected to do. The
:func:`scenario` decorator defines one and files it in :data:`SCENARIOS` (in the order
defined: the order ``tools/record`` records them in).

:func:`run` runs one scenario into a journal: it starts the scripted model server, the
bridge (with :data:`BASE_CONFIG`) and the scenario's body (given a :class:`Ctx`), then
returns the :class:`~tests.shared.pi_scenarios.outcome.Outcome`, checked by
:func:`~tests.shared.pi_scenarios.expects.check_common` and the scenario's own check.
It runs from a checkout (:data:`ROOT`): the pinned install in ``tools/pi``, its extensions
in ``tools/pi/extensions``.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import attrs
import trio

from bridge.core.receipts import Receipt
from bridge.live.api import Bridge, BridgeConfig, PromptHandle, open_trio_bridge
from bridge.profiles.pi import PI_PIN, find_install, scripted_profile
from bridge.readers.replay import replay
from bridge.transcript import open_transcript
from tests.shared.pi_scenarios.expects import check_common
from tests.shared.pi_scenarios.outcome import Outcome

#: The checkout: the scenarios' extensions are in its ``tools/pi``, their recordings in ``fixtures``.
ROOT = Path(__file__).resolve().parents[3]


EXTENSIONS = ROOT / "tools" / "pi" / "extensions"
FIXTURES = ROOT / "fixtures" / f"pi-{PI_PIN}"


#: Bridge settings for every scenario: short graces so a recording stays fast.
BASE_CONFIG: dict[str, Any] = {
    # Longer than the rest of a slow stream after an overlap, so the held prompt
    # settles on its own run's agent_settled rather than being given up.
    "taint_grace": 3.0,
    "ack_timeout": 15.0,
    "startup_timeout": 20.0,
    "close_grace": 5.0,
}


#: A test-only knob: the most any scenario's taint grace may be, in seconds (unset: as the
#: scenario says). ``tests/test_pi_matrix.py`` sets it for a Pi version that sends no
#: ``agent_settled`` (so no grace can end early and every one is waited out in full), where the
#: grace's length changes no cell of the table.
TAINT_GRACE_MAX = "PI_BRIDGE_SCENARIO_TAINT_GRACE_MAX"


def load_model_server() -> ModuleType:
    """The scripted model server (:mod:`bridge.demo.model_server`, shipped in the package)."""
    from bridge.demo import model_server

    return model_server


@attrs.define(eq=False)
class Ctx:
    """What a scenario body gets: the bridge, the server, the notifications so far."""

    bridge: Bridge
    server: Any
    notes: list[dict[str, Any]]
    texts: dict[str, list[str]] = attrs.field(factory=dict)
    facts: dict[str, Any] = attrs.field(factory=dict)
    submitted: list[str] = attrs.field(factory=list)
    _changed: trio.Event = attrs.field(factory=trio.Event)

    async def _pump(self, recv: trio.MemoryReceiveChannel[dict[str, Any]]) -> None:
        """Every notification but streamed text into :attr:`notes`; ends when the bridge closes the channel."""
        async with recv:
            async for note in recv:
                if note.get("type") != "text":
                    self.notes.append(note)
                    self._changed.set()
                    self._changed = trio.Event()

    async def submit(self, message: str) -> PromptHandle:
        """Submit ``message``, its text streamed; ends when the bridge has taken it (its handle)."""
        handle = await self.bridge.submit(message, stream=True)
        self.submitted.append(handle.request)
        self.texts[handle.request] = []
        return handle

    async def stream(self, handle: PromptHandle, on_first: Callable[[], Awaitable[None]] | None = None) -> str:
        """Read the handle's streamed text until its end; ``on_first`` runs once, after the first piece."""
        pieces = self.texts[handle.request]
        async for piece in handle.text():
            pieces.append(piece)
            if on_first is not None:
                first, on_first = on_first, None
                await first()
        return "".join(pieces)

    async def prompt(self, message: str) -> Receipt:
        """Submit ``message`` and read its text; ends at its receipt."""
        handle = await self.submit(message)
        await self.stream(handle)
        return await handle.receipt()

    async def wait_signal(self, name: str, after: int = 0, timeout: float = 10.0) -> dict[str, Any]:
        """The first signal note called ``name`` (among notes[after:]); raises
        ``trio.TooSlowError`` after ``timeout``."""
        with trio.fail_after(timeout):
            while True:
                for note in self.notes[after:]:
                    if note.get("type") == "signal" and note.get("signal") == name:
                        return note
                await self._changed.wait()


ScenarioBody = Callable[[Ctx], Awaitable[None]]
ScenarioCheck = Callable[[Outcome], None]


@attrs.define(eq=False)
class Scenario:
    name: str
    about: str
    script: list[dict[str, Any]]
    body: ScenarioBody
    extensions: tuple[str, ...] = ()
    config: dict[str, Any] = attrs.field(factory=dict)
    default: dict[str, Any] | None = None
    timeout: float = 30.0
    checker: ScenarioCheck | None = None
    #: Cuts a normal form down to what does not depend on timing (default: all of it).
    stable: Callable[[dict[str, Any]], dict[str, Any]] | None = None
    #: Commands of Pi's protocol the scenario sends itself (``tools/record --matrix`` marks it
    #: "cannot run" on a version without one; the bridge's own commands adapt by themselves).
    requires: tuple[str, ...] = ()
    #: The scripted model's prices per million tokens (Pi costs each message by them).
    prices: dict[str, float] | None = None

    def check(self, fn: ScenarioCheck) -> ScenarioCheck:
        self.checker = fn
        return fn


SCENARIOS: dict[str, Scenario] = {}


def scenario(name: str, about: str, script: list[dict[str, Any]], **kw: Any) -> Callable[[ScenarioBody], Scenario]:
    def deco(body: ScenarioBody) -> Scenario:
        sc = Scenario(name=name, about=about, script=script, body=body, **kw)
        SCENARIOS[name] = sc
        return sc

    return deco


async def run(
    name: str, journal: str | Path, *, check: bool = True, pi_dir: str | None = None, other_version: bool = False
) -> Outcome:
    """Run scenario ``name`` against the installed Pi; the journal goes to ``journal``.

    ``pi_dir`` (default: the pinned install) and ``other_version`` (allow a Pi other
    than the pin, ``--allow-other-pi-version``) are for ``tools/record --matrix``.

    Raises :class:`bridge.profiles.command.ProfileError` when the pinned Pi is not
    installed, :class:`ScenarioError` when a check fails, ``trio.TooSlowError``
    when the scenario hangs past its timeout. The server and the engine are
    always stopped.
    """
    sc = SCENARIOS[name]
    journal = Path(journal)
    ms = load_model_server()
    server = ms.start_server(sc.script, default=sc.default)
    tmp = tempfile.mkdtemp(prefix="pi-scenario-")
    notes: list[dict[str, Any]] = []
    t0 = time.monotonic()
    try:
        models = server.write_models(tmp, cost=sc.prices)
        extensions = [str(EXTENSIONS / e) for e in sc.extensions]
        profile = scripted_profile(
            models, unsealed_extensions=extensions, pi_dir=pi_dir, allow_other_version=other_version
        )
        settings = {**BASE_CONFIG, **sc.config}
        if os.environ.get(TAINT_GRACE_MAX):
            settings["taint_grace"] = min(settings["taint_grace"], float(os.environ[TAINT_GRACE_MAX]))
        config = BridgeConfig(**settings)
        # A missing or wrong Pi: ProfileError naming the fix, before anything starts.
        find_install(pi_dir, allow_other_version=other_version)
        try:
            with trio.fail_after(sc.timeout):
                # The bridge closes first, and with it its notification channel: then the pump ends.
                async with (
                    trio.open_nursery() as nursery,
                    # (the engine starts at the first prompt, once the notes are heard)
                    open_trio_bridge(
                        profile, journal=journal, config=config, collect=True, start_engine=False
                    ) as bridge,
                ):
                    ctx = Ctx(bridge=bridge, server=server, notes=notes)
                    nursery.start_soon(ctx._pump, bridge.signals())
                    await sc.body(ctx)
        except BaseExceptionGroup as group:
            inner = _single(group)
            if inner is group:
                raise
            raise inner from group
        seconds = time.monotonic() - t0
        requests = server.requests
    finally:
        server.close()
        shutil.rmtree(tmp, ignore_errors=True)
    collected = bridge.collected()
    receipts: dict[str, Receipt] = {}
    for request in ctx.submitted:
        r = bridge.get_receipt(request)
        if r is not None:
            receipts[request] = r
    stream, reader = open_transcript(str(journal))
    with stream:
        entries = list(reader)
    outcome = Outcome(
        name=name,
        journal=journal,
        seconds=seconds,
        receipts=receipts,
        notes=notes,
        texts={k: "".join(v) for k, v in ctx.texts.items()},
        live={
            "overlaps": [o.to_json() for o in collected.overlaps],
            "working": [w.to_json() for w in collected.working],
            "settled": [s.to_json() for s in collected.settled],
        },
        replay=replay(str(journal)),
        entries=entries,
        requests=requests,
        facts=ctx.facts,
    )
    if check:
        check_common(outcome, submitted=ctx.submitted)
        assert sc.checker is not None, f"scenario {name} has no check"
        sc.checker(outcome)
    return outcome


def _single(group: BaseException) -> BaseException:
    """The one exception inside nested single-member groups (else the group itself)."""
    inner = group
    while isinstance(inner, BaseExceptionGroup) and len(inner.exceptions) == 1:
        inner = inner.exceptions[0]
    return inner


def run_sync(
    name: str, journal: str | Path, *, check: bool = True, pi_dir: str | None = None, other_version: bool = False
) -> Outcome:
    return trio.run(lambda: run(name, journal, check=check, pi_dir=pi_dir, other_version=other_version))
