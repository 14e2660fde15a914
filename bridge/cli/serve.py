"""``bridge serve``: its parser and what it does (the controller is
:mod:`bridge.controller.serve`)."""

from __future__ import annotations

import argparse

from bridge.cli.options import (
    Subcommands,
    add_bridge_options,
    add_conversation_option,
    add_engine_options,
    positive,
    run_controller,
)


def add_parser(sub: Subcommands) -> None:
    p = sub.add_parser(
        "serve",
        help="the controller protocol: JSONL prompts/stops on stdin, receipts and signals on stdout",
        usage="bridge serve [OPTIONS] [-- ENGINE ARGV...]",
        description="Read controller commands (prompt, stop, status, shutdown, configure, new_conversation, "
        "compact, models, answer) as JSON lines on stdin; write "
        "receipts, signals, streamed text, events, extension dialogs (ask) and engine lifecycle as JSON lines "
        "on stdout (the docs: guide/serve.md, reference/serve-protocol.md). "
        "stdin EOF or shutdown: every outstanding prompt gets its receipt, the engine is stopped, exit 0 (2 when "
        "the engine cannot be set up: not launched, or its start-up check refused it; 1 when it went down for the "
        "crash limit); "
        "stdout closed by the reader: closing at once, exit 141.",
    )
    add_engine_options(p)
    add_bridge_options(p)
    add_conversation_option(p)
    p.add_argument(
        "--drain-timeout",
        type=positive(float),
        default=None,
        metavar="S",
        help="after EOF/shutdown, seconds outstanding prompts may still run (default: until each settles)",
    )
    p.set_defaults(func=_cmd_serve)


def _cmd_serve(args: argparse.Namespace) -> int:
    from bridge.controller.serve import main_serve

    return run_controller(args, main_serve)
