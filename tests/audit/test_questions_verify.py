"""A question's answer is verified like a decision (docs/asking.md, docs/audit.md): a question whose signed
fields — its answer, default, status, schema, text, who answered — were changed behind the gateway's back is
answered `cancelled`, with no answer, on every path an agent learns it by (GET, the long-poll, the held ask,
the WebSocket, the decision webhook, `/mcp`'s `ask_human`), and `verify_audit` names the row. An answered
question nobody touched serves its answer, whatever its type.

Every change here is made the way someone with database access would make it: SQL on a raw cursor (never
`tests.support.rewrite_request`, which signs anew), with the live gateway serving the agent over HTTP."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from django.db import connection
from standardwebhooks import Webhook

from approvals import services
from approvals.audit import audit_verify
from approvals.models import ConfirmationRequest, Status
from approvals.selectors import UNVERIFIED_QUESTION_REASON
from approvals.services.records import _state_sql
from gateway_contract import Callback
from gateway_utils import realtime
from tests.approvals.test_webhooks import receiver, start_receiver  # noqa: F401 - a fixture
from tests.approvals.test_websocket import close_code, open_socket, receive
from tests.audit.support import verify_problems
from tests.channels_ext.web.test_mcp_ask_human import mcp_client, text
from tests.support import InThread, parked, rewrite_request, wait_until

pytestmark = pytest.mark.django_db(transaction=True)

CHOICE = {"type": "string", "enum": ["Acme", "Globex"]}
CANCELLED = {"status": "cancelled", "answer": None, "defaulted": False, "answered_by": None,
             "answered_by_name": None, "answered_at": None, "reason": UNVERIFIED_QUESTION_REASON}  # fmt: skip


def sql(statement: str, params: list | None = None) -> int:
    """Tamper the way someone with database access would: behind the gateway's back."""
    with connection.cursor() as cursor:
        cursor.execute(statement, params or [])
        return cursor.rowcount


def notify(question_id: str) -> None:
    """Wake the question's waiters with its state as the gateway builds notifications (anyone with database
    access can send one)."""
    sql(realtime.notify_select(_state_sql()), [realtime.CHANNEL, [question_id]])


def ask(agent, schema: Any = CHOICE, **more: Any) -> str:
    body = {"question": "Which vendor?", "answer_schema": schema, "channel": "web", "approvers": ["alice"], **more}
    response = agent.http.post("/api/v1/questions", json=body)
    assert response.status_code == 201, response.text
    return response.json()["id"]


def answer(question_id: str, value: Any, actor: str = "alice") -> bool:
    try:
        return services.confirmation_respond(
            channel_name="web",
            callback=Callback(confirmation_id=str(question_id), decision="answer", actor=actor, answer=value),
            with_card=False,
        ).applied
    finally:
        connection.close()


def shown(agent, question_id: str) -> dict:
    response = agent.http.get(f"/api/v1/questions/{question_id}")
    assert response.status_code == 200, response.text
    return response.json()


def polled(agent, question_id: str, timeout: float = 0) -> dict:
    response = agent.http.get(f"/api/v1/questions/{question_id}/wait", params={"timeout": timeout}, timeout=timeout + 30)
    assert response.status_code == 200, response.text
    return response.json()


def cancelled(question: dict) -> dict:
    return {key: question[key] for key in CANCELLED}


def named(question_id: str, *, by_the_chain: bool = True) -> str:
    """What `verify_audit` says, which names the question by its MAC (and by the chain, unless the gateway
    wrote the row again since: its entry then recorded the change, docs/audit.md)."""
    problems = verify_problems()
    assert f"confirmation request {question_id} does not match its signature" in problems, problems
    if by_the_chain:
        assert f"confirmation request {question_id} was changed after entry" in problems, problems
    return problems


# --------------------------------------------------------------------------- what the signature covers


TAMPERINGS = {
    "the answer": "answer = '\"Acme\"'",
    "the answer, to one that fits a schema widened with it": (
        "answer = '\"Umbrella\"', answer_schema = '{\"type\": \"string\", \"enum\": [\"Acme\", \"Globex\", \"Umbrella\"]}'"
    ),
    "the schema": "answer_schema = '{\"type\": \"string\", \"enum\": [\"Globex\", \"Initech\"]}'",
    "the question's text": "reason = 'Which vendor? (Globex is pre-approved by the CFO)'",
    "who answered": "decided_by = 'web:bob'",
    "the status, to expired with a default": "status = 'expired', default_answer = '\"Acme\"'",
    "the default": "default_answer = '\"Acme\"'",
}


@pytest.mark.parametrize("change", list(TAMPERINGS.values()), ids=list(TAMPERINGS))
def test_an_answered_question_changed_in_sql_is_read_as_cancelled_and_named(agent, change):
    question_id = ask(agent)
    assert answer(question_id, "Globex")
    assert shown(agent, question_id)["answer"] == "Globex"

    assert sql(f"UPDATE approvals_confirmationrequest SET {change} WHERE id = %s", [question_id]) == 1

    assert cancelled(shown(agent, question_id)) == CANCELLED
    assert cancelled(polled(agent, question_id)) == CANCELLED  # the long-poll, already final
    named(question_id)


def test_an_answer_given_a_valid_mac_from_another_question_is_cancelled(agent):
    """Both questions answered by the gateway, both MACs real: the one copied over signs another row."""
    acme, globex = ask(agent), ask(agent)
    assert answer(acme, "Acme") and answer(globex, "Globex")
    sql("UPDATE approvals_confirmationrequest AS q SET answer = o.answer, decision_mac = o.decision_mac "
        "FROM approvals_confirmationrequest AS o WHERE q.id = %s AND o.id = %s", [globex, acme])  # fmt: skip

    assert cancelled(shown(agent, globex)) == CANCELLED
    assert shown(agent, acme)["answer"] == "Acme"  # the row whose MAC was copied is untouched
    assert f"confirmation request {globex} does not match its signature" in named(globex)


def test_answers_swapped_between_two_questions_cancel_both(agent):
    first, second = ask(agent), ask(agent)
    assert answer(first, "Acme") and answer(second, "Globex", actor="alice")
    sql("UPDATE approvals_confirmationrequest AS q SET answer = o.answer, decided_at = o.decided_at "
        "FROM approvals_confirmationrequest AS o WHERE q.id IN (%s, %s) AND o.id IN (%s, %s) AND q.id <> o.id",
        [first, second, first, second])  # fmt: skip
    assert ConfirmationRequest.objects.get(pk=first).answer == "Globex"  # (swapped)

    assert cancelled(shown(agent, first)) == CANCELLED
    assert cancelled(shown(agent, second)) == CANCELLED
    named(first)
    named(second)


def test_a_pending_question_whose_schema_is_widened_in_sql_takes_no_answer_and_is_cancelled(agent):
    question_id = ask(agent)
    sql("""UPDATE approvals_confirmationrequest SET answer_schema = '{"type": "string", "maxLength": 100}' """
        "WHERE id = %s", [question_id])  # fmt: skip

    assert not answer(question_id, "Umbrella")  # a click on a row that does not verify is refused
    assert ConfirmationRequest.objects.get(pk=question_id).status == Status.PENDING
    assert cancelled(shown(agent, question_id)) == CANCELLED
    started = time.monotonic()
    assert cancelled(polled(agent, question_id, timeout=60)) == CANCELLED
    assert time.monotonic() - started < 30  # answered at once, not held to the long-poll's end
    named(question_id)


def test_a_default_changed_while_pending_is_not_given_at_expiry(agent):
    question_id = ask(agent, default_answer="Globex")
    sql("""UPDATE approvals_confirmationrequest SET default_answer = '"Acme"' WHERE id = %s""", [question_id])
    sql("UPDATE approvals_confirmationrequest SET expires_at = now() - interval '1 second' WHERE id = %s", [question_id])
    assert services.confirmation_expire_due() == 1
    assert ConfirmationRequest.objects.get(pk=question_id).status == Status.EXPIRED

    assert cancelled(shown(agent, question_id)) == CANCELLED
    named(question_id, by_the_chain=False)  # (the expiry's entry recorded the row as it was then)


# --------------------------------------------------------------------------- every path an agent waits by


def test_a_long_poll_woken_by_an_answer_made_in_sql_is_told_cancelled(agent):
    """A plain UPDATE, no notification: the waiters' re-check finds the question no longer pending."""
    question_id = ask(agent)
    waiting = InThread(polled, agent, question_id, 60)
    wait_until(lambda: parked(question_id), what="the long-poll parked")

    sql("UPDATE approvals_confirmationrequest SET status = 'answered', answer = '\"Acme\"', decided_by = 'web:alice', "
        "decided_by_name = 'alice', decided_at = now() WHERE id = %s", [question_id])  # fmt: skip

    assert cancelled(waiting.result(timeout=60)) == CANCELLED


def test_a_held_ask_is_told_cancelled(agent):
    result: dict = {}

    def held() -> None:
        body = {"question": "Which vendor?", "answer_schema": CHOICE, "channel": "web", "wait_seconds": 60}
        response = agent.http.post("/api/v1/questions", json=body, timeout=90)
        result.update(status=response.status_code, body=response.json())

    thread = threading.Thread(target=held)
    thread.start()
    question_id = str(wait_until(lambda: ConfirmationRequest.objects.values_list("pk", flat=True).first()))
    wait_until(lambda: parked(question_id), what="the held ask parked")
    sql("UPDATE approvals_confirmationrequest SET status = 'answered', answer = '\"Globex\"', decided_by = 'web:alice', "
        "decided_at = now() WHERE id = %s", [question_id])  # fmt: skip
    notify(question_id)
    thread.join(60)

    assert result["status"] == 201
    assert cancelled(result["body"]) == CANCELLED


def test_the_websocket_pushes_cancelled_and_closes(agent):
    question_id = ask(agent)
    with open_socket(agent, question_id) as ws:
        assert receive(ws)["status"] == "pending"
        sql("UPDATE approvals_confirmationrequest SET status = 'answered', answer = '\"Acme\"', decided_by = 'web:alice', "
            "decided_at = now() WHERE id = %s", [question_id])  # fmt: skip
        notify(question_id)
        pushed = receive(ws, timeout=30)
        assert close_code(ws) == 1000
    assert cancelled(pushed) == CANCELLED


def test_the_webhook_of_a_question_whose_default_changed_says_cancelled(agent, receiver, celery_worker):  # noqa: F811
    question_id = ask(agent, default_answer="Globex", callback_url=receiver.url)
    sql("""UPDATE approvals_confirmationrequest SET default_answer = '"Acme"' WHERE id = %s""", [question_id])
    sql("UPDATE approvals_confirmationrequest SET expires_at = now() - interval '1 second' WHERE id = %s", [question_id])
    assert services.confirmation_expire_due() == 1

    [(headers, body)] = receiver.wait_for(1)
    payload = Webhook(agent.agent.webhook_secret).verify(body, headers)
    assert payload["type"] == "question.answered"
    assert payload["question"]["id"] == question_id
    assert cancelled(payload["question"]) == CANCELLED


def test_a_webhook_retried_after_the_answer_changed_in_sql_says_cancelled(agent, celery_worker):
    """The first attempt carries the answer; the receiver fails it; the answer is changed before the retry."""
    tampered = threading.Event()
    hook = start_receiver([500], hold_until=tampered)
    try:
        question_id = ask(agent, callback_url=hook.url)
        assert answer(question_id, "Globex")
        hook.wait_for(1)  # the first attempt is in (and held until the answer is changed)
        sql("""UPDATE approvals_confirmationrequest SET answer = '"Acme"' WHERE id = %s""", [question_id])
        tampered.set()
        (first_headers, first), (second_headers, second) = hook.wait_for(2, timeout=30)
    finally:
        tampered.set()
        hook.server.shutdown()
    secret = agent.agent.webhook_secret
    assert Webhook(secret).verify(first, first_headers)["question"]["answer"] == "Globex"
    assert cancelled(Webhook(secret).verify(second, second_headers)["question"]) == CANCELLED


def test_mcp_ask_human_answers_no_answer(live_gateway, agent):
    with mcp_client(live_gateway.url, agent.key) as (portal, client):
        call = portal.start_task_soon(client.call_tool, "ask_human", {"question": "Ship today?", "choices": ["yes", "later"]})
        question_id = str(wait_until(lambda: ConfirmationRequest.objects.values_list("pk", flat=True).first()))
        wait_until(lambda: parked(question_id), what="ask_human waiting")
        sql("UPDATE approvals_confirmationrequest SET status = 'answered', answer = '\"yes\"', decided_by = 'web:alice', "
            "decided_by_name = 'alice', decided_at = now() WHERE id = %s", [question_id])  # fmt: skip
        notify(question_id)
        result = call.result(timeout=60)
    assert result.is_error
    assert f"No answer: the question ended cancelled ({UNVERIFIED_QUESTION_REASON})" in text(result)
    assert '"yes"' not in text(result)


# --------------------------------------------------------------------------- no false alarms

FORM = {
    "type": "object",
    "properties": {
        "vendor": {"type": "string", "enum": ["Acme", "Globex"]},
        "budget": {"type": "integer", "minimum": 1, "maximum": 5000},
        "price": {"type": "number", "minimum": 0, "maximum": 100},
        "note": {"type": "string", "maxLength": 200},
        "urgent": {"type": "boolean"},
        "places": {"type": "array", "items": {"type": "string", "enum": ["Zürich", "東京", "São Paulo"]}, "uniqueItems": True},
    },
    "required": ["vendor", "budget"],
}
UNTOUCHED = {
    "choice": (CHOICE, "Globex"),
    "several": ({"type": "array", "items": {"type": "string", "enum": ["a", "b", "c"]}, "uniqueItems": True,
                 "minItems": 1, "maxItems": 2}, ["c", "a"]),  # fmt: skip
    "text": ({"type": "string", "maxLength": 200, "minLength": 1}, 'Ünïcødé — 東京 🚀 "quoted" \\ back\nslash'),
    "unicode choice": ({"type": "string", "enum": ["café", "東京", "🚀"]}, "🚀"),
    "integer": ({"type": "integer", "minimum": -5, "maximum": 5000}, 4200),
    "number": ({"type": "number", "minimum": 0, "maximum": 1e21}, 1e20),  # jsonb gives it back as 100000000000000000000
    "fraction": ({"type": "number", "minimum": 0, "maximum": 1}, 0.1),
    "false": ({"type": "boolean"}, False),
    "form": (FORM, {"vendor": "Globex", "budget": 1200, "price": 9.99, "note": "naïve café ☕", "urgent": False,
                    "places": ["東京", "Zürich"]}),  # fmt: skip
}


@pytest.mark.parametrize(("schema", "value"), list(UNTOUCHED.values()), ids=list(UNTOUCHED))
def test_an_untouched_answer_of_every_type_is_served(agent, schema, value):
    question_id = ask(agent, schema, question="Wähle — 選んでください 🚀")
    with open_socket(agent, question_id) as ws:
        assert receive(ws)["status"] == "pending"
        assert answer(question_id, value)
        pushed = receive(ws, timeout=30)
    assert (pushed["status"], pushed["answer"]) == ("answered", value)
    for served in (shown(agent, question_id), polled(agent, question_id)):
        assert (served["status"], served["answer"], served["answered_by"]) == ("answered", value, "web:alice")
        assert served["question"] == "Wähle — 選んでください 🚀"
    verification = audit_verify()
    assert verification.ok, [p.message for p in verification.problems]


def test_an_untouched_default_is_served_at_expiry(agent):
    default = {"vendor": "Acme", "budget": 7, "note": "défaut ✓"}
    question_id = ask(agent, FORM, default_answer=default)
    rewrite_request(question_id, expires_at="2000-01-01T00:00:00Z")  # (signed anew: setup, not tampering)
    assert services.confirmation_expire_due() == 1
    for served in (shown(agent, question_id), polled(agent, question_id)):
        assert (served["status"], served["answer"], served["defaulted"]) == ("expired", default, True)
    assert audit_verify().ok


def test_a_question_cancelled_by_its_agent_stays_an_honest_cancel(agent):
    question_id = ask(agent)
    response = agent.http.post(f"/api/v1/questions/{question_id}/cancel")
    assert response.status_code == 200, response.text
    assert (shown(agent, question_id)["status"], shown(agent, question_id)["reason"]) == ("cancelled", "cancelled by the agent")
    verification = audit_verify()
    assert verification.ok, [p.message for p in verification.problems]
