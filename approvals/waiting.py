"""Waiting for a decision without holding a thread or a database connection.

The one waiting primitive is `confirmation_states`: an async iterator over one
request's states as its agent may see them. Every way an agent waits uses it —
the long-poll and pre-tool-use with `wait_seconds` (`approvals.api.longpoll`),
the Claude Code HTTP hook (`approvals.api.claude_code`), both through
`wait_for_final`, and the WebSocket (`approvals.consumers`).

A waiter is one future in `gateway.realtime.waiters` and one timer (its own
timeout or the request's deadline); it registers before its first read (so a
decision committed in between still wakes it), re-reads the row on every
wake-up, and expires the request itself when its deadline passes. Database
reads borrow a connection from a small executor and give it back at once
(`db_call`). Lost notifications are caught by one batched re-check per
process every GATEWAY_WAIT_RECHECK_SECONDS; without PostgreSQL (SQLite in
`make run`) waiters poll.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
import uuid
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol, TypeVar

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import connection
from django.utils import timezone

from approvals import selectors, services
from approvals.errors import InvalidInput
from approvals.models import ConfirmationRequest, Status
from gateway.realtime import waiters

logger = logging.getLogger("approvals.waiting")

DEFAULT_TIMEOUT = 25
POLL_INTERVAL_WITHOUT_PUSH = 0.2  # SQLite: no NOTIFY, so waiters poll
RECHECK_BATCH = 1000  # ids per re-check query

# Short database reads for waiters: a few threads shared by every waiter.
_DB_THREADS = 4
_db_executor = ThreadPoolExecutor(max_workers=_DB_THREADS, thread_name_prefix="gateway-wait-db")
# Reads beyond what the threads can take wait here as one small future each, not as
# a queued executor job each: a burst of 10,000 arriving waiters otherwise holds
# 10,000 jobs at once and leaves the heap fragmented long after (bench/run.py part b).
_db_slots: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = weakref.WeakKeyDictionary()

R = TypeVar("R")


@functools.cache
def db_call(fn: Callable[..., R]) -> Callable[..., Awaitable[R]]:
    """`fn`, a short ORM read or write, run off the event loop; the connection is given back at once."""

    def call(*args: Any, **kwargs: Any) -> R:
        try:
            return fn(*args, **kwargs)
        finally:
            connection.close()  # with the psycopg pool: back to the pool

    run = sync_to_async(call, thread_sensitive=False, executor=_db_executor)

    async def bounded(*args: Any, **kwargs: Any) -> R:
        loop = asyncio.get_running_loop()
        slots = _db_slots.get(loop)
        if slots is None:
            slots = _db_slots[loop] = asyncio.Semaphore(2 * _DB_THREADS)
        async with slots:
            return await run(*args, **kwargs)

    return bounded


def parse_timeout(raw: str | None) -> float:
    """The long-poll's `timeout` query parameter, in seconds; InvalidInput (400) if it is not one."""
    if raw in (None, ""):
        return DEFAULT_TIMEOUT
    try:
        value = float(raw)  # type: ignore[arg-type]
    except ValueError:
        raise InvalidInput("timeout must be a number of seconds", details={"timeout": [f"not a number: {raw!r}"]}) from None
    if value < 0 or value > settings.GATEWAY_WAIT_MAX_SECONDS:
        raise InvalidInput(
            f"timeout must be between 0 and {settings.GATEWAY_WAIT_MAX_SECONDS}",
            details={"timeout": ["out of range"]},
        )
    return value


def _agent_id_for_key(raw_key: str) -> int | None:
    key = selectors.api_key_lookup(raw_key=raw_key)
    return key.agent_id if key else None


async def agent_id_for_key(raw_key: str) -> int | None:
    """The id of the agent owning a live API key (an id, not a row: waiters keep it for their whole wait)."""
    return await db_call(_agent_id_for_key)(raw_key) if raw_key else None


# --------------------------------------------------------------------------- the primitive


class WatchedState(Protocol):
    """What a reader gives `confirmation_states`: at least whether the request is final, and its deadline."""

    @property
    def is_final(self) -> bool: ...

    @property
    def expires_at(self) -> Any: ...


S = TypeVar("S", bound=WatchedState)


def read_confirmation(confirmation_id: Any, agent_id: int) -> ConfirmationRequest | None:
    """The request, if it is this agent's (the default reader of `confirmation_states`)."""
    return ConfirmationRequest.objects.select_related("agent").filter(pk=confirmation_id, agent_id=agent_id).first()


def _expire(confirmation_id: Any) -> None:
    services.confirmation_expire(confirmation_id=confirmation_id)


async def confirmation_states(
    *,
    confirmation_id: Any,
    agent_id: int,
    until: float | None = None,
    read: Callable[[Any, int], S | None] = read_confirmation,  # type: ignore[assignment]
) -> AsyncIterator[S]:
    """Yield one request's state now, then after every wake-up, until it is final.

    A wake-up is a notification of a change, the process's batched re-check,
    or the request's own deadline (the waiter then expires it itself). With
    `until` (an event-loop time) the iteration also ends once that passes,
    after yielding the state read then. Nothing is yielded if the request is
    not this agent's. `read(confirmation_id, agent_id)` is run in the database
    executor; the default gives the `ConfirmationRequest`.

    Use it with `contextlib.aclosing` so the waiter is unregistered as soon as
    the caller stops. While parked a waiter holds its future and one timer,
    nothing else: every byte here is multiplied by the number of waiting agents.
    """
    loop = asyncio.get_running_loop()
    key = str(confirmation_id)
    _ensure_rechecker()
    future = waiters.register(key)
    try:
        while True:
            state = await db_call(read)(confirmation_id, agent_id)
            if state is None:
                return
            if not state.is_final and state.expires_at is not None and state.expires_at <= timezone.now():
                del state
                await db_call(_expire)(confirmation_id)
                continue
            step = None if until is None else until - loop.time()
            if state.expires_at is not None and not state.is_final:
                until_expiry = (state.expires_at - timezone.now()).total_seconds() + 0.01
                step = until_expiry if step is None else min(step, until_expiry)
            done = state.is_final or (until is not None and loop.time() >= until)
            yield state
            del state
            if done:
                return
            timer = loop.call_later(step, _resolve, future) if step is not None else None
            try:
                await future
            finally:
                if timer is not None:
                    timer.cancel()
            waiters.unregister(key, future)
            future = waiters.register(key)
    finally:
        waiters.unregister(key, future)


async def wait_for_final(*, confirmation_id: Any, agent_id: int, timeout: float) -> ConfirmationRequest | None:
    """Wait until the request is final or `timeout` passes; the row as last read (None if not this agent's)."""
    until = asyncio.get_running_loop().time() + timeout
    states = confirmation_states(confirmation_id=confirmation_id, agent_id=agent_id, until=until)
    async with contextlib.aclosing(states):
        last = None
        async for last in states:
            pass
    return last


def _resolve(future: asyncio.Future[None]) -> None:
    """A waiter's own timer: wake it as a notification would."""
    if not future.done():
        future.set_result(None)


# --------------------------------------------------------------------------- the safety net


def _settled_ids(ids: list[str]) -> list[str]:
    """Of these request ids, the ones no longer pending."""
    rows = ConfirmationRequest.objects.filter(pk__in=ids).exclude(status=Status.PENDING).values_list("pk", flat=True)
    return [str(pk) for pk in rows]


async def _recheck_forever(interval: float) -> None:
    """The safety net for lost notifications: every `interval`, ONE query per batch of
    waited-on ids wakes those no longer pending. (A re-read per waiter instead costs
    10,000 waiters / 5 s = 2,000 queries/s, and keeps thousands of reads in flight.)"""
    while True:
        await asyncio.sleep(interval)
        try:
            ids = [i for i in waiters.registered_ids() if _is_uuid(i)]
            for start in range(0, len(ids), RECHECK_BATCH):
                for confirmation_id in await db_call(_settled_ids)(ids[start : start + RECHECK_BATCH]):
                    waiters.wake(confirmation_id)
        except Exception:  # database briefly gone: try again next time
            logger.warning("re-checking waiters failed", exc_info=True)


def _is_uuid(value: str) -> bool:
    try:
        uuid.UUID(value)
    except ValueError:
        return False
    return True


@dataclasses.dataclass
class _Rechecker:
    task: asyncio.Task | None = None


_rechecker = _Rechecker()


def _ensure_rechecker() -> None:
    """One re-check task per process and event loop, started by the first waiter."""
    loop = asyncio.get_running_loop()
    task = _rechecker.task
    if task is None or task.done() or task.get_loop() is not loop:
        interval = settings.GATEWAY_WAIT_RECHECK_SECONDS if waiters.push_enabled else POLL_INTERVAL_WITHOUT_PUSH
        _rechecker.task = loop.create_task(_recheck_forever(interval), name="gateway-wait-recheck")
