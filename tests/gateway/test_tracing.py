"""OpenTelemetry traces, collected with the SDK's in-memory exporter: a span per pre-tool-use ask with the
GenAI attributes, continuing the agent's `traceparent`, with the hooks, the human wait and the card
delivery (in the Celery worker) as its children."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from approvals.models import Outbox
from gateway_utils import tracing
from gateway_client import GatewayClient
from tests.conftest import apply_config, decide, make_agent_client
from tests.fakes.slack_api import FakeSlack
from tests.support import parked, wait_until

pytestmark = pytest.mark.django_db(transaction=True)

ROOT = Path(__file__).resolve().parents[2]
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE_ID}-{PARENT_ID}-01"

CONFIG = """
channels:
  - {name: traces-web, kind: web}
agents:
  - name: traces-bot
    hooks:
      - kind: policy
        name: rules
        rules:
          - {effect: deny, tools: ["danger__*"], reason: "never"}
      - kind: command
        name: missing
        event: pre_tool_use
        tools: ["pay__*"]
        command: ["/nonexistent/traces-hook"]
        on_error: fail_open
      - kind: approval_gate
        name: gate
        tools: ["pay__*"]
        channel: traces-web
        timeout_seconds: 1800
"""


@pytest.fixture
def spans():
    """Tracing on, into the SDK's in-memory exporter, for this test."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.use_provider(provider)
    yield exporter
    tracing.use_provider(None)
    provider.shutdown()


def named(exporter: InMemorySpanExporter, name: str) -> list:
    return [span for span in exporter.get_finished_spans() if span.name == name]


def test_an_ask_is_a_span_continuing_the_agents_trace_with_its_hooks_and_the_human_wait(
    live_gateway, spans
):
    apply_config(CONFIG)
    agent = make_agent_client(live_gateway, "traces-bot")
    body = {
        "session_id": "s-traces",
        "tool_name": "pay__invoice",
        "tool_args": {"amount": 5},
    }
    answers = {}

    def ask() -> None:
        response = agent.http.post(
            "/api/v1/hooks/pre-tool-use",
            json={**body, "tool_call_id": "call_42", "wait_seconds": 20},
            headers={"traceparent": TRACEPARENT},
        )
        answers["ask"] = response.json()

    asking = threading.Thread(target=ask)
    asking.start()
    pending = wait_until(
        lambda: _pending_confirmation("traces-bot"), what="the request to be created"
    )
    wait_until(lambda: parked(pending), what="the agent to be waiting")
    decide(pending, "approve", actor="alice", channel="traces-web")
    asking.join(timeout=30)
    assert answers["ask"]["decision"] == "allow"

    (tool,) = wait_until(
        lambda: named(spans, "execute_tool pay__invoice"), what="the ask's span"
    )
    assert tool.kind == SpanKind.INTERNAL
    assert (
        format(tool.context.trace_id, "032x") == TRACE_ID
    )  # the agent's trace, continued
    assert format(tool.parent.span_id, "016x") == PARENT_ID
    assert tool.parent.is_remote
    assert tool.attributes["gen_ai.operation.name"] == "execute_tool"
    assert tool.attributes["gen_ai.tool.name"] == "pay__invoice"
    assert tool.attributes["gen_ai.tool.call.id"] == "call_42"
    assert tool.attributes["gen_ai.tool.type"] == "function"
    assert tool.attributes["gen_ai.conversation.id"] == "s-traces"
    assert tool.attributes["gen_ai.agent.name"] == "traces-bot"
    assert tool.attributes["gateway.confirmation.id"] == pending
    assert (
        tool.attributes["gateway.decision"] == "allow"
    )  # the final answer, after the wait

    children = {
        span.name: span
        for span in spans.get_finished_spans()
        if span.parent and span.parent.span_id == tool.context.span_id
    }
    assert {"hook rules", "hook missing", "hook gate", "await_decision"} <= set(
        children
    )
    assert children["hook rules"].attributes["gateway.hook.kind"] == "policy"
    assert children["hook rules"].attributes["gateway.hook.decision"] == "allow"
    assert children["hook gate"].attributes["gateway.hook.decision"] == "ask"
    failed = children["hook missing"]
    assert failed.status.status_code == StatusCode.ERROR
    assert [event.name for event in failed.events] == ["exception"]

    wait = children["await_decision"]
    assert wait.attributes["gateway.confirmation.id"] == pending
    assert wait.attributes["gateway.wait.via"] == "pre_tool_use"
    assert wait.attributes["gateway.confirmation.status"] == "approved"
    started, decided = wait.events
    assert started.name == "gateway.wait.started"
    assert decided.name == "gateway.decision"
    assert decided.attributes["gateway.confirmation.status"] == "approved"
    assert decided.attributes["gateway.decided_by"] == "web:alice"
    assert wait.start_time <= started.timestamp <= decided.timestamp <= wait.end_time


def test_the_client_sends_its_trace_and_a_long_poll_is_traced_too(live_gateway, spans):
    apply_config(CONFIG)
    agent = make_agent_client(live_gateway, "traces-bot")
    client = GatewayClient(live_gateway.url, agent.key, max_wait=0)
    agents_own = TracerProvider().get_tracer(
        "the-agent"
    )  # the agent's own OpenTelemetry

    with agents_own.start_as_current_span("agent turn") as turn:
        answer = client.pre_tool_use(
            "s-client", "pay__invoice", {"amount": 7}, tool_call_id="call_7"
        )
    assert answer.confirmation_id  # asked; the client did not wait (max_wait=0)
    (tool,) = wait_until(
        lambda: named(spans, "execute_tool pay__invoice"), what="the ask's span"
    )
    assert tool.context.trace_id == turn.get_span_context().trace_id
    assert tool.parent.span_id == turn.get_span_context().span_id
    assert tool.attributes["gateway.decision"] == "pending"

    decide(answer.confirmation_id, "reject", actor="bob", channel="traces-web")
    waited = agent.http.get(
        f"/api/v1/confirmations/{answer.confirmation_id}/wait",
        params={"timeout": 5},
        headers={"traceparent": TRACEPARENT},
    )
    assert waited.json()["status"] == "rejected"
    (request,) = named(spans, "wait_confirmation")
    assert request.kind == SpanKind.SERVER
    assert format(request.context.trace_id, "032x") == TRACE_ID
    (wait,) = named(spans, "await_decision")
    assert wait.parent.span_id == request.context.span_id
    assert wait.attributes["gateway.wait.via"] == "long_poll"
    assert wait.attributes["gateway.confirmation.status"] == "rejected"
    # Already decided when it asked: there was no wait for a decision, so no decision event in it.
    assert [event.name for event in wait.events] == ["gateway.wait.started"]


def test_claude_codes_http_hook_is_an_ask_span_too(live_gateway, spans):
    apply_config(CONFIG)
    agent = make_agent_client(live_gateway, "traces-bot")
    hook = {
        "session_id": "cc-traces",
        "transcript_path": "/home/dev/.claude/projects/demo/cc-traces.jsonl",
        "cwd": "/home/dev/demo",
        "permission_mode": "default",
        "hook_event_name": "PreToolUse",
        "tool_name": "danger__drop",
        "tool_input": {},
        "tool_use_id": "toolu_traces",
    }
    answered = agent.http.post("/api/v1/claude-code/hooks", json=hook, headers={"traceparent": TRACEPARENT})
    assert answered.json()["hookSpecificOutput"]["permissionDecision"] == "deny"

    (tool,) = wait_until(lambda: named(spans, "execute_tool danger__drop"), what="the hook's span")
    assert format(tool.context.trace_id, "032x") == TRACE_ID
    assert tool.attributes["gen_ai.tool.call.id"] == "toolu_traces"
    assert tool.attributes["gen_ai.conversation.id"] == "cc-traces"
    assert tool.attributes["gateway.decision"] == "deny"
    (rules,) = named(spans, "hook rules")
    assert rules.parent.span_id == tool.context.span_id
    assert rules.attributes["gateway.hook.decision"] == "deny"


def test_the_card_delivery_in_the_worker_is_a_child_of_the_ask(
    live_gateway, spans, fake_slack: FakeSlack, celery_worker
):
    apply_config(
        f"""
channels:
  - name: traces-slack
    kind: slack
    bot_token: xoxb-1111-2222-tracesToken
    signing_secret: 0123456789abcdef0123456789abcdef
    channel_id: C0TRACES
    api_base_url: {fake_slack.base_url}
agents:
  - name: traces-slack-bot
    hooks:
      - kind: approval_gate
        tools: ["pay__*"]
        channel: traces-slack
        timeout_seconds: 1800
"""
    )
    agent = make_agent_client(live_gateway, "traces-slack-bot")
    fake_slack.fail_next(
        "chat.postMessage", status=500
    )  # a transient failure first: retried
    answer = agent.pre_tool_use(
        "pay__invoice", {"amount": 9}, tool_call_id="call_9"
    ).json()
    wait_until(
        lambda: Outbox.objects.filter(
            confirmation_id=answer["confirmation_id"], kind="card", status="sent"
        ).exists(),
        what="the card to be posted",
    )

    (tool,) = wait_until(
        lambda: named(spans, "execute_tool pay__invoice"), what="the ask's span"
    )
    deliveries = wait_until(
        lambda: (
            len(named(spans, "deliver_card traces-slack")) == 2
            and named(spans, "deliver_card traces-slack")
        ),
        what="both delivery spans",
    )
    for delivery in deliveries:
        assert delivery.context.trace_id == tool.context.trace_id
        assert delivery.parent.span_id == tool.context.span_id
        assert (
            delivery.attributes["gateway.confirmation.id"] == answer["confirmation_id"]
        )
        assert delivery.attributes["gateway.channel"] == "traces-slack"
        assert delivery.attributes["gateway.outbox.kind"] == "card"
    first, second = sorted(deliveries, key=lambda span: span.start_time)
    assert first.status.status_code == StatusCode.ERROR  # the 500, recorded
    assert first.attributes["gateway.outbox.attempt"] == 1
    assert second.status.status_code != StatusCode.ERROR
    assert second.attributes["gateway.outbox.attempt"] == 2


def _pending_confirmation(agent_name: str) -> str | None:
    from approvals.models import ConfirmationRequest

    row = ConfirmationRequest.objects.filter(
        agent__name=agent_name, status="pending"
    ).first()
    return str(row.pk) if row else None


def _run(env: dict[str, str]) -> subprocess.CompletedProcess:
    script = (
        "import django; django.setup()\n"
        "from opentelemetry import trace\n"
        "from gateway_utils import tracing\n"
        "print('on' if tracing.configure() else 'off')\n"
        "with tracing.tool_span(tool_name='fs__read', tool_call_id='call_1'):\n"
        "    pass\n"
        "provider = trace.get_tracer_provider()\n"
        "getattr(provider, 'force_flush', lambda: None)()\n"
    )
    clean = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    return subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        env={**clean, "DJANGO_SETTINGS_MODULE": "gateway.settings", **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_traces_are_off_unless_the_otel_variables_ask_for_them():
    off = _run({})
    assert off.returncode == 0, off.stderr
    assert off.stdout.split() == ["off"]
    assert _run(
        {"OTEL_TRACES_EXPORTER": "console", "OTEL_SDK_DISABLED": "true"}
    ).stdout.split() == ["off"]
    assert _run(
        {
            "OTEL_TRACES_EXPORTER": "none",
            "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318",
        }
    ).stdout.split() == ["off"]

    on = _run({"OTEL_TRACES_EXPORTER": "console"})
    assert on.returncode == 0, on.stderr
    assert on.stdout.startswith("on")
    assert '"name": "execute_tool fs__read"' in on.stdout
    assert '"gen_ai.tool.call.id": "call_1"' in on.stdout
    assert '"service.name": "approval-gateway"' in on.stdout
    named_service = _run(
        {"OTEL_TRACES_EXPORTER": "console", "OTEL_SERVICE_NAME": "gateway-eu"}
    )
    assert '"service.name": "gateway-eu"' in named_service.stdout
