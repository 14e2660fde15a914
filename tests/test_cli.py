"""The command line tells the truth: usage errors are named and exit 2."""

from __future__ import annotations

import subprocess
import sys

import pytest

from bridge import BridgeConfig, __version__


def bridge(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "bridge", *args], capture_output=True, text=True, timeout=60)


def test_help_lists_every_command_and_version_prints():
    p = bridge("--help")
    assert p.returncode == 0
    for command in ("replay", "conform", "serve", "run", "diagnose", "demo"):
        assert command in p.stdout
    assert bridge("--version").stdout.strip() == f"pi-bridge {__version__}"


@pytest.mark.parametrize("args, says", [
    (["serve", "--queue-max", "0"], "--queue-max: must be more than 0"),
    (["run", "x", "--ack-timeout", "abc"], "--ack-timeout: 'abc' is not a number"),
    (["run", "x", "--timeout", "-1"], "--timeout: must be more than 0"),
    (["serve", "--seal-check", "maybe"], "invalid choice: 'maybe'"),
    (["replay", "x.jsonl", "--", "engine"], "takes no engine after --"),
    (["run"], "give at least one PROMPT"),
])
def test_bad_usage_is_named_and_exits_2(args, says):
    p = bridge(*args)
    assert p.returncode == 2 and says in p.stderr, p.stderr


def test_no_command_prints_help_and_exits_2():
    p = bridge()
    assert p.returncode == 2 and "usage: bridge" in p.stdout


def test_an_engine_that_cannot_be_launched_is_named(tmp_path):
    p = bridge("run", "hi", "--no-journal", "--", str(tmp_path / "no-such-engine"))
    assert p.returncode == 1 and "rejected (engine-down)" in p.stderr and "no-such-engine" in p.stderr


def test_config_refuses_nonsense():
    for bad in (dict(queue_max=0), dict(ack_timeout=-1.0), dict(settle_timeout=0.0), dict(seal_check="x")):
        with pytest.raises(ValueError):
            BridgeConfig(**bad)  # type: ignore[arg-type]
