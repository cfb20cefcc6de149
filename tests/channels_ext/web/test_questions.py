"""Questions (docs/asking.md): asked over the API, answered on the web page, awaited like a confirmation.

The agent asks over real HTTP; the approver answers through the web page (Django's test client
signed in as alice) or through the same service every channel calls; the agent's long-poll, its
held create (`wait_seconds`) and the expiry sweep run as in production.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.db import connection
from django.test import Client
from django.urls import reverse

from approvals import services
from approvals.models import ApproverResponse, ConfirmationEvent, ConfirmationRequest
from gateway_contract import Callback
from tests.channels_ext.web.conftest import PASSWORD
from tests.support import wait_until

pytestmark = pytest.mark.django_db(transaction=True)

VENDOR = {"type": "string", "enum": ["Acme", "Globex", "Initech"], "title": "Vendor"}
ORDER_FORM = {
    "type": "object",
    "properties": {
        "vendor": VENDOR,
        "budget": {"type": "integer", "minimum": 1, "maximum": 5000, "title": "Budget (EUR)"},
        "urgent": {"type": "boolean", "title": "Urgent?"},
        "note": {"type": "string", "maxLength": 200},
        "tags": {"type": "array", "items": {"type": "string", "enum": ["hw", "sw", "ops"]}, "uniqueItems": True},
    },
    "required": ["vendor", "budget"],
}


def ask(agent, schema=VENDOR, **more):
    body = {"question": "Which vendor should I order from?", "answer_schema": schema, "channel": "web",
            "approvers": ["alice", "bob"], **more}  # fmt: skip
    return agent.http.post("/api/v1/questions", json=body)


def signed_in(username: str) -> Client:
    client = Client()
    assert client.login(username=username, password=PASSWORD)
    return client


def page(question_id: str) -> str:
    return reverse("approval-page", args=[question_id])


def answer(question_id: str, value, actor: str = "alice"):
    return services.confirmation_respond(
        channel_name="web",
        callback=Callback(confirmation_id=str(question_id), decision="answer", actor=actor, answer=value),
        with_card=False,
    )


def test_a_question_is_stored_and_shown_as_pending(agent):
    response = ask(agent, timeout_seconds=600, default_answer="Acme", session_id="s-9", user_id="u-42")
    assert response.status_code == 201, response.text
    body = response.json()
    assert body["status"] == "pending"
    assert body["question"] == "Which vendor should I order from?"
    assert body["answer"] is None and body["defaulted"] is False
    assert body["url"].endswith(page(body["id"]))
    row = ConfirmationRequest.objects.get(pk=body["id"])
    assert (row.kind, row.answer_schema, row.default_answer) == ("question", VENDOR, "Acme")
    assert row.approvers == ["alice", "bob"] and row.session_id == "s-9"
    assert list(row.events.values_list("kind", flat=True)) == ["created", "card_posted"]
    assert agent.http.get(f"/api/v1/questions/{body['id']}").json() == body


@pytest.mark.parametrize(
    ("schema", "default", "says"),
    [
        ({"type": "string"}, None, "free text needs maxLength"),
        ({"type": "string", "maxLength": 10, "pattern": "x"}, None, "'pattern' was unexpected"),
        ({"type": "number", "minimum": 5, "maximum": 1}, None, "minimum is greater than maximum"),
        ({"type": "object", "properties": {"a": {"type": "object", "properties": {}}}}, None, "another form"),
        ({"type": "object", "properties": {f"f{i}": {"type": "boolean"} for i in range(9)}}, None, "properties"),
        ({"type": "null"}, None, "type must be one of"),
        (VENDOR, "Umbrella", "does not fit the answer schema"),
    ],
    ids=["text-without-limit", "unknown-keyword", "bad-bounds", "nested-form", "nine-fields", "null", "bad-default"],
)
def test_a_schema_outside_the_subset_or_a_default_that_does_not_fit_is_refused_and_nothing_is_written(
    agent, schema, default, says
):
    response = ask(agent, schema=schema, default_answer=default)
    assert response.status_code == 400, response.text
    assert response.json()["error"]["code"] == "invalid"
    assert says in response.json()["error"]["message"]
    assert not ConfirmationRequest.objects.exists()


def test_a_question_to_a_channel_that_does_not_exist_is_refused(agent):
    response = ask(agent, channel="nowhere")
    assert response.status_code == 400
    assert "no channel named 'nowhere'" in response.json()["error"]["message"]
    assert not ConfirmationRequest.objects.exists()


def test_only_the_asking_agent_sees_its_question_and_only_under_questions(agent, other_agent):
    question_id = ask(agent).json()["id"]
    assert other_agent.http.get(f"/api/v1/questions/{question_id}").status_code == 404
    assert other_agent.http.get(f"/api/v1/questions/{question_id}/wait?timeout=0").status_code == 404
    assert agent.http.get(f"/api/v1/confirmations/{question_id}").status_code == 404
    assert agent.http.get(f"/api/v1/confirmations/{question_id}/wait?timeout=0").status_code == 404


def test_a_choice_answered_on_the_web_page_wakes_the_waiting_agent(agent, people):
    question_id = ask(agent).json()["id"]
    with ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(agent.http.get, f"/api/v1/questions/{question_id}/wait", params={"timeout": 20})
        alice = signed_in("alice")
        shown = alice.get(page(question_id))
        assert shown.status_code == 200
        assert b"Which vendor should I order from?" in shown.content and b'value="Globex"' in shown.content
        posted = alice.post(page(question_id), {"decision": "answer", "answer.answer": "Globex"})
        assert posted.status_code == 302
        body = waiting.result(timeout=20).json()
    assert body["status"] == "answered"
    assert body["answer"] == "Globex"
    assert (body["answered_by"], body["answered_by_name"]) == ("web:alice", "alice")
    assert b"Answered" in alice.get(page(question_id)).content


def test_an_approve_posted_to_a_questions_page_is_answered_by_its_form_and_decides_nothing(agent, people):
    """The approval form's POST (decision=approve) sent to a question: the click is not taken as a
    decision (the row read under the lock is a question; that transaction is rolled back), and the
    question's own page answers it — an answer missing, refused with the form again, nothing recorded."""
    question_id = ask(agent).json()["id"]
    alice = signed_in("alice")

    posted = alice.post(page(question_id), {"decision": "approve", "reason": ""})

    assert posted.status_code == 400 and b"Which vendor should I order from?" in posted.content
    assert ConfirmationRequest.objects.get(pk=question_id).status == "pending"
    assert not ApproverResponse.objects.filter(confirmation_id=question_id).exists()


def test_a_text_answer_and_its_length_limit(agent, people):
    note = {"type": "string", "maxLength": 12, "title": "Budget code"}
    question_id = ask(agent, schema=note).json()["id"]
    alice = signed_in("alice")
    refused = alice.post(page(question_id), {"decision": "answer", "answer.answer": "X" * 13})
    assert refused.status_code == 400
    assert b"is too long" in refused.content
    assert ConfirmationRequest.objects.get(pk=question_id).status == "pending"
    assert alice.post(page(question_id), {"decision": "answer", "answer.answer": "CC-1234"}).status_code == 302
    assert agent.http.get(f"/api/v1/questions/{question_id}").json()["answer"] == "CC-1234"


def test_a_form_is_answered_with_typed_values(agent, people):
    question_id = ask(agent, schema=ORDER_FORM).json()["id"]
    posted = signed_in("bob").post(
        page(question_id),
        {"decision": "answer", "answer.vendor": "Acme", "answer.budget": "1200", "answer.urgent": "yes",
         "answer.tags": ["hw", "ops"]},  # fmt: skip
    )
    assert posted.status_code == 302
    body = agent.http.get(f"/api/v1/questions/{question_id}").json()
    assert body["answer"] == {"vendor": "Acme", "budget": 1200, "urgent": True, "tags": ["hw", "ops"]}
    assert body["answered_by"] == "web:bob"


@pytest.mark.parametrize(
    ("posted", "says"),
    [
        ({"answer.vendor": "Acme", "answer.budget": "9000"}, b"9000 is greater than the maximum of 5000"),
        ({"answer.vendor": "Acme", "answer.budget": "lots"}, b"is not of type"),
        ({"answer.budget": "100"}, b"vendor"),
        ({"answer.vendor": "Umbrella", "answer.budget": "100"}, b"is not one of"),
    ],
    ids=["over-the-maximum", "not-a-number", "missing-required", "not-an-option"],
)
def test_an_invalid_answer_is_refused_with_the_reason_and_changes_nothing(agent, people, posted, says):
    question_id = ask(agent, schema=ORDER_FORM).json()["id"]
    refused = signed_in("alice").post(page(question_id), {"decision": "answer", **posted})
    assert refused.status_code == 400
    assert says in refused.content
    row = ConfirmationRequest.objects.get(pk=question_id)
    assert (row.status, row.answer, row.decided_by) == ("pending", None, "")
    assert not ApproverResponse.objects.filter(confirmation_id=question_id).exists()


def test_an_outsider_cannot_answer_and_an_approval_is_not_an_answer(agent, people):
    question_id = ask(agent).json()["id"]
    assert answer(question_id, "Acme", actor="mallory").code == "not_approver"
    approve = services.confirmation_respond(
        channel_name="web", callback=Callback(confirmation_id=question_id, decision="approve", actor="alice")
    )
    assert (approve.applied, approve.code) == (False, "is_a_question")
    assert ConfirmationRequest.objects.get(pk=question_id).status == "pending"


def test_two_answers_racing_one_wins(agent, people):
    for _ in range(15):
        question_id = ask(agent).json()["id"]
        barrier = threading.Barrier(2)

        def race(who: str, value: str):
            barrier.wait()
            try:
                return answer(question_id, value, actor=who)
            finally:
                connection.close()  # back to the pool

        with ThreadPoolExecutor(2) as pool:
            outcomes = list(pool.map(race, ["alice", "bob"], ["Acme", "Initech"]))
        assert sorted(o.applied for o in outcomes) == [False, True]
        winner = next(o for o in outcomes if o.applied)
        row = ConfirmationRequest.objects.get(pk=question_id)
        assert row.status == "answered"
        assert winner.message == f"Answered: {row.answer}"
        assert ConfirmationEvent.objects.filter(confirmation_id=question_id, kind="answered").count() == 1


def test_a_question_nobody_answers_expires_with_its_default(agent):
    question_id = ask(agent, timeout_seconds=1, default_answer="Initech").json()["id"]
    body = agent.http.get(f"/api/v1/questions/{question_id}/wait", params={"timeout": 20}).json()
    assert body["status"] == "expired"
    assert (body["answer"], body["defaulted"], body["answered_by"]) == ("Initech", True, None)
    assert answer(question_id, "Acme").code == "already_decided"


def test_wait_seconds_holds_the_ask_until_it_is_answered(agent, people):
    with ThreadPoolExecutor(1) as pool:
        held = pool.submit(ask, agent, wait_seconds=20)
        row = wait_until(lambda: ConfirmationRequest.objects.filter(kind="question").first(), what="the question")
        assert answer(row.pk, "Acme").applied
        response = held.result(timeout=20)
    assert response.status_code == 201
    assert (response.json()["status"], response.json()["answer"]) == ("answered", "Acme")


def test_the_agent_may_cancel_its_question(agent):
    question_id = ask(agent).json()["id"]
    cancelled = agent.http.post(f"/api/v1/questions/{question_id}/cancel")
    assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled"
    assert agent.http.post(f"/api/v1/questions/{question_id}/cancel").status_code == 409


def test_a_question_to_a_channel_whose_cards_cannot_take_answers_is_refused_naming_the_kind(agent):
    from tests.conftest import apply_config

    apply_config(
        """
channels:
  - {name: web, kind: web}
  - {name: mail, kind: email, from_address: "gateway@example.com", smtp_host: 127.0.0.1, smtp_port: 2525, smtp_security: none}
agents:
  - name: purchasing-bot
    hooks: []
"""
    )
    response = ask(agent, channel="mail")
    assert response.status_code == 400
    assert response.json()["error"]["message"] == (
        "channel 'mail' is of kind email, whose cards cannot take answers (docs/asking.md)"
    )
    escalating = ask(agent, escalate_after_seconds=60, escalate_to={"channel": "mail", "approvers": []})
    assert escalating.status_code == 400 and "escalate_to" in escalating.json()["error"]["details"]
    assert not ConfirmationRequest.objects.exists()
