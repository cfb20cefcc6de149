"""A woken waiter answers from the state its notification carries only if the request's `decision_mac`
signs it (docs/waiting.md, "The notification"): checked through json's own text of the signed fields
first, the canonical text where that is not the one signed. Anyone with database access can NOTIFY:
an altered state is never believed. A notification of the older shape (the signed fields repeated
beside `signed`) reads the same.

Real PostgreSQL NOTIFY, the live gateway over HTTP on loopback, a long-poll parked before each
notification."""

from __future__ import annotations

import json
import threading

import pytest
from django.db import connection, transaction
from django.utils import timezone

from approvals.audit import decision_mac
from approvals.models import ConfirmationRequest, Status
from approvals.selectors import UNVERIFIED_REASON
from approvals.services.records import _state_sql
from gateway_utils import realtime
from tests.conftest import AgentClient, decide
from tests.support import parked, wait_until

pytestmark = pytest.mark.django_db(transaction=True)


def payload_of(confirmation_id: str) -> dict:
    """The notification the gateway would send for the row as it is now, as its listener parses it."""
    with connection.cursor() as cursor:
        cursor.execute(_state_sql(), [[confirmation_id]])
        return json.loads(cursor.fetchone()[1])


def notify(payload: dict) -> None:
    """A NOTIFY as anyone with database access can send one."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_notify(%s, %s)", [realtime.CHANNEL, json.dumps(payload)])


class LongPoll:
    """The agent's long-poll, parked on the live gateway before anything is sent."""

    def __init__(self, agent: AgentClient, confirmation_id: str) -> None:
        self.answer: dict = {}
        self.thread = threading.Thread(target=lambda: self.answer.update(agent.wait(confirmation_id, timeout=30).json()))
        self.thread.start()
        wait_until(lambda: parked(confirmation_id), what="the long-poll parked")

    def result(self) -> dict:
        self.thread.join(40)
        assert not self.thread.is_alive(), "the long-poll was never answered"
        return self.answer


def ask(agent: AgentClient, args: dict) -> str:
    answer = agent.pre_tool_use("oa__purchase_pay", args).json()
    assert answer["decision"] == "pending", answer
    return answer["confirmation_id"]


def approve_without_notifying(confirmation_id: str) -> None:
    """The row approved and signed as the gateway signs it, but no notification sent: what the waiter is
    told then comes only from the NOTIFY the test sends."""
    row = ConfirmationRequest.objects.get(pk=confirmation_id)
    row.status, row.decided_by, row.decided_at = Status.APPROVED, "web:alice", timezone.now()
    row.decision_mac = decision_mac(ConfirmationRequest, row)
    with transaction.atomic():
        ConfirmationRequest.objects.filter(pk=confirmation_id).update(
            status=row.status, decided_by=row.decided_by, decided_at=row.decided_at, decision_mac=row.decision_mac
        )


@pytest.mark.parametrize(
    "altered",
    [
        {"status": "approved", "decided_by": "web:alice"},
        {"status": "approved", "decided_by": "web:alice", "approved_args": {"amount": 1}, "arg_edits": {"amount": 1}},
        {"tool_args": {"amount": 50}},
    ],
    ids=["approved", "approved-with-other-args", "other-args"],
)
def test_a_notification_altered_by_someone_with_database_access_is_not_believed(agent, altered):
    confirmation_id = ask(agent, {"amount": 5})
    waiting = LongPoll(agent, confirmation_id)
    forged = payload_of(confirmation_id)  # the real state and its real MAC…
    forged["signed"].update(altered, decided_at=timezone.now().isoformat())  # …with the state changed
    notify(forged)
    answer = waiting.result()
    assert (answer["status"], answer["reason"], answer["decided_by"]) == ("rejected", UNVERIFIED_REASON, "gateway")
    assert answer["approved_args"] is None
    assert ConfirmationRequest.objects.get(pk=confirmation_id).status == Status.PENDING


def test_a_decision_whose_one_call_text_is_not_the_signed_text_is_believed(agent):
    """`100` is `1E+2` and `2.0` is `2` in the signed text, `é` is `\\u00e9`, and orjson writes no integer
    past 64 bits: the one-call text is not the one signed, and the state is checked through the canonical
    text instead (and answered through `json.dumps`)."""
    args = {"amount": 100, "rate": 2.0, "fee": 0.25, "note": "é 10, [20]", "big": 2**70 + 1}
    confirmation_id = ask(agent, args)
    waiting = LongPoll(agent, confirmation_id)
    decide(confirmation_id, "approve")
    answer = waiting.result()
    assert (answer["status"], answer["decided_by"]) == ("approved", "web:alice"), answer
    assert answer["tool_args"] == args


def test_a_decision_is_answered_from_its_notification(agent):
    confirmation_id = ask(agent, {"amount": 7})
    waiting = LongPoll(agent, confirmation_id)
    approve_without_notifying(confirmation_id)
    told = payload_of(confirmation_id)
    told["decided_by_name"] = "Alice (from the notification)"  # (not signed: shows where the answer came from)
    notify(told)
    answer = waiting.result()
    assert (answer["status"], answer["decided_by_name"]) == ("approved", "Alice (from the notification)"), answer


def test_a_notification_of_the_older_shape_is_read_the_same(agent):
    """Until 0.4 the signed fields were repeated beside `signed`; during an upgrade an older process's
    notification reaches a newer one's waiters, and the other way round (the older reader merges `signed`
    over the rest, and needs nothing else beside it)."""
    confirmation_id = ask(agent, {"amount": 8})
    waiting = LongPoll(agent, confirmation_id)
    approve_without_notifying(confirmation_id)
    told = payload_of(confirmation_id)
    assert set(told) == {"id", "decided_by_name", "signed", "approved_by"}  # what this version sends
    signed = {k: v for k, v in told["signed"].items() if k != "decision_mac"}
    older = {**signed, **told, "decided_by_name": "Alice (older shape)"}
    notify(older)
    answer = waiting.result()
    assert (answer["status"], answer["decided_by_name"]) == ("approved", "Alice (older shape)"), answer


def test_a_state_made_from_a_notification_is_the_dataclass_s_own():
    """`from_payload` makes the frozen dataclass without its `__init__`: the same value, every field set."""
    import dataclasses

    from approvals.types import ConfirmationState

    data = {
        "id": "c1", "decided_by_name": "Alice", "approved_by": ["web:alice"],
        "signed": {
            "id": "c1", "agent_id": 3, "status": "approved", "tool_name": "pay", "tool_args": {"amount": 5},
            "reason": "r", "decision_reason": "ok", "decided_by": "web:alice", "decided_at": "2026-11-29T12:00:00+00:00",
            "expires_at": None, "on_timeout": "deny", "approvals_required": 1, "arg_edits": {}, "approved_args": None,
            "kind": "confirmation", "answer": None, "default_answer": None, "risk": "high",
        },
    }  # fmt: skip
    state = ConfirmationState.from_payload(data, verified=True)
    import datetime as dt

    expected = ConfirmationState(
        id="c1", agent_id=3, status="approved", tool_name="pay", tool_args={"amount": 5}, reason="r",
        decision_reason="ok", decided_by="web:alice", decided_at=dt.datetime(2026, 11, 29, 12, tzinfo=dt.timezone.utc),
        expires_at=None, on_timeout="deny", approvals_required=1, approved_by=("web:alice",), decided_by_name="Alice",
        risk="high",
    )  # fmt: skip
    assert state == expected
    assert {f.name: getattr(state, f.name) for f in dataclasses.fields(state)} == dataclasses.asdict(expected)
    assert dataclasses.replace(state, status="rejected").status == "rejected"
    with pytest.raises(dataclasses.FrozenInstanceError):
        state.status = "rejected"  # type: ignore[misc]
    with pytest.raises(TypeError):
        ConfirmationState._of(id="c1")


def test_another_requests_genuine_approval_sent_under_this_ones_id_is_not_believed(agent):
    """Someone with database access can read any decided row's signed state (or LISTEN for its
    notification) and send it again, naming a pending request of the same agent: the state verifies —
    it is another request's, really approved — but it is not this request's, and the waiting agent is
    not answered with it; the pending request stays pending."""
    approved_id = ask(agent, {"amount": 5})
    decide(approved_id, "approve")
    replayed = payload_of(approved_id)  # a real approval, its MAC genuine
    pending_id = ask(agent, {"amount": 9000})
    waiting = LongPoll(agent, pending_id)

    notify({**replayed, "id": pending_id})

    # Notifications arrive in the order sent: had the replay been believed, the agent would have been
    # answered `approved` by it, before the real decision below.
    assert ConfirmationRequest.objects.get(pk=pending_id).status == Status.PENDING
    decide(pending_id, "reject")
    answer = waiting.result()
    assert (answer["id"], answer["status"]) == (pending_id, "rejected"), answer


def test_each_payload_is_built_once_per_notification(agent):
    """The notification's SELECT measures each payload (does it fit?) and sends it: PostgreSQL folds a
    plain subquery into the outer one and builds the JSON twice — who approved so far read twice per
    request — unless it is kept apart (`realtime.notify_select`)."""
    ids = [ask(agent, {"amount": n}) for n in range(3)]
    with connection.cursor() as cursor:
        cursor.execute(
            "EXPLAIN (FORMAT JSON) " + realtime.notify_select(_state_sql()), [realtime.CHANNEL + "_plan", ids]
        )
        plan = cursor.fetchone()[0]

    def scans(node: dict) -> list[str]:
        found = [node["Relation Name"]] if "Relation Name" in node else []
        return found + [name for child in node.get("Plans", ()) for name in scans(child)]

    relations = scans(plan[0]["Plan"])
    assert relations.count("approvals_confirmationrequest") == 1, relations
    assert relations.count("approvals_approverresponse") == 1, relations
