"""``bridge conform``: its parser and what it does (the check itself is
:mod:`bridge.readers.conform`)."""

from __future__ import annotations

import argparse
import sys

from bridge.cli.options import Subcommands


def add_parser(sub: Subcommands) -> None:
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


def _cmd_conform(args: argparse.Namespace) -> int:
    from bridge.readers.conform import run

    return run(args.folder, args.update, sys.stdout)
