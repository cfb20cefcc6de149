"""Racing approve / reject / expire / cancel on one request, with real threads
against the real PostgreSQL: exactly one terminal state and one decision event."""

from __future__ import annotations

import random
import threading

import pytest
from django.db import connection, transaction
from django.utils import timezone

from approvals import services
from approvals.errors import AlreadyDecided
from approvals.models import Agent, ConfirmationEvent, ConfirmationRequest, Outbox
from gateway_contract import Callback
from tests.conftest import apply_config
from tests.support import rewrite_request, wait_until

pytestmark = pytest.mark.django_db(transaction=True)

TERMINAL_EVENTS = ["approved", "rejected", "expired", "cancelled"]

# The card goes to Slack (the fake server's, when a test delivers it): a channel whose cards are
# posted and redrawn through the outbox; the clicks come from there too.
CONFIG = """
channels:
  - {name: web, kind: web}
  - {name: ops, kind: slack, bot_token: xoxb-1-2-races, signing_secret: races-secret, channel_id: C0RACES,
     api_base_url: "%s"}
agents:
  - name: racer
    hooks: [{kind: approval_gate, channel: ops, approvers: [], timeout_seconds: 600}]
"""
UNREACHED = "http://127.0.0.1:9/api/"  # no worker runs in these tests: nothing is ever sent there


def new_request(agent: Agent) -> str:
    answer = services.tool_call_pre(agent=agent, session_id="s", tool_name="pay", tool_args={"n": 1})
    return answer.confirmation_id


def contenders(agent: Agent, confirmation_id: str):
    def click(decision: str, actor: str):
        return lambda: services.confirmation_respond(
            channel_name="ops", callback=Callback(confirmation_id=confirmation_id, decision=decision, actor=actor)
        )

    def expire():
        # make it due, then race the sweep and the waiter's own expiry against the clicks
        rewrite_request(confirmation_id, expires_at=timezone.now())
        services.confirmation_expire_due()
        services.confirmation_expire(confirmation_id=confirmation_id)

    def cancel():
        try:
            services.confirmation_cancel(agent=agent, confirmation_id=confirmation_id)
        except AlreadyDecided:
            pass

    return [click("approve", "alice"), click("reject", "bob"), click("approve", "carol"), expire, cancel]


def run_together(functions) -> list[BaseException]:
    barrier = threading.Barrier(len(functions))
    errors: list[BaseException] = []

    def runner(fn):
        try:
            barrier.wait()
            fn()
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=runner, args=(fn,)) for fn in functions]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors


def test_racing_every_transition_leaves_exactly_one_decision():
    apply_config(CONFIG % UNREACHED)
    agent = Agent.objects.get(name="racer")
    rng = random.Random(7)
    outcomes = set()

    for _ in range(60):
        confirmation_id = new_request(agent)
        functions = contenders(agent, confirmation_id)
        rng.shuffle(functions)

        errors = run_together(functions)

        assert errors == []
        confirmation = ConfirmationRequest.objects.get(pk=confirmation_id)
        assert confirmation.status in TERMINAL_EVENTS
        terminal = ConfirmationEvent.objects.filter(confirmation_id=confirmation_id, kind__in=TERMINAL_EVENTS)
        assert list(terminal.values_list("kind", flat=True)) == [confirmation.status]
        state_redraws = Outbox.objects.filter(confirmation_id=confirmation_id, kind="update").exclude(
            dedupe_key__contains=":update:after-card-"  # a card posted mid-race is redrawn once more
        )
        assert [row.dedupe_key.rsplit(":", 1)[1] for row in state_redraws] == [confirmation.status]
        outcomes.add(confirmation.status)

    assert len(outcomes) >= 2  # the race really was a race
    assert outcomes & {"approved", "rejected"}  # and the clicks took part in it (they were not refused)


def test_concurrent_approvals_toward_a_quorum_count_each_approver_once():
    apply_config(
        """
channels: [{name: web, kind: web}]
agents:
  - name: quorum
    hooks: [{kind: approval_gate, channel: web, approvers: [a, b, c, d], approvals_required: 2}]
"""
    )
    agent = Agent.objects.get(name="quorum")
    for _ in range(20):
        confirmation_id = new_request(agent)
        clicks = [
            (lambda who=who: services.confirmation_respond(
                channel_name="web", callback=Callback(confirmation_id=confirmation_id, decision="approve", actor=who)
            ))
            for who in ["a", "a", "b", "c", "d"]
        ]

        assert run_together(clicks) == []

        confirmation = ConfirmationRequest.objects.get(pk=confirmation_id)
        assert confirmation.status == "approved"
        assert ConfirmationEvent.objects.filter(confirmation_id=confirmation_id, kind="approved").count() == 1
        approvers = list(confirmation.responses.values_list("approver", flat=True))
        assert len(approvers) == 2  # the quorum, and nothing after the decision
        assert len(set(approvers)) == 2  # the double click of "a" counted once at most



def test_a_card_delivery_holding_its_request_never_deadlocks_with_a_writer_holding_the_audit_head(
    transactional_db, fake_slack
):
    """A card delivery locks its request, then waits for the agent's audit head; a transaction that
    holds the head (it wrote an event) and then writes a row about that request — deciding a call of a
    turn writes an outbox row for the turn's card on the lead request — must not wait for the delivery."""
    apply_config(CONFIG % fake_slack.base_url)
    agent = Agent.objects.get(name="racer")
    lead, other = new_request(agent), new_request(agent)
    card = Outbox.objects.get(confirmation_id=lead, kind="card")
    head_held, done = threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def writer() -> None:
        try:
            with transaction.atomic():
                services.event_record(other, "reminded", actor="test")  # the head is ours until commit
                head_held.set()
                wait_until(delivery_waits_for_a_lock, what="the delivery to wait for the head")
                services.outbox_add(lead, "update", dedupe_key=f"{lead}:update:joined")  # refers to the lead
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            connection.close()
            done.set()

    def deliver() -> None:
        try:
            head_held.wait()
            services.outbox_deliver(outbox_id=card.pk)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=writer), threading.Thread(target=deliver)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    assert not errors, errors  # PostgreSQL reports a deadlock as an error in one of them
    assert Outbox.objects.get(pk=card.pk).status == "sent"
    assert Outbox.objects.filter(dedupe_key=f"{lead}:update:joined").exists()
    assert ConfirmationEvent.objects.filter(confirmation_id=lead, kind="card_posted").count() == 1


def delivery_waits_for_a_lock() -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_clear_snapshot()")  # inside a transaction the view is a snapshot
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'"
            " AND pid <> pg_backend_pid()"
        )
        return cursor.fetchone()[0] > 0
