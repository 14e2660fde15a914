"""The ``bridge`` command line (SPEC §7).

``bridge serve``, ``bridge run`` and ``bridge demo`` take an engine: by default
the sealed, pinned Pi (``bridge/profiles/pi.py``); any other engine speaking the same
JSONL is given as its argv after ``--``.

Exit status, the same for every subcommand (README "Exit codes"): 0 success;
1 a prompt did not finish (``run``), a check failed (``conform``, ``demo``) or
the journal could not be written (``serve``, ``acp``, ``run``); 2 bad usage, an
unreadable file, or a journal or engine that cannot be set up (one line naming
it and the fix); 128+N after signal N (129 SIGHUP, 130 SIGINT, 143 SIGTERM);
141 when stdout was closed early (``| head``); 70 a bug in pi-bridge (the only
case with a traceback).

Each subcommand has ``_add_NAME`` (its parser, under "the parser" below) and ``_cmd_NAME`` (what
it does); ``diagnose`` and ``demo`` bring their own (``add_parser`` in their packages), and the
two controllers are :mod:`bridge.controller.serve` and :mod:`bridge.controller.run`. trio
and the live bridge are imported inside the commands that use them: ``--help`` and the
readers never load them.
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import signal
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Final, NoReturn, TypeAlias, TypeVar, cast

from bridge import __version__
from bridge.core.steering import THINKING_LEVELS

if TYPE_CHECKING:
    from bridge.profiles.command import EngineProfile

T = TypeVar("T")

#: The exit status for a bug (BSD's EX_SOFTWARE): the only one that prints a traceback.
EXIT_BUG = 70


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


def _split_engine(argv: Sequence[str]) -> tuple[list[str], list[str] | None]:
    argv = list(argv)
    if "--" in argv:
        i = argv.index("--")
        return argv[:i], argv[i + 1 :]
    return argv, None


# -- replay ----------------------------------------------------------------------------


def _cmd_replay(args: argparse.Namespace) -> int:
    from bridge.readers import write_stdout
    from bridge.readers.replay import format_table, replay
    from bridge.transcript import TranscriptError, dumps

    status = 0
    out = sys.stdout.buffer
    for path in args.files:
        try:
            result = replay(path)
        except TranscriptError as e:
            print(f"bridge replay: {e}", file=sys.stderr)
            status = 2
            if args.json and len(args.files) > 1:
                # Still one line per file, in order: which file failed, and why.
                write_stdout(dumps({"file": path, "error": str(e)}) + b"\n")
                out.flush()
            continue
        if args.json:
            write_stdout(dumps(result.to_json()) + b"\n")
        else:
            write_stdout(format_table(result).encode("utf-8", "surrogateescape") + b"\n")
        out.flush()
    return status


def _cmd_conform(args: argparse.Namespace) -> int:
    from bridge.readers.conform import run

    return run(args.folder, args.update, sys.stdout)


# -- engine and bridge options ---------------------------------------------------------------


#: ``--model`` for ``bridge models``, which leaves the start-up check of the model out.
_MODELS_MODEL_HELP: Final = (
    "Pi model id (or provider/id): not refused here when Pi does not offer it (the list is printed and one line "
    "on stderr says so); one Pi itself refuses at start (given alone, matching nothing) is exit 2"
)


def _add_engine_options(p: argparse.ArgumentParser, *, engine_cwd: bool = True, checks_model: bool = True) -> None:
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
        help="environment variable holding the provider's API key (the engine's private config refers to it "
        "by name: the key itself is never written to disk nor put on a command line)",
    )
    g.add_argument(
        "--models-json", metavar="PATH", help="a Pi models.json with custom providers (copied into the private config)"
    )
    from bridge.profiles.pi import PI_DIR_HELP

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
        help="pass only these environment variables to the engine (plus PATH, HOME, LANG, LC_ALL, TZ, TMPDIR); repeatable",
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
        help="cut the engine off the network but for its provider (a --models-json provider on this machine)",
    )


def _positive(kind: type) -> Any:
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


def _add_bridge_options(p: argparse.ArgumentParser, *, journal_by_default: bool = True) -> None:
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
    g.add_argument(
        "--queue-max", type=_positive(int), default=64, metavar="N", help="prompts waiting for the slot (default 64)"
    )
    g.add_argument(
        "--ack-timeout", type=_positive(float), default=30.0, metavar="S", help="seconds from send to ack (default 30)"
    )
    g.add_argument(
        "--timeout",
        type=_positive(float),
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
        "runs): stop it, failed/stalled; 0 turns it off (default 300)",
    )
    g.add_argument(
        "--dialog-timeout",
        type=_positive(float),
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
        type=_positive(float),
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


def _profile(args: argparse.Namespace, engine_argv: list[str] | None) -> EngineProfile:
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
            'without a model id: `bridge models` lists them; custom providers: README "Your own OpenAI-compatible server")'
        )
    from bridge.profiles.pi import PiProfile
    from bridge.profiles.sandbox import Sandbox

    if args.allow_other_pi_version:
        _warn_other_version(args)
    if args.no_sandbox and _confinement_options(args)[1:]:
        _refuse(f"bridge {args.command}: {_confinement_options(args)[1]} has no effect with --no-sandbox")
    sandbox = Sandbox(
        enabled=not args.no_sandbox,
        allow_read=tuple(args.allow_read),
        allow_write=tuple(args.allow_write),
        network=not args.no_network,
    )
    return PiProfile(
        settings=_pi_settings(args),
        sandbox=sandbox,
        pi_dir=args.pi_dir,
        allow_other_version=args.allow_other_pi_version,
        provider=args.provider,
        model=args.model,
        api_key_env=args.api_key_env,
        models_json=args.models_json,
        session=args.pi_session,
        cwd=getattr(args, "engine_cwd", None),
        env_allowlist=args.env_allow,
        extensions=tuple(args.extension),
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
    return given + (["--no-network"] if args.no_network else [])


def _config(args: argparse.Namespace) -> Any:
    from bridge.live.supervisor import BridgeConfig

    return BridgeConfig(
        queue_max=args.queue_max,
        ack_timeout=args.ack_timeout,
        settle_timeout=args.timeout,
        stall_timeout=args.stall_timeout or None,
        dialog_timeout=args.dialog_timeout,
        thinking=args.thinking,
        taint_grace=args.taint_grace,
        seal_check=args.seal_check,
        journal_full=args.journal_full,
    )


def _journal(args: argparse.Namespace) -> Any:
    if args.no_journal:
        return None
    return args.journal if args.journal else True


# -- serve -------------------------------------------------------------------------------------


def _cmd_serve(args: argparse.Namespace) -> int:
    from bridge.controller.serve import main_serve

    return _run_controller(args, main_serve)


def _run_controller(args: argparse.Namespace, main: Any) -> int:
    """``serve`` and ``acp``: the engine, journal and bridge options, set-up mistakes in one line."""
    return int(
        guard_setup(
            args.command,
            lambda: main(
                _profile(args, args.engine),
                journal=_journal(args),
                config=_config(args),
                drain_timeout=args.drain_timeout,
            ),
        )
    )


# -- acp ---------------------------------------------------------------------------------------


def _cmd_acp(args: argparse.Namespace) -> int:
    from bridge.controller.acp.agent import main_acp

    return _run_controller(args, main_acp)


# -- run ---------------------------------------------------------------------------------------


def _cmd_run(args: argparse.Namespace) -> int:
    """``bridge run``: the prompts, a bridge opened to send them, the receipts, the exit status."""
    import trio

    prompts = _run_prompts(args)
    if prompts is None:
        return 2
    from bridge.controller.run import Run

    run = Run(prompts, _profile(args, args.engine), journal=_journal(args), config=_config(args), json=args.json)
    try:
        if guard_setup("run", lambda: trio.run(run.main)) == 2:
            return 2
    except KeyboardInterrupt:
        return 130
    receipts = run.receipts()
    run.print_receipts(receipts)
    run.print_ending()
    return run.exit_status(receipts)


def _run_prompts(args: argparse.Namespace) -> list[str] | None:
    """The PROMPTs, in order; None (and the line saying so) when there are none."""
    if not args.prompts:
        print("bridge run: give at least one PROMPT", file=sys.stderr)
        return None
    for n, prompt in enumerate(args.prompts, 1):
        problem = _undecodable(prompt)
        if problem is not None:
            print(f"bridge run: PROMPT {n} is {problem}: convert it first (e.g. with iconv)", file=sys.stderr)
            return None
    if args.prompts.count("-") > 1:
        print("bridge run: - (a prompt read from stdin) can be given once: stdin is read once", file=sys.stderr)
        return None
    if "-" not in args.prompts:
        return list(args.prompts)
    raw = sys.stdin.buffer.read() if sys.stdin is not None else b""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        print(
            f"bridge run: the prompt on stdin is not UTF-8 text (byte 0x{raw[e.start]:02x} at offset {e.start}): "
            "convert it first (e.g. with iconv)",
            file=sys.stderr,
        )
        return None
    return [text if prompt == "-" else prompt for prompt in args.prompts]


def _undecodable(arg: str) -> str | None:
    """What is wrong with a command-line word holding bytes the locale's encoding cannot
    decode (Python keeps each as a lone surrogate, which no engine can be sent: Pi dropped it,
    and the model got another prompt), or None for text."""
    try:
        arg.encode("utf-8")
    except UnicodeEncodeError:
        pass
    else:
        return None
    encoding = sys.getfilesystemencoding()
    raw = os.fsencode(arg)
    try:
        raw.decode(encoding)
    except UnicodeDecodeError as e:
        name = "UTF-8" if encoding.lower().replace("-", "") == "utf8" else encoding
        return f"not {name} text (byte 0x{raw[e.start]:02x} at offset {e.start})"
    return "not text (it holds a lone surrogate)"


# -- models ------------------------------------------------------------------------------------


def _cmd_models(args: argparse.Namespace) -> int:
    """``bridge models``: start the engine, ask it what it offers, print it. A ``--model`` that
    the start-up check of ``run`` and ``serve`` would refuse is not checked here (listing the
    ids is how a user finds the right one): one line on stderr says it is not among them."""
    import trio

    from bridge.profiles.pi import PiProfile

    profile = _profile(args, args.engine)
    if isinstance(profile, PiProfile):
        profile.check_model = False

    async def ask() -> list[dict[str, Any]] | str:
        """The models, or why the engine could not say. Ends when the engine answers or cannot
        (bounded by ``--ack-timeout``), and the bridge has closed."""
        from bridge.live.api import open_bridge
        from bridge.live.supervisor import EngineQuestionError
        from bridge.profiles.command import ProfileError

        # A journal only when one is asked for: a question leaves nothing worth keeping.
        async with open_bridge(profile, journal=args.journal or None, config=_config(args)) as bridge:
            try:
                return await bridge.models()
            except EngineQuestionError as e:
                if bridge.lifecycle.state.setup_failed:  # a mistake to fix, as in run: exit 2
                    raise ProfileError(f"the engine cannot be set up: {bridge.down_reason or e}") from e
                return str(e)

    models = guard_setup("models", lambda: trio.run(ask))
    if isinstance(models, int):
        return models
    if isinstance(models, str):
        print(f"bridge models: {models}", file=sys.stderr)
        return 1
    if not models:
        # Not an error of ours (exit 0), but an empty table says nothing: Pi offers a provider's
        # models once it has a key for it. The one line (a --model is then none of them).
        print(
            "bridge models: the engine offers no model: Pi lists a provider's models once it has its key "
            "(--api-key-env NAME, or a --models-json provider)",
            file=sys.stderr,
        )
        return 0
    if args.json:
        for m in models:
            print(json.dumps(m))
    elif models:
        print(f"{'provider':16} {'id':32} {'reasoning':9} {'context':>9}  name")
        for m in models:
            reasoning = "yes" if m.get("reasoning") else "no"
            print(
                f"{m['provider']!s:16} {m['id']!s:32} {reasoning:9} {m.get('contextWindow') or ''!s:>9}  "
                f"{m.get('name') or ''}"
            )
    _say_model_not_offered(args, profile, models)
    return 0


def _say_model_not_offered(args: argparse.Namespace, profile: EngineProfile, models: list[dict[str, Any]]) -> None:
    """One line on stderr when the sealed Pi's ``--model`` is none of ``models`` (seal rule 9)."""
    from bridge.profiles.pi import PiProfile
    from bridge.profiles.seal import model_matches

    if not isinstance(profile, PiProfile) or not args.model:
        return
    if any(model_matches(args.provider, args.model, m.get("provider"), m.get("id")) for m in models):
        return
    asked = f"--provider {args.provider} --model {args.model}" if args.provider else f"--model {args.model}"
    print(
        f"bridge models: {asked} is not one of these exact ids: bridge run and serve would refuse it at start",
        file=sys.stderr,
    )


# -- the parser ----------------------------------------------------------------------------------

_Subcommands: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"


class _Parser(argparse.ArgumentParser):
    """A parser whose usage error is one line on stderr, naming the command, the mistake and
    where the fix is (README "Exit codes"), then exit 2: argparse's own is the usage line and
    then the error. The subcommands' parsers are of this class too (``add_subparsers`` makes
    them so)."""

    def error(self, message: str) -> NoReturn:
        message = message.removeprefix("argument ")
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    """``bridge`` and its subcommands, in the order ``--help`` lists them."""
    parser = _Parser(
        prog="bridge",
        description="Supervise an agent engine (the Pi coding agent in RPC mode, pinned and sealed) "
        "and settle exactly one receipt per prompt.",
    )
    parser.add_argument("--version", action="version", version=f"pi-bridge {__version__}")
    # (of _Parser, as their parent: typed as plain parsers, which they are)
    sub = cast(_Subcommands, parser.add_subparsers(dest="command", metavar="COMMAND"))
    _add_replay(sub)
    _add_conform(sub)
    _add_serve(sub)
    _add_acp(sub)
    _add_run(sub)
    _add_models(sub)

    from bridge import demo
    from bridge.readers import diagnose

    diagnose.add_parser(sub)
    demo.add_parser(sub)
    parser.subcommands = dict(sub.choices)  # type: ignore[attr-defined]
    return parser


def _add_replay(sub: _Subcommands) -> None:
    p = sub.add_parser(
        "replay",
        help="replay transcripts through the tracker and print signals, settlements and receipts",
        description="Replay transcripts, versions 1 and 2 (journals, lean or full, or fixtures), through the tracker. "
        "Exit 0 when every file was read, whatever it contains; 2 when a file is unreadable or invalid.",
    )
    p.add_argument("--json", action="store_true", help="one JSON object per file, one line each")
    p.add_argument("files", nargs="+", metavar="FILE")
    p.set_defaults(func=_cmd_replay)


def _add_conform(sub: _Subcommands) -> None:
    p = sub.add_parser(
        "conform",
        help="replay every fixture in a folder against its expected output; a pass/FAIL table",
        description="Replay every NAME.jsonl under FOLDER and compare with NAME.expected.json. Prints pass / FAIL "
        "with the first difference. Exit 0 when all pass, 1 on a failure, 2 when nothing could be checked.",
    )
    p.add_argument("folder", metavar="FOLDER")
    p.add_argument(
        "--update",
        action="store_true",
        help="rewrite expected outputs that differ or are missing (each difference is shown first)",
    )
    p.set_defaults(func=_cmd_conform)


def _add_serve(sub: _Subcommands) -> None:
    p = sub.add_parser(
        "serve",
        help="the controller protocol: JSONL prompts/stops on stdin, receipts and signals on stdout",
        usage="bridge serve [OPTIONS] [-- ENGINE ARGV...]",
        description="Read controller commands (prompt, stop, status, shutdown, configure, new_conversation, "
        "compact, models, answer) as JSON lines on stdin; write "
        "receipts, signals, streamed text, events, extension dialogs (ask) and engine lifecycle as JSON lines "
        "on stdout (see the README). "
        "stdin EOF or shutdown: every outstanding prompt gets its receipt, the engine is stopped, exit 0 (2 when "
        "the engine cannot be set up: not launched, or its start-up check refused it; 1 when it went down for the "
        "crash limit); "
        "stdout closed by the reader: closing at once, exit 141.",
    )
    _add_engine_options(p)
    _add_bridge_options(p)
    p.add_argument(
        "--drain-timeout",
        type=_positive(float),
        default=None,
        metavar="S",
        help="after EOF/shutdown, seconds outstanding prompts may still run (default: until each settles)",
    )
    p.set_defaults(func=_cmd_serve)


def _add_acp(sub: _Subcommands) -> None:
    p = sub.add_parser(
        "acp",
        help="an Agent Client Protocol agent on stdin/stdout (for editors: Zed, JetBrains, Neovim), with receipts",
        usage="bridge acp [OPTIONS] [-- ENGINE ARGV...]",
        description="Speak the Agent Client Protocol (v1, JSON-RPC 2.0 over stdio) as an agent: each session/new "
        "starts one sealed engine with the session's cwd as its working folder (MCP servers are refused: the seal "
        "runs none), each session/prompt is one prompt through the bridge, its events sent as session/update, "
        "session/cancel stops it, session/close ends the session and its engine. A finished prompt answers "
        "end_turn (max_tokens after a length stop) and one session/cancel stopped answers cancelled, each result "
        "carrying the receipt under _meta; any other receipt is a JSON-RPC error whose data carries it (-31001 failed, "
        "-31002 rejected, -31003 delivery-unknown, -31004 outcome-unknown). An --extension's confirm or select "
        "dialog is a session/request_permission. One journal per session (STEM-SESSION.jsonl beside --journal "
        "PATH, or the default). stdin EOF: every session drains, exit 0; SIGINT/SIGTERM/SIGHUP: 130/143/129; "
        "the client closing its end of stdout: 141.",
    )
    _add_engine_options(p, engine_cwd=False)
    _add_bridge_options(p)
    p.add_argument(
        "--drain-timeout",
        type=_positive(float),
        default=None,
        metavar="S",
        help="after stdin EOF, seconds outstanding prompts may still run (default: until each settles)",
    )
    p.set_defaults(func=_cmd_acp)


def _add_run(sub: _Subcommands) -> None:
    p = sub.add_parser(
        "run",
        help="send prompts from the command line, stream the replies, print the receipts",
        usage="bridge run [OPTIONS] PROMPT... [-- ENGINE ARGV...]",
        description="Send each PROMPT in turn (the next when the previous has its receipt), stream the reply "
        "text to stdout, then print the receipts to stderr. With --json, stdout has only the receipts as JSON "
        "lines and the reply text goes to stderr. Exit 0 when every prompt finished, 1 otherwise, 2 for bad "
        "usage or a journal or engine that cannot be set up (also: its start-up check refused it, e.g. a --model "
        "Pi does not offer); 129/130/143 after SIGHUP/SIGINT/SIGTERM (the "
        "running prompt is stopped, failed/closing); 141 when stdout is closed early (e.g. | head).",
    )
    p.add_argument(
        "prompts",
        nargs="*",
        metavar="PROMPT",
        help="a prompt: text in the locale's encoding (UTF-8), other bytes are refused; - reads one from stdin "
        "(all of it, UTF-8: the way in for a prompt past the 128 KiB an argument may have)",
    )
    p.add_argument(
        "--json",
        action="store_true",
        help="stdout: the receipts as JSON lines, nothing else (the reply text goes to stderr; a stderr that "
        "cannot be written loses only that text)",
    )
    _add_engine_options(p)
    _add_bridge_options(p)
    p.set_defaults(func=_cmd_run)


def _add_models(sub: _Subcommands) -> None:
    p = sub.add_parser(
        "models",
        help="list the models the engine offers (provider, id, reasoning, context window)",
        usage="bridge models [OPTIONS] [-- ENGINE ARGV...]",
        description="Start the engine (sealed, as for run and serve), ask it for its models "
        "(get_available_models) and print them. Unlike run and serve, a --model Pi does not offer is not "
        "refused at start: the list is printed, and one line on stderr says the model is not in it. "
        "Exit 0; 1 when the engine cannot answer; 2 for bad usage or an engine that cannot be launched.",
    )
    p.add_argument("--json", action="store_true", help="one JSON object per model")
    _add_engine_options(p, checks_model=False)
    _add_bridge_options(p, journal_by_default=False)
    p.set_defaults(func=_cmd_models)


#: Errors of a write that has nowhere to go (stdout on a full disk, a broken device): one line, exit 1.
_WRITE_ERRORS: Final = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EFBIG})


def _stderr_to_devnull() -> None:
    """Started with its stderr closed (``2>&-``), Python gives no ``sys.stderr``, and
    ``print(file=sys.stderr)`` then writes to *stdout* (serve's JSON lines, run's receipts).
    Make it ``2>/dev/null`` instead: descriptor 2 open on /dev/null (so no file the bridge
    opens later lands on it) and ``sys.stderr`` writing there."""
    fd = os.open(os.devnull, os.O_WRONLY)
    if fd != 2:
        os.dup2(fd, 2)
        os.close(fd)
    sys.stderr = open(2, "w", closefd=False)  # noqa: SIM115 (process-wide, never closed)


def main(argv: Sequence[str] | None = None) -> int:
    """The ``bridge`` command. Ctrl-C before a command has taken the signals over (while the
    parser is built: the subcommands' modules are imported then) is exit 130 with nothing
    said, as after it (README "Exit codes"), not Python's traceback."""
    try:
        return _main(argv)
    except KeyboardInterrupt:
        return 130


def _main(argv: Sequence[str] | None) -> int:
    if sys.stderr is None:
        _stderr_to_devnull()
    args_list, engine = _split_engine(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    if sys.stdout is None:  # started with its stdout closed (`>&-`): Python gives no stdout
        words = [a for a in args_list if not a.startswith("-")]
        name = f"bridge {words[0]}" if words and words[0] in parser.subcommands else "bridge"  # type: ignore[attr-defined]
        print(f"{name}: stdout is closed; give it somewhere to write (e.g. > /dev/null)", file=sys.stderr)
        return 2
    args, unknown = parser.parse_known_args(args_list)
    if unknown:
        # The subcommand's own usage, not the top-level one.
        sub_parser = parser.subcommands.get(getattr(args, "command", None) or "", parser)  # type: ignore[attr-defined]
        sub_parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    args.engine = engine
    if not getattr(args, "func", None):
        parser.error(f"no command given; one of: {', '.join(parser.subcommands)}")  # type: ignore[attr-defined]
    if engine is not None and args.command not in ("serve", "acp", "run", "demo", "models"):
        parser.subcommands[args.command].error("it takes no engine after --")  # type: ignore[attr-defined]
    try:
        status = int(args.func(args))
        sys.stdout.flush()  # here, not at the exit: a full disk is then this command's error
        return status
    except SystemExit:
        raise
    except BaseException as e:
        return _ended_by(args.command, e)


def _leaves(exc: BaseException) -> list[BaseException]:
    """The exceptions an exception group holds (a nursery wraps what its tasks raise), or
    the exception itself."""
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in _leaves(inner)]
    return [exc]


def _ended_by(command: str, exc: BaseException) -> int:
    """The exit status of a command that raised ``exc`` (also when a nursery wrapped it): a
    reader that went away, a write with nowhere to go, Ctrl-C -- or a bug."""
    leaves = _leaves(exc)
    if all(isinstance(e, KeyboardInterrupt) for e in leaves):
        return 130
    if all(isinstance(e, BrokenPipeError) for e in leaves):
        from bridge.controller.output import silence_stdout

        silence_stdout()  # `| head`: the reader is gone; end quietly
        return 128 + signal.SIGPIPE
    if all(isinstance(e, OSError) and e.errno in _WRITE_ERRORS for e in leaves):
        from bridge.controller.output import silence_stdout

        silence_stdout()
        strerror = leaves[0].strerror if isinstance(leaves[0], OSError) else None
        print(f"bridge {command}: cannot write its output ({strerror})", file=sys.stderr)
        return 1
    # A bug, not a user mistake: say so, with what to report.
    import traceback

    traceback.print_exception(exc)
    print(
        f"bridge {command}: this is a bug in pi-bridge {__version__}, not something you did: "
        "please report it with the traceback above",
        file=sys.stderr,
    )
    return EXIT_BUG
