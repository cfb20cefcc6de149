"""Beat's scheduler (`celery -A gateway beat`; CELERY_BEAT_SCHEDULER): Celery's own, persisting its
schedule to the same file, except that the tick (`approvals.tasks.tick`) is not sent while the last one
left the gateway at rest (gateway_utils.tick_rest). Beat still wakes every tick to ask — one PTTL to the
broker's Redis —, so a worker's delivery ends the rest within one tick."""

from __future__ import annotations

from celery.beat import PersistentScheduler, ScheduleEntry
from django.conf import settings

from gateway_utils import tick_rest

TICK_TASK = "approvals.tasks.tick"


class Scheduler(PersistentScheduler):
    """Celery's `PersistentScheduler`, which skips the tick while it rests."""

    def is_due(self, entry: ScheduleEntry) -> tuple[bool, float]:
        due, next_in = super().is_due(entry)
        if due and entry.task == TICK_TASK and tick_rest.resting():
            # Skipped, not sent: `last_run_at` stays, so the tick is due again at the next wake, one tick later.
            return False, float(settings.GATEWAY_TICK_SECONDS)
        return due, next_in
