"""The `approval_gate` kind end to end with the web channel: `when`, quorum, reminders,
escalation, never-expiring gates, timeouts and self-approval.

Timers run as beat runs them (`approvals.tasks.run_timers`, `expire_due`), with
their due times moved into the past by an UPDATE rather than by sleeping.
"""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from approvals import selectors
from approvals.models import ConfirmationEvent, ConfirmationRequest, Outbox, ToolCall
from approvals.tasks import expire_due, run_timers
from tests.conftest import apply_config, decide, make_agent_client
from tests.hooks.policy_support import apply_example, deliver_outbox
from tests.support import rewrite_request

pytestmark = pytest.mark.django_db(transaction=True)

PAST = dt.timedelta(seconds=1)


@pytest.fixture
def payments_bot(live_gateway, transactional_db):
    apply_example("approval_gate")
    return make_agent_client(live_gateway, "payments-bot")


def pay(agent, amount: int, **extra) -> dict:
    return agent.pre_tool_use("pay__transfer", {"amount": amount, "to": "acme"}, **extra).json()


def make_due(confirmation_id: str, **fields: str) -> None:
    """Move a request's timers into the past (e.g. remind_at=..., escalate_at=...)."""
    rewrite_request(confirmation_id, **{name: timezone.now() - PAST for name in fields})


def rows_of(confirmation_id: str, kind: str) -> list[Outbox]:
    return list(Outbox.objects.filter(confirmation_id=confirmation_id, kind=kind).order_by("created_at", "pk"))


def card(confirmation_id: str, channel: str = "web"):
    return selectors.card_view(ConfirmationRequest.objects.get(pk=confirmation_id), channel_name=channel)


# --- when, and one approval ------------------------------------------------------------------


def test_the_example_lets_payments_up_to_fifty_thousand_run_at_once(payments_bot):
    body = pay(payments_bot, 50_000)

    assert (body["decision"], body["hook_decisions"]) == ("allow", [])
    assert ConfirmationRequest.objects.count() == 0


def test_the_example_asks_one_of_finance_above_fifty_thousand(payments_bot):
    before = timezone.now()
    body = pay(payments_bot, 80_000)

    assert (body["decision"], body["reason"]) == ("pending", "pay__transfer needs approval (finance)")
    confirmation = ConfirmationRequest.objects.get(pk=body["confirmation_id"])
    assert (confirmation.hook_name, confirmation.approvals_required) == ("finance", 1)
    assert confirmation.approvers == ["alice", "bob", "carol"]
    assert dt.timedelta(minutes=59) < confirmation.expires_at - before < dt.timedelta(minutes=61)

    assert decide(confirmation.pk, "approve", actor="carol").code == "decided"
    assert payments_bot.wait(body["confirmation_id"]).json()["status"] == "approved"


def test_the_example_denies_a_payment_nobody_decided_within_the_hour(payments_bot):
    body = pay(payments_bot, 80_000, idempotency_key="pay-1")
    make_due(body["confirmation_id"], expires_at="")

    assert expire_due.apply().get() == 1

    assert payments_bot.wait(body["confirmation_id"]).json()["status"] == "expired"
    again = pay(payments_bot, 80_000, idempotency_key="pay-1")  # the agent asks again about the same call
    assert (again["decision"], again["reason"]) == ("deny", "no decision before the deadline (on_timeout: deny)")


# --- quorum ---------------------------------------------------------------------------------


def test_the_example_needs_two_approvals_above_half_a_million_and_the_card_counts_them(payments_bot):
    body = pay(payments_bot, 800_000)

    assert (body["decision"], body["reason"]) == ("pending", "pay__transfer needs 2 approvals (finance-two)")
    assert [d["hook"] for d in body["hook_decisions"]] == ["finance-two", "finance"]  # the first ask wins
    confirmation_id = body["confirmation_id"]
    assert card(confirmation_id).approvals_required == 2

    first = decide(confirmation_id, "approve", actor="alice")
    assert (first.code, first.message) == ("recorded", "Approval recorded (1 of 2).")
    assert card(confirmation_id).approved_by == ("web:alice",)
    assert payments_bot.wait(confirmation_id, timeout=0).json()["status"] == "pending"
    assert decide(confirmation_id, "approve", actor="alice").code == "duplicate"  # one voice each

    assert decide(confirmation_id, "approve", actor="bob").code == "decided"
    final = payments_bot.wait(confirmation_id).json()
    assert (final["status"], final["decided_by"]) == ("approved", "web:bob")
    assert card(confirmation_id).approved_by == ("web:alice", "web:bob")


def test_any_rejection_rejects_a_quorum_request_at_once(payments_bot):
    confirmation_id = pay(payments_bot, 800_000)["confirmation_id"]
    decide(confirmation_id, "approve", actor="alice")

    decide(confirmation_id, "reject", actor="carol", reason="not this quarter")

    final = payments_bot.wait(confirmation_id).json()
    assert (final["status"], final["decided_by"], final["reason"]) == ("rejected", "web:carol", "not this quarter")


def test_someone_outside_the_approvers_cannot_count_towards_the_quorum(payments_bot):
    confirmation_id = pay(payments_bot, 800_000)["confirmation_id"]

    assert decide(confirmation_id, "approve", actor="mallory").code == "not_approver"
    assert card(confirmation_id).approved_by == ()


# --- never expires ------------------------------------------------------------------------------


def test_the_example_never_expires_a_payment_above_half_a_million(payments_bot):
    confirmation_id = pay(payments_bot, 800_000)["confirmation_id"]
    ConfirmationRequest.objects.filter(pk=confirmation_id).update(created_at=timezone.now() - dt.timedelta(days=365))

    assert expire_due.apply().get() == 0

    detail = payments_bot.http.get(f"/api/v1/confirmations/{confirmation_id}").json()
    assert (detail["status"], detail["expires_at"]) == ("pending", None)
    decide(confirmation_id, "approve", actor="alice")
    decide(confirmation_id, "approve", actor="bob")
    assert payments_bot.wait(confirmation_id).json()["status"] == "approved"


# --- reminders ------------------------------------------------------------------------------------


def test_the_example_reminds_the_approvers_once_after_ten_minutes(payments_bot):
    before = timezone.now()
    confirmation_id = pay(payments_bot, 800_000)["confirmation_id"]
    confirmation = ConfirmationRequest.objects.get(pk=confirmation_id)
    assert dt.timedelta(minutes=9) < confirmation.remind_at - before < dt.timedelta(minutes=11)
    deliver_outbox()  # the card is posted
    decide(confirmation_id, "approve", actor="alice")

    assert run_timers.apply().get()["reminded"] == 0  # not yet due
    make_due(confirmation_id, remind_at="")
    assert run_timers.apply().get()["reminded"] == 1
    assert run_timers.apply().get()["reminded"] == 0  # once

    (reminded,) = ConfirmationEvent.objects.filter(confirmation_id=confirmation_id, kind="reminded")
    assert reminded.message == "Reminder: this request is still waiting for your decision. (1 of 2 approvals so far)"
    # The web page draws itself (it lists the reminder among its events): no worker re-pings it.
    assert rows_of(confirmation_id, "remind") == []
    assert ConfirmationRequest.objects.get(pk=confirmation_id).status == "pending"


def test_a_request_decided_before_its_reminder_is_not_reminded(payments_bot):
    confirmation_id = pay(payments_bot, 800_000)["confirmation_id"]
    decide(confirmation_id, "reject", actor="bob")
    make_due(confirmation_id, remind_at="")

    assert run_timers.apply().get()["reminded"] == 0
    assert not Outbox.objects.filter(kind="remind").exists()


def test_a_gate_without_reminders_never_reminds(payments_bot):
    confirmation_id = pay(payments_bot, 80_000)["confirmation_id"]  # gate `finance` has no remind_after_seconds

    assert ConfirmationRequest.objects.get(pk=confirmation_id).remind_at is None
    assert run_timers.apply().get() == {"reminded": 0, "warned": 0, "escalated": 0, "counters_purged": 0}


# --- escalation -------------------------------------------------------------------------------------


def test_the_example_escalates_to_the_on_call_channel_after_thirty_minutes(payments_bot):
    before = timezone.now()
    confirmation_id = pay(payments_bot, 800_000)["confirmation_id"]
    confirmation = ConfirmationRequest.objects.get(pk=confirmation_id)
    assert dt.timedelta(minutes=29) < confirmation.escalate_at - before < dt.timedelta(minutes=31)
    deliver_outbox()
    # Not escalated yet: dave cannot decide from the on-call channel.
    assert decide(confirmation_id, "approve", actor="dave", channel="web-oncall").code == "not_approver"

    make_due(confirmation_id, escalate_at="")
    assert run_timers.apply().get()["escalated"] == 1
    assert run_timers.apply().get()["escalated"] == 0  # once

    # Both cards are web pages, up the moment they are written; neither needs a worker to redraw it.
    assert [(row.channel.name, row.status) for row in rows_of(confirmation_id, "card")] == [
        ("web", "sent"),
        ("web-oncall", "sent"),
    ]
    assert rows_of(confirmation_id, "update") == []
    assert [row.channel.name for row in selectors.posted_cards(confirmation)] == ["web", "web-oncall"]
    assert card(confirmation_id, "web").escalated is True  # the first card is marked escalated
    oncall = card(confirmation_id, "web-oncall")
    assert (oncall.escalated, oncall.approvers) == (False, ("dave",))
    event = ConfirmationEvent.objects.get(confirmation_id=confirmation_id, kind="escalated")
    assert (event.channel, event.message) == (
        "web-oncall",
        "escalated to web-oncall (dave); approvers on web may still decide",
    )


def test_after_escalation_the_on_call_approver_and_the_first_approvers_may_decide_together(payments_bot):
    confirmation_id = pay(payments_bot, 800_000)["confirmation_id"]
    make_due(confirmation_id, escalate_at="")
    run_timers.apply()

    assert decide(confirmation_id, "approve", actor="dave", channel="web-oncall").code == "recorded"
    assert decide(confirmation_id, "approve", actor="alice", channel="web").code == "decided"

    final = payments_bot.wait(confirmation_id).json()
    assert (final["status"], final["decided_by"]) == ("approved", "web:alice")


def test_after_escalation_the_on_call_approver_alone_may_reject(payments_bot):
    confirmation_id = pay(payments_bot, 800_000)["confirmation_id"]
    make_due(confirmation_id, escalate_at="")
    run_timers.apply()

    assert decide(confirmation_id, "approve", actor="alice", channel="web-oncall").code == "not_approver"
    assert decide(confirmation_id, "reject", actor="dave", channel="web-oncall").code == "decided"

    assert payments_bot.wait(confirmation_id).json()["status"] == "rejected"


def test_a_request_decided_before_its_escalation_is_not_escalated(payments_bot):
    confirmation_id = pay(payments_bot, 800_000)["confirmation_id"]
    decide(confirmation_id, "reject", actor="alice")
    make_due(confirmation_id, escalate_at="")

    assert run_timers.apply().get()["escalated"] == 0
    assert ConfirmationRequest.objects.get(pk=confirmation_id).escalated_at is None


# --- self-approval ------------------------------------------------------------------------------------


def test_the_example_refuses_an_approver_approving_their_own_call(payments_bot):
    confirmation_id = pay(payments_bot, 80_000, user_id="alice")["confirmation_id"]

    outcome = decide(confirmation_id, "approve", actor="alice")
    assert (outcome.code, outcome.message) == ("self_approval", "You cannot approve a call made on your own behalf.")

    assert decide(confirmation_id, "approve", actor="bob").code == "decided"
    assert ToolCall.objects.get().user_id == "alice"


def test_allow_self_approval_lets_an_approver_approve_their_own_call(live_gateway, transactional_db):
    apply_config(
        """
channels: [{name: web, kind: web}]
agents:
  - name: solo
    hooks: [{kind: approval_gate, name: me, channel: web, approvers: [alice], allow_self_approval: true}]
"""
    )
    agent = make_agent_client(live_gateway, "solo")
    confirmation_id = agent.pre_tool_use("deploy", {}, user_id="alice").json()["confirmation_id"]

    assert decide(confirmation_id, "approve", actor="alice").code == "decided"
    assert agent.wait(confirmation_id).json()["status"] == "approved"


# --- a warning before the deadline ----------------------------------------------------------------


def test_a_warning_before_the_deadline_pings_the_approvers_once_with_the_time_left(live_gateway, transactional_db):
    apply_config(
        """
channels: [{name: web, kind: web}]
agents:
  - name: bot
    hooks: [{kind: approval_gate, channel: web, approvers: [alice], timeout_seconds: 600, warn_before_seconds: 120}]
"""
    )
    agent = make_agent_client(live_gateway, "bot")
    warned = agent.pre_tool_use("deploy", {}).json()["confirmation_id"]
    decided = agent.pre_tool_use("deploy", {"n": 2}).json()["confirmation_id"]
    confirmation = ConfirmationRequest.objects.get(pk=warned)
    assert confirmation.expires_at - confirmation.warn_at == dt.timedelta(seconds=120)
    decide(decided, "approve")
    assert run_timers.apply().get()["warned"] == 0  # not yet due

    make_due(warned, warn_at="")
    make_due(decided, warn_at="")
    assert run_timers.apply().get()["warned"] == 1  # the decided one is not warned
    assert run_timers.apply().get()["warned"] == 0  # once

    text = ConfirmationEvent.objects.get(confirmation_id=warned, kind="warned").message
    assert text.startswith("Deadline soon: 9 min") and text.endswith("then the agent is told deny.")
    assert not ConfirmationEvent.objects.filter(confirmation_id=decided, kind="warned").exists()
    assert rows_of(warned, "remind") == []  # the web page shows the warning itself
