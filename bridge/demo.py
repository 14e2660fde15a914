"""``bridge demo``: the showcase through the real, sealed, pinned Pi (to be written)."""

from __future__ import annotations

import argparse


def add_parser(sub: argparse._SubParsersAction, engine_options, bridge_options) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("demo", help="run the showcase through the sealed, pinned Pi and the scripted model server")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    print("bridge demo: not written yet")
    return 1
