"""Issue 41, the key held outside: a hostile tool finds no provider key anywhere it can look, and
what it can do with the engine's token is counted against its prompt's budget and refused
between prompts (SPEC §5 "Additions: the tool boundary"; docs: guide/confinement.md, "The key
held outside").

Against the real pinned Pi: the scripted model server requires the key (``require_key``: a
request without it is answered 401 and takes no step) and records the key each request carried;
the model makes Pi's own ``bash`` tool run each attack. Before the key endpoint, every one of
these succeeded: the key was in the engine's environment (and ``/proc/*/environ``), in its
private ``auth.json`` / ``models.json``, and a tool could call the provider with it, outside
every budget, at any time.
"""

from __future__ import annotations

import json
import shlex
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import trio

from bridge import open_bridge
from bridge.demo.model_server.server import models_json
from bridge.profiles.pi import PiProfile, scripted_profile
from bridge.profiles.sandbox import Sandbox
from bridge.testing import ScriptedModel
from tests.helpers_sandbox import notes, read_journal, tool_output, tool_step

#: The variable the bridge reads the key from (``--api-key-env``); set for each test only.
KEY_VAR = "HOSTILE_TEST_PROVIDER_KEY"
REPLY = "Done with the tool."


@pytest.fixture
def key(monkeypatch: pytest.MonkeyPatch) -> str:
    """A fresh key, in the bridge's environment as :data:`KEY_VAR`: no file on this machine
    holds it before the test starts."""
    value = f"sk-hostile-{uuid.uuid4().hex}{uuid.uuid4().hex}"
    monkeypatch.setenv(KEY_VAR, value)
    return value


def split_key(key: str) -> str:
    """Shell lines setting ``$K`` to the key, which the tool's command never holds whole (the
    command is in Pi's memory and the tool's argv: a search must not find it there)."""
    half = len(key) // 2
    return f'A={shlex.quote(key[:half])}; B={shlex.quote(key[half:])}; K="$A$B"\n'


def search_command(key: str, since: float) -> str:
    """Every place a tool can look for the key, each hit printed ``HIT:<where>``. ``/proc`` is
    read with the shell's own ``case`` (a ``grep`` would hold the key in its argv, which is in
    ``/proc`` too); the files are every regular file visible, changed since the test began (the
    key is new: no older file can hold it), ``/proc``, ``/sys`` and ``/dev`` left out."""
    return split_key(key) + (
        "echo START\n"
        'case "$(env)" in *"$K"*) echo HIT:env;; esac\n'
        "for f in /proc/1/environ /proc/self/environ /proc/[0-9]*/environ /proc/[0-9]*/cmdline; do\n"
        "  c=$(tr '\\0' '\\n' < \"$f\" 2>/dev/null)\n"
        '  case "$c" in *"$K"*) echo "HIT:$f";; esac\n'
        "done\n"
        'echo "config-files=$(find "$PI_CODING_AGENT_DIR" -type f | wc -l)"\n'
        'for f in $(find "$PI_CODING_AGENT_DIR" -type f); do grep -qsF "$K" "$f" && echo "HIT:config:$f"; done\n'
        "find / \\( -path /proc -o -path /sys -o -path /dev \\) -prune -o -type f "
        f"-newermt @{int(since)} -print0 2>/dev/null > /tmp/new-files\n"
        "echo \"searched=$(tr -cd '\\0' < /tmp/new-files | wc -c)\"\n"
        'xargs -0 -r grep -lsF "$K" < /tmp/new-files | sed "s/^/HIT:file:/"\n'
        "echo END\n"
    )


async def one_prompt(profile: PiProfile, journal: Path, **kw: Any) -> Any:
    async with open_bridge(profile, journal=journal) as bridge:
        return await bridge.prompt("go", request="p1", **kw)


@pytest.mark.parametrize(
    ("given", "network"),
    [("env", True), ("env", False), ("literal", True), ("models-json", True)],
    ids=["api-key-env", "api-key-env-no-network", "api-key", "models-json-apikey"],
)
def test_a_tool_finds_the_key_nowhere_and_the_provider_still_gets_it(
    pinned_pi: object, tmp_path: Path, key: str, given: str, network: bool
) -> None:
    since = time.time() - 2
    steps: list[Any] = [tool_step(search_command(key, since)), {"text": REPLY}]
    journal = tmp_path / "j.jsonl"
    sandbox = Sandbox(network=network)
    with ScriptedModel(steps, require_key=key) as model:
        if given == "env":
            profile = model.profile(api_key_env=KEY_VAR, sandbox=sandbox)
        elif given == "literal":
            profile = model.profile(api_key=key, sandbox=sandbox)
        else:
            models = models_json(model.url)
            models["providers"]["scripted"]["apiKey"] = key
            path = tmp_path / "models.json"
            path.write_text(json.dumps(models))
            profile = scripted_profile(str(path), sandbox=sandbox)
        if given != "env":
            import os

            del os.environ[KEY_VAR]  # (monkeypatch restores it)
        receipt = trio.run(one_prompt, profile, journal)
        seen = [r.key for r in model.completions]
    said = tool_output(journal)
    assert "START" in said and "END" in said, said
    assert "HIT:" not in said, said
    assert int(said.split("config-files=")[1].split()[0]) >= 3, said  # it did read the config folder
    assert int(said.split("searched=")[1].split()[0]) > 0, said  # and files changed since the start
    # Pi's own two calls reached the provider with the real key.
    assert receipt.state == "finished" and receipt.reply == REPLY, receipt
    assert seen == [key, key]
    header = read_journal(journal)[0]
    assert header["seal"]["key"]["held"] == "outside"
    assert KEY_VAR not in header["seal"]["env"]


#: What the tool finds to call the provider with: the key (or token) in ``auth.json`` (a
#: ``${NAME}`` reference expanded from its environment) and the provider's ``baseUrl``.
FIND_CREDENTIALS = (
    'CFG="$PI_CODING_AGENT_DIR"\n'
    'KEY=$(sed -n \'s/.*"key": *"\\([^"]*\\)".*/\\1/p\' "$CFG/auth.json")\n'
    'case "$KEY" in \'${\'*) KEY=$(eval "printf %s \\"$KEY\\"");; esac\n'
    'BASE=$(sed -n \'s/.*"baseUrl": *"\\([^"]*\\)".*/\\1/p\' "$CFG/models.json" | head -1)\n'
    'BODY=\'{"model":"scripted-model","stream":true,"stream_options":{"include_usage":true},'
    '"messages":[{"role":"user","content":"hi"}]}\'\n'
)


def call(out: str = "/dev/null", code: str = "") -> str:
    """One model call with what :data:`FIND_CREDENTIALS` found; prints ``call=STATUS``."""
    where = f"> {code}" if code else ""
    return (
        f'curl -sS -m 10 -o {out} -w "call=%{{http_code}}\\n" "$BASE/chat/completions" '
        '-H "Authorization: Bearer $KEY" -H "Content-Type: application/json" -d "$BODY"' + where
    )


#: A model call the tool makes reports this many tokens (the prompt's budget is far below).
BIG = {"text": "spent", "usage": {"prompt_tokens": 100_000, "completion_tokens": 1}}


def test_a_tools_own_model_call_spends_its_prompts_budget_and_stops_it(
    pinned_pi: object, tmp_path: Path, key: str
) -> None:
    command = FIND_CREDENTIALS + f"for i in 1 2 3; do {call()}; sleep 0.5; done\necho tool-done\n"
    steps: list[Any] = [tool_step(command), BIG, BIG, BIG, {"text": REPLY}]
    journal = tmp_path / "j.jsonl"
    with ScriptedModel(steps, require_key=key) as model:
        profile = model.profile(api_key_env=KEY_VAR)
        receipt = trio.run(lambda: one_prompt(profile, journal, budget_tokens=50_000))
        completions = model.completions
    # The tool's call was forwarded (with the real key), counted for p1, and passed its budget.
    assert receipt.state == "failed" and receipt.reason == "budget", receipt
    assert [r.key for r in completions][:2] == [key, key]
    calls = notes(journal, "model-call")
    assert any(c["request"] == "p1" and c["usage"] and c["usage"]["totalTokens"] >= 100_000 for c in calls), calls
    [budget] = notes(journal, "budget")
    assert budget["request"] == "p1" and budget["spent"]["tokens"] > 50_000
    # Pi's own messages never said so: its usage on the receipt is far below the budget.
    assert receipt.usage is None or receipt.usage.total_tokens < 50_000


def test_a_background_call_after_the_receipt_is_refused(pinned_pi: object, tmp_path: Path, key: str) -> None:
    work = tmp_path / "work"
    work.mkdir()
    late = (
        FIND_CREDENTIALS
        + "sleep 2\n"
        + call(out=shlex.quote(str(work / "late-body")), code=shlex.quote(str(work / "late-code")))
        + "\n"
    )
    script = work / "late.sh"
    script.write_text(late)
    command = f"setsid nohup sh {shlex.quote(str(script))} >/dev/null 2>&1 &\necho started"
    steps: list[Any] = [tool_step(command), {"text": REPLY}, BIG]
    journal = tmp_path / "j.jsonl"

    async def scenario(profile: PiProfile) -> Any:
        async with open_bridge(profile, journal=journal) as bridge:
            receipt = await bridge.prompt("go", request="p1")
            # The bridge stays open, its engine idle, while the tool's leftover calls.
            with trio.move_on_after(20):
                while not (work / "late-code").exists() or not (work / "late-code").read_text():
                    await trio.sleep(0.1)
            return receipt

    with ScriptedModel(steps, require_key=key) as model:
        receipt = trio.run(scenario, model.profile(api_key_env=KEY_VAR, cwd=str(work)))
        completions = model.completions
    assert receipt.state == "finished", receipt
    code = (work / "late-code").read_text().strip()
    assert code == "call=403", code
    body = json.loads((work / "late-body").read_text())
    assert "no prompt is held" in body["error"]["message"]
    assert len(completions) == 2  # Pi's own two; the late call never reached the provider
    assert not [c for c in notes(journal, "model-call") if c["request"] != "p1"]
