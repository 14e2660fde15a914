"""What the subcommands' parsers share: the engine, confinement and bridge options of
``serve``, ``acp``, ``run`` and ``models``, and the engine profile, journal and bridge settings
they describe.

Those subcommands (and ``bridge demo``) take an engine: by default the sealed, pinned Pi
(``bridge/profiles/pi.py``); any other engine speaking the same JSONL is given as its argv after
``--``. A mistake in the options is one line on stderr and exit 2, and so is a journal or engine
that cannot be set up (:func:`guard_setup`).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final, NoReturn, TypeAlias, TypeVar

from bridge.core.words import THINKING_LEVELS

if TYPE_CHECKING:
    from bridge.profiles.command import EngineProfile

T = TypeVar("T")

#: What ``add_parser`` of each subcommand adds its parser to.
Subcommands: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"


# -- the options -----------------------------------------------------------------------------------


#: Help for ``--pi-dir`` (``bridge run``/``serve``/``acp``/``models``/``demo``): the order of
#: :func:`bridge.profiles.pi.find_install` (here, so that listing it loads no profile).
PI_DIR_HELP: Final = (
    "the folder holding the pinned Pi's node_modules (default: $PI_BRIDGE_PI_DIR, else tools/pi when "
    "pi-bridge runs from a checkout; an installed pi-bridge needs one of the two)"
)

#: ``--model`` for ``bridge models``, which leaves the start-up check of the model out.
_MODELS_MODEL_HELP: Final = (
    "Pi model id (or provider/id): not refused here when Pi does not offer it (the list is printed and one line "
    "on stderr says so); one Pi itself refuses at start (given alone, matching nothing) is exit 2"
)


def add_engine_options(p: argparse.ArgumentParser, *, engine_cwd: bool = True, checks_model: bool = True) -> None:
    g = p.add_argument_group("engine (default: the sealed, pinned Pi; give another engine's argv after --)")
    g.add_argument("--provider", help="Pi provider name (e.g. anthropic, openai, or one from --models-json)")
    g.add_argument(
        "--model",
        help="Pi model id, exactly as `bridge models` lists it (or provider/id); an engine that does not run "
        "that model, one Pi offers, fails its start-up check: not retried, the engine cannot be set up (exit 2)"
        if checks_model
        else _MODELS_MODEL_HELP,
    )
    g.add_argument(
        "--api-key-env",
        metavar="NAME",
        help="environment variable holding the provider's API key: the bridge holds the key and the engine gets "
        "only a per-engine token for it (its model calls go through the bridge's key endpoint, which puts the key "
        "in); the variable is never passed to the engine",
    )
    g.add_argument(
        "--models-json", metavar="PATH", help="a Pi models.json with custom providers (copied into the private config)"
    )
    g.add_argument("--pi-dir", metavar="DIR", help=PI_DIR_HELP)
    g.add_argument(
        "--allow-other-pi-version",
        action="store_true",
        help="run a Pi whose version differs from the pin (1.6.0), also one older than 0.99.1 that lacks what the "
        "tracker needs (agent_settled, the ack's disposition): its receipts then say outcome-unknown",
    )
    if engine_cwd:  # not for acp: each session's cwd is its engine's working folder
        g.add_argument(
            "--engine-cwd",
            metavar="DIR",
            help="the engine's working folder (default for Pi: a fresh private temp folder; for -- engines: the current "
            "folder)",
        )
    g.add_argument("--pi-session", action="store_true", help="let Pi keep a session file (default: --no-session)")
    g.add_argument(
        "--extension",
        metavar="PATH",
        action="append",
        default=[],
        help="load this Pi extension (its .ts or .js file) into the sealed Pi: only the ones given load, the "
        "start-up check verifies it and the journal header records each file's SHA-256; their dialogs are asked "
        "of the controller (serve: ask / answer lines; acp: session/request_permission for confirm and select, the "
        "others cancelled; run: answered cancelled); repeatable",
    )
    g.add_argument(
        "--pi-settings",
        metavar="PATH",
        help='a JSON object merged into the sealed Pi\'s settings.json (e.g. {"retry": {"maxRetries": 1}}; '
        "settings that load resources -- packages, extensions, skills, prompts, themes -- are refused)",
    )
    g.add_argument(
        "--env-allow",
        metavar="NAME",
        action="append",
        help="pass this environment variable to the engine too: the sealed Pi gets only PATH, HOME, LANG, LC_*, TERM, "
        "TZ and TMPDIR (/tmp in the sandbox) besides its own; a -- engine gets only these names (plus PATH, HOME, "
        "LANG, LC_ALL, TZ, TMPDIR) once one is given; repeatable",
    )
    g.add_argument(
        "--clearing",
        metavar="TYPE",
        action="append",
        help="for a -- engine: command types whose response closes a clear window (default: clear_queue)",
    )
    _add_confinement_options(p)


def _add_confinement_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group(
        "confinement of the sealed Pi (bubblewrap: read-only files, writes only in its working folder, its "
        "private config folder and a private /tmp; your home and the journals hidden; nothing it starts "
        "outlives it)"
    )
    g.add_argument(
        "--no-sandbox",
        action="store_true",
        help="run the sealed Pi unconfined (said in the journal header); without it, no bubblewrap is an error",
    )
    g.add_argument(
        "--allow-read",
        metavar="PATH",
        action="append",
        default=[],
        help="show PATH to the engine read-only; repeatable",
    )
    g.add_argument(
        "--allow-write", metavar="PATH", action="append", default=[], help="let the engine write PATH; repeatable"
    )
    g.add_argument(
        "--no-network",
        action="store_true",
        help="cut the engine off the network but for the bridge's key endpoint, which forwards its model calls to "
        "its provider (any host)",
    )
    g.add_argument(
        "--key-inside",
        action="store_true",
        help="hand the sealed Pi the provider key itself (in its private auth.json/models.json and, with "
        "--api-key-env, its environment), where its tools can read it, instead of a token for the bridge's key "
        "endpoint; not with --no-network (said in the journal header)",
    )
    for flag, kind, what in LIMIT_OPTIONS:
        g.add_argument(flag, type=_limit(kind), default=None, metavar="N" if kind == "count" else "SIZE", help=what)


#: The limits of the confined engine (docs: guide/confinement.md#limits): flag, kind, help.
LIMIT_OPTIONS: Final = (
    (
        "--engine-memory",
        "size",
        "memory of the engine, Pi and its tools together (a cgroup where the bridge may make one; else each "
        "tool process's data, RLIMIT_DATA); a tool past it is killed, its call fails (default 2G; 0: none)",
    ),
    (
        "--engine-processes",
        "count",
        "processes and threads of the engine (a cgroup; else RLIMIT_NPROC, which does not bind root: refused "
        "there); a tool's fork past it fails (default 512; 0: none)",
    ),
    ("--engine-tmp-size", "size", "size of the engine's private /tmp (a tmpfs; default 512M; 0: half the RAM)"),
    (
        "--engine-disk",
        "size",
        "size of the working folder the bridge makes for the engine (a tmpfs; a given --engine-cwd is not "
        "bounded; default 512M; 0: none)",
    ),
)


def _limit(kind: str) -> Any:
    """A ``--engine-*`` limit: a size (``512M``, ``2G``) or a count; ``0``/``none`` lifts it."""

    def parse(text: str) -> Any:
        from bridge.profiles.limits import parse_count, parse_size

        try:
            return (parse_size if kind == "size" else parse_count)(text) or 0
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None

    parse.__name__ = kind
    return parse


def positive(kind: type) -> Any:
    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            what = "a whole number" if kind is int else "a number"
            raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None
        if value == float("inf"):
            raise argparse.ArgumentTypeError(f"must be a finite number of seconds, got {text}")
        if not value > 0:
            raise argparse.ArgumentTypeError(f"must be more than 0, got {text}")
        return value

    parse.__name__ = kind.__name__
    return parse


def _stall_seconds(text: str) -> float:
    """``--stall-timeout``: 0 (off) or a positive, finite number of seconds."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if value != 0 and (not value > 0 or value == float("inf")):
        raise argparse.ArgumentTypeError(f"must be 0 (off) or a positive, finite number of seconds, got {text}")
    return value


def journal_path(text: str) -> str:
    """``--journal PATH``: not empty (an unset variable in ``--journal "$J"`` quietly meant
    the default journal)."""
    if not text:
        raise argparse.ArgumentTypeError("an empty path (give a file, or leave --journal out for the default)")
    if text.endswith("/"):  # a path would drop the slash and write the folder's name as a file
        raise argparse.ArgumentTypeError(f"{text} names a folder (give a file's path in it)")
    return text


def conversation_name(text: str) -> str:
    from bridge.core.conversation import name_problem

    problem = name_problem(text)
    if problem is not None:
        raise argparse.ArgumentTypeError(problem)
    return text


def add_conversation_option(p: argparse.ArgumentParser) -> None:
    """``--conversation NAME`` (``run``, ``serve``): docs: guide/conversations.md."""
    p.add_argument(
        "--conversation",
        type=conversation_name,
        metavar="NAME",
        help="resume the named conversation (or begin it): its Pi session file is kept in the bridge's "
        "private state ($PI_BRIDGE_CONVERSATION_DIR, else $XDG_STATE_HOME/pi-bridge/conversations), an "
        "engine restart or a new bridge on NAME continues it; one bridge at a time (`bridge conversations`)",
    )


def _budget(kind: type) -> Any:
    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{text!r} is not {'a whole number' if kind is int else 'a number'}"
            ) from None
        if not 0 <= value < float("inf"):
            raise argparse.ArgumentTypeError(f"must be a finite number of 0 or more, got {text}")
        return value

    parse.__name__ = kind.__name__
    return parse


def _add_budget_options(g: Any) -> None:
    """``--budget-usd`` / ``--budget-tokens`` (each prompt's), ``--total-budget-usd`` / ``-tokens`` (the bridge's)."""
    for unit, kind, what in (("usd", float, "USD (Pi's cost, from the model's prices)"), ("tokens", int, "tokens")):
        g.add_argument(
            f"--budget-{unit}",
            type=_budget(kind),
            default=None,
            metavar="N",
            help=f"each prompt may spend this many {what}; past it the bridge stops it, failed/budget (default: none)",
        )
        g.add_argument(
            f"--total-budget-{unit}",
            type=_budget(kind),
            default=None,
            metavar="N",
            help=f"all prompts together may spend this many {what}: the one that passes it is stopped (failed/budget), "
            "and once it is spent every prompt is rejected/budget (default: none)",
        )


def add_bridge_options(p: argparse.ArgumentParser, *, journal_by_default: bool = True, budgets: bool = True) -> None:
    g = p.add_argument_group("bridge")
    journal = g.add_mutually_exclusive_group()
    journal.add_argument(
        "--journal",
        type=journal_path,
        metavar="PATH",
        help="write the journal here (default: $PI_BRIDGE_JOURNAL_DIR, else $XDG_STATE_HOME/pi-bridge/journals, "
        "else ~/.local/state/pi-bridge/journals; files 0600 in a 0700 folder)"
        if journal_by_default
        else "write a journal here, 0600 (default: none, a question leaves nothing worth keeping)",
    )
    journal.add_argument("--no-journal", action="store_true", help="write no journal")
    g.add_argument(
        "--journal-full",
        action="store_true",
        help="keep message_update / tool_execution_update payloads (default: elided)",
    )
    for unit, name, default in (("DAYS", "days", 30), ("MB", "mb", 1024)):
        g.add_argument(
            f"--journal-keep-{name}",
            type=float,
            metavar=unit,
            help=f"in the default journal folder, remove journals past this many {unit.lower()} "
            f"(oldest first, never one open) when a new one is made (default ${'PI_BRIDGE_JOURNAL_KEEP_' + unit}, "
            f"else {default}; 0: no bound)",
        )
    g.add_argument(
        "--queue-max", type=positive(int), default=64, metavar="N", help="prompts waiting for the slot (default 64)"
    )
    g.add_argument(
        "--queue-mb",
        type=positive(float),
        default=128.0,
        metavar="MB",
        help="MiB the prompts waiting for the slot may hold, texts and images together; one more is rejected "
        "queue-full, as is a prompt bigger than this alone (default 128)",
    )
    g.add_argument(
        "--ack-timeout", type=positive(float), default=30.0, metavar="S", help="seconds from send to ack (default 30)"
    )
    g.add_argument(
        "--timeout",
        type=positive(float),
        default=None,
        metavar="S",
        help="default settle timeout per prompt: stop it, then give up (default: none)",
    )
    g.add_argument(
        "--stall-timeout",
        type=_stall_seconds,
        default=300.0,
        metavar="S",
        help="no engine line for S seconds while a prompt's run waits on the model (not while a tool "
        "runs): stop it, failed/stalled; 0 turns it off, and --tool-timeout with it (default 300)",
    )
    g.add_argument(
        "--tool-timeout",
        type=_stall_seconds,
        default=1800.0,
        metavar="S",
        help="no engine line for S seconds while one of a prompt's tools runs (a tool that blocks): stop it "
        "as a stall, failed/stalled; 0 lets a tool run silent for ever (default 1800)",
    )
    g.add_argument(
        "--dialog-timeout",
        type=positive(float),
        default=120.0,
        metavar="S",
        help="seconds an extension's dialog waits for the controller's answer (less if the extension gives "
        "its own timeout), then it is answered cancelled (default 120)",
    )
    g.add_argument(
        "--thinking",
        choices=THINKING_LEVELS,
        default=None,
        help="the thinking level every prompt asks for (applied and verified before it is written; "
        "default: the engine's own)",
    )
    g.add_argument(
        "--taint-grace",
        type=positive(float),
        default=5.0,
        metavar="S",
        help="after an overlap/gap, seconds the held prompt's run may take to settle (default 5)",
    )
    g.add_argument(
        "--seal-check",
        choices=("refuse", "warn"),
        default="refuse",
        help="an engine failing the start-up seal check is refused (default) or used with a warning",
    )
    if budgets:
        _add_budget_options(g)


# -- what they describe ----------------------------------------------------------------------------


def engine_profile(args: argparse.Namespace, engine_argv: list[str] | None) -> EngineProfile:
    """The engine the options and the argv after ``--`` describe. A mistake in them is one
    line on stderr and exit 2 (SystemExit)."""
    _check_engine_cwd(args)
    if engine_argv is not None:
        return _command_profile(args, engine_argv)
    return _pi_profile(args)


def _refuse(message: str) -> NoReturn:
    print(message, file=sys.stderr)
    raise SystemExit(2)


def _check_engine_cwd(args: argparse.Namespace) -> None:
    import os

    cwd = getattr(args, "engine_cwd", None)
    if cwd is not None and not os.path.isdir(cwd):
        what = "is not a folder" if os.path.exists(cwd) else "does not exist"
        _refuse(f"bridge {args.command}: --engine-cwd {cwd} {what}: give the engine's working folder")


def _command_profile(args: argparse.Namespace, engine_argv: list[str]) -> EngineProfile:
    """Any engine speaking Pi's RPC JSONL, given as its argv after ``--``."""
    from bridge.profiles.command import PI_CLEARING, CommandProfile

    if not engine_argv or not engine_argv[0].strip():
        _refuse(
            f"bridge {args.command}: no engine command after -- (give the engine's argv, e.g. -- python "
            "tools/fake_engine.py)"
        )
    confinement = _confinement_options(args) + [f"--extension {p}" for p in args.extension]
    if confinement:
        _refuse(f"bridge {args.command}: {confinement[0]} is for the sealed Pi, not an engine given after --")
    if args.pi_settings:
        _refuse(f"bridge {args.command}: --pi-settings is for the sealed Pi, not an engine given after --")
    return CommandProfile(
        engine_argv,
        clearing=tuple(args.clearing) if args.clearing else PI_CLEARING,
        cwd=getattr(args, "engine_cwd", None),
        env_allowlist=args.env_allow,
    )


def _pi_profile(args: argparse.Namespace) -> EngineProfile:
    """The sealed, pinned Pi (the default engine)."""
    if args.provider and not args.model:
        _refuse(
            f"bridge {args.command}: --provider {args.provider} needs --model too (Pi refuses a provider "
            "without a model id: `bridge models` lists them; custom providers: docs: guide/own-server.md)"
        )
    from bridge.profiles.pi import PiProfile
    from bridge.profiles.sandbox import Sandbox

    if args.allow_other_pi_version:
        _warn_other_version(args)
    idle = [o for o in _confinement_options(args)[1:] if o != "--key-inside"]  # the key is held either way
    if args.no_sandbox and idle:
        _refuse(f"bridge {args.command}: {idle[0]} has no effect with --no-sandbox")
    sandbox = Sandbox(
        enabled=not args.no_sandbox,
        allow_read=tuple(args.allow_read),
        allow_write=tuple(args.allow_write),
        network=not args.no_network,
    )
    return PiProfile(
        settings=_pi_settings(args),
        sandbox=sandbox,
        limits=_limits(args),
        pi_dir=args.pi_dir,
        allow_other_version=args.allow_other_pi_version,
        provider=args.provider,
        model=args.model,
        api_key_env=args.api_key_env,
        models_json=args.models_json,
        session=args.pi_session,
        cwd=getattr(args, "engine_cwd", None),
        env_allowlist=args.env_allow,
        key_inside=args.key_inside,
        extensions=tuple(args.extension),
    )


def _limits(args: argparse.Namespace) -> Any:
    """The ``--engine-*`` limits given, over the defaults (0: lifted)."""
    import attrs

    from bridge.profiles.limits import DEFAULT_LIMITS

    given = {f: getattr(args, a) for f, a in _LIMIT_FIELDS if getattr(args, a, None) is not None}
    return attrs.evolve(DEFAULT_LIMITS, **given)


#: ``Limits`` field -> the ``--engine-*`` option's dest.
_LIMIT_FIELDS: Final = (
    ("memory", "engine_memory"),
    ("processes", "engine_processes"),
    ("tmp", "engine_tmp_size"),
    ("disk", "engine_disk"),
)


def _pi_settings(args: argparse.Namespace) -> dict[str, Any] | None:
    """``--pi-settings PATH``: its JSON object, or one line and exit 2."""
    path = args.pi_settings
    if path is None:
        return None
    try:
        with open(path, encoding="utf-8") as f:
            value = json.load(f)
    except (OSError, ValueError) as e:
        _refuse(f"bridge {args.command}: --pi-settings {path}: {getattr(e, 'strerror', None) or e}")
    if not isinstance(value, dict):
        _refuse(f"bridge {args.command}: --pi-settings {path} must hold a JSON object")
    from bridge.profiles.seal import DEFAULT_SETTINGS

    sealed = sorted(set(value) & set(DEFAULT_SETTINGS))
    if sealed:
        _refuse(f"bridge {args.command}: --pi-settings {path}: {', '.join(sealed)} is set by the seal")
    return value


def _warn_other_version(args: argparse.Namespace) -> None:
    """One line on stderr when ``--allow-other-pi-version`` runs a Pi lacking what the tracker needs."""
    from bridge.profiles.command import ProfileError
    from bridge.profiles.pi import find_install
    from bridge.profiles.pi_versions import lacking

    try:
        install = find_install(args.pi_dir, allow_other_version=True, probe=False)  # runs none of it
    except ProfileError:
        return  # said when the engine is launched, the usual way
    missing = lacking(install.version)
    if missing:
        what = ", ".join(f"{f.name} (first in Pi {f.first})" for f in missing)
        print(
            f"bridge {args.command}: running Pi {install.version} anyway (--allow-other-pi-version); it lacks {what}, "
            "so no prompt can finish: a delivered one is outcome-unknown (disposition), then the engine is restarted",
            file=sys.stderr,
        )


def _confinement_options(args: argparse.Namespace) -> list[str]:
    """The confinement options given, as typed (``--no-sandbox`` first)."""
    given = ["--no-sandbox"] if args.no_sandbox else []
    given += [f"--allow-read {p}" for p in args.allow_read] + [f"--allow-write {p}" for p in args.allow_write]
    given += ["--no-network"] if args.no_network else []
    given += ["--key-inside"] if getattr(args, "key_inside", False) else []
    return given + [
        f"{flag} {getattr(args, dest)}"
        for (flag, *_), (_, dest) in zip(LIMIT_OPTIONS, _LIMIT_FIELDS, strict=True)
        if getattr(args, dest, None) is not None
    ]


def bridge_config(args: argparse.Namespace) -> Any:
    from bridge.core.config import BridgeConfig

    return BridgeConfig(
        queue_max=args.queue_max,
        queue_bytes=max(1, int(args.queue_mb * 1024 * 1024)),
        ack_timeout=args.ack_timeout,
        settle_timeout=args.timeout,
        stall_timeout=args.stall_timeout or None,
        tool_timeout=args.tool_timeout or None,
        dialog_timeout=args.dialog_timeout,
        thinking=args.thinking,
        taint_grace=args.taint_grace,
        seal_check=args.seal_check,
        journal_full=args.journal_full,
        journal_keep_days=args.journal_keep_days,
        journal_keep_mb=args.journal_keep_mb,
        conversation=getattr(args, "conversation", None),
        prompt_budget_usd=getattr(args, "budget_usd", None),
        prompt_budget_tokens=getattr(args, "budget_tokens", None),
        total_budget_usd=getattr(args, "total_budget_usd", None),
        total_budget_tokens=getattr(args, "total_budget_tokens", None),
    )


def journal_option(args: argparse.Namespace) -> Any:
    if args.no_journal:
        return None
    return args.journal if args.journal else True


# -- setting it up ---------------------------------------------------------------------------------


def _setup_problem(exc: BaseException) -> str | None:
    """The message of a ProfileError / JournalError that ended a run (also inside the
    exception group a nursery wraps it in), or None for anything else."""
    from bridge.live.journal import JournalError
    from bridge.profiles.command import ProfileError

    if isinstance(exc, (ProfileError, JournalError)):
        return str(exc)
    if isinstance(exc, BaseExceptionGroup):
        matched, rest = exc.split((ProfileError, JournalError))
        if matched is not None and rest is None:
            first: BaseException = matched
            while isinstance(first, BaseExceptionGroup):
                first = first.exceptions[0]
            return str(first)
    return None


def guard_setup(command: str, fn: Callable[[], T]) -> T | int:
    """Run ``fn``; a journal or engine that cannot be set up (ProfileError,
    JournalError, also inside a nursery's exception group) becomes one line on
    stderr and exit status 2. Anything else propagates."""
    from bridge.live.journal import JournalError
    from bridge.profiles.command import ProfileError

    try:
        return fn()
    except (ProfileError, JournalError, BaseExceptionGroup) as e:
        problem = _setup_problem(e)
        if problem is None:
            raise
        print(f"bridge {command}: {problem}", file=sys.stderr)
        return 2


def run_controller(args: argparse.Namespace, main: Any) -> int:
    """``serve`` and ``acp``: the engine, journal and bridge options, set-up mistakes in one line."""
    return int(
        guard_setup(
            args.command,
            lambda: main(
                engine_profile(args, args.engine),
                journal=journal_option(args),
                config=bridge_config(args),
                drain_timeout=args.drain_timeout,
            ),
        )
    )
