"""The words of every signal the session raises: overlaps (O1-O6, ``aborted-without-stop``), a second
prompt while one is held, gaps, non-``started`` dispositions and seal diagnostics.

Rules: each signal, and each ``why`` / ``cause`` of it the tracker gives (``bridge/core/tracker.py``
names them, after seed ``003``), has its own step saying what happened in plain words, with the
indices and ids that place it, and its likely causes, most likely first. The words read the
tracker only through its public slot and :meth:`~bridge.core.tracker.Tracker.run_facts`; they
change nothing. A signal the tracker adds later still gets a finding, with its raw detail.
"""

from __future__ import annotations

from typing import Any, Final

import attrs

from bridge.core.events import Diagnostic, DispositionSignal
from bridge.core.prompts import PromptState
from bridge.core.session import Session
from bridge.core.tracker import Overlap
from bridge.core.words import Cause, Why
from bridge.readers.diagnose import causes
from bridge.readers.diagnose.facts import Facts
from bridge.readers.diagnose.findings import Finding, Window, Words
from bridge.readers.diagnose.render import q, short

_GAP_WORDS: Final = {
    "malformed": "malformed JSON",
    "oversize": "an oversize line, over the line limit",
    "invalid-utf8": "invalid UTF-8",
    "not-object": "JSON, but not an object",
}


# --------------------------------------------------------------------------
# Overlaps


@attrs.frozen
class OverlapAt:
    """An overlap with what its words need: the journal's facts, the session right after it, the
    observation's value and the evidence window (for the ack just before it)."""

    o: Overlap
    facts: Facts
    session: Session
    value: dict[str, Any]
    window: Window

    @property
    def why(self) -> Any:
        return self.o.detail.get("why")

    @property
    def run(self) -> Any:
        return self.o.detail.get("run")

    @property
    def gen(self) -> int:
        return self.session.generation

    @property
    def R(self) -> str:
        return q(self.o.request) if self.o.request is not None else "no prompt"


def overlap_words(at: OverlapAt) -> Words:
    """What an overlap means, by its signal (and, for O1 and O2, the tracker's ``why``)."""
    sig = at.o.signal
    if sig == "O1":
        if at.why == Why.NO_SLOT:
            return _o1_no_slot(at)
        if at.why == Why.BEFORE_ACK:
            return _o1_before_ack(at)
        return _o1_after_run(at)
    if sig == "O2":
        return _o2(at)
    if sig == "O3":
        return _o3(at)
    if sig == "O4":
        return _o4(at)
    if sig == "O5":
        return _o5_items(at) if at.o.detail.get("cause") == Cause.QUEUE_UPDATE else _o5_uncaused(at)
    if sig == "O6":
        return _o6(at)
    if sig == "aborted-without-stop":
        return _aborted_without_stop(at)
    return Words(f"{sig}", f"{sig} at observation {at.o.idx}: {at.o.to_json()}")


def _o1_no_slot(at: OverlapAt) -> Words:
    last = f" (the last prompt, {at.R}, had been released)" if at.o.request is not None else ""
    text = (
        f"a run ({at.run}) started at observation {at.o.idx} while no prompt was held{last}: "
        "something other than the bridge started it."
    )
    return Words(
        "O1: a run started while no prompt was held",
        text,
        [
            causes.extension(
                at.facts,
                at.gen,
                "an extension started work on its own (typically right after the previous prompt's agent_settled)",
            ),
            causes.other_writer("a prompt"),
            causes.version(at.facts),
        ],
    )


def _o1_before_ack(at: OverlapAt) -> Words:
    R = at.R
    text = (
        f"a run ({at.run}) started at observation {at.o.idx} after {R} was sent but before its ack: "
        f"Pi acks a prompt right before that prompt's agent_start, so this run is not {R}'s "
        "(or the ack was lost)."
    )
    found: list[dict[str, str]] = []
    stale = _stale_ack(at.window, at.o.request)
    if stale is not None:
        text += (
            f" The response just before it (#{stale[0]}) acknowledges prompt {q(stale[1])}, not "
            f"{R}: a stale ack, and the run that followed it is not {R}'s."
        )
        found.append(
            {
                "cause": f"a stale ack: the response at #{stale[0]} acknowledges prompt "
                f"{q(stale[1])}, not {R}, and a run followed it",
                "check": f"whether {q(stale[1])} was sent twice or its run was still going when "
                f"{R} was sent (the evidence above)",
            }
        )
    found += [
        causes.extension(at.facts, at.gen, "an extension started a run while the prompt waited"),
        causes.other_writer("a prompt"),
        causes.lost(at.facts),
    ]
    return Words("O1: a run started before the prompt's ack", text, found)


def _o1_after_run(at: OverlapAt) -> Words:
    tr = at.session.tracker
    own = tr.slot.run_id if tr.slot is not None else None
    own_run = tr.run_facts(own)
    settled = own_run.settle_idx if own_run is not None else None
    text = (
        f"a second run ({at.run}) started at observation {at.o.idx} while {at.R} was still held and already had "
        f"its own run ({own}"
        + (f", settled at #{settled}" if settled is not None else "")
        + "): the engine started more work by itself — the extension-started run the tracker exists for."
    )
    return Words(
        "O1: a second run after the prompt's own run",
        text,
        [
            causes.extension(at.facts, at.gen, "an extension reacted to the prompt's settle by starting a run"),
            causes.other_writer("a follow_up or a queued prompt"),
            causes.version(at.facts),
        ],
    )


def _o2(at: OverlapAt) -> Words:
    """O2 by the tracker's ``why``: the title is the ``why`` itself."""
    why = at.why
    if why == Why.NO_SLOT:
        text, found = _o2_no_slot(at)
    elif why == Why.BEFORE_ACK:
        text, found = _o2_before_ack(at)
    elif why == Why.SECOND_SETTLE:
        text, found = _o2_second_settle(at)
    elif why == Why.NOT_THE_SLOTS_RUN:
        return _o2_not_slots_run(at)
    elif why == Why.SLOT_MOVED_ON:
        return _o2_moved_on(at)
    else:
        text = f"an agent_settled at observation {at.o.idx} settled nothing of {at.R}'s ({why})."
        found = [causes.extension(at.facts, at.gen, "an extension's work"), causes.version(at.facts)]
    return Words(f"O2: {why}", text, found)


def _o2_no_slot(at: OverlapAt) -> tuple[str, list[dict[str, str]]]:
    text = (
        f"an agent_settled at observation {at.o.idx} settled nothing of ours: no prompt was held"
        + (f" (the last, {at.R}, had been released)" if at.o.request is not None else "")
        + (f" and it closed run {at.run}, not a prompt's" if at.run else " and no run was open")
        + ": a settle nobody asked for."
    )
    return text, [
        causes.extension(at.facts, at.gen, "an extension's own work settled"),
        causes.lost(at.facts),
        causes.version(at.facts),
    ]


def _o2_before_ack(at: OverlapAt) -> tuple[str, list[dict[str, str]]]:
    R = at.R
    text = (
        f"an agent_settled at observation {at.o.idx} arrived after {R} was sent but before its ack, with no "
        f"run open: it cannot be {R}'s settle — a late settle of earlier work or someone else's."
    )
    return text, [
        causes.other_writer("a prompt"),
        causes.extension(at.facts, at.gen, "an extension's work settled"),
        causes.lost(at.facts),
    ]


def _o2_second_settle(at: OverlapAt) -> tuple[str, list[dict[str, str]]]:
    R, idx = at.R, at.o.idx
    tr = at.session.tracker
    first = None
    if tr.slot is not None:
        slot_run = tr.run_facts(tr.slot.run_id)
        if slot_run is not None and slot_run.settle_idx not in (None, idx):
            first = slot_run.settle_idx
        else:
            first = tr.loose_settle_before(idx)
    text = (
        f"a second agent_settled at observation {idx} for {R}'s single ack"
        + (f" ({R} had already settled at #{first})" if first is not None else "")
        + (f", closing run {at.run}" if at.run else "")
        + ": the engine settled twice for one prompt."
    )
    return text, [
        causes.extension(at.facts, at.gen, "an extension ran and settled its own work"),
        causes.version(at.facts),
        causes.other_writer("a prompt"),
    ]


def _o2_not_slots_run(at: OverlapAt) -> Words:
    run = at.run
    facts = at.session.tracker.run_facts(run)
    start = facts.start_idx if facts is not None else None
    o1 = at.facts.o1_by_run.get(f"{at.gen}:{run}")
    text = (
        f"run {run}"
        + (f" (started at #{start}" if start is not None else "")
        + (f", the O1 of finding {o1})" if o1 is not None else (")" if start is not None else ""))
        + f" settled at observation {at.o.idx}: it was never {at.R}'s run, so this settle is someone else's "
        "work ending."
    )
    return Words(
        f"O2: {at.why}",
        text,
        [
            causes.extension(at.facts, at.gen, "the run's starter (see the O1 at its start)"),
            causes.other_writer("a prompt"),
        ],
        [o1] if o1 is not None else [],
    )


def _o2_moved_on(at: OverlapAt) -> Words:
    R, run, idx = at.R, at.run, at.o.idx
    owner = at.facts.displaced_runs.get(f"{at.gen}:{run}")
    if owner is not None:
        text = (
            f"{q(owner[0])}'s run ({run}) settled at observation {idx}, after the slot had moved on "
            f"to {R}, a second prompt written while {q(owner[0])} held it (finding {owner[1]}): the "
            "tracker cannot settle a slot on a run that is no longer the slot's."
        )
        found = [
            {
                "cause": "two prompts were on the engine at once",
                "check": f"the second prompt ({R}) and who sent it (finding {owner[1]})",
            }
        ]
        return Words(f"O2: {at.why}", text, found, [owner[1]])
    text = (
        f"{R}'s run ({run}) settled at observation {idx}, after the bridge had already released "
        f"{R} (it gave up waiting: a settle timeout or a grace expired): the settle came too late "
        "to count."
    )
    found = [
        {
            "cause": "the bridge gave up on the prompt before its run settled",
            "check": f"the receipt recorded for {R} just before its release (reason "
            "settle-timeout?) and the --timeout / --taint-grace settings; a slow model "
            "or a hung tool",
        },
        causes.lost(at.facts),
    ]
    return Words(f"O2: {at.why}", text, found)


def _o3(at: OverlapAt) -> Words:
    run = at.run
    facts = at.session.tracker.run_facts(run)
    open_starts = facts.open_starts if facts is not None else None
    text = (
        f"an agent_settled at observation {at.o.idx} arrived while run {run} still had "
        + (f"{open_starts} agent_start(s)" if open_starts is not None else "an agent_start")
        + " without agent_end: the settle does not close the run (it stays current), so "
        f"{at.R}'s outcome cannot be told."
    )
    return Words(
        "O3: a settle while the run still had an open agent_start",
        text,
        [
            causes.lost(at.facts, "an agent_end was lost"),
            causes.version(at.facts),
            causes.extension(at.facts, at.gen, "an extension's run interleaved with the prompt's"),
        ],
    )


def _o4(at: OverlapAt) -> Words:
    slot = at.session.tracker.slot
    ack = slot.ack_idx if slot is not None else None
    text = (
        f"{at.R} was acked"
        + (f" at #{ack}" if ack is not None else "")
        + f" and then an agent_settled at observation {at.o.idx} arrived with no agent_start and no failure "
        "message: the prompt settled without any run."
    )
    return Words(
        "O4: a settle after the ack with no run",
        text,
        [
            causes.extension(at.facts, at.gen, "an extension command or prompt template handled the prompt"),
            causes.lost(at.facts, "the run's agent_start was lost"),
            causes.version(at.facts),
        ],
    )


def _o5_items(at: OverlapAt) -> Words:
    steering, follow = at.value.get("steering"), at.value.get("followUp")
    ns = len(steering) if isinstance(steering, list) else 0
    nf = len(follow) if isinstance(follow, list) else 0
    text = (
        f"a queue_update with {at.o.detail.get('items')} queued item(s) at observation {at.o.idx} "
        f"(steering {ns}, followUp {nf}): someone sent steer/follow_up or a queued prompt — "
        "the sealed bridge sends none."
    )
    return Words(
        "O5: queued items someone else sent",
        text,
        [
            causes.other_writer("steer / follow_up, or a prompt while one was running"),
            causes.extension(at.facts, at.gen, "an extension queued a message"),
        ],
    )


def _o5_uncaused(at: OverlapAt) -> Words:
    clearing = ", ".join(at.facts.header.clearing) or "empty"
    text = (
        f"an empty queue_update at observation {at.o.idx} outside any clear window: no clear_queue of the "
        f"bridge was awaiting its response (the header's clearing list: {clearing}), so someone else "
        "cleared a queue, or the engine emptied its queue to deliver what was queued (a user message "
        "then follows)."
    )
    related: list[int] = []
    earlier = at.facts.o5_items.get(at.gen)
    if earlier is not None:
        related.append(earlier)
        text += f" The item(s) queued earlier on this engine (finding {earlier}) are likely being delivered."
    found = [
        causes.other_writer("clear_queue (or a queue being drained)"),
        {
            "cause": "the bridge's own clear_queue was not recognised",
            "check": f'the header\'s "clearing" list ({clearing}) and the clear_queue sends/responses in the evidence',
        },
    ]
    return Words("O5: an empty queue_update the bridge did not cause", text, found, related)


def _o6(at: OverlapAt) -> Words:
    held = at.session.held
    slot = at.session.tracker.slot
    first = held.working_idx if held is not None and slot is not None and slot.run_id == at.run else None
    text = (
        f"a second user message started at observation {at.o.idx} inside run {at.run}"
        + (f" (the first, {at.R}'s, at #{first})" if first is not None else "")
        + f": a steer/follow_up (or an extension) delivered another message into {at.R}'s run."
    )
    return Words(
        "O6: a second user message inside one run",
        text,
        [
            causes.other_writer("steer / follow_up (look for a queue_update before it)"),
            causes.extension(at.facts, at.gen, "an extension injected a user message"),
        ],
    )


def _aborted_without_stop(at: OverlapAt) -> Words:
    text = (
        f"an assistant message ended 'aborted' at observation {at.o.idx}"
        + (f" in run {at.run}" if at.run else " with no run open")
        + " while no stop of this controller was linked: something other than the bridge aborted it."
    )
    return Words(
        "aborted-without-stop: the run was aborted by someone else",
        text,
        [
            causes.other_writer("an abort"),
            causes.extension(at.facts, at.gen, "an extension aborted the run"),
            causes.version(at.facts),
        ],
    )


def _stale_ack(window: Window, request: Any) -> tuple[int, Any] | None:
    """The last prompt ack in the window that is not ``request``'s: (its index, its id)."""
    for kind, _line, _t, idx, value in reversed(window):
        if (
            kind == "recv"
            and isinstance(value, dict)
            and value.get("type") == "response"
            and value.get("command") == "prompt"
            and value.get("id") != request
            and idx is not None
        ):
            return idx, value.get("id")
    return None


# --------------------------------------------------------------------------
# A second prompt, gaps, dispositions, seal diagnostics


def second_prompt_words(held: PromptState, snap: dict[str, Any], new: Any, line: int) -> Words:
    """A prompt written while another still held the slot (only a deliberate send_raw does it)."""
    old = q(held.request)
    state = f"acked at #{held.ack_idx}" if held.ack_idx is not None else "not yet acked"
    if snap.get("run"):
        state += f", its run {snap['run']}"
    if held.working_idx is not None:
        state += f", working since #{held.working_idx}"
    text = (
        f"prompt {q(new)} was written (journal line {line}) while {old} still held the slot "
        f"({state}, no receipt yet): two prompts on one engine break the seal, so from here no run can be "
        f"told apart; {old} keeps its run and settles outcome-unknown on it."
    )
    return Words(
        f"a second prompt ({q(new)}) while {old} held the slot",
        text,
        [
            {
                "cause": "a prompt written around the bridge's queue: Bridge.send_raw (tests and "
                "seal-failure recordings do this on purpose) or a second writer on the "
                "engine's stdin",
                "check": "who sent it: the journal records it as a 'bridge sent' entry, so it came "
                "through the bridge's own send path; look for send_raw in the controller",
            },
            causes.other_writer("a prompt"),
        ],
    )


def word_gap(f: Finding, facts: Facts) -> None:
    """Title, explanation and causes of a gap finding, from its ``detail`` (worded again when the
    live bridge's own ``gap`` signal names a better why)."""
    why = f.detail.get("why")
    idx = f.idx
    size = f.detail.get("bytes")
    words = _GAP_WORDS.get(why, why) if isinstance(why, str) else why
    f.title = f"gap: observation {idx} was not a JSON object ({words})"
    f.explanation = (
        f"observation {idx} was not a JSON object ({words}"
        + (f", {size} bytes" if size else "")
        + "): lines may be missing from here on; "
        "no receipt on this engine settles on evidence after it."
    )
    if why == "oversize":
        first = {
            "cause": "one line longer than the line limit (a huge tool output or message list)",
            "check": "the line's size above and the bridge's line limit (64 MiB by default); the tool that produced it",
        }
    elif why == "invalid-utf8":
        first = {
            "cause": "bytes that are not UTF-8 on the engine's stdout (binary tool output, a broken encoder)",
            "check": "the replaced characters (U+FFFD) in the line; what the running tool printed",
        }
    elif why == "not-object":
        first = {
            "cause": "something wrote a bare JSON value (not an object) to the engine's stdout",
            "check": "extensions or libraries printing to stdout; the engine version",
        }
    else:
        first = {
            "cause": "something printed non-JSON text to the engine's stdout (debug output from the engine, "
            "an extension or a library), or a line was cut",
            "check": "the text of the line above and the stderr lines around that time",
        }
    f.causes = [first, causes.extension(facts, f.generation, "an extension printing to stdout"), causes.version(facts)]


def disposition_words(d: DispositionSignal, facts: Facts, gen: int) -> Words:
    """An ack whose disposition is not ``started``: queued behind other work, handled, or unknown."""
    R = q(d.request)
    disp = d.disposition
    if disp == "queued":
        text = (
            f"{R}'s ack at observation {d.idx} said disposition 'queued', not 'started': Pi queued the prompt "
            "behind other work, so something was already running that the bridge did not start."
        )
        found = [
            causes.other_writer("a prompt (its run was going)"),
            causes.extension(facts, gen, "an extension's run was in progress"),
        ]
    elif disp == "handled":
        text = (
            f"{R}'s ack at observation {d.idx} said disposition 'handled', not 'started': Pi handled the "
            "prompt without a run (an extension command or a prompt template consumed it)."
        )
        found = [
            causes.extension(facts, gen, "an extension command or a prompt template"),
            {
                "cause": "the prompt text looks like a command",
                "check": "whether the prompt text starts with '/' (Pi treats it as a command)",
            },
        ]
    else:
        text = (
            f"{R}'s ack at observation {d.idx} carried disposition {short(disp)}, not 'started': "
            "a disposition the pinned Pi does not send."
        )
        found = [causes.version(facts)]
    shown = short(disp) if not isinstance(disp, str) else repr(disp)
    return Words(f"disposition: {R} was acked {shown}, not 'started'", text, found)


def diagnostic_words(diag: Diagnostic, facts: Facts, gen: int) -> Words:
    """An extension dialog (answered ``cancelled``) or an extension error: an extension is loaded."""
    if diag.kind == "extension-ui":
        method = diag.detail.get("method")
        text = (
            f"an extension_ui_request (method {short(method)}, id {short(diag.detail.get('id'))}) at "
            f"observation {diag.idx}: an extension is loaded in the engine and asked the UI for something"
        )
        text += " — the bridge answered the dialog 'cancelled'." if diag.answer is not None else "."
    else:
        text = (
            f"an extension_error at observation {diag.idx} ({short(diag.detail.get('error'), 120)}): an "
            "extension is loaded in the engine and failed."
        )
    return Words(
        f"seal diagnostic: {diag.kind}",
        text,
        [causes.extension(facts, gen, "an extension is loaded despite the seal")],
    )
