"""Every lifecycle event through `gateway_client`, the agent-side package, against the live gateway."""

from __future__ import annotations

import asyncio

import pytest

from approvals.models import ToolCall
from gateway_client import AsyncGatewayClient, Conflict, GatewayClient
from tests.lifecycle.conftest import agent_config

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def loop_config(tool_server):
    tool_server.answer({"open_tickets": 2})
    return agent_config(
        f"""      - kind: inject_tool_result
        name: tickets
        toolset_name: helpdesk
        tool_name: open_tickets
        source: {{url: "{tool_server.url}/tickets"}}
        frequency: once
      - {{kind: turn_limit, name: one-turn, max_turns: 1}}
      - {{kind: truncate_result, name: cut, max_chars: 10}}
      - {{kind: retry_on_error, name: retry, max_attempts: 2, backoff_seconds: 0.25}}
"""
    )


def test_an_agent_loop_goes_through_every_event_with_the_client(configure, loop_config, live_gateway):
    bot = configure(loop_config)
    gateway = GatewayClient(live_gateway.url, bot.key)

    start = gateway.session_start("s-1", user_id="u-42", metadata={"org_id": "acme"})
    turn = gateway.pre_turn("s-1", turn_id="t-1")
    second_turn = gateway.pre_turn("s-1", turn_id="t-2")
    decision = gateway.pre_tool_use("s-1", "kb__search", {"q": "refund"}, tool_call_id="call_1", idempotency_key="k-1")
    retry = gateway.tool_error("s-1", "call_1", "503 unavailable", attempt=1, elapsed_seconds=0.1)
    gave_up = gateway.tool_error("s-1", "call_1", "503 unavailable", attempt=2, elapsed_seconds=0.5)
    done = gateway.post_tool_use("s-1", "call_1", result="refunds take 5 days", duration_ms=120)
    replay = gateway.pre_tool_use("s-1", "kb__search", {"q": "refund"}, tool_call_id="call_1", idempotency_key="k-1")
    after_turn = gateway.post_turn("s-1", turn_id="t-1")
    end = gateway.session_end("s-1")
    gateway.close()

    assert start["decision"] == "allow"
    assert start["messages"][0]["tool_calls"][0]["function"]["name"] == "helpdesk_open_tickets"
    assert start["messages"][1]["content"] == '{"open_tickets": 2}'
    assert (turn["decision"], turn["messages"]) == ("allow", [])  # `once`: already injected at session start
    assert second_turn["decision"] == "deny"
    assert second_turn["reason"] == "this session has used all 1 of its turns (one-turn)"
    assert decision.allowed
    assert (retry["action"], retry["delay_seconds"]) == ("retry", 0.25)
    assert gave_up["action"] == "raise"
    assert done["result"].startswith("refunds ta\n[truncated")
    assert replay.skipped and replay.result == done["result"]
    assert after_turn == {"side_effects": []}
    assert end == {"side_effects": []}
    call = ToolCall.objects.get()
    # the user named at session-start is remembered on the tool call
    assert (call.user_id, call.turn_id, call.outcome, call.result_size) == ("u-42", "t-1", "success", 19)


def test_the_client_raises_conflict_for_a_call_never_allowed(configure, live_gateway, recorders):
    bot = configure(
        agent_config(f"      - {{kind: command, event: pre_tool_use, command: {recorders('x').hook('--exit', '2')}}}\n")
    )
    gateway = GatewayClient(live_gateway.url, bot.key)
    assert gateway.pre_tool_use("s-1", "oa__pay", {}, tool_call_id="call_1").denied

    with pytest.raises(Conflict):
        gateway.post_tool_use("s-1", "call_1", result="paid anyway")
    gateway.close()


def test_the_async_client_reports_a_session_and_a_result(configure, loop_config, live_gateway):
    bot = configure(loop_config)

    async def agent():
        async with AsyncGatewayClient(live_gateway.url, bot.key) as gateway:
            start = await gateway.session_start("s-async", user_id="u-1")
            await gateway.pre_tool_use("s-async", "kb__search", {}, tool_call_id="c")
            done = await gateway.post_tool_use("s-async", "c", result="short")
            return start, done

    start, done = asyncio.run(agent())

    assert start["side_effects"] == ["injected:tickets"]
    assert done == {"result": "short", "side_effects": []}
