"""The words of a receipt worth a finding: an uncertain one, or a run the bridge stopped itself.

Rules (SPEC section 5): a receipt gets a finding when a controller cannot act on it without doubt
(:data:`UNCERTAIN`: ``pending``, ``delivery-unknown``, ``outcome-unknown``) or when it is
``failed`` with a reason of :data:`BRIDGE_STOPS` (the bridge, not the controller, stopped the run:
``timeout``, ``closing``, ``stalled`` or ``budget``), and when it is ``rejected``/``config`` (the model or thinking
level the prompt asked for was refused or not confirmed: docs: guide/steering.md; nothing else says why a
prompt was never written). A pending receipt says why the transcript does not finish the prompt's
story; a bridge stop says which stop, why (its ``stop`` note) and what made the bridge close (its
``closing`` note); a configuration says what was asked (its ``configure`` note), Pi's words (the
refusing answer, the ``get_state`` after it) and the ``configured`` note's problem; any other says what
the evidence shows for its reason, one step per reason.
"""

from __future__ import annotations

from typing import Any, Final

import attrs

from bridge.core.receipts import Receipt
from bridge.core.steering import from_state
from bridge.core.tracker import RunFacts
from bridge.readers.diagnose import causes
from bridge.readers.diagnose.facts import Facts
from bridge.readers.diagnose.findings import Finding, Window, Words
from bridge.readers.diagnose.render import exit_words, fmt_t, q, short
from bridge.transcript import Entry

#: States a controller cannot act on without doubt: each gets a finding.
UNCERTAIN: Final = frozenset({"pending", "delivery-unknown", "outcome-unknown"})
#: Reasons of a ``failed`` receipt whose run the bridge itself stopped (SPEC section 5):
#: each gets a finding too. They are also the ``by`` of the bridge's ``stop`` notes.
BRIDGE_STOPS: Final = frozenset({"timeout", "closing", "stalled", "budget"})


def explained(r: Receipt) -> bool:
    """Whether a receipt gets a finding: it is uncertain, the bridge stopped its run itself, or
    the configuration it asked for was not applied."""
    return (
        r.state in UNCERTAIN
        or (r.state == "failed" and r.reason in BRIDGE_STOPS)
        or (r.state == "rejected" and r.reason == "config")
    )


@attrs.frozen
class ReceiptAt:
    """A receipt with what its words need.

    ``entry`` is the entry that produced it (None at the end of the file); ``run`` the tracker's
    facts of its run; ``recorded`` the receipt the live bridge journalled for it, if any;
    ``findings`` the findings so far (a tainted receipt points to the signals that tainted it).
    """

    r: Receipt
    facts: Facts
    gen: int
    entry: Entry | None
    at_end: bool
    run: RunFacts | None
    recorded: dict[str, Any] | None
    findings: list[Finding]
    window: Window

    @property
    def R(self) -> str:
        return q(self.r.request)

    @property
    def acked(self) -> str:
        return f"acked at #{self.r.ack_idx}" if self.r.ack_idx is not None else "never acked"

    @property
    def settled(self) -> str:
        return f" settled at #{self.r.settle_idx}" if self.r.settle_idx is not None else ""


def receipt_words(at: ReceiptAt) -> Words:
    """The title and words of a receipt's finding."""
    r, R = at.r, at.R
    if r.state == "pending":
        words = _pending(at) if at.at_end else _released_pending(at)
        return attrs.evolve(words, title=f"receipt: {R} is pending")
    if r.state == "rejected":
        words = _config(at)
        return attrs.evolve(
            words, title=f"receipt: {R}: rejected (config): what it asked for was not applied, so it was never sent"
        )
    if r.reason in BRIDGE_STOPS:
        words = _bridge_stop(at)
        return attrs.evolve(
            words, title=f"receipt: {R}: {r.state} ({r.reason}): stopped by the bridge, not the controller"
        )
    return attrs.evolve(_uncertain(at), title=f"receipt: {R}: {r.state} ({r.reason})")


# --------------------------------------------------------------------------
# Pending: the transcript does not finish the prompt's story


def _released_pending(at: ReceiptAt) -> Words:
    r, R = at.r, at.R
    text = (
        f"{R} was released at {fmt_t(at.entry.t if at.entry else None)} with no receipt recorded before "
        f"the release and no settlement in the evidence ({at.acked}"
        + (f", working since #{r.working_idx}" if r.working_idx is not None else "")
        + "): its outcome is not known from this transcript."
    )
    return Words(
        "",
        text,
        [
            {
                "cause": "the bridge gave up on the prompt (a timeout or a grace) and the journal "
                "holds no receipt for it",
                "check": "a receipt entry for the request elsewhere in the journal; the bridge's "
                "--timeout / --ack-timeout settings; an O2 'after the slot moved on' later",
            }
        ],
    )


def _pending(at: ReceiptAt) -> Words:
    r, R, recorded = at.r, at.R, at.recorded
    text = (
        f"the transcript ends while {R} is still open ({at.acked}"
        + (f", working since #{r.working_idx}" if r.working_idx is not None else ", not working")
        + (f", run {r.run}" if r.run else "")
        + ", no settle seen): "
        + (
            "the journal's last line was cut off (the bridge died mid-write)."
            if at.facts.truncated
            else "the bridge was stopped, or the journal ends early."
        )
    )
    if recorded is not None:
        text += (
            f" The live bridge recorded a receipt for it: {recorded.get('state')}"
            + (f" ({recorded.get('reason')})" if recorded.get("reason") else "")
            + "."
        )
    found = [
        {
            "cause": "the journal ends before the prompt's story does",
            "check": "whether the bridge was killed (no 'bridge-closed' note at the end), the "
            "engine's last stderr lines, and the disk the journal was on",
        }
    ]
    end = at.facts.journal_end
    return Words("", text, found, [end.n] if end is not None else [])


# --------------------------------------------------------------------------
# A run the bridge stopped itself


def _bridge_stop(at: ReceiptAt) -> Words:
    """Which stop, why, when, and what to change."""
    r, R, facts = at.r, at.R, at.facts
    note = facts.stop_note(r.stop)
    why = stop_why(note, r.reason)
    stop = f" {q(r.stop)}" if r.stop is not None else ""
    when = (
        f" (journal line {note['line']}, {fmt_t(note['t'])})"
        if note is not None
        else " (the journal has no stop note for it)"
    )
    text = (
        f"the bridge itself stopped {R}'s run"
        + (f" ({r.run})" if r.run else "")
        + f", not the controller: it sent its own stop{stop}{when} because {why}."
    )
    text += (
        f" The run ended aborted and settled at #{r.settle_idx}."
        if r.settle_idx is not None
        else " The journal shows no settle of the run before the bridge gave its receipt."
    )
    if r.reason == "timeout":
        return Words("", text, [causes.timeout(facts, why)])
    if r.reason == "stalled":
        return Words("", text, [causes.stalled()])
    if r.reason == "budget":
        return Words("", text, [causes.budget()])
    text += " " + facts.closing_words()
    failed = facts.journal_failed
    related = [failed.n] if failed is not None and facts.closing_why() == "journal" else []
    return Words("", text, [causes.closing(facts)], related)


def stop_why(note: dict[str, Any] | None, reason: str | None) -> str:
    """Why the bridge sent a stop: its note's words, else the receipt's reason in words."""
    why = note.get("why") if note is not None else None
    if isinstance(why, str) and why.strip():
        return short(why.strip(), 300).rstrip(".")
    if reason == "stalled":
        return "the run showed nothing for the stall timeout while it waited on the model"
    if reason == "budget":
        return "the prompt's spend passed its budget"
    return "a timeout passed" if reason == "timeout" else "the bridge was closing"


# --------------------------------------------------------------------------
# A configuration not applied (rejected/config)

#: The configuration commands whose refusal a ``rejected``/``config`` receipt quotes.
_CONFIG_COMMANDS: Final = ("set_model", "set_thinking_level", "new_session", "get_state")


def _config(at: ReceiptAt) -> Words:
    """What the prompt asked for, Pi's words, what the engine kept, and the bridge's verdict."""
    r, R = at.r, at.R
    notes = at.facts.config_notes(r.request)
    configure, configured = notes.get("configure"), notes.get("configured")
    problem = configured["note"].get("problem") if configured is not None else None
    problem = problem if isinstance(problem, str) and problem else r.native_error or "no reason recorded"
    text = f"{R} asked for {_asked(configure)}"
    if configure is not None:
        text += f" (its configure note, journal line {configure['line']}, {fmt_t(configure['t'])})"
    refusal, state = _config_answers(at.window, configure["line"] if configure is not None else 0)
    if refusal is not None:
        idx, value = refusal
        error = short(value.get("error") or "no reason given", 200)
        text += f" and was never written to the engine: Pi refused {value.get('command')} at #{idx}: {error!r}."
    else:
        text += f" and was never written to the engine: {short(problem, 300).rstrip('.')}."
    if state is not None:
        text += f" The engine kept {state[1]} (get_state at #{state[0]})."
    if configured is not None:
        text += f" The bridge's configured note (journal line {configured['line']}) records the problem."
    else:
        text += " The journal has no configured note for it: the configuration did not finish."
    return Words("", text, _config_causes(problem, at.facts))


def _asked(configure: dict[str, Any] | None) -> str:
    """What a ``configure`` note's ``wanted`` asks for, in words."""
    note: dict[str, Any] = configure["note"] if configure is not None else {}
    raw = note.get("wanted")
    wanted: dict[str, Any] = raw if isinstance(raw, dict) else {}
    parts = []
    if wanted.get("model") is not None:
        parts.append(f"model {short(wanted.get('provider'), 60)}/{short(wanted.get('model'), 80)}")
    if wanted.get("thinking") is not None:
        parts.append(f"thinking level {short(wanted.get('thinking'), 20)}")
    if note.get("new_conversation"):
        parts.append("a new conversation")
    return " and ".join(parts) if parts else "a configuration (the journal has no configure note saying which)"


def _config_answers(window: Window, after: int) -> tuple[tuple[Any, dict[str, Any]] | None, tuple[Any, str] | None]:
    """From the entries before the receipt and after journal line ``after`` (its configure note):
    Pi's last refusing answer to a configuration command (index, answer), and the model and level
    the last ``get_state`` of the configuration showed (index, words)."""
    refusal: tuple[Any, dict[str, Any]] | None = None
    state: tuple[Any, str] | None = None
    for kind, line, _t, idx, value in window:
        if line <= after or kind != "recv" or not isinstance(value, dict) or value.get("type") != "response":
            continue
        if not str(value.get("id", "")).startswith("cfg-") or value.get("command") not in _CONFIG_COMMANDS:
            continue
        if value.get("success") is not True:
            refusal = (idx, value)
        elif value.get("command") == "get_state":
            got = from_state(value.get("data"))
            if got is not None:
                state = (idx, f"{got.provider}/{got.model}, thinking {got.thinking}")
    return refusal, state


def _config_causes(problem: str, facts: Facts) -> list[dict[str, str]]:
    """The likely causes of a configuration not applied, by the problem's words (steering's ``verify``
    and the lifecycle's deadlines)."""
    if problem.startswith("Pi refused"):
        return [
            {
                "cause": "Pi does not know what was asked (a model id not among the ones it offers, a provider "
                "without a key) or cannot apply it",
                "check": 'bridge models (or serve\'s {"type":"models"}) lists the exact provider/id pairs Pi '
                "offers; the prompt's provider/model/thinking fields or the controller's configure",
            }
        ]
    if "with success but get_state shows" in problem:
        return [
            {
                "cause": "Pi answered the command with success and did not apply it (hosts have seen this of "
                "set_thinking_level)",
                "check": "the get_state answer in the evidence against what was asked; whether the model offers "
                "the level (get_available_thinking_levels)",
            },
            causes.version(facts),
        ]
    return [
        {
            "cause": "the engine did not answer its configuration in time, or stopped reading its stdin",
            "check": "the bridge's --ack-timeout, the engine's stderr lines around then, and an exit after it",
        }
    ]


# --------------------------------------------------------------------------
# delivery-unknown and outcome-unknown, by reason


def _uncertain(at: ReceiptAt) -> Words:
    reason = at.r.reason
    if reason in ("overlap", "gap", "disposition") or (reason == "aborted-without-stop" and at.r.signals):
        return _tainted(at)
    if reason == "aborted-without-stop":
        return _aborted_without_stop(at)
    if reason == "ack-without-start":
        return _ack_without_start(at)
    if reason == "no-final-assistant-message":
        return _no_final_message(at)
    if reason == "unrecognised-stop-reason":
        return _unrecognised_stop(at)
    if reason == "engine-exited":
        return _engine_exited(at)
    if reason == "no-ack":
        return _no_ack(at)
    if reason == "settle-timeout":
        return _settle_timeout(at)
    return Words("", f"{at.R}: {at.r.state} ({reason}).")


def _unsettled(at: ReceiptAt) -> str:
    """How a run that did not settle ended: cut off by an exit, or given up on."""
    if at.entry is not None and at.entry.kind == "exit":
        return " was cut off when the engine exited"
    return " had not settled when the bridge gave up"


def _tainted(at: ReceiptAt) -> Words:
    """The engine was unsealed (an overlap, a gap, a disposition): whose work the run showed is unknown."""
    r, R, run, reason = at.r, at.R, at.r.run, at.r.reason
    settled = at.settled
    related: list[int] = []
    sigs = [s for s in r.signals if s.get("signal") not in ("seal-diagnostic",)]
    if sigs:
        named = ", ".join(f"{s.get('signal')} at #{s.get('idx')}" for s in sigs)
        if run is None and not settled:
            text = (
                f"{R}'s evidence is tainted by {named}, and {R} never had a run of its own"
                + (" (its ack said 'handled')" if r.disposition == "handled" else "")
                + ": the bridge settled it after the taint grace, outcome unknown."
            )
        else:
            text = (
                f"{R}'s evidence is tainted by {named}: its run"
                + (f" ({run})" if run else "")
                + (settled or _unsettled(at))
                + ", but the bridge cannot tell whose work it saw, so the outcome "
                "is unknown."
            )
        for s in sigs:
            for f in at.findings:
                if f.idx == s.get("idx") and f.signal == s.get("signal") and f.n not in related:
                    related.append(f.n)
        first = at.facts.taint_finding
        if first is not None and first[0] == at.gen and first[1] not in related:
            related.insert(0, first[1])
            text += f" The engine was unsealed first by finding {first[1]}."
    else:
        taint = at.facts.taint_finding
        first = taint if taint and taint[0] == at.gen else None
        text = (
            f"the engine was already unsealed ({reason}) when {R} was sent"
            + (f" — see finding {first[1]}" if first else "")
            + f": {R}'s run"
            + (f" ({run})" if run else "")
            + (settled or _unsettled(at))
            + " on evidence that can no longer be trusted."
        )
        if first:
            related.append(first[1])
    found = [
        {
            "cause": f"the {reason} signal(s) named above",
            "check": "the findings listed as related, and why the engine was not recycled before "
            f"{R} (a journal replayed on one engine keeps the taint)",
        }
    ]
    return Words("", text, found, related)


def _aborted_without_stop(at: ReceiptAt) -> Words:
    r, R, run = at.r, at.R, at.r.run
    last = at.run.last_stop if at.run is not None else None
    text = (
        f"{R}'s run" + (f" ({run})" if run else "") + f"{at.settled} after an assistant message that ended "
        f"'{last or 'aborted'}', and at the settle no stop of this controller was linked"
        + (f" (the bridge had sent stop {q(r.stop)}, but the link was cleared before the settle)" if r.stop else "")
        + ": nobody known aborted it."
    )
    cleared = next(
        (
            it
            for it in reversed(at.window)
            if it[0] == "send" and isinstance(it[4], dict) and it[4].get("type") == "abort" and it[4].get("id") is None
        ),
        None,
    )
    if cleared is not None:
        text += f" An abort with no id (journal line {cleared[1]}) cleared the link."
    found = [
        {
            "cause": "the stop link was cleared before the settle (an abort with no id, or a release)",
            "check": "the abort commands the bridge sent (their ids) between the message and the settle",
        },
        causes.other_writer("an abort"),
    ]
    return Words("", text, found)


def _ack_without_start(at: ReceiptAt) -> Words:
    R, run, settled = at.R, at.r.run, at.settled
    if run is None:
        text = (
            f"{R} was {at.acked} and then the engine wrote a failure message with no run and"
            f"{settled or ' settled'}: the prompt failed before any run, so the model never got it."
        )
    else:
        text = (
            f"{R} was {at.acked} and its run ({run}){settled} without ever showing {R}'s user message: "
            "there is no evidence the model got the prompt."
        )
    found = [
        {
            "cause": "the engine failed before the model was called (provider set-up, auth, a bad model "
            "id) or a retry ran without the user message",
            "check": "the error message in the evidence and the stderr lines before it",
        },
        causes.version(at.facts),
    ]
    return Words("", text, found)


def _no_final_message(at: ReceiptAt) -> Words:
    R = at.R
    text = (
        f"{R}'s run ({at.r.run}){at.settled}; it showed {R}'s user message (working at #{at.r.working_idx}) but no "
        "assistant message ended in it: the model's answer is unknown."
    )
    return Words("", text, [causes.lost(at.facts, "the assistant message_end was lost"), causes.version(at.facts)])


def _unrecognised_stop(at: ReceiptAt) -> Words:
    last = at.run.last_stop if at.run is not None else None
    text = (
        f"the last assistant message of {at.R}'s run ({at.r.run}) ended with stopReason "
        f"{repr(last) if isinstance(last, str) else '(unknown)'}, which is none of stop, length, toolUse, "
        f"error, aborted; the run{at.settled}."
    )
    found = [
        causes.version(at.facts),
        {
            "cause": "a provider returning a stop reason Pi passes through",
            "check": "the provider and model in the header's seal",
        },
    ]
    return Words("", text, found)


def _engine_exited(at: ReceiptAt) -> Words:
    r, R, run = at.r, at.R, at.r.run
    ex = at.facts.last_exit or {}
    how = exit_words(ex.get("code"), ex.get("signal")) if ex else "an exit"
    when = fmt_t(ex.get("t")) if ex else "?"
    if r.state == "outcome-unknown":
        text = (
            f"the engine exited ({how}) at {when} while {R}'s run"
            + (f" ({run})" if run else "")
            + f" was working (since #{r.working_idx}): the run's outcome is lost."
        )
    else:
        text = f"the engine exited ({how}) at {when} before {R} was working ({at.acked}): no evidence the model got it."
    return Words("", text, [causes.engine_exit(ex)], [ex["finding"]] if ex.get("finding") else [])


def _no_ack(at: ReceiptAt) -> Words:
    text = (
        f"{at.R} was sent but no ack arrived before the bridge stopped waiting (the ack timeout): no "
        "evidence the engine took it."
    )
    found = [
        {
            "cause": "the engine was busy or hung (an extension dialog waiting for an answer, a stuck start-up)",
            "check": "the bridge's --ack-timeout and the stderr lines around then",
        },
        causes.lost(at.facts, "the ack was lost"),
    ]
    return Words("", text, found)


def _settle_timeout(at: ReceiptAt) -> Words:
    r, run = at.r, at.r.run
    text = (
        f"the bridge stopped waiting for {at.R}'s run"
        + (f" ({run})" if run else "")
        + f" to settle ({at.acked}"
        + (f", working since #{r.working_idx}" if r.working_idx else "")
        + "): the settle timeout fired, the bridge sent its stop and recycled the engine."
    )
    found = [
        {
            "cause": "a slow model or a tool that did not finish",
            "check": "the bridge's --timeout and the last observations before the timeout",
        }
    ]
    return Words("", text, found)
