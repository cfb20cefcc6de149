"""A worker at rest wakes when something is due, not every second (gateway/celery.py, `QuietBrokerTimers`):
kombu's Redis transport schedules, in the worker's event loop, a refresh of expiring queues' bindings every
second; the gateway's worker runs it every 30 s. A real worker (the suite's `celery_worker`, on the test
broker's Redis), its event loop's own timers read."""

from __future__ import annotations

import time

from gateway.celery import QuietBrokerTimers
from tests.support import wait_until


def test_the_workers_event_loop_has_no_timer_firing_every_second(celery_worker):
    hub = celery_worker.hub
    wait_until(lambda: hub.readers, what="the worker's event loop polling the broker")
    cycle = celery_worker.consumer.connection.transport.cycle

    tref = cycle._binding_expiry_tref  # (kombu 5.7's name: the test fails here if it changes, to look again)
    assert not tref.canceled
    scheduled = {id(item.entry): item.eta for item in list(hub.timer.queue)}
    assert id(tref) in scheduled
    # Next due in about BINDING_REFRESH_SECONDS (kombu's own: within a second).
    assert scheduled[id(tref)] - time.monotonic() > QuietBrokerTimers.BINDING_REFRESH_SECONDS - 10
