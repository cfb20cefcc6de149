"""A decision's move — the response that decides it, the conditional UPDATE, its event and the NOTIFY of
the new state — is one statement (`records.moved_with_event`): the notification carries the row as the
UPDATE left it and counts the response written beside it (a sibling's read of the tables in the same
statement would see them as they were before), and a move that did not happen, or a response of someone
who answered already, writes nothing and notifies no one. Real PostgreSQL, a LISTEN of its own."""

from __future__ import annotations

import json
import uuid

import psycopg
import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from approvals.audit import audit_verify
from approvals.models import ApproverResponse, ConfirmationEvent, ConfirmationRequest, Status
from approvals.services.confirmations import confirmation_transition
from approvals.services.records import _state_sql
from gateway_utils import realtime
from tests.conftest import AgentClient, apply_config, decide, make_agent_client

pytestmark = pytest.mark.django_db(transaction=True)


def pending(agent: AgentClient) -> ConfirmationRequest:
    answer = agent.pre_tool_use("oa__purchase_pay", {"invoice_id": "INV-1", "amount": 80}).json()
    assert answer["decision"] == "pending", answer
    return ConfirmationRequest.objects.get(pk=answer["confirmation_id"])


class Listening:
    """LISTEN on the gateway's channel; `heard_until(marker)`: the payloads heard before a marker this
    test sends itself after what it checks (so "nothing was sent" is known without waiting for time)."""

    def __init__(self) -> None:
        self.conn = psycopg.connect(realtime.conninfo(), autocommit=True)
        self.conn.execute(f"LISTEN {realtime.CHANNEL}")

    def heard_until_marker(self) -> list[str]:
        marker = f"marker-{uuid.uuid4()}"
        with psycopg.connect(realtime.conninfo(), autocommit=True) as other:
            other.execute("SELECT pg_notify(%s, %s)", [realtime.CHANNEL, marker])
        heard = []
        for note in self.conn.notifies(timeout=30):
            if note.payload == marker:
                return heard
            heard.append(note.payload)
        raise AssertionError(f"the marker never came (heard {heard})")

    def close(self) -> None:
        self.conn.close()


def approve(confirmation: ConfirmationRequest) -> tuple[bool, list[str]]:
    with CaptureQueriesContext(connection) as captured, transaction.atomic():
        locked = ConfirmationRequest.objects.select_related("channel").select_for_update(of=("self",)).get(pk=confirmation.pk)
        won = confirmation_transition(
            locked.pk, Status.APPROVED, decided_by="web:alice", decided_by_name="Alice", channel="web",
            locked=locked, locked_verifies=True,
        )  # fmt: skip
    return won, [query["sql"] for query in captured.captured_queries]


def test_the_notification_carries_the_row_as_the_update_left_it_and_the_event_is_written_with_it(agent):
    confirmation = pending(agent)
    listening = Listening()
    try:
        won, statements = approve(confirmation)
        heard = listening.heard_until_marker()
    finally:
        listening.close()

    assert won is True
    moves = [sql for sql in statements if 'UPDATE "approvals_confirmationrequest" SET' in sql]
    assert len(moves) == 1 and "INSERT INTO" in moves[0] and "pg_notify" in moves[0]  # one statement
    assert len(heard) == 1
    told = json.loads(heard[0])
    assert told["signed"]["status"] == "approved" and told["signed"]["decided_by"] == "web:alice"
    assert told["decided_by_name"] == "Alice"
    with connection.cursor() as cursor:  # the same as the table's row now gives, byte for byte
        cursor.execute(_state_sql(), [[str(confirmation.pk)]])
        assert json.loads(cursor.fetchone()[1]) == told
    events = list(ConfirmationEvent.objects.filter(confirmation_id=confirmation.pk, kind="approved"))
    assert len(events) == 1 and events[0].actor == "web:alice" and events[0].data == {"name": "Alice"}
    assert audit_verify().ok  # the request's record and the event chained, in that order, and verifying


def test_a_move_that_does_not_happen_writes_no_event_and_notifies_no_one(agent):
    confirmation = pending(agent)
    assert approve(confirmation)[0] is True
    events_before = ConfirmationEvent.objects.filter(confirmation_id=confirmation.pk).count()
    listening = Listening()
    try:
        won, _ = approve(confirmation)  # decided already: the conditional UPDATE changes nothing
        heard = listening.heard_until_marker()
    finally:
        listening.close()

    assert won is False
    assert heard == []
    assert ConfirmationEvent.objects.filter(confirmation_id=confirmation.pk).count() == events_before
    row = ConfirmationRequest.objects.get(pk=confirmation.pk)
    assert (row.status, row.decided_by) == ("approved", "web:alice")
    assert audit_verify().ok


# --------------------------------------------------------------------------- the response in the same statement

TWO_PEOPLE = """
channels: [{name: web, kind: web}]
agents:
  - name: purchasing-bot
    hooks:
      - kind: approval_gate
        name: two-people
        tools: ["oa__purchase_pay"]
        channel: web
        approvals_required: 2
        timeout_seconds: 1800
"""


def test_the_deciding_answer_is_written_with_the_move_and_counted_in_the_notification(agent):
    """A quorum of one: the approver's response, the UPDATE, the event and the NOTIFY in one statement;
    the notification's `approved_by` names the approver, as a read of the tables after the commit does."""
    confirmation = pending(agent)
    listening = Listening()
    try:
        with CaptureQueriesContext(connection) as captured:
            outcome = decide(str(confirmation.pk), "approve", actor="alice")
        heard = listening.heard_until_marker()
    finally:
        listening.close()

    assert outcome.applied and outcome.code == "decided"
    writes = [q["sql"] for q in captured.captured_queries if 'INTO "approvals_approverresponse"' in q["sql"]]
    assert len(writes) == 1 and 'UPDATE "approvals_confirmationrequest" SET' in writes[0]
    told = json.loads(heard[0])
    assert told["approved_by"] == ["web:alice"] and told["signed"]["status"] == "approved"
    with connection.cursor() as cursor:
        cursor.execute(_state_sql(), [[str(confirmation.pk)]])
        assert json.loads(cursor.fetchone()[1]) == told
    assert list(ApproverResponse.objects.filter(confirmation_id=confirmation.pk).values_list("approver", flat=True)) == ["web:alice"]
    assert audit_verify().ok


def test_a_person_who_answered_already_changes_nothing_when_their_second_answer_would_decide(live_gateway):
    """A quorum of two: alice approves (one of two), then rejects — a rejection decides, so it goes in the
    move's statement, and her earlier answer holds it back whole: no second response, no move, no event,
    no notification."""
    apply_config(TWO_PEOPLE)
    agent = make_agent_client(live_gateway, "purchasing-bot")
    try:
        confirmation = pending(agent)
    finally:
        agent.http.close()
    first = decide(str(confirmation.pk), "approve", actor="alice")
    assert first.code == "recorded", first
    events_before = ConfirmationEvent.objects.filter(confirmation_id=confirmation.pk).count()
    listening = Listening()
    try:
        again = decide(str(confirmation.pk), "reject", actor="alice")
        heard = listening.heard_until_marker()
    finally:
        listening.close()

    assert (again.applied, again.code) == (False, "duplicate") and "already answered" in again.message
    assert heard == []
    row = ConfirmationRequest.objects.get(pk=confirmation.pk)
    assert row.status == "pending"
    assert ApproverResponse.objects.filter(confirmation_id=confirmation.pk).count() == 1
    assert ConfirmationEvent.objects.filter(confirmation_id=confirmation.pk).count() == events_before
    assert audit_verify().ok
    # and bob's rejection then decides it, his response and the move in one statement
    assert decide(str(confirmation.pk), "reject", actor="bob").code == "decided"
    assert ConfirmationRequest.objects.get(pk=confirmation.pk).status == "rejected"


def test_a_response_is_never_written_without_its_move(agent):
    """The move carrying a response finds the request decided (as no click under the row lock can): the
    response is not written either — no answer is left behind without the decision it made."""
    confirmation = pending(agent)
    assert approve(confirmation)[0] is True
    response = ApproverResponse(confirmation=confirmation, approver="web:bob", person="web:bob", approver_name="bob",
                                decision="reject", channel="web")  # fmt: skip

    with transaction.atomic():
        locked = ConfirmationRequest.objects.select_related("channel").select_for_update(of=("self",)).get(pk=confirmation.pk)
        won = confirmation_transition(locked.pk, Status.REJECTED, decided_by="web:bob", channel="web", locked=locked,
                                      locked_verifies=True, response=response)  # fmt: skip

    assert won is False and response.pk is None
    assert not ApproverResponse.objects.filter(confirmation_id=confirmation.pk, approver="web:bob").exists()
    assert ConfirmationRequest.objects.get(pk=confirmation.pk).status == "approved"
    assert audit_verify().ok
