"""The words of what only a live bridge's journal records: seal checks, engine exits, engine-down, a
journal that could not be written, one that ends before the bridge closed, and the extension
dialogs the controller was asked (their ``dialog`` / ``dialog-end`` notes).

Rules: replay cannot recompute any of these, so the words say only what the journal's notes,
signals and exit entries hold (their times, lines, stderr tails and errors), and point to the
findings they follow from. A journal failure costs no receipt (SPEC section 7): the words say so.
"""

from __future__ import annotations

from typing import Any, Final

from bridge.readers.check import Contradiction
from bridge.readers.diagnose import causes
from bridge.readers.diagnose.facts import Facts
from bridge.readers.diagnose.findings import Words
from bridge.readers.diagnose.render import exit_words, fmt_t, short

#: How the start-up check's model problems begin (``bridge.profiles.seal``, rule 9).
MODEL_PROBLEMS: Final = ("Pi does not offer --model ", "--model ")


def seal_check_words(facts: Facts, gen: Any, problems: list[Any], *, noted: bool) -> Words:
    """A seal check with problems: from the ``seal-check`` note (``noted``) or, with no note, the
    bridge's ``seal-check`` signal."""
    found = "; ".join(str(p) for p in problems)
    at = f"at engine start (generation {gen})" if noted else "at engine start"
    likely = [
        causes.extension(facts, gen, "extensions or resources the seal should have kept out"),
        causes.version(facts),
    ]
    if any(str(p).startswith(MODEL_PROBLEMS) for p in problems):
        likely.insert(0, causes.model_asked(facts))
    return Words(f"seal check failed for engine generation {gen}", f"the seal check {at} found: {found}.", likely)


def seal_check_action(action: Any) -> str:
    """What the bridge did about a failed seal check (its ``--seal-check`` setting)."""
    return f"the bridge's seal-check setting was '{action}': " + (
        "it refused the engine (what came of it, another engine or the bridge down, follows)."
        if action == "refuse"
        else "it warned and used the engine anyway."
    )


def engine_exit_words(value: dict[str, Any], ex: dict[str, Any], generation: int, t: float | None) -> Words:
    """An engine that exited with an error code or a signal (``value``: the entry's value; ``ex``: the
    exit as remembered, with the stderr tail before it)."""
    code, sig = value.get("code"), value.get("signal")
    how = exit_words(code, sig)
    text = f"the engine (generation {generation}) exited: {how}, at {fmt_t(t)}."
    if sig == 15:
        text += (
            " SIGTERM is the bridge's second step when an engine does not exit after its stdin closes — "
            "or something else stopped it."
        )
    elif sig == 9:
        text += " SIGKILL: the bridge's last resort, the OOM killer, or someone else."
    elif code not in (0, None):
        text += " A non-zero code: the engine failed (a crash, an unhandled error)."
    tail = ex.get("stderr") or []
    if tail:
        text += " Its last stderr lines: " + " | ".join(short(s["text"], 120) for s in tail if s["text"].strip()) + "."
    return Words(f"engine exit: {how}", text, [causes.engine_exit(ex)])


def engine_down_words(facts: Facts, why: Any) -> Words:
    """The bridge stopped starting engines (its ``engine-down`` signal)."""
    return Words(
        "engine down: the bridge gave up on the engine",
        f"the bridge stopped starting engines: {short(why, 400)}. Every prompt after this is rejected (engine-down).",
        [
            causes.engine_exit(facts.last_exit or {}),
            causes.version(facts),
            {
                "cause": "the engine cannot be launched (a missing install, a bad model config)",
                "check": "run tools/setup/setup_pi; the error text above",
            },
        ],
    )


def journal_failed_words(error: str, t: float | None) -> Words:
    """The bridge's ``journal-failed`` note: what failed, and that no receipt was lost to it."""
    text = (
        f"the bridge could not write its journal at {fmt_t(t)}: {error}. A journal "
        "failure costs no receipt: the bridge told its controller at once and closed (a running prompt is "
        "stopped: failed, closing), and every prompt still got its receipt on the controller's side; this "
        "journal may hold nothing after this point."
    )
    return Words("journal failed: the bridge could not write its journal", text, [causes.journal(error)])


def journal_ends_words(facts: Facts, unsettled: int) -> Words:
    """A live bridge's journal with no ``bridge-closed`` note at its end (``unsettled``: prompts sent
    with no receipt in it)."""
    text = (
        "the journal ends before the bridge closed: the bridge was killed, or its journal could not be "
        "written (a full disk, an I/O error); receipts after this point reached the controller only."
    )
    if facts.truncated:
        text += " Its last line was cut off mid-write."
    failed = facts.journal_failed
    if failed is not None:
        text += f" The bridge noted why its journal failed (finding {failed.n}): {facts.journal_error}."
    if unsettled:
        text += f" {unsettled} prompt(s) sent have no receipt in it (pending, below)."
    return Words(
        "journal ends before the bridge closed (no bridge-closed note)",
        text,
        causes.journal_end(facts),
        [failed.n] if failed is not None else [],
    )


#: Who gave a dialog its one response (the ``dialog-end`` note's ``by``), in words.
_DIALOG_BY: dict[str, str] = {
    "timeout": "cancelled by its timeout",
    "stop": "cancelled by the prompt's stop (before the abort was sent)",
    "receipt": "cancelled when its prompt got its receipt",
    "engine-stop": "cancelled as the bridge stopped the engine",
    "engine-exit": "never answered: the engine exited first (nothing waited for an answer any more)",
    "closing": "cancelled as the bridge closed",
    "no-controller": "cancelled at once: nobody was reading dialogs (bridge run, or an API user without "
    "Bridge.dialogs())",
}


def dialog_answer_words(by: Any, answer: Any) -> str:
    """Who answered a dialog, and what: ``answered by the controller: confirmed``."""
    if by != "controller":
        return _DIALOG_BY.get(str(by), f"ended by {short(by)}")
    answer = answer if isinstance(answer, dict) else {}
    if answer.get("cancelled"):
        return "cancelled by the controller"
    if "confirmed" in answer:
        return "answered by the controller: " + ("confirmed" if answer["confirmed"] else "declined")
    return f"answered by the controller: {short(answer.get('value'), 80)}"


def dialog_words(opened: dict[str, Any] | None, end: dict[str, Any]) -> Words:
    """One extension dialog, from its ``dialog`` note (``opened``; None if the journal lost it)
    and its ``dialog-end`` note: what was asked, for which prompt, and who answered."""
    opened = opened or {}
    dialog = short(end.get("dialog"))
    method = short(opened.get("method", "?"))
    title = opened.get("title")
    asked = f"{method} {short(title, 80)!s}" if title else method
    request = opened.get("request")
    whose = f"prompt {short(request)}" if request is not None else "no prompt (between prompts)"
    said = dialog_answer_words(end.get("by"), end.get("answer"))
    text = f"an extension asked the controller {dialog} ({asked}) during {whose}; {said}."
    if opened.get("timeout") is not None:
        text += f" The controller had {opened['timeout']:g} s to answer."
    text += " Exactly one extension_ui_response went to the engine for it (the bridge's rule)."
    if end.get("by") == "engine-exit":
        text = text.replace("Exactly one extension_ui_response went", "No extension_ui_response could go")
    return Words(f"dialog {dialog} ({method}): {said}", text)


#: What a contradiction's kind means, in a finding's title.
CONTRADICTION_TITLES: Final = {
    "receipt-differs": "the journal contradicts itself: {request}'s recorded receipt is not what its evidence gives",
    "answer-to-unsent": "the journal contradicts itself: a response answers a command it never sent",
    "receipt-without-send": "the journal contradicts itself: {request} has a delivered receipt and no send",
    "release-without-receipt": "the journal contradicts itself: {request} was released with no receipt recorded",
    "receipt-invalid": "the journal contradicts itself: {request}'s recorded receipt is no receipt's verdict",
    "cut-short": "the journal was cut short: {request} was sent and no receipt recorded for it",
}


def contradiction_words(c: Contradiction) -> Words:
    """One of ``bridge replay --check``'s contradictions as a finding's words."""
    # Why a journal should agree with itself is the cause's, said once in a report (later
    # contradictions refer to it), not each finding's.
    cause = {
        "cause": "entries removed or changed by hand or by a tool, two journals joined, a journal cut in the "
        "middle, or a bridge with a bug: a live bridge decides every receipt from the evidence it journals "
        "(or, after a deadline, from no more than it), so a journal it wrote whole agrees with itself",
        "check": "bridge replay --check on the original file; the lines named here",
    }
    return Words(CONTRADICTION_TITLES[c.kind].format(request=c.request), f"{c.words}.", [cause])
