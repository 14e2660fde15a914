"""Budgets and traces through the real pinned Pi (issue 34): the scripted model server priced
per token (``models_json(cost=...)``) and a model that never stops calling tools. One bridge, with
tracing on (opentelemetry-sdk's in-memory exporter), runs three prompts:

- ``p1`` with its own budget below what two messages cost: stopped by the bridge once its spend
  passes it, ``failed``/``budget``, the spend on the receipt, after a tool call or two of the
  endless ones;
- ``p2`` with none of its own: the bridge's total passes during it, ``failed``/``budget``;
- ``p3``, submitted once the total is spent: ``rejected``/``budget``, never written.

Replay of the journal decides the same receipts; the spans carry the GenAI attributes and the
receipt, a tool call is a child span, and ``p1``'s span continues the trace it was given."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import trio
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from bridge import open_bridge
from bridge.core.config import BridgeConfig
from bridge.core.progress import ToolStart
from bridge.core.receipts import Receipt
from bridge.demo.model_server import start_server
from bridge.demo.model_server.server import models_json
from bridge.live.otel import use_tracer_provider
from bridge.profiles.pi import scripted_profile
from bridge.readers.diagnose.command import diagnose, report_json
from bridge.readers.replay import replay

#: Every model call asks for one more tool call, and reports 1000 tokens in, 50 out.
TOOL = {
    "tool_call": {"name": "bash", "arguments": {"command": "echo again"}},
    "usage": {"prompt_tokens": 1000, "completion_tokens": 50},
}
#: Dollars per million tokens: each message costs 0.01 + 0.0015 = 0.0115.
COST = {"input": 10.0, "output": 30.0}
PER_MESSAGE = 1000 * 10.0 / 1e6 + 50 * 30.0 / 1e6
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT = "00f067aa0ba902b7"


async def scenario(path: str, journal: Path) -> tuple[dict[str, Receipt], dict[str, list[Any]]]:
    config = BridgeConfig(total_budget_usd=0.05)
    async with open_bridge(scripted_profile(path), journal=journal, config=config) as bridge:
        seen: dict[str, list[Any]] = {}
        receipts: dict[str, Receipt] = {}
        trace = {"traceparent": f"00-{TRACE_ID}-{PARENT}-01"}
        h1 = await bridge.submit("keep going", request="p1", events=True, budget_usd=0.02, trace=trace)
        seen["p1"] = [m async for m in h1.messages()]
        receipts["p1"] = seen["p1"][-1]
        # Traced without asking for events: its tool calls are still seen (no deltas read).
        receipts["p2"] = await bridge.prompt("keep going", request="p2")
        receipts["p3"] = await bridge.prompt("one more", request="p3")
        return receipts, seen


@pytest.fixture(scope="module")
def ran(pinned_pi: object, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("budget")
    server = start_server([], default=TOOL)
    path = tmp / "models.json"
    path.write_text(json.dumps(models_json(server.base_url, cost=COST)))
    journal = tmp / "j.jsonl"
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    try:
        with use_tracer_provider(provider):
            receipts, seen = trio.run(scenario, str(path), journal)
        calls = len(server.requests)
    finally:
        server.close()
        provider.shutdown()
    return {
        "receipts": receipts,
        "seen": seen,
        "journal": journal,
        "spans": exporter.get_finished_spans(),
        "calls": calls,
    }


def test_a_prompt_whose_spend_passes_its_budget_is_stopped_failed_budget_with_its_spend(ran: dict[str, Any]) -> None:
    p1 = ran["receipts"]["p1"]
    assert (p1.state, p1.reason) == ("failed", "budget"), p1
    assert p1.stop is not None and p1.usage is not None
    # Stopped at the model call that took it past 0.02, the second (0.023). The key endpoint
    # reports a call when the provider's answer ends, which can be before Pi ends its message:
    # then Pi's aborted message says 0 tokens and the receipt's usage (Pi's own) is one
    # message's; the ``budget`` note's spend is the call's. A third counts only if the model
    # finished it before Pi read the abort.
    assert PER_MESSAGE - 1e-9 <= p1.usage.cost <= 3 * PER_MESSAGE + 1e-9, p1.usage
    assert 2 <= p1.usage.messages <= 3
    budget = [n["note"] for n in journal_lines(ran) if n.get("note", {}).get("event") == "budget"][0]
    assert budget["request"] == "p1" and 0.02 < budget["spent"]["usd"] <= 3 * PER_MESSAGE + 1e-9, budget
    tools = [m for m in ran["seen"]["p1"] if isinstance(m, ToolStart)]
    assert 1 <= len(tools) <= 2, "the model never stops calling tools: the budget ended the run"


def test_the_bridges_total_stops_the_prompt_that_passes_it_then_rejects_budget(ran: dict[str, Any]) -> None:
    p1, p2, p3 = (ran["receipts"][r] for r in ("p1", "p2", "p3"))
    assert (p2.state, p2.reason) == ("failed", "budget"), p2
    assert p1.usage is not None and p2.usage is not None
    # The total the bridge counted passed 0.05 in p2 (its ``budget`` note; the receipts' usage is
    # Pi's own, which can lag the key endpoint's count by the call that passed it).
    budgets = [n["note"] for n in journal_lines(ran) if n.get("note", {}).get("event") == "budget"]
    assert [b["request"] for b in budgets] == ["p1", "p2"] and budgets[1]["total"]["usd"] > 0.05
    assert p1.usage.cost <= 0.05  # p2 was written: some was left
    assert (p3.state, p3.reason) == ("rejected", "budget"), p3
    assert p3.native_error is not None and "of the bridge's 0.05 spent" in p3.native_error
    # Replay decides the same, from the journal alone (its stop notes say by: budget).
    replayed = {r.request: (r.state, r.reason, r.stop) for r in replay(str(ran["journal"])).receipts}
    assert replayed == {r.request: (r.state, r.reason, r.stop) for r in ran["receipts"].values()}
    notes = [json.loads(line) for line in ran["journal"].read_text().splitlines()[1:]]
    stops = [n["note"] for n in notes if isinstance(n.get("note"), dict) and n["note"].get("event") == "stop"]
    assert [(s["request"], s["by"]) for s in stops] == [("p1", "budget"), ("p2", "budget")]
    # bridge diagnose explains each: the bridge's stop, the spend past which budget, what to check.
    findings = report_json(diagnose(str(ran["journal"])))["findings"]
    words = {f["request"]: json.dumps(f) for f in findings}
    assert "the prompt's budget was passed" in words["p1"] and "budgetUsd" in words["p1"]
    assert "the bridge's total budget was passed" in words["p2"]


def journal_lines(ran: dict[str, Any]) -> list[dict[str, Any]]:
    return [json.loads(line) for line in ran["journal"].read_text().splitlines()[1:]]


def spans_of(ran: dict[str, Any]) -> tuple[dict[str, ReadableSpan], list[ReadableSpan]]:
    spans: list[ReadableSpan] = list(ran["spans"])
    agents = {s.attributes["pi_bridge.request"]: s for s in spans if s.name == "invoke_agent pi"}  # type: ignore[index]
    tools = [s for s in spans if s.name.startswith("execute_tool")]
    return agents, tools  # type: ignore[return-value]


def test_every_prompt_has_a_span_with_the_genai_attributes_and_its_receipt(ran: dict[str, Any]) -> None:
    agents, _ = spans_of(ran)
    assert sorted(agents) == ["p1", "p2", "p3"]
    a = dict(agents["p1"].attributes or {})
    assert a["gen_ai.operation.name"] == "invoke_agent"
    assert a["gen_ai.provider.name"] == "scripted"
    assert a["gen_ai.request.model"] == a["gen_ai.response.model"] == "scripted-model"
    p1 = ran["receipts"]["p1"]
    assert (a["gen_ai.usage.input_tokens"], a["gen_ai.usage.output_tokens"]) == (p1.usage.input, p1.usage.output)
    assert (a["pi_bridge.receipt.state"], a["pi_bridge.receipt.reason"], a["pi_bridge.receipt.stop"]) == (
        "failed",
        "budget",
        p1.stop,
    )
    assert not agents["p1"].status.is_ok
    stops = [e for e in agents["p1"].events if e.name == "stop"]
    assert [dict(e.attributes or {}).get("pi_bridge.stop.by") for e in stops] == ["budget"]
    # The trace it was given continues through the bridge.
    ctx, parent = agents["p1"].context, agents["p1"].parent
    assert ctx is not None and parent is not None
    assert (f"{ctx.trace_id:032x}", f"{parent.span_id:016x}") == (TRACE_ID, PARENT)
    # One never written ends too, at its receipt.
    r3 = dict(agents["p3"].attributes or {})
    assert (r3["pi_bridge.receipt.state"], r3["pi_bridge.receipt.reason"]) == ("rejected", "budget")


def test_a_tool_call_is_a_child_span_of_its_prompts(ran: dict[str, Any]) -> None:
    agents, tools = spans_of(ran)
    p1 = agents["p1"]
    assert p1.context is not None
    mine = [t for t in tools if t.parent is not None and t.parent.span_id == p1.context.span_id]
    assert mine, [t.name for t in tools]
    first = dict(mine[0].attributes or {})
    assert mine[0].name == "execute_tool bash"
    assert (first["gen_ai.operation.name"], first["gen_ai.tool.name"]) == ("execute_tool", "bash")
    assert mine[0].end_time is not None and p1.end_time is not None and mine[0].end_time <= p1.end_time
    assert {t.name for t in tools} == {"execute_tool bash"}, "every tool span names its tool"
    # p2 asked for no events: traced, its tool calls are child spans all the same.
    p2 = agents["p2"]
    assert p2.context is not None
    assert [t for t in tools if t.parent is not None and t.parent.span_id == p2.context.span_id]


async def test_a_compaction_counts_toward_the_prompt_it_was_made_for(pinned_pi: object, tmp_path: Path) -> None:
    """Pi's compaction calls the model for a summary (two calls here: a split turn), and its
    ``compaction_end`` says what they cost: that counts toward the budget of the prompt it was
    made for. 0.023 for the compaction plus its run's first message, 0.0115, pass its 0.03: the
    run is stopped there -- where its messages alone (0.0115 each) would have run to a third.
    The receipt's ``usage`` is the run's own; the ``budget`` note's spend has the compaction."""
    usage = {"usage": {"prompt_tokens": 1000, "completion_tokens": 50}}
    steps = [{"text": t, **usage} for t in ("I will remember 42.", "And blue.", "SUMMARY: 42, blue.", "turn context")]
    server = start_server(steps, default=TOOL)
    path = tmp_path / "models.json"
    path.write_text(json.dumps(models_json(server.base_url, cost=COST)))
    journal = tmp_path / "j.jsonl"
    try:
        profile = scripted_profile(str(path), settings={"compaction": {"keepRecentTokens": 1}})
        with trio.fail_after(90):
            async with open_bridge(profile, journal=journal) as bridge:
                await bridge.prompt("remember the number 42")
                await bridge.prompt("and the colour blue")
                bridge.compact()
                receipt = await bridge.prompt("keep going", budget_usd=0.03)
                spent = bridge.status()["spent"]["usd"]
    finally:
        server.close()
    assert (receipt.state, receipt.reason) == ("failed", "budget"), receipt
    # Pi's own usage of the run: its first message, or nothing when the key endpoint's report of
    # that call (which passed the budget) came before Pi ended the message (then aborted, 0 tokens).
    assert receipt.usage is not None and receipt.usage.cost in (0, pytest.approx(PER_MESSAGE)), receipt.usage
    # Two prompts, two summary calls, one message; and, on a loaded machine, the next call of the
    # run when Pi had made it before the budget's stop reached it (the key endpoint counts every
    # call it forwarded, and closes its gate with the stop: seen in a CI run, 6 messages' worth).
    assert spent in (pytest.approx(5 * PER_MESSAGE), pytest.approx(6 * PER_MESSAGE)), spent
    notes = [json.loads(line).get("note") for line in journal.read_text().splitlines()[1:]]
    (budget,) = [n for n in notes if isinstance(n, dict) and n.get("event") == "budget"]
    assert budget["spent"]["usd"] == pytest.approx(3 * PER_MESSAGE)
    assert [r.reason for r in replay(str(journal)).receipts][-1] == "budget"


def test_serve_takes_budget_usd_per_prompt_over_its_budget_usd_option(pinned_pi: object, tmp_path: Path) -> None:
    """``bridge serve --budget-usd 0.04``: a prompt line's ``"budgetUsd"`` is its own (0.02);
    one without takes the option's. Both end ``failed``/``budget``, each past its own."""
    import subprocess
    import sys

    server = start_server([], default=TOOL)
    path = tmp_path / "models.json"
    path.write_text(json.dumps(models_json(server.base_url, cost=COST)))
    lines = [
        {"type": "prompt", "id": "s1", "message": "keep going", "budgetUsd": 0.02},
        {"type": "prompt", "id": "s2", "message": "keep going"},
    ]
    try:
        p = subprocess.run(
            [sys.executable, "-m", "bridge", "serve", "--no-journal", "--budget-usd", "0.04"]
            + ["--models-json", str(path), "--provider", "scripted", "--model", "scripted-model"],
            input="".join(json.dumps(line) + "\n" for line in lines),
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        server.close()
    assert p.returncode == 0, p.stderr
    out = [json.loads(line) for line in p.stdout.splitlines()]
    receipts = {o["id"]: o["receipt"] for o in out if o["type"] == "receipt"}
    assert {k: (r["state"], r["reason"]) for k, r in receipts.items()} == {
        "s1": ("failed", "budget"),
        "s2": ("failed", "budget"),
    }, receipts
    # Pi's own usage on the receipt may lack the call that passed the budget (the key endpoint
    # reports it when the provider's answer ends, possibly before Pi ends its message).
    assert 0.02 - PER_MESSAGE < receipts["s1"]["usage"]["cost"] <= 3 * PER_MESSAGE + 1e-9
    assert 0.04 - PER_MESSAGE < receipts["s2"]["usage"]["cost"] <= 5 * PER_MESSAGE + 1e-9
