"""`GatewayClient.ask` (docs/asking.md): the agent asks a human over real HTTP and gets the typed answer —
across long-poll rounds and a gateway restart while the question waits (nothing lost), with the default at
expiry, and `NoAnswer` when there is none to give."""

from __future__ import annotations

import asyncio

import pytest

from approvals import services
from approvals.models import ConfirmationRequest
from gateway_contract import Callback
from gateway_client import AsyncGatewayClient, InvalidRequest, NoAnswer
from tests.gateway_client.test_client import restart_while_the_client_waits
from tests.support import InThread, parked, wait_until

pytestmark = pytest.mark.django_db(transaction=True)

FORM = {
    "type": "object",
    "properties": {
        "vendor": {"type": "string", "enum": ["Acme", "Globex"]},
        "budget": {"type": "integer", "minimum": 1, "maximum": 5000},
    },
    "required": ["vendor", "budget"],
}


def answer(question_id: str, value, actor: str = "alice") -> None:
    from django.db import connection

    try:
        outcome = services.confirmation_respond(
            channel_name="web",
            callback=Callback(confirmation_id=str(question_id), decision="answer", actor=actor, answer=value),
            with_card=False,
        )
        assert outcome.applied, outcome
    finally:
        connection.close()


def the_question() -> str:
    return str(wait_until(lambda: ConfirmationRequest.objects.filter(kind="question").values_list("pk", flat=True).first()))


def test_ask_returns_the_typed_answer_of_a_form(gateway_client, live_gateway, coder_key):
    client = gateway_client(live_gateway.url, coder_key, long_poll=1)
    asking = InThread(client.ask, "What should I order?", FORM, channel="web", approvers=["alice"], session_id="s-1")
    question_id = the_question()
    wait_until(lambda: parked(question_id), what="the client to wait")
    answer(question_id, {"vendor": "Globex", "budget": 1200})
    assert asking.result() == {"vendor": "Globex", "budget": 1200}


def test_ask_uses_the_agents_gate_when_no_channel_is_given(gateway_client, live_gateway, coder_key):
    client = gateway_client(live_gateway.url, coder_key, long_poll=1)
    asking = InThread(client.ask_question, "Deploy now?", {"type": "boolean"})
    question_id = the_question()
    row = ConfirmationRequest.objects.get(pk=question_id)
    assert (row.channel.name, row.approvers) == ("web", ["alice"])  # the coder's gate `ask-a-human`
    answer(question_id, True)
    result = asking.result()
    assert (result.value, result.status, result.answered_by) == (True, "answered", "web:alice")


def test_ask_survives_a_gateway_restart_while_the_question_waits(gateway_client, restartable_gateway, coder_key):
    gateway = restartable_gateway.start()
    client = gateway_client(gateway.url, coder_key, long_poll=1)
    asking = InThread(client.ask, "Which vendor?", {"type": "string", "enum": ["Acme", "Globex"]}, channel="web")

    question_id = restart_while_the_client_waits(gateway)
    answer(question_id, "Acme")  # after the new gateway is up

    assert asking.result() == "Acme"
    assert gateway.starts == 2
    assert ConfirmationRequest.objects.count() == 1  # reconnecting never asked twice


def test_an_expired_question_gives_its_default_and_without_one_no_answer(gateway_client, live_gateway, coder_key):
    client = gateway_client(live_gateway.url, coder_key, long_poll=1)
    schema = {"type": "string", "enum": ["Acme", "Globex"]}
    assert client.ask("Which vendor?", schema, channel="web", timeout_seconds=1, default_answer="Globex") == "Globex"
    with pytest.raises(NoAnswer) as refused:
        client.ask("Which vendor?", schema, channel="web", timeout_seconds=1)
    assert refused.value.answer.status == "expired" and refused.value.answer.value is None


def test_a_question_still_pending_at_max_wait_is_no_answer(gateway_client, live_gateway, coder_key):
    client = gateway_client(live_gateway.url, coder_key, long_poll=1)
    with pytest.raises(NoAnswer) as refused:
        client.ask("Deploy now?", {"type": "boolean"}, channel="web", max_wait=1.5)
    assert refused.value.answer.status == "pending"
    assert "still pending" in str(refused.value)


def test_a_refused_question_raises_with_the_gateways_reason(gateway_client, live_gateway, coder_key):
    client = gateway_client(live_gateway.url, coder_key)
    with pytest.raises(InvalidRequest) as refused:
        client.ask("Budget?", {"type": "string"}, channel="web")
    assert "maxLength" in refused.value.message


def test_the_async_client_asks_too(live_gateway, coder_key):
    async def ask() -> object:
        async with AsyncGatewayClient(live_gateway.url, coder_key, long_poll=1) as client:
            return await client.ask("How many?", {"type": "integer", "minimum": 1, "maximum": 9}, channel="web")

    asking = InThread(asyncio.run, ask())
    answer(the_question(), 7)
    assert asking.result() == 7


def test_an_answer_made_in_sql_behind_the_gateways_back_is_no_answer(gateway_client, live_gateway, coder_key):
    """A raw UPDATE, not the gateway's: the client gets `cancelled` and no value (docs/asking.md)."""
    from approvals.selectors import UNVERIFIED_QUESTION_REASON
    from tests.audit.test_questions_verify import notify, sql

    client = gateway_client(live_gateway.url, coder_key, long_poll=20)
    asking = InThread(client.ask, "Which vendor?", {"type": "string", "enum": ["Acme", "Globex"]}, channel="web")
    question_id = the_question()
    wait_until(lambda: parked(question_id), what="the client to wait")
    sql("""UPDATE approvals_confirmationrequest SET status = 'answered', answer = '"Globex"', decided_at = now(), """
        "decided_by = 'web:alice' WHERE id = %s", [question_id])  # fmt: skip
    notify(question_id)
    with pytest.raises(NoAnswer) as refused:
        asking.result()
    assert (refused.value.answer.status, refused.value.answer.value) == ("cancelled", None)
    assert refused.value.answer.reason == UNVERIFIED_QUESTION_REASON
