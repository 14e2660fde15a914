"""``bridge run``: a one-shot controller. It opens the bridge, sends its prompts one after
another (streaming each reply), prints each receipt, and decides the exit status by the
exit-code table (docs: guide/exit-codes.md; :meth:`Run.exit_status`). A signal closes the bridge (the
running prompt stopped, ``failed``/``closing``; the rest rejected); a closed stdout (``| head``)
does too, quietly.
"""

from __future__ import annotations

import signal
import sys
from typing import Any

import attrs

from bridge.controller.output import silence_stdout
from bridge.core.config import BridgeConfig
from bridge.core.receipts import Receipt, exit_status
from bridge.live.api import Bridge, PromptHandle
from bridge.live.signals import SignalCloser, closing_signals
from bridge.profiles.command import EngineProfile


def writable(text: str, encoding: str | None) -> str:
    """``text`` as JavaScript would write it out: the surrogates a JSON string can hold (Python
    keeps ``"\\ud83d\\ude00"`` as two code points) made into the character a pair of them
    makes, a lone one into U+FFFD as ``TextEncoder`` does; then what ``encoding`` cannot
    encode (a stdout that is not UTF-8) as its replacement character."""
    text = text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    return text.encode(encoding or "utf-8", "replace").decode(encoding or "utf-8")


def _has_surrogates(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


@attrs.define
class Run:
    """One ``bridge run``: the bridge it opens, and what it saw there that decides the
    exit status (docs: guide/exit-codes.md)."""

    prompts: list[str]
    profile: EngineProfile
    #: ``open_bridge``'s ``journal`` (True, a path, or False) and ``config``.
    journal: str | bool
    config: BridgeConfig
    #: ``--json``: receipts as JSON lines on stdout, the reply text on stderr.
    json: bool = False
    handles: list[PromptHandle] = attrs.Factory(list)
    #: The closing signals' watcher: the bridge it closes, the first signal.
    closer: SignalCloser = attrs.Factory(SignalCloser)
    journal_path: str | None = None
    #: Why the journal could not be written.
    journal_failed: str | None = None
    #: Why the engine cannot be set up (not launched, or its start-up check refused it).
    setup_failed: str | None = None
    #: Stdout was closed early (``| head``): nothing more is written there.
    stdout_gone: bool = False
    #: Why stdout could not be written (a full disk, a closed descriptor), when it was not
    #: the reader going away (a broken pipe is ``| head``: quiet, 141).
    stdout_failed: str | None = None
    #: With --json, stderr (the reply text's) could not be written: the text is given up,
    #: nothing else (stdout has the receipts).
    stderr_gone: bool = False

    # -- in the bridge

    async def main(self) -> None:
        """Open the bridge, send the prompts, close it. Ends when the bridge has closed (after
        the last receipt, or at once on a signal or a closed stdout): every handle then has
        its receipt."""
        import trio

        from bridge.live.api import open_trio_bridge

        # The signals are ours until the bridge has closed and after (the receipts are printed
        # once trio.run returns): one while closing must not kill the process or lose them.
        with closing_signals() as signals:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self.closer.watch, signals)
                async with open_trio_bridge(
                    self.profile, journal=self.journal, config=self.config, start_engine=False
                ) as bridge:
                    self._opened(bridge)
                    await self._send_all(bridge)
                self.closer.closed()
                self._closing(bridge)
                nursery.cancel_scope.cancel()

    @property
    def interrupted(self) -> int:
        """128+N after the first signal N (SIGINT, SIGTERM, SIGHUP), else 0."""
        return 128 + self.closer.first if self.closer.first is not None else 0

    def _opened(self, bridge: Bridge) -> None:
        self.closer.opened(bridge)
        if bridge.journal is not None:
            self.journal_path = str(bridge.journal.path)
        bridge.listeners.append(_dialog_line)
        if sys.stderr.isatty():
            bridge.listeners.append(_progress_line)

    async def _send_all(self, bridge: Bridge) -> None:
        """One after another: the next prompt is submitted when the previous one has its
        receipt (whatever their number; the queue bound is for controllers that submit at
        once). Ends when the last prompt has its receipt."""
        for prompt in self.prompts:
            h = await bridge.submit(prompt, stream=True)
            self.handles.append(h)
            if h.receipt_nowait is not None:  # refused at once (closing, a full queue): no text
                continue
            labelled = len(self.prompts) > 1
            if labelled:
                self.show(f"[{h.request}] ")
            if await self._stream(bridge, h) or labelled:
                self.show("\n")  # the text's line ended (none for a prompt with no text to show)
            await h.receipt()

    async def _stream(self, bridge: Bridge, h: PromptHandle) -> bool:
        """Show the reply text as it arrives; True if there was any. Ends at the prompt's
        receipt. A piece that ends with the first half of a surrogate pair (JavaScript strings
        are UTF-16: a delta may end between the halves) keeps it for the next piece, so that the
        two make one character."""
        held = ""
        shown = False
        async for piece in h.text():
            piece = held + piece
            held = piece[-1:] if "\ud800" <= piece[-1:] <= "\udbff" else ""
            shown = shown or bool(piece)
            self.show(piece[: len(piece) - len(held)])
            if self.stdout_gone:
                bridge.close_now("close", "stdout was closed")
        if held:
            self.show(held)
        return shown

    def show(self, text: str) -> None:
        """Reply text: stdout (stderr with --json, which keeps stdout JSON only)."""
        if self.stdout_gone or self.stderr_gone:
            return
        out = sys.stderr if self.json else sys.stdout
        if not text.isascii() and _has_surrogates(text):
            text = writable(text, None)
        try:
            try:
                out.write(text)
            except UnicodeEncodeError:  # a stdout that is not UTF-8
                out.write(writable(text, out.encoding))
            out.flush()
        except (OSError, ValueError) as e:
            self._show_failed(e)

    def _show_failed(self, e: OSError | ValueError) -> None:
        if self.json:
            # The text went to stderr, and stderr is not stdout: the receipts still go there,
            # and the prompts still run. Only the text (and the lines on stderr) is lost.
            self._stderr_closed()
        elif isinstance(e, BrokenPipeError):
            # `| head`: the reader is gone. No more text, no traceback; the
            # bridge closes (the running prompt is stopped, failed/closing).
            self._stdout_closed()
        else:
            # Stdout cannot take the text (a full disk, a closed descriptor): the same, but
            # it is said, and the run fails (the receipts still go to stderr).
            self.stdout_failed = getattr(e, "strerror", None) or str(e)
            self._stdout_closed()

    def _stdout_closed(self) -> None:
        self.stdout_gone = True
        silence_stdout()

    def _stderr_closed(self) -> None:
        self.stderr_gone = True
        silence_stdout(sys.stderr)

    def say(self, line: str = "") -> None:
        """A line on stderr. With --json, one that cannot be written is given up (stdout has
        what matters); without, it is the receipts' own stream, so its failure is the command's."""
        if self.stderr_gone:
            return
        try:
            print(line, file=sys.stderr, flush=self.json)
        except (OSError, ValueError):
            if not self.json:
                raise
            self._stderr_closed()

    def _closing(self, bridge: Bridge) -> None:
        if bridge.journal_failed:
            self.journal_failed = bridge.journal_failed
        if bridge.view().setup_failed:
            self.setup_failed = bridge.down_reason or "the engine cannot be set up"

    # -- after it closed

    def receipts(self) -> list[Receipt]:
        """Every prompt's receipt, in order (each handle has its own once the bridge has closed)."""
        receipts = []
        for h in self.handles:
            receipt = h.receipt_nowait
            assert receipt is not None, f"{h.request} has no receipt after the bridge closed"
            receipts.append(receipt)
        return receipts

    def print_receipts(self, receipts: list[Receipt]) -> None:
        """After a blank line on stderr: each receipt as a JSON line on stdout (--json, while
        stdout is there), else as a line a person reads on stderr."""
        from bridge.core.receipts import describe

        self.say()
        for r in receipts:
            if self.json and not self.stdout_gone:
                self._print_json(r)
            if not self.json or self.stdout_gone:
                self.say(describe(r))

    def _print_json(self, r: Receipt) -> None:
        from bridge.transcript import dumps

        try:
            sys.stdout.buffer.write(dumps(r.to_json()) + b"\n")
            sys.stdout.flush()
        except BrokenPipeError:
            self._stdout_closed()
        except (OSError, ValueError) as e:
            self.stdout_failed = getattr(e, "strerror", None) or str(e)
            self._stdout_closed()

    def print_ending(self) -> None:
        """The journal's path, then the line for a journal or an engine that failed, if one did."""
        if self.journal_path is not None:
            self.say(f"journal: {self.journal_path}")
        if self.stdout_failed is not None:
            self.say(f"bridge run: cannot write to stdout ({self.stdout_failed}); the receipts are above")
        if self.journal_failed is not None:
            self.say(f"bridge run: {self.journal_failed}; the receipts above are complete")
        elif self.setup_failed is not None:
            self.say(f"bridge run: the engine cannot be set up: {self.setup_failed}")

    def exit_status(self, receipts: list[Receipt]) -> int:
        """docs: guide/exit-codes.md, first match wins: a journal that failed, 1 (or 128+N after a
        signal); an engine that cannot be set up (not launched, or its start-up check refused
        it), 2; a signal N, 128+N; stdout closed
        early, 141; 0 when every prompt finished, else 1."""
        from bridge.core.words import State

        if self.journal_failed is not None:
            return self.interrupted or 1
        if self.setup_failed is not None:
            return 2
        if self.interrupted:
            return self.interrupted
        if self.stdout_failed is not None:
            return 1
        if self.stdout_gone:
            return 128 + signal.SIGPIPE
        return 0 if receipts and all(r.state == State.FINISHED for r in receipts) else 1


def _dialog_line(note: dict[str, Any]) -> None:
    """An allowed extension's dialog: ``run`` has nobody to ask, so the bridge answered it
    ``cancelled``; one line on stderr says so (and where a dialog can be answered)."""
    if note.get("type") != "dialog-end" or note.get("by") != "no-controller":
        return
    title = str(note.get("title") or "")[:80]
    whose = f" (prompt {note.get('id')})" if note.get("id") is not None else ""
    try:
        print(
            f"bridge run: an extension's {note.get('method')} dialog {title!r}{whose} was answered cancelled: "
            "bridge run cannot ask anyone (bridge serve or the Python API can answer dialogs)",
            file=sys.stderr,
            flush=True,
        )
    except OSError:
        pass


def _progress_line(note: dict[str, Any]) -> None:
    """On a terminal, one short line on stderr while nothing else shows: the engine
    starting or restarting, and the engine retrying a prompt by itself."""
    kind, event = note.get("type"), note.get("event")
    if kind == "engine" and event == "started":
        line = f"… engine started (pid {note.get('pid')}, generation {note.get('generation')})"
    elif kind == "engine" and event == "exited" and not note.get("requested"):
        # Whether a new engine starts is for its own "started" line to say: none does after the
        # last prompt, nor once the crash limit is reached.
        line = f"… engine exited by itself ({exit_status(note.get('code'), note.get('signal'))})"
    elif kind == "progress" and event == "retrying":
        delay = note.get("delayMs")
        wait = f" in {delay / 1000:g} s" if isinstance(delay, (int, float)) else ""
        line = (
            f"… the engine retries {note.get('id')} (attempt {note.get('attempt')} of "
            f"{note.get('maxAttempts')}{wait}): {str(note.get('error') or '')[:120]}"
        )
    elif kind == "signal" and note.get("signal") == "seal-check":
        line = "… the engine failed its start-up check: " + "; ".join(map(str, note.get("problems") or []))[:160]
    else:
        return
    try:
        print(line, file=sys.stderr, flush=True)
    except OSError:
        pass
