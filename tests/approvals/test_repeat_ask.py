"""What runs is what was approved, on every way an agent learns the decision over HTTP (docs/approving.md):
the arguments as a `command` hook rewrote them, with the approver's edit, the secret a `redact` hook
masked put back from the agent's own call — on the held ask, a repeat ask with the same idempotency
key (held or not), after the WebSocket, and in the decision webhook."""

from __future__ import annotations

import json
import sys

import pytest
from standardwebhooks.webhooks import Webhook

from approvals.models import ConfirmationRequest, ToolCall
from tests.approved_call import (
    APPROVED,
    CAP_AND_ROUTE,
    FROM_VAULT,
    PROPOSED,
    REASON,
    SHOWN,
    TOOL,
    approve_with_edits,
    configure,
)
from tests.approvals.test_webhooks import Receiver
from tests.approvals.test_websocket import open_socket, receive
from tests.conftest import AgentClient, apply_config, make_agent_client
from tests.support import InThread, parked, wait_until

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def payer(live_gateway, transactional_db):
    configure("payer")
    client = make_agent_client(live_gateway, "payer")
    yield client
    client.http.close()


def ask(agent: AgentClient, key: str, **extra) -> dict:
    response = agent.pre_tool_use(TOOL, PROPOSED, idempotency_key=key, **extra)
    assert response.status_code == 200, response.text
    return response.json()


def test_a_repeat_ask_after_the_long_poll_answers_the_approved_arguments_with_the_secret_put_back(payer):
    first = ask(payer, "k-1")
    assert (first["decision"], first["tool_args"]) == ("pending", {**PROPOSED, "amount": 500, "route": "escrow"})
    confirmation = ConfirmationRequest.objects.get()
    assert confirmation.tool_args == {**SHOWN, "memo": "laptop"}  # the approver never sees the card

    approve_with_edits(first["confirmation_id"])
    assert payer.wait(first["confirmation_id"]).json()["status"] == "approved"
    again = ask(payer, "k-1")

    assert (again["decision"], again["reason"], again["tool_args"]) == ("allow", REASON, APPROVED)
    assert again["confirmation_id"] == first["confirmation_id"]
    assert "4111" not in json.dumps(ToolCall.objects.get().response)  # still nothing unredacted kept


def test_a_held_ask_and_a_held_repeat_ask_both_answer_the_approved_arguments(payer):
    first = ask(payer, "k-2")
    held_again = InThread(ask, payer, "k-2", wait_seconds=30)  # the client's next round, held
    held_first = InThread(ask, payer, "k-3", wait_seconds=30)  # another call, held on its first ask
    second = ConfirmationRequest.objects.exclude(pk=first["confirmation_id"])
    confirmation_ids = [first["confirmation_id"], str(wait_until(lambda: second.first()).pk)]
    wait_until(lambda: all(parked(c) for c in confirmation_ids))

    for confirmation_id in confirmation_ids:
        approve_with_edits(confirmation_id)

    for answer in (held_again.result(), held_first.result()):
        assert (answer["decision"], answer["reason"], answer["tool_args"]) == ("allow", REASON, APPROVED)


def test_after_the_websocket_says_approved_the_repeat_ask_answers_what_it_showed_with_the_secret(payer):
    first = ask(payer, "k-4")
    with open_socket(payer, first["confirmation_id"]) as ws:
        assert receive(ws)["status"] == "pending"
        approve_with_edits(first["confirmation_id"])
        final = receive(ws)
    again = ask(payer, "k-4")

    assert (final["status"], final["edited"], final["approved_args"]) == ("approved", True, SHOWN)
    assert (again["decision"], again["tool_args"]) == ("allow", APPROVED)


def test_the_decision_webhook_carries_the_approved_arguments_and_names_the_masked_ones(payer, celery_worker):
    receiver = Receiver()
    receiver.thread.start()
    try:
        first = ask(payer, "k-5", callback_url=receiver.url)
        approve_with_edits(first["confirmation_id"])
        [(headers, body)] = receiver.wait_for(1)
    finally:
        receiver.server.shutdown()
        receiver.server.server_close()

    payload = Webhook(payer.agent.webhook_secret).verify(body, headers)
    assert (payload["decision"], payload["reason"]) == ("allow", REASON)
    assert (payload["tool_args"], payload["masked_paths"]) == (SHOWN, ["card"])  # the card: from the agent's call
    assert "4111" not in body.decode()


def test_a_repeat_ask_of_an_allowed_call_answers_the_hooks_arguments_not_the_agents(live_gateway, transactional_db):
    apply_config(
        f"""
channels: []
agents:
  - name: refunder
    hooks:
      - {{kind: command, name: cap-and-route, event: pre_tool_use, command: {json.dumps([sys.executable, "-c", CAP_AND_ROUTE])}}}
      - {{kind: redact, name: no-cards, keys: [card]}}
"""
    )
    agent = make_agent_client(live_gateway, "refunder")

    first, again = ask(agent, "k-6"), ask(agent, "k-6")
    agent.http.close()

    expected = {**PROPOSED, "amount": 500, "route": "escrow"}
    assert (first["decision"], first["tool_args"]) == ("allow", expected)
    assert (again["decision"], again["tool_args"], again["side_effects"]) == ("allow", expected, ["idempotent_replay"])


def test_a_secret_a_hook_put_in_runs_on_the_held_ask_but_a_repeat_ask_refuses_rather_than_guess(
    live_gateway, transactional_db
):
    apply_config(
        f"""
channels: [{{name: web, kind: web}}]
agents:
  - name: vaulted
    hooks:
      - {{kind: command, name: from-vault, event: pre_tool_use, command: {json.dumps([sys.executable, "-c", FROM_VAULT])}}}
      - {{kind: redact, name: no-tokens, keys: [api_token]}}
      - {{kind: approval_gate, name: ask-alice, tools: [charge], channel: web, approvers: [alice], timeout_seconds: 600}}
"""
    )
    agent = make_agent_client(live_gateway, "vaulted")
    proposed = {"amount": 5, "api_token": "vault:payments"}

    held = InThread(lambda: agent.pre_tool_use("charge", proposed, idempotency_key="k-7", wait_seconds=30).json())
    confirmation = wait_until(lambda: ConfirmationRequest.objects.filter(status="pending").first())
    wait_until(lambda: parked(confirmation.pk))
    approve_with_edits(confirmation.pk, edits=None)
    first = held.result()
    again = agent.pre_tool_use("charge", proposed, idempotency_key="k-7").json()
    agent.http.close()

    assert (first["decision"], first["tool_args"]) == ("allow", {"amount": 5, "api_token": "tok_live_from_vault"})
    assert again["decision"] == "deny"
    assert again["reason"].startswith("approved by web:alice, but the arguments to run hold redacted values a hook ")
    assert "(api_token)" in again["reason"] and "new idempotency key" in again["reason"]
    assert "tok_live" not in json.dumps([ToolCall.objects.get().response, confirmation.tool_args])

