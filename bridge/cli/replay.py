"""``bridge replay``: its parser and what it does (the replay itself is
:mod:`bridge.readers.replay`)."""

from __future__ import annotations

import argparse
import sys

from bridge.cli.options import Subcommands


def add_parser(sub: Subcommands) -> None:
    p = sub.add_parser(
        "replay",
        help="replay transcripts through the tracker and print signals, settlements and receipts",
        description="Replay transcripts, versions 1 and 2 (journals, lean or full, or fixtures), through the tracker. "
        "Exit 0 when every file was read, whatever it contains; 2 when a file is unreadable or invalid.",
    )
    p.add_argument("--json", action="store_true", help="one JSON object per file, one line each")
    p.add_argument("files", nargs="+", metavar="FILE")
    p.set_defaults(func=_cmd_replay)


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
