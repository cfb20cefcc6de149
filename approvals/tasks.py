"""Celery tasks: thin callers of services. They take ids, never rows."""

from __future__ import annotations

import dataclasses
import datetime as dt

from celery import shared_task
from django.conf import settings

from approvals import services
from approvals.services.records import DELIVER_OUTBOX_BATCH_TASK, DELIVER_OUTBOX_TASK
from gateway_utils import tracing


def _trace_of(request) -> dict[str, str]:
    """The trace context the task was queued in (`services.records.enqueue` puts it in the headers)."""
    return {key: request.get(key) for key in ("traceparent", "tracestate") if isinstance(request.get(key), str)}


@shared_task(name=DELIVER_OUTBOX_TASK, bind=True, max_retries=None, acks_late=True)
def deliver_outbox(self, outbox_id: int) -> None:
    """Send one outbox row (card, redraw, reminder, webhook); transient failures come back later."""
    with tracing.attached(_trace_of(self.request)):
        result = services.outbox_deliver(outbox_id=outbox_id)
    if result.retry_in is not None:
        raise self.retry(countdown=result.retry_in)


@shared_task(name=DELIVER_OUTBOX_BATCH_TASK, bind=True, acks_late=True)
def deliver_outbox_batch(self, outbox_ids: list[int]) -> int:
    """Send outbox rows written together, one after another; a row that must wait comes back on its own."""
    sent = 0
    trace = _trace_of(self.request)
    for outbox_id in outbox_ids:
        with tracing.attached(trace):
            result = services.outbox_deliver(outbox_id=outbox_id)
        sent += result.sent
        if result.retry_in is not None:
            deliver_outbox.apply_async(args=[outbox_id], countdown=result.retry_in)
    return sent


@shared_task
def relay_outbox() -> int:
    """Beat: deliver rows left behind (worker died, broker down at commit, retries due)."""
    sent = 0
    for outbox_id in services.outbox_due_ids():
        sent += services.outbox_deliver(outbox_id=outbox_id).sent
    return sent


@shared_task
def expire_due() -> int:
    """Beat, every ~2 s: expire pending requests past their deadline."""
    return services.confirmation_expire_due()


@shared_task
def run_timers() -> dict[str, int]:
    """Beat, every ~5 s: send due reminders and escalations; drop expired hook state."""
    return dataclasses.asdict(services.confirmation_timers_due())


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


@shared_task
def gather_digests() -> int:
    """Beat, every 30 s: each channel's due held cards gathered into digests
    (docs/policies.md, "Risk"); `services.digests_gather` is the plain function, for a tick that does more."""
    return services.digests_gather()
