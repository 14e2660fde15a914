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
        "Exit 0 when every file was read, whatever it contains; 2 when a file is unreadable or invalid. "
        "With --check, exit 1 when a journal contradicts itself.",
    )
    p.add_argument("--json", action="store_true", help="one JSON object per file, one line each")
    p.add_argument(
        "--check",
        action="store_true",
        help="instead of the replay, check that each journal agrees with itself: every recorded receipt is "
        "what its evidence gives, every response answers a command the journal sent, every sent prompt's "
        "receipt is recorded; print each contradiction with its prompt and observation, exit 1 if any",
    )
    p.add_argument("files", nargs="+", metavar="FILE")
    p.set_defaults(func=_cmd_replay)


def _cmd_replay(args: argparse.Namespace) -> int:
    if args.check:
        return _cmd_check(args)
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


def _cmd_check(args: argparse.Namespace) -> int:
    from bridge.readers import write_stdout
    from bridge.readers.check import check, format_check
    from bridge.transcript import TranscriptError, dumps

    status = 0
    for path in args.files:
        try:
            found = check(path)
        except TranscriptError as e:
            print(f"bridge replay: {e}", file=sys.stderr)
            status = 2
            if args.json:
                write_stdout(dumps({"file": path, "error": str(e)}) + b"\n")
            continue
        if found and status == 0:
            status = 1
        if args.json:
            write_stdout(dumps({"file": path, "contradictions": [c.to_json() for c in found]}) + b"\n")
        else:
            write_stdout(format_check(path, found).encode("utf-8", "surrogateescape") + b"\n")
    return status
