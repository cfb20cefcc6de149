"""Beat's one task, `approvals.tasks.tick` (docs/operating.md, "Processes"): every tick it sweeps the expired
requests; the outbox's relay and the timers run when their own intervals are (nearly) over — one task a
tick instead of three schedules. Run as beat runs it (the task applied), due times moved into the past by
an UPDATE rather than by sleeping."""

from __future__ import annotations

import datetime as dt

import pytest
from django.conf import settings
from django.utils import timezone

from approvals import tasks
from approvals.models import ConfirmationEvent, ConfirmationRequest, Outbox, OutboxStatus
from tests.conftest import make_agent_client
from tests.hooks.policy_support import apply_example
from tests.support import rewrite_request

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def payments_bot(live_gateway, transactional_db):
    apply_example("approval_gate")
    return make_agent_client(live_gateway, "payments-bot")


@pytest.fixture
def fresh_clock(monkeypatch):
    """The tick's jobs as a worker process that never ran one finds them."""
    for job in tasks.TICK_JOBS:
        monkeypatch.setattr(job, "last", float("-inf"))


def pay(agent, amount: int) -> str:
    return agent.pre_tool_use("pay__transfer", {"amount": amount, "to": "acme"}).json()["confirmation_id"]


def test_beat_sends_one_task_every_two_seconds_for_the_frequent_work():
    frequent = {name: entry for name, entry in settings.CELERY_BEAT_SCHEDULE.items() if entry["schedule"] < 60}
    assert frequent == {"gateway-tick": {"task": "approvals.tasks.tick", "schedule": 2.0}}


def test_one_tick_expires_relays_and_reminds_and_the_next_only_expires(payments_bot, fresh_clock):
    late, reminded = pay(payments_bot, 80_000), pay(payments_bot, 800_000)
    past = timezone.now() - dt.timedelta(seconds=1)
    rewrite_request(late, expires_at=past)
    rewrite_request(reminded, remind_at=past)
    # A card no worker took (the broker was down at the commit): the relay's to send.
    Outbox.objects.filter(confirmation_id=reminded, kind="card").update(
        status=OutboxStatus.PENDING, attempts=0, created_at=past - dt.timedelta(minutes=5)
    )

    done = tasks.tick.apply().get()

    assert set(done) == {"expire", "relay", "timers", "digests"}
    assert done["expire"] == 1 and ConfirmationRequest.objects.get(pk=late).status == "expired"
    assert done["timers"]["reminded"] == 1
    assert ConfirmationEvent.objects.filter(confirmation_id=reminded, kind="reminded").count() == 1
    assert not Outbox.objects.filter(confirmation_id=reminded, kind="card", status=OutboxStatus.PENDING).exists()

    # The next tick, 2 s later as beat sends it: the sweep again, the relay and the timers not yet (5 s).
    another = pay(payments_bot, 80_000)
    rewrite_request(another, expires_at=past)
    assert tasks.tick.apply().get() == {"expire": 1}
    assert ConfirmationRequest.objects.get(pk=another).status == "expired"

