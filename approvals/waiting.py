"""Waiting for a decision without holding a thread or a database connection.

The one waiting primitive is `confirmation_states`: an async iterator over one
request's states as its agent may see them. Every way an agent waits uses it —
the long-poll and pre-tool-use with `wait_seconds` (`approvals.api.asgi`),
the Claude Code HTTP hook (`approvals.api.claude_code`), both through
`wait_for_final`, and the WebSocket (`approvals.consumers`).

A waiter is one future in `gateway_utils.realtime.waiters` and at most one timer (its
own timeout); it registers before its first read (so a decision committed in
between still wakes it). A notification carries the request's new state, so a
woken waiter answers without reading; the process's expiry queue expires the
requests its waiters wait on as their deadlines pass, many in one transaction.
Database reads borrow a connection from a small executor and give it back at
once (`db_call`). Lost notifications are caught by one batched re-check per
process every GATEWAY_WAIT_RECHECK_SECONDS; without PostgreSQL (SQLite in
`make run`) waiters poll.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime as dt
import functools
import heapq
import itertools
import logging
import math
import re
import time
import uuid
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import connection

from approvals import selectors, services
from approvals.errors import InvalidInput
from approvals.caches import cache
from approvals.models import ApiKey, ConfirmationRequest, Status
from approvals.services.records import ids_in
from approvals.types import ConfirmationState
from gateway_utils import metrics, tracing
from gateway_utils.realtime import waiters

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


def connection_given_back(fn: Callable[..., R]) -> Callable[..., R]:
    """`fn`, then its thread's database connection closed (with the psycopg pool: given back to it)."""

    def call(*args: Any, **kwargs: Any) -> R:
        try:
            return fn(*args, **kwargs)
        finally:
            connection.close()  # with the psycopg pool: back to the pool

    return call


@functools.cache
def db_call(fn: Callable[..., R]) -> Callable[..., Awaitable[R]]:
    """`fn`, a short ORM read or write, run off the event loop; the connection is given back at once."""
    run = sync_to_async(connection_given_back(fn), thread_sensitive=False, executor=_db_executor)

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
        return min(DEFAULT_TIMEOUT, settings.GATEWAY_WAIT_MAX_SECONDS)  # the default never exceeds the maximum
    try:
        value = float(raw)  # type: ignore[arg-type]
    except ValueError:
        raise InvalidInput("timeout must be a number of seconds", details={"timeout": [f"not a number: {raw!r}"]}) from None
    if not math.isfinite(value) or value < 0 or value > settings.GATEWAY_WAIT_MAX_SECONDS:
        raise InvalidInput(
            f"timeout must be between 0 and {settings.GATEWAY_WAIT_MAX_SECONDS}",
            details={"timeout": ["out of range"]},
        )
    return value


def _agent_id_for_key(raw_key: str) -> int | None:
    holder = selectors.key_holder(raw_key=raw_key)
    return holder.agent_id if holder else None


async def agent_id_for_key(raw_key: str) -> int | None:
    """The id of the agent owning a live API key (an id, not a row: waiters keep it for their whole wait).
    From the process's key cache when it holds the key (as pre-tool-use is served: a key revoked or
    disabled anywhere is dropped from it at once, `approvals.caches`), else read."""
    if not raw_key:
        return None
    holder = cache.peek_key_holder(ApiKey.hash_key(raw_key))
    if holder is not None:
        return holder.agent_id
    return await db_call(_agent_id_for_key)(raw_key)


# --------------------------------------------------------------------------- the primitive


def read_state(confirmation_id: Any, agent_id: int, with_approvals: bool = False) -> ConfirmationState | None:
    """The request's state, if it is this agent's; with who approved so far if asked."""
    row = ConfirmationRequest.objects.filter(pk=confirmation_id, agent_id=agent_id).first()
    if row is None:
        return None
    return selectors.confirmation_state(row=row, approved_by=selectors.approvals_so_far(row) if with_approvals else None)


def read_states(wanted: list[tuple[str, int]]) -> dict[tuple[str, int], ConfirmationState]:
    """The states of several requests in one query, each only if it is the agent's it is asked for
    (`wanted`: (request id, agent id) pairs, ids valid UUIDs)."""
    rows = ConfirmationRequest.objects.filter(ids_in(ConfirmationRequest, list({pk for pk, _ in wanted})))
    found = {(str(row.pk), row.agent_id): row for row in rows}
    return {pair: selectors.confirmation_state(row=found[pair]) for pair in wanted if pair in found}


READ_BATCH = 500  # waiters' first reads made in one query


class _FirstReads:
    """The reads waiters make of their requests' states (first, and after a wake without a state),
    coalesced: while one batch is being read, the reads asked for meanwhile queue, and go together in
    the next — ONE query however many. Ten thousand agents arriving at once (a restart, a burst) are
    twenty queries, not ten thousand; one agent alone is read at once. One per event loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.queued: dict[tuple[str, int], list[asyncio.Future[ConfirmationState | None]]] = {}
        self.reading: asyncio.Task | None = None

    async def read(self, confirmation_id: str, agent_id: int) -> ConfirmationState | None:
        future: asyncio.Future[ConfirmationState | None] = self.loop.create_future()
        self.queued.setdefault((confirmation_id, agent_id), []).append(future)
        if self.reading is None or self.reading.done():
            self.reading = self.loop.create_task(self._read_queued(), name="gateway-wait-reads")
        return await future

    async def _read_queued(self) -> None:
        while self.queued:
            pairs = list(itertools.islice(self.queued, READ_BATCH))
            batch = {pair: self.queued.pop(pair) for pair in pairs}
            try:
                states = await db_call(read_states)(pairs)
            except Exception as exc:  # each waiter gets the error, as its own read would have raised it
                for futures in batch.values():
                    for future in futures:
                        if not future.done():
                            future.set_exception(exc)
                continue
            for pair, futures in batch.items():
                for future in futures:
                    if not future.done():  # (a waiter that stopped meanwhile)
                        future.set_result(states.get(pair))


_first_reads: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _FirstReads] = weakref.WeakKeyDictionary()


async def _read(confirmation_id: Any, agent_id: int, with_approvals: bool) -> ConfirmationState | None:
    try:
        key = str(uuid.UUID(str(confirmation_id)))
    except ValueError:
        key = ""
    if with_approvals or not key:  # (who approved so far is a read of its own; a bad id, read_state's say)
        return await db_call(read_state)(confirmation_id, agent_id, with_approvals)
    loop = asyncio.get_running_loop()
    reads = _first_reads.get(loop)
    if reads is None:
        reads = _first_reads[loop] = _FirstReads(loop)
    return await reads.read(key, agent_id)


async def confirmation_states(
    *,
    confirmation_id: Any,
    agent_id: int,
    until: float | None = None,
    with_approvals: bool = False,
    via: str = "websocket",
) -> AsyncIterator[ConfirmationState]:
    """Yield one request's state now, then after every change, until it is final.

    A change is told by its notification, which carries the new state (no
    read); the process's batched re-check and a listener reconnect wake the
    waiter without one (then it reads). The request's own deadline is kept by
    the process's expiry queue, which expires it and so notifies. With `until`
    (an event-loop time) the iteration also ends once that passes, after
    yielding the state read then. Nothing is yielded if the request is not
    this agent's. `with_approvals` reads who approved so far as well. A final state
    the waiter was woken for is timed from its decision (`gateway_agent_wake_seconds{via}`).

    Use it with `contextlib.aclosing` so the waiter is unregistered as soon as
    the caller stops. While parked a waiter holds its future and one timer,
    nothing else: every byte here is multiplied by the number of waiting agents.
    """
    loop = asyncio.get_running_loop()
    key = str(confirmation_id)
    wanted = _canonical_id(key)
    _ensure_rechecker()
    future = waiters.register(key)
    told: Any = None
    woken = False
    try:
        while True:
            state = None
            if isinstance(told, dict):
                state = selectors.confirmation_state_told(data=told)
                if state.id != wanted:
                    # Another request's state (its MAC genuine) sent under this one's id by someone who can
                    # NOTIFY: not this request's, so not believed — its row is read instead.
                    state = None
                elif state.agent_id != agent_id:  # cannot happen for one id; never show another agent's request
                    return
            elif isinstance(told, ConfirmationState):
                state = told
            if state is None:
                if future.done():  # woken to read: registered again first, so a change meanwhile still wakes it
                    future = _registered_again(key, future)
                state = await _read(confirmation_id, agent_id, with_approvals)
                if state is None:
                    return
            told = None
            if not state.is_final and state.expires_at is not None:
                _expiries().schedule(key, state.expires_at)
            step = None if until is None else until - loop.time()
            done = state.is_final or (step is not None and step <= 0)
            if state.is_final and woken and state.decided_at is not None:
                metrics.agent_woken(via=via, decided_at=state.decided_at.timestamp(), loop=loop)
            if not done and future.done():  # it waits again (a final wake is not registered again)
                future = _registered_again(key, future)
            yield state
            del state
            if done:
                return
            timer = loop.call_later(step, _resolve, future) if step is not None else None
            try:
                told = await future
                woken = True
            finally:
                if timer is not None:
                    timer.cancel()
    finally:
        waiters.unregister(key, future)


def _registered_again(key: str, future: asyncio.Future[Any]) -> asyncio.Future[Any]:
    waiters.unregister(key, future)
    return waiters.register(key)


async def wait_for_final(
    *, confirmation_id: Any, agent_id: int, timeout: float, via: str = "long_poll"
) -> ConfirmationState | None:
    """Wait until the request is final or `timeout` passes; its state as last known (None if not this agent's).

    Traced (when on) as the span `await_decision`, with the events `gateway.wait.started` and, at the
    time of the decision, `gateway.decision`."""
    if not tracing.active():
        return await _wait_for_final(confirmation_id=confirmation_id, agent_id=agent_id, timeout=timeout, via=via)
    attributes = {
        "gateway.confirmation.id": str(confirmation_id),
        "gateway.wait.via": via,
        "gateway.wait.timeout_seconds": timeout,
    }
    with tracing.span("await_decision", attributes=attributes):
        tracing.event("gateway.wait.started")
        started = time.time()
        state = await _wait_for_final(confirmation_id=confirmation_id, agent_id=agent_id, timeout=timeout, via=via)
        decided_at = state.decided_at.timestamp() if state is not None and state.decided_at else None
        if state is not None and state.is_final and decided_at is not None and decided_at >= started:
            # Decided while it waited (not before): the event at the decision's own time.
            decided = {"gateway.confirmation.status": state.status, "gateway.decided_by": state.decided_by}
            tracing.event("gateway.decision", decided, at=decided_at)
        tracing.annotate({"gateway.confirmation.status": state.status if state is not None else "not_found"})
        return state


async def _wait_for_final(*, confirmation_id: Any, agent_id: int, timeout: float, via: str) -> ConfirmationState | None:
    until = asyncio.get_running_loop().time() + timeout
    states = confirmation_states(confirmation_id=confirmation_id, agent_id=agent_id, until=until, via=via)
    async with contextlib.aclosing(states):
        last = None
        async for last in states:
            pass
    return last


def _resolve(future: asyncio.Future[Any]) -> None:
    """A waiter's own timer: wake it as a notification without a state would."""
    if not future.done():
        future.set_result(None)


# --------------------------------------------------------------------------- deadlines

EXPIRY_BATCH = 500  # requests expired in one transaction
EXPIRY_CONCURRENCY = 2  # batches in flight at once: one commits while the next is written
EXPIRY_RETRY_SECONDS = 0.25  # a due request another transaction held is tried again this soon
# The expiry batches' own threads: a deadline is a promise, and never waits behind the waiters' reads
# (10,000 agents arriving at once queue 10,000 first reads on `db_call`'s threads).
_expiry_executor = ThreadPoolExecutor(max_workers=EXPIRY_CONCURRENCY, thread_name_prefix="gateway-expiry")


class _ExpiryQueue:
    """Keeps the deadlines of the requests this process's waiters wait on, and expires
    them as they pass: every request due at that moment in ONE transaction
    (`services.confirmations_expire`), whose notification then wakes the waiters with
    the expired state. One per process and event loop; the beat sweep remains the
    backstop for requests nobody waits on."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self._heap: list[tuple[float, str]] = []
        self._deadline_of: dict[str, float] = {}
        self._changed = asyncio.Event()
        self._slots = asyncio.Semaphore(EXPIRY_CONCURRENCY)
        self._batches: set[asyncio.Task] = set()
        self.task = loop.create_task(self._run(), name="gateway-expiry-queue")

    def schedule(self, confirmation_id: str, expires_at: dt.datetime) -> None:
        when = expires_at.timestamp()
        if self._deadline_of.get(confirmation_id) == when:
            return
        self._deadline_of[confirmation_id] = when
        heapq.heappush(self._heap, (when, confirmation_id))
        if self._heap[0] == (when, confirmation_id):
            self._changed.set()  # a new earliest deadline

    async def _run(self) -> None:
        while True:
            if not self._heap:
                await self._changed.wait()
                self._changed.clear()
                continue
            delay = self._heap[0][0] - time.time()
            if delay > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._changed.wait(), delay)
                self._changed.clear()
                continue
            await self._slots.acquire()
            due = self._take_due()
            if not due:
                self._slots.release()
                continue
            batch = self.loop.create_task(self._expire(due))
            self._batches.add(batch)  # keep a reference until it is done
            batch.add_done_callback(self._batches.discard)

    def _take_due(self) -> list[str]:
        now, due = time.time(), []
        while self._heap and self._heap[0][0] <= now and len(due) < EXPIRY_BATCH:
            when, confirmation_id = heapq.heappop(self._heap)
            if self._deadline_of.get(confirmation_id) != when:
                continue  # rescheduled since
            del self._deadline_of[confirmation_id]
            if waiters.is_waited(confirmation_id):  # (else nobody waits on it any more: the sweep's)
                due.append(confirmation_id)
        return due

    async def _expire(self, due: list[str]) -> None:
        try:
            expired = set(await _expire_off_loop(due))
        except Exception:
            logger.warning("expiring %d requests failed; retrying", len(due), exc_info=True)
            expired = set()
        finally:
            self._slots.release()
        if not waiters.push_enabled:  # no notification will come: wake them to read
            for confirmation_id in expired:
                waiters.wake(confirmation_id)
        retry_at = dt.datetime.fromtimestamp(time.time() + EXPIRY_RETRY_SECONDS, dt.timezone.utc)
        for confirmation_id in due:
            if confirmation_id not in expired:  # held by a decision in flight, or decided already
                self.schedule(confirmation_id, retry_at)


def _expire_many(confirmation_ids: list[str]) -> list[str]:
    return services.confirmations_expire(confirmation_ids=confirmation_ids, limit=len(confirmation_ids))


_expire_off_loop = sync_to_async(connection_given_back(_expire_many), thread_sensitive=False, executor=_expiry_executor)


_expiry_queues: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _ExpiryQueue] = weakref.WeakKeyDictionary()


def _expiries() -> _ExpiryQueue:
    loop = asyncio.get_running_loop()
    queue = _expiry_queues.get(loop)
    if queue is None or queue.task.done():
        queue = _expiry_queues[loop] = _ExpiryQueue(loop)
    return queue


# --------------------------------------------------------------------------- the safety net


def _settled_ids(ids: list[str]) -> list[str]:
    """Of these request ids, the ones no longer pending."""
    rows = (
        ConfirmationRequest.objects.filter(ids_in(ConfirmationRequest, ids))
        .exclude(status=Status.PENDING)
        .values_list("pk", flat=True)
    )
    return [str(pk) for pk in rows]


RECHECK_QUIET_SECONDS = 0.2  # the listener heard nothing for this long: a burst of notifications is through
RECHECK_LATE_SECONDS = 0.05  # …if the event loop was no later than this to end a sleep of that long


async def _recheck_forever(interval: float) -> None:
    """The safety net for lost notifications: every `interval`, ONE query per batch of
    waited-on ids wakes those no longer pending. (A re-read per waiter instead costs
    10,000 waiters / 5 s = 2,000 queries/s, and keeps thousands of reads in flight.)

    While the listener is still hearing a burst (10,000 decided at once), the settled ones it
    has not reached yet have their notifications on the way: the re-check is made, and they are
    woken, only once it has been quiet for RECHECK_QUIET_SECONDS (or `interval` has passed), and
    by then almost all were woken by their own. Woken here instead, each would read its row
    again — on the one core that is answering the burst."""
    while True:
        await asyncio.sleep(interval)
        try:
            # Not while a burst is being heard: its waiters' own notifications are on the way, and the
            # query (thousands of ids, on the core answering them) is smaller once they are answered.
            await after_the_burst(limit=interval)
            ids = [i for i in waiters.unwoken_ids() if _is_uuid(i)]
            settled = []
            for start in range(0, len(ids), RECHECK_BATCH):
                settled += await db_call(_settled_ids)(ids[start : start + RECHECK_BATCH])
            if settled:
                await after_the_burst(limit=interval)
            for confirmation_id in settled:
                waiters.wake(confirmation_id)
        except Exception:  # database briefly gone: try again next time
            logger.warning("re-checking waiters failed", exc_info=True)


async def after_the_burst(*, limit: float) -> None:
    """Returns once the listener has heard nothing for RECHECK_QUIET_SECONDS while the event loop kept time,
    or after `limit` seconds. A loop more than RECHECK_LATE_SECONDS late to end a sleep is still answering
    the waiters it woke — and hears the rest of a burst only between them, so its listener's silence says
    nothing yet (10,000 woken at once: the re-check had woken thousands of them to read their rows again)."""
    loop = asyncio.get_running_loop()
    until = loop.time() + limit
    while True:
        asked = loop.time()
        await asyncio.sleep(RECHECK_QUIET_SECONDS)
        late = loop.time() - asked - RECHECK_QUIET_SECONDS
        if late < RECHECK_LATE_SECONDS and not waiters.heard_within(RECHECK_QUIET_SECONDS):
            return
        if loop.time() >= until:
            return


def _canonical_id(value: str) -> str:
    """A request id as a state carries it (`str(uuid)`), or the value itself if it is no uuid."""
    try:
        return str(uuid.UUID(value))
    except ValueError:
        return value


_CANONICAL_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def _is_uuid(value: str) -> bool:
    # A waiter's id is almost always the canonical text (`str(uuid)`): matched in a fraction of the time
    # `uuid.UUID` takes (10,000 ids every re-check, on the event loop); any other form is parsed.
    if _CANONICAL_UUID.fullmatch(value) is not None:
        return True
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
