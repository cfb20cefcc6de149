"""The OpenAI Agents SDK and LangChain adapters in-process, on the real frameworks and the fake OpenAI API,
for what the examples do not show: a failing tool and the gateway's tool-error answer (retry, recover,
abort), the gateway session a framework's run maps to, and LangChain's async path."""

from __future__ import annotations

import asyncio
import sys

import pytest

from approvals.models import ToolCall
from gateway_client import AsyncGatewayClient, GatewayClient, ToolRunAborted
from tests.fakes.openai_api import FakeOpenAI
from tests.integrations.conftest import Gateway

pytestmark = pytest.mark.django_db(transaction=True)

AGENT = "crm-agent"
RETRY = {"kind": "retry_on_error", "tools": ["lookup"], "max_attempts": 3, "backoff_seconds": 0.1}


def tool_error_hook(name: str, script: str) -> dict:
    return {
        "kind": "command",
        "name": name,
        "event": "tool_error",
        "tools": ["lookup"],
        "command": [sys.executable, "-c", script],
    }


ABORT = tool_error_hook("stop", "import sys; sys.stderr.write('the CRM is being migrated'); sys.exit(2)")
RECOVER = tool_error_hook(
    "cached-copy", "import json,sys; json.load(sys.stdin); print(json.dumps({'result': 'cached profile'}))"
)


class FlakyCrm:
    """`lookup` fails its first `failures` calls (all of them by default), then answers."""

    def __init__(self, failures: int = 10**6):
        self.failures = failures
        self.calls: list[str] = []

    def lookup(self, customer_id: str) -> str:
        self.calls.append(customer_id)
        if len(self.calls) <= self.failures:
            raise RuntimeError("503 the CRM is busy")
        return f"profile of {customer_id}"


# --------------------------------------------------------------------------- OpenAI Agents SDK


def openai_agent(crm: FlakyCrm, fake_openai: FakeOpenAI):
    from agents import Agent, OpenAIResponsesModel, function_tool
    from openai import AsyncOpenAI

    @function_tool
    def lookup(customer_id: str) -> str:
        """A customer's profile."""
        return crm.lookup(customer_id)

    model = OpenAIResponsesModel(
        model="gpt-test", openai_client=AsyncOpenAI(base_url=fake_openai.base_url, api_key="sk-test")
    )
    return Agent(name="crm", instructions="Look customers up.", model=model, tools=[lookup])


async def run_openai_agent(agent, gateway: Gateway, key: str, request: str, **run_config):
    from agents import RunConfig, Runner, set_trace_processors

    from gateway_client.openai_agents import gate_agent

    set_trace_processors([])  # traces stay in the process (the default exporter would call api.openai.com)
    async with AsyncGatewayClient(gateway.url, key, max_wait=30) as client:
        return await Runner.run(gate_agent(agent, client), request, run_config=RunConfig(**run_config))


def test_openai_agents_retries_a_failing_tool_as_the_gateway_says_in_the_runs_trace_group(
    quiet_gateway: Gateway, fake_openai: FakeOpenAI
):
    key = quiet_gateway.configure(AGENT, [RETRY])
    crm = FlakyCrm(failures=1)
    request = "[openai-agents] look up c-1 (flaky)"
    fake_openai.script(request, [[("lookup", {"customer_id": "c-1"})]])

    result = asyncio.run(
        run_openai_agent(openai_agent(crm, fake_openai), quiet_gateway, key, request, group_id="conv-42")
    )

    assert crm.calls == ["c-1", "c-1"]
    assert fake_openai.outputs_seen(request) == {"lookup": "profile of c-1"}
    assert result.final_output == "FINAL: lookup: profile of c-1"
    call = ToolCall.objects.get()
    assert (call.session_id, call.outcome, call.result) == ("openai-agents-conv-42", "success", "profile of c-1")


def test_openai_agents_stops_the_run_when_the_gateway_aborts_a_failed_tool(
    quiet_gateway: Gateway, fake_openai: FakeOpenAI
):
    key = quiet_gateway.configure(AGENT, [ABORT])
    crm = FlakyCrm()
    request = "[openai-agents] look up c-2 (abort)"
    fake_openai.script(request, [[("lookup", {"customer_id": "c-2"})]])

    with pytest.raises(Exception) as raised:
        asyncio.run(run_openai_agent(openai_agent(crm, fake_openai), quiet_gateway, key, request))

    assert isinstance(raised.value.__cause__, ToolRunAborted)
    assert "lookup failed and the gateway stopped the run: the CRM is being migrated" in str(raised.value.__cause__)
    assert crm.calls == ["c-2"]


# --------------------------------------------------------------------------- LangChain


def langchain_agent(crm: FlakyCrm, fake_openai: FakeOpenAI, client, **middleware):
    from langchain.agents import create_agent
    from langchain.tools import tool
    from langchain_openai import ChatOpenAI

    from gateway_client.langchain import GatewayMiddleware

    @tool
    def lookup(customer_id: str) -> str:
        """A customer's profile."""
        return crm.lookup(customer_id)

    model = ChatOpenAI(model="gpt-test", base_url=fake_openai.base_url, api_key="sk-test")
    return create_agent(model=model, tools=[lookup], middleware=[GatewayMiddleware(client, **middleware)])


def test_langchain_async_recovers_a_failed_tool_with_the_gateways_result_in_the_graphs_thread(
    quiet_gateway: Gateway, fake_openai: FakeOpenAI
):
    key = quiet_gateway.configure(AGENT, [RECOVER])
    crm = FlakyCrm()
    request = "[langchain] look up c-3 (recover)"
    fake_openai.script(request, [[("lookup", {"customer_id": "c-3"})]])

    async def run():
        async with AsyncGatewayClient(quiet_gateway.url, key, max_wait=30) as client:
            agent = langchain_agent(crm, fake_openai, client)
            return await agent.ainvoke(
                {"messages": [{"role": "user", "content": request}]}, config={"configurable": {"thread_id": "thread-9"}}
            )

    state = asyncio.run(run())

    assert crm.calls == ["c-3"]
    assert fake_openai.outputs_seen(request) == {"lookup": "cached profile"}
    assert state["messages"][-1].text == "FINAL: lookup: cached profile"
    call = ToolCall.objects.get()
    assert call.session_id == "langgraph-thread-9"
    assert (call.outcome, call.result) == ("recovered", "cached profile")


def test_langchain_stops_the_run_when_the_gateway_aborts_a_failed_tool(quiet_gateway: Gateway, fake_openai: FakeOpenAI):
    key = quiet_gateway.configure(AGENT, [ABORT])
    crm = FlakyCrm()
    request = "[langchain] look up c-4 (abort)"
    fake_openai.script(request, [[("lookup", {"customer_id": "c-4"})]])

    with GatewayClient(quiet_gateway.url, key, max_wait=30) as client:
        agent = langchain_agent(crm, fake_openai, client, session_id="support-ticket-77")
        with pytest.raises(ToolRunAborted, match="the gateway stopped the run: the CRM is being migrated"):
            agent.invoke({"messages": [{"role": "user", "content": request}]})

    assert crm.calls == ["c-4"]
    call = ToolCall.objects.get()
    assert (call.session_id, call.outcome, call.result["action"]) == ("support-ticket-77", "error", "abort")
