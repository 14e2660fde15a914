"""The ``bridge`` command: :func:`main`, the top-level parser (every subcommand's, in the
order ``--help`` lists them) and how a command's ending becomes its exit status.

Exit status, the same for every subcommand (docs: guide/exit-codes.md): 0 success;
1 a prompt did not finish (``run``), a check failed (``conform``, ``demo``) or
the journal could not be written (``serve``, ``acp``, ``run``); 2 bad usage, an
unreadable file, or a journal or engine that cannot be set up (one line naming
it and the fix); 128+N after signal N (129 SIGHUP, 130 SIGINT, 143 SIGTERM);
141 when stdout was closed early (``| head``); 70 a bug in pi-bridge (the only
case with a traceback).
"""

from __future__ import annotations

import argparse
import errno
import os
import signal
import sys
from collections.abc import Sequence
from typing import Final, NoReturn, cast

from bridge import __version__
from bridge.cli import acp, conform, conversations, diagnose, models, receipts, replay, run, serve
from bridge.cli.options import Subcommands

#: The exit status for a bug (BSD's EX_SOFTWARE): the only one that prints a traceback.
EXIT_BUG = 70


def _split_engine(argv: Sequence[str]) -> tuple[list[str], list[str] | None]:
    argv = list(argv)
    if "--" in argv:
        i = argv.index("--")
        return argv[:i], argv[i + 1 :]
    return argv, None


class _Parser(argparse.ArgumentParser):
    """A parser whose usage error is one line on stderr, naming the command, the mistake and
    where the fix is (docs: guide/exit-codes.md), then exit 2: argparse's own is the usage line and
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
    sub = cast(Subcommands, parser.add_subparsers(dest="command", metavar="COMMAND"))
    replay.add_parser(sub)
    conform.add_parser(sub)
    serve.add_parser(sub)
    acp.add_parser(sub)
    run.add_parser(sub)
    models.add_parser(sub)
    diagnose.add_parser(sub)
    conversations.add_parser(sub)
    receipts.add_parser(sub)

    from bridge import demo

    demo.add_parser(sub)
    parser.subcommands = dict(sub.choices)  # type: ignore[attr-defined]
    return parser


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
    said, as after it (docs: guide/exit-codes.md), not Python's traceback."""
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
