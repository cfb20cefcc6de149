"""Beat's tick at rest (docs/operating.md, "The processes"): what lets a gateway with nothing to do stop sending
itself a task every 2 s.

A tick that finds the gateway at rest — no outbox row waiting to be sent or gathered, no pending request's
deadline or timer before the first tick after a rest (approvals.selectors.nothing_due_before) —
calls `rest()`: one key in the broker's Redis, set to vanish after GATEWAY_TICK_REST_SECONDS. While it is
there, beat (`gateway.beat.Scheduler`) sends nothing and sleeps in Redis itself (`wait()`, one BLPOP on a
second key) until the rest lapses or is ended; once it is gone, the ticks come again. A delivery a worker
makes (a new request's card, a redraw, a webhook) ends the rest at once (`wake()`: one round trip that
deletes the key and pushes to the list beat waits on): beat wakes and sends the tick. A request that queues no
delivery (a card that is the gateway's own page, or one kept for a digest) ends the rest at its commit when a
deadline or timer of its falls within the rest (approvals.services.confirmations); one due later is seen by
the first tick after the key lapses, in time.

Only a Redis broker holds the key: with another (the embedded SQLite broker of `make run`) the tick never
rests. When Redis cannot be reached, beat sends the tick as if nothing rested (the send would fail the same
way), and a worker that cannot write the key simply does not rest.
"""

from __future__ import annotations

import functools
import logging
import time

import redis
from django.conf import settings

logger = logging.getLogger("gateway_utils.tick_rest")

KEY = "gateway:tick:resting"
MIN_WAIT = 0.01  # seconds: a shorter `wait` is a plain sleep
WAKE_KEY = "gateway:tick:wake"  # a list of at most one item: beat's `wait` returns when something is pushed


@functools.cache
def _client(url: str) -> redis.Redis | None:
    if not url.startswith(("redis://", "rediss://")):
        return None
    # Short timeouts: a wedged Redis must not hold beat's loop or a delivery for long.
    return redis.Redis.from_url(url, socket_timeout=2, socket_connect_timeout=2, health_check_interval=0)


@functools.cache
def _waiting_client(url: str, rest_seconds: int) -> redis.Redis:
    # Beat's own, for the BLPOP that lasts at most one rest: its reads may take that long, not longer.
    return redis.Redis.from_url(
        url, socket_timeout=rest_seconds + 5, socket_connect_timeout=2, health_check_interval=0
    )


def client() -> redis.Redis | None:
    """The broker's Redis, if the broker is Redis and resting is on; else None (the tick never rests)."""
    if settings.GATEWAY_TICK_REST_SECONDS <= 0:
        return None
    return _client(settings.CELERY_BROKER_URL)


def rest() -> bool:
    """The tick found nothing to do and nothing that could become due: let beat skip the ticks of the next
    GATEWAY_TICK_REST_SECONDS (or until `wake`). True if the rest began."""
    redis_client = client()
    if redis_client is None:
        return False
    try:
        redis_client.set(KEY, "1", px=int(settings.GATEWAY_TICK_REST_SECONDS * 1000))
    except redis.RedisError as exc:
        logger.warning("could not let beat's tick rest (%s); it keeps ticking", exc)
        return False
    return True


def wake() -> None:
    """Something is happening (a delivery): the rest ends and beat, waiting in `wait`, sends the tick."""
    redis_client = client()
    if redis_client is None:
        return
    try:
        # One round trip. The list keeps one item at most and lapses with a rest: a push nobody waited
        # for (beat was not resting) only makes beat's next `wait` return at once, to find the rest and wait again.
        pipe = redis_client.pipeline(transaction=False)
        pipe.delete(KEY).lpush(WAKE_KEY, "1").ltrim(WAKE_KEY, 0, 0)
        pipe.pexpire(WAKE_KEY, int(settings.GATEWAY_TICK_REST_SECONDS * 1000))
        pipe.execute()
    except redis.RedisError as exc:  # the rest lapses by itself within GATEWAY_TICK_REST_SECONDS
        logger.warning("could not end beat's rest (%s); it ends by itself", exc)


def wait(seconds: float) -> bool:
    """Beat, resting: sleep until `wake` (True) or for `seconds` (False), at most one rest. Without Redis, or
    when it fails, a plain sleep of at most one tick: beat sleeps a tick at a time until the rest was to lapse,
    then asks `resting`, which (Redis still away) says 0: the tick is sent."""
    seconds = min(seconds, float(settings.GATEWAY_TICK_REST_SECONDS))
    if seconds <= 0:
        return False
    if seconds < MIN_WAIT:  # (Redis reads a BLPOP timeout under 1 ms as 0: wait for ever)
        time.sleep(seconds)
        return False
    if client() is not None:
        waiting = _waiting_client(settings.CELERY_BROKER_URL, settings.GATEWAY_TICK_REST_SECONDS)
        try:
            return waiting.blpop([WAKE_KEY], timeout=seconds) is not None
        except redis.RedisError as exc:
            logger.warning("could not wait for the end of beat's rest (%s); asking again in a tick", exc)
    time.sleep(min(seconds, float(settings.GATEWAY_TICK_SECONDS)))
    return False


def resting() -> float:
    """How many more seconds beat may skip the tick (0: send it). A key with no expiry, or with more left
    than GATEWAY_TICK_REST_SECONDS (set under a longer setting, or by hand), is no rest of this gateway's:
    a tick is never held back longer than one rest."""
    redis_client = client()
    if redis_client is None:
        return 0.0
    try:
        left_ms = redis_client.pttl(KEY)
    except redis.RedisError:
        return 0.0
    if left_ms > settings.GATEWAY_TICK_REST_SECONDS * 1000:
        return 0.0
    return max(0.0, left_ms / 1000)
