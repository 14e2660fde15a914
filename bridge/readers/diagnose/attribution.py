"""Whose work it was, by the evidence's own words: the bridge's own late prompts, and foreign runs.

The tracker decides by order alone (which slot was held when a run started), and a receipt keeps
that view (SPEC §4). A person reading a diagnosis needs more: when Pi was busy with a run the
bridge did not start, the bridge's next prompt is acked ``queued``, sits in Pi's queue, and runs
later, after the bridge has given it up. By order alone that looks like an outsider queueing an
item (O5), an outsider's run (O1), and the busy run as the prompt's own. The journal holds the
words to tell them apart, and this module reads them:

- the bridge journals each prompt it sends with its text (``send``, ``message``);
- Pi's ``queue_update`` lists each queued item by its text (``steering``, ``followUp``);
- a run's first user message carries the text the run was started with.

The rules:

1. A queued item whose text is the text of exactly one prompt the bridge sent is that prompt,
   queued by Pi. Two prompts with the same text: the words cannot decide, and the finding says so.
2. A run whose first user message is the text of exactly one prompt the bridge sent is that
   prompt's run; when that prompt's receipt came earlier, it was delivered late, and the run's O1
   names it first. A run whose first user message is no text the bridge sent is foreign: the
   receipt that called it the prompt's run says so, and the timeline paints it foreign.
   An empty ``queue_update`` right before that user message is Pi emptying its queue to
   deliver the prompt (Pi removes a queued text when a user message with it starts,
   ``agent-session.js``): its O5 says so.
3. The bridge sends each prompt once, so its words start one run. A run whose user message is
   the text of a prompt that already ran without being queued (acked ``started``, its words in
   no ``queue_update``) repeats them: it is foreign. A second run with the words of a prompt Pi
   queued: one of the two runs is someone else's, and the words cannot tell which; both
   findings say so and the timeline paints both undecided.
4. A run with no user message (a retry, an engine that sent none) is left as the tracker saw
   it: nothing is guessed.

Memory is bounded: the texts of the last :data:`PROMPTS_KEPT` prompts (as digests), and the
findings of the runs still open.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from typing import Any, Final

import attrs

from bridge.core.prompts import message_text
from bridge.readers.diagnose.findings import Finding
from bridge.readers.diagnose.render import short

#: Prompts whose text is remembered (the latest).
PROMPTS_KEPT: Final = 256
#: Runs whose first user message is remembered (the latest).
RUNS_KEPT: Final = 64

#: A text that more than one of the bridge's prompts had.
AMBIGUOUS: Final = "ambiguous"


def _digest(text: str) -> bytes:
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()


@attrs.define
class Sent:
    """One of the bridge's prompts, as its send journaled it."""

    request: Any
    text: str  # shortened, for words
    line: int
    queued_idx: int | None = None
    queued_finding: int | None = None
    receipt_finding: Finding | None = None
    receipt_words: str | None = None
    #: (run, its user message shortened, the message's index): a run the tracker gave this prompt
    #: whose words were not the bridge's.
    foreign: tuple[str, str, int] | None = None
    #: The first run whose user message had this prompt's words: (its key, its id, the message's
    #: index, its O1 finding if any).
    ran: tuple[str, str, int, Finding | None] | None = None


@attrs.define
class Attribution:
    """Fed by the diagnoser as the journal streams by; amends the findings it raised."""

    _by_text: OrderedDict[bytes, Sent | str] = attrs.field(factory=OrderedDict)
    #: run ("generation:run") -> (its O1 finding, if any; the prompt the tracker gave it, if any)
    _runs: OrderedDict[str, tuple[Finding | None, Any]] = attrs.field(factory=OrderedDict)
    #: The O5 of an empty queue_update no clear of the bridge's caused, until the next user message.
    _drained: Finding | None = None

    # -- what the diagnoser tells it ---------------------------------------------------------

    def sent(self, request: Any, message: Any, line: int) -> None:
        """The bridge wrote prompt ``request`` with text ``message``."""
        if not isinstance(message, str):
            return
        key = _digest(message)
        earlier = self._by_text.pop(key, None)
        self._by_text[key] = AMBIGUOUS if earlier is not None else Sent(request, short(message, 80), line)
        while len(self._by_text) > PROMPTS_KEPT:
            self._by_text.popitem(last=False)

    def run_started(self, key: str, o1: Finding | None, request: Any) -> None:
        """Run ``key`` started; ``o1`` is its O1 finding, ``request`` the slot the tracker gave it."""
        self._runs[key] = (o1, request)
        while len(self._runs) > RUNS_KEPT:
            self._runs.popitem(last=False)

    def queued(self, f: Finding | None, value: dict[str, Any], idx: int) -> None:
        """A ``queue_update`` with items at ``idx`` (``f``: its O5 finding)."""
        items = [t for k in ("steering", "followUp") for t in (value.get(k) or []) if isinstance(t, str)]
        own, ambiguous = [], 0
        for text in items:
            match = self._by_text.get(_digest(text))
            if isinstance(match, Sent):
                own.append(match)
                if match.queued_idx is None:
                    match.queued_idx = idx
                    match.queued_finding = f.n if f is not None else None
            elif match == AMBIGUOUS:
                ambiguous += 1
        if f is not None and (own or ambiguous):
            _own_queued_words(f, own, ambiguous, len(items))

    def drained(self, f: Finding) -> None:
        """An empty ``queue_update`` the bridge did not cause (``f``: its O5 finding)."""
        self._drained = f

    def receipt(self, f: Finding, request: Any, words: str) -> None:
        """Prompt ``request`` got its receipt, finding ``f`` (``words``: the receipt in words)."""
        for sent in self._by_text.values():
            if isinstance(sent, Sent) and sent.request == request and sent.receipt_finding is None:
                sent.receipt_finding, sent.receipt_words = f, words

    def user_message(self, key: str, run: str, message: dict[str, Any], idx: int) -> list[tuple[str, str, Any]]:
        """Run ``key``'s first user message, at ``idx``: whose the runs it tells about are, for the
        timeline: ``(run key, "own"|"late"|"foreign"|"undecided", request)`` each (none when the
        words cannot decide and nothing was said before)."""
        opened = self._runs.pop(key, None)
        if opened is None:
            return []
        o1, slot_request = opened
        text = message_text(message)
        match = self._by_text.get(_digest(text))
        drained, self._drained = self._drained, None
        if match == AMBIGUOUS:
            if o1 is not None:
                o1.notes.append(
                    f"{run}'s user message ({short(text, 60)!r}) is the text of more than one of the bridge's prompts: "
                    "the words cannot tell whose it is."
                )
            return []
        if isinstance(match, Sent) and match.ran is not None:
            return self._words_again(match, key, run, o1, slot_request, text, idx)
        if isinstance(match, Sent):
            match.ran = (key, run, idx, o1)
            if (
                drained is not None
                and drained.idx is not None
                and match.queued_idx is not None
                and drained.idx > match.queued_idx
            ):
                _drained_words(drained, match, run, idx)
            if match.receipt_finding is not None and match.request != slot_request:
                _late_words(o1, match, run, idx)
                return [(key, "late", match.request)]
            return [(key, "own", match.request)]
        if slot_request is not None:
            self._foreign_for(slot_request, run, text, idx)
        _foreign_words(o1, run, text, idx, None)
        return [(key, "foreign", None)]

    def _words_again(
        self, sent: Sent, key: str, run: str, o1: Finding | None, slot_request: Any, text: str, idx: int
    ) -> list[tuple[str, str, Any]]:
        """Run ``run`` started with the words of ``sent``, a prompt whose words an earlier run had."""
        assert sent.ran is not None
        first_key, first, first_idx, first_o1 = sent.ran
        request = sent.request
        if sent.queued_idx is None:
            # It ran at once, in ``first``: this run repeats its words.
            if slot_request is not None and slot_request != request:
                self._foreign_for(slot_request, run, text, idx, also=f"{request}'s words, which ran in {first}")
            _foreign_words(o1, run, text, idx, (request, first, first_idx))
            return [(key, "foreign", None)]
        words = (
            f"{first} (user message at #{first_idx}) and {run} (at #{idx}) both started with {request}'s words "
            f"({sent.text!r}), which the bridge sent once and Pi queued at #{sent.queued_idx}: one of the two runs "
            f"is someone else's, and the words cannot tell which."
        )
        for f in (first_o1, o1, sent.receipt_finding):
            if f is not None and words not in f.notes:
                f.notes.append(words)
                f.detail["undecided"] = {"request": request, "runs": [first, run], "userIdx": [first_idx, idx]}
        return [(first_key, "undecided", request), (key, "undecided", request)]

    # -- helpers -----------------------------------------------------------------------------

    def _foreign_for(self, request: Any, run: str, text: str, idx: int, also: str | None = None) -> None:
        """Run ``run``, which the tracker gave ``request``, started with words not its prompt's
        (``also``: whose words they were, when another prompt's)."""
        words = short(text, 60)
        for sent in self._by_text.values():
            if isinstance(sent, Sent) and sent.request == request:
                sent.foreign = (run, f"{words!r} ({also})" if also else repr(words), idx)

    def foreign_note(self, f: Finding, request: Any, run: str | None) -> None:
        """A receipt finding whose run the words say was not its prompt's: a note that says so."""
        if run is None:
            return
        for sent in self._by_text.values():
            if not isinstance(sent, Sent) or sent.request != request or sent.foreign is None:
                continue
            if sent.foreign[0] != run:
                continue
            _, text, idx = sent.foreign
            queued = f"; {request}'s own words were queued by Pi at #{sent.queued_idx}" if sent.queued_idx else ""
            f.notes.insert(
                0,
                f"{run} was not {request}'s own run: its user message at #{idx} is {text}, not {request}'s "
                f"prompt ({sent.text!r}){queued}.",
            )
            f.detail["runOwner"] = {"run": run, "owner": "foreign", "userIdx": idx}


def _own_queued_words(f: Finding, own: list[Sent], ambiguous: int, items: int) -> None:
    names = ", ".join(f"{s.request} ({s.text!r}, sent at line {s.line})" for s in own)
    if own and len(own) == items:
        f.title = f"O5: {', '.join(str(s.request) for s in own)}'s own prompt, queued by Pi behind work already running"
        f.explanation = (
            f"the queue_update at observation {f.idx} lists {items} queued item(s), the bridge's own: {names}. "
            "Pi queues a prompt it is sent while a run is going, so a run the bridge did not start was already "
            "going when it was sent; nobody else queued these."
        )
    else:
        if own:
            f.explanation += f" Of its {items} item(s), {len(own)} are the bridge's own prompts: {names}."
        if ambiguous:
            f.explanation += (
                f" {ambiguous} of its item(s) match the text of more than one of the bridge's prompts: the words "
                "cannot tell whose they are."
            )
    if own:
        f.causes.insert(
            0,
            {
                "cause": f"the bridge's own prompt(s) ({', '.join(str(s.request) for s in own)}), queued by Pi because "
                "a run the bridge did not start was already going",
                "check": "the run going at the time (an extension's, typically right after the previous prompt "
                "settled) and the prompt's ack (disposition 'queued')",
            },
        )
    f.detail["own"] = [{"request": s.request, "line": s.line} for s in own]


def _foreign_words(o1: Finding | None, run: str, text: str, idx: int, repeats: tuple[Any, str, int] | None) -> None:
    """Run ``run``'s O1 (if any): its user message was not a prompt of the bridge's (or repeats one
    that already ran: ``(request, its run, the message's index)``)."""
    if o1 is None:
        return
    if repeats is None:
        o1.notes.append(
            f"{run}'s user message at #{idx} is {short(text, 60)!r}, the text of none of the bridge's prompts: "
            "by its words, someone else's run."
        )
        o1.detail["runOwner"] = {"run": run, "owner": "foreign", "userIdx": idx}
        return
    request, first, first_idx = repeats
    o1.notes.append(
        f"{run}'s user message at #{idx} repeats {request}'s words ({short(text, 60)!r}), which already ran in "
        f"{first} (user message at #{first_idx}): the bridge sent them once, so this run is someone else's."
    )
    o1.detail["runOwner"] = {"run": run, "owner": "foreign", "userIdx": idx, "repeats": request}


def _drained_words(f: Finding, sent: Sent, run: str, idx: int) -> None:
    """The empty queue_update ``f`` was Pi taking ``sent``'s queued words out to deliver them."""
    request = sent.request
    f.title = f"O5: Pi's queue emptied to deliver {request}'s own prompt"
    f.explanation += (
        f" Here it is Pi delivering {request}'s own prompt ({sent.text!r}, queued at #{sent.queued_idx}): "
        f"{run}'s user message at #{idx} is its words."
    )
    f.causes.insert(
        0,
        {
            "cause": f"Pi took {request}'s queued prompt out of its queue to run it",
            "check": f"the user message at #{idx} and the queue_update at #{sent.queued_idx} that listed it",
        },
    )
    f.detail["delivers"] = {"request": request, "queuedIdx": sent.queued_idx, "userIdx": idx}


def _late_words(o1: Finding | None, sent: Sent, run: str, idx: int) -> None:
    request = sent.request
    queued = f"queued by Pi at #{sent.queued_idx}, " if sent.queued_idx is not None else ""
    given_up = f" ({sent.receipt_words})" if sent.receipt_words else ""
    if o1 is not None:
        o1.title = f"O1: {request}'s own prompt, delivered late"
        o1.explanation = (
            f"{run} started at observation {o1.idx} while no prompt was held; its user message at #{idx} is "
            f"{request}'s own prompt ({sent.text!r}, sent at line {sent.line}): {queued}delivered at #{o1.idx} "
            f"after the bridge gave {request} up{given_up}. It is the bridge's own work, run late, not someone "
            "else's."
        )
        o1.causes.insert(
            0,
            {
                "cause": f"{request}'s own prompt, {queued}delivered after the bridge gave it up",
                "check": "what kept Pi busy when it was sent (the run its ack was queued behind)",
            },
        )
        o1.detail["lateOwn"] = {"request": request, "queuedIdx": sent.queued_idx, "userIdx": idx}
        if sent.queued_finding is not None and sent.queued_finding not in o1.related:
            o1.related.append(sent.queued_finding)
        if sent.receipt_finding is not None and sent.receipt_finding.n not in o1.related:
            o1.related.append(sent.receipt_finding.n)
    if sent.receipt_finding is not None:
        where = f" (finding {o1.n})" if o1 is not None else ""
        sent.receipt_finding.notes.append(
            f"{request}'s own prompt ran later, in {run}: its user message at #{idx}{where}, after this receipt."
        )
