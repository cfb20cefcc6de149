"""Beat's tick at rest (gateway_utils.tick_rest, gateway/beat.py): a tick that leaves nothing pending lets
beat skip the next ticks; a worker's delivery brings them back within a tick, and a request that queues
no delivery is seen once the rest lapses (GATEWAY_TICK_REST_SECONDS). Run with Celery's own beat service
and a real worker on the test broker; every wait is for a condition."""

from __future__ import annotations

import datetime as dt
import threading

import pytest
from celery.beat import Service
from django.utils import timezone

from approvals import tasks
from approvals.models import ConfirmationRequest
from approvals.types import SYSTEM_ACTOR
from gateway.beat import Scheduler
from gateway.celery import app
from gateway_utils import tick_rest
from tests.approvals.test_outbox_and_commands import SLACK_GATE
from tests.conftest import WEB_GATE_CONFIG, apply_config, make_agent_client
from tests.support import InThread, rewrite_request, wait_until

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def awake(settings):
    """Resting as in production (tests/settings.py turns it off elsewhere); no rest left over from another
    test (the key lives in this test run's broker database)."""
    settings.GATEWAY_TICK_REST_SECONDS = 10
    tick_rest.wake()
    yield
    tick_rest.wake()


@pytest.fixture
def fresh_clock(monkeypatch):
    for job in tasks.TICK_JOBS:
        monkeypatch.setattr(job, "last", float("-inf"))


@pytest.fixture
def long_rest(settings):
    """A rest far longer than a test may wait: only a delivery can end it in time."""
    settings.GATEWAY_TICK_REST_SECONDS = 600


@pytest.fixture
def short_rest(settings):
    settings.GATEWAY_TICK_REST_SECONDS = 1


@pytest.fixture
def beat(tmp_path, celery_worker):
    """Celery beat, as `celery -A gateway beat` runs it (our scheduler), in a thread, beside a real worker."""
    service = Service(app, schedule_filename=str(tmp_path / "celerybeat-schedule"), scheduler_cls=Scheduler)
    thread = threading.Thread(target=service.start, daemon=True)
    thread.start()
    yield service
    service.stop()
    tick_rest.wake()  # (a beat resting in Redis notices the stop when its wait ends: a signal ends it at once)
    thread.join(timeout=10)
    assert not thread.is_alive()


def test_a_tick_that_leaves_nothing_due_lets_beat_skip_the_next_ticks(tmp_path, fresh_clock, settings):
    assert tasks.tick.apply().get()["rest"] == settings.GATEWAY_TICK_REST_SECONDS
    assert 0 < tick_rest.resting() <= settings.GATEWAY_TICK_REST_SECONDS

    scheduler = Scheduler(app=app, schedule_filename=str(tmp_path / "celerybeat-schedule"))
    try:
        entry = scheduler.schedule["gateway-tick"]
        entry.last_run_at = entry.default_now() - dt.timedelta(minutes=1)
        # Due by its own clock, yet not sent: asked again when the rest lapses.
        assert entry.is_due()[0]
        due, next_in = scheduler.is_due(entry)
        assert not due and 0 < next_in <= settings.GATEWAY_TICK_REST_SECONDS
        tick_rest.wake()
        assert scheduler.is_due(entry)[0]
    finally:
        scheduler.close()


def test_a_pending_request_due_within_a_rest_keeps_the_ticks_coming_and_one_due_later_does_not(
    live_gateway, fresh_clock
):
    """A web request (no delivery keeps anything awake) due in 30 minutes: the ticks after a rest see it in
    time, so the tick rests; brought within the rest (its deadline, then each timer in turn), it keeps them."""
    apply_config(WEB_GATE_CONFIG)  # timeout_seconds: 1800
    agent = make_agent_client(live_gateway, "purchasing-bot")
    confirmation_id = agent.pre_tool_use("oa__purchase_pay", {"amount": 1}).json()["confirmation_id"]

    assert tasks.tick.apply().get()["rest"] == 10
    tick_rest.wake()

    soon = timezone.now() + dt.timedelta(seconds=5)
    later = timezone.now() + dt.timedelta(hours=1)
    for timers in (
        {"expires_at": soon},
        {"expires_at": later, "remind_at": soon},
        {"expires_at": later, "warn_at": soon},
        {"expires_at": later, "escalate_at": soon},
    ):
        ConfirmationRequest.objects.filter(pk=confirmation_id).update(
            **{"remind_at": None, "warn_at": None, "escalate_at": None, **timers}
        )
        assert "rest" not in tasks.tick.apply().get(), timers
        assert tick_rest.resting() == 0

    # An escalation already made is no timer any more.
    ConfirmationRequest.objects.filter(pk=confirmation_id).update(escalated_at=timezone.now())
    assert tasks.tick.apply().get()["rest"] == 10
    agent.http.close()


def _beat_waiting_in_redis() -> bool:
    """Whether a client of the broker's database is blocked in BLPOP (beat's `tick_rest.wait`: the worker's
    own wait for tasks is a BRPOP)."""
    redis_client = tick_rest.client()
    db = redis_client.connection_pool.connection_kwargs.get("db", 0)
    return any(c.get("cmd") == "blpop" and int(c.get("db", -1)) == db for c in redis_client.client_list())


def test_beat_resting_sleeps_in_redis_until_a_wake_and_then_sends_the_tick(fresh_clock, long_rest, beat):
    """Resting, beat does not wake every tick to ask: it waits in one BLPOP, which `wake` (a delivery) ends;
    the tick it then sends finds nothing due and rests again."""
    assert tasks.tick.apply().get()["rest"] == 600
    wait_until(_beat_waiting_in_redis, what="beat waiting in Redis for the rest's end")

    tick_rest.wake()
    assert tick_rest.resting() == 0
    # Beat's tick, sent at the wake and run by the worker, found the gateway at rest again.
    wait_until(lambda: tick_rest.resting() > 0, what="the tick sent by beat once woken")
    wait_until(_beat_waiting_in_redis, what="beat waiting again")


def test_the_wait_returns_without_redis_and_never_blocks_for_ever(settings):
    """A wait shorter than Redis can time (it reads under 1 ms as "for ever") is a sleep; a broker that cannot
    be reached costs beat a tick's sleep, never an error: it then asks `resting`, which sends the tick."""
    assert InThread(tick_rest.wait, 0.0004).result(timeout=5) is False

    settings.CELERY_BROKER_URL = "redis://127.0.0.1:1/0"  # (loopback, nothing listening)
    settings.GATEWAY_TICK_SECONDS = 0.05
    assert tick_rest.wait(5) is False
    assert tick_rest.resting() == 0


def test_without_a_redis_broker_the_tick_never_rests(fresh_clock, settings):
    settings.CELERY_BROKER_URL = "sqla+sqlite:///unused.sqlite3"
    assert "rest" not in tasks.tick.apply().get()
    settings.GATEWAY_TICK_REST_SECONDS = 0
    assert tick_rest.client() is None and tick_rest.resting() == 0


def test_a_card_posted_while_the_tick_rests_brings_it_back_and_the_request_expires_and_is_redrawn(
    live_gateway, fake_slack, fresh_clock, long_rest, beat
):
    apply_config(SLACK_GATE % fake_slack.base_url)
    assert tasks.tick.apply().get()["rest"] == 600

    agent = make_agent_client(live_gateway, "purchasing-bot")
    confirmation_id = agent.pre_tool_use("oa__purchase_pay", {"amount": 3}).json()["confirmation_id"]
    wait_until(lambda: fake_slack.calls("chat.postMessage"), what="the card posted by the worker")
    assert tick_rest.resting() == 0

    rewrite_request(confirmation_id, expires_at=timezone.now() - dt.timedelta(seconds=1))
    # Beat's next tick (within GATEWAY_TICK_SECONDS) sweeps it, and the worker redraws its card.
    wait_until(lambda: ConfirmationRequest.objects.get(pk=confirmation_id).status == "expired", timeout=15)
    wait_until(lambda: fake_slack.calls("chat.update"), what="the expired card redrawn")
    agent.http.close()


def test_a_request_that_queues_no_delivery_is_swept_once_the_rest_lapses(live_gateway, fresh_clock, short_rest, beat):
    """A web card is the gateway's own page: nothing is delivered, so only the rest's end brings the tick."""
    apply_config(WEB_GATE_CONFIG)
    assert tasks.tick.apply().get()["rest"] == 1

    agent = make_agent_client(live_gateway, "purchasing-bot")
    confirmation_id = agent.pre_tool_use("oa__purchase_pay", {"amount": 1}).json()["confirmation_id"]
    rewrite_request(confirmation_id, expires_at=timezone.now() - dt.timedelta(seconds=1))

    # By beat's first tick after the rest (1 s here): GATEWAY_TICK_REST_SECONDS + GATEWAY_TICK_SECONDS at most.
    wait_until(lambda: ConfirmationRequest.objects.get(pk=confirmation_id).status == "expired", timeout=15)
    assert ConfirmationRequest.objects.get(pk=confirmation_id).decided_by == SYSTEM_ACTOR
    agent.http.close()


def test_an_outbox_row_still_to_send_keeps_the_ticks_coming_for_the_relay(live_gateway, fake_slack, fresh_clock):
    """No request pending any more, but its redraw is still to be sent (no worker runs here): the relay's."""
    apply_config(SLACK_GATE % fake_slack.base_url)
    agent = make_agent_client(live_gateway, "purchasing-bot")
    confirmation_id = agent.pre_tool_use("oa__purchase_pay", {"amount": 3}).json()["confirmation_id"]
    rewrite_request(confirmation_id, expires_at=timezone.now() - dt.timedelta(seconds=1))

    done = tasks.tick.apply().get()

    assert done["expire"] == 1 and "rest" not in done
    assert not ConfirmationRequest.objects.filter(status="pending").exists()
    assert tick_rest.resting() == 0
    agent.http.close()


SHORT_DEADLINE_CONFIG = """
channels:
  - {name: web, kind: web}
agents:
  - name: purchasing-bot
    hooks:
      - {kind: approval_gate, name: quick-gate, tools: ["oa__quick"], channel: web, approvers: [alice], timeout_seconds: 2}
      - {kind: approval_gate, name: slow-gate, tools: ["oa__slow"], channel: web, approvers: [alice], timeout_seconds: 3600}
"""


def test_a_deadline_due_within_the_rest_ends_it_and_the_request_is_swept_on_time(
    live_gateway, fresh_clock, long_rest, beat
):
    """A web card queues no delivery; its 2 s deadline falls inside a 600 s rest: its commit ends the rest,
    so beat's sweep expires it (nobody waits on it) within a tick of its deadline, not after the rest."""
    apply_config(SHORT_DEADLINE_CONFIG)
    agent = make_agent_client(live_gateway, "purchasing-bot")
    assert tasks.tick.apply().get()["rest"] == 600

    slow = agent.pre_tool_use("oa__slow", {"amount": 1}).json()["confirmation_id"]
    assert tick_rest.resting() > 0  # an hour away: the ticks after the rest see it in time
    ConfirmationRequest.objects.filter(pk=slow).update(status="cancelled")  # (out of the sweep's way)
    tasks.tick.apply().get()
    assert tick_rest.resting() > 0

    quick = agent.pre_tool_use("oa__quick", {"amount": 1}).json()["confirmation_id"]
    assert tick_rest.resting() == 0
    wait_until(lambda: ConfirmationRequest.objects.get(pk=quick).status == "expired", timeout=15)
    assert ConfirmationRequest.objects.get(pk=quick).decided_by == SYSTEM_ACTOR
    agent.http.close()


def test_a_rest_longer_than_the_setting_or_without_an_expiry_holds_nothing_back(settings):
    """A key left by a longer GATEWAY_TICK_REST_SECONDS, or set by hand without an expiry, is no rest: beat
    is never held back longer than one rest of the current setting."""
    redis_client = tick_rest.client()
    redis_client.set(tick_rest.KEY, "1", px=600_000)
    assert tick_rest.resting() == 0
    redis_client.set(tick_rest.KEY, "1")
    assert tick_rest.resting() == 0
    redis_client.set(tick_rest.KEY, "1", px=5_000)
    assert 0 < tick_rest.resting() <= 5
