"""Steering (docs: guide/steering.md): a prompt's model and thinking level, applied through the
lifecycle while no slot is held and verified before the prompt is written -- against the real
pinned Pi and the scripted model server, and the lifecycle's rules without a clock."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import trio

from bridge.core.lifecycle import (
    Acked,
    BridgeConfig,
    Configure,
    Configured,
    Deliver,
    EngineExited,
    Lifecycle,
    Spawned,
    StartupChecked,
    Stop,
    Submit,
    Tick,
    Write,
)
from bridge.core.steering import EngineConfig, Wanted, commands, verify
from bridge.demo.model_server import start_server
from bridge.demo.model_server.server import models_json
from bridge.live.api import open_bridge
from bridge.profiles.pi import scripted_profile
from bridge.readers.replay import replay
from tests.helpers_live import ROOT, ServeProc

THINKER = "scripted-think"


def two_models(server: Any, path: Path) -> str:
    """The scripted provider with its model and a second one that reasons (offers thinking levels)."""
    data = models_json(server.base_url)
    thinker = dict(data["providers"]["scripted"]["models"][0], id=THINKER, name="Thinker", reasoning=True)
    data["providers"]["scripted"]["models"].append(thinker)
    path.write_text(json.dumps(data))
    return str(path)


async def test_model_and_thinking_are_applied_verified_and_recorded(pinned_pi: Any, tmp_path: Path) -> None:
    """The default; another model with a level it offers; a level the model does not offer
    (clamped, not an error); a model Pi does not know (rejected/config with Pi's words); and
    the bridge's own configure for what follows. Each receipt says what the prompt ran with,
    the model server saw the model asked for, and replay tells the same."""
    server = start_server([{"text": f"reply {n}"} for n in range(5)])
    journal = tmp_path / "j.jsonl"
    try:
        profile = scripted_profile(two_models(server, tmp_path / "models.json"))
        with trio.fail_after(90):
            async with open_bridge(profile, journal=journal) as bridge:
                plain = await bridge.prompt("one")
                thinking = await bridge.prompt("two", provider="scripted", model=THINKER, thinking="high")
                clamped = await bridge.prompt("three", provider="scripted", model="scripted-model", thinking="high")
                unknown = await bridge.prompt("four", provider="scripted", model="nope")
                bridge.configure(provider="scripted", model=THINKER, thinking="low")
                configured = await bridge.prompt("five")
        requests = server.requests
    finally:
        server.close()
    assert plain.config == EngineConfig("scripted", "scripted-model", "off")
    assert thinking.state == "finished" and thinking.config == EngineConfig("scripted", THINKER, "high")
    assert clamped.state == "finished"
    assert clamped.config == EngineConfig("scripted", "scripted-model", "off", thinking_asked="high")
    assert clamped.to_json()["config"] == {
        "provider": "scripted",
        "model": "scripted-model",
        "thinking": "off",
        "thinkingAsked": "high",
    }
    assert (unknown.state, unknown.reason) == ("rejected", "config")
    assert unknown.native_error is not None and "Model not found: scripted/nope" in unknown.native_error
    assert configured.config == EngineConfig("scripted", THINKER, "low")
    assert [r["body"]["model"] for r in requests] == ["scripted-model", THINKER, "scripted-model", THINKER]
    again = {r.request: r for r in replay(str(journal)).receipts}
    for live in (plain, thinking, clamped, unknown, configured):
        assert again[live.request].config == live.config
        assert (again[live.request].state, again[live.request].reason) == (live.state, live.reason)


async def scripted_serve(tmp_path: Path, models: str) -> ServeProc:
    """``bridge serve`` on the real Pi and the scripted model server's ``models`` (no journal)."""
    argv = [sys.executable, "-m", "bridge", "serve", "--no-journal", "--models-json", models]
    argv += ["--provider", "scripted", "--model", "scripted-model"]
    with open(tmp_path / "serve.stderr", "wb") as err:
        proc = await trio.lowlevel.open_process(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, cwd=str(ROOT)
        )
    return ServeProc(proc, tmp_path / "serve.stderr")


async def serve_to_the_end(sp: ServeProc, server: Any, *cmds: dict[str, Any]) -> None:
    """Send ``cmds``, close stdin and read serve to its exit, which must be 0; at the end serve
    is killed if it still runs and the model server is closed."""
    try:
        with trio.fail_after(90):
            for cmd in cmds:
                await sp.send(cmd)
            await sp.close_stdin()
            await sp.read_all(timeout=60)
            assert await sp.wait() == 0, sp.stderr
    finally:
        await sp.kill()
        server.close()


async def test_serve_takes_configure_and_a_prompts_model(pinned_pi: Any, tmp_path: Path) -> None:
    """The same through ``bridge serve``: ``configure``, and a prompt's own fields over it."""
    server = start_server([{"text": "a"}, {"text": "b"}])
    models = two_models(server, tmp_path / "models.json")
    sp = await scripted_serve(tmp_path, models)
    await serve_to_the_end(
        sp,
        server,
        {"type": "configure", "provider": "scripted", "model": THINKER, "thinking": "medium"},
        {"type": "prompt", "id": "a", "message": "x"},
        {"type": "prompt", "id": "b", "message": "y", "thinking": "high"},
        {"type": "configure", "model": "lonely"},
    )
    receipts = {x["id"]: x["receipt"] for x in sp.receipts()}
    assert receipts["a"]["config"] == {
        "provider": "scripted",
        "model": THINKER,
        "thinking": "medium",
        "thinkingAsked": None,
    }
    assert receipts["b"]["config"]["thinking"] == "high"
    answers = [x for x in sp.lines if x["type"] in ("configured", "error")]
    assert [x["type"] for x in answers] == ["configured", "error"], answers
    assert answers[0]["wanted"] == {"provider": "scripted", "model": THINKER, "thinking": "medium"}
    assert "provider" in answers[1]["error"]


async def test_serve_takes_a_model_id_that_begins_with_its_provider(pinned_pi: Any, tmp_path: Path) -> None:
    """An id exactly as ``bridge models`` lists it works with its provider, also one that begins
    with ``provider/`` (OpenRouter's ``openrouter/auto``; here ``scripted/special`` under
    ``scripted``), in a prompt and through configure; ``"model":"provider/id"`` alone still names
    a model. The prefix used to be cut off (Pi then refused ``scripted/special``: not found)."""
    server = start_server([{"text": "a"}, {"text": "b"}, {"text": "c"}])
    data = models_json(server.base_url)
    special = dict(data["providers"]["scripted"]["models"][0], id="scripted/special", name="Special")
    data["providers"]["scripted"]["models"].append(special)
    models = tmp_path / "models.json"
    models.write_text(json.dumps(data))
    sp = await scripted_serve(tmp_path, str(models))
    await serve_to_the_end(
        sp,
        server,
        {"type": "prompt", "id": "a", "message": "x", "provider": "scripted", "model": "scripted/special"},
        {"type": "prompt", "id": "b", "message": "y", "model": "scripted/scripted-model"},
        {"type": "configure", "provider": "scripted", "model": "scripted/special", "thinking": "off"},
        {"type": "prompt", "id": "c", "message": "z"},
    )
    receipts = {x["id"]: x["receipt"] for x in sp.receipts()}
    assert {k: (r["state"], r["config"]["model"]) for k, r in receipts.items()} == {
        "a": ("finished", "scripted/special"),
        "b": ("finished", "scripted-model"),
        "c": ("finished", "scripted/special"),
    }, receipts
    configured = [x for x in sp.lines if x["type"] == "configured"]
    assert configured[0]["wanted"] == {"provider": "scripted", "model": "scripted/special", "thinking": "off"}
    assert [r["body"]["model"] for r in server.requests] == ["scripted/special", "scripted-model", "scripted/special"]


async def test_serve_says_how_a_refused_model_named_alone_was_read(pinned_pi: Any, tmp_path: Path) -> None:
    """docs: guide/steering.md: for ``"model":"scripted/special"`` alone Pi's refusal comes with how
    the name was read (provider ``scripted``, id ``special``) and to give ``provider`` for an id
    holding a ``/`` -- through ``bridge serve``, in a prompt and through configure. serve passed
    the split name on as provider and id, so the refusal was Pi's bare words (a README trial)."""
    server = start_server([{"text": "a"}])
    sp = await scripted_serve(tmp_path, two_models(server, tmp_path / "models.json"))
    await serve_to_the_end(
        sp,
        server,
        {"type": "prompt", "id": "a", "message": "x", "model": "scripted/special"},
        {"type": "configure", "model": "scripted/other"},
        {"type": "prompt", "id": "b", "message": "y"},
    )
    receipts = {x["id"]: x["receipt"] for x in sp.receipts()}
    for rid, name in (("a", "special"), ("b", "other")):
        r = receipts[rid]
        assert (r["state"], r["reason"]) == ("rejected", "config"), r
        assert r["nativeError"].startswith(f"Pi refused set_model: Model not found: scripted/{name} ("), r
        assert f'provider "scripted", id "{name}"' in r["nativeError"] and 'give "provider" too' in r["nativeError"]
    configured = [x for x in sp.lines if x["type"] == "configured"]
    assert configured[0]["wanted"]["provider"] == "scripted" and configured[0]["wanted"]["model"] == "other"


def test_a_model_pi_refuses_whose_id_repeats_the_provider_names_the_exact_id() -> None:
    """``"provider":"scripted","model":"scripted/scripted-model"`` asks for that exact id; when
    Pi has none, its refusal is kept and the id it may have meant is named."""
    wanted = Wanted("scripted", "scripted/scripted-model")
    answers = {"p:model": {"success": False, "error": "Model not found: scripted/scripted/scripted-model"}}
    config, why = verify(wanted, answers, "p")
    assert config is None and why is not None
    assert why.startswith("Pi refused set_model: Model not found: scripted/scripted/scripted-model")
    assert '"scripted-model"' in why


def test_a_refused_model_named_alone_says_how_its_name_was_read() -> None:
    """``"model":"scripted/special"`` alone is split into provider ``scripted`` and id
    ``special``; when Pi refuses that, the refusal says so and how to name an id with a ``/``
    (a trial found the bare refusal left the controller guessing). The split is kept through
    ``over``, which is how a prompt's wish reaches the lifecycle."""
    wanted = Wanted(None, "scripted/special").over(Wanted(thinking="off"))
    assert wanted == Wanted("scripted", "special", "off") and wanted.split
    answers = {"p:model": {"success": False, "error": "Model not found: scripted/special"}}
    _, why = verify(wanted, answers, "p")
    assert why is not None and why.startswith("Pi refused set_model: Model not found: scripted/special (")
    assert 'provider "scripted", id "special"' in why and 'give "provider" too' in why
    # named with its provider, nothing was split, and nothing is said of it
    _, why = verify(Wanted("scripted", "special"), answers, "p")
    assert why == "Pi refused set_model: Model not found: scripted/special"
    assert not Wanted(thinking="low").over(Wanted("scripted", "special")).split


# -- the lifecycle, without a clock ----------------------------------------------------------


def test_a_prompt_configured_one_command_at_a_time_then_written() -> None:
    lc = Lifecycle(BridgeConfig(stall_timeout=None))
    base = EngineConfig("p", "m", "off")
    lc.step(Submit("a", "hi", wanted=Wanted("p", "m2", "high")), 0.0)
    lc.step(Spawned(1, 100, startup=[{"type": "get_state", "id": "seal-state"}]), 0.0)
    out = lc.step(StartupChecked(1, [], base), 0.0)
    writes = [a for a in out if isinstance(a, Write)]
    cmds = commands(Wanted("p", "m2", "high"), "cfg-1-1")
    assert [w.cmd for w in writes] == [cmds[0]] and writes[0].kind == "config"
    assert lc.state.prompts["a"].phase == "configuring" and lc.state.held == "a"
    ok = {"type": "response", "success": True}
    levels = {**ok, "data": {"levels": ["off", "low", "high"]}}
    state = {**ok, "data": {"model": {"provider": "p", "id": "m2"}, "thinkingLevel": "high"}}
    replies = [{**ok, "id": cmds[0]["id"]}, {**ok, "id": cmds[1]["id"]}, {**levels, "id": cmds[2]["id"]}]
    for n, reply in enumerate(replies):
        out = lc.step(Configured(1, "a", {reply["id"]: reply}), 0.1)
        assert [a.cmd for a in out if isinstance(a, Write)] == [cmds[n + 1]]
    out = lc.step(Configured(1, "a", {cmds[3]["id"]: {**state, "id": cmds[3]["id"]}}), 0.2)
    (prompt,) = [a for a in out if isinstance(a, Write)]
    assert prompt.kind == "prompt" and prompt.cmd["id"] == "a"
    assert lc.state.engine.config == EngineConfig("p", "m2", "high")
    # The next prompt wanting the same is written at once.
    lc.step(Acked(1, "a"), 0.3)
    assert verify(Wanted("p", "m2", "high"), {}, "x")[1] is not None


def test_a_configuring_prompt_is_never_written_on_a_stop_a_closing_a_deadline_or_an_exit() -> None:
    def configuring(**kw: Any) -> Lifecycle:
        lc = Lifecycle(BridgeConfig(stall_timeout=None, ack_timeout=5.0))
        lc.step(Submit("a", "hi", wanted=Wanted(thinking="high")), 0.0)
        lc.step(Spawned(1, 100), 0.0)
        assert lc.state.prompts["a"].phase == "configuring"
        return lc

    lc = configuring()
    out = lc.step(Stop("a"), 1.0)
    assert [(d.receipt.state, d.receipt.reason, d.release) for d in out if isinstance(d, Deliver)] == [
        ("rejected", "cancelled", False)
    ]
    assert lc.state.held is None and "config" not in lc.state.deadlines
    lc = configuring()
    out = lc.step(Tick(), 5.0)
    (d,) = [a for a in out if isinstance(a, Deliver)]
    assert (d.receipt.state, d.receipt.reason) == ("rejected", "config") and "did not answer" in str(
        d.receipt.native_error
    )
    assert lc.state.engine.recycle or lc.state.engine.phase == "stopping"
    lc = configuring()
    out = lc.step(EngineExited(1, 1), 1.0)
    assert not [a for a in out if isinstance(a, Deliver)]
    assert lc.state.prompts["a"].phase == "queued" and lc.state.queue == ["a"] and lc.state.held is None
    lc = configuring()
    from bridge.core.lifecycle import Close

    out = lc.step(Close(), 1.0)
    assert [(d.receipt.state, d.receipt.reason) for d in out if isinstance(d, Deliver)] == [("rejected", "closing")]
    assert not [a for a in out if isinstance(a, Write) and a.kind == "prompt"]


def test_configure_changes_what_later_prompts_ask_for_and_refuses_half_a_model() -> None:
    lc = Lifecycle(BridgeConfig(stall_timeout=None))
    lc.step(Configure(Wanted("p", "m", None)), 0.0)
    lc.step(Configure(Wanted(thinking="low")), 0.0)
    assert lc.state.configuring.wanted == Wanted("p", "m", "low")
    lc.step(Submit("a", "hi", wanted=Wanted(thinking="high")), 0.0)
    assert lc.state.prompts["a"].wanted == Wanted("p", "m", "high")
    with pytest.raises(ValueError, match="provider and its id"):
        Wanted(model="m")
    with pytest.raises(ValueError, match="thinking level"):
        Wanted(thinking="enormous")


async def test_a_new_conversation_forgets_the_old_context(pinned_pi: Any, tmp_path: Path) -> None:
    """``new_conversation`` between two prompts: Pi's ``new_session`` (answered, nothing else
    emitted), then ``get_state``, then the prompt -- whose request to the model carries none of
    the first exchange. Without it the second request does."""
    server = start_server([{"text": "noted"}, {"text": "which word?"}, {"text": "banana"}])
    journal = tmp_path / "j.jsonl"
    try:
        with trio.fail_after(60):
            async with open_bridge(scripted_profile(server.write_models(str(tmp_path))), journal=journal) as bridge:
                await bridge.prompt("remember the word banana")
                bridge.new_conversation()
                fresh = await bridge.prompt("what was the word?")
                again = await bridge.prompt("and now?")
        requests = server.requests
    finally:
        server.close()
    assert fresh.state == again.state == "finished"
    users = [[m["content"] for m in r["body"]["messages"] if m["role"] == "user"] for r in requests]
    assert len(users[0]) == 1 and len(users[1]) == 1, users  # the second starts afresh
    assert len(users[2]) == 2, users  # the third goes on from the second
    sends = [json.loads(line).get("send", {}).get("type") for line in journal.read_text().splitlines()]
    sends = [s for s in sends if s is not None]
    assert sends[sends.index("new_session") :][:3] == ["new_session", "get_state", "prompt"]
    assert sends.count("new_session") == 1


async def test_models_through_the_api_serve_and_the_cli(pinned_pi: Any, tmp_path: Path) -> None:
    """What the engine offers, asked through the lifecycle (an engine started for it), three ways."""
    server = start_server([])
    models = two_models(server, tmp_path / "models.json")
    try:
        with trio.fail_after(60):
            async with open_bridge(scripted_profile(models), journal=None) as bridge:
                offered = await bridge.models()
        pick = {(m["provider"], m["id"]): m["reasoning"] for m in offered}
        assert pick[("scripted", "scripted-model")] is False and pick[("scripted", THINKER)] is True
        assert all(m["contextWindow"] == 128000 for m in offered if m["provider"] == "scripted")
        flags = ["--models-json", models, "--provider", "scripted", "--model", "scripted-model"]
        cli = subprocess.run(
            [sys.executable, "-m", "bridge", "models", *flags], capture_output=True, text=True, timeout=60, cwd=ROOT
        )
        assert cli.returncode == 0, cli.stderr
        assert cli.stdout.splitlines()[0].split()[:4] == ["provider", "id", "reasoning", "context"]
        assert any(line.split()[:3] == ["scripted", THINKER, "yes"] for line in cli.stdout.splitlines())
        as_json = subprocess.run(
            [sys.executable, "-m", "bridge", "models", "--json", *flags],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=ROOT,
        )
        assert as_json.returncode == 0 and {json.loads(x)["id"] for x in as_json.stdout.splitlines()} >= {
            "scripted-model",
            THINKER,
        }
        serve = subprocess.run(
            [sys.executable, "-m", "bridge", "serve", "--no-journal", *flags],
            input='{"type":"models"}\n',
            capture_output=True,
            text=True,
            timeout=60,
            cwd=ROOT,
        )
        assert serve.returncode == 0, serve.stderr
        lines = [json.loads(x) for x in serve.stdout.splitlines()]
        (answer,) = [x for x in lines if x["type"] == "models"]
        assert {m["id"] for m in answer["models"]} >= {"scripted-model", THINKER}
        assert lines[-1] == {"type": "bye", "receipts": 0}
    finally:
        server.close()


async def test_models_from_an_engine_that_cannot_start_is_an_error_not_a_hang(tmp_path: Path) -> None:
    from bridge.live.steering import EngineQuestionError
    from bridge.profiles.command import CommandProfile

    config = BridgeConfig(restart_backoff=(0.0,), crash_limit=1)
    with trio.fail_after(30):
        async with open_bridge(
            CommandProfile([sys.executable, "-c", "raise SystemExit(3)"]), journal=None, config=config
        ) as bridge:
            with pytest.raises(EngineQuestionError, match="down"):
                await bridge.models()


async def test_a_new_conversation_goes_with_the_next_prompt_submitted_not_the_next_written(tmp_path: Path) -> None:
    """a1 runs, a2 waits, then new_conversation, then a3: the new conversation comes before a3
    (the controller's order), not before a2 (found by trying it: it went to whichever prompt
    was written next)."""
    from bridge.profiles.command import CommandProfile
    from tests.helpers_live import fake_engine_argv

    journal = tmp_path / "j.jsonl"
    profile = CommandProfile(fake_engine_argv({"defaults": {"delta_delay": 0.02}}))
    with trio.fail_after(30):
        async with open_bridge(profile, journal=journal) as bridge:
            handles = [await bridge.submit("one", request="a1"), await bridge.submit("two", request="a2")]
            bridge.new_conversation()
            handles.append(await bridge.submit("three", request="a3"))
            receipts = [await h.receipt() for h in handles]
    assert [r.state for r in receipts] == ["finished"] * 3
    sends = [json.loads(line).get("send") for line in journal.read_text().splitlines()]
    order = [s.get("id") if s.get("type") == "prompt" else s.get("type") for s in sends if isinstance(s, dict)]
    order = [x for x in order if x in ("a1", "a2", "a3", "new_session")]
    assert order == ["a1", "a2", "new_session", "a3"], order


async def test_compact_on_request_summarizes_before_the_next_prompt(pinned_pi: Any, tmp_path: Path) -> None:
    """``compact`` goes with the next prompt submitted: before it is written the bridge sends
    Pi's ``compact`` (with the instructions), Pi asks the model for a summary, the controller
    gets a ``compacted`` notice, and the prompt's request to the model starts from the summary.
    A compaction asked with a new conversation for the same prompt is moot (not sent). On a
    conversation too small to compact (Pi's default keeps the last 20k tokens) Pi refuses: the
    notice says so in Pi's words and the prompt is written all the same. (Recorded:
    tools/pi/captures/compact.jsonl.)"""
    summary = "SUMMARY: the user asked to remember 42 and blue."
    steps = ["I will remember 42.", "And blue.", summary, "turn context", "It was 42.", "fresh", "one", "two"]
    server = start_server([{"text": t} for t in steps])
    journal = tmp_path / "j.jsonl"
    try:
        models = server.write_models(str(tmp_path))
        # keepRecentTokens 1: a short conversation has something to compact.
        profile = scripted_profile(models, settings={"compaction": {"keepRecentTokens": 1}})
        with trio.fail_after(90):
            async with open_bridge(profile, journal=journal) as bridge:
                notes = bridge.signals()
                await bridge.prompt("remember the number 42")
                await bridge.prompt("and the colour blue")
                bridge.compact("keep the number")
                after = await bridge.prompt("what was the number?")
                bridge.compact()
                bridge.new_conversation()
                fresh = await bridge.prompt("hello again")
            seen = [note async for note in notes]
            async with open_bridge(scripted_profile(models), journal=tmp_path / "small.jsonl") as bridge:
                notes = bridge.signals()
                await bridge.prompt("a first prompt")
                bridge.compact()
                small = await bridge.prompt("and now?")
            seen += [note async for note in notes]
        requests = server.requests
    finally:
        server.close()
    assert after.state == fresh.state == small.state == "finished", (after, fresh, small)
    compacted = [n for n in seen if n["type"] == "compacted"]
    assert [(c["id"], c["ok"]) for c in compacted] == [(after.request, True), (small.request, False)], compacted
    assert compacted[0]["tokensBefore"] > 0 and compacted[0]["summaryChars"] > len(summary)
    assert compacted[0]["usage"]["input"] > 0 and set(compacted[0]["usage"]) >= {"cacheRead", "cost", "totalTokens"}
    assert "Nothing to compact" in compacted[1]["error"]
    # The summary request carried the instructions; the next prompt's request starts from the summary.
    assert "keep the number" in json.dumps(requests[2]["body"])
    after_request = json.dumps(requests[4]["body"]["messages"])
    assert summary in after_request and "remember the number 42" not in after_request
    sends = [json.loads(line).get("send", {}) for line in journal.read_text().splitlines()]
    types = [s.get("type") for s in sends if s]
    assert types.count("compact") == 1  # the second was moot: a new conversation went with it
    first = types.index("compact")
    assert types[first : first + 3] == ["compact", "get_state", "prompt"]
    assert [s for s in sends if s.get("type") == "compact"][0]["customInstructions"] == "keep the number"
    # Replay agrees with every receipt.
    assert [r.state for r in replay(journal).receipts] == ["finished"] * 4


async def test_a_prompt_stopped_while_pi_compacts_for_it_aborts_the_compaction(pinned_pi: Any, tmp_path: Path) -> None:
    """Stopping a prompt while its compaction runs (the model never answers the summary request)
    rejects it ``cancelled`` and sends Pi's ``abort``, which ends the compaction; the next
    prompt is written only after Pi answered the compaction -- Pi refuses a prompt while it
    compacts -- and finishes (found by a new-user trial: it was rejected/engine)."""
    server = start_server([{"text": "a"}, {"text": "b"}, {"hang": True}, {"text": "d done"}])
    journal = tmp_path / "j.jsonl"
    try:
        profile = scripted_profile(server.write_models(str(tmp_path)), settings={"compaction": {"keepRecentTokens": 1}})
        with trio.fail_after(60):
            async with open_bridge(profile, journal=journal) as bridge:
                await bridge.prompt("first")
                await bridge.prompt("second")
                bridge.compact()
                c = await bridge.submit("third", request="c")
                d = await bridge.submit("fourth", request="d")
                while len(server.requests) < 3:  # the summary request is in
                    await trio.sleep(0.05)
                await bridge.stop("c")
                rc, rd = await c.receipt(), await d.receipt()
    finally:
        server.close()
    assert (rc.state, rc.reason) == ("rejected", "cancelled"), rc
    assert (rd.state, rd.reason, rd.reply) == ("finished", None, "d done"), rd
    sends = [json.loads(line).get("send", {}) for line in journal.read_text().splitlines()]
    types = [s.get("type") for s in sends if s]
    i = types.index("compact")
    assert types[i:].index("abort") < types[i:].index("prompt"), types[i:]


def test_a_model_named_provider_slash_id_is_the_same_model() -> None:
    """``"model": "provider/id"`` names a model as the command line's ``--model`` does (a
    serve line with it used to ask Pi for ``provider/provider/id``: found by a new-user trial)."""
    from bridge.controller.messages import Prompt, parse_command

    same = Wanted("scripted", "scripted-model")
    assert Wanted(None, "scripted/scripted-model") == same
    # with a provider the id is taken exactly: an id may begin with its provider's name
    assert Wanted("openrouter", "anthropic/claude").model == "anthropic/claude"
    assert Wanted("openrouter", "openrouter/auto").model == "openrouter/auto"
    assert Wanted("openrouter", "openrouter/auto").over(Wanted()) == Wanted("openrouter", "openrouter/auto")
    assert Wanted(thinking="low").over(Wanted("openrouter", "openrouter/auto")).model == "openrouter/auto"
    cmd = parse_command(b'{"type":"prompt","id":"a","message":"m","model":"scripted/scripted-model"}')
    assert isinstance(cmd, Prompt) and cmd.wanted == same
    with pytest.raises(ValueError):
        Wanted(None, "no-provider")
