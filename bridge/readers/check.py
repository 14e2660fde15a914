"""``bridge replay --check``: does a journal agree with itself?

A live bridge's journal holds two accounts of every prompt: the *evidence* (each command the
bridge wrote, each line it read, each exit) and the *receipt* it recorded when it decided. Replay
decides from the evidence, as the live bridge did, and takes a recorded receipt only where the
evidence cannot decide (a give-up after a deadline: the time is not in the evidence). A journal
whose two accounts disagree was edited, cut, or written by a bridge with a bug; this module names
each place they disagree, by prompt and observation index:

``receipt-differs``
    The evidence decides prompt P (``state``, ``reason``) and the journal recorded another; or the
    evidence decided nothing by P's release and the recorded receipt is none of the give-ups the
    evidence allows (:meth:`bridge.core.session.Session.give_up_verdicts`).
``answer-to-unsent``
    A response at observation #N answers a command id the journal never sent. Its prompt: the
    id's own for a prompt's ack, the stop note's for a stop, else the prompt holding the slot.
``receipt-without-send``
    A recorded receipt says P reached the engine (a state other than ``rejected``, an ack or a
    run) while the journal never sent P: the send is missing from the journal.
``release-without-receipt``
    A live bridge's journal (its header names the ``bridge``) releases P, a prompt it sent, with
    no receipt recorded for it: a live bridge journals every receipt before its release, so the
    receipt is missing. (A hand-written transcript may release without one.)
``receipt-invalid``
    A recorded receipt whose state and reason are no receipt's verdict (``delivery-unknown``
    with ``interrupted``): an edited or damaged journal. It is not taken as the prompt's story.
``cut-short``
    A live bridge's journal ends without the bridge's closing note (``bridge-closed``) while a
    prompt it sent has no receipt recorded: the bridge was killed, or its disk filled, before
    it settled P (issue 42: such a journal was "intact").

A recorded receipt that the evidence decides is compared whole where the evidence speaks: its
state and reason, and its ``stop``, ``run``, ``reply`` and ack / working / settle indices (an
edited stop, run, index or reply was "intact" before). Timings, the pid and usage are the live
bridge's own and are not in the evidence.

A sent prompt with no recorded receipt in a journal that closed is not one of them: a prompt
written by hand (``send_raw``, unsealing on purpose) is journaled as any send and never gets a
receipt.

The rules use only the journal: the same file always gives the same findings.
"""

from __future__ import annotations

from typing import Any, Final, Literal, get_args

import attrs

from bridge.core.receipts import Verdict, verdict_problem
from bridge.core.session import Session
from bridge.core.wire import Wire, form
from bridge.core.words import State
from bridge.readers import hashable
from bridge.readers.replay import Driver
from bridge.transcript import Entry, open_transcript

Kind = Literal[
    "receipt-differs",
    "answer-to-unsent",
    "receipt-without-send",
    "release-without-receipt",
    "receipt-invalid",
    "cut-short",
]
#: The kinds in their order, read off :data:`Kind` (declared once).
KINDS: Final[tuple[Kind, ...]] = get_args(Kind)
#: What a recorded receipt is compared on beyond its verdict, where the evidence decided it
#: (wire names): what the evidence itself gives.
COMPARED: Final = ("stop", "run", "reply", "ackIdx", "workingIdx", "settleIdx")


@form()
@attrs.frozen
class Contradiction(Wire):
    """One place where a journal's evidence and its recorded receipts disagree."""

    kind: Kind
    #: The prompt it is about (for an answer to a command that was neither a prompt nor a stop
    #: the journal's ``stop`` notes tie to one: the prompt holding the slot, None when none did).
    request: Any
    #: The observation index it is about (None when the journal has none to name).
    idx: int | None
    #: The journal's line number (1 is the header): the recorded receipt's for a receipt, the
    #: response's for an answer, the release's for a missing receipt.
    line: int
    #: What is wrong, in words.
    words: str


def _verdict(state: Any, reason: Any) -> str:
    return f"{state} ({reason})" if reason else str(state)


def check(path: str) -> list[Contradiction]:
    """Every contradiction in the journal at ``path``, in the order the journal shows them.
    Raises :class:`~bridge.transcript.TranscriptError` for a file that is not a transcript."""
    stream, reader = open_transcript(path)
    with stream:
        driver = Driver(Session(reader.header.clearing, dialogs=reader.header.dialogs), bounded=True)
        checker = Checker(driver, live="bridge" in reader.header.meta)
        found: list[Contradiction] = []
        last = 1
        for entry in reader.skipping_updates():
            found += checker.before(entry)
            driver.feed(entry)
            found += checker.after(entry)
            last = entry.line
        return found + checker.end(last)


class Checker:
    """The rules, entry by entry, beside a :class:`~bridge.readers.replay.Driver` that someone
    else feeds (``replay --check`` here; ``bridge diagnose``, whose findings these become): call
    :meth:`before` with each entry before the driver reads it and :meth:`after` once it has.
    Memory: a set of the command ids sent, and the stops' prompts (bounded like the driver)."""

    def __init__(self, driver: Driver, *, live: bool) -> None:
        self.driver = driver
        #: The journal is a live bridge's (every receipt is recorded before its release).
        self.live = live
        self._commands: set[Any] = set()
        #: The journal line of each sent prompt's recorded receipt, until its release.
        self._receipt_lines: dict[Any, int] = {}
        #: A stop's id (and its clear_queue's) -> its prompt, from the journal's stop notes.
        self._stops: dict[Any, Any] = {}
        #: The bridge's closing note was read.
        self._closed = False

    def before(self, entry: Entry) -> list[Contradiction]:
        kind, value, driver = entry.kind, entry.value, self.driver
        if not isinstance(value, (dict, str)):
            return []
        if kind == "send" and isinstance(value, dict) and hashable(value.get("id")):
            self._commands.add(value.get("id"))
        elif (
            kind == "note" and isinstance(value, dict) and value.get("event") == "stop" and hashable(value.get("stop"))
        ):
            stop = value.get("stop")
            self._stops[stop] = self._stops[f"{stop}:clear"] = value.get("request")
        elif kind == "release" and hashable(value):
            line = self._receipt_lines.pop(value, None)
            if line is None and self.live and value in driver.session.open:
                return [
                    Contradiction(
                        "release-without-receipt",
                        value,
                        driver.session.tracker.idx,
                        entry.line,
                        f"the journal releases {value} with no receipt recorded for it (a live bridge "
                        "records each before its release)",
                    )
                ]
            found = _at_release(driver, value, line if line is not None else entry.line)
            return [found] if found is not None else []
        elif kind == "note" and isinstance(value, dict) and value.get("event") == "bridge-closed":
            self._closed = True
        elif kind == "receipt" and isinstance(value, dict) and hashable(value.get("request")):
            problem = verdict_problem(value.get("state"), value.get("reason"))
            if problem is not None:
                if value.get("request") in driver.sent_ids:
                    self._receipt_lines[value.get("request")] = entry.line  # recorded, if wrongly
                return [
                    Contradiction(
                        "receipt-invalid",
                        value.get("request"),
                        value.get("settleIdx") if type(value.get("settleIdx")) is int else None,
                        entry.line,
                        f"the journal records a receipt for {value.get('request')} that is none: {problem}",
                    )
                ]
            if value.get("request") in driver.sent_ids:
                self._receipt_lines[value.get("request")] = entry.line
                return []
            if not _says_delivered(value):
                return []
            return [
                Contradiction(
                    "receipt-without-send",
                    value.get("request"),
                    value.get("ackIdx"),
                    entry.line,
                    f"the journal records {_verdict(value.get('state'), value.get('reason'))} for "
                    f"{value.get('request')}, a prompt it never sent",
                )
            ]
        return []

    def end(self, line: int) -> list[Contradiction]:
        """After the journal's last entry (``line``): the prompts it sent and never settled, when
        it ends without the bridge's close (``cut-short``)."""
        if not self.live or self._closed:
            return []
        session = self.driver.session
        return [
            Contradiction(
                "cut-short",
                request,
                session.tracker.idx,
                line,
                f"the journal ends at line {line} without the bridge's close, with {request} sent and no receipt "
                "recorded for it: it was cut short (the bridge killed, or its disk full)",
            )
            for request in session.open
            if request not in self._receipt_lines and hashable(request)
        ]

    def after(self, entry: Entry) -> list[Contradiction]:
        value = entry.value
        if entry.kind != "recv" or not isinstance(value, dict) or value.get("type") != "response":
            return []
        rid = value.get("id")
        if rid is None or not hashable(rid) or rid in self._commands:
            return []
        tracker = self.driver.session.tracker
        idx = tracker.idx
        request, held = self._answered(rid, value.get("command")), ""
        if request is None and tracker.slot is not None and tracker.slot.request is not None:
            request, held = tracker.slot.request, f" (while {tracker.slot.request} held the slot)"
        return [
            Contradiction(
                "answer-to-unsent",
                request,
                idx,
                entry.line,
                f"the {value.get('command')!s} response at #{idx} answers {rid!r}, a command the journal never "
                f"sent{held}",
            )
        ]

    def _answered(self, rid: Any, command: Any) -> Any:
        """The prompt an unsent command's id names: a prompt's own (a prompt's ack carries its
        prompt's id), or the one a stop note ties the stop to; else None."""
        if rid in self.driver.sent_ids or command == "prompt":
            return rid
        return self._stops.get(rid)


def _says_delivered(recorded: dict[str, Any]) -> bool:
    """A recorded receipt that says its prompt reached the engine."""
    return recorded.get("state") != State.REJECTED or recorded.get("ackIdx") is not None or bool(recorded.get("run"))


def _at_release(driver: Driver, request: Any, line: int) -> Contradiction | None:
    """Before ``request``'s release is fed: its evidence's receipt against the recorded one."""
    session = driver.session
    recorded = driver.recorded.get(request)
    prompt = session.open.get(request)
    if recorded is None or prompt is None:
        return None
    said: Verdict = (recorded.get("state"), recorded.get("reason"))  # type: ignore[assignment]
    if prompt.receipt is not None:
        got = prompt.receipt
        idx = got.settle_idx if got.settle_idx is not None else session.tracker.idx
        if (got.state, got.reason) != said:
            return Contradiction(
                "receipt-differs",
                request,
                idx,
                line,
                f"the journal records {_verdict(*said)} for {request}; its evidence gives "
                f"{_verdict(got.state, got.reason)} at #{idx}",
            )
        evidence = got.to_json()
        differs = [
            k for k in COMPARED if k in recorded and recorded[k] != evidence.get(k)
        ]  # (a live bridge writes all)
        if not differs:
            return None
        words = "; ".join(
            f"{k} {_short(recorded.get(k))} where its evidence gives {_short(evidence.get(k))}" for k in differs
        )
        return Contradiction(
            "receipt-differs", request, idx, line, f"the journal records {_verdict(*said)} for {request} with {words}"
        )
    allowed = session.give_up_verdicts(request)
    if said in allowed:
        return None
    words = ", ".join(sorted(_verdict(*v) for v in allowed))
    return Contradiction(
        "receipt-differs",
        request,
        session.tracker.idx,
        line,
        f"the journal records {_verdict(*said)} for {request}; its evidence decides nothing by its "
        f"release at #{session.tracker.idx}, and a give-up there gives only {words}",
    )


def _short(value: Any) -> str:
    """A value as a finding shows it: JSON-ish, a long text cut."""
    text = repr(value) if not isinstance(value, str) else repr(value if len(value) <= 60 else value[:57] + "...")
    return "none" if value is None else text


def format_check(path: str, found: list[Contradiction]) -> str:
    """The check's account of one file, for people."""
    if not found:
        return f"{path}: intact (the evidence gives every recorded receipt)"
    lines = [f"{path}: {len(found)} contradiction" + ("s" if len(found) != 1 else "")]
    for c in found:
        where = f"#{c.idx}" if c.idx is not None else "-"
        request = "-" if c.request is None else str(c.request)
        lines.append(f"  {c.kind:<23} {request:<10} {where:<7} line {c.line}: {c.words}")
    return "\n".join(lines)
