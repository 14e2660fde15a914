"""Issue 6, privacy: the engine's private config (credentials) never outlives its engine."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import trio

from bridge.demo.model_server import start_server
from bridge.live.api import open_bridge
from bridge.live.supervisor import BridgeConfig
from bridge.profiles.pi import scripted_profile

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
                assert SECRET in auth and (os.stat(first).st_mode & 0o777) == 0o700
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
    """SIGKILL leaves the sealed Pi's config and working folders behind; the next bridge
    (same user, same temp folder) removes them, and never a live bridge's."""
    import json
    import subprocess

    tmp = tmp_path / "tmp"
    tmp.mkdir()
    server = start_server([{"text": "hi"}])
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
            left = sorted(p.name for p in tmp.iterdir())
            assert any(n.startswith(f"pi-bridge-pi-{first.pid}-") for n in left), left
            live = tmp / "pi-bridge-pi-1-kept"  # pid 1 is alive: never touched
            live.mkdir()
            first.send_signal(signal.SIGKILL)
            first.wait(timeout=10)
        finally:
            first.kill()
        assert any(p.name.startswith(f"pi-bridge-pi-{first.pid}-") for p in tmp.iterdir())
        second = subprocess.run(argv, env=env, input=b"", capture_output=True, timeout=60)
        assert second.returncode == 0, second.stderr
    finally:
        server.close()
    assert sorted(p.name for p in tmp.iterdir()) == ["pi-bridge-pi-1-kept"]
