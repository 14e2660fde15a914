"""``bridge replay``: its parser and what it does (the replay itself is
:mod:`bridge.readers.replay`)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

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
    from bridge.readers import write_stdout
    from bridge.transcript import TranscriptError, dumps

    read = _checked if args.check else _replayed
    status = 0
    for path in args.files:
        try:
            bad, as_json, as_text = read(path)
        except TranscriptError as e:
            print(f"bridge replay: {e}", file=sys.stderr)
            status = 2
            if args.json and len(args.files) > 1:
                # Still one line per file, in order: which file failed, and why.
                write_stdout(dumps({"file": path, "error": str(e)}) + b"\n")
                sys.stdout.buffer.flush()
            continue
        if bad and status == 0:
            status = 1
        write_stdout((dumps(as_json()) if args.json else as_text().encode("utf-8", "surrogateescape")) + b"\n")
        sys.stdout.buffer.flush()
    return status


#: What reading one file gives: whether it fails the command (exit 1), its JSON line, its text.
Read = tuple[bool, Callable[[], Any], Callable[[], str]]


def _replayed(path: str) -> Read:
    from bridge.readers.replay import format_table, replay

    result = replay(path)
    return False, result.to_json, lambda: format_table(result)


def _checked(path: str) -> Read:
    from bridge.readers.check import check, format_check

    found = check(path)
    return (
        bool(found),
        lambda: {"file": path, "contradictions": [c.to_json() for c in found]},
        lambda: format_check(path, found),
    )
