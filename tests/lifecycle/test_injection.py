"""Context injection: `inject_tool_result` calls a real tool — a tiny HTTP endpoint, or a
real MCP server over stdio — and answers it as a synthetic tool call in the history."""

from __future__ import annotations

import datetime as dt
import json
import re

import pytest
from django.utils import timezone

from approvals import services
from approvals.models import Agent
from hooks.builtin.inject_tool_result import function_name
from tests.lifecycle.conftest import MCP_SERVER, agent_config, command

pytestmark = pytest.mark.django_db(transaction=True)


def inject_http(url: str, *, event: str = "pre_turn", frequency: str = "always", extra: str = "") -> str:
    return agent_config(
        f"""      - kind: inject_tool_result
        name: calendar
        event: {event}
        toolset_name: workspace
        tool_name: list_events
        arguments: {{day: today}}
        source: {{url: "{url}/calendar", headers: {{X-Api-Key: k-1}}}}
        frequency: {frequency}
{extra}"""
    )


def injected_content(answer: dict) -> list[str]:
    """The contents of the `tool` messages of an answer, checking each pairs with its assistant call."""
    messages = answer["messages"]
    assert len(messages) % 2 == 0
    contents = []
    for call, result in zip(messages[::2], messages[1::2]):
        assert call["role"] == "assistant" and call["content"] is None
        [tool_call] = call["tool_calls"]
        assert tool_call["type"] == "function"
        assert result == {"role": "tool", "tool_call_id": tool_call["id"], "content": result["content"]}
        contents.append(result["content"])
    return contents


def test_a_session_start_injection_answers_an_openai_tool_call_and_its_result(configure, tool_server):
    tool_server.answer({"events": ["standup 09:30"]})
    bot = configure(inject_http(tool_server.url, event="session_start"))

    answer = bot.event("session-start", user_id="u-1").json()

    assert answer["decision"] == "allow"
    assert answer["side_effects"] == ["injected:calendar"]
    call, result = answer["messages"]
    [tool_call] = call["tool_calls"]
    assert re.fullmatch(r"call_[0-9a-f]{24}", tool_call["id"])
    assert tool_call["function"] == {"name": "workspace_list_events", "arguments": '{"day": "today"}'}
    assert result == {"role": "tool", "tool_call_id": tool_call["id"], "content": '{"events": ["standup 09:30"]}'}
    [request] = tool_server.requests
    assert (request["method"], request["path"], request["query"]) == ("GET", "/calendar", {"day": "today"})
    assert request["headers"]["X-Api-Key"] == "k-1"


def test_a_post_source_sends_the_arguments_as_json(configure, tool_server):
    tool_server.answer("plain text result")
    bot = configure(
        agent_config(
            f"""      - kind: inject_tool_result
        name: notes
        tool_name: read_notes
        arguments: {{folder: inbox, limit: 3}}
        source: {{url: "{tool_server.url}/notes", method: POST}}
"""
        )
    )

    answer = bot.event("session-start").json()

    assert injected_content(answer) == ["plain text result"]
    assert answer["messages"][0]["tool_calls"][0]["function"]["name"] == "read_notes"  # no toolset: verbatim
    assert tool_server.requests[0]["json"] == {"folder": "inbox", "limit": 3}


def test_frequency_always_injects_before_every_turn(configure, tool_server):
    tool_server.answer("v1")
    bot = configure(inject_http(tool_server.url, frequency="always"))

    answers = [bot.event("pre-turn", turn_id=f"t-{n}").json() for n in range(3)]

    assert [injected_content(a) for a in answers] == [["v1"], ["v1"], ["v1"]]
    assert len(tool_server.requests) == 3


def test_frequency_once_injects_the_first_time_in_each_session(configure, tool_server):
    tool_server.answer("v1")
    bot = configure(inject_http(tool_server.url, frequency="once"))

    first = bot.event("pre-turn", turn_id="t-1").json()
    second = bot.event("pre-turn", turn_id="t-2").json()
    other_session = bot.event("pre-turn", session_id="s-2", turn_id="t-1").json()

    assert injected_content(first) == ["v1"]
    assert second["messages"] == []
    assert second["side_effects"] == ["injection_not_repeated:calendar"]
    assert injected_content(other_session) == ["v1"]
    assert len(tool_server.requests) == 2  # not called for a session that already has it


def test_frequency_append_if_changed_injects_only_a_result_that_differs_from_the_last(configure, tool_server):
    bot = configure(inject_http(tool_server.url, frequency="append_if_changed"))

    contents = []
    for body in ("v1", "v1", "v2", "v2", "v1"):
        tool_server.answer(body)
        contents.append(injected_content(bot.event("pre-turn").json()))

    assert contents == [["v1"], [], ["v2"], [], ["v1"]]
    assert len(tool_server.requests) == 5


def test_refresh_reuses_the_cached_result_until_its_ttl_passes(configure, tool_server):
    tool_server.answer("v1")
    bot = configure(inject_http(tool_server.url, extra="        refresh: {ttl_minutes: 10}\n"))
    agent = Agent.objects.get(name="bot")

    first = bot.event("pre-turn").json()
    tool_server.answer("v2")
    second = bot.event("pre-turn").json()
    # The hooks' clock (HookContext.now) moved forward instead of sleeping.
    nine_minutes_on = services.hook_event_run(
        agent=agent, event="pre_turn", session_id="s-1", now=timezone.now() + dt.timedelta(minutes=9)
    )
    eleven_minutes_on = services.hook_event_run(
        agent=agent, event="pre_turn", session_id="s-1", now=timezone.now() + dt.timedelta(minutes=11)
    )

    assert injected_content(first) == ["v1"]
    assert (injected_content(second), second["side_effects"]) == (
        ["v1"],
        ["injection_from_cache:calendar", "injected:calendar"],
    )
    assert injected_content(nine_minutes_on) == ["v1"]
    assert injected_content(eleven_minutes_on) == ["v2"]
    assert eleven_minutes_on["side_effects"] == ["injected:calendar"]
    assert len(tool_server.requests) == 2  # once at the start, once after the TTL


def test_the_cache_is_shared_by_sessions_and_append_if_changed_still_compares_per_session(configure, tool_server):
    tool_server.answer("v1")
    bot = configure(
        inject_http(tool_server.url, frequency="append_if_changed", extra="        refresh: {ttl_minutes: 10}\n")
    )

    a1 = bot.event("pre-turn", session_id="s-a").json()
    a2 = bot.event("pre-turn", session_id="s-a").json()
    b1 = bot.event("pre-turn", session_id="s-b").json()

    assert (injected_content(a1), injected_content(a2), injected_content(b1)) == (["v1"], [], ["v1"])
    assert len(tool_server.requests) == 1


def test_a_tool_on_a_real_mcp_server_over_stdio_is_injected(configure, tmp_path):
    calls = tmp_path / "mcp-calls.txt"
    bot = configure(
        agent_config(
            f"""      - kind: inject_tool_result
        name: profile
        event: session_start
        toolset_name: crm.v2
        tool_name: get_customer_profile
        arguments: {{customer_id: c-42}}
        source: {{mcp: {{command: {command(MCP_SERVER, str(calls))}}}}}
"""
        )
    )

    answer = bot.event("session-start").json()

    assert answer["decision"] == "allow"
    assert injected_content(answer) == ["customer c-42: plan gold, since 2019"]
    function = answer["messages"][0]["tool_calls"][0]["function"]
    assert function == {"name": "crm_v2_get_customer_profile", "arguments": '{"customer_id": "c-42"}'}
    assert calls.read_text().splitlines() == ["get_customer_profile"]


def test_a_failing_mcp_tool_is_skipped_and_the_session_goes_on(configure, tmp_path):
    calls = tmp_path / "mcp-calls.txt"
    bot = configure(
        agent_config(
            f"""      - kind: inject_tool_result
        name: crm
        event: session_start
        tool_name: broken
        source: {{mcp: {{command: {command(MCP_SERVER, str(calls))}}}}}
"""
        )
    )

    answer = bot.event("session-start").json()

    assert (answer["decision"], answer["messages"]) == ("allow", [])
    [note] = answer["side_effects"]
    assert note.startswith("injection_skipped:crm: MCP tool 'broken' answered an error")
    assert calls.read_text().splitlines() == ["broken"]


@pytest.mark.parametrize(
    "break_it,expected",
    [
        (lambda server: server.answer("upstream exploded", status=500), "answered 500"),
        (lambda server: server.stop(), "failed: ConnectError"),
    ],
    ids=["an-error-status", "nobody-listening"],
)
def test_a_failing_http_tool_is_skipped_and_the_turn_goes_on(configure, tool_server, break_it, expected):
    bot = configure(inject_http(tool_server.url, frequency="once"))
    break_it(tool_server)

    answer = bot.event("pre-turn", turn_id="t-1")

    assert answer.status_code == 200
    body = answer.json()
    assert (body["decision"], body["messages"]) == ("allow", [])
    [note] = body["side_effects"]
    assert note.startswith("injection_skipped:calendar: GET ") and expected in note


def test_a_once_injection_that_failed_is_tried_again_at_the_next_turn(configure, tool_server):
    tool_server.answer("down", status=503)
    bot = configure(inject_http(tool_server.url, frequency="once"))

    failed = bot.event("pre-turn", turn_id="t-1").json()
    tool_server.answer("v1")
    retried = bot.event("pre-turn", turn_id="t-2").json()

    assert failed["messages"] == []
    assert injected_content(retried) == ["v1"]


def test_a_failing_unreachable_mcp_command_is_skipped(configure):
    bot = configure(
        agent_config(
            """      - kind: inject_tool_result
        name: ghost
        event: session_start
        tool_name: anything
        source: {mcp: {command: ["/nonexistent/mcp-server"]}}
"""
        )
    )

    answer = bot.event("session-start")

    assert answer.status_code == 200
    assert answer.json()["side_effects"][0].startswith("injection_skipped:ghost: MCP tool 'anything' failed")


def test_an_injection_and_a_deny_at_pre_turn_compose_in_priority_order(configure, tool_server):
    tool_server.answer("v1")
    bot = configure(
        inject_http(tool_server.url, extra="        priority: 10\n")
        + "      - {kind: turn_limit, priority: 20, max_turns: 1}\n"
    )

    first = bot.event("pre-turn", turn_id="t-1").json()
    second = bot.event("pre-turn", turn_id="t-2").json()

    assert (first["decision"], injected_content(first)) == ("allow", ["v1"])
    assert second["decision"] == "deny"


@pytest.mark.parametrize(
    "toolset,tool,expected",
    [
        ("crm", "get_profile", "crm_get_profile"),
        ("my tools/v2", "get.profile", "my_tools_v2_get_profile"),
        ("t" * 60, "lookup", ("t" * 60 + "_loo")),
        (None, "any.name as-is", "any.name as-is"),
    ],
)
def test_function_names_are_sanitised_for_function_calling_apis(toolset, tool, expected):
    name = function_name(tool, toolset)

    assert name == expected
    if toolset:
        assert re.fullmatch(r"[a-zA-Z0-9_-]{1,64}", name)


def test_an_injected_result_round_trips_as_json_arguments(configure, tool_server):
    tool_server.answer("ok")
    bot = configure(
        agent_config(
            f"""      - kind: inject_tool_result
        tool_name: search
        arguments: {{query: "naïve café", filters: {{year: 2024}}}}
        source: {{url: "{tool_server.url}/s", method: POST}}
"""
        )
    )

    answer = bot.event("session-start").json()

    arguments = answer["messages"][0]["tool_calls"][0]["function"]["arguments"]
    assert json.loads(arguments) == {"query": "naïve café", "filters": {"year": 2024}}


@pytest.fixture
def mcp_http_server(tmp_path):
    """tests/lifecycle/mcp_server.py serving streamable HTTP on a free port, in its own process."""
    import socket
    import subprocess
    import sys
    import time

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    calls = tmp_path / "mcp-http-calls.txt"
    process = subprocess.Popen(
        [sys.executable, MCP_SERVER, str(calls), str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    deadline = time.monotonic() + 20
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            if time.monotonic() > deadline or process.poll() is not None:
                process.kill()
                raise RuntimeError("the MCP server did not start") from None
            time.sleep(0.1)
    yield f"http://127.0.0.1:{port}/mcp", calls
    process.terminate()
    process.wait(timeout=10)


def test_a_tool_on_a_streamable_http_mcp_server_is_injected(configure, mcp_http_server):
    url, calls = mcp_http_server
    bot = configure(
        agent_config(
            f"""      - kind: inject_tool_result
        name: profile
        event: pre_turn
        tool_name: get_customer_profile
        arguments: {{customer_id: c-7}}
        source: {{mcp: {{url: "{url}"}}}}
        refresh: {{ttl_minutes: 5}}
"""
        )
    )

    first = bot.event("pre-turn", turn_id="t-1").json()
    second = bot.event("pre-turn", turn_id="t-2").json()

    assert injected_content(first) == injected_content(second) == ["customer c-7: plan gold, since 2019"]
    assert first["messages"][0]["tool_calls"][0]["function"]["name"] == "get_customer_profile"
    assert calls.read_text().splitlines() == ["get_customer_profile"]  # the second came from the cache
