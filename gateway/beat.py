"""Beat's scheduler (`celery -A gateway beat`; CELERY_BEAT_SCHEDULER): Celery's own, persisting its
schedule to the same file, except that the tick (`approvals.tasks.tick`) is not sent while the last one
left the gateway at rest (gateway_utils.tick_rest), and that beat, resting, sleeps in Redis rather than
in `time.sleep`: it wakes when the rest lapses or a delivery ends it (`tick_rest.wake`), and then sends the
tick at once — not every tick to ask. A stop (SIGTERM, Ctrl-C) that comes while a task is being sent is
handled once it is sent."""

from __future__ import annotations

import signal
import threading
import time
from typing import Any

from celery.beat import PersistentScheduler, ScheduleEntry

from gateway_utils import tick_rest

TICK_TASK = "approvals.tasks.tick"
_STOPS = {signal.SIGTERM, signal.SIGINT}


class Scheduler(PersistentScheduler):
    """Celery's `PersistentScheduler`, which skips the tick while it rests and waits for the rest's end."""

    _rest_until = 0.0  # (monotonic) when the rest that held the tick back lapses; 0: not resting

    def is_due(self, entry: ScheduleEntry) -> tuple[bool, float]:
        due, next_in = super().is_due(entry)
        if due and entry.task == TICK_TASK:
            left = tick_rest.resting()
            if left > 0:
                # Skipped, not sent: `last_run_at` stays, so the tick is due again when the rest lapses.
                self._rest_until = time.monotonic() + left
                return False, left
            self._rest_until = 0.0
        return due, next_in

    def tick(self, *args: Any, **kwargs: Any) -> float:
        """Celery's tick; a sleep it asks for while the tick rests is taken here, in `tick_rest.wait`, so that
        a wake ends it. Woken, every entry is placed anew (the tick, due since the rest began, first)."""
        interval = super().tick(*args, **kwargs)
        if interval and interval > 0 and time.monotonic() < self._rest_until:
            if tick_rest.wait(min(interval, self._rest_until - time.monotonic())):
                self._rest_until = 0.0
                self._heap = None  # (Celery's own cue to rebuild the heap from the schedule: see `tick`)
            return 0
        return interval

    def apply_async(self, entry: ScheduleEntry, producer: Any = None, advance: bool = True, **kwargs: Any) -> Any:
        """Celery's, with SIGTERM and SIGINT held until the message is sent. Beat's handler of either (Celery's
        `install_sync_handler`) closes the schedule and raises SystemExit wherever beat is: inside a send, that
        was a read from a socket the exit had closed, a task not sent, the closed schedule read again and an exit
        status of 1 (a stop the moment the tick went out). Held, the stop is handled as the send returns — at
        most the send's own retries later, when the broker is away."""
        if threading.current_thread() is not threading.main_thread():  # (`worker -B`'s beat in a thread)
            return super().apply_async(entry, producer, advance, **kwargs)
        before = signal.pthread_sigmask(signal.SIG_BLOCK, _STOPS)
        try:
            return super().apply_async(entry, producer, advance, **kwargs)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, before)
