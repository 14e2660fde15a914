"""The likely causes of a finding, each with what to check: built from what the journal recorded.

Rules: a cause never guesses past the evidence; its ``check`` names where to look and, when the
journal holds it, what is there (the header's pin and seal, the seal-check note of that engine
generation, the gaps and stderr lines so far, the exit, the bridge's closing note). Each returns
``{"cause": ..., "check": ...}``, the form ``--json`` prints. Only the order of the causes a finding
lists is decided elsewhere (most likely first).
"""

from __future__ import annotations

from typing import Any

from bridge.readers.diagnose.facts import Facts
from bridge.readers.diagnose.render import exit_words, fmt_t, short


def extension(facts: Facts, gen: Any, cause: str) -> dict[str, str]:
    """An extension (or skill, or prompt template) in engine generation ``gen``: what the seal says."""
    if facts.seal is None:
        where = (
            f"the journal header records no seal (engine {short(facts.engine)}): nothing kept extensions, "
            "skills or prompt templates out"
        )
    else:
        ext = facts.seal.get("extensions")
        where = (
            f"the journal header's seal.extensions lists {short(ext)}: the seal was deliberately opened"
            if ext
            else "the journal header's seal.extensions is empty (none loaded on purpose)"
        )
    problems = facts.seal_checks.get(gen)
    if problems is None:
        check = f"no seal-check note for engine generation {gen}"
    elif problems:
        check = f"the seal-check note for generation {gen} found: " + "; ".join(map(str, problems))
    else:
        check = f"the seal-check note for generation {gen} found no problem"
    seen = (
        f"; {facts.ext_seen} extension_ui_request / extension_error line(s) so far"
        if facts.ext_seen
        else "; no extension_ui_request / extension_error line so far"
    )
    return {"cause": cause, "check": f"{where}; {check}{seen}"}


def model_asked(facts: Facts) -> dict[str, str]:
    """The start-up check found the engine not running the model asked for (seal rule 9)."""
    seal = facts.seal or {}
    asked = f"{seal.get('provider')}/{seal.get('model')}" if seal.get("provider") else seal.get("model")
    return {
        "cause": "the model asked for is not one Pi offers by exactly that id (a misspelt id Pi would run as a "
        "custom model id, a loose match, a provider without a key)",
        "check": f"the header's seal asked for {short(asked, 120)}; bridge models lists the exact provider/id pairs "
        "Pi offers; a model Pi's catalog lacks goes into a --models-json file",
    }


def timeout(facts: Facts, why: str) -> dict[str, str]:
    """The bridge's own timeout stopped a run: the prompt's timeout, or the drain's bound."""
    if "drain" in why.lower() or facts.closing_why() == "drain-timeout":
        return {
            "cause": "the bridge was shutting down and the run outlasted the drain's bound",
            "check": "raise --drain-timeout so running prompts can finish when the bridge shuts down (after a "
            "shutdown command or the end of its input)",
        }
    return {
        "cause": "the run took longer than the prompt's timeout",
        "check": 'raise --timeout (or the prompt\'s "timeout") if the run needs longer; otherwise the last '
        "observations before the stop (a slow model, a tool that did not finish)",
    }


def budget() -> dict[str, str]:
    """The bridge's budget stopped a run whose spend passed the prompt's budget or the bridge's total
    (the stop note's words say which, and the spend)."""
    return {
        "cause": "the run's model calls cost more than its budget allowed: a model that kept calling tools, "
        "a long conversation resent at every call, retries or a compaction",
        "check": 'raise the prompt\'s "budgetUsd" / "budgetTokens" (or --budget-usd, --total-budget-usd) if the '
        "work is worth it; otherwise the tool calls before the stop (docs: guide/budgets-and-traces.md)",
    }


def stalled() -> dict[str, str]:
    """The bridge's stall detection stopped a run that went quiet while it waited on the model."""
    return {
        "cause": "the model's provider accepted the request and then sent nothing (no token, no error) for "
        "the stall timeout, or a model thinks that long before its first token",
        "check": "the provider's status and the engine's stderr around the stop; raise --stall-timeout (or "
        'the prompt\'s "stallTimeout") for a model that is silent that long by design, 0 turns it off',
    }


def closing(facts: Facts) -> dict[str, str]:
    """The bridge stopped a run because it was closing: what its first closing note says made it close."""
    why = facts.closing_why()
    if why == "signal":
        return {
            "cause": "the bridge was sent a signal while the prompt ran",
            "check": "what sent it (a service manager stopping the bridge, Ctrl-C in its terminal, a parent "
            "process); to let running prompts finish, end the bridge with a shutdown command or the "
            "end of its input (a drain, bounded by --drain-timeout) instead of a signal",
        }
    if why == "close":
        return {
            "cause": "the controller closed the bridge while the prompt ran",
            "check": "the controller's close: await the receipts of running prompts before closing the bridge",
        }
    if why == "drain-timeout":
        return {
            "cause": "the drain's bound passed while the prompt ran",
            "check": "raise --drain-timeout so running prompts can finish when the bridge shuts down",
        }
    if why == "journal":
        return journal(facts.journal_error)
    return {
        "cause": "the bridge was closing",
        "check": "the bridge's stderr: its last line says why it ended"
        + (f" (the closing note says {short(why, 80)})" if why is not None else ""),
    }


def other_writer(what: str) -> dict[str, str]:
    """Someone other than the bridge wrote ``what`` to the engine."""
    return {
        "cause": f"someone other than the bridge sent the engine {what}",
        "check": "whether anything else can write to the engine's stdin (the journal records only the "
        "bridge's own sends: a command in the evidence with no 'bridge sent' entry before it came "
        "from elsewhere)",
    }


def version(facts: Facts) -> dict[str, str]:
    """An engine other than the pinned one: what the header says of the version and the pin."""
    if facts.version is None:
        from bridge.profiles.pi import PI_PIN

        check = (
            f"the header records no engine_version (engine {short(facts.engine)}): compare the engine that "
            f"ran with the pinned Pi {facts.pin or PI_PIN}"
        )
    elif facts.pin is not None and facts.version != facts.pin:
        check = (
            f"the header's engine_version {facts.version} differs from the pin {facts.pin}: the pinned "
            "engine's behaviour cannot be assumed"
        )
    else:
        check = f"the header's engine_version {facts.version} matches the pin {facts.pin}: unlikely"
    return {"cause": "an engine that is not the pinned version behaves differently", "check": check}


def lost(facts: Facts, what: str = "lines were lost") -> dict[str, str]:
    """Lines lost on the way: the gaps and stderr lines so far."""
    gaps = sum(facts.gaps.values())
    where = f"{gaps} gap(s) so far, the first at #{facts.first_gap}" if gaps else "no gap so far"
    tail = list(facts.stderr)
    err = (
        "; the last stderr lines: " + " | ".join(short(text, 80) for _, text in tail[-3:])
        if tail
        else "; no stderr line so far"
    )
    return {"cause": what, "check": where + err}


def engine_exit(ex: dict[str, Any]) -> dict[str, str]:
    """The engine exited (``ex``: the last exit as the diagnoser remembers it, or empty)."""
    if not ex:
        return {"cause": "the engine exited", "check": "the exit entry and the stderr lines before it"}
    tail = ex.get("stderr") or []
    err = (" | ".join(short(s["text"], 100) for s in tail if s["text"].strip())) if tail else "none"
    return {
        "cause": f"the engine exited ({exit_words(ex.get('code'), ex.get('signal'))} at "
        f"{fmt_t(ex.get('t'))}, journal line {ex.get('line')})",
        "check": f"the last stderr lines before it: {err}",
    }


def journal(error: str | None) -> dict[str, str]:
    """Why a journal could not be written, from the error the bridge noted."""
    move = "--journal PATH or $PI_BRIDGE_JOURNAL_DIR puts journals elsewhere, --no-journal writes none"
    text = (error or "").lower()
    if "errno 28" in text or "no space" in text or "quota" in text:
        return {
            "cause": "the disk the journal is on is full",
            "check": f"free space there (df -h on the journal's folder); {move}",
        }
    return {
        "cause": "the journal's file could not be written (an I/O error, a full or read-only disk)",
        "check": f"the error the bridge noted, the system log (dmesg) for disk errors, and free space; {move}",
    }


def journal_end(facts: Facts) -> list[dict[str, str]]:
    """Why a live bridge's journal ends before its ``bridge-closed`` note, most likely first."""
    created = facts.header.meta.get("created")
    when = f"{fmt_t(facts.last_t)} after the header's created time" + (
        f" {short(created, 40)}" if created is not None else ""
    )
    killed = {
        "cause": "the bridge was killed (SIGKILL, the OOM killer, a crash) before it could close",
        "check": f"the system log (journalctl, dmesg) near the journal's end ({when}) for the OOM killer "
        "or a kill, and whatever ran the bridge",
    }
    running = {
        "cause": "the bridge is still running: the journal was read while being written",
        "check": "whether the bridge process is still alive",
    }
    if facts.journal_failed is not None:
        return [journal(facts.journal_error), killed, running]
    unwritten = {
        "cause": "the journal could not be written (a full disk, an I/O error) and not even that could be noted",
        "check": "free space on the journal's disk (df -h) and the bridge's stderr: its last line says why it ended",
    }
    return [killed, unwritten, running]
