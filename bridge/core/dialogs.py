"""Extension dialogs: what an allowlisted extension asks the controller, and what may answer it.

Pi's RPC extension UI (docs/rpc-extension-ui.md of the pinned Pi): an extension calls
``ctx.ui.select / confirm / input / editor`` and Pi writes an ``extension_ui_request`` with a
fresh ``id`` and a ``method``, then **blocks that extension** until an ``extension_ui_response``
with the same id comes back (``value``, ``confirmed`` or ``cancelled: true``). The
fire-and-forget methods (``notify``, ``setStatus``, ``setWidget``, ``setTitle``,
``set_editor_text``) expect no answer. Pi ignores a response whose id it does not wait for
(rpc-mode.js: ``pendingExtensionRequests.get(id)``), and resolves a dialog itself only when the
extension passed a ``timeout`` (its ``timeout`` field, in milliseconds) or an abort signal.

The rules the bridge keeps (the lifecycle applies them: :mod:`bridge.core.lifecycle`):

- every dialog gets **exactly one** response from the bridge: the controller's answer, or
  ``cancelled`` when its timeout passes, its prompt is stopped or settles, the engine is
  stopped, or the bridge closes. Only an engine that exits first gets none (nothing is
  waiting any more). **Never an automatic yes**: no path but the controller's answer says
  anything but ``cancelled``;
- an answer must fit its dialog (:func:`check_answer`): a ``select`` takes one of its
  options, a ``confirm`` a boolean, an ``input`` / ``editor`` a string, any dialog
  ``cancelled``. One that does not is refused and the dialog stays open;
- while a dialog of the held prompt is open, that prompt's ack and stall deadlines wait (the
  engine is waiting on a person, not on the model); its own timeout does not;
- with no extension allowed (the seal's default) a dialog is answered ``cancelled`` at once and
  is a seal diagnostic, as before.

This module is the vocabulary: which methods are dialogs, the fields passed on (bounded), and
the check of an answer. Pure: no trio, no clock, no I/O.
"""

from __future__ import annotations

from typing import Any, Final

from bridge.core.events import Diagnostic

#: The methods that block the extension until answered.
DIALOG_METHODS: Final = frozenset({"select", "confirm", "input", "editor"})
#: The fire-and-forget methods (passed on as ``ui`` notifications).
UI_METHODS: Final = frozenset({"notify", "setStatus", "setWidget", "setTitle", "set_editor_text"})

#: The fields of each method passed on to the controller (Pi's names).
FIELDS: Final[dict[str, tuple[str, ...]]] = {
    "select": ("title", "options"),
    "confirm": ("title", "message"),
    "input": ("title", "placeholder"),
    "editor": ("title", "prefill"),
    "notify": ("message", "notifyType"),
    "setStatus": ("statusKey", "statusText"),
    "setWidget": ("widgetKey", "widgetLines", "widgetPlacement"),
    "setTitle": ("title",),
    "set_editor_text": ("text",),
}

#: Bounds on what is passed on: a string field, an editor's prefill, a list's entries (a
#: ``select``'s options are passed whole: the answer must be one of them exactly).
TEXT_CHARS: Final = 4000
PREFILL_CHARS: Final = 100_000
LIST_ITEMS: Final = 200

#: How an answer's ``by`` is worded: who or what gave the dialog its one response.
BY_CONTROLLER: Final = "controller"
BY_TIMEOUT: Final = "timeout"
BY_STOP: Final = "stop"
BY_RECEIPT: Final = "receipt"
BY_ENGINE_STOP: Final = "engine-stop"
BY_ENGINE_EXIT: Final = "engine-exit"
BY_CLOSING: Final = "closing"
BY_NOBODY: Final = "no-controller"
#: No extension was allowed: a sealed engine's dialog (a seal diagnostic), cancelled at once.
BY_SEAL: Final = "seal"

CANCELLED: Final[dict[str, Any]] = {"cancelled": True}


def _text(value: Any, limit: int) -> str | None:
    if not isinstance(value, str):
        return None
    return value if len(value) <= limit else value[:limit] + "…"


def ui_fields(method: str, value: dict[str, Any]) -> dict[str, Any]:
    """The fields of an ``extension_ui_request`` passed on for ``method``: only its own, only
    strings (lists of strings), each bounded; a ``timeout`` in milliseconds kept as a number."""
    out: dict[str, Any] = {}
    for name in FIELDS.get(method, ()):
        field = value.get(name)
        if name == "options" and isinstance(field, list):
            # Whole: an answer must be one of them exactly, so none is cut or left out (the
            # engine's line, bounded by --max-line, bounds them).
            out[name] = [x for x in field if isinstance(x, str)]
        elif isinstance(field, list):
            items = [_text(x, TEXT_CHARS) for x in field[:LIST_ITEMS]]
            out[name] = [x for x in items if x is not None]
        else:
            text = _text(field, PREFILL_CHARS if name in ("prefill", "text") else TEXT_CHARS)
            if text is not None:
                out[name] = text
    timeout = value.get("timeout")
    if method in DIALOG_METHODS and isinstance(timeout, (int, float)) and not isinstance(timeout, bool) and timeout > 0:
        out["timeout"] = timeout
    return out


def check_answer(
    method: str, fields: dict[str, Any], value: Any = None, confirmed: Any = None, cancelled: Any = False
) -> tuple[dict[str, Any] | None, str | None]:
    """The response fields for an answer to a ``method`` dialog, or why it does not fit.

    Exactly one of ``value`` / ``confirmed`` / ``cancelled=True`` is given."""
    given = [name for name, v in (("value", value), ("confirmed", confirmed)) if v is not None]
    if cancelled is not False and cancelled is not True:
        return None, f"cancelled must be true or false, not {cancelled!r}"
    if cancelled:
        given.append("cancelled")
    if len(given) != 1:
        return None, "an answer has exactly one of value, confirmed or cancelled: true"
    if cancelled:
        return dict(CANCELLED), None
    if method == "confirm":
        if confirmed is None:
            return None, "a confirm dialog is answered with confirmed: true or false (or cancelled: true)"
        if not isinstance(confirmed, bool):
            return None, f"confirmed must be true or false, not {confirmed!r}"
        return {"confirmed": confirmed}, None
    article = "an" if method in ("input", "editor") else "a"
    if confirmed is not None:
        return None, f"{article} {method} dialog is answered with a value (or cancelled: true), not confirmed"
    if not isinstance(value, str):
        return None, f"{article} {method} dialog's value is a string, not {type(value).__name__}"
    if method == "select":
        options = fields.get("options") or []
        if value not in options:
            shown = ", ".join(repr(o if len(o) <= 80 else o[:80] + "…") for o in options[:10])
            more = f" and {len(options) - 10} more" if len(options) > 10 else ""
            return None, f"{value[:200]!r} is not one of the dialog's options ({shown}{more})"
    return {"value": value}, None


def diagnostic_of(kind: str, value: dict[str, Any], idx: int) -> Diagnostic:
    """The seal diagnostic of an ``extension_ui_request`` or ``extension_error`` at ``idx``: for a
    dialog, the cancelling answer the bridge writes when no controller takes dialogs."""
    if kind == "extension_ui_request":
        method = value.get("method")
        detail = {"method": method, "id": value.get("id")}
        answer = None
        if isinstance(method, str) and method in DIALOG_METHODS and value.get("id") is not None:
            answer = {"type": "extension_ui_response", "id": value.get("id"), "cancelled": True}
        fields = ui_fields(method, value) if isinstance(method, str) else {}
        return Diagnostic("extension-ui", idx, detail, answer, fields)
    error = value.get("error")
    return Diagnostic("extension-error", idx, {"error": str(error)[:500] if error is not None else None})
