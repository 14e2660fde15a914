"""Scenarios against the real, pinned Pi through the live bridge.

Used by ``tools/record`` (re-record ``fixtures/pi-1.6.0``; the tool for moving
the pin; with ``--matrix``, ``tools/pi_matrix.py``, every Pi version of the
table) and ``tests/test_pi_live.py`` / ``tests/test_pi_matrix.py`` (the same
scenarios as integration tests): shared by a tool and the suite, so it lives in
:mod:`bridge.testing`. It runs from a checkout (the pinned install in
``tools/pi``, its extensions in ``tools/pi/extensions``). Each scenario is a small async function that drives a live bridge
(:func:`bridge.live.api.open_bridge`) on :func:`bridge.profiles.pi.scripted_profile`
-- the real sealed Pi -- against the scripted model server
(:mod:`bridge.demo.model_server`, started in-process on 127.0.0.1), plus a check
that asserts what the pinned Pi is expected to do and fails loudly
(:class:`ScenarioError`) when it does something else.

:func:`run` runs one scenario into a journal and returns an :class:`Outcome`:
the live receipts, every notification the bridge sent (signals, engine
lifecycle, receipts), the live tracker output (the session is switched to
``collect=True``), the replay of the journal, the parsed journal and the model
server's requests. Besides the scenario's own check, :func:`check_common`
verifies for every scenario: one receipt per prompt, every engine stopped,
the journal private (0600), and ``replay(journal)`` giving exactly the tracker
output, overlap signals and receipts the live bridge reported.

:func:`sanitise` makes a journal fit to commit (no absolute checkout or temp
paths); :func:`normal_form` is the comparison form of a recording: the
sequence of event types (runs of ``message_update`` / ``tool_execution_update``
collapsed), the commands sent, the signals, the receipts' states and reasons
and the tracker output without ``t``, indices, pids, ids or timings.
"""

from __future__ import annotations

import difflib
import json
import os
import re
import shutil
import stat
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from types import ModuleType
from typing import Any, TypeVar

import attrs
import trio

from bridge.core.receipts import Receipt, describe
from bridge.live.api import Bridge, BridgeConfig, PromptHandle, open_bridge
from bridge.profiles.pi import PI_PIN, find_install, scripted_profile
from bridge.readers.replay import ReplayResult, replay
from bridge.transcript import Entry, open_transcript

#: The checkout: the scenarios' extensions are in its ``tools/pi``, their recordings in ``fixtures``.
ROOT = Path(__file__).resolve().parents[2]
T = TypeVar("T")

EXTENSIONS = ROOT / "tools" / "pi" / "extensions"
FIXTURES = ROOT / "fixtures" / f"pi-{PI_PIN}"

#: The tracker's overlap signals (the rest are the bridge's: unsealed, gap, seal-*, ...).
OVERLAP_SIGNALS = frozenset({"O1", "O2", "O3", "O4", "O5", "O6", "aborted-without-stop"})

#: Bridge settings for every scenario: short graces so a recording stays fast.
BASE_CONFIG: dict[str, Any] = {
    # Longer than the rest of a slow stream after an overlap, so the held prompt
    # settles on its own run's agent_settled rather than being given up.
    "taint_grace": 3.0,
    "ack_timeout": 15.0,
    "startup_timeout": 20.0,
    "close_grace": 5.0,
}


class ScenarioError(AssertionError):
    """The pinned Pi (or the bridge) did not do what the scenario expects."""


def expect(cond: Any, what: str) -> None:
    if not cond:
        raise ScenarioError(what)


def known(value: T | None, what: str) -> T:
    """``value``, which must be there (else :class:`ScenarioError`: ``what``)."""
    if value is None:
        raise ScenarioError(what)
    return value


def load_model_server() -> ModuleType:
    """The scripted model server (:mod:`bridge.demo.model_server`, shipped in the package)."""
    from bridge.demo import model_server

    return model_server


# --------------------------------------------------------------------------- running


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


@attrs.define(eq=False)
class Outcome:
    name: str
    journal: Path
    seconds: float
    #: Live receipts of the prompts the scenario submitted, by request id.
    receipts: dict[str, Receipt]
    #: Every notification except streamed text, in order.
    notes: list[dict[str, Any]]
    #: Streamed text per request.
    texts: dict[str, str]
    #: The live session's own tracker output (``collect=True``).
    live: dict[str, list[dict[str, Any]]]
    replay: ReplayResult
    entries: list[Entry]
    requests: list[dict[str, Any]]
    facts: dict[str, Any]

    # -- queries -------------------------------------------------------------------

    @property
    def signals(self) -> list[dict[str, Any]]:
        return [n for n in self.notes if n.get("type") == "signal"]

    def signal_names(self) -> list[str]:
        return [n["signal"] for n in self.signals]

    @property
    def overlaps(self) -> list[dict[str, Any]]:
        """The overlap signals the live bridge raised, in the tracker's JSON form."""
        return [
            {k: v for k, v in n.items() if k not in ("type", "generation")}
            for n in self.signals
            if n.get("signal") in OVERLAP_SIGNALS
        ]

    def receipt(self, request: str) -> Receipt:
        expect(request in self.receipts, f"{self.name}: no receipt for {request}")
        return self.receipts[request]

    def recv(self, *types: str, start: int = 0, end: int | None = None) -> list[tuple[int, dict[str, Any]]]:
        """``(i, obj)`` of the engine lines with ``start < i <= end`` (and one of ``types``)."""
        out = []
        for e in self.entries:
            if e.kind != "recv" or e.i is None or e.i <= start or (end is not None and e.i > end):
                continue
            if not types or e.value.get("type") in types:
                out.append((e.i, e.value))
        return out

    def response(self, rid: str) -> dict[str, Any]:
        found = [v for _, v in self.recv("response") if v.get("id") == rid]
        expect(len(found) == 1, f"{self.name}: expected one response with id {rid}, got {len(found)}")
        return found[0]

    def sends(self, *types: str) -> list[dict[str, Any]]:
        return [e.value for e in self.entries if e.kind == "send" and (not types or e.value.get("type") in types)]

    def run_events(self, request: str) -> list[dict[str, Any]]:
        """The engine lines from the prompt's ack to its settle."""
        r = self.receipt(request)
        what = f"{self.name}: {request} has no ack/settle index"
        return [v for _, v in self.recv(start=known(r.ack_idx, what) - 1, end=known(r.settle_idx, what))]

    def summary(self) -> str:
        parts = [describe(r) for r in self.receipts.values()]
        sig = [n["signal"] + (f"({n.get('why') or n.get('cause') or n.get('kind') or ''})") for n in self.signals]
        return "; ".join(parts) + (" | signals: " + ", ".join(sig) if sig else " | no signals")


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
        config = BridgeConfig(**{**BASE_CONFIG, **sc.config})
        # A missing or wrong Pi: ProfileError naming the fix, before anything starts.
        find_install(pi_dir, allow_other_version=other_version)
        try:
            with trio.fail_after(sc.timeout):
                # The bridge closes first, and with it its notification channel: then the pump ends.
                async with (
                    trio.open_nursery() as nursery,
                    open_bridge(profile, journal=journal, config=config, collect=True) as bridge,
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
    session = bridge.session
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
            "overlaps": [o.to_json() for o in session.overlaps],
            "working": [w.to_json() for w in session.working],
            "settled": [s.to_json() for s in session.settled],
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


# --------------------------------------------------------------------------- common checks


def comparable_receipt(r: dict[str, Any]) -> dict[str, Any]:
    """A receipt's JSON form without its timings (replay times come from the journal's rounded ``t``)."""
    return {k: v for k, v in r.items() if k != "times"}


def live_vs_replay(o: Outcome) -> tuple[dict[str, Any], dict[str, Any]]:
    """What the live bridge reported and what the replay of its journal says, in one shape."""
    rep = o.replay.to_json()
    replayed = {r["request"]: r for r in rep["receipts"]}
    live = {
        "tracker": o.live,
        "overlap signals": o.overlaps,
        "receipts": {k: comparable_receipt(r.to_json()) for k, r in o.receipts.items()},
    }
    again = {
        "tracker": {k: rep[k] for k in ("overlaps", "working", "settled")},
        "overlap signals": rep["overlaps"],
        "receipts": {k: comparable_receipt(replayed[k]) for k in o.receipts if k in replayed},
    }
    return live, again


def check_common(o: Outcome, submitted: Iterable[str]) -> None:
    submitted = list(submitted)
    counts: dict[str, int] = {}
    for n in o.notes:
        if n.get("type") == "receipt":
            counts[n["id"]] = counts.get(n["id"], 0) + 1
    for request in submitted:
        expect(counts.get(request) == 1, f"{o.name}: {request} got {counts.get(request, 0)} receipts, not one")
    started = [n["pid"] for n in o.notes if n.get("type") == "engine" and n.get("event") == "started"]
    exited = [n["pid"] for n in o.notes if n.get("type") == "engine" and n.get("event") == "exited"]
    expect(started and sorted(started) == sorted(exited), f"{o.name}: engines started {started}, exited {exited}")
    mode = stat.S_IMODE(os.stat(o.journal).st_mode)
    expect(mode == 0o600, f"{o.name}: journal mode {oct(mode)}, not 0600")
    live, again = live_vs_replay(o)
    expect(
        live == again,
        f"{o.name}: replay of the journal differs from the live bridge:\n"
        f"live:   {json.dumps(live, sort_keys=True)}\nreplay: {json.dumps(again, sort_keys=True)}",
    )
    for r in o.receipts.values():
        expect(r.times.settled is not None and r.times.submitted is not None, f"{o.name}: {r.request} lacks times")


def expect_receipt(
    o: Outcome, request: str, state: str, reason: str | None = None, *, stop: Any = None, reply: str | None = None
) -> Receipt:
    r = o.receipt(request)
    got = (r.state, r.reason, r.stop)
    want = (state, reason, stop)
    expect(got == want, f"{o.name}: {request} receipt is {got} (state, reason, stop), expected {want}: {describe(r)}")
    if reply is not None:
        expect(r.reply == reply, f"{o.name}: {request} reply {r.reply!r}, expected {reply!r}")
    return r


def expect_overlaps(o: Outcome, *want: tuple[str, str | None]) -> None:
    """The overlap signals, as (signal, why-or-cause), in order."""
    got = [(s["signal"], s.get("why") or s.get("cause")) for s in o.overlaps]
    expect(got == list(want), f"{o.name}: overlap signals {got}, expected {list(want)}")


def count_types(events: Iterable[dict[str, Any]], kind: str) -> int:
    return sum(1 for e in events if e.get("type") == kind)


def first_index(o: Outcome, pred: Callable[[dict[str, Any]], bool], what: str) -> int:
    for i, v in o.recv():
        if pred(v):
            return i
    raise ScenarioError(f"{o.name}: no {what} in the journal")


# --------------------------------------------------------------------------- scenarios

PLAIN_REPLY = "Hello from the scripted model, through the sealed Pi."
TOOL_COMMAND = "echo tool says hi"
TOOL_REPLY = "The command printed: tool says hi"
SLOW = {"words": 25, "delay": 0.025, "chunk": 8}  # ~0.5 s if nobody interrupts it
RAW_PROMPT = "a second prompt while the first one streams"
STEER_TEXT = "steered in by someone else"
FOLLOW_TEXT = "a follow-up from someone else"
AUTORUN_TEXT = "autorun: a message the extension sent by itself"


@scenario("plain", "one prompt, one streamed text reply", script=[{"text": PLAIN_REPLY, "chunk": 8}])
async def plain(ctx: Ctx) -> None:
    """One prompt; ends at its receipt."""
    await ctx.prompt("Say hello.")


@plain.check
def _check_plain(o: Outcome) -> None:
    r = expect_receipt(o, "p1", "finished", reply=PLAIN_REPLY)
    expect(o.texts["p1"] == PLAIN_REPLY, f"plain: streamed {o.texts['p1']!r}")
    expect(r.run == "run-1" and r.generation == 1 and r.disposition == "started", f"plain: {r!r}")
    indices = f"plain: indices {r.ack_idx} {r.working_idx} {r.settle_idx}"
    ack_idx, working_idx, settle_idx = (known(i, indices) for i in (r.ack_idx, r.working_idx, r.settle_idx))
    expect(ack_idx < working_idx < settle_idx, indices)
    expect_overlaps(o)
    expect(o.signal_names() == [], f"plain: signals {o.signal_names()}")
    # SPEC §2: the ack comes right before its agent_start.
    ack = o.recv(start=ack_idx - 1, end=ack_idx + 1)
    expect([v.get("type") for _, v in ack] == ["response", "agent_start"], f"plain: around the ack {ack}")
    events = o.run_events("p1")
    expect(count_types(events, "agent_start") == 1 and count_types(events, "agent_end") == 1, "plain: one run")
    expect(events[-1] == {"type": "agent_settled", "aborted": False}, f"plain: last event {events[-1]}")
    expect(len(o.requests) == 1, f"plain: {len(o.requests)} model requests")


@scenario(
    "tool_use",
    "the model calls Pi's bash tool (echo), then replies with text",
    script=[{"tool_call": {"name": "bash", "arguments": {"command": TOOL_COMMAND}}}, {"text": TOOL_REPLY}],
)
async def tool_use(ctx: Ctx) -> None:
    """One prompt; ends at its receipt."""
    await ctx.prompt("Run the echo command and tell me what it printed.")


@tool_use.check
def _check_tool_use(o: Outcome) -> None:
    expect_receipt(o, "p1", "finished", reply=TOOL_REPLY)
    expect_overlaps(o)
    events = o.run_events("p1")
    expect(count_types(events, "agent_start") == 1, "tool_use: the tool call and the reply are one run")
    expect(count_types(events, "turn_start") == 2, "tool_use: two turns")
    starts = [e for e in events if e.get("type") == "tool_execution_start"]
    ends = [e for e in events if e.get("type") == "tool_execution_end"]
    expect(
        len(starts) == 1 and starts[0].get("toolName") == "bash" and starts[0].get("args") == {"command": TOOL_COMMAND},
        f"tool_use: tool start {starts}",
    )
    expect(len(ends) == 1 and ends[0].get("isError") is False, f"tool_use: tool end {ends}")
    output = ((ends[0].get("result") or {}).get("structuredContent") or {}).get("output")
    expect(output == "tool says hi\n", f"tool_use: bash output {output!r}")
    stops = [
        e["message"].get("stopReason")
        for e in events
        if e.get("type") == "message_end" and e["message"].get("role") == "assistant"
    ]
    expect(stops == ["toolUse", "stop"], f"tool_use: assistant stop reasons {stops}")
    expect(len(o.requests) == 2, f"tool_use: {len(o.requests)} model requests")
    tool_msgs = [m for m in o.requests[1]["body"]["messages"] if m.get("role") == "tool"]
    expect(tool_msgs and "tool says hi" in json.dumps(tool_msgs), "tool_use: the tool result went back to the model")


THINK_TEXT = "Three lines are wanted; bash can print them."
EVENTS_COMMAND = "for i in 1 2 3; do echo line$i; sleep 0.3; done"
EVENTS_REPLY = "It printed line1, line2 and line3."
PRICES = {"input": 3.0, "output": 15.0, "cacheRead": 0.3, "cacheWrite": 3.75}


@scenario(
    "thinking_tool_usage",
    "thinking, then a bash call that prints three lines over 0.9 s, then a reply; the prompt asks for its "
    "events, and the model reports usage (with cached tokens) at priced rates",
    script=[
        {
            "reasoning": THINK_TEXT,
            "tool_call": {"name": "bash", "arguments": {"command": EVENTS_COMMAND}},
            "usage": {"prompt_tokens": 1000, "completion_tokens": 50, "cached_tokens": 200},
        },
        {"text": EVENTS_REPLY, "usage": {"prompt_tokens": 1200, "completion_tokens": 30}},
    ],
    prices=PRICES,
)
async def thinking_tool_usage(ctx: Ctx) -> None:
    """One prompt, its events kept in ``facts["events"]``; ends at its receipt."""
    handle = await ctx.bridge.submit("Print three lines with bash.", events=True)
    ctx.submitted.append(handle.request)
    ctx.facts["events"] = [e.to_json() async for e in handle.events()]
    await handle.receipt()


@thinking_tool_usage.check
def _check_thinking_tool_usage(o: Outcome) -> None:
    name = o.name
    r = expect_receipt(o, "p1", "finished", reply=EVENTS_REPLY)
    events = o.facts["events"]
    kinds = [e["event"] for e in events]
    expect(all(e["id"] == "p1" for e in events), f"{name}: events of another prompt")
    expect("".join(e["delta"] for e in events if e["event"] == "thinking") == THINK_TEXT, f"{name}: thinking")
    expect("".join(e["delta"] for e in events if e["event"] == "text") == EVENTS_REPLY, f"{name}: text")
    expect(kinds.count("tool-start") == 1 and kinds.count("tool-end") == 1, f"{name}: tool events {kinds}")
    expect(kinds.count("tool-update") >= 2, f"{name}: tool updates {kinds.count('tool-update')}")
    end = next(e for e in events if e["event"] == "tool-end")
    expect(end["result"].split() == ["line1", "line2", "line3"] and not end["isError"], f"{name}: {end}")
    expect(kinds.count("turn-start") == 2 and kinds.count("turn-end") == 2, f"{name}: turns {kinds}")
    u = r.usage
    expect(u is not None, f"{name}: no usage")
    assert u is not None
    got = (u.input, u.output, u.cache_read, u.cache_write, u.total_tokens, u.messages)
    expect(got == (2000, 80, 200, 0, 2280, 2), f"{name}: usage {got}")
    cost = (2000 * PRICES["input"] + 80 * PRICES["output"] + 200 * PRICES["cacheRead"]) / 1e6
    expect(abs(u.cost - cost) < 1e-12, f"{name}: cost {u.cost} != {cost}")
    expect((u.provider, u.model) == ("scripted", "scripted-model"), f"{name}: answered by {u.provider}/{u.model}")
    expect_overlaps(o)
    expect(o.signal_names() == [], f"{name}: signals {o.signal_names()}")


@scenario(
    "stalled",
    "the provider accepts the request and never answers: the stall timeout (1.5 s) stops the run",
    script=[{"hang": True}],
    config={"stall_timeout": 1.5},
)
async def stalled(ctx: Ctx) -> None:
    """One prompt; ends at its receipt (the stall timeout's)."""
    await ctx.prompt("Anyone there?")


@stalled.check
def _check_stalled(o: Outcome) -> None:
    name = o.name
    notes = [e.value for e in o.entries if e.kind == "note" and e.value.get("event") == "stop"]
    expect([n["by"] for n in notes] == ["stall"], f"{name}: stop notes {notes}")
    r = expect_receipt(o, "p1", "failed", "stalled", stop=notes[0]["stop"])
    signals = [n for n in o.signals if n["signal"] == "stalled"]
    expect(
        len(signals) == 1 and signals[0]["request"] == "p1" and signals[0]["stop"] == r.stop,
        f"{name}: stalled signals {signals}",
    )
    assert r.times.sent is not None and r.times.settled is not None
    took = r.times.settled - r.times.sent
    expect(1.5 <= took < 1.5 + 5.0, f"{name}: settled {took:.2f} s after the send")
    expect(len(o.requests) == 1, f"{name}: {len(o.requests)} model requests")


@scenario(
    "two_prompts", "two prompts in a row on one engine", script=[{"text": "first reply"}, {"text": "second reply"}]
)
async def two_prompts(ctx: Ctx) -> None:
    """Two prompts at once; ends at the second one's receipt."""
    h1 = await ctx.submit("first prompt")
    h2 = await ctx.submit("second prompt")  # waits in the FIFO while p1 holds the slot
    await ctx.stream(h1)
    await ctx.stream(h2)
    await h2.receipt()


@two_prompts.check
def _check_two_prompts(o: Outcome) -> None:
    r1 = expect_receipt(o, "p1", "finished", reply="first reply")
    r2 = expect_receipt(o, "p2", "finished", reply="second reply")
    expect((r1.run, r2.run) == ("run-1", "run-2"), f"two_prompts: runs {r1.run}, {r2.run}")
    expect(r1.pid == r2.pid and r1.generation == r2.generation == 1, "two_prompts: one engine")
    sent, settled = known(r2.times.sent, "two_prompts: p2 unsent"), known(r1.times.settled, "two_prompts: p1 unsettled")
    expect(sent >= settled, "two_prompts: p2 was sent before p1 settled")
    ack, settle = known(r2.ack_idx, "two_prompts: p2 unacked"), known(r1.settle_idx, "two_prompts: p1 unsettled")
    expect(ack > settle, "two_prompts: p2's ack before p1's settle")
    expect_overlaps(o)
    expect(o.signal_names() == [], f"two_prompts: signals {o.signal_names()}")


@scenario(
    "stopped_mid_stream",
    "a slow stream stopped after its first text",
    script=[{"words": 200, "delay": 0.02, "chunk": 8}],
)
async def stopped_mid_stream(ctx: Ctx) -> None:
    """One slow prompt, stopped after its first text; ends at its receipt."""
    handle = await ctx.submit("Write a long answer.")

    async def stop() -> None:
        """Stop the prompt; ends when the stop is answered."""
        ctx.facts["stop"] = await handle.stop()
        ctx.facts["stop_at"] = trio.current_time()

    await ctx.stream(handle, on_first=stop)
    await handle.receipt()
    expect("stop_at" in ctx.facts, "stopped_mid_stream: no text was streamed before the receipt: nothing to stop")
    ctx.facts["settled_after_stop_s"] = trio.current_time() - ctx.facts["stop_at"]


@stopped_mid_stream.check
def _check_stopped(o: Outcome) -> None:
    stop = o.facts.get("stop")
    expect(stop, "stopped_mid_stream: stop() returned no stop id")
    r = expect_receipt(o, "p1", "failed", "interrupted", stop=stop)
    expect(
        o.facts["settled_after_stop_s"] < 2.0,
        f"stopped_mid_stream: settled {o.facts['settled_after_stop_s']:.2f}s after the stop",
    )
    expect_overlaps(o)  # the bridge's clear_queue before the abort: its empty queue_update is caused
    sends = [c.get("type") for c in o.sends("clear_queue", "abort")]
    expect(sends == ["clear_queue", "abort"], f"stopped_mid_stream: stop commands {sends}")
    events = o.run_events("p1")
    last_asst = [e for e in events if e.get("type") == "message_end" and e["message"].get("role") == "assistant"][-1]
    expect(
        last_asst["message"].get("stopReason") == "aborted",
        f"stopped_mid_stream: {last_asst['message'].get('stopReason')}",
    )
    settled = first_index(o, lambda v: v.get("type") == "agent_settled", "agent_settled")
    expect(
        o.recv(start=settled - 1, end=settled)[0][1].get("aborted") is True, "stopped_mid_stream: agent_settled.aborted"
    )
    # SPEC §2: the abort response comes after agent_settled(aborted:true).
    abort_resp = first_index(o, lambda v: v.get("type") == "response" and v.get("id") == stop, "abort response")
    expect(abort_resp > settled, f"stopped_mid_stream: abort response at {abort_resp}, settled at {settled}")
    expect(r.reply is not None and o.texts["p1"].startswith(r.reply[:8]), "stopped_mid_stream: partial reply")
    expect(len(o.texts["p1"]) < len(load_model_server().make_words(200)), "stopped_mid_stream: the whole text streamed")


@scenario(
    "retry_after_500",
    "HTTP 500, then success: one run, two attempts, one settle",
    script=[{"status": 500}, {"text": "recovered after a 500"}],
)
async def retry_after_500(ctx: Ctx) -> None:
    """One prompt; ends at its receipt."""
    await ctx.prompt("Try again if it fails.")


@retry_after_500.check
def _check_retry(o: Outcome) -> None:
    r = expect_receipt(o, "p1", "finished", reply="recovered after a 500")
    expect(r.run == "run-1", f"retry_after_500: run {r.run}")
    events = o.run_events("p1")
    expect(
        count_types(events, "agent_start") == 2 and count_types(events, "agent_end") == 2,
        "retry_after_500: two agent_start…agent_end pairs",
    )
    expect(count_types(events, "agent_settled") == 1, "retry_after_500: one agent_settled")
    will = [e.get("willRetry") for e in events if e.get("type") == "agent_end"]
    expect(will == [True, False], f"retry_after_500: willRetry {will}")
    retry = [e for e in events if e.get("type", "").startswith("auto_retry")]
    expect(
        [(e["type"], e.get("success")) for e in retry] == [("auto_retry_start", None), ("auto_retry_end", True)],
        f"retry_after_500: {retry}",
    )
    users = [e for e in events if e.get("type") == "message_start" and e["message"].get("role") == "user"]
    expect(len(users) == 1, "retry_after_500: the retried attempt has no user message")
    expect_overlaps(o)
    expect(len(o.replay.settled) == 1 and len(o.replay.working) == 1, "retry_after_500: one working, one settled")
    expect(len(o.requests) == 2, f"retry_after_500: {len(o.requests)} model requests")


@scenario(
    "retries_exhausted",
    "HTTP 500 until Pi gives up (maxRetries 2)",
    script=[{"status": 500}, {"status": 500}, {"status": 500}],
)
async def retries_exhausted(ctx: Ctx) -> None:
    """One prompt; ends at its receipt."""
    await ctx.prompt("This will keep failing.")


@retries_exhausted.check
def _check_exhausted(o: Outcome) -> None:
    r = expect_receipt(o, "p1", "failed", None)
    expect(
        r.native_error and "500" in r.native_error and "scripted error 500" in r.native_error,
        f"retries_exhausted: nativeError {r.native_error!r}",
    )
    events = o.run_events("p1")
    will = [e.get("willRetry") for e in events if e.get("type") == "agent_end"]
    expect(
        count_types(events, "agent_start") == 3 and will == [True, True, False],
        f"retries_exhausted: attempts {count_types(events, 'agent_start')}, willRetry {will}",
    )
    end = [e for e in events if e.get("type") == "auto_retry_end"]
    expect(len(end) == 1 and end[0].get("success") is False, f"retries_exhausted: {end}")
    expect(events[-1] == {"type": "agent_settled", "aborted": False}, f"retries_exhausted: {events[-1]}")
    expect_overlaps(o)
    expect(len(o.requests) == 3, f"retries_exhausted: {len(o.requests)} model requests")


@scenario(
    "refused_while_streaming",
    "send_raw a second prompt (no streamingBehavior) while the slot's run streams: Pi refuses it",
    script=[SLOW],
    config={"taint_grace": 1.0},
)
async def refused_while_streaming(ctx: Ctx) -> None:
    """One slow prompt, and a raw second one while it streams; ends at the first one's receipt."""
    handle = await ctx.submit("Write something slowly.")

    async def second() -> None:
        """Write the raw prompt; ends once it is written."""
        await ctx.bridge.send_raw({"type": "prompt", "id": "raw-2", "message": RAW_PROMPT})

    await ctx.stream(handle, on_first=second)
    await handle.receipt()


@refused_while_streaming.check
def _check_refused(o: Outcome) -> None:
    resp = o.response("raw-2")
    expect(
        resp.get("success") is False and "Agent is already processing" in str(resp.get("error")),
        f"refused_while_streaming: Pi's answer {resp}",
    )
    expect(
        count_types([v for _, v in o.recv()], "agent_start") == 1, "refused_while_streaming: Pi started a second run"
    )
    expect(len(o.requests) == 1, f"refused_while_streaming: {len(o.requests)} model requests")
    # What the bridge makes of it: the raw prompt took the tracker's slot (SPEC §4: a
    # prompt written attaches a slot), so p1's own run settles "after the slot moved on".
    expect_receipt(o, "p1", "outcome-unknown", "overlap")
    expect_overlaps(o, ("O2", "the slot's run settled after the slot moved on"))
    replayed = {r.request: r for r in o.replay.receipts}
    expect(
        replayed.get("raw-2") is not None
        and (replayed["raw-2"].state, replayed["raw-2"].reason) == ("rejected", "engine"),
        "refused_while_streaming: replay of raw-2",
    )


def _queue_body(kind: str, text: str, *, clear: bool = False, then: str | None = None) -> ScenarioBody:
    async def body(ctx: Ctx) -> None:
        """One slow prompt, meddled with once it streams; ends at its receipt (or at ``then``'s)."""
        handle = await ctx.submit("Write something slowly.")

        async def meddle() -> None:
            """Write the raw ``kind`` command, and with ``clear`` a ``clear_queue`` once Pi has queued
            it (until its O5); ends when they are written."""
            mark = len(ctx.notes)
            await ctx.bridge.send_raw({"type": kind, "id": f"raw-{kind}", "message": text})
            if clear:
                # Pi 1.6.0 handles stdin commands concurrently: a clear_queue written
                # right after a follow_up can run before the follow_up is queued (it
                # then clears nothing and the follow-up is delivered). Wait until the
                # follow-up is in the queue (its queue_update: O5) before clearing.
                await ctx.wait_signal("O5", after=mark)
                await ctx.bridge.send_raw({"type": "clear_queue", "id": "raw-clear"})

        await ctx.stream(handle, on_first=meddle)
        await handle.receipt()
        if then is not None:
            await ctx.prompt(then)

    return body


def _check_delivered(o: Outcome, kind: str, text: str, reply: str) -> None:
    name = o.name
    r = expect_receipt(o, "p1", "outcome-unknown", "overlap", reply=reply)
    expect(r.run == "run-1", f"{name}: run {r.run}")
    expect_overlaps(o, ("O5", "queue-update"), ("O5", "uncaused-queue-update"), ("O6", None))
    expect([s["signal"] for s in r.signals] == ["O5", "O5", "O6"], f"{name}: receipt signals {r.signals}")
    expect("unsealed" in o.signal_names(), f"{name}: no unsealed signal")
    resp_i = first_index(o, lambda v: v.get("type") == "response" and v.get("id") == f"raw-{kind}", "response")
    before = o.recv(start=resp_i - 2, end=resp_i - 1)[0][1]
    key = "steering" if kind == "steer" else "followUp"
    expect(
        before.get("type") == "queue_update" and before.get(key) == [text],
        f"{name}: before the {kind} response: {before}",
    )
    expect(o.response(f"raw-{kind}").get("data") == {"disposition": "queued"}, f"{name}: {kind} response")
    events = o.run_events("p1")
    expect(count_types(events, "agent_start") == 1, f"{name}: the queued message was not delivered inside the run")
    users = [i for i, e in enumerate(events) if e.get("type") == "message_start" and e["message"].get("role") == "user"]
    expect(len(users) == 2, f"{name}: {len(users)} user messages")
    expect(
        events[users[1] - 1] == {"type": "queue_update", "steering": [], "followUp": []},
        f"{name}: delivery is not preceded by an empty queue_update: {events[users[1] - 1]}",
    )
    expect(events[users[1]]["message"]["content"][0]["text"] == text, f"{name}: delivered text")
    expect(len(o.requests) >= 2, f"{name}: the queued message never reached the model")


@scenario(
    "steer_unsealed",
    "send_raw steer during a run: O5, then O6 when Pi delivers it; the next prompt gets a fresh engine",
    script=[SLOW, {"text": "reply to the steer"}, {"text": "a fresh engine answers"}],
)
async def steer_unsealed(ctx: Ctx) -> None:
    """A steer during p1's run, then p2; ends at p2's receipt."""
    await _queue_body("steer", STEER_TEXT, then="after the overlap")(ctx)


@steer_unsealed.check
def _check_steer(o: Outcome) -> None:
    _check_delivered(o, "steer", STEER_TEXT, "reply to the steer")
    r1 = o.receipt("p1")
    r2 = expect_receipt(o, "p2", "finished", reply="a fresh engine answers")
    expect(
        r2.generation == 2 and r2.pid != r1.pid and r2.run == "run-1", f"steer_unsealed: p2 not on a fresh engine: {r2}"
    )
    exits = [n for n in o.notes if n.get("type") == "engine" and n.get("event") == "exited"]
    expect(
        exits and exits[0]["pid"] == r1.pid and exits[0]["requested"],
        "steer_unsealed: the tainted engine was not retired",
    )


@scenario(
    "follow_up_unsealed",
    "send_raw follow_up during a run: O5, then O6 when Pi delivers it",
    script=[SLOW, {"text": "reply to the follow-up"}],
)
async def follow_up_unsealed(ctx: Ctx) -> None:
    """A follow-up during p1's run; ends at p1's receipt."""
    await _queue_body("follow_up", FOLLOW_TEXT)(ctx)


@follow_up_unsealed.check
def _check_follow_up(o: Outcome) -> None:
    _check_delivered(o, "follow_up", FOLLOW_TEXT, "reply to the follow-up")


@scenario(
    "clear_queue_unsealed",
    "send_raw follow_up then clear_queue during a run: O5 once; the clear's empty queue_update is caused; never delivered",
    script=[SLOW],
    requires=("clear_queue",),
)
async def clear_queue_unsealed(ctx: Ctx) -> None:
    """A follow-up during p1's run, then a clear; ends at p1's receipt."""
    await _queue_body("follow_up", FOLLOW_TEXT, clear=True)(ctx)


@clear_queue_unsealed.check
def _check_clear(o: Outcome) -> None:
    name = o.name
    r = expect_receipt(o, "p1", "outcome-unknown", "overlap", reply=make_slow_text())
    expect_overlaps(o, ("O5", "queue-update"))
    expect([s["signal"] for s in r.signals] == ["O5"], f"{name}: receipt signals {r.signals}")
    resp = o.response("raw-clear")
    expect(
        resp.get("success") is True and resp.get("data") == {"steering": [], "followUp": [FOLLOW_TEXT]},
        f"{name}: clear_queue response {resp}",
    )
    clear_i = first_index(o, lambda v: v.get("id") == "raw-clear", "clear_queue response")
    before = o.recv(start=clear_i - 2, end=clear_i - 1)[0][1]
    expect(
        before == {"type": "queue_update", "steering": [], "followUp": []},
        f"{name}: before the clear response: {before}",
    )
    users = [e for e in o.run_events("p1") if e.get("type") == "message_start" and e["message"].get("role") == "user"]
    expect(len(users) == 1, f"{name}: the cleared follow-up was delivered")
    expect(len(o.requests) == 1, f"{name}: {len(o.requests)} model requests")


def make_slow_text() -> str:
    return str(load_model_server().make_words(SLOW["words"]))


@scenario(
    "extension_dialog",
    "select_dialog.ts (seal_check=warn): the start-up check flags /pick; the bridge cancels each dialog; "
    "a /pick prompt is handled by the extension (disposition handled)",
    script=[{"text": "hello despite the dialog"}],
    extensions=("select_dialog.ts",),
    config={"seal_check": "warn", "taint_grace": 1.0},
)
async def extension_dialog(ctx: Ctx) -> None:
    """Two prompts, the second ``/pick``; ends at its receipt."""
    await ctx.prompt("Hello with an extension loaded.")
    await ctx.prompt("/pick")


@extension_dialog.check
def _check_dialog(o: Outcome) -> None:
    name = o.name
    checks = [n for n in o.signals if n["signal"] == "seal-check"]
    expect(
        len(checks) == 1
        and checks[0]["action"] == "warn"
        and any("/pick" in p and "extension" in p for p in checks[0]["problems"]),
        f"{name}: start-up seal check {checks}",
    )
    r1 = expect_receipt(o, "p1", "finished", reply="hello despite the dialog")
    diag = [(s["signal"], s.get("method")) for s in r1.signals]
    expect(diag == [("seal-diagnostic", "select"), ("seal-diagnostic", "notify")], f"{name}: p1 signals {r1.signals}")
    expect(r1.signals[1]["idx"] < r1.ack_idx, f"{name}: the dialog did not come before the ack")
    ui = [v for _, v in o.recv("extension_ui_request")]
    expect([u.get("method") for u in ui] == ["select", "notify", "select", "notify"], f"{name}: ui requests {ui}")
    answers = o.sends("extension_ui_response")
    expect(
        answers
        == [
            {"type": "extension_ui_response", "id": ui[0]["id"], "cancelled": True},
            {"type": "extension_ui_response", "id": ui[2]["id"], "cancelled": True},
        ],
        f"{name}: the bridge's answers {answers}",
    )
    expect(
        [u.get("message") for u in (ui[1], ui[3])] == ["picked nothing", "command picked nothing"],
        f"{name}: notifications {ui[1]}, {ui[3]}",
    )
    r2 = expect_receipt(o, "p2", "outcome-unknown", "disposition")
    expect(r2.disposition == "handled" and r2.run is None and r2.working_idx is None, f"{name}: p2 {r2}")
    expect(
        [s["signal"] for s in r2.signals] == ["seal-diagnostic", "seal-diagnostic", "disposition"],
        f"{name}: p2 signals {r2.signals}",
    )
    expect_overlaps(o)
    expect(len(o.requests) == 1, f"{name}: {len(o.requests)} model requests")


@scenario(
    "extension_autorun",
    "autorun.ts: after the first prompt settles the extension starts a run by itself (O1); the bridge "
    "either watches it settle (O2) or retires the tainted engine first",
    script=[{"text": "reply to the bridge's prompt"}, {"text": "reply to the extension"}],
    extensions=("autorun.ts",),
)
async def extension_autorun(ctx: Ctx) -> None:
    """One prompt, then until the extension's own run settles (O2) or its engine is retired
    (raises ``trio.TooSlowError`` after 10 s)."""
    await ctx.prompt("The only prompt the bridge sends.")
    await ctx.wait_signal("O1")
    # Then one of two endings, by a race inside the bridge: the dispatcher retires a
    # tainted engine right after the slot's receipt only if the O1 was read before it
    # looked (the extension's agent_start comes ~1 ms after agent_settled); otherwise
    # the engine stays up, idle and unsealed, until the next prompt, and the
    # extension's run settles (O2). Wait for whichever comes.
    with trio.fail_after(10):
        while not any(
            n.get("signal") == "O2" or (n.get("type") == "engine" and n.get("event") == "exited") for n in ctx.notes
        ):
            await ctx._changed.wait()
    ctx.facts["ending"] = "O2" if any(n.get("signal") == "O2" for n in ctx.notes) else "retired"


@extension_autorun.check
def _check_autorun(o: Outcome) -> None:
    name = o.name
    expect("seal-check" not in o.signal_names(), f"{name}: an extension with no command passes the seal check")
    r = expect_receipt(o, "p1", "finished", reply="reply to the bridge's prompt")
    settle_idx = known(r.settle_idx, f"{name}: p1 has no settle index")
    expect(r.signals == (), f"{name}: p1 signals {r.signals}")
    overlaps = o.overlaps
    o1 = overlaps[0] if overlaps else {}
    expect(
        o1.get("signal") == "O1"
        and o1.get("why") in ("no slot held", "after the slot's run")
        and o1.get("run") == "run-2",
        f"{name}: first overlap {o1}",
    )
    if o1["why"] == "no slot held":
        expect(o1["idx"] > settle_idx, f"{name}: O1 'no slot held' before p1's settle")
    if o.facts["ending"] == "O2":
        expect([s["signal"] for s in overlaps] == ["O1", "O2"], f"{name}: overlaps {overlaps}")
        o2 = overlaps[1]
        expect(o2["why"] == "settle of a run that is not the slot's" and o2["run"] == "run-2", f"{name}: {o2}")
        users = [v for _, v in o.recv("message_start", start=settle_idx) if v["message"].get("role") == "user"]
        expect([u["message"]["content"][0]["text"] for u in users] == [AUTORUN_TEXT], f"{name}: {users}")
        expect(len(o.requests) == 2, f"{name}: {len(o.requests)} model requests")
    else:
        expect([s["signal"] for s in overlaps] == ["O1"], f"{name}: overlaps {overlaps}")
        exits = [n for n in o.notes if n.get("type") == "engine" and n.get("event") == "exited"]
        expect(exits[0]["requested"] is True, f"{name}: the engine was not retired on purpose: {exits[0]}")


def _autorun_form(form: dict[str, Any]) -> dict[str, Any]:
    """The stable part of an extension_autorun recording: up to the extension's agent_start.

    What follows depends on a race in the bridge (see the scenario); both endings
    are checked by the scenario itself, so the comparison leaves them out.
    """
    events = form["events"]
    starts = [i for i, e in enumerate(events) if e == "agent_start"]
    if len(starts) >= 2:
        tail = [e for e in events[starts[1] + 1 :] if e.startswith("[engine exit")]
        form["events"] = events[: starts[1] + 1] + ["…"] + tail
    form["signals"] = [s for s in form["signals"] if s.get("signal") != "O2"]
    form["tracker"]["overlaps"] = [o for o in form["tracker"]["overlaps"] if o.get("signal") != "O2"]
    return form


extension_autorun.stable = _autorun_form


# --------------------------------------------------------------------------- fixtures


def sanitise(text: str) -> str:
    """A journal fit to commit: the checkout's absolute path becomes relative,
    the profile's private temp folders lose their machine-specific names. A tool folder that
    is a symlink (a second checkout sharing node_modules) is bound at its target: that path
    goes too."""
    for link in [ROOT / "tools" / "pi" / "node_modules", *ROOT.glob("tools/pi-matrix/*/node_modules")]:
        if link.is_symlink():
            text = text.replace(str(link.resolve()), str(link.relative_to(ROOT)))
    text = text.replace(str(ROOT) + "/", "")
    tmp = re.escape(tempfile.gettempdir().rstrip("/"))
    return re.sub(tmp + r"/(pi-bridge-(?:cwd|pi)-)[A-Za-z0-9_]+", r"<tmp>/\1XXXXXXXX", text)


def expected_json(journal: str | Path) -> str:
    """``bridge replay --json`` of the journal, pretty-printed (the ``.expected.json``)."""
    return json.dumps(replay(str(journal)).to_json(), indent=2, ensure_ascii=False) + "\n"


_COLLAPSE = {"message_update", "tool_execution_update"}


def _event_label(v: dict[str, Any]) -> str:
    kind = v.get("type")
    if kind == "response":
        data = v.get("data")
        label = f"response {v.get('command')} " + ("ok" if v.get("success") else "refused")
        if isinstance(data, dict) and "disposition" in data:
            label += f" {data['disposition']}"
        return label
    if kind in ("message_start", "message_end"):
        msg = v.get("message") or {}
        label = f"{kind} {msg.get('role')}"
        if kind == "message_end" and msg.get("role") == "assistant":
            label += f" {msg.get('stopReason')}"
        return label
    if kind == "agent_end":
        return f"agent_end willRetry={v.get('willRetry')}"
    if kind == "agent_settled":
        return f"agent_settled aborted={v.get('aborted')}"
    if kind == "queue_update":
        return f"queue_update steering={len(v.get('steering') or [])} followUp={len(v.get('followUp') or [])}"
    if kind == "auto_retry_start":
        return f"auto_retry_start {v.get('attempt')}/{v.get('maxAttempts')}"
    if kind == "auto_retry_end":
        return f"auto_retry_end success={v.get('success')}"
    if kind == "extension_ui_request":
        return f"extension_ui_request {v.get('method')}"
    if kind in ("tool_execution_start", "tool_execution_end"):
        return f"{kind} {v.get('toolName')}"
    if kind == "entry_appended":
        return f"entry_appended {(v.get('entry') or {}).get('type')}"
    return str(kind)


def _sanitised(value: Any) -> Any:
    """``value`` as :func:`sanitise` leaves it in a fixture (a raw journal compares like its fixture)."""
    return json.loads(sanitise(json.dumps(value)))


def _strip(d: dict[str, Any], *drop: str) -> dict[str, Any]:
    return {k: v for k, v in d.items() if k not in drop}


def _receipt_form(r: dict[str, Any]) -> dict[str, Any]:
    out = {
        k: r.get(k) for k in ("request", "state", "reason", "stop", "run", "disposition", "nativeError", "generation")
    }
    if (r.get("state"), r.get("reason")) != ("failed", "interrupted"):
        out["reply"] = r.get("reply")  # an interrupted reply depends on when the stop landed
    out["signals"] = [_strip(s, "idx", "id", "generation") for s in r.get("signals") or []]
    return out


def normal_form(journal: str | Path, scenario: str | None = None) -> dict[str, Any]:
    """The comparison form of a recording (see the module docstring); with a
    scenario name, cut to what the scenario records deterministically."""
    stream, reader = open_transcript(str(journal))
    events: list[str] = []
    sends: list[str] = []
    signals: list[dict[str, Any]] = []
    receipts: list[dict[str, Any]] = []
    with stream:
        for e in reader:
            if e.kind == "recv":
                label = _event_label(e.value)
                if label in _COLLAPSE:
                    label += "…"
                    if events and events[-1] == label:
                        continue
                events.append(label)
            elif e.kind == "recv_raw":
                events.append("recv_raw")
            elif e.kind == "exit":
                events.append(f"[engine exit code={e.value.get('code')} signal={e.value.get('signal')}]")
            elif e.kind == "note" and isinstance(e.value, dict) and e.value.get("event") == "engine-start":
                events.append(f"[engine start generation={e.value.get('generation')}]")
            elif e.kind == "send":
                extra = " cancelled" if e.value.get("cancelled") else ""
                sends.append(f"{e.value.get('type')}{extra}")
            elif e.kind == "signal":
                signals.append(_strip(_sanitised(e.value), "idx", "id", "generation"))
            elif e.kind == "receipt":
                receipts.append(_receipt_form(_sanitised(e.value)))
    rep = replay(str(journal)).to_json()
    form = {
        "events": events,
        "sends": sends,
        "signals": signals,
        "receipts": receipts,
        "tracker": {
            "overlaps": [_strip(o, "idx") for o in rep["overlaps"]],
            "working": [w["request"] for w in rep["working"]],
            "settled": [_strip(s, "idx") for s in rep["settled"]],
            "receipts": [_receipt_form(_sanitised(r)) for r in rep["receipts"]],
        },
    }
    sc = SCENARIOS.get(scenario) if scenario is not None else None
    if sc is not None and sc.stable is not None:
        form = sc.stable(form)
    return form


def diff_forms(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """Unified-diff lines between two normal forms (empty: the same)."""
    out: list[str] = []
    for key in new.keys() | old.keys():
        a = json.dumps(old.get(key), indent=1, ensure_ascii=False, sort_keys=True).splitlines()
        b = json.dumps(new.get(key), indent=1, ensure_ascii=False, sort_keys=True).splitlines()
        if a != b:
            out += list(difflib.unified_diff(a, b, f"recorded {key}", f"now {key}", lineterm="", n=2))
    return out
