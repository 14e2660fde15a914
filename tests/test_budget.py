"""Budgets (issue 34; bridge/core/budget.py, bridge/core/lifecycle/budgets.py) in the pure
lifecycle, with its fake clock: a spend past a prompt's budget, or past the bridge's total, sends
the bridge's stop (``by: budget``) and its receipt is ``failed``/``budget``; once the total is
spent nothing more is written (``rejected``/``budget``). The real-Pi half is
tests/test_budget_live.py."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

from bridge.core.budget import Budget, Spend
from bridge.core.lifecycle import Acked, Deliver, GiveUp, ModelCalled, Spent, StopEngine, Submit, Write
from bridge.core.receipts import Facts, Usage
from bridge.core.supervision import Progress, Tell
from tests.test_lifecycle import Harness, delivered, notes, of, ready_engine, small_config


def usage(cost: float = 0.0, tokens: int = 0) -> Usage:
    return Usage(input=tokens, total_tokens=tokens, cost=cost, messages=1)


def submit(h: Harness, request: str, **budget: Any) -> list[Any]:
    h.accepted.append(request)
    return h.feed(Submit(request, f"message {request}", budget=Budget(**budget)))


def test_a_spend_past_the_prompts_budget_stops_it_as_the_bridges_and_decides_failed_budget() -> None:
    h = Harness()
    submit(h, "p1", usd=0.01)
    generation = ready_engine(h)
    h.acked.add("p1")
    h.feed(Acked(generation, "p1"))
    h.now = 1.0
    # Within the budget (equal to it is within): nothing is stopped.
    assert h.feed(Spent(generation, "p1", usage(cost=0.006))) == []
    assert h.feed(Spent(generation, "p1", usage(cost=0.004))) == []
    assert h.lc.state.prompts["p1"].spent == Spend(0.01, 0)
    h.now = 2.0
    out = h.feed(Spent(generation, "p1", usage(cost=0.001)))
    # The evidence first (the spend and the budget), then the stop's note, clear and abort.
    (budget,) = notes(out, "budget")
    assert budget["request"] == "p1" and budget["spent"]["usd"] == pytest.approx(0.011)
    assert budget["budget"] == {"usd": 0.01, "tokens": None}
    (stop,) = notes(out, "stop")
    assert stop["by"] == "budget" and "the prompt's budget" in stop["why"]
    assert [w.kind for w in of(out, Write)] == ["clear", "abort"]
    assert h.lc.state.deadlines["stop"] == 2.0 + h.cfg.stop_grace
    # More spend after the stop sends nothing more.
    assert h.feed(Spent(generation, "p1", usage(cost=1.0))) == []
    out = h.settle("p1", Facts(tracker=("failed", "interrupted"), stop_by="budget"), stop=stop["stop"])
    assert delivered(out) == {"p1": ("failed", "budget")}
    assert h.lc.state.deadlines == {}
    h.drive_to_completion()


def test_model_calls_the_messages_do_not_account_for_spend_the_prompts_budget() -> None:
    """Rule 5 (issue 41): the key endpoint's calls count for the prompt holding the gate; its spend
    is, count by count, the larger of its messages' and its calls'; Pi's own calls (the same
    tokens, reported by both) are not counted twice; a tool's call passes the budget and stops it."""
    h = Harness()
    submit(h, "p1", tokens=1000)
    generation = ready_engine(h)
    h.acked.add("p1")
    h.feed(Acked(generation, "p1"))
    assert h.lc.model_gate() == "p1"
    # Pi's own call: the endpoint reports it, and Pi's message says the same.
    out = h.feed(ModelCalled(generation, "p1", usage(tokens=300)))
    assert notes(out, "model-call")[0]["usage"]["totalTokens"] == 300 and not notes(out, "stop")
    assert h.feed(Spent(generation, "p1", usage(tokens=300))) == []
    rec = h.lc.state.prompts["p1"]
    assert (rec.spent, rec.called, rec.calls) == (Spend(0, 300), Spend(0, 300), 1)
    assert h.lc.state.budgets.spent == Spend(0, 300)  # once, not twice
    # A call with no usage read counts as a call, with no tokens.
    assert not notes(h.feed(ModelCalled(generation, "p1", None)), "stop")
    assert (rec.calls, h.lc.state.budgets.spent) == (2, Spend(0, 300))
    # A tool's own call with the token: no message of Pi's accounts for it; past 1000, stopped.
    h.now = 2.0
    out = h.feed(ModelCalled(generation, "p1", usage(tokens=800)))
    (budget,) = notes(out, "budget")
    assert budget["spent"]["tokens"] == 1100 and budget["calls"] == 3
    assert notes(out, "stop")[0]["by"] == "budget"
    assert h.lc.state.budgets.spent == Spend(0, 1100)
    # Stopped: the gate is closed (the endpoint refuses more calls).
    assert h.lc.model_gate() is None
    out = h.settle("p1", Facts(tracker=("failed", "interrupted"), stop_by="budget"), stop=notes(out, "stop")[0]["stop"])
    assert delivered(out) == {"p1": ("failed", "budget")}
    h.drive_to_completion()


def test_the_key_endpoints_gate_is_open_only_while_a_prompt_holds_the_slot() -> None:
    h = Harness()
    assert h.lc.model_gate() is None  # no prompt
    submit(h, "p1")
    generation = ready_engine(h)
    h.acked.add("p1")
    h.feed(Acked(generation, "p1"))
    assert h.lc.model_gate() == "p1"
    h.settle("p1", Facts(tracker=("finished", None)))
    assert h.lc.model_gate() is None  # after its receipt
    # A call reported late (begun before the receipt) counts toward the total alone.
    h.feed(ModelCalled(generation, None, usage(tokens=50)))
    assert h.lc.state.budgets.spent == Spend(0, 50)
    h.drive_to_completion()


def test_a_budget_stop_the_engine_does_not_obey_ends_at_the_stop_grace() -> None:
    h = Harness()
    submit(h, "p1", tokens=100)
    generation = ready_engine(h, ack=False)
    h.acked.add("p1")
    h.feed(Acked(generation, "p1"))
    h.now = 3.0
    out = h.feed(Spent(generation, "p1", usage(tokens=101)))
    assert notes(out, "stop")[0]["by"] == "budget"
    assert "101 tokens spent, more than 100" in notes(out, "stop")[0]["why"]
    assert h.advance(h.cfg.stop_grace - 0.5) == []
    out = h.advance(0.5)
    assert of(out, GiveUp) == [GiveUp("p1", "settle")]
    assert delivered(out) == {"p1": ("outcome-unknown", "settle-timeout")}
    assert of(out, StopEngine) == [StopEngine(generation, True)]
    h.exited(generation, None, 9)
    h.drive_to_completion()


def test_the_bridges_default_budget_holds_unless_the_prompt_gives_its_own() -> None:
    h = Harness(small_config(prompt_budget_usd=1.0))
    submit(h, "p1")
    submit(h, "p2", usd=5.0)
    assert h.lc.state.prompts["p1"].budget == Budget(1.0, None)
    assert h.lc.state.prompts["p2"].budget == Budget(5.0, None)
    generation = ready_engine(h, ack=False)
    h.feed(Acked(generation, "p1"))
    out = h.feed(Spent(generation, "p1", usage(cost=1.5)))
    assert notes(out, "stop")[0]["by"] == "budget"
    h.settle("p1", Facts(tracker=("failed", "interrupted"), stop_by="budget"))
    h.feed(Acked(generation, "p2"))
    assert h.feed(Spent(generation, "p2", usage(cost=4.0))) == []  # its own budget, not the default
    assert delivered(h.settle("p2", Facts(tracker=("finished", None)))) == {"p2": ("finished", None)}
    h.drive_to_completion()


def test_the_bridges_total_stops_the_prompt_that_passes_it_and_rejects_the_rest() -> None:
    h = Harness(small_config(total_budget_usd=0.05))
    submit(h, "p1")
    submit(h, "p2")
    generation = ready_engine(h, ack=False)
    h.feed(Acked(generation, "p1"))
    assert h.feed(Spent(generation, "p1", usage(cost=0.03))) == []
    assert delivered(h.settle("p1", Facts(tracker=("finished", None)))) == {"p1": ("finished", None)}
    # p2 is written (0.02 is left) and spends past the total: the bridge's stop.
    assert h.engine_has[generation] == "p2"
    h.feed(Acked(generation, "p2"))
    submit(h, "p3")  # waits behind p2
    out = h.feed(Spent(generation, "p2", usage(cost=0.03)))
    (stop,) = notes(out, "stop")
    assert stop["by"] == "budget" and "the bridge's total budget" in stop["why"]
    (budget,) = notes(out, "budget")
    assert budget["total"]["usd"] == pytest.approx(0.06) and budget["totalBudget"]["usd"] == 0.05
    # Nothing is left: the prompt waiting behind p2 is never written.
    assert delivered(out) == {"p3": ("rejected", "budget")}
    (p3,) = [d.receipt for d in of(out, Deliver)]
    assert p3.native_error is not None and "of the bridge's 0.05 spent" in p3.native_error
    out = h.settle("p2", Facts(tracker=("failed", "interrupted"), stop_by="budget"))
    assert delivered(out) == {"p2": ("failed", "budget")}
    assert not [w for w in of(out, Write) if w.kind == "prompt"]
    # And one submitted later still is rejected at once.
    assert delivered(submit(h, "p4")) == {"p4": ("rejected", "budget")}
    assert h.lc.state.budgets.spent == Spend(pytest.approx(0.06), 0)  # type: ignore[arg-type]
    h.drive_to_completion()


def test_a_spend_after_the_controllers_stop_or_for_a_settled_prompt_sends_no_stop() -> None:
    h = Harness(small_config(total_budget_tokens=10))
    submit(h, "p1", tokens=5)
    generation = ready_engine(h, ack=False)
    h.feed(Acked(generation, "p1"))
    stop = notes(h.stop("p1"), "stop")[0]
    assert stop["by"] == "controller"
    assert h.feed(Spent(generation, "p1", usage(tokens=50))) == []
    out = h.settle("p1", Facts(tracker=("failed", "interrupted"), stop_by="controller"), stop=stop["stop"])
    assert delivered(out) == {"p1": ("failed", "interrupted")}
    # A late spend of a settled prompt still counts toward the total.
    h.feed(Spent(generation, "p1", usage(tokens=1)))
    assert h.lc.state.budgets.spent.tokens == 51
    h.drive_to_completion()


def test_budget_words_and_bounds() -> None:
    assert Budget(0.5).passed(Spend(0.5, 0)) is None
    assert Budget(0.5).passed(Spend(0.6, 0)) == "0.6 USD spent, more than 0.5"
    assert Budget(tokens=10).spent(Spend(0.0, 10)) == "10 of the bridge's 10 tokens spent"
    assert Budget().empty and Budget().passed(Spend(1e9, 10**9)) is None
    # Tokens count Pi's totalTokens, or their sum when a provider gives no total.
    assert Spend().add(Usage(input=3, output=4, cache_read=5)) == Spend(0.0, 12)
    assert Budget(tokens=7).over(Budget(1.0, 3)) == Budget(1.0, 7)
    for bad in (-1, float("inf"), float("nan"), True, "1"):
        with pytest.raises(ValueError):
            Budget(bad)  # type: ignore[arg-type]


# --------------------------------------------------------------------------
# The doors: serve's prompt line, the command line, ``submit``


def test_serves_prompt_takes_budget_usd_budget_tokens_and_a_trace() -> None:
    from bridge.controller.messages import ControllerError, Prompt, parse_command

    line = {"type": "prompt", "id": "a", "message": "m", "budgetUsd": 0.5, "budgetTokens": 900}
    cmd = parse_command(json.dumps({**line, "trace": {"traceparent": "00-ab-cd-01"}}).encode())
    assert isinstance(cmd, Prompt)
    assert (cmd.budget_usd, cmd.budget_tokens, cmd.trace) == (0.5, 900, {"traceparent": "00-ab-cd-01"})
    for key, bad in (("budgetUsd", -1), ("budgetUsd", "1"), ("budgetTokens", 1.5), ("trace", "00-ab")):
        with pytest.raises(ControllerError, match=key):
            parse_command(json.dumps({**line, key: bad}).encode())
    with pytest.raises(ControllerError, match="budgetUsd"):
        parse_command(json.dumps({**line, "budgetUSD": 1}).encode())  # a misspelt key names the right one


@pytest.mark.parametrize("command", ["run", "serve", "acp"])
def test_the_budget_options_of_run_serve_and_acp_make_the_bridges_config(command: str) -> None:
    from bridge.cli.entry import build_parser
    from bridge.cli.options import bridge_config

    argv = [command, "--budget-usd", "0.25", "--total-budget-tokens", "5000"] + (["hi"] if command == "run" else [])
    config = bridge_config(build_parser().parse_args(argv))
    assert (config.prompt_budget_usd, config.prompt_budget_tokens) == (0.25, None)
    assert (config.total_budget_usd, config.total_budget_tokens) == (None, 5000)
    with pytest.raises(SystemExit):
        build_parser().parse_args([command, "--budget-usd", "-1"])


def test_submit_refuses_a_bad_budget_or_trace_and_accepts_nothing() -> None:
    from bridge.core.prompts import check_prompt

    check_prompt("m", {"budget_usd": 0.5, "budget_tokens": 10})
    for bad in (
        {"budget_usd": -0.5},
        {"budget_usd": float("nan")},
        {"budget_usd": True},
        {"budget_tokens": 2.5},
        {"budget_tokens": -1},
    ):
        (name,) = bad
        with pytest.raises(ValueError, match=f"^{name} must be"):  # the parameter's own name
            check_prompt("m", bad)
    with pytest.raises(TypeError):
        check_prompt("m", {"trace": {"traceparent": 1}})


def test_a_model_or_level_that_is_not_text_is_refused_by_its_name() -> None:
    """(Before the options were checked once, ``provider=5`` was taken and written to Pi.)"""
    from bridge.core.prompts import check_prompt

    for name in ("provider", "model", "thinking"):
        with pytest.raises(TypeError, match=f"^{name} must be a str or None, not 5$"):
            check_prompt("m", {"provider": "p", "model": "m", name: 5})


def test_tracing_off_imports_no_opentelemetry() -> None:
    """No provider set: opening and using a bridge imports nothing of OpenTelemetry (the
    extra may be absent), and the tracer is None: nothing is spent on it."""
    code = (
        "import sys, bridge, bridge.live.supervisor, bridge.live.api\n"
        "from bridge.live.otel import prompt_tracer\n"
        "assert prompt_tracer(lambda: None) is None\n"
        "assert not [m for m in sys.modules if m.startswith('opentelemetry')], sys.modules\n"
        "import opentelemetry.trace\n"  # imported, but no provider set: still off
        "assert prompt_tracer(lambda: None) is None\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_a_tracer_that_fails_costs_spans_never_a_receipt() -> None:
    """Every carrier the tracer wraps still runs when the tracer raises (a bug, an exporter
    that throws), and a prompt whose span cannot start goes on untraced."""
    from bridge.core.lifecycle import LifeState
    from bridge.core.receipts import Receipt
    from bridge.live.otel import PromptTracer

    class Broken:
        def start_span(self, *args: Any, **kwargs: Any) -> Any:
            raise RuntimeError("the exporter is down")

    tracer = PromptTracer(Broken(), LifeState)
    assert tracer.submitted("p1", None) is False
    carried: list[Any] = []
    tracer._spans["p1"] = Broken()  # a span whose every call raises
    carriers = tracer.wrap({kind: carried.append for kind in (Write, Deliver, Tell, Progress)})
    deliver = Deliver(Receipt(request="p1", state="finished"))
    carriers[Deliver](deliver)
    carriers[Write](Write(1, {"type": "prompt", "id": "p1"}, "prompt", request="p1"))
    assert carried == [deliver, Write(1, {"type": "prompt", "id": "p1"}, "prompt", request="p1")]


# --------------------------------------------------------------------------
# Compaction counts (Pi's compaction_end carries the summary call's usage)

PI_USAGE = {"input": 1000, "output": 50, "cacheRead": 0, "cacheWrite": 0, "totalTokens": 1050, "cost": {"total": 0.25}}


def test_a_compaction_end_says_what_the_summary_cost_for_the_held_prompt_or_none() -> None:
    from bridge.core.events import CompactionSpent
    from bridge.core.session import Session

    session = Session(("clear_queue",))
    line = {"type": "compaction_end", "reason": "manual", "result": {"summary": "s", "usage": PI_USAGE}}
    _, events = session.observe(line)
    (spent,) = [e for e in events if isinstance(e, CompactionSpent)]
    assert spent.request is None and (spent.usage.cost, spent.usage.total_tokens) == (0.25, 1050)
    session.send({"type": "prompt", "id": "p1", "message": "m"})
    _, events = session.observe({**line, "reason": "threshold"})
    assert [e.request for e in events if isinstance(e, CompactionSpent)] == ["p1"]
    _, events = session.observe({"type": "compaction_end", "reason": "manual", "aborted": True, "result": None})
    assert not [e for e in events if isinstance(e, CompactionSpent)]


def test_a_prompts_own_compaction_counts_toward_its_budget_and_the_total() -> None:
    """A compaction between runs (the prompt holding the slot, configuring) counts for that
    prompt: its run is stopped at its first message if the two together pass its budget."""
    h = Harness()
    h.lc.state.configuring.compact = ""  # a compaction goes with the next prompt
    submit(h, "p1", usd=0.3)
    generation = ready_engine(h, ack=False)
    assert h.lc.state.prompts["p1"].phase == "configuring"
    assert h.feed(Spent(generation, None, usage(cost=0.25))) == []  # not written: nothing to stop
    assert h.lc.state.prompts["p1"].spent.usd == 0.25 and h.lc.state.budgets.spent.usd == 0.25
