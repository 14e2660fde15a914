"""Configuration errors at open (issue 29): ``open_bridge`` starts the engine and awaits its
start-up check, so what the CLI refuses in one line is a :class:`ProfileError` at open -- under
asyncio and trio alike, through the real pinned Pi and the scripted model server -- with
nothing left behind; a good profile opens on an engine that then runs the first prompt (one
engine start in all); a crash at start is no such error (the crash rules retry it at the
next prompt). The rules are the lifecycle's (:class:`~bridge.core.lifecycle.Open`,
tests/test_lifecycle.py); ``start_engine=False`` (``bridge run``/``serve``/``acp``) keeps the
start at the first prompt (tests/test_model_at_start.py, tests/test_contract.py)."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio

from bridge import BridgeConfig, ProfileError, State, open_bridge
from bridge.demo.model_server import start_server
from bridge.demo.model_server.server import models_json
from bridge.profiles.command import CommandProfile, Launch
from bridge.profiles.pi import PiProfile, scripted_profile
from bridge.transcript import open_transcript
from tests.conftest import private_left

LIBRARIES = ["asyncio", "trio"]

#: What ``bridge run --model nope`` prints after ``bridge run: `` (tests/test_model_at_start.py).
NOT_OFFERED = (
    "the engine cannot be set up: seal check failed: Pi does not offer --model nope (scripted: scripted-model)"
)


def run(library: str, main: Any) -> Any:
    return asyncio.run(main()) if library == "asyncio" else trio.run(main)


@pytest.fixture
def models(tmp_path: Path, pinned_pi: object) -> Iterator[tuple[str, Any]]:
    server = start_server([{"text": "from the engine started at open"}])
    path = tmp_path / "models.json"
    path.write_text(json.dumps(models_json(server.base_url)))
    try:
        yield str(path), server
    finally:
        server.close()


def entries(journal: Path, kind: str) -> list[Any]:
    stream, reader = open_transcript(str(journal))
    with stream:
        return [e.value for e in reader if e.kind == kind]


def reaped(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


@pytest.mark.parametrize("library", LIBRARIES)
def test_a_model_pi_does_not_offer_is_a_profile_error_at_open_and_nothing_is_left(
    library: str, models: tuple[str, Any], private_tmp: Path, tmp_path: Path
) -> None:
    path, server = models
    journal = tmp_path / "j.jsonl"

    async def main() -> None:
        async with open_bridge(scripted_profile(path, model="nope"), journal=journal):
            raise AssertionError("the block never begins")

    with pytest.raises(ProfileError) as raised:
        run(library, main)
    line = str(raised.value)
    assert line.startswith(NOT_OFFERED) and "\n" not in line, line
    # Nothing left: no private folder (its key), no engine; the model was never asked.
    assert private_left(private_tmp) == []
    (start,) = [n for n in entries(journal, "note") if n.get("event") == "engine-start"]
    assert reaped(start["pid"])
    assert server.requests == []
    # The journal says what happened, as for bridge run: one engine, its check refused, no prompt.
    (check,) = [n for n in entries(journal, "note") if n.get("event") == "seal-check"]
    assert check["problems"][0].startswith("Pi does not offer --model nope")
    assert not [s for s in entries(journal, "send") if s.get("type") == "prompt"]
    assert [n["event"] for n in entries(journal, "note")][-1] == "bridge-closed"


@pytest.mark.parametrize("library", LIBRARIES)
def test_a_model_pi_refuses_itself_is_a_profile_error_at_open(
    library: str, models: tuple[str, Any], private_tmp: Path
) -> None:
    """``model`` without ``provider``: Pi exits at start saying ``Model "nope" not found``
    (its own check, which the launch reads as a refusal): the exit's words, at open."""
    path, _ = models

    async def main() -> None:
        async with open_bridge(PiProfile(models_json=path, model="nope"), journal=False):
            raise AssertionError("the block never begins")

    with pytest.raises(ProfileError, match='^the engine cannot be set up: .*Model "nope" not found'):
        run(library, main)
    assert private_left(private_tmp) == []


@pytest.mark.parametrize("library", LIBRARIES)
def test_a_good_profile_opens_on_the_engine_that_runs_the_first_prompt(
    library: str, models: tuple[str, Any], private_tmp: Path
) -> None:
    path, _ = models

    async def main() -> tuple[Any, int | None, int, bool]:
        async with open_bridge(scripted_profile(path), journal=False) as bridge:
            engine = bridge.engine
            assert engine is not None, "started at open"
            alive, generation = engine.alive, bridge.generation
            receipt = await bridge.prompt("hi")
            return receipt, engine.pid, generation, alive

    receipt, pid, generation, alive = run(library, main)
    assert alive and generation == 1
    assert receipt.state is State.FINISHED and receipt.reply == "from the engine started at open"
    assert (receipt.generation, receipt.pid) == (1, pid), "one engine start in all"
    assert pid is not None and reaped(pid)
    assert private_left(private_tmp) == []


@pytest.mark.parametrize("library", LIBRARIES)
def test_an_engine_command_that_cannot_run_is_a_profile_error_at_open(library: str, tmp_path: Path) -> None:
    """A ``--`` engine has no start-up check: "checked" is launched. One that cannot be
    launched is refused at open, with the words ``bridge run`` prints."""
    missing = str(tmp_path / "no-such-engine")

    async def main() -> None:
        async with open_bridge(CommandProfile([missing]), journal=False):
            raise AssertionError("the block never begins")

    with pytest.raises(ProfileError, match=f"^the engine cannot be set up: cannot start the engine '{missing}'"):
        run(library, main)


class Checked(CommandProfile):
    """A ``--`` engine with a start-up check like Pi's (one ``get_state``), always passing."""

    def prepare(self) -> Launch:
        launch = super().prepare()
        launch.startup = [{"id": "seal-state", "type": "get_state"}]
        launch.check = lambda answers: []
        return launch


async def test_a_crash_at_open_is_no_profile_error_and_the_crash_rules_go_on_at_the_prompt() -> None:
    """An engine that dies in its start-up check without a refusal's words may have met
    something that passes: the block begins (the crash counted once), and the first prompt
    starts the next engine, as after any crash -- here it dies too, and the crash limit of 2
    takes the bridge down."""
    dies_in_check = [
        sys.executable,
        "-c",
        "import sys; sys.stdin.readline(); sys.stderr.write('fatal: licence file expired\\n'); sys.exit(3)",
    ]
    config = BridgeConfig(crash_limit=2, restart_backoff=(0.0,))
    with trio.fail_after(30):
        async with open_bridge(Checked(dies_in_check), journal=False, config=config) as bridge:
            state = bridge.supervision.lifecycle.state
            assert len(state.crashes) == 1 and state.down is None and not state.setup_failed
            assert bridge.generation == 1
            receipt = await bridge.prompt("hi")
    assert (receipt.state, receipt.reason) == ("rejected", "engine-down"), receipt
    assert "2 engine failures" in (receipt.native_error or "") and "licence file expired" in receipt.native_error
    assert bridge.generation == 2
