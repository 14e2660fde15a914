"""The ledger wired into the Python API (issue 44): ``open_bridge(ledger=...)`` accepts each prompt
into the ledger before it is accepted, records each receipt there before delivering it, and at
open settles what a lost bridge left without a receipt (bridge/live/supervisor.py,
bridge/live/recovery.py).

Real parts: the pinned Pi against the scripted model server (in this process: what it saw is
counted), and a bridge SIGKILLed in a subprocess of its own."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import trio

from bridge.core.words import State
from bridge.live.api import open_trio_bridge
from bridge.live.ledger import Ledger
from bridge.testing import ScriptedModel
from tests.conftest import ROOT

pytestmark = pytest.mark.usefixtures("pinned_pi")

HELLO = "hello from the scripted model"


async def test_an_id_runs_once_across_two_bridges_on_one_ledger(tmp_path: Path) -> None:
    """p1 submitted to one bridge, then again to a second opened on the same ledger: it ran once
    (the model saw one call), both get the same receipt, other text under p1 is refused, and
    ``bridge.receipt`` reads it; an id-less prompt gets an id the bridge makes, recorded too."""
    ledger = tmp_path / "ledger.sqlite3"
    with ScriptedModel(default={"text": HELLO}) as model:
        with trio.fail_after(120):
            async with open_trio_bridge(model.profile(), journal=tmp_path / "a.jsonl", ledger=ledger) as a:
                first = await (await a.submit("Say hello.", request="p1")).receipt()
                anon = await a.prompt("Say it again.")
            assert first.state == State.FINISHED and first.reply == HELLO
            assert len(model.completions) == 2
            async with open_trio_bridge(model.profile(), journal=tmp_path / "b.jsonl", ledger=ledger) as b:
                again = await b.submit("Say hello.", request="p1", stream=True)
                assert [t async for t in again.text()] == []  # nothing ran: no text
                assert await again.receipt() == first
                assert await b.receipt("p1") == first
                with pytest.raises(ValueError, match="accepted before for another prompt"):
                    await b.submit("Say goodbye.", request="p1")
                with pytest.raises(KeyError):
                    await b.receipt("nobody")
        assert len(model.completions) == 2
    with Ledger(ledger) as held:
        records = {r.request: r for r in held.records()}
    assert records["p1"].receipt == first and records["p1"].written is not None
    assert anon.request is not None and anon.request.startswith("p-") and records[anon.request].receipt == anon


async def test_the_same_id_in_flight_in_a_bridge_is_waited_for_not_run_again(tmp_path: Path) -> None:
    """p1 submitted twice in one bridge while its run streams: the second handle waits for the
    first's receipt; the model saw one call."""
    with ScriptedModel([{"words": 40, "chunk": 4, "delay": 0.02}]) as model:
        with trio.fail_after(120):
            async with open_trio_bridge(
                model.profile(), journal=tmp_path / "j.jsonl", ledger=tmp_path / "l.sqlite3"
            ) as bridge:
                one = await bridge.submit("Write a lot.", request="p1")
                two = await bridge.submit("Write a lot.", request="p1")
                waited = await bridge.receipt("p1")
                assert await one.receipt() == await two.receipt() == waited
        assert waited.state == State.FINISHED
        assert len(model.completions) == 1


CHILD = """
import sys, trio
from bridge.live.api import open_trio_bridge
from bridge.profiles.pi import scripted_profile

async def main(models, journal, ledger):
    async with open_trio_bridge(scripted_profile(models), journal=journal, ledger=ledger) as bridge:
        handle = await bridge.submit("Write a lot.", request="slow", stream=True)
        async for _ in handle.text():
            print("streaming", flush=True)
            await trio.sleep(60)

trio.run(main, *sys.argv[1:])
"""


async def test_a_bridge_killed_mid_stream_is_settled_when_the_ledger_is_opened_again(tmp_path: Path) -> None:
    """A bridge SIGKILLed while its prompt streams: the next bridge opened on the ledger settles
    the prompt at open, from its journal (never by running it again), and a resubmission of the
    id gets that receipt and runs nothing."""
    ledger = tmp_path / "ledger.sqlite3"
    script = tmp_path / "child.py"
    script.write_text(textwrap.dedent(CHILD))
    with ScriptedModel([{"words": 2000, "chunk": 4, "delay": 0.05}], default={"text": HELLO}) as model:
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        argv = [sys.executable, str(script), model.models_json, str(tmp_path / "lost.jsonl"), str(ledger)]
        with subprocess.Popen(argv, stdout=subprocess.PIPE, env=env, cwd=ROOT) as proc:
            assert proc.stdout is not None
            try:
                line = await trio.to_thread.run_sync(proc.stdout.readline)
                assert line.decode().startswith("streaming"), line
            finally:
                proc.send_signal(signal.SIGKILL)
                proc.wait()
        with Ledger(ledger) as held:
            [record] = held.unsettled()
        assert record.request == "slow" and record.written is not None
        with trio.fail_after(120):
            async with open_trio_bridge(model.profile(), journal=tmp_path / "b.jsonl", ledger=ledger) as bridge:
                settled = await bridge.receipt("slow")
                again = await (await bridge.submit("Write a lot.", request="slow", stream=True)).receipt()
        assert settled.state in (State.DELIVERY_UNKNOWN, State.OUTCOME_UNKNOWN), settled
        assert settled.reason == "engine-exited"
        assert settled.native_error is not None and "the bridge was lost" in settled.native_error
        assert again == settled
        assert len(model.completions) == 1


def test_the_asyncio_door_keeps_the_ledger_too(tmp_path: Path) -> None:
    """Under asyncio (AsyncioBridge): submit accepts into the ledger, a resubmission (by
    ``submit`` and by ``submit_nowait``) runs nothing, and ``receipt`` reads the ledger."""
    import asyncio

    from bridge.live.api import open_bridge

    async def main(profile: Any) -> tuple[Any, ...]:
        async with open_bridge(profile, journal=tmp_path / "j.jsonl", ledger=tmp_path / "l.sqlite3") as bridge:
            first = await (await bridge.submit("Say hello.", request="p1")).receipt()
            again = await (await bridge.submit("Say hello.", request="p1")).receipt()
            nowait = await bridge.submit_nowait("Say hello.", request="p1").receipt()
            return first, again, nowait, await bridge.receipt("p1")

    with ScriptedModel(default={"text": HELLO}) as model:
        first, *rest = asyncio.run(asyncio.wait_for(main(model.profile()), 120))
        assert first.state == State.FINISHED and rest == [first, first, first]
        assert len(model.completions) == 1


async def test_a_bridge_opened_beside_a_running_one_recovers_none_of_its_prompts(tmp_path: Path) -> None:
    """Two bridges open on one ledger at once: the second's open settles nothing of the first's
    (its prompt is in flight, not lost: the lease lock says so), and the same id submitted to the
    second waits for the first's receipt, read from the ledger; the model saw one call."""
    ledger = tmp_path / "ledger.sqlite3"
    with ScriptedModel([{"words": 60, "chunk": 4, "delay": 0.05}]) as model:
        with trio.fail_after(120):
            async with open_trio_bridge(model.profile(), journal=tmp_path / "a.jsonl", ledger=ledger) as a:
                one = await a.submit("Write a lot.", request="p1", stream=True)
                async for _ in one.text():
                    break  # it streams: in flight in a
                async with open_trio_bridge(
                    model.profile(), journal=tmp_path / "b.jsonl", ledger=ledger, start_engine=False
                ) as b:
                    with Ledger(ledger) as held:
                        record = held.get("p1")
                    assert record is not None and record.receipt is None  # b's open settled nothing
                    two = await b.submit("Write a lot.", request="p1")
                    assert await two.receipt() == await one.receipt()
        assert (await one.receipt()).state == State.FINISHED
        assert len(model.completions) == 1
