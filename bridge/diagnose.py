"""``bridge diagnose FILE``: explain each signal in a journal (to be written)."""

from __future__ import annotations

import argparse


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("diagnose", help="explain every signal, gap and unknown receipt in a journal, in words")
    p.add_argument("file", metavar="FILE")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    print("bridge diagnose: not written yet")
    return 1
