"""Celery tasks: thin callers of services. They take ids, never rows."""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import math
import time
from collections.abc import Callable
from typing import Any

from celery import shared_task
from django.conf import settings
from django.utils import timezone

from approvals import selectors, services
from approvals.services.records import DELIVER_OUTBOX_BATCH_TASK, DELIVER_OUTBOX_TASK
from gateway_utils import tick_rest, tracing

logger = logging.getLogger("approvals.tasks")


def _trace_of(request) -> dict[str, str]:
    """The trace context the task was queued in (`services.records.enqueue` puts it in the headers)."""
    return {key: request.get(key) for key in ("traceparent", "tracestate") if isinstance(request.get(key), str)}


@shared_task(name=DELIVER_OUTBOX_TASK, bind=True, max_retries=None, acks_late=True)
def deliver_outbox(self, outbox_id: int) -> None:
    """Send one outbox row (card, redraw, reminder, webhook); transient failures come back later."""
    tick_rest.wake()  # something happens: beat's tick, resting, comes again (a new request's expiry, timers)
    with tracing.attached(_trace_of(self.request)):
        result = services.outbox_deliver(outbox_id=outbox_id)
    if result.retry_in is not None:
        raise self.retry(countdown=result.retry_in)


@shared_task(name=DELIVER_OUTBOX_BATCH_TASK, bind=True, acks_late=True)
def deliver_outbox_batch(self, outbox_ids: list[int]) -> int:
    """Send outbox rows written together, one after another; a row that must wait comes back on its own."""
    tick_rest.wake()
    sent = 0
    trace = _trace_of(self.request)
    for outbox_id in outbox_ids:
        with tracing.attached(trace):
            result = services.outbox_deliver(outbox_id=outbox_id)
        sent += result.sent
        if result.retry_in is not None:
            deliver_outbox.apply_async(args=[outbox_id], countdown=result.retry_in)
    return sent


@dataclasses.dataclass
class TickJob:
    """One piece of the periodic work beat's tick runs, at most once per `every()` seconds per process."""

    name: str
    run: Callable[[], Any]
    every: Callable[[], float]
    last: float = -math.inf


def _relay_outbox() -> int:
    sent = 0
    for outbox_id in services.outbox_due_ids():
        sent += services.outbox_deliver(outbox_id=outbox_id).sent
    return sent


def _timers() -> dict[str, int]:
    return dataclasses.asdict(services.confirmation_timers_due())


TICK_JOBS = [
    TickJob("expire", services.confirmation_expire_due, lambda: 0.0),  # every tick
    TickJob("relay", _relay_outbox, lambda: 5.0),
    TickJob("timers", _timers, lambda: float(settings.GATEWAY_TIMERS_INTERVAL_SECONDS)),
    # A channel's digest goes out within 30 s of its `every_minutes` (docs/policies.md, "Digests").
    TickJob("digests", services.digests_gather, lambda: 30.0),
]


def _nothing_due_in_a_rest() -> bool:
    """Nothing the tick does could fall due before the first tick after a rest beginning now."""
    rest = settings.GATEWAY_TICK_REST_SECONDS + settings.GATEWAY_TICK_SECONDS
    return selectors.nothing_due_before(timezone.now() + dt.timedelta(seconds=rest))


@shared_task
def tick() -> dict[str, Any]:
    """Beat, every GATEWAY_TICK_SECONDS (2 s): the periodic work due, in one task — the expiry sweep, the
    outbox's relay (every 5 s), the timers (every GATEWAY_TIMERS_INTERVAL_SECONDS), the channels' digests
    (every 30 s). One message and one task a tick, where three schedules each sent their own: a gateway at
    rest wakes its worker half as often.

    A job is due once its interval is nearly over (within half a tick), so a 5 s job runs every 4 s at a
    2 s tick, never later than its interval. Each worker process keeps its own clock: with several workers a
    job may run more often than its interval, never less — every job is safe to run twice (conditional
    updates), as it was when two beats ran.

    A tick that leaves nothing due within a rest — no outbox row to send, retry or gather, no pending
    request's deadline or timer before the first tick after it — lets beat skip the ticks of the next
    GATEWAY_TICK_REST_SECONDS (30 s), until a worker's next delivery or a request with a timer within it
    (gateway_utils.tick_rest): a gateway whose requests wait on people, not on clocks, sends itself a task
    every 30 s, not every 2 s."""
    now = time.monotonic()
    slack = settings.GATEWAY_TICK_SECONDS / 2
    done: dict[str, Any] = {}
    failed = False
    for job in TICK_JOBS:
        if now - job.last >= job.every() - slack:
            job.last = now
            try:
                done[job.name] = job.run()
            except Exception:  # one job's failure (the database away a moment) does not skip the others
                logger.exception("beat's tick: %s failed; it runs again at the next tick", job.name)
                job.last = -math.inf
                failed = True
    if not failed and tick_rest.client() is not None and _nothing_due_in_a_rest() and tick_rest.rest():
        # Looked at again once resting: a request made since is seen now, or its delivery or short timer (after
        # its commit, so after this rest began) ends the rest — never hidden behind a rest that began after it.
        if _nothing_due_in_a_rest():
            done["rest"] = settings.GATEWAY_TICK_REST_SECONDS
        else:
            tick_rest.wake()
    return done


# The three tasks the tick replaced, each still callable (by hand, or by a beat of an earlier release still
# running during an upgrade).
@shared_task
def relay_outbox() -> int:
    """Deliver rows left behind (worker died, broker down at commit, retries due)."""
    return _relay_outbox()


@shared_task
def expire_due() -> int:
    """Expire pending requests past their deadline."""
    return services.confirmation_expire_due()


@shared_task
def run_timers() -> dict[str, int]:
    """Send due reminders and escalations; drop expired hook state."""
    return _timers()


@shared_task
def purge_old_records() -> dict[str, int]:
    """Beat, daily when GATEWAY_RETENTION_DAYS is set: `manage.py purge --older-than` that many days."""
    result = services.audit_purge(older_than=dt.timedelta(days=settings.GATEWAY_RETENTION_DAYS))
    return {
        "tool_calls": result.tool_calls_removed,
        "confirmations": result.confirmations_removed,
        "entries": result.entries_removed,
    }


@shared_task
def audit_checkpoint() -> int:
    """Beat, every GATEWAY_AUDIT_CHECKPOINT_SECONDS: record every chain's head outside the database
    (GATEWAY_AUDIT_HEADS_FILE and the log), for `verify_audit --expect-head`."""
    return len(services.audit_checkpoint(path=settings.GATEWAY_AUDIT_HEADS_FILE))
