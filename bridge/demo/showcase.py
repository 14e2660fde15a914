"""``bridge demo``: the showcase through the real, sealed, pinned Pi.

It starts the scripted OpenAI-compatible model server
(:mod:`bridge.demo.model_server`, shipped in the package) in-process on 127.0.0.1, writes its ``models.json`` into a private temp folder,
opens the live bridge on :func:`bridge.profiles.pi.scripted_profile` (the real Pi 1.6.0,
sealed; its working folder is the profile's private temp folder) and sends four
prompts, one after the other, on one engine:

1. a plain reply;
2. a tool-using run: the model calls Pi's built-in ``bash`` with ``echo …``,
   Pi runs it, the model answers with text;
3. a slow stream, stopped by the controller after its first text arrives;
4. a run whose first attempt gets HTTP 500: Pi retries by itself (the fast
   auto-retry settings of ``scripted_profile``) and the second attempt answers.

Each reply streams to the terminal as it arrives; each receipt is printed with
what the showcase expected of it. The exit status is 0 only if every receipt is
what the showcase expects (finished / finished / failed+interrupted with the
stop's id / finished with exactly two ``agent_start … agent_end`` pairs in its
run, counted in the journal) and the journal replays to the same receipts;
otherwise 1, with what differed. 2: the pinned Pi is not found (one line
naming the fix: ``tools/setup/setup`` in a checkout, ``--pi-dir`` / ``PI_BRIDGE_PI_DIR``
for an installed pi-bridge) or bad usage.

The engine options of ``bridge run`` do not apply (the demo's engine is fixed:
the sealed Pi against the scripted server), so only ``--journal``, ``--json``
and ``--pi-dir`` are offered.
"""

from __future__ import annotations

import argparse
import shutil
import signal
import sys
import tempfile
from pathlib import Path
from types import ModuleType
from typing import IO, TYPE_CHECKING, Any

if TYPE_CHECKING:
    pass

PLAIN = "Hello! I am a scripted model, talking to you through the sealed Pi and pi-bridge."
ECHO = "hello from bash inside the sealed Pi"
TOOL_REPLY = f"The bash tool printed: {ECHO}"
RETRY_REPLY = "Recovered: the first attempt got HTTP 500, Pi retried by itself, and this is the second attempt."

#: The model server's script: one step per HTTP request, in order.
SCRIPT: list[dict[str, Any]] = [
    {"text": PLAIN, "chunk": 6, "delay": 0.015},
    {"tool_call": {"name": "bash", "arguments": {"command": f"echo '{ECHO}'"}}},
    {"text": TOOL_REPLY, "chunk": 6, "delay": 0.01},
    {"words": 400, "chunk": 6, "delay": 0.03},  # ~12 s if nobody stopped it
    {"status": 500},
    {"text": RETRY_REPLY, "chunk": 6, "delay": 0.01},
]

#: Per-prompt bound: a hang fails the demo instead of blocking it.
PROMPT_TIMEOUT = 30.0


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    from bridge.cli.options import PI_DIR_HELP, journal_path

    # The demo's engine and settings are fixed by the showcase: no engine or bridge options.
    p = sub.add_parser(
        "demo",
        help="run the showcase through the sealed, pinned Pi and the scripted model server",
        description="Start the scripted model server on 127.0.0.1, open the live bridge on the real, sealed, "
        "pinned Pi and send four prompts: a plain reply, a tool-using run, a run stopped mid-stream and a "
        "run retried after an HTTP 500. Replies stream to the terminal; each receipt is printed with what "
        "was expected. Exit 0 only if every receipt is as expected (1 otherwise, 2 if the pinned Pi is not "
        "found: run tools/setup/setup in a checkout; an installed pi-bridge is given --pi-dir or $PI_BRIDGE_PI_DIR).",
    )
    p.add_argument(
        "--journal",
        type=journal_path,
        metavar="PATH",
        help="write the journal here (default: the bridge's default location: $PI_BRIDGE_JOURNAL_DIR, else "
        "$XDG_STATE_HOME/pi-bridge/journals, else ~/.local/state/pi-bridge/journals)",
    )
    p.add_argument(
        "--json",
        action="store_true",
        help="print the receipts as JSON lines on stdout (everything else goes to stderr)",
    )
    p.add_argument("--pi-dir", metavar="DIR", help=PI_DIR_HELP)
    p.add_argument(
        "--no-sandbox",
        action="store_true",
        help="run the sealed Pi unconfined (by default it runs in a bubblewrap sandbox: docs: guide/confinement.md)",
    )
    p.set_defaults(func=run)


class _Out:
    """Human text (stdout, or stderr with --json) and receipts (stdout with --json)."""

    def __init__(self, json_mode: bool) -> None:
        self.json_mode = json_mode
        self.human: IO[str] = sys.stderr if json_mode else sys.stdout

    def say(self, text: str = "") -> None:
        self.human.write(text + "\n")
        self.human.flush()

    def piece(self, text: str) -> None:
        self.human.write(text)
        self.human.flush()

    def receipt(self, receipt: Any) -> None:
        if self.json_mode:
            from bridge.transcript import dumps

            sys.stdout.buffer.write(dumps(receipt.to_json()) + b"\n")
            sys.stdout.flush()


def _run_events(journal: Path, receipt: Any) -> list[dict[str, Any]]:
    """The engine lines of the receipt's run (its ack to its settle), from the journal.

    The journal is flushed and fsynced at every receipt, so it holds them.
    """
    from bridge.transcript import open_transcript

    if receipt.ack_idx is None or receipt.settle_idx is None:
        return []
    stream, reader = open_transcript(str(journal))
    out = []
    with stream:
        for e in reader:
            if e.kind == "recv" and e.i is not None and receipt.ack_idx <= e.i <= receipt.settle_idx:
                out.append(e.value)
    return out


def _count(events: list[dict[str, Any]], kind: str) -> int:
    return sum(1 for e in events if e.get("type") == kind)


def run(args: argparse.Namespace) -> int:
    if getattr(args, "engine", None) is not None:
        print(
            "bridge demo: the demo runs the sealed, pinned Pi against its scripted model server; "
            "it takes no engine after --",
            file=sys.stderr,
        )
        return 2
    import trio

    from bridge.cli.options import guard_setup
    from bridge.demo import model_server

    out = _Out(args.json)
    problems: list[str] = []
    interrupted: list[int] = []
    # A Pi that cannot be found or run is one line naming the fix (ProfileError), exit 2.
    if guard_setup("demo", lambda: trio.run(_showcase, args, model_server, out, problems, interrupted)) == 2:
        return 2
    if interrupted:
        name = signal.Signals(interrupted[0]).name
        out.say(f"\nbridge demo: stopped by {name}: the running prompt was stopped, the rest not sent")
        return 128 + interrupted[0]
    if problems:
        out.say("\nthe showcase did NOT go as expected:")
        for p in problems:
            out.say(f"  - {p}")
        return 1
    out.say("\nevery receipt is what the showcase expects: exit 0")
    return 0


def _sandbox(args: argparse.Namespace) -> Any:
    from bridge.profiles.sandbox import Sandbox

    return Sandbox(enabled=not args.no_sandbox)


def _confined(args: argparse.Namespace) -> str:
    return "unconfined (--no-sandbox)" if args.no_sandbox else "confined"


async def _showcase(
    args: argparse.Namespace, ms: ModuleType, out: _Out, problems: list[str], interrupted: list[int]
) -> None:
    """The four steps through one bridge on the real Pi, closed by a signal as ``bridge run``
    is (``interrupted`` gets the first one's number). Ends when the bridge has closed (every
    receipt settled, Pi reaped) and its folders are removed."""
    import trio

    from bridge.live.signals import SignalCloser, closing_signals

    closer = SignalCloser()
    with closing_signals() as signals:
        async with trio.open_nursery() as watch:
            watch.start_soon(closer.watch, signals)
            await _steps(args, ms, out, problems, closer)
            watch.cancel_scope.cancel()
    if closer.first is not None:
        interrupted.append(closer.first)


async def _steps(args: argparse.Namespace, ms: ModuleType, out: _Out, problems: list[str], closer: Any) -> None:
    """The bridge (``closer``'s while it is open) and its four steps, one after another. Ends
    when the bridge has closed (every receipt settled, Pi reaped): after the last step, or
    soon after a signal closed it."""
    import trio

    from bridge.live.api import open_bridge
    from bridge.live.supervisor import BridgeConfig
    from bridge.profiles.pi import find_install, scripted_profile
    from bridge.readers.replay import replay

    install = find_install(args.pi_dir)  # ProfileError with the fix when missing
    asked: Path | bool = Path(args.journal) if args.journal else True  # True: a new name in the default folder
    server = ms.start_server(SCRIPT)
    tmp = tempfile.mkdtemp(prefix="pi-bridge-demo-")
    receipts: list[Any] = []
    try:
        models = server.write_models(tmp)
        profile = scripted_profile(models, pi_dir=args.pi_dir, sandbox=_sandbox(args))
        out.say(
            f"bridge demo: Pi {install.version} (node {install.node_version}), sealed, {_confined(args)}, "
            f"against a scripted model server at {server.base_url}"
        )
        async with open_bridge(profile, journal=asked, config=BridgeConfig(ack_timeout=20.0)) as bridge:
            assert bridge.journal is not None
            journal = bridge.journal.path
            closer.opened(bridge)
            out.say(f"journal: {journal}")
            notes = bridge.signals()

            async def show_signals() -> None:
                """Print the signals as they come. Ends when the bridge closes its notifications."""
                async for note in notes:
                    if note.get("type") == "signal":
                        detail = ", ".join(f"{k}={v}" for k, v in note.items() if k not in ("type", "signal"))
                        out.say(f"\n  ! signal {note['signal']}: {detail}")

            async with trio.open_nursery() as nursery:
                nursery.start_soon(show_signals)
                steps = [_plain, _tool, _stopped, _retry]
                for n, step in enumerate(steps, 1):
                    if closer.first is not None:
                        break
                    with trio.move_on_after(PROMPT_TIMEOUT) as scope:
                        receipts.append(await step(bridge, out, problems, journal, f"[{n}/{len(steps)}]"))
                    if scope.cancelled_caught:
                        problems.append(f"step {n} got no receipt within {PROMPT_TIMEOUT:g} s")
                        break
                nursery.cancel_scope.cancel()
        closer.closed()
        # The bridge is closed: the engine stopped, the journal complete.
        replayed = {r.request: r for r in replay(str(journal)).receipts}
        for r in receipts:
            again = replayed.get(r.request)
            if again is None or (again.state, again.reason, again.stop) != (r.state, r.reason, r.stop):
                problems.append(
                    f"the journal replays {r.request} as "
                    f"{(again.state, again.reason) if again else 'missing'}, live said {(r.state, r.reason)}"
                )
        out.say(f"\njournal: {journal}  (replay it: bridge replay {journal})")
    finally:
        server.close()
        shutil.rmtree(tmp, ignore_errors=True)


async def _stream(handle: Any, out: _Out, on_first: Any = None) -> str:
    """Print the reply as it streams; returns it whole. Ends at the prompt's receipt."""
    out.piece("  reply    ")
    pieces = []
    async for piece in handle.text():
        pieces.append(piece)
        out.piece(piece)
        if on_first is not None:
            first, on_first = on_first, None
            await first()
    out.say()
    return "".join(pieces)


async def _ask(
    bridge: Any, out: _Out, heading: str, message: str, *, stop_after_first: bool = False
) -> tuple[Any, str, Any]:
    """One showcase step: announce it, send the prompt, stream the reply (stopping it
    after its first text when asked), show the receipt. Returns (receipt, text, stop id);
    ends at the prompt's receipt."""
    out.say(f"\n{heading}")
    out.say(f"  prompt   {message}")
    h = await bridge.submit(message, stream=True)
    stop_ids: list[Any] = []

    async def stop() -> None:
        """Stop the prompt from inside its stream; returns at once (the stop is queued)."""
        stop_ids.append(await h.stop())

    text = await _stream(h, out, on_first=stop if stop_after_first else None)
    r = await h.receipt()
    _show(out, r)
    return r, text, stop_ids[0] if stop_ids else None


def _show(out: _Out, r: Any) -> None:
    from bridge.core.receipts import describe

    out.say(f"  receipt  {describe(r)}")
    out.receipt(r)


def _verdict(out: _Out, problems: list[str], what: str, wrong: list[str]) -> None:
    if wrong:
        out.say(f"  expected {what}: NO — " + "; ".join(wrong))
        problems.extend(wrong)
    else:
        out.say(f"  expected {what}: yes")


async def _plain(bridge: Any, out: _Out, problems: list[str], journal: Path, tag: str) -> Any:
    """One showcase step (see :func:`_ask`). Ends at its prompt's receipt."""
    r, text, _ = await _ask(bridge, out, f"{tag} a plain reply", "Say hello to the bridge.")
    wrong = []
    if (r.state, r.reason) != ("finished", None):
        wrong.append(f"{r.request} is {r.state}/{r.reason}, not finished")
    if r.reply != PLAIN or text != PLAIN:
        wrong.append(f"{r.request}'s reply is {r.reply!r}")
    _verdict(out, problems, "finished, with the model's reply", wrong)
    return r


async def _tool(bridge: Any, out: _Out, problems: list[str], journal: Path, tag: str) -> Any:
    """One showcase step (see :func:`_ask`). Ends at its prompt's receipt."""
    r, _, _ = await _ask(
        bridge,
        out,
        f"{tag} a tool-using run: the model calls Pi's bash tool with `echo …`, then answers",
        "Run an echo command with your bash tool and tell me what it printed.",
    )
    events = _run_events(journal, r)
    starts = [e for e in events if e.get("type") == "tool_execution_start"]
    ends = [e for e in events if e.get("type") == "tool_execution_end"]
    for s, e in zip(starts, ends):
        output = ((e.get("result") or {}).get("structuredContent") or {}).get("output", "")
        out.say(f"  tool     {s.get('toolName')} {(s.get('args') or {}).get('command')!r} -> {output.strip()!r}")
    wrong = []
    if (r.state, r.reason) != ("finished", None):
        wrong.append(f"{r.request} is {r.state}/{r.reason}, not finished")
    if r.reply != TOOL_REPLY:
        wrong.append(f"{r.request}'s reply is {r.reply!r}")
    if len(starts) != 1 or starts[0].get("toolName") != "bash" or len(ends) != 1 or ends[0].get("isError"):
        wrong.append(f"{r.request}'s run did not run bash once (tool starts {len(starts)}, ends {len(ends)})")
    _verdict(out, problems, "finished, after one bash call in the same run", wrong)
    return r


async def _stopped(bridge: Any, out: _Out, problems: list[str], journal: Path, tag: str) -> Any:
    """One showcase step (see :func:`_ask`). Ends at its prompt's receipt."""
    # The stop goes out from inside the stream, after its first text.
    r, _, stop_id = await _ask(
        bridge,
        out,
        f"{tag} a slow stream, stopped by the controller after its first text arrives",
        "Write a very long answer.",
        stop_after_first=True,
    )
    out.say(f"  stop     {stop_id} sent after the first streamed text")
    wrong = []
    if (r.state, r.reason) != ("failed", "interrupted"):
        wrong.append(f"{r.request} is {r.state}/{r.reason}, not failed/interrupted")
    if stop_id is None or r.stop != stop_id:
        wrong.append(f"{r.request}'s stop is {r.stop!r}, not {stop_id!r}")
    _verdict(out, problems, f"failed/interrupted, naming stop {stop_id}", wrong)
    return r


async def _retry(bridge: Any, out: _Out, problems: list[str], journal: Path, tag: str) -> Any:
    """One showcase step (see :func:`_ask`). Ends at its prompt's receipt."""
    r, _, _ = await _ask(
        bridge,
        out,
        f"{tag} a run whose first attempt gets HTTP 500: Pi retries by itself",
        "Answer even if the provider fails once.",
    )
    events = _run_events(journal, r)
    for e in events:
        if e.get("type") == "auto_retry_start":
            out.say(
                f"  retry    attempt {e.get('attempt')} failed ({str(e.get('errorMessage'))[:60]}); "
                f"Pi retried after {e.get('delayMs')} ms"
            )
    pairs = min(_count(events, "agent_start"), _count(events, "agent_end"))
    out.say(
        f"  run      {_count(events, 'agent_start')} agent_start, {_count(events, 'agent_end')} agent_end, "
        f"{_count(events, 'agent_settled')} agent_settled"
    )
    wrong = []
    if (r.state, r.reason) != ("finished", None):
        wrong.append(f"{r.request} is {r.state}/{r.reason}, not finished")
    if r.reply != RETRY_REPLY:
        wrong.append(f"{r.request}'s reply is {r.reply!r}")
    if pairs != 2 or _count(events, "agent_start") != 2 or _count(events, "agent_settled") != 1:
        wrong.append(
            f"{r.request}'s run has {_count(events, 'agent_start')} agent_start / "
            f"{_count(events, 'agent_end')} agent_end, not exactly two pairs and one settle"
        )
    _verdict(out, problems, "finished, with two agent_start…agent_end pairs (the retry) in one run", wrong)
    return r
