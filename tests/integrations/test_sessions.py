"""The gateway session a framework's run maps to (docs/integrations/openai-agents.md, langchain.md): one
per run unless the caller names one — the calls of one run share it, two runs of the same gated agent in
one process never do (so a grant approved "for this session" in one run does not carry into the next)."""

from __future__ import annotations

import asyncio

import pytest

from approvals.models import ToolCall
from gateway_client import AsyncGatewayClient, GatewayClient
from tests.fakes.openai_api import FakeOpenAI
from tests.integrations.conftest import Gateway
from tests.integrations.test_adapters import FlakyCrm, langchain_agent, openai_agent

pytestmark = pytest.mark.django_db(transaction=True)

TWO_LOOKUPS = [[("lookup", {"customer_id": "c-1"}), ("lookup", {"customer_id": "c-2"})]]


def sessions_by_run() -> list[set[str]]:
    """The sessions of the recorded calls, two calls per run, in the order the runs made them."""
    calls = list(ToolCall.objects.order_by("created_at").values_list("session_id", flat=True))
    assert len(calls) == 4, calls
    return [set(calls[:2]), set(calls[2:])]


def test_each_openai_agents_run_is_its_own_session_with_tracing_off(quiet_gateway: Gateway, fake_openai: FakeOpenAI):
    from agents import RunConfig, Runner

    from gateway_client.openai_agents import gate_agent

    key = quiet_gateway.configure("sessions", [])
    request = "[openai-agents] two lookups per run"
    fake_openai.script(request, TWO_LOOKUPS)

    async def two_runs() -> None:
        async with AsyncGatewayClient(quiet_gateway.url, key, max_wait=30) as client:
            gated = gate_agent(openai_agent(FlakyCrm(failures=0), fake_openai), client)  # made once, run twice
            for _ in range(2):
                await Runner.run(gated, request, run_config=RunConfig(tracing_disabled=True))

    asyncio.run(two_runs())

    first, second = sessions_by_run()
    assert len(first) == len(second) == 1  # the calls of one run share its session
    assert first != second
    assert all(s.startswith("openai-agents-run-") for s in first | second)


def test_each_langchain_invocation_without_a_thread_is_its_own_session(quiet_gateway: Gateway, fake_openai: FakeOpenAI):
    key = quiet_gateway.configure("sessions", [])
    request = "[langchain] two lookups per run"
    fake_openai.script(request, TWO_LOOKUPS)

    with GatewayClient(quiet_gateway.url, key, max_wait=30) as client:
        agent = langchain_agent(FlakyCrm(failures=0), fake_openai, client)  # made once, invoked twice
        for _ in range(2):
            agent.invoke({"messages": [{"role": "user", "content": request}]})

    first, second = sessions_by_run()
    assert len(first) == len(second) == 1
    assert first != second
    assert all(s.startswith("langchain-") for s in first | second)


def test_langchain_async_invocations_get_their_own_sessions_and_a_thread_keeps_one(
    quiet_gateway: Gateway, fake_openai: FakeOpenAI
):
    key = quiet_gateway.configure("sessions", [])
    request = "[langchain] async lookups"
    fake_openai.script(request, TWO_LOOKUPS)
    messages = {"messages": [{"role": "user", "content": request}]}

    async def runs() -> None:
        async with AsyncGatewayClient(quiet_gateway.url, key, max_wait=30) as client:
            agent = langchain_agent(FlakyCrm(failures=0), fake_openai, client)
            await agent.ainvoke(messages)
            await agent.ainvoke(messages)
            await agent.ainvoke(messages, config={"configurable": {"thread_id": "t-1"}})

    asyncio.run(runs())

    calls = list(ToolCall.objects.order_by("created_at").values_list("session_id", flat=True))
    assert len(calls) == 6
    assert len({calls[0], calls[1]}) == 1 and len({calls[2], calls[3]}) == 1 and calls[0] != calls[2]
    assert calls[4:] == ["langgraph-t-1", "langgraph-t-1"]
