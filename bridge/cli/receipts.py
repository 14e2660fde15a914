"""``bridge receipts``: the ledger's prompts and their receipts, read with no bridge running
(docs: guide/ledger.md; the ledger: :mod:`bridge.live.ledger`)."""

from __future__ import annotations

import argparse
import datetime
import json
import sys
from pathlib import Path
from typing import Any

from bridge.cli.options import Subcommands


def add_parser(sub: Subcommands) -> None:
    p = sub.add_parser(
        "receipts",
        help="the ledger's prompts and their receipts (no bridge needs to run)",
        usage="bridge receipts [ID] [--ledger PATH] [--scope NAME] [--json]",
        description="Read the ledger: without ID, every prompt it holds, one a line (its id, where it "
        "stands: a receipt's state and reason, or accepted / written while it has none, when it was "
        "accepted); with ID, that prompt's receipt as one JSON object (what serve's receipt line carries). Reads only: it "
        "settles nothing (a bridge opened on the ledger does). Exit 0; 1 when ID has no receipt (not in "
        "the ledger, or not settled yet: one line on stderr says which); 2 when the ledger is missing or "
        "cannot be read (a newer schema included).",
    )
    p.add_argument("id", nargs="?", metavar="ID", help="the prompt's id, as its controller gave it")
    p.add_argument(
        "--ledger",
        type=Path,
        metavar="PATH",
        help="the ledger's file (default: $PI_BRIDGE_LEDGER_DIR/ledger.sqlite3, else "
        "$XDG_STATE_HOME/pi-bridge/ledger/ledger.sqlite3, else ~/.local/state/pi-bridge/ledger/ledger.sqlite3)",
    )
    p.add_argument(
        "--scope",
        metavar="NAME",
        help="whose ids: the scope the controller's prompts were accepted under (default: every scope "
        "when listing, 'default' for an ID)",
    )
    p.add_argument("--json", action="store_true", help="list as one JSON object per line")
    p.set_defaults(func=_cmd_receipts)


def _cmd_receipts(args: argparse.Namespace) -> int:
    from bridge.core.ledger import DEFAULT_SCOPE
    from bridge.live.ledger import Ledger, LedgerError

    try:
        ledger = Ledger(args.ledger, create=False)
    except LedgerError as e:
        print(f"bridge receipts: {e}", file=sys.stderr)
        return 2
    with ledger:
        if args.id is None:
            return _list(ledger.records(scope=args.scope), args.json)
        scope = args.scope or DEFAULT_SCOPE
        record = ledger.get(args.id, scope=scope)
    if record is None:
        print(
            f"bridge receipts: the ledger {ledger.path} holds no prompt {args.id!r} (scope {scope!r})", file=sys.stderr
        )
        return 1
    if record.receipt is None:
        journal = f"; its journal: {record.journal}" if record.journal else ""
        print(
            f"bridge receipts: {args.id!r} has no receipt yet ({record.state}{journal}): its bridge is running, "
            "or was lost and no bridge has opened the ledger since",
            file=sys.stderr,
        )
        return 1
    print(json.dumps(record.receipt.to_json(), ensure_ascii=False))
    return 0


def _list(records: list[Any], as_json: bool) -> int:
    for r in records:
        reason = r.receipt.reason if r.receipt is not None else None
        if as_json:
            row = {
                "scope": r.scope,
                "request": r.request,
                "state": r.state,
                "reason": reason,
                "accepted": r.accepted,
                "written": r.written,
                "settled": r.settled,
                "journal": r.journal,
            }
            print(json.dumps(row, ensure_ascii=False))
            continue
        when = datetime.datetime.fromtimestamp(r.accepted).isoformat(sep=" ", timespec="seconds")
        state = r.state + (f" ({reason})" if reason else "")
        scope = "" if r.scope == "default" else f"\tscope {r.scope}"
        print(f"{r.request}\t{state}\taccepted {when}{scope}")
    return 0
