"""The record covers the decision (docs/audit.md): a decision row changed behind the gateway's back —
a request's status, an approver's edit, a response, a grant — never turns into `allow` for the agent
(repeat ask, long-poll, WebSocket, a held ask, the grant check), and `verify_audit` names the row.

Every change here is made the way someone with database access would make it: SQL on a raw cursor,
with the live gateway serving the agent over HTTP."""

from __future__ import annotations

import datetime as dt
import json
import threading
import time

import pytest
from django.db import connection
from django.utils import timezone

from approvals.models import ApproverResponse, ConfirmationRequest, Grant, Status
from approvals.selectors import UNVERIFIED_REASON
from approvals.services.records import _state_sql
from gateway_utils import realtime
from tests.approvals.test_websocket import open_socket, receive
from tests.audit.support import verify_fails, verify_problems
from tests.conftest import AgentClient, apply_config, decide, make_agent_client
from tests.support import parked, rewrite_request, wait_until

pytestmark = pytest.mark.django_db(transaction=True)

CONFIG = """
channels: [{name: web, kind: web}]
agents:
  - name: payer
    hooks:
      - {kind: policy, name: no-rm, rules: [{effect: deny, tools: ["rm"], reason: "never delete"}]}
      - kind: approval_gate
        name: pay-gate
        tools: ["pay"]
        channel: web
        approvers: [alice, bob]
        allow_edit: ["amount"]
        grants: [{scope: session, args: any}]
      - kind: approval_gate
        name: two-keys
        tools: ["wire"]
        channel: web
        approvers: [alice, bob, carol]
        approvals_required: 2
      - kind: approval_gate
        name: quick
        tools: ["tick"]
        channel: web
        approvers: [alice]
        timeout_seconds: 600
"""


def sql(statement: str, params: list | None = None) -> int:
    """Tamper the way someone with database access would: behind the gateway's back."""
    with connection.cursor() as cursor:
        cursor.execute(statement, params or [])
        return cursor.rowcount


@pytest.fixture
def payer(live_gateway, transactional_db):
    apply_config(CONFIG)
    client = make_agent_client(live_gateway, "payer")
    yield client
    client.http.close()


def ask(payer: AgentClient, tool: str = "pay", args: dict | None = None, **extra) -> dict:
    response = payer.pre_tool_use(tool, args if args is not None else {"amount": 5}, **extra)
    assert response.status_code == 200, response.text
    return response.json()


def test_a_rejected_request_flipped_to_approved_in_sql_is_denied_on_the_repeat_ask_and_named(payer):
    first = ask(payer, idempotency_key="k-1")
    decide(first["confirmation_id"], "reject", reason="no")
    assert ask(payer, idempotency_key="k-1")["decision"] == "deny"

    sql("UPDATE approvals_confirmationrequest SET status = 'approved', decision_reason = '' WHERE id = %s",
        [first["confirmation_id"]])  # fmt: skip

    again = ask(payer, idempotency_key="k-1")
    assert (again["decision"], again["reason"]) == ("deny", UNVERIFIED_REASON)
    shown = payer.wait(first["confirmation_id"], timeout=0).json()  # the long-poll, already final
    assert (shown["status"], shown["reason"], shown["decided_by"]) == ("rejected", UNVERIFIED_REASON, "gateway")
    problems = verify_problems()
    assert f"confirmation request {first['confirmation_id']} does not match its signature" in problems
    assert f"confirmation request {first['confirmation_id']} was changed after entry" in problems  # the chain too


def test_an_expired_request_made_to_allow_on_timeout_in_sql_is_denied(payer):
    first = ask(payer, "tick", {}, idempotency_key="k-2")
    rewrite_request(first["confirmation_id"], expires_at=timezone.now() - dt.timedelta(seconds=1))
    from approvals import services

    services.confirmation_expire_due()
    assert ConfirmationRequest.objects.get(pk=first["confirmation_id"]).status == Status.EXPIRED
    assert ask(payer, "tick", {}, idempotency_key="k-2")["decision"] == "deny"

    sql("UPDATE approvals_confirmationrequest SET on_timeout = 'allow' WHERE id = %s", [first["confirmation_id"]])
    assert ask(payer, "tick", {}, idempotency_key="k-2")["decision"] == "deny"
    problems = verify_problems()
    assert f"confirmation request {first['confirmation_id']} does not match its signature" in problems
    assert f"confirmation request {first['confirmation_id']} was changed after entry" in problems  # the chain too


def test_a_pending_request_approved_in_sql_is_answered_as_rejected_to_the_long_poll_and_the_socket(payer):
    first = ask(payer, idempotency_key="k-3")
    confirmation_id = first["confirmation_id"]
    polled: dict = {}

    def long_poll() -> None:
        polled.update(payer.wait(confirmation_id, timeout=20).json())

    with open_socket(payer, confirmation_id) as ws:
        assert receive(ws)["status"] == "pending"
        waiter = threading.Thread(target=long_poll)
        waiter.start()
        wait_until(lambda: parked(confirmation_id), what="the long-poll parked")
        # Approved in SQL, and the waiters told so with a notification built as the gateway builds them.
        sql("UPDATE approvals_confirmationrequest SET status = 'approved', decided_by = 'web:alice', "
            "decided_at = now() WHERE id = %s", [confirmation_id])  # fmt: skip
        sql(realtime.notify_select(_state_sql()), [realtime.CHANNEL, [confirmation_id]])
        pushed = receive(ws, timeout=15)
        waiter.join(30)

    assert (pushed["status"], pushed["reason"]) == ("rejected", UNVERIFIED_REASON)
    assert (polled["status"], polled["reason"]) == ("rejected", UNVERIFIED_REASON)
    again = ask(payer, idempotency_key="k-3")
    assert again["decision"] == "deny"


def test_a_pending_request_changed_in_sql_is_answered_rejected_at_once_not_held(payer):
    """A state that does not verify ends a wait: the long-poll is not held to its timeout."""
    confirmation_id = ask(payer, args={"amount": 5})["confirmation_id"]
    sql("""UPDATE approvals_confirmationrequest SET tool_args = '{"amount": 1}' WHERE id = %s""", [confirmation_id])
    started = time.monotonic()
    shown = payer.http.get(f"/api/v1/confirmations/{confirmation_id}/wait", params={"timeout": 60}, timeout=90).json()
    assert time.monotonic() - started < 30
    assert (shown["status"], shown["reason"]) == ("rejected", UNVERIFIED_REASON)


def test_a_forged_notification_never_answers_a_held_ask_allow(payer):
    """A NOTIFY anyone with database access can send, saying `approved`, with no row changed at all."""
    result: dict = {}

    def held() -> None:
        result.update(ask(payer, idempotency_key="k-4", wait_seconds=20))

    thread = threading.Thread(target=held)
    thread.start()
    row = wait_until(lambda: ConfirmationRequest.objects.first(), what="the held ask's request")
    confirmation_id = str(row.pk)
    wait_until(lambda: parked(confirmation_id), what="the held ask parked")
    forged = {
        "id": confirmation_id, "agent_id": row.agent_id, "status": "approved", "tool_name": "pay", "tool_args": {"amount": 5},
        "reason": "", "decision_reason": "", "decided_by": "web:alice", "decided_by_name": "alice",
        "decided_at": "2026-01-01T00:00:00+00:00", "expires_at": None, "arg_edits": {}, "approved_args": None,
        "on_timeout": "deny", "approvals_required": 1, "approved_by": ["web:alice"],
    }  # fmt: skip
    sql("SELECT pg_notify(%s, %s)", [realtime.CHANNEL, json.dumps(forged)])
    thread.join(30)
    assert result["decision"] == "deny", result
    assert ConfirmationRequest.objects.get(pk=confirmation_id).status == Status.PENDING


def test_a_swapped_edit_is_denied_and_named(payer):
    first = ask(payer, args={"amount": 5, "to": "acme"}, idempotency_key="k-5")
    from approvals import services
    from gateway_contract import Callback

    services.confirmation_respond(
        channel_name="web",
        callback=Callback(confirmation_id=first["confirmation_id"], decision="approve", actor="alice", typed_edits={"amount": "3"}),
    )
    approved = ask(payer, args={"amount": 5, "to": "acme"}, idempotency_key="k-5")
    assert (approved["decision"], approved["tool_args"]["amount"]) == ("allow", 3)

    sql("""UPDATE approvals_confirmationrequest SET arg_edits = '{"amount": 3000}' WHERE id = %s""",
        [first["confirmation_id"]])  # fmt: skip
    swapped = ask(payer, args={"amount": 5, "to": "acme"}, idempotency_key="k-5")
    assert swapped["decision"] == "deny"
    problems = verify_problems()
    assert f"confirmation request {first['confirmation_id']} does not match its signature" in problems
    assert f"confirmation request {first['confirmation_id']} was changed after entry" in problems  # the chain too


def test_a_response_forged_in_sql_does_not_count_towards_a_quorum_and_is_named(payer):
    confirmation_id = ask(payer, "wire", {"amount": 9})["confirmation_id"]
    other_id = ask(payer, "wire", {"amount": 10})["confirmation_id"]
    decide(other_id, "approve", actor="carol")  # one of two on another request
    # bob's approval made up in SQL, and carol's real one (signed, for the other request) moved over.
    sql("INSERT INTO approvals_approverresponse (confirmation_id, approver, person, approver_name, on_behalf_of, "
        "on_behalf_of_name, decision, reason, channel, created_at, decision_mac) "
        "VALUES (%s, 'web:bob', 'web:bob', 'bob', '', '', 'approve', '', 'web', now(), '')",
        [confirmation_id])  # fmt: skip
    sql("UPDATE approvals_approverresponse SET confirmation_id = %s WHERE confirmation_id = %s",
        [confirmation_id, other_id])  # fmt: skip

    decide(confirmation_id, "approve", actor="alice")
    assert ConfirmationRequest.objects.get(pk=confirmation_id).status == Status.PENDING  # one real approval of two
    assert ask(payer, "wire", {"amount": 9}, idempotency_key="k-6")["decision"] == "pending"
    forged = ApproverResponse.objects.get(confirmation_id=confirmation_id, approver="web:bob")
    moved = ApproverResponse.objects.get(confirmation_id=confirmation_id, approver="web:carol")
    problems = verify_problems()
    assert f"approver response {forged.pk} has no signature" in problems
    assert f"approver response {moved.pk} does not match its signature" in problems


def test_a_grant_inserted_or_unrevoked_in_sql_allows_nothing_and_is_named(payer):
    first = ask(payer, args={"amount": 1})
    from approvals import services
    from gateway_contract import Callback

    services.confirmation_respond(
        channel_name="web",
        callback=Callback(confirmation_id=first["confirmation_id"], decision="approve", actor="alice", grant=0),
    )
    assert ask(payer, args={"amount": 2})["decision"] == "allow"  # the real grant
    grant = Grant.objects.get()
    assert services.grant_revoke(grant_id=grant.pk, actor="web:bob")
    assert ask(payer, args={"amount": 3})["decision"] == "pending"

    sql("UPDATE approvals_grant SET revoked_at = NULL, revoked_by = '' WHERE id = %s", [grant.pk])
    assert ask(payer, args={"amount": 4})["decision"] == "pending"  # un-revoked in SQL: not honoured
    problems = verify_problems()
    assert f"grant {grant.pk} does not match its signature" in problems
    assert f"grant {grant.pk} was changed after entry" in problems

    sql("DELETE FROM approvals_toolcall WHERE grant_id = %s", [grant.pk])  # (so the copy below is all there is)
    sql("INSERT INTO approvals_grant (id, agent_id, session_id, user_id, tool_name, gate, args_fingerprint, scope, "
        "minutes, expires_at, granted_by, granted_by_name, channel, confirmation_id, created_at, revoked_at, revoked_by, "
        "uses, last_used_at, decision_mac) SELECT gen_random_uuid(), agent_id, session_id, user_id, tool_name, gate, '', "
        "scope, minutes, expires_at, granted_by, granted_by_name, channel, confirmation_id, now(), NULL, '', 0, NULL, "
        "decision_mac FROM approvals_grant WHERE id = %s", [grant.pk])  # fmt: skip
    assert ask(payer, args={"amount": 5})["decision"] == "pending"  # a new grant made in SQL: not honoured
    copy = Grant.objects.exclude(pk=grant.pk).get()
    assert f"grant {copy.pk} has no audit entry (inserted behind the gateway's back)" in verify_problems()


def test_a_grant_rolled_back_to_its_signed_state_from_before_its_revocation_is_named(payer):
    """The MAC of a grant's row as it was before its revocation is a real signature: restoring that row
    (saved from the database earlier, or from a backup) un-revokes it with a valid MAC. The chain recorded
    the revocation: the grant is not used, and `verify_audit` names it."""
    from approvals import services
    from gateway_contract import Callback

    first = ask(payer, args={"amount": 1})
    services.confirmation_respond(
        channel_name="web",
        callback=Callback(confirmation_id=first["confirmation_id"], decision="approve", actor="alice", grant=0),
    )
    grant = Grant.objects.get()
    saved = grant.decision_mac
    services.grant_revoke(grant_id=grant.pk, actor="web:bob")
    sql("UPDATE approvals_grant SET revoked_at = NULL, revoked_by = '', decision_mac = %s WHERE id = %s", [saved, grant.pk])
    assert ask(payer, args={"amount": 2})["decision"] == "pending"  # the chain recorded the revocation
    assert f"grant {grant.pk} was changed after entry" in verify_fails()


def test_a_denied_call_flipped_to_allow_in_sql_is_still_denied_on_the_repeat_ask(payer):
    first = ask(payer, "rm", {"path": "/"}, idempotency_key="k-7")
    assert first["decision"] == "deny"
    sql("""UPDATE approvals_toolcall SET decision = 'allow', response = jsonb_set(response, '{decision}', '"allow"') """
        "WHERE idempotency_key = 'k-7'")  # fmt: skip
    again = ask(payer, "rm", {"path": "/"}, idempotency_key="k-7")
    assert (again["decision"], again["reason"]) == ("deny", UNVERIFIED_REASON)
    assert "was changed after entry" in verify_fails()
