"""A question lives the life of a confirmation (docs/asking.md): pushed over the WebSocket, POSTed to its
`callback_url` signed, reminded and escalated by the timers exactly once, and every event of it in the
agent's tamper-evident chain, which verifies."""

from __future__ import annotations

import datetime as dt

import pytest
from standardwebhooks import Webhook

from approvals import services
from approvals.audit import audit_verify
from django.utils import timezone

from approvals.models import ConfirmationEvent, ConfirmationRequest, Outbox
from gateway_contract import Callback
from tests.approvals.test_webhooks import receiver  # noqa: F401 - a fixture
from tests.approvals.test_websocket import close_code, open_socket, receive
from tests.conftest import apply_config
from tests.support import wait_until

pytestmark = pytest.mark.django_db(transaction=True)

CHOICE = {"type": "string", "enum": ["Acme", "Globex"]}


def ask(agent, **more) -> str:
    body = {"question": "Which vendor?", "answer_schema": CHOICE, "channel": "web", "approvers": ["alice"], **more}
    response = agent.http.post("/api/v1/questions", json=body)
    assert response.status_code == 201, response.text
    return response.json()["id"]


def answer(question_id: str, value, actor: str = "alice"):
    from django.db import connection

    try:
        return services.confirmation_respond(
            channel_name="web",
            callback=Callback(confirmation_id=str(question_id), decision="answer", actor=actor, answer=value),
            with_card=False,
        )
    finally:
        connection.close()


def test_the_websocket_pushes_the_question_and_closes_once_it_is_answered(agent):
    question_id = ask(agent)
    ws = open_socket(agent, question_id)
    first = receive(ws)
    assert (first["id"], first["status"], first["question"]) == (question_id, "pending", "Which vendor?")
    answer(question_id, "Globex")
    final = receive(ws)
    assert (final["status"], final["answer"], final["answered_by"]) == ("answered", "Globex", "web:alice")
    assert close_code(ws) == 1000


def test_the_answer_is_posted_signed_to_the_callback_url(agent, receiver, celery_worker):  # noqa: F811
    question_id = ask(agent, callback_url=receiver.url)
    answer(question_id, "Acme")
    [(headers, body)] = receiver.wait_for(1)
    payload = Webhook(agent.agent.webhook_secret).verify(body, headers)
    assert payload["type"] == "question.answered"
    assert (payload["question"]["id"], payload["question"]["answer"]) == (question_id, "Acme")
    wait_until(
        lambda: Outbox.objects.get(confirmation_id=question_id, kind="webhook").status == "sent",
        what="the worker to record the webhook as sent",
    )


def test_reminders_warnings_and_escalation_happen_once_each(agent):
    apply_config(
        """
channels:
  - {name: web, kind: web}
  - {name: web-leads, kind: web}
agents:
  - name: purchasing-bot
    hooks:
      - kind: approval_gate
        name: finance-gate
        tools: ["oa__purchase_pay"]
        channel: web
        approvers: ["alice", "bob"]
        timeout_seconds: 1800
        remind_after_seconds: 60
        warn_before_seconds: 300
        escalate_after_seconds: 120
        escalate_to: {channel: web-leads, approvers: ["olga"]}
"""
    )
    # No channel: the question takes the gate's channel, approvers, reminder, warning and escalation.
    question_id = agent.http.post(
        "/api/v1/questions", json={"question": "Budget code?", "answer_schema": {"type": "string", "maxLength": 20}}
    ).json()["id"]
    row = ConfirmationRequest.objects.get(pk=question_id)
    assert (row.channel.name, row.approvers, row.escalate_channel.name) == ("web", ["alice", "bob"], "web-leads")
    early = services.confirmation_timers_due()
    assert (early.reminded, early.warned, early.escalated) == (0, 0, 0)  # nothing is due yet
    # The timers as if the time had come (the deadline itself is still ahead).
    ConfirmationRequest.objects.filter(pk=question_id).update(
        remind_at=timezone.now() - dt.timedelta(seconds=1),
        warn_at=timezone.now() - dt.timedelta(seconds=1),
        escalate_at=timezone.now() - dt.timedelta(seconds=1),
    )
    first = services.confirmation_timers_due()
    again = services.confirmation_timers_due()
    assert (first.reminded, first.warned, first.escalated) == (1, 1, 1)
    assert (again.reminded, again.warned, again.escalated) == (0, 0, 0)
    kinds = list(ConfirmationEvent.objects.filter(confirmation_id=question_id).values_list("kind", flat=True))
    assert kinds.count("reminded") == kinds.count("warned") == kinds.count("escalated") == 1
    warned = ConfirmationEvent.objects.get(confirmation_id=question_id, kind="warned")
    assert "then the agent gets no answer" in warned.message
    assert ConfirmationRequest.objects.get(pk=question_id).status == "pending"
    # The lead on the escalation channel may answer now.
    assert services.confirmation_respond(
        channel_name="web-leads",
        callback=Callback(confirmation_id=question_id, decision="answer", actor="olga", answer="CC-9"),
        with_card=False,
    ).applied


def test_every_event_of_a_question_is_in_the_agents_chain_and_it_verifies(agent):
    answered = ask(agent)
    answer(answered, "Globex", actor="mallory")  # refused: not an approver
    answer(answered, "Umbrella")  # refused: not an option
    answer(answered, "Acme")
    ask(agent, timeout_seconds=1, default_answer="Acme")
    agent.http.get(f"/api/v1/questions/{ask(agent, timeout_seconds=1)}/wait", params={"timeout": 10})
    kinds = list(ConfirmationEvent.objects.filter(confirmation_id=answered).values_list("kind", flat=True))
    assert kinds == ["created", "card_posted", "refused_click", "refused_click", "answered"]
    verification = audit_verify()
    assert verification.ok, [p.message for p in verification.problems]
