"""The agent API over real HTTP against the real database: allow, ask, and every way a request ends."""

from __future__ import annotations

import sys
import threading
import time
import uuid

import pytest

from approvals.models import ConfirmationEvent, ConfirmationRequest, Outbox, ToolCall
from tests.conftest import apply_config, decide, make_agent_client
from tests.support import InThread, parked, rewrite_request, wait_until

pytestmark = pytest.mark.django_db(transaction=True)


def decide_once_parked(confirmation_id: str, decision: str, **kw) -> InThread:
    """An approver who decides from another thread once the agent is parked waiting on the request."""
    from django.db import connection

    def run() -> None:
        try:
            wait_until(lambda: parked(confirmation_id), what="the agent to wait")
            decide(confirmation_id, decision, **kw)
        finally:
            connection.close()

    return InThread(run)


def test_an_ungated_tool_is_allowed_and_recorded(agent):
    response = agent.pre_tool_use("web__search", {"q": "weather"}, tool_call_id="call_1", user_id="u-42")

    assert response.status_code == 200
    body = response.json()
    assert body["decision"] == "allow"
    assert body["tool_args"] == {"q": "weather"}
    assert body["confirmation_id"] is None
    call = ToolCall.objects.get()
    assert (call.tool_name, call.decision, call.tool_call_id, call.user_id) == ("web__search", "allow", "call_1", "u-42")
    assert call.config_version == 1
    assert ConfirmationRequest.objects.count() == 0


def test_a_gated_tool_is_pending_with_a_durable_request_and_a_card_row(agent):
    body = agent.pre_tool_use("oa__purchase_pay", {"amount": 80000}, user_id="u-42").json()

    assert body["decision"] == "pending"
    assert body["hook_decisions"] == [
        {"hook": "finance-gate", "kind": "approval_gate", "decision": "ask", "reason": body["reason"]}
    ]
    confirmation = ConfirmationRequest.objects.get(pk=body["confirmation_id"])
    assert confirmation.status == "pending"
    assert confirmation.approvers == ["alice", "bob"]
    assert confirmation.hook_name == "finance-gate"
    assert ToolCall.objects.get().confirmation == confirmation
    # the web channel's card is the request's page: up (and recorded as posted) at once, no worker
    assert list(ConfirmationEvent.objects.values_list("kind", flat=True)) == ["created", "card_posted"]
    card = Outbox.objects.get()
    assert (card.kind, card.status) == ("card", "sent")
    assert card.message_ref["url"].endswith(f"/approvals/{confirmation.pk}/")

    detail = agent.http.get(f"/api/v1/confirmations/{confirmation.pk}").json()
    assert detail["status"] == "pending"
    assert detail["tool_args"] == {"amount": 80000}
    assert detail["url"].endswith(f"/approvals/{confirmation.pk}/")


def test_an_approval_wakes_the_long_polling_agent(agent):
    confirmation_id = agent.pre_tool_use("oa__purchase_pay", {"amount": 1}).json()["confirmation_id"]
    approver = decide_once_parked(confirmation_id, "approve", actor="alice")

    started = time.monotonic()
    body = agent.wait(confirmation_id, timeout=20).json()
    approver.result()

    assert body["status"] == "approved"
    assert (body["decided_by"], body["decided_by_name"]) == ("web:alice", "alice")
    assert time.monotonic() - started < 5  # woken by the decision, not by the 20 s timeout


def test_wait_seconds_holds_the_call_and_answers_with_the_decision(agent):
    def reject_once_held() -> None:
        from django.db import connection

        try:
            confirmation_id = wait_until(lambda: ConfirmationRequest.objects.values_list("pk", flat=True).first())
            wait_until(lambda: parked(confirmation_id), what="the call to be held")
            decide(confirmation_id, "reject", reason="too much")
        finally:
            connection.close()

    approver = InThread(reject_once_held)

    body = agent.pre_tool_use("oa__purchase_pay", {"amount": 80000}, wait_seconds=20).json()
    approver.result()

    assert body["decision"] == "deny"
    assert body["reason"] == "rejected by web:alice: too much"
    assert body["tool_args"] == {"amount": 80000}
    assert body["confirmation_id"] == str(ConfirmationRequest.objects.get().pk)


def test_a_rejection_reaches_the_agent_with_its_reason(agent):
    confirmation_id = agent.pre_tool_use("oa__purchase_pay", {"amount": 1}).json()["confirmation_id"]
    approver = decide_once_parked(confirmation_id, "reject", actor="bob", reason="not this quarter")

    body = agent.wait(confirmation_id).json()
    approver.result()

    assert body["status"] == "rejected"
    assert body["reason"] == "not this quarter"
    assert body["decided_by"] == "web:bob"


def test_the_waiter_expires_the_request_at_its_deadline_and_on_timeout_deny_denies(live_gateway, transactional_db):
    apply_config(
        """
channels: [{name: web, kind: web}]
agents:
  - name: quick
    hooks: [{kind: approval_gate, channel: web, timeout_seconds: 1, on_timeout: deny}]
"""
    )
    agent = make_agent_client(live_gateway, "quick")

    body = agent.pre_tool_use("anything", {}, wait_seconds=10).json()

    assert body["decision"] == "deny"
    assert "no decision before the deadline" in body["reason"]
    assert ConfirmationRequest.objects.get().status == "expired"
    assert ConfirmationEvent.objects.filter(kind="expired").count() == 1


def test_on_timeout_allow_lets_an_expired_call_run(live_gateway, transactional_db):
    apply_config(
        """
channels: [{name: web, kind: web}]
agents:
  - name: lenient
    hooks: [{kind: approval_gate, channel: web, timeout_seconds: 1, on_timeout: allow}]
"""
    )
    agent = make_agent_client(live_gateway, "lenient")

    body = agent.pre_tool_use("anything", {"x": 1}, wait_seconds=10).json()

    assert body["decision"] == "allow"
    assert body["tool_args"] == {"x": 1}


def test_the_beat_sweep_expires_due_requests_and_wakes_waiters(agent):
    from django.utils import timezone

    from approvals.tasks import expire_due

    confirmation_id = agent.pre_tool_use("oa__purchase_pay", {}).json()["confirmation_id"]
    other_id = agent.pre_tool_use("fs__delete", {"path": "/tmp/x"}).json()["confirmation_id"]  # not due: stays
    waiting = InThread(agent.wait, confirmation_id, timeout=20)
    # Parked: the waiter has read the request (due in 30 min) and sleeps until woken, so it
    # will not expire the request itself; only the sweep can, and only its notification wakes it.
    wait_until(lambda: parked(confirmation_id), what="the agent to wait")
    rewrite_request(confirmation_id, expires_at=timezone.now() - timezone.timedelta(seconds=1))

    assert expire_due.apply().get() == 1
    body = waiting.result().json()

    assert body["status"] == "expired"
    assert dict(ConfirmationRequest.objects.values_list("pk", "status")) == {
        uuid.UUID(confirmation_id): "expired",
        uuid.UUID(other_id): "pending",
    }
    assert ConfirmationEvent.objects.filter(kind="expired").count() == 1
    assert expire_due.apply().get() == 0  # nothing left to sweep


def test_cancelling_wakes_the_waiter_and_a_second_cancel_is_a_conflict(agent):
    confirmation_id = agent.pre_tool_use("oa__purchase_pay", {}).json()["confirmation_id"]

    def cancel_once_parked() -> int:
        wait_until(lambda: parked(confirmation_id), what="the agent to wait")
        return agent.http.post(f"/api/v1/confirmations/{confirmation_id}/cancel").status_code

    cancelling = InThread(cancel_once_parked)

    assert agent.wait(confirmation_id).json()["status"] == "cancelled"
    assert cancelling.result() == 200

    again = agent.http.post(f"/api/v1/confirmations/{confirmation_id}/cancel")
    assert again.status_code == 409
    assert again.json()["error"]["code"] == "already_decided"


def test_a_long_poll_answers_pending_at_its_timeout(agent):
    confirmation_id = agent.pre_tool_use("oa__purchase_pay", {}).json()["confirmation_id"]

    started = time.monotonic()
    body = agent.wait(confirmation_id, timeout=1).json()

    assert body["status"] == "pending"
    assert 0.9 < time.monotonic() - started < 5


def test_an_agent_sees_only_its_own_confirmations(agent, other_agent):
    confirmation_id = agent.pre_tool_use("oa__purchase_pay", {}).json()["confirmation_id"]

    for response in (
        other_agent.http.get(f"/api/v1/confirmations/{confirmation_id}"),
        other_agent.wait(confirmation_id, timeout=0),
        other_agent.http.post(f"/api/v1/confirmations/{confirmation_id}/cancel"),
    ):
        assert response.status_code == 404
        assert response.json()["error"]["code"] == "not_found"
    assert ConfirmationRequest.objects.get().status == "pending"


COMMAND_CHAIN = """
channels: [{{name: web, kind: web}}]
agents:
  - name: chained
    hooks:
      - kind: command
        name: {first_name}
        event: pre_tool_use
        priority: 10
        command: ["{python}", "-c", "{script}"]
      - kind: approval_gate
        name: gate
        tools: ["pay"]
        channel: web
"""

REWRITE = "import json,sys; e=json.load(sys.stdin); a=e['tool_input']; a['amount']=min(a['amount'],100); print(json.dumps({'tool_args': a}))"
DENY = "import sys; sys.stderr.write('payments are frozen'); sys.exit(2)"


def test_rewritten_args_reach_later_hooks_and_the_agent(live_gateway, transactional_db):
    apply_config(COMMAND_CHAIN.format(first_name="cap", python=sys.executable, script=REWRITE))
    agent = make_agent_client(live_gateway, "chained")

    body = agent.pre_tool_use("pay", {"amount": 5000, "to": "acme"}).json()

    assert body["decision"] == "pending"
    assert body["tool_args"] == {"amount": 100, "to": "acme"}
    assert ConfirmationRequest.objects.get().tool_args == {"amount": 100, "to": "acme"}  # the approver sees it too


def test_the_first_deny_stops_the_chain(live_gateway, transactional_db):
    apply_config(COMMAND_CHAIN.format(first_name="freeze", python=sys.executable, script=DENY))
    agent = make_agent_client(live_gateway, "chained")

    body = agent.pre_tool_use("pay", {"amount": 5000}).json()

    assert body["decision"] == "deny"
    assert body["reason"] == "payments are frozen"
    assert [d["hook"] for d in body["hook_decisions"]] == ["freeze"]  # the gate never ran
    assert ConfirmationRequest.objects.count() == 0
    assert ToolCall.objects.get().decided_by_hook == "freeze"


def test_the_same_idempotency_key_returns_the_same_confirmation_and_no_second_card(agent):
    first = agent.pre_tool_use("oa__purchase_pay", {"amount": 5}, idempotency_key="k-1").json()
    second = agent.pre_tool_use("oa__purchase_pay", {"amount": 5}, idempotency_key="k-1").json()

    assert second["confirmation_id"] == first["confirmation_id"]
    assert ConfirmationRequest.objects.count() == 1
    assert Outbox.objects.filter(kind="card").count() == 1
    assert ToolCall.objects.count() == 1

    decide(first["confirmation_id"], "approve")
    after = agent.pre_tool_use("oa__purchase_pay", {"amount": 5}, idempotency_key="k-1").json()
    assert after["decision"] == "allow"
    assert after["confirmation_id"] == first["confirmation_id"]


def test_the_same_idempotency_key_with_another_body_is_refused(agent):
    agent.pre_tool_use("oa__purchase_pay", {"amount": 5}, idempotency_key="k-2")

    response = agent.pre_tool_use("oa__purchase_pay", {"amount": 6}, idempotency_key="k-2")

    assert response.status_code == 422
    assert response.json()["error"]["code"] == "idempotency_key_reused"
    assert ToolCall.objects.count() == 1


def test_concurrent_calls_with_one_idempotency_key_make_one_request(agent):
    results = []
    threads = [
        threading.Thread(target=lambda: results.append(agent.pre_tool_use("oa__purchase_pay", {"n": 1}, idempotency_key="k-race").json()))
        for _ in range(8)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    assert len({r["confirmation_id"] for r in results}) == 1
    assert ConfirmationRequest.objects.count() == 1
    assert Outbox.objects.filter(kind="card").count() == 1
