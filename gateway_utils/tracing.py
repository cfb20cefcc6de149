"""OpenTelemetry traces: optional, and off unless the standard `OTEL_*` variables ask for them.

A leaf module. `configure()` (called by `gateway.asgi` and `gateway.celery` at start-up) turns
tracing on when `OTEL_TRACES_EXPORTER` names an exporter (`otlp`, `console`) or an OTLP endpoint is
set (`OTEL_EXPORTER_OTLP_ENDPOINT` / `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`), and `OTEL_SDK_DISABLED`
is not `true`; the SDK and its exporters (requirements-otel.txt) read the rest of their variables
themselves (`OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`, `OTEL_TRACES_SAMPLER`,
`OTEL_EXPORTER_OTLP_PROTOCOL`, `OTEL_EXPORTER_OTLP_HEADERS`, `OTEL_BSP_*`, `OTEL_PROPAGATORS`).

While it is off every function here is a check of one global and returns at once: the allowed
path pays nothing measurable. docs/operating.md ("Traces") shows the spans:

    execute_tool {tool}          one per pre-tool-use ask (GenAI semantic conventions), continuing
    ├── hook {name}              the agent's `traceparent`; one child per hook that ran
    ├── await_decision           the human wait: events gateway.wait.started, gateway.decision
    └── deliver_card {channel}   in the Celery worker, the context carried in the task's headers
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Mapping
from typing import Any

# The GenAI semantic conventions' names for tool execution (opentelemetry-semantic-conventions,
# gen_ai_attributes): kept here as strings so that nothing imports the optional package when off.
GEN_AI_OPERATION_NAME = "gen_ai.operation.name"
GEN_AI_TOOL_NAME = "gen_ai.tool.name"
GEN_AI_TOOL_CALL_ID = "gen_ai.tool.call.id"
GEN_AI_TOOL_TYPE = "gen_ai.tool.type"
GEN_AI_AGENT_NAME = "gen_ai.agent.name"
GEN_AI_CONVERSATION_ID = "gen_ai.conversation.id"
EXECUTE_TOOL = "execute_tool"
# The W3C Trace Context headers (and baggage) a caller may send.
PROPAGATION_HEADERS = (b"traceparent", b"tracestate", b"baggage")

_NOTHING = contextlib.nullcontext()
_tracer: Any = None


def active() -> bool:
    """Whether spans are being made."""
    return _tracer is not None


def wanted() -> bool:
    """Whether the `OTEL_*` variables ask for traces."""
    if os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporters = os.environ.get("OTEL_TRACES_EXPORTER", "").strip()
    if exporters:
        return exporters != "none"
    return bool(
        os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        or os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    )


def configure() -> bool:
    """Turn tracing on if the environment asks for it (once per process); whether it is on."""
    if _tracer is not None or not wanted():
        return active()
    try:
        from opentelemetry import trace
        from opentelemetry.sdk.resources import SERVICE_NAME, Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError as exc:
        raise RuntimeError(
            f"OTEL_* variables ask for traces but the OpenTelemetry SDK is missing ({exc}): "
            "pip install -r requirements-otel.txt"
        ) from exc
    named = os.environ.get("OTEL_SERVICE_NAME") or "service.name" in os.environ.get(
        "OTEL_RESOURCE_ATTRIBUTES", ""
    )
    provider = TracerProvider(
        resource=Resource.create({} if named else {SERVICE_NAME: "approval-gateway"})
    )
    for name in (os.environ.get("OTEL_TRACES_EXPORTER") or "otlp").split(","):
        provider.add_span_processor(BatchSpanProcessor(_exporter(name.strip())))
    trace.set_tracer_provider(provider)
    use_provider(provider)
    return True


def _exporter(name: str) -> Any:
    if name == "console":
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        return ConsoleSpanExporter()
    if name != "otlp":
        raise RuntimeError(
            f"OTEL_TRACES_EXPORTER: unknown exporter {name!r} (the gateway knows otlp, console, none)"
        )
    protocol = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or os.environ.get(
        "OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"
    )
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
            OTLPSpanExporter,
        )
    else:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
            OTLPSpanExporter,
        )
    return OTLPSpanExporter()


def use_provider(provider: Any) -> None:
    """Make spans with `provider` (a TracerProvider), or stop making them (None). Tests hand in one
    with an in-memory exporter."""
    global _tracer
    _tracer = None if provider is None else provider.get_tracer("approval-gateway")


# --------------------------------------------------------------------------- context


def extract(headers: Iterable[tuple[bytes, bytes]]) -> Any:
    """The caller's trace context from ASGI headers (W3C `traceparent`), or None (a new trace)."""
    if _tracer is None:
        return None
    carrier = {
        key.decode("latin-1").lower(): value.decode("latin-1")
        for key, value in headers
        if key.lower() in PROPAGATION_HEADERS
    }
    if not carrier:
        return None
    from opentelemetry import propagate

    return propagate.extract(carrier)


def carrier() -> dict[str, str]:
    """The current trace context as headers for a message (a Celery task's), or {} when off."""
    if _tracer is None:
        return {}
    from opentelemetry import propagate

    headers: dict[str, str] = {}
    propagate.inject(headers)
    return headers


def attached(headers: Mapping[str, Any] | None) -> Any:
    """A context manager under which the trace context in `headers` (a message's) is current."""
    if _tracer is None or not headers or "traceparent" not in headers:
        return _NOTHING
    from opentelemetry import context, propagate

    @contextlib.contextmanager
    def attach():
        token = context.attach(
            propagate.extract({k: v for k, v in headers.items() if isinstance(v, str)})
        )
        try:
            yield
        finally:
            context.detach(token)

    return attach()


# --------------------------------------------------------------------------- spans


def span(
    name: str,
    *,
    attributes: Mapping[str, Any] | None = None,
    context: Any = None,
    kind: str = "internal",
) -> Any:
    """A context manager: a span, current while it is open (its exception recorded), or nothing when off."""
    if _tracer is None:
        return _NOTHING
    from opentelemetry.trace import SpanKind

    return _tracer.start_as_current_span(
        name,
        context=context,
        kind=SpanKind.SERVER if kind == "server" else SpanKind.INTERNAL,
        attributes={k: v for k, v in (attributes or {}).items() if v not in (None, "")},
    )


def tool_span(
    *, tool_name: str, tool_call_id: str = "", session_id: str = "", context: Any = None
) -> Any:
    """The span of one pre-tool-use ask (GenAI semantic conventions for tool execution)."""
    if _tracer is None:
        return _NOTHING
    return span(
        f"{EXECUTE_TOOL} {tool_name}" if tool_name else EXECUTE_TOOL,
        context=context,
        attributes={
            GEN_AI_OPERATION_NAME: EXECUTE_TOOL,
            GEN_AI_TOOL_NAME: tool_name,
            GEN_AI_TOOL_CALL_ID: tool_call_id,
            GEN_AI_TOOL_TYPE: "function",
            GEN_AI_CONVERSATION_ID: session_id,
        },
    )


def annotate(attributes: Mapping[str, Any]) -> None:
    """Set attributes on the current span (empty values left out); nothing when off."""
    if _tracer is None:
        return
    from opentelemetry import trace

    current = trace.get_current_span()
    if current.is_recording():
        current.set_attributes(
            {k: v for k, v in attributes.items() if v not in (None, "")}
        )


def event(
    name: str, attributes: Mapping[str, Any] | None = None, *, at: float | None = None
) -> None:
    """Add an event to the current span (`at`: its Unix time, if not now); nothing when off."""
    if _tracer is None:
        return
    from opentelemetry import trace

    current = trace.get_current_span()
    if current.is_recording():
        timestamp = None if at is None else int(at * 1e9)
        current.add_event(
            name,
            {k: v for k, v in (attributes or {}).items() if v not in (None, "")},
            timestamp,
        )


def failed(exc: BaseException) -> None:
    """Record `exc` on the current span and mark it an error (for an error that is handled, not raised)."""
    if _tracer is None:
        return
    from opentelemetry import trace
    from opentelemetry.trace import Status, StatusCode

    current = trace.get_current_span()
    if current.is_recording():
        current.record_exception(exc)
        current.set_status(Status(StatusCode.ERROR, str(exc)[:200]))
