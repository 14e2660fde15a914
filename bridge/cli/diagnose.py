"""``bridge diagnose``: its parser and what it does (the command itself is
:mod:`bridge.readers.diagnose.command`)."""

from __future__ import annotations

import argparse

from bridge.cli.options import Subcommands


def add_parser(sub: Subcommands) -> None:
    p = sub.add_parser(
        "diagnose",
        help="explain every signal, gap and unknown receipt in a journal, in words",
        description="Read a transcript or journal (lean or full) and explain each signal (O1-O6, "
        "aborted-without-stop, gaps, non-started dispositions, seal diagnostics, failed seal checks, "
        "engine exits and engine-down), each pending / delivery-unknown / outcome-unknown receipt, each "
        "run the bridge stopped itself (failed: timeout, closing, stalled or budget), each rejected/config receipt, each "
        "extension dialog, a journal that could not be written "
        "or ends before the bridge closed, and each place the journal contradicts itself (replay --check's "
        "rules): what happened, the observations around it, the slot's state, the "
        "likely causes and what to check. The summary comes first, then one block per prompt (its receipt and "
        "its findings; advice already given is referred to, not repeated). Exit 0 when the file was read, 2 when "
        "it is not a readable transcript or --request names a prompt it does not have.",
    )
    p.add_argument("file", metavar="FILE")
    p.add_argument("--json", action="store_true", help='print one JSON object {"findings": [...], "summary": {...}}')
    p.add_argument(
        "--html", metavar="OUT", help="also write a self-contained HTML page with a timeline to OUT (the whole journal)"
    )
    p.add_argument(
        "--request",
        metavar="ID",
        help="only prompt ID's block (and the summary); with --json, only the findings about ID",
    )
    p.add_argument(
        "--brief",
        action="store_true",
        help="the summary and one line per finding (number, title, observation); with --json, each finding "
        "keeps only n, kind, signal, title, idx, t, line, request and run",
    )
    p.set_defaults(func=_cmd_diagnose)


def _cmd_diagnose(args: argparse.Namespace) -> int:
    from bridge.readers.diagnose.command import run

    return run(args)
