"""The gateway's own MCP endpoint (`/mcp`, docs/asking.md): the MCP SDK's `Client` over streamable HTTP, the
agent's key as bearer token, calls `ask_human`; alice answers on the question's web page; the tool answers."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import anyio.from_thread
import httpx
import httpx2
import pytest
from django.test import Client as DjangoClient
from django.urls import reverse
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from approvals.models import ConfirmationRequest
from tests.channels_ext.web.conftest import PASSWORD
from tests.support import wait_until

pytestmark = pytest.mark.django_db(transaction=True)


@contextlib.contextmanager
def mcp_client(url: str, key: str) -> Iterator[tuple[anyio.from_thread.BlockingPortal, Client]]:
    with anyio.from_thread.start_blocking_portal() as portal:
        http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=httpx2.Timeout(30.0, read=60.0))
        transport = streamable_http_client(f"{url}/mcp", http_client=http)
        with portal.wrap_async_context_manager(Client(transport, read_timeout_seconds=60)) as client:
            yield portal, client
        portal.call(http.aclose)


def text(result: Any) -> str:
    return "\n".join(block.text for block in result.content if block.type == "text")


def answer_on_the_page(question_id: str, **posted: Any) -> None:
    alice = DjangoClient()
    assert alice.login(username="alice", password=PASSWORD)
    response = alice.post(reverse("approval-page", args=[question_id]), {"decision": "answer", **posted})
    assert response.status_code == 302, response.content[-500:]


def test_an_mcp_client_asks_a_human_and_gets_the_answer_given_on_the_web_page(live_gateway, agent, people):
    with mcp_client(live_gateway.url, agent.key) as (portal, client):
        tools = portal.call(client.list_tools).tools
        (ask_human,) = [t for t in tools if t.name == "ask_human"]
        assert set(ask_human.input_schema["properties"]) == {"question", "choices", "several"}

        call = portal.start_task_soon(client.call_tool, "ask_human", {"question": "Ship today?", "choices": ["yes", "later"]})
        question = wait_until(lambda: ConfirmationRequest.objects.filter(kind="question").first(), what="the question")
        # purchasing-bot's first approval gate asks alice or bob on the web channel: so does its question
        assert (question.channel.name, question.approvers, question.reason) == ("web", ["alice", "bob"], "Ship today?")
        assert question.answer_schema == {"type": "string", "enum": ["yes", "later"]}
        answer_on_the_page(str(question.pk), **{"answer.answer": "later"})
        result = call.result(timeout=60)
    assert not result.is_error
    assert text(result) == '"later" (answered by alice)'


def test_free_text_when_no_choices_are_given(live_gateway, agent, people):
    with mcp_client(live_gateway.url, agent.key) as (portal, client):
        call = portal.start_task_soon(client.call_tool, "ask_human", {"question": "Which cost centre?"})
        question = wait_until(lambda: ConfirmationRequest.objects.filter(kind="question").first(), what="the question")
        answer_on_the_page(str(question.pk), **{"answer.answer": "CC-42"})
        assert text(call.result(timeout=60)) == '"CC-42" (answered by alice)'


def test_the_endpoint_refuses_a_request_without_a_live_key(live_gateway):
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    for headers in ({}, {"Authorization": "Bearer gw_not-a-key"}):
        response = httpx.post(f"{live_gateway.url}/mcp", json=body, headers=headers)
        assert response.status_code == 401
        assert response.json()["error"]["code"] == "unauthorized"
    assert not ConfirmationRequest.objects.exists()
