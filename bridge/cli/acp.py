"""``bridge acp``: its parser and what it does (the agent is :mod:`bridge.controller.acp.agent`)."""

from __future__ import annotations

import argparse
import functools

from bridge.cli.options import Subcommands, add_bridge_options, add_engine_options, positive, run_controller


def add_parser(sub: Subcommands) -> None:
    p = sub.add_parser(
        "acp",
        help="an Agent Client Protocol agent on stdin/stdout (for editors: Zed, JetBrains, Neovim), with receipts",
        usage="bridge acp [OPTIONS] [-- ENGINE ARGV...]",
        description="Speak the Agent Client Protocol (v1, JSON-RPC 2.0 over stdio) as an agent: each session/new "
        "starts one sealed engine with the session's cwd as its working folder (MCP servers are refused: the seal "
        "runs none), each session/prompt is one prompt through the bridge, its events sent as session/update, "
        "session/cancel stops it, session/close ends the session and its engine. A finished prompt answers "
        "end_turn (max_tokens after a length stop) and one session/cancel stopped answers cancelled, each result "
        "carrying the receipt under _meta; any other receipt is a JSON-RPC error whose data carries it (-31001 failed, "
        "-31002 rejected, -31003 delivery-unknown, -31004 outcome-unknown). An --extension's confirm or select "
        "dialog is a session/request_permission. One journal per session (STEM-SESSION.jsonl beside --journal "
        "PATH, or the default). stdin EOF: every session drains, exit 0; SIGINT/SIGTERM/SIGHUP: 130/143/129; "
        "the client closing its end of stdout: 141. session/load (and session/list) resume a named conversation "
        "(--keep-sessions: every session/new begins one).",
    )
    add_engine_options(p, engine_cwd=False)
    add_bridge_options(p)
    p.add_argument(
        "--drain-timeout",
        type=positive(float),
        default=None,
        metavar="S",
        help="after stdin EOF, seconds outstanding prompts may still run (default: until each settles)",
    )
    p.add_argument(
        "--keep-sessions",
        action="store_true",
        help="every session/new begins a named conversation (acp-HEX) kept in the bridge's private state, so "
        "session/load resumes it later, in this or another bridge acp (default: a session lives with its engine)",
    )
    p.set_defaults(func=_cmd_acp)


def _cmd_acp(args: argparse.Namespace) -> int:
    from bridge.controller.acp.agent import main_acp

    return run_controller(args, functools.partial(main_acp, keep_sessions=args.keep_sessions))
