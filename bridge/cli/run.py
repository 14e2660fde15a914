"""``bridge run``: its parser, what it does, and its PROMPTs' checks (the controller is
:mod:`bridge.controller.run`)."""

from __future__ import annotations

import argparse
import os
import sys

from bridge.cli.options import (
    Subcommands,
    add_bridge_options,
    add_conversation_option,
    add_engine_options,
    bridge_config,
    engine_profile,
    guard_setup,
    journal_option,
)


def add_parser(sub: Subcommands) -> None:
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
        "(all of it, UTF-8: the way in for a prompt past the 128 KiB an argument may have); a prompt is at most "
        "32 MiB JSON-escaped (half the engine's line limit: Pi echoes it whole), a bigger one is refused",
    )
    p.add_argument(
        "--json",
        action="store_true",
        help="stdout: the receipts as JSON lines, nothing else (the reply text goes to stderr; a stderr that "
        "cannot be written loses only that text)",
    )
    add_engine_options(p)
    add_bridge_options(p)
    add_conversation_option(p)
    p.set_defaults(func=_cmd_run)


def _cmd_run(args: argparse.Namespace) -> int:
    """``bridge run``: the prompts, a bridge opened to send them, the receipts, the exit status."""
    import trio

    prompts = _run_prompts(args)
    if prompts is None:
        return 2
    from bridge.controller.run import Run

    run = Run(
        prompts,
        engine_profile(args, args.engine),
        journal=journal_option(args),
        config=bridge_config(args),
        json=args.json,
    )
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
    from bridge.core.framing import DEFAULT_MAX_LINE, prompt_room

    room = prompt_room(DEFAULT_MAX_LINE)
    if "-" not in args.prompts:
        return _fitting(list(args.prompts), room)
    # Read no more than a prompt may be (and one byte to tell): a bigger one is refused, never
    # held whole first.
    raw = sys.stdin.buffer.read(room + 1) if sys.stdin is not None else b""
    if len(raw) > room:
        print(f"bridge run: the prompt on stdin is over {room:,} bytes, {_HALF}", file=sys.stderr)
        return None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        print(
            f"bridge run: the prompt on stdin is not UTF-8 text (byte 0x{raw[e.start]:02x} at offset {e.start}): "
            "convert it first (e.g. with iconv)",
            file=sys.stderr,
        )
        return None
    return _fitting([text if prompt == "-" else prompt for prompt in args.prompts], room)


#: Why a prompt past :func:`~bridge.core.framing.prompt_room` is refused.
_HALF = "more than half the engine's line limit: Pi echoes a prompt whole on its own lines, and its echo would be cut"


def _fitting(prompts: list[str], room: int) -> list[str] | None:
    """The prompts, or None (and the line saying so) when one is too big for the engine's lines."""
    from bridge.core.framing import prompt_bytes

    for n, prompt in enumerate(prompts, 1):
        size = len(prompt) if len(prompt) > room else prompt_bytes(prompt)  # (a long one is not counted)
        if size > room:
            print(
                f"bridge run: PROMPT {n} is at least {size:,} bytes on the wire (JSON-escaped), {_HALF}",
                file=sys.stderr,
            )
            return None
    return prompts


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
