"""A recording of a scenario: as committed, and as compared.

:func:`sanitise` makes a journal fit to commit (no absolute checkout or temp paths) and
:func:`expected_json` gives its ``.expected.json``; :func:`normal_form` is the comparison
form of a recording: the sequence of event types (runs of ``message_update`` /
``tool_execution_update`` collapsed), the commands sent, the signals, the receipts' states
and reasons and the tracker output without ``t``, indices, pids, ids or timings
(:func:`diff_forms`: where two of them differ).
"""

from __future__ import annotations

import difflib
import json
import re
import tempfile
from pathlib import Path
from typing import Any

from bridge.profiles.orphans import private_root
from bridge.readers.replay import replay
from bridge.transcript import open_transcript
from tests.shared.pi_scenarios.runner import ROOT, SCENARIOS


def sanitise(text: str) -> str:
    """A journal fit to commit: the checkout's absolute path becomes relative,
    the profile's private temp folders lose their machine-specific names. A tool folder that
    is a symlink (a second checkout sharing node_modules) is bound at its target: that path
    goes too."""
    for link in [ROOT / "tools" / "pi" / "node_modules", *ROOT.glob("tools/pi-matrix/*/node_modules")]:
        if link.is_symlink():
            text = text.replace(str(link.resolve()), str(link.relative_to(ROOT)))
    text = text.replace(str(ROOT) + "/", "")
    # The private folders are in the bridges' per-user root (bridge/profiles/orphans.py); an
    # older recorder's in the temporary folder.
    for base in (str(private_root()), tempfile.gettempdir().rstrip("/")):
        text = re.sub(re.escape(base) + r"/(pi-bridge-(?:cwd|pi)-)[A-Za-z0-9_]+", r"<tmp>/\1XXXXXXXX", text)
    return text


def expected_json(journal: str | Path) -> str:
    """``bridge replay --json`` of the journal, pretty-printed (the ``.expected.json``)."""
    return json.dumps(replay(str(journal)).to_json(), indent=2, ensure_ascii=False) + "\n"


_COLLAPSE = {"message_update", "tool_execution_update"}


def _event_label(v: dict[str, Any]) -> str:
    kind = v.get("type")
    if kind == "response":
        data = v.get("data")
        label = f"response {v.get('command')} " + ("ok" if v.get("success") else "refused")
        if isinstance(data, dict) and "disposition" in data:
            label += f" {data['disposition']}"
        return label
    if kind in ("message_start", "message_end"):
        msg = v.get("message") or {}
        label = f"{kind} {msg.get('role')}"
        if kind == "message_end" and msg.get("role") == "assistant":
            label += f" {msg.get('stopReason')}"
        return label
    if kind == "agent_end":
        return f"agent_end willRetry={v.get('willRetry')}"
    if kind == "agent_settled":
        return f"agent_settled aborted={v.get('aborted')}"
    if kind == "queue_update":
        return f"queue_update steering={len(v.get('steering') or [])} followUp={len(v.get('followUp') or [])}"
    if kind == "auto_retry_start":
        return f"auto_retry_start {v.get('attempt')}/{v.get('maxAttempts')}"
    if kind == "auto_retry_end":
        return f"auto_retry_end success={v.get('success')}"
    if kind == "extension_ui_request":
        return f"extension_ui_request {v.get('method')}"
    if kind in ("tool_execution_start", "tool_execution_end"):
        return f"{kind} {v.get('toolName')}"
    if kind == "entry_appended":
        return f"entry_appended {(v.get('entry') or {}).get('type')}"
    return str(kind)


def _sanitised(value: Any) -> Any:
    """``value`` as :func:`sanitise` leaves it in a fixture (a raw journal compares like its fixture)."""
    return json.loads(sanitise(json.dumps(value)))


def _strip(d: dict[str, Any], *drop: str) -> dict[str, Any]:
    return {k: v for k, v in d.items() if k not in drop}


def _receipt_form(r: dict[str, Any]) -> dict[str, Any]:
    out = {
        k: r.get(k) for k in ("request", "state", "reason", "stop", "run", "disposition", "nativeError", "generation")
    }
    if (r.get("state"), r.get("reason")) != ("failed", "interrupted"):
        out["reply"] = r.get("reply")  # an interrupted reply depends on when the stop landed
    out["signals"] = [_strip(s, "idx", "id", "generation") for s in r.get("signals") or []]
    return out


def normal_form(journal: str | Path, scenario: str | None = None) -> dict[str, Any]:
    """The comparison form of a recording (see the module docstring); with a
    scenario name, cut to what the scenario records deterministically."""
    stream, reader = open_transcript(str(journal))
    events: list[str] = []
    sends: list[str] = []
    signals: list[dict[str, Any]] = []
    receipts: list[dict[str, Any]] = []
    with stream:
        for e in reader:
            if e.kind == "recv":
                label = _event_label(e.value)
                if label in _COLLAPSE:
                    label += "…"
                    if events and events[-1] == label:
                        continue
                events.append(label)
            elif e.kind == "recv_raw":
                events.append("recv_raw")
            elif e.kind == "exit":
                events.append(f"[engine exit code={e.value.get('code')} signal={e.value.get('signal')}]")
            elif e.kind == "note" and isinstance(e.value, dict) and e.value.get("event") == "engine-start":
                events.append(f"[engine start generation={e.value.get('generation')}]")
            elif e.kind == "send":
                extra = " cancelled" if e.value.get("cancelled") else ""
                sends.append(f"{e.value.get('type')}{extra}")
            elif e.kind == "signal":
                signals.append(_strip(_sanitised(e.value), "idx", "id", "generation"))
            elif e.kind == "receipt":
                receipts.append(_receipt_form(_sanitised(e.value)))
    rep = replay(str(journal)).to_json()
    form = {
        "events": events,
        "sends": sends,
        "signals": signals,
        "receipts": receipts,
        "tracker": {
            "overlaps": [_strip(o, "idx") for o in rep["overlaps"]],
            "working": [w["request"] for w in rep["working"]],
            "settled": [_strip(s, "idx") for s in rep["settled"]],
            "receipts": [_receipt_form(_sanitised(r)) for r in rep["receipts"]],
        },
    }
    sc = SCENARIOS.get(scenario) if scenario is not None else None
    if sc is not None and sc.stable is not None:
        form = sc.stable(form)
    return form


def diff_forms(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """Unified-diff lines between two normal forms (empty: the same)."""
    out: list[str] = []
    for key in new.keys() | old.keys():
        a = json.dumps(old.get(key), indent=1, ensure_ascii=False, sort_keys=True).splitlines()
        b = json.dumps(new.get(key), indent=1, ensure_ascii=False, sort_keys=True).splitlines()
        if a != b:
            out += list(difflib.unified_diff(a, b, f"recorded {key}", f"now {key}", lineterm="", n=2))
    return out
