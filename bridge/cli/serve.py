"""``bridge serve``: its parser and what it does (the controller is
:mod:`bridge.controller.serve`)."""

from __future__ import annotations

import argparse

from bridge.cli.options import (
    Subcommands,
    add_bridge_options,
    add_engine_options,
    bridge_config,
    engine_profile,
    guard_setup,
    journal_option,
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
    p.add_argument(
        "--drain-timeout",
        type=positive(float),
        default=None,
        metavar="S",
        help="after EOF/shutdown, seconds outstanding prompts may still run (default: until each settles)",
    )
    g = p.add_argument_group("pool (docs: guide/pool.md)")
    g.add_argument(
        "--engines",
        type=positive(int),
        default=None,
        metavar="N",
        help='run a pool of up to N engines, one prompt each at a time; a prompt\'s "conversation" key keeps '
        "its engine; --journal then names the folder of the engines' journals (default: one bridge, one engine)",
    )
    g.add_argument(
        "--spares",
        type=int,
        default=None,
        metavar="N",
        help="with --engines: engines kept started and free for the next prompt (default: all N, at start)",
    )
    g.add_argument(
        "--idle-timeout",
        type=positive(float),
        default=None,
        metavar="S",
        help="with --engines: stop an idle engine beyond the spares after S seconds (default: never)",
    )
    p.set_defaults(func=_cmd_serve)


def _cmd_serve(args: argparse.Namespace) -> int:
    if args.engines is None:
        if args.spares is not None or args.idle_timeout is not None:
            raise SystemExit("bridge serve: --spares and --idle-timeout go with --engines N")
        from bridge.controller.serve import main_serve

        return run_controller(args, main_serve)
    if args.spares is not None and not 0 <= args.spares <= args.engines:
        raise SystemExit(f"bridge serve: --spares must be from 0 to --engines ({args.engines}), not {args.spares}")
    from bridge.controller.serve_pool import main_serve_pool

    return int(
        guard_setup(
            args.command,
            lambda: main_serve_pool(
                engine_profile(args, args.engine),
                engines=args.engines,
                spares=args.spares,
                idle_timeout=args.idle_timeout,
                journal=journal_option(args),
                config=bridge_config(args),
                drain_timeout=args.drain_timeout,
            ),
        )
    )
