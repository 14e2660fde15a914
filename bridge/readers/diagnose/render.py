"""One journal entry as a person reads it: its type and a one-line summary, its raw text, ids and times.

Rules: a summary names the few facts that matter for a diagnosis (a response's command, id and
disposition; an assistant message's stop reason; a queue's sizes; an elided event's size) and never
the bulk (message text, tool output); every value is shortened (:func:`short`) so one engine line of
MiB cannot flood a report; a raw line keeps at most :data:`RAW_MAX` characters. Nothing here reads
the session or the tracker: only the entry itself.
"""

from __future__ import annotations

import signal as _signal
from typing import Any, Final

from bridge.transcript import dumps

#: Characters of one raw line kept in a finding's evidence (engine lines can be MiB).
RAW_MAX: Final = 1000

#: One entry of the evidence window: (kind, journal line, t, observation index or None, value).
Item = tuple[str, int, float | None, int | None, Any]

#: What made the bridge close, by the ``why`` of its ``closing`` note.
CLOSING_WORDS: Final = {
    "signal": "it got a signal",
    "close": "its controller closed it (the API's close, a shutdown command or the end of its input)",
    "drain-timeout": "the drain's bound (--drain-timeout) passed",
    "journal": "its journal could not be written",
}


def short(value: Any, limit: int = 80) -> str:
    """``value`` on one line, at most ``limit`` characters (an ellipsis marks the cut)."""
    text = value if isinstance(value, str) else dumps(value).decode("utf-8", "replace")
    text = text.replace("\n", "\\n")
    return text if len(text) <= limit else text[: limit - 1] + "…"


def describe(kind: str, value: Any) -> tuple[str, str]:
    """``(type, summary)`` of one journal entry: the few facts that matter."""
    if kind == "recv":
        if not isinstance(value, dict):
            return "not-object", f"JSON but not an object: {short(value)}"
        return _describe_event(value)
    if kind == "recv_raw":
        return "raw", f"not a JSON object: {short(value)}"
    if kind == "send":
        cmd = value.get("type") if isinstance(value, dict) else None
        ident = value.get("id") if isinstance(value, dict) else None
        return "send", f"bridge sent {cmd}" + (f" id={short(ident, 40)}" if ident is not None else " (no id)")
    if kind == "release":
        return "release", f"bridge released {short(value, 40)}"
    if kind == "exit":
        v = value if isinstance(value, dict) else {}
        return "exit", f"engine exited: {exit_words(v.get('code'), v.get('signal'))}"
    if kind == "stderr":
        return "stderr", f"stderr: {short(value, 100)}"
    if kind == "receipt":
        v = value if isinstance(value, dict) else {}
        reason = f" ({v.get('reason')})" if v.get("reason") else ""
        return "receipt", f"journal receipt {short(v.get('request'), 40)}: {v.get('state')}{reason}"
    if kind == "note":
        if isinstance(value, dict):
            return "note", _note_summary(value)
        return "note", f"note: {short(value, 100)}"
    return kind, f"{kind}: {short(value)}"


def _describe_event(value: dict[str, Any]) -> tuple[str, str]:
    """An engine event (a ``recv`` that is a JSON object), by its ``type``."""
    typ = value.get("type")
    name = typ if isinstance(typ, str) else "?"
    if name == "response":
        words = [
            f"response {value.get('command')} id={short(value.get('id'), 40)} success={short(value.get('success'))}"
        ]
        data = value.get("data")
        if isinstance(data, dict) and "disposition" in data:
            words.append(f"disposition={short(data.get('disposition'))}")
        if value.get("error") is not None:
            words.append(f"error={short(value.get('error'), 80)}")
        return name, " ".join(words)
    if name in ("message_start", "message_end", "turn_end"):
        message = value.get("message")
        if isinstance(message, dict):
            words = [f"{name} role={short(message.get('role'), 30)}"]
            if message.get("role") == "assistant" and name != "message_start":
                words.append(f"stopReason={short(message.get('stopReason'), 30)}")
            if message.get("errorMessage"):
                words.append(f"error={short(message.get('errorMessage'), 60)}")
            return name, " ".join(words)
    if name == "agent_end":
        return name, f"agent_end willRetry={short(value.get('willRetry'))}"
    if name == "agent_settled":
        return name, f"agent_settled aborted={short(value.get('aborted'))}"
    if name == "queue_update":
        s, f = value.get("steering"), value.get("followUp")
        n = len(s) if isinstance(s, list) else "?"
        m = len(f) if isinstance(f, list) else "?"
        return name, f"queue_update steering={n} followUp={m}"
    if name == "extension_ui_request":
        return (
            name,
            f"extension_ui_request method={short(value.get('method'), 30)} id={short(value.get('id'), 30)}",
        )
    if name == "extension_error":
        return name, f"extension_error {short(value.get('error'), 80)}"
    if name in ("message_update", "tool_execution_update") and "elided" in value:
        if value.get("elided") is None:  # one line of a version 2 journal's run entry
            return name, f"{name} (elided, in a run)"
        return name, f"{name} (elided, {value.get('elided')} bytes)"
    if name.startswith("tool_execution"):
        return name, f"{name} tool={short(value.get('toolName'), 30)}"
    if name.startswith("auto_retry"):
        extra = " ".join(f"{k}={short(value.get(k), 40)}" for k in ("attempt", "success", "errorMessage") if k in value)
        return name, f"{name} {extra}".rstrip()
    return name, name


def _note_summary(value: dict[str, Any]) -> str:
    """A note of the bridge's (``stop``, ``closing``, ``journal-failed``, ``bridge-closed``, others) in words."""
    event = value.get("event")
    if event == "stop":
        return (
            f"note: the bridge's stop {q(value.get('stop'))} for {q(value.get('request'))}, "
            f"by {q(value.get('by'))}: {short(value.get('why') or '', 70)}"
        )
    if event == "closing":
        detail = f" ({short(value['detail'], 40)})" if value.get("detail") is not None else ""
        why = value.get("why")
        words = CLOSING_WORDS.get(why, short(why, 40)) if isinstance(why, str) else short(why, 40)
        return f"note: the bridge is closing: {words}{detail}"
    if event == "journal-failed":
        return f"note: the journal could not be written: {short(value.get('error'), 80)}"
    if event == "bridge-closed":
        return f"note: the bridge closed ({short(value.get('receipts'))} receipt(s))"
    if event == "stderr-dropped":
        return (
            f"note: {short(value.get('lines'))} stderr line(s) of generation {short(value.get('generation'))} "
            f"not journaled ({short(value.get('chars'))} characters past the cap); the last "
            f"{short(value.get('kept'))} follow"
        )
    return f"note {value.get('event', '')}: {short(value, 90)}"


def raw_text(kind: str, value: Any) -> str:
    """The entry as the journal holds it (an engine line as it was read), capped at :data:`RAW_MAX`."""
    if kind == "recv_raw" or kind == "stderr":
        text: str = value
    elif kind == "recv":
        text = dumps(value).decode("utf-8", "replace")
    else:
        text = dumps({kind: value}).decode("utf-8", "replace")
    if len(text) > RAW_MAX:
        text = text[:RAW_MAX] + f"… [{len(text) - RAW_MAX} more characters]"
    return text


def exit_words(code: Any, sig: Any) -> str:
    """An engine exit: ``killed by SIGTERM (signal 15)`` or ``code 1``."""
    if isinstance(sig, int) and sig:
        try:
            name = _signal.Signals(sig).name
        except ValueError:
            name = f"signal {sig}"
        return f"killed by {name} (signal {sig})"
    return f"code {code}"


def fmt_t(t: float | None) -> str:
    """An entry's time (seconds since the journal started), or ``t=?``."""
    return "t=?" if t is None else f"t={t:.3f}"


def q(value: Any) -> str:
    """A request or run id as a person reads it."""
    return value if isinstance(value, str) else short(value, 40)


def item_json(item: Item, focus: bool) -> dict[str, Any]:
    """One entry of a finding's evidence, as the JSON output and the page show it."""
    kind, line, t, idx, value = item
    typ, summary = describe(kind, value)
    return {
        "line": line,
        "entry": kind,
        "idx": idx,
        "t": t,
        "type": typ,
        "summary": summary,
        "focus": focus,
        "raw": raw_text(kind, value),
    }
