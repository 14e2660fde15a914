"""``bridge conversations``: list, show and remove named conversations
(docs: guide/conversations.md; the files: :mod:`bridge.profiles.conversation`)."""

from __future__ import annotations

import argparse
import json
import sys

from bridge.cli.options import Subcommands, conversation_name


def add_parser(sub: Subcommands) -> None:
    p = sub.add_parser(
        "conversations",
        help="list, show or remove the named conversations (--conversation NAME)",
        description="The named conversations kept in the bridge's private state ($PI_BRIDGE_CONVERSATION_DIR, "
        "else $XDG_STATE_HOME/pi-bridge/conversations). Without an action: list them. Exit 0, or 2 for a "
        "conversation that does not exist, is damaged (show) or is open in a bridge (rm).",
    )
    p.add_argument("--json", action="store_true", help="one JSON object per line")
    actions = p.add_subparsers(dest="action", metavar="ACTION")
    actions.add_parser("list", help="each conversation: its name, prompts, last saved (the default)")
    show = actions.add_parser("show", help="one conversation's record and its exchanges")
    show.add_argument("name", type=conversation_name, metavar="NAME")
    rm = actions.add_parser("rm", help="remove a conversation (refused while a bridge has it open)")
    rm.add_argument("name", type=conversation_name, metavar="NAME")
    p.set_defaults(func=_cmd_conversations, action="list")


def _cmd_conversations(args: argparse.Namespace) -> int:
    from bridge.profiles.command import ProfileError

    try:
        if args.action == "show":
            return _show(args.name, args.json)
        if args.action == "rm":
            from bridge.profiles.conversation import remove_conversation

            remove_conversation(args.name)
            print(f"removed conversation {args.name!r}")
            return 0
        return _list(args.json)
    except ProfileError as e:
        print(f"bridge conversations: {e}", file=sys.stderr)
        return 2


def _list(as_json: bool) -> int:
    from bridge.profiles.conversation import default_conversation_dir, list_conversations

    listed = list_conversations()
    if not listed and not as_json:
        print(f"no conversations in {default_conversation_dir()}")
    for item in listed:
        if isinstance(item, str):
            print(json.dumps({"problem": item}) if as_json else f"! {item}")
        elif as_json:
            print(json.dumps(item.to_json()))
        else:
            print(f"{item.name}\t{item.prompts} prompt(s)\tsaved {item.saved or 'never'}")
    return 0


def _show(name: str, as_json: bool) -> int:
    from bridge.core.conversation import ConversationError, history
    from bridge.profiles.command import ProfileError
    from bridge.profiles.conversation import default_conversation_dir, read_conversation

    if not (default_conversation_dir() / name).is_dir():
        raise ProfileError(f"there is no conversation {name!r}")
    record, lines = read_conversation(name)
    try:
        said = history(lines, name)
    except ConversationError as e:
        raise ProfileError(str(e)) from None
    journals = journals_of(name)
    if as_json:
        history_json = [{"role": r, "text": t} for r, t in said]
        print(json.dumps({**record.to_json(), "history": history_json, "journals": journals}))
        return 0
    print(f"{record.name}: {record.prompts} prompt(s), saved {record.saved or 'never'}, cursor {record.cursor}")
    for role, text in said:
        print(f"{role}: {text}")
    for journal in journals:
        print(f"journal: {journal}  (bridge diagnose {journal})")
    return 0


def journals_of(name: str) -> list[str]:
    """The journals in the default folder whose header names conversation ``name``, oldest
    first: the conversation's story across bridges (each one read as far as its header)."""
    from bridge.live.journal import default_journal_dir

    found: list[tuple[float, str]] = []
    try:
        paths = list(default_journal_dir().glob("*.jsonl"))
    except OSError:
        return []
    for path in paths:
        try:
            with path.open("rb") as f:
                header = json.loads(f.readline(1 << 20))
            if isinstance(header, dict) and header.get("conversation") == name:
                found.append((path.stat().st_mtime, str(path)))
        except (OSError, ValueError):
            continue
    return [p for _, p in sorted(found)]
