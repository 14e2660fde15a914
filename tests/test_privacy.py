"""Issue 6, privacy: the engine's private config (credentials) never outlives its engine, nor
the bridge, however the bridge ends."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio

import bridge.live.api
import bridge.live.engine
import bridge.live.supervisor
from bridge.demo.model_server import start_server
from bridge.live.api import Bridge, open_bridge
from bridge.live.supervisor import BridgeConfig
from bridge.profiles.command import Launch
from bridge.profiles.pi import PiProfile, scripted_profile

#: Marked ``pi`` (tests/conftest.py): the sealed real pinned Pi's private folders and credentials.
pytestmark = pytest.mark.pi

SECRET = "sk-test-do-not-leak-0123456789"


async def test_credentials_are_removed_when_the_engine_crashes_and_at_close(tmp_path: Path):
    server = start_server([{"text": "slow " * 400, "chunk": 5, "delay": 0.02}, {"text": "second"}])
    try:
        server.write_models(str(tmp_path))
        profile = scripted_profile(str(tmp_path / "models.json"), api_key=SECRET)
        config_dirs: list[Path] = []
        with trio.fail_after(60):
            async with open_bridge(
                profile, journal=tmp_path / "j.jsonl", config=BridgeConfig(restart_backoff=(0.0,))
            ) as bridge:
                h = await bridge.submit("stream slowly", stream=True)
                async for _ in h.text():
                    break  # the model is streaming: the run is under way
                engine = bridge.engine
                assert engine is not None and engine.pid is not None
                first = Path(engine.launch.env["PI_CODING_AGENT_DIR"])
                config_dirs.append(first)
                auth = (first / "auth.json").read_text()
                # The key is held by the bridge (issue 41): the folder holds the engine's token for it.
                assert SECRET not in auth and "pib-" in auth and (os.stat(first).st_mode & 0o777) == 0o700
                assert (os.stat(first / "auth.json").st_mode & 0o777) == 0o600
                os.kill(engine.pid, signal.SIGKILL)
                r = await h.receipt()
                assert (r.state, r.reason) == ("outcome-unknown", "engine-exited")
                assert not first.exists(), "the crashed engine's credentials are still on disk"
                r2 = await bridge.prompt("again")
                assert r2.state == "finished" and r2.generation == 2
                assert bridge.engine is not None
                config_dirs.append(Path(bridge.engine.launch.env["PI_CODING_AGENT_DIR"]))
        assert not any(d.exists() for d in config_dirs)
        # The key never reached the journal or any process's command line.
        assert SECRET not in (tmp_path / "j.jsonl").read_text()
    finally:
        server.close()


def test_a_killed_bridges_private_folders_are_removed_by_the_next_bridge(tmp_path: Path):
    """SIGKILL leaves the sealed Pi's config and working folders behind, in the bridges' per-user
    root whatever TMPDIR is (bridge/profiles/orphans.py); the next bridge (same user) removes
    them, and never a live bridge's; those an older bridge left in TMPDIR too."""
    import json
    import subprocess

    from bridge.profiles.orphans import private_root

    tmp = tmp_path / "tmp"
    tmp.mkdir()
    root = private_root()
    old = tmp / "pi-bridge-pi-999999999-older"  # where a bridge before the root left its folder
    old.mkdir()
    server = start_server([{"text": "hi"}])
    live = root / "pi-bridge-pi-1-kept"  # pid 1 is alive: never touched
    try:
        server.write_models(str(tmp_path))
        env = {**os.environ, "TMPDIR": str(tmp), "PI_BRIDGE_JOURNAL_DIR": str(tmp_path / "journals")}
        argv = [
            sys.executable,
            "-m",
            "bridge",
            "serve",
            "--models-json",
            str(tmp_path / "models.json"),
            "--provider",
            "scripted",
            "--model",
            "scripted-model",
        ]
        first = subprocess.Popen(argv, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            assert first.stdout is not None
            assert json.loads(first.stdout.readline())["type"] == "ready"
            left = sorted(p.name for p in root.iterdir())
            assert any(n.startswith(f"pi-bridge-pi-{first.pid}-") for n in left), left
            assert any(n.startswith(f"pi-bridge-cwd-{first.pid}-") for n in left), left
            assert list(tmp.iterdir()) == [], "nothing private in TMPDIR; the older bridge's folder swept"
            live.mkdir(exist_ok=True)
            first.send_signal(signal.SIGKILL)
            first.wait(timeout=10)
        finally:
            first.kill()
        assert any(p.name.startswith(f"pi-bridge-pi-{first.pid}-") for p in root.iterdir())
        second = subprocess.Popen(argv, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        out, err = second.communicate(b"", timeout=60)
        assert second.returncode == 0, err
        pids = (f"-{first.pid}-", f"-{second.pid}-", f"-{first.pid}", f"-{second.pid}")
        assert [p.name for p in root.iterdir() if p.name.endswith(pids) or any(x in p.name for x in pids)] == []
        assert live.is_dir()
    finally:
        server.close()
        if live.is_dir():
            live.rmdir()


# -- nothing left behind, however the bridge ends ------------------------------------------------
#
# Each test runs the sealed Pi holding a literal key, with the temporary folder under tmp_path
# (tempfile.tempdir), and ends the bridge one way; then no private folder of a bridge
# (``pi-bridge-pi-*``: Pi's config and the key, ``pi-bridge-cwd-*``: its working folder) is left.


class Boom(Exception):
    pass


def _private(tmp: Path) -> list[str]:
    return sorted(p.name for p in tmp.iterdir() if p.name.startswith(("pi-bridge-pi-", "pi-bridge-cwd-")))


@pytest.fixture
def made(monkeypatch: pytest.MonkeyPatch, private_tmp: Path) -> list[Path]:
    """The config folder of every launch prepared, each seen holding the key when made."""
    real = PiProfile.prepare
    folders: list[Path] = []

    def prepare(self: PiProfile) -> Launch:
        launch = real(self)
        config = Path(launch.env["PI_CODING_AGENT_DIR"])
        auth = (config / "auth.json").read_text()
        assert config.parent == private_tmp and "pib-" in auth and SECRET not in auth  # the token (issue 41)
        folders.append(config)
        return launch

    monkeypatch.setattr(PiProfile, "prepare", prepare)
    return folders


@pytest.fixture
def keyed(tmp_path: Path, pinned_pi: object) -> Iterator[PiProfile]:
    """The sealed Pi with a literal key, against a scripted server whose replies stream slowly."""
    server = start_server([{"text": "slow " * 400, "chunk": 5, "delay": 0.02}] * 2)
    try:
        yield scripted_profile(server.write_models(str(tmp_path)), api_key=SECRET)
    finally:
        server.close()


def _nothing_left(tmp: Path, made: list[Path]) -> None:
    assert made, "no launch was prepared: the test tests nothing"
    assert _private(tmp) == [], "a bridge's private folders (its key) are still on disk"
    assert not any(config.exists() for config in made)


async def _streaming(opened: Bridge) -> None:
    """A prompt under way: Pi runs, its config folder holds the key."""
    h = await opened.submit("stream slowly", stream=True)
    async for _ in h.text():
        break
    assert opened.engine is not None and opened.engine.alive


@pytest.mark.parametrize("how", ["exception", "group", "cancel", "interrupt"])
async def test_the_key_is_removed_however_the_block_ends(
    how: str, keyed: PiProfile, made: list[Path], private_tmp: Path
) -> None:
    """The block raises (an exception, a group, a KeyboardInterrupt) or is cancelled
    (``trio.move_on_after`` around it) while Pi streams a reply."""
    raised: dict[str, type[BaseException]] = {
        "exception": Boom,
        "group": ExceptionGroup,
        "interrupt": KeyboardInterrupt,
    }
    expected = pytest.raises(raised[how]) if how in raised else contextlib.nullcontext()
    with trio.fail_after(60):
        with trio.move_on_after(50) as scope, expected:
            async with open_bridge(keyed, journal=False) as opened:
                await _streaming(opened)
                if how == "exception":
                    raise Boom("in the block")
                if how == "group":
                    raise ExceptionGroup("in the block", [Boom("one"), KeyError("two")])
                if how == "interrupt":
                    raise KeyboardInterrupt
                scope.deadline = trio.current_time()
                await trio.sleep_forever()
        assert scope.cancelled_caught == (how == "cancel")
    _nothing_left(private_tmp, made)


@pytest.mark.parametrize("error", [RuntimeError, KeyboardInterrupt])
async def test_the_key_is_removed_when_the_bridge_cannot_be_made(
    error: type[BaseException], keyed: PiProfile, made: list[Path], private_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``Bridge(...)`` raises (a bug, a KeyboardInterrupt at that moment): the launch was
    prepared before it, the key written."""

    def failing(*args: Any, **kw: Any) -> Bridge:
        raise error("no bridge")

    monkeypatch.setattr(bridge.live.api, "Bridge", failing)
    with pytest.raises(BaseExceptionGroup) as raised:  # (raised in the bridge's nursery: the bridge's own)
        async with open_bridge(keyed, journal=False):
            raise AssertionError("never opened")
    assert raised.value.subgroup(error) is not None, raised.value
    _nothing_left(private_tmp, made)


async def test_the_key_is_removed_when_the_nursery_cannot_be_opened(
    keyed: PiProfile, made: list[Path], private_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``trio.open_nursery()`` itself fails (as under asyncio: ``'RunContext' object has no
    attribute 'runner'``), after the launch was prepared."""

    def failing() -> Any:
        raise AttributeError("'RunContext' object has no attribute 'runner'")

    monkeypatch.setattr(bridge.live.api, "trio", types.SimpleNamespace(open_nursery=failing))
    with pytest.raises(AttributeError, match="runner"):
        async with open_bridge(keyed, journal=False):
            raise AssertionError("never opened")
    _nothing_left(private_tmp, made)


def test_open_bridge_under_asyncio_leaves_nothing_behind(keyed: PiProfile, made: list[Path], private_tmp: Path) -> None:
    """``asyncio.run(main())`` around ``open_bridge`` (the bridge as trio's guest): the prompt
    runs, and its private folders go when the block ends."""

    async def main() -> Any:
        async with open_bridge(keyed, journal=False) as opened:
            return await opened.prompt("hi", timeout=30)

    receipt = asyncio.run(main())
    assert receipt.state == "finished", receipt
    _nothing_left(private_tmp, made)


async def test_the_key_is_removed_when_the_engine_cannot_be_started(
    keyed: PiProfile, made: list[Path], private_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Starting the engine fails with something other than an OSError (which is a spawn
    failure the lifecycle answers): the bridge fails, the launch it took is removed."""

    async def failing(*args: Any, **kw: Any) -> Any:
        raise RuntimeError("cannot start")

    monkeypatch.setattr(bridge.live.engine.Engine, "start", failing)
    # A task of the bridge failed (a bug): its close waits out the backstop, 30 s, for a
    # lifecycle that cannot close; here a second is as good a test.
    monkeypatch.setattr(bridge.live.supervisor, "CLOSE_BACKSTOP", 1.0)
    quick = BridgeConfig(close_grace=0.2, stdin_grace=0.2, term_grace=0.2)
    with trio.fail_after(60), pytest.raises(BaseExceptionGroup) as raised:
        async with open_bridge(keyed, journal=False, config=quick) as opened:
            await opened.prompt("hi", timeout=30)
    assert raised.value.subgroup(RuntimeError) is not None, raised.value
    _nothing_left(private_tmp, made)


async def test_the_key_is_removed_when_prepare_is_interrupted(
    keyed: PiProfile, private_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A KeyboardInterrupt inside ``prepare()`` after the private folders are made (here in the
    journal header's making) leaves none of them."""
    seen: list[str] = []

    def interrupted(*args: Any, **kw: Any) -> Any:
        seen.extend(_private(private_tmp))
        raise KeyboardInterrupt

    monkeypatch.setattr(PiProfile, "_header", interrupted)
    with pytest.raises(KeyboardInterrupt):
        async with open_bridge(keyed, journal=False):
            raise AssertionError("never opened")
    assert any(name.startswith("pi-bridge-pi-") for name in seen), seen
    assert _private(private_tmp) == []
