"""The ``bridge`` command line (SPEC §7)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from bridge import __version__


def _cmd_replay(args: argparse.Namespace) -> int:
    from bridge.replay import format_table, replay
    from bridge.transcript import TranscriptError, dumps

    status = 0
    out = sys.stdout.buffer
    for path in args.files:
        try:
            result = replay(path)
        except TranscriptError as e:
            print(f"bridge replay: {e}", file=sys.stderr)
            status = 2
            continue
        if args.json:
            out.write(dumps(result.to_json()) + b"\n")
        else:
            out.write(format_table(result).encode("utf-8", "surrogateescape") + b"\n")
        out.flush()
    return status


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="bridge",
        description="Supervise an agent engine (the Pi coding agent in RPC mode, pinned and sealed) "
        "and settle exactly one receipt per prompt.",
    )
    parser.add_argument("--version", action="version", version=f"pi-bridge {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = sub.add_parser(
        "replay",
        help="replay transcripts through the tracker and print signals, settlements and receipts",
        description="Replay transcript v1 files (journals or fixtures) through the tracker. "
        "Exit 0 when every file was read, whatever it contains; 2 when a file is unreadable or invalid.",
    )
    p.add_argument("--json", action="store_true", help="one JSON object per file, one line each")
    p.add_argument("files", nargs="+", metavar="FILE")
    p.set_defaults(func=_cmd_replay)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args))
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 1
