"""``bridge diagnose`` on a ``rejected``/``config`` receipt (docs: guide/reading-journals.md, guide/steering.md):
the prompt asked for a model or a thinking level that Pi refused or ``get_state`` did not confirm,
so it was never written. The finding says what was asked (the ``configure`` note), Pi's words (its
refusing answer, the ``get_state`` after it) and the ``configured`` note -- first on a journal the
live bridge wrote with the real pinned Pi, then on hand-written journals for the cases the real Pi
does not show on demand (a level answered with success and not applied; no answer in time)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import trio

from bridge.demo.model_server import start_server
from bridge.demo.model_server.server import models_json
from bridge.live.api import open_bridge
from bridge.profiles.pi import scripted_profile
from bridge.readers.diagnose import diagnose
from tests.conftest import ROOT


def config_findings(path: Path) -> list[dict[str, Any]]:
    return [f for f in diagnose(str(path)).to_json()["findings"] if f["kind"] == "receipt"]


def lines_of(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text().splitlines()]


async def test_a_model_pi_refused_is_explained_with_pis_words_and_the_notes(pinned_pi: Any, tmp_path: Path) -> None:
    server = start_server([{"text": "one"}, {"text": "two"}])
    models = tmp_path / "models.json"
    models.write_text(json.dumps(models_json(server.base_url)))
    journal = tmp_path / "j.jsonl"
    try:
        with trio.fail_after(90):
            async with open_bridge(scripted_profile(str(models)), journal=journal) as bridge:
                first = await bridge.prompt("one")
                refused = await bridge.prompt("two", provider="scripted", model="nope")
                after = await bridge.prompt("three")
    finally:
        server.close()
    assert (first.state, refused.state, refused.reason, after.state) == ("finished", "rejected", "config", "finished")

    (f,) = config_findings(journal)  # the two finished prompts get none
    entries = lines_of(journal)
    line_of = {
        e["note"]["event"]: n + 1
        for n, e in enumerate(entries)
        if "note" in e and e["note"].get("request") == refused.request and e["note"]["event"].startswith("configur")
    }
    refusal = next(e for e in entries if e.get("recv", {}).get("command") == "set_model")
    assert refusal["recv"]["success"] is False
    assert f["request"] == "p2" and f["detail"]["reason"] == "config"
    assert f["title"] == "receipt: p2: rejected (config): what it asked for was not applied, so it was never sent"
    assert f["explanation"] == (
        f"p2 asked for model scripted/nope (its configure note, journal line {line_of['configure']}, "
        f"t={entries[line_of['configure'] - 1]['t']:.3f}) and was never written to the engine: Pi refused set_model "
        f"at #{refusal['i']}: 'Model not found: scripted/nope'. The engine kept scripted/scripted-model, thinking off "
        f"(get_state at #{refusal['i'] + 1}). The bridge's configured note (journal line {line_of['configured']}) "
        "records the problem."
    )
    shown = {e["line"] for e in f["evidence"]}
    assert {line_of["configure"], line_of["configured"]} <= shown
    assert "bridge models" in f["causes"][0]["check"]
    text = subprocess.run(
        [sys.executable, "-m", "bridge", "diagnose", str(journal)], capture_output=True, text=True, cwd=ROOT
    )
    assert text.returncode == 0 and "[1] receipt: p2: rejected (config)" in text.stdout


def write(tmp_path: Path, entries: list[dict[str, Any]]) -> Path:
    path = tmp_path / "j.jsonl"
    head = {"transcript": "pi-bridge", "version": 1, "clearing": ["clear_queue"]}
    path.write_text("\n".join(json.dumps(e) for e in [head, *entries]) + "\n")
    return path


STATE = {"model": {"provider": "scripted", "id": "thinker"}, "thinkingLevel": "off"}


def receipt(request: str, why: str) -> dict[str, Any]:
    return {"receipt": {"request": request, "state": "rejected", "reason": "config", "nativeError": why, "signals": []}}


def test_a_level_answered_with_success_and_not_applied_is_explained(tmp_path: Path) -> None:
    why = "Pi answered set_thinking_level high with success but get_state shows off (the model offers ['off', 'high'])"
    path = write(
        tmp_path,
        [
            {"note": {"event": "configure", "request": "q", "wanted": {"thinking": "high"}, "new_conversation": False}},
            {"send": {"type": "set_thinking_level", "id": "cfg-1-1:thinking", "level": "high"}},
            {"recv": {"id": "cfg-1-1:thinking", "type": "response", "command": "set_thinking_level", "success": True}},
            {"send": {"type": "get_available_thinking_levels", "id": "cfg-1-1:levels"}},
            {
                "recv": {
                    "id": "cfg-1-1:levels",
                    "type": "response",
                    "command": "get_available_thinking_levels",
                    "success": True,
                    "data": {"levels": ["off", "high"]},
                }
            },
            {"send": {"type": "get_state", "id": "cfg-1-1:state"}},
            {
                "recv": {
                    "id": "cfg-1-1:state",
                    "type": "response",
                    "command": "get_state",
                    "success": True,
                    "data": STATE,
                }
            },
            {"note": {"event": "configured", "request": "q", "config": None, "problem": why}},
            receipt("q", why),
        ],
    )
    (f,) = config_findings(path)
    assert f["explanation"] == (
        "q asked for thinking level high (its configure note, journal line 2, t=?) and was never written to the "
        f"engine: {why}. The engine kept scripted/thinker, thinking off (get_state at #3). The bridge's "
        "configured note (journal line 9) records the problem."
    )
    assert "answered the command with success and did not apply it" in f["causes"][0]["cause"]


def test_a_configuration_not_answered_in_time_is_explained(tmp_path: Path) -> None:
    why = "the engine did not answer its configuration in 30 s"
    path = write(
        tmp_path,
        [
            {
                "note": {
                    "event": "configure",
                    "request": "q",
                    "wanted": {"provider": "scripted", "model": "thinker", "thinking": "low"},
                    "new_conversation": True,
                }
            },
            {"send": {"type": "new_session", "id": "cfg-1-1:new"}},
            receipt("q", why),
        ],
    )
    (f,) = config_findings(path)
    assert f["explanation"] == (
        "q asked for model scripted/thinker and thinking level low and a new conversation (its configure note, "
        f"journal line 2, t=?) and was never written to the engine: {why}. The journal has no configured note "
        "for it: the configuration did not finish."
    )
    assert "--ack-timeout" in f["causes"][0]["check"]


def test_configuration_notes_are_kept_for_the_latest_prompts_only() -> None:
    """Bounded memory: the notes of the latest CONFIGS_KEPT prompts; a new configure of a prompt
    forgets its older notes and counts as the latest."""
    from bridge.readers.diagnose.facts import CONFIGS_KEPT, Facts
    from bridge.transcript import Header

    facts = Facts(Header(version=1, clearing=(), meta={}))
    for n in range(CONFIGS_KEPT + 10):
        facts.note_config({"event": "configure", "request": f"p{n}"}, ("note", n, None, None, {}))
    facts.note_config({"event": "configured", "request": "p10", "problem": "x"}, ("note", 999, None, None, {}))
    facts.note_config({"event": "configure", "request": "p11"}, ("note", 1000, None, None, {}))
    facts.note_config({"event": "configure", "request": "last"}, ("note", 1001, None, None, {}))
    assert facts.config_notes("p0") == {} and len(facts.configs) == CONFIGS_KEPT
    assert set(facts.config_notes("p10")) == {"configure", "configured"}
    assert set(facts.config_notes("p11")) == {"configure"} and facts.config_notes("p11")["configure"]["line"] == 1000
    assert facts.config_notes(["unhashable"]) == {}
