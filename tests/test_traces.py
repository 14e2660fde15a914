"""The tracer's span events (bridge/live/otel.py, rule 4), fed the actions a bridge carries out,
into opentelemetry-sdk's in-memory exporter: ``sent``, the stop with whose it was, Pi's retries
and a stall's signal on the prompt's span, a tool call a child span, in order. The same
through the real Pi: tests/test_budget_live.py."""

from __future__ import annotations

import attrs
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from bridge.core.budget import Spend
from bridge.core.notices import StalledSignal
from bridge.core.progress import RetryEnd, RetryStart, ToolEnd, ToolStart
from bridge.core.receipts import Receipt
from bridge.core.steering import Wanted
from bridge.core.supervision import Deliver, Progress, Tell, View, Write
from bridge.core.words import StopBy
from bridge.live.otel import PromptTracer, receipt_attributes


def quiet_view() -> View:
    """What a supervision shows with nothing held: the tracer reads the bridge's model from it."""
    return View(
        generation=1,
        engine_phase="ready",
        sealed=True,
        engine_config=None,
        held=None,
        held_stop_by=None,
        queued=(),
        outstanding=0,
        receipts=0,
        down=None,
        setup_failed=False,
        opening=False,
        draining=False,
        closing=None,
        closed=False,
        wanted=Wanted(),
        spent=Spend(),
    )


def test_a_prompts_span_has_its_events_in_order_and_its_tool_a_child() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    view = [quiet_view()]
    tracer = PromptTracer(provider.get_tracer("test"), lambda: view[0])
    carried: list[object] = []
    carry = tracer.wrap({kind: carried.append for kind in (Write, Deliver, Tell, Progress)})
    assert tracer.submitted("p1", None)
    carry[Write](Write(1, {"type": "prompt", "id": "p1"}, "prompt", request="p1"))
    carry[Progress](Progress("p1", RetryStart("p1", 5, 1, 3, 100.0, "overloaded")))
    carry[Progress](Progress("p1", RetryEnd("p1", 9, True, 1, None)))
    carry[Progress](Progress("p1", ToolStart("p1", 10, "call-1", "bash", {"command": "ls"})))
    carry[Progress](Progress("p1", ToolEnd("p1", 12, "call-1", "bash", "boom", 0, True)))
    carry[Progress](Progress("p1", ToolStart("p1", 13, "call-2", "read", {})))  # still running at the settle
    carry[Tell](Tell({"type": "signal", **StalledSignal("p1", 3.0, "stop-1").to_json(), "generation": 1}))
    view[0] = attrs.evolve(
        view[0], held="p1", held_stop_by=StopBy.STALL
    )  # the supervision's view, as the stop is written
    carry[Write](Write(1, {"type": "abort", "id": "stop-1"}, "abort"))
    receipt = Receipt(request="p1", state="failed", reason="stalled", stop="stop-1")
    carry[Deliver](Deliver(receipt))
    assert len(carried) == 9, "every action is carried on"
    spans = {s.name: s for s in exporter.get_finished_spans()}
    agent = spans["invoke_agent pi"]
    events = [(e.name, dict(e.attributes or {})) for e in agent.events]
    assert [name for name, _ in events] == ["sent", "retry-start", "retry-end", "stalled", "stop"]
    assert events[1][1]["pi_bridge.attempt"] == 1 and events[1][1]["pi_bridge.error"] == "overloaded"
    assert events[4][1] == {"pi_bridge.stop": "stop-1", "pi_bridge.stop.by": "stall"}
    assert dict(agent.attributes or {}).items() >= receipt_attributes(receipt).items()
    assert not agent.status.is_ok
    bash, read = spans["execute_tool bash"], spans["execute_tool read"]
    assert agent.context is not None
    for tool in (bash, read):
        assert tool.parent is not None and tool.parent.span_id == agent.context.span_id
        assert not tool.status.is_ok  # bash failed; read was still running when the run settled
    assert dict(bash.attributes or {})["gen_ai.tool.call.id"] == "call-1"
    tracer.close()  # nothing left open: nothing more exported
    assert len(exporter.get_finished_spans()) == 3
