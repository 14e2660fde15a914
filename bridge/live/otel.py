"""OpenTelemetry traces of every prompt: the ``otel`` extra (``pip install 'pi-bridge[otel]'``).

Off, at no cost, unless a tracer provider is set: this module imports nothing of
OpenTelemetry at ``import bridge`` time, and a bridge opened with no provider set never does.
The provider is the one :func:`use_tracer_provider` gave (scoped, for a host or a test), else
OpenTelemetry's global one -- looked at only when ``opentelemetry.trace`` is already imported
(whoever set a provider imported it), and only if it is a real one (not the API's proxy).

What a bridge with tracing on exports (the GenAI semantic conventions' agent and tool spans;
docs: guide/budgets-and-traces.md lists every attribute):

1. **One span per prompt**, ``invoke_agent pi`` (``gen_ai.operation.name`` ``invoke_agent``),
   started when the prompt is submitted, as a child of the ``trace`` the prompt was submitted
   with (W3C trace context, ``{"traceparent": …}``) or else of the context current at submit.
   It carries the model asked for (``gen_ai.request.model``), the one that answered
   (``gen_ai.response.model``, ``gen_ai.provider.name``), the run's usage
   (``gen_ai.usage.input_tokens``, ``.output_tokens``; the cost as ``pi_bridge.usage.cost``)
   and the receipt (``pi_bridge.receipt.state``, ``.reason``, ``.stop``).
2. **It ends when the receipt is settled**, whatever happened (rejected at once, a crash, a
   forced close): its status is ``ERROR`` unless the receipt is ``finished``. A span still
   open when the bridge finishes (none should be) is ended then. A tracer that fails (an
   exporter that raises) is logged and costs spans, never a receipt: the bridge's own carrier
   runs after it whatever it did. Spans are ended in the bridge's event loop, so a host should
   export with a ``BatchSpanProcessor`` (its own thread), not a ``SimpleSpanProcessor`` over
   the network.
3. **A child span per tool call**, ``execute_tool NAME`` (``gen_ai.tool.name``,
   ``gen_ai.tool.call.id``), from Pi's ``tool_execution_start`` to its ``_end``; ``ERROR``
   when the tool failed; ended with the prompt's span if the run settled first.
4. **Span events**: ``sent`` (written to the engine), ``stop`` (an abort the bridge sent for it,
   with ``by``: ``controller``, ``timeout``, ``stall``, ``budget``, ``closing``), ``retry-start``
   / ``retry-end`` (Pi's own retries), ``compaction-start`` / ``-end``, and every signal about
   it (``stalled``, overlaps, gaps, seal diagnostics) by its name.

A traced prompt's event lines (tools, retries, compaction, turns) are told from their top-level
scalars whether or not the caller asked for its events; its ``message_update`` lines are not
read for it (a span needs no deltas). What that costs is ``tools/bench/bench``'s row "bridge API,
traced" (docs: performance.md, "Tracing's cost").
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from bridge.core.lifecycle import Deliver, Write
from bridge.core.progress import (
    CompactionEnd,
    CompactionStart,
    RetryEnd,
    RetryStart,
    ToolEnd,
    ToolStart,
    UsageEvent,
)
from bridge.core.receipts import Receipt
from bridge.core.supervision import Progress, Tell
from bridge.core.words import State

if TYPE_CHECKING:
    from bridge.core.lifecycle import LifeState

#: The tracer's name (its instrumentation scope).
SCOPE = "pi-bridge"
#: The agent's name on its spans (``gen_ai.agent.name``).
AGENT = "pi"

_provider: Any = None


@contextlib.contextmanager
def use_tracer_provider(provider: Any) -> Iterator[None]:
    """Bridges opened inside this block trace with ``provider`` (an OpenTelemetry
    ``TracerProvider``), whatever the global one is; None: none (tracing off)."""
    global _provider
    before, _provider = _provider, provider if provider is not None else _OFF
    try:
        yield
    finally:
        _provider = before


_OFF = object()


def prompt_tracer(state: Callable[[], LifeState]) -> PromptTracer | None:
    """The tracer for a bridge whose lifecycle's state ``state()`` gives, or None: tracing is off."""
    provider = _provider
    if provider is _OFF:
        return None
    if provider is None:
        if "opentelemetry.trace" not in sys.modules:
            return None  # nobody set one: nothing imported, nothing spent
        from opentelemetry import trace

        provider = trace.get_tracer_provider()
        if isinstance(provider, (trace.ProxyTracerProvider, trace.NoOpTracerProvider)):
            return None
    from bridge import __version__

    return PromptTracer(provider.get_tracer(SCOPE, __version__), state)


class PromptTracer:
    """Spans for one bridge's prompts, fed by the trio layer: :meth:`submitted` before a
    prompt's ``Submit`` is fed, and every action through the carriers :meth:`wrap` returns."""

    def __init__(self, tracer: Any, state: Callable[[], LifeState]) -> None:
        from opentelemetry import trace
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        self._trace = trace
        self._propagator = TraceContextTextMapPropagator()
        self._tracer = tracer
        self._state = state
        self._spans: dict[str, Any] = {}
        #: Each prompt's open tool spans, by Pi's tool call id.
        self._tools: dict[str, dict[str | None, Any]] = {}
        #: The prompt last written to the engine (an abort is for it).
        self._held: str | None = None

    # -- what the trio layer calls -------------------------------------------------------------

    def submitted(self, request: str, carrier: Mapping[str, str] | None) -> bool:
        """Rule 1: ``request``'s span starts. True: it is traced (its event lines are told);
        False: the tracer failed (logged), and the prompt goes on untraced."""
        try:
            self._start(request, carrier)
        except Exception as e:  # anything: the prompt is accepted all the same
            _tracing_failed(e)
            return False
        return True

    def _start(self, request: str, carrier: Mapping[str, str] | None) -> None:
        context = self._propagator.extract(dict(carrier)) if carrier is not None else None
        state = self._state()
        wanted = state.configuring.wanted
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": AGENT,
            "pi_bridge.request": request,
        }
        if wanted.model is not None:
            attributes["gen_ai.request.model"] = wanted.model
        span = self._tracer.start_span(
            f"invoke_agent {AGENT}", context=context, kind=self._trace.SpanKind.CLIENT, attributes=attributes
        )
        self._spans[request] = span

    def wrap(self, carriers: dict[type, Callable[[Any], None]]) -> dict[type, Callable[[Any], None]]:
        """The carriers, each of the kinds a span needs seen first by the tracer."""
        hooks: dict[type, Callable[[Any], None]] = {
            Write: self._write,
            Deliver: self._deliver,
            Tell: self._tell,
            Progress: self._progress,
        }
        out = dict(carriers)
        for kind, hook in hooks.items():
            out[kind] = _both(hook, carriers[kind])
        return out

    def close(self) -> None:
        """Rule 2's backstop: end every span still open (the bridge has finished)."""
        for request in list(self._spans):
            self._end(request, None)

    # -- the actions ------------------------------------------------------------------------------

    def _write(self, action: Write) -> None:
        if action.kind == "prompt" and action.request is not None:
            self._held = action.request
            self._event(action.request, "sent", {"pi_bridge.generation": action.generation})
        elif action.kind == "abort" and self._held is not None:
            rec = self._state().prompts.get(self._held)
            by = str(rec.stop_by) if rec is not None and rec.stop_by is not None else ""
            self._event(self._held, "stop", {"pi_bridge.stop": str(action.cmd.get("id")), "pi_bridge.stop.by": by})

    def _tell(self, action: Tell) -> None:
        payload = action.payload
        name = payload.get("signal")
        if not isinstance(name, str):
            return
        request = payload.get("request")
        request = request if isinstance(request, str) and request in self._spans else self._held
        if request is not None:
            fields = {f"pi_bridge.{k}": v for k, v in payload.items() if isinstance(v, (str, int, float, bool))}
            self._event(request, name, fields)

    def _progress(self, action: Progress) -> None:
        event, request = action.event, action.request
        if request is None or request not in self._spans:
            return
        kind = type(event)
        if kind is ToolStart:
            self._tool_start(request, event)  # type: ignore[arg-type]
        elif kind is ToolEnd:
            self._tool_end(request, event)  # type: ignore[arg-type]
        elif kind is UsageEvent:
            usage = event.usage  # type: ignore[union-attr]
            if usage.model:
                self._spans[request].set_attribute("gen_ai.response.model", usage.model)
        elif kind in (RetryStart, RetryEnd, CompactionStart, CompactionEnd):
            fields = {f"pi_bridge.{k}": v for k, v in event.to_json().items() if isinstance(v, (str, int, float, bool))}
            self._event(request, str(fields.pop("pi_bridge.event", "progress")), fields)

    def _deliver(self, action: Deliver) -> None:
        receipt = action.receipt
        if receipt.request is not None:
            self._end(receipt.request, receipt)

    # -- spans ------------------------------------------------------------------------------------

    def _event(self, request: str, name: str, attributes: dict[str, Any]) -> None:
        span = self._spans.get(request)
        if span is not None:
            span.add_event(name, attributes)

    def _tool_start(self, request: str, event: ToolStart) -> None:
        parent = self._trace.set_span_in_context(self._spans[request])
        attributes: dict[str, Any] = {"gen_ai.operation.name": "execute_tool"}
        if event.tool is not None:
            attributes["gen_ai.tool.name"] = event.tool
        if event.call_id is not None:
            attributes["gen_ai.tool.call.id"] = event.call_id
        span = self._tracer.start_span(
            f"execute_tool {event.tool or 'tool'}",
            context=parent,
            kind=self._trace.SpanKind.INTERNAL,
            attributes=attributes,
        )
        self._tools.setdefault(request, {})[event.call_id] = span

    def _tool_end(self, request: str, event: ToolEnd) -> None:
        span = self._tools.get(request, {}).pop(event.call_id, None)
        if span is None:
            return
        status = self._trace.StatusCode
        if event.is_error:
            span.set_status(self._trace.Status(status.ERROR, (event.result or "the tool failed")[:200]))
        else:
            span.set_status(self._trace.Status(status.OK))
        span.end()

    def _end(self, request: str, receipt: Receipt | None) -> None:
        span = self._spans.pop(request, None)
        if self._held == request:
            self._held = None
        for tool in self._tools.pop(request, {}).values():
            tool.set_status(
                self._trace.Status(self._trace.StatusCode.ERROR, "the prompt settled before the tool ended")
            )
            tool.end()
        if span is None:
            return
        status = self._trace.StatusCode
        if receipt is None:
            span.set_status(self._trace.Status(status.ERROR, "the bridge finished before the prompt's receipt"))
            span.end()
            return
        span.set_attributes(receipt_attributes(receipt))
        if receipt.state is State.FINISHED:
            span.set_status(self._trace.Status(status.OK))
        else:
            words = receipt.state + (f"/{receipt.reason}" if receipt.reason else "")
            span.set_status(self._trace.Status(status.ERROR, words))
        span.end()


def receipt_attributes(receipt: Receipt) -> dict[str, Any]:
    """A prompt span's attributes from its receipt: the receipt's words, the model and the usage."""
    out: dict[str, Any] = {"pi_bridge.receipt.state": str(receipt.state)}
    for key, value in (("reason", receipt.reason), ("stop", receipt.stop), ("run", receipt.run)):
        if value is not None:
            out[f"pi_bridge.receipt.{key}"] = str(value)
    config = receipt.config
    if config is not None and config.model is not None:
        out["gen_ai.request.model"] = config.model
    usage = receipt.usage
    if usage is not None:
        out["gen_ai.usage.input_tokens"] = usage.input + usage.cache_read + usage.cache_write
        out["gen_ai.usage.output_tokens"] = usage.output
        out["gen_ai.usage.cache_read.input_tokens"] = usage.cache_read
        out["gen_ai.usage.cache_creation.input_tokens"] = usage.cache_write
        out["pi_bridge.usage.cost"] = usage.cost
        if usage.model is not None:
            out["gen_ai.response.model"] = usage.model
            out.setdefault("gen_ai.request.model", usage.model)
        if usage.provider is not None:
            out["gen_ai.provider.name"] = usage.provider
    if config is not None and config.provider is not None:
        out.setdefault("gen_ai.provider.name", config.provider)
    return out


def _both(first: Callable[[Any], None], then: Callable[[Any], None]) -> Callable[[Any], None]:
    """``then`` (the bridge's own carrier) after ``first`` (the tracer's), whatever ``first``
    does: a tracer that fails (a bug, an exporter that raises) costs a span, never a receipt."""

    def carry(action: Any) -> None:
        try:
            first(action)
        except Exception as e:  # anything: the receipt comes first
            _tracing_failed(e)
        then(action)

    return carry


def _tracing_failed(error: BaseException) -> None:
    import logging

    logging.getLogger(__name__).warning("pi-bridge tracing failed (spans may be missing): %r", error)
