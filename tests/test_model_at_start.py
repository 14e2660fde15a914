"""The model asked for at start (seal rule 9, docs: guide/seal.md): against the real pinned Pi and
the scripted model server. Pi 1.6.0 starts with an id its provider does not have (a custom model
id, a warning on stderr) and picks a loose match for a part of an id; the start-up check refuses
both, naming what was asked and what Pi offers or picked, so no prompt is ever written to such an
engine. ``bridge models`` still lists what Pi offers."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import trio

from bridge.demo.model_server import start_server
from bridge.demo.model_server.server import models_json
from bridge.live.api import BridgeConfig, open_bridge
from bridge.profiles.pi import scripted_profile
from bridge.readers.diagnose import diagnose
from bridge.transcript import open_transcript
from tests.conftest import ROOT

#: One engine start per test through the API: a refused engine is not tried again.
ONCE = BridgeConfig(crash_limit=1, restart_backoff=(0.0,))


def scripted_models(server: Any, tmp_path: Path) -> str:
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "models.json"
    path.write_text(json.dumps(models_json(server.base_url)))
    return str(path)


def entries(journal: Path, kind: str) -> list[Any]:
    stream, reader = open_transcript(str(journal))
    with stream:
        return [e.value for e in reader if e.kind == kind]


async def prompt_with(tmp_path: Path, **profile: Any) -> tuple[Any, Path, list[Any]]:
    """One prompt through a bridge on the scripted profile with ``profile``'s fields: its
    receipt, the journal, and the requests the model server got. The engine starts at the
    prompt, as under ``bridge run`` (``start_engine=False``; at open, a refusal is a
    ``ProfileError``: tests/test_open_check.py)."""
    server = start_server([{"text": "should never be asked"}])
    journal = tmp_path / "j.jsonl"
    try:
        with trio.fail_after(90):
            async with open_bridge(
                scripted_profile(scripted_models(server, tmp_path), **profile),
                journal=journal,
                config=ONCE,
                start_engine=False,
            ) as bridge:
                receipt = await bridge.prompt("hi")
        return receipt, journal, server.requests
    finally:
        server.close()


async def test_an_id_the_provider_lacks_is_refused_at_start_naming_it_and_what_pi_offers(
    pinned_pi: Any, tmp_path: Path
) -> None:
    receipt, journal, requests = await prompt_with(tmp_path, model="nope")
    # What Pi 1.6.0 itself does: it starts, with a warning on stderr, under the custom id.
    assert 'Warning: Model "nope" not found for provider "scripted". Using custom model id.' in entries(
        journal, "stderr"
    )
    answers = [v for v in entries(journal, "recv") if v.get("id") == "seal-state"]
    assert answers[0]["data"]["model"]["id"] == "nope"
    # What the bridge does: the start-up check refuses it; no prompt is written, none reaches the model.
    assert (receipt.state, receipt.reason) == ("rejected", "engine-down")
    assert "Pi does not offer --model nope (scripted: scripted-model)" in (receipt.native_error or "")
    assert not [s for s in entries(journal, "send") if s.get("type") == "prompt"] and requests == []
    (check,) = [n for n in entries(journal, "note") if n.get("event") == "seal-check"]
    assert check["problems"][0].startswith("Pi does not offer --model nope")
    # diagnose puts the model first among the likely causes (not an extension).
    (finding,) = [f for f in diagnose(str(journal)).to_json()["findings"] if f["signal"] == "seal-check"]
    assert "Pi does not offer --model nope" in finding["explanation"]
    assert finding["causes"][0]["cause"].startswith("the model asked for is not one Pi offers")
    assert "the header's seal asked for scripted/nope" in finding["causes"][0]["check"]


async def test_a_loose_match_pi_picked_is_refused_at_start_naming_both(pinned_pi: Any, tmp_path: Path) -> None:
    receipt, journal, requests = await prompt_with(tmp_path, model="script")
    answers = [v for v in entries(journal, "recv") if v.get("id") == "seal-state"]
    assert answers[0]["data"]["model"]["id"] == "scripted-model"  # Pi's pick
    assert (receipt.state, receipt.reason) == ("rejected", "engine-down") and requests == []
    assert "--model script is not an exact id: Pi picked scripted/scripted-model" in (receipt.native_error or "")


async def test_the_exact_id_provider_id_and_a_thinking_suffix_pass(pinned_pi: Any, tmp_path: Path) -> None:
    """The control: the same check lets the model asked for through, as each spelling Pi takes."""
    for n, model in enumerate(("scripted/scripted-model", "scripted-model:high")):
        receipt, journal, requests = await prompt_with(tmp_path / str(n), model=model)
        assert receipt.state == "finished", receipt
        assert [r["body"]["model"] for r in requests] == ["scripted-model"]


def _refused_before_any_model_call(
    tmp_path: Path, command: str, *args: str, input: str | None = None
) -> subprocess.CompletedProcess[str]:
    """``bridge COMMAND --no-journal --models-json (the scripted server's) ARGS`` through the
    real Pi, which must end before any request reaches the model server."""
    server = start_server([])
    try:
        models = scripted_models(server, tmp_path)
        p = subprocess.run(
            [sys.executable, "-m", "bridge", command, "--no-journal", "--models-json", models, *args],
            input=input,
            capture_output=True,
            text=True,
            timeout=120,
            cwd=ROOT,
        )
        assert server.requests == []
    finally:
        server.close()
    return p


def test_bridge_run_with_an_unknown_model_ends_with_one_line_naming_it(pinned_pi: Any, tmp_path: Path) -> None:
    run = _refused_before_any_model_call(tmp_path, "run", "--provider", "scripted", "--model", "nope", "hi")
    # An engine that cannot be set up: exit 2 (docs: guide/exit-codes.md), after one engine start --
    # the refusal is not retried (a fresh Pi answers the same), so no crash-limit backoff.
    assert run.returncode == 2 and run.stdout.strip() == ""
    assert "Traceback" not in run.stderr
    receipt, ending = [x for x in run.stderr.splitlines() if x.strip()]
    assert receipt.startswith("p1: rejected (engine-down) [error: seal check failed: Pi does not offer --model nope")
    assert ending.startswith("bridge run: the engine cannot be set up: seal check failed: Pi does not offer")
    assert "(scripted: scripted-model)" in ending


def test_bridge_serve_with_an_unknown_model_signals_it_and_rejects_the_prompt(pinned_pi: Any, tmp_path: Path) -> None:
    server = start_server([])
    try:
        flags = ["--no-journal", "--models-json", scripted_models(server, tmp_path), "--provider", "scripted"]
        serve = subprocess.run(
            [sys.executable, "-m", "bridge", "serve", *flags, "--model", "nope"],
            input='{"type":"prompt","id":"q1","message":"hi"}\n',
            capture_output=True,
            text=True,
            timeout=120,
            cwd=ROOT,
        )
    finally:
        server.close()
    assert serve.returncode == 2, serve.stderr
    (line,) = serve.stderr.splitlines()
    assert line.startswith("bridge serve: the engine cannot be set up: seal check failed: Pi does not offer")
    lines = [json.loads(x) for x in serve.stdout.splitlines()]
    # One engine start, one check: a refusal is not retried.
    assert len([x for x in lines if x["type"] == "engine" and x["event"] == "started"]) == 1
    (check,) = [x for x in lines if x["type"] == "signal" and x["signal"] == "seal-check"]
    assert check["problems"][0].startswith("Pi does not offer --model nope")
    (receipt,) = [x["receipt"] for x in lines if x["type"] == "receipt"]
    assert (receipt["state"], receipt["reason"]) == ("rejected", "engine-down")
    assert lines[-1] == {"type": "bye", "receipts": 1}


def test_bridge_models_still_lists_what_pi_offers_and_says_the_model_is_not_among_them(
    pinned_pi: Any, tmp_path: Path
) -> None:
    server = start_server([])
    try:
        flags = ["--models-json", scripted_models(server, tmp_path), "--provider", "scripted"]
        models = subprocess.run(
            [sys.executable, "-m", "bridge", "models", "--json", *flags, "--model", "nope"],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=ROOT,
        )
        good = subprocess.run(
            [sys.executable, "-m", "bridge", "models", *flags, "--model", "scripted-model"],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=ROOT,
        )
    finally:
        server.close()
    assert models.returncode == 0, models.stderr
    assert [json.loads(x)["id"] for x in models.stdout.splitlines()] == ["scripted-model"]
    assert models.stderr.strip() == (
        "bridge models: --provider scripted --model nope is not one of these exact ids: "
        "bridge run and serve would refuse it at start"
    )
    assert good.returncode == 0 and good.stderr == "", good.stderr


def test_a_model_pi_does_not_know_without_a_provider_is_a_set_up_failure_not_retried(
    pinned_pi: Any, tmp_path: Path
) -> None:
    """``--model nope`` with no ``--provider``: Pi exits 1 before it reads a command, saying
    ``Model "nope" not found`` -- its own check of the model, which a restart repeats. So it
    is a refusal, as when the bridge's check refuses (docs: guide/exit-codes.md: 2, one line), not
    a crash retried up to the crash limit; the same for ``serve`` and ``models``."""
    server = start_server([])
    flags = ["--no-journal", "--models-json", scripted_models(server, tmp_path), "--model", "nope"]
    prompt = '{"type":"prompt","id":"q1","message":"hi"}\n'
    try:
        runs = {
            cmd: subprocess.run(
                [sys.executable, "-m", "bridge", *cmd.split(), *flags],
                input=prompt,
                capture_output=True,
                text=True,
                timeout=120,
                cwd=ROOT,
            )
            for cmd in ("run hi", "serve", "models")
        }
        assert server.requests == []
    finally:
        server.close()
    said = 'Pi refused the configuration: Model "nope" not found. (`bridge models` with neither'
    for cmd, p in runs.items():
        assert p.returncode == 2, (cmd, p.stderr)
        assert "Traceback" not in p.stderr
        assert p.stderr.strip().splitlines()[-1].startswith(f"bridge {cmd.split()[0]}: "), (cmd, p.stderr)
        assert said in p.stderr.strip().splitlines()[-1], (cmd, p.stderr)
    lines = [json.loads(x) for x in runs["serve"].stdout.splitlines()]
    # One engine start: the refusal is not retried.
    assert len([x for x in lines if x["type"] == "engine" and x["event"] == "started"]) == 1
    (receipt,) = [x["receipt"] for x in lines if x["type"] == "receipt"]
    assert (receipt["state"], receipt["reason"]) == ("rejected", "engine-down")
    assert said in receipt["nativeError"]


def test_bridge_models_with_a_model_and_nothing_offered_says_one_thing(pinned_pi: Any) -> None:
    """No key for the provider: Pi offers no model, so ``bridge models`` says that, in one
    line, and not also that ``--model`` is none of "these" (there are none)."""
    import os

    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    p = subprocess.run(
        [sys.executable, "-m", "bridge", "models", "--provider", "anthropic", "--model", "claude-sonnet-4-5"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        env=env,
    )
    assert p.returncode == 0 and p.stdout == "", p
    assert p.stderr.strip().splitlines() == [
        "bridge models: the engine offers no model: Pi lists a provider's models once it has its key "
        "(--api-key-env NAME, or a --models-json provider)"
    ]


def test_an_extension_pi_cannot_load_is_a_set_up_failure_not_retried(pinned_pi: Any, tmp_path: Path) -> None:
    """``--extension FILE`` where FILE is no extension: Pi exits 1 at every start with ``Failed
    to load extension``; it was retried to the crash limit (exit 1, ``engine went down``). It is a
    refusal now: one start, one line, exit 2."""
    not_an_extension = tmp_path / "afile.ts"
    not_an_extension.write_text("")
    p = _refused_before_any_model_call(
        tmp_path,
        "serve",
        *("--provider", "scripted", "--model", "scripted-model", "--extension", str(not_an_extension)),
        input='{"type":"prompt","id":"q1","message":"hi"}\n',
    )
    assert p.returncode == 2, p.stderr
    last = p.stderr.strip().splitlines()[-1]
    assert last.startswith("bridge serve: the engine cannot be set up: Pi refused an extension: Failed to load"), last
    lines = [json.loads(x) for x in p.stdout.splitlines()]
    assert len([x for x in lines if x["type"] == "engine" and x["event"] == "started"]) == 1
