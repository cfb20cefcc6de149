"""What runs is what was approved, through each framework integration (docs/approving.md): the MCP proxy
(the upstream is called with it), the OpenAI Agents SDK and LangChain (the tool function receives it).
Each waits for the approver the way it always does — it asks, long-polls, then asks again with the same
idempotency key — and runs the arguments as a `command` hook rewrote them, with the approver's edit and
the card a `redact` hook masked put back from the agent's own call (`tests.approved_call`)."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from collections.abc import Callable
from typing import Any

import pytest

from approvals.models import ToolCall
from gateway_client import AsyncGatewayClient, GatewayClient
from tests.approved_call import APPROVED, PROPOSED, SHOWN, TOOL, EditingApprover, configure
from tests.fakes.openai_api import FakeOpenAI
from tests.integrations.conftest import WAIT
from tests.integrations.test_mcp_proxy import mcp_client, proxy, text

pytestmark = pytest.mark.django_db(transaction=True)

ECHO_SERVER = str(Path(__file__).with_name("echo_mcp_server.py"))


def logged(log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def assert_recorded(tool_name: str) -> None:
    """The call's three records: proposed (the hook's rewrite, masked), approved (edited), what ran (masked)."""
    call = ToolCall.objects.get(tool_name=tool_name)
    assert call.confirmation.tool_args == {**SHOWN, "memo": "laptop"}
    assert call.confirmation.approved_args == SHOWN
    assert (call.outcome, call.ran_args) == ("success", SHOWN)


def test_the_mcp_proxy_calls_the_upstream_with_the_approved_arguments(live_gateway, transactional_db, tmp_path):
    key = configure("mcp-agent", tools=[f"billing__{TOOL}"])
    log = tmp_path / "upstream.log"
    approver = EditingApprover()

    with mcp_client(proxy(live_gateway.url, key, "billing", upstream=[sys.executable, ECHO_SERVER, str(log)])) as (
        portal,
        client,
    ):
        result = portal.call(client.call_tool, TOOL, PROPOSED)
    approver.join()

    assert not result.is_error, text(result)
    assert json.loads(text(result)) == APPROVED
    assert [(e["ran"], e["arguments"]) for e in logged(log) if "ran" in e] == [(TOOL, APPROVED)]
    assert_recorded(f"billing__{TOOL}")


class Payments:
    """The agent's tool, and what it was called with, each time."""

    def __init__(self) -> None:
        self.paid: list[dict[str, Any]] = []

    def tool(self) -> Callable[..., str]:
        """`pay_invoice`, as a plain function for a framework's tool decorator."""

        def pay_invoice(invoice_id: str, amount: int, card: str, memo: str, route: str = "direct") -> str:
            """Pay an invoice."""
            self.paid.append({"invoice_id": invoice_id, "amount": amount, "card": card, "memo": memo, "route": route})
            return f"paid {invoice_id}"

        return pay_invoice


def test_the_openai_agents_tool_receives_the_approved_arguments(
    live_gateway, transactional_db, fake_openai: FakeOpenAI
):
    from agents import Agent, OpenAIResponsesModel, RunConfig, Runner, function_tool, set_trace_processors
    from openai import AsyncOpenAI

    from gateway_client.openai_agents import gate_agent

    key = configure("openai-agent")
    payments = Payments()
    openai = AsyncOpenAI(base_url=fake_openai.base_url, api_key="sk-test")
    model = OpenAIResponsesModel(model="gpt-test", openai_client=openai)
    agent = Agent(name="payer", instructions="Pay invoices.", model=model, tools=[function_tool(payments.tool())])
    request = "[openai-agents] pay INV-7"
    fake_openai.script(request, [[(TOOL, PROPOSED)]])
    approver = EditingApprover()

    async def run() -> Any:
        set_trace_processors([])
        async with AsyncGatewayClient(live_gateway.url, key, max_wait=WAIT) as client:
            return await Runner.run(gate_agent(agent, client), request, run_config=RunConfig(tracing_disabled=True))

    result = asyncio.run(run())
    approver.join()

    assert payments.paid == [APPROVED]
    assert result.final_output == "FINAL: pay_invoice: paid INV-7"
    assert ToolCall.objects.get().confirmation.decided_by == "web:alice"
    assert_recorded(TOOL)


def test_the_langchain_tool_receives_the_approved_arguments(live_gateway, transactional_db, fake_openai: FakeOpenAI):
    from langchain.agents import create_agent
    from langchain.tools import tool
    from langchain_openai import ChatOpenAI

    from gateway_client.langchain import GatewayMiddleware

    key = configure("langchain-agent")
    payments = Payments()
    request = "[langchain] pay INV-7"
    fake_openai.script(request, [[(TOOL, PROPOSED)]])
    model = ChatOpenAI(model="gpt-test", base_url=fake_openai.base_url, api_key="sk-test")
    approver = EditingApprover()

    with GatewayClient(live_gateway.url, key, max_wait=WAIT) as client:
        agent = create_agent(model=model, tools=[tool(payments.tool())], middleware=[GatewayMiddleware(client)])
        state = agent.invoke({"messages": [{"role": "user", "content": request}]})
    approver.join()

    assert payments.paid == [APPROVED]
    assert state["messages"][-1].text == "FINAL: pay_invoice: paid INV-7"
    assert_recorded(TOOL)

