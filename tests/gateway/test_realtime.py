"""What a server process does while it wakes a crowd of waiters (`gateway_utils.realtime`): the cyclic
garbage collector waits until the woken waiters have run, and the re-check of waiters
(`approvals.waiting`) lets a burst of notifications through before it wakes anyone to read."""

from __future__ import annotations

import asyncio
import gc
import json
import math
import random
import threading
import time
import uuid

import psycopg
import pytest

from approvals import waiting
from gateway_utils import realtime
from gateway_utils.realtime import CollectorPause, waiters


@pytest.fixture
def collector_on():
    """The collector enabled, as a server has it, and enabled again after the test whatever it did."""
    was = gc.isenabled()
    gc.enable()
    yield
    if was:
        gc.enable()
    else:
        gc.disable()


async def _until(condition) -> None:
    while not condition():
        await asyncio.sleep(0)


def test_the_collector_waits_until_every_woken_waiter_has_run(collector_on):
    async def scenario() -> tuple[list[bool], bool]:
        loop = asyncio.get_running_loop()
        pause = CollectorPause()
        enabled_when_run: list[bool] = []
        futures = [loop.create_future() for _ in range(50)]

        async def waiter(future: asyncio.Future) -> None:
            await future
            enabled_when_run.append(gc.isenabled())

        tasks = [loop.create_task(waiter(future)) for future in futures]
        await asyncio.sleep(0)  # every waiter parked on its future
        for future in futures[:25]:  # woken as the listener wakes them: one notification after another
            future.set_result(None)
            pause.hold(loop)
        assert not gc.isenabled()
        await asyncio.sleep(0)  # the next batch, while the first one's waiters run
        for future in futures[25:]:
            future.set_result(None)
            pause.hold(loop)
        await asyncio.gather(*tasks)
        await _until(gc.isenabled)  # enabled again once a pass of the loop woke nobody
        return enabled_when_run, pause.held_since is None

    enabled_when_run, released = asyncio.run(scenario())
    assert enabled_when_run == [False] * 50
    assert released and gc.isenabled()


def test_a_collector_disabled_by_someone_else_stays_disabled(collector_on):
    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        pause = CollectorPause()
        gc.disable()
        pause.hold(loop)
        for _ in range(5):
            await asyncio.sleep(0)
        assert pause.held_since is None and not gc.isenabled()

    asyncio.run(scenario())


def test_a_pause_ends_at_its_cap_even_while_waiters_keep_being_woken_and_leaves_the_collector_alone_after(collector_on):
    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        pause = CollectorPause()
        pause.MAX_SECONDS = 0.05
        pause.hold(loop)
        while pause.held_since is not None:  # woken without end: the pause still ends
            pause.hold(loop)
            await asyncio.sleep(0)
        assert gc.isenabled()
        pause.hold(loop)  # right after a capped pause: no new one for as long again
        assert gc.isenabled() and pause.held_since is None

    asyncio.run(scenario())


@pytest.mark.django_db(transaction=True)
def test_waking_waiters_pauses_the_collector_until_they_have_run(collector_on):
    async def scenario() -> list[bool]:
        key = str(uuid.uuid4())
        futures = [waiters.register(key) for _ in range(3)]
        enabled_when_run: list[bool] = []

        async def waiter(future: asyncio.Future) -> None:
            await future
            enabled_when_run.append(gc.isenabled())

        tasks = [asyncio.create_task(waiter(f)) for f in futures]
        await asyncio.sleep(0)
        try:
            assert waiters.wake(key, {"id": key}) == 3
            await asyncio.gather(*tasks)
            await _until(gc.isenabled)
        finally:
            for future in futures:
                waiters.unregister(key, future)
        return enabled_when_run

    assert asyncio.run(scenario()) == [False] * 3


@pytest.mark.django_db(transaction=True)
def test_the_recheck_lets_a_burst_of_notifications_through_before_it_wakes_anyone():
    """While the listener is hearing a burst, the settled requests it has not reached yet have their
    notifications on the way: the re-check waits for it to go quiet before waking any of them to read."""
    conninfo = realtime.conninfo()
    stop = threading.Event()

    def burst() -> None:  # another process's decisions, one notification after another
        with psycopg.connect(conninfo, autocommit=True) as conn:
            while not stop.wait(0.01):
                conn.execute("SELECT pg_notify(%s, %s)", [realtime.CHANNEL, str(uuid.uuid4())])

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        key = str(uuid.uuid4())
        future = waiters.register(key)  # (starts this loop's listener)
        sender = threading.Thread(target=burst)
        try:
            await asyncio.wait_for(waiters._listener.connected.wait(), 10)
            sender.start()
            await _until_heard(loop)
            started = loop.time()
            after = loop.create_task(waiting.after_the_burst(limit=600))
            # The burst goes on for well past the quiet window: the re-check still holds back.
            await _until_heard(loop, since=started + 3 * waiting.RECHECK_QUIET_SECONDS)
            assert not after.done()
            stop.set()
            await asyncio.wait_for(after, 10)  # quiet again: the re-check goes on
        finally:
            stop.set()
            if sender.is_alive():
                sender.join()
            waiters.unregister(key, future)

    asyncio.run(scenario())


async def _until_heard(loop: asyncio.AbstractEventLoop, since: float | None = None) -> None:
    """Until the listener has heard a notification (after `since`, an event-loop time, if given)."""
    import time

    offset = time.monotonic() - loop.time()  # `last_heard` is time.monotonic()
    threshold = (since + offset) if since is not None else time.monotonic()
    while waiters.last_heard <= threshold:
        await asyncio.sleep(0.01)


def test_the_recheck_waits_while_the_event_loop_is_still_busy_answering_what_it_heard():
    """The listener hears nothing, but the loop is late (it is answering thousands of woken waiters, and
    reads the rest of the burst only between them): its silence says nothing yet."""

    async def scenario() -> tuple[bool, bool]:
        loop = asyncio.get_running_loop()
        busy = {"until": loop.time() + 1.5}

        def answering() -> None:  # one woken waiter after another, each holding the loop a while
            if loop.time() < busy["until"]:
                time.sleep(0.08)
                loop.call_soon(answering)

        loop.call_soon(answering)
        after = loop.create_task(waiting.after_the_burst(limit=600))
        while loop.time() < busy["until"] - 0.3:
            await asyncio.sleep(0)
        done_while_busy = after.done()
        await asyncio.wait_for(after, 10)  # the loop keeps time again: the re-check goes on
        return done_while_busy, after.done()

    assert asyncio.run(scenario()) == (False, True)


def test_the_recheck_looks_at_every_id_with_a_waiter_not_yet_woken_in_any_form_a_uuid_takes():
    """What the re-check asks the database about (`unwoken_ids`, then `_is_uuid`): an id is looked at while one
    of its waiters is not woken yet, and any text `uuid.UUID` reads is an id — not only the canonical one."""

    async def scene() -> None:
        registry = realtime.WaiterRegistry()
        woken, half, waiting_id = (str(uuid.uuid4()) for _ in range(3))
        registry.register(woken).set_result(None)
        registry.register(half).set_result(None)
        registry.register(half)
        registry.register(waiting_id)
        assert sorted(registry.unwoken_ids()) == sorted([half, waiting_id])

    asyncio.run(scene())
    canonical = str(uuid.uuid4())
    for text in (canonical, canonical.upper(), "{" + canonical + "}", canonical.replace("-", ""), "urn:uuid:" + canonical):
        assert waiting._is_uuid(text), text
    for text in ("", "not-a-uuid", canonical[:-1], canonical + "0", "g" + canonical[1:], " " + canonical):
        assert not waiting._is_uuid(text), text


def _same(a, b) -> bool:
    """Equal and of the same types all the way down (1 is not 1.0, -0.0 is not 0.0, NaN is NaN)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(map(_same, a, b))
    if isinstance(a, float):
        return (a != a and b != b) or (a == b and math.copysign(1, a) == math.copysign(1, b))
    return a == b


def test_a_notification_is_read_exactly_as_json_loads_reads_it():
    """`parse_payload` reads most payloads with orjson (a third of the time): what it makes is what
    `json.loads` makes, to the type — the state's MAC is checked against those values, and a number read
    otherwise (orjson makes an integer past 64 bits a float) would make a genuine decision look altered.
    Random payloads as PostgreSQL and `json.dumps` write them, with the numbers where the two differ."""
    rnd = random.Random(36)
    edges = [2**63 - 1, 2**63, -(2**63), -(2**63) - 1, 2**64 - 1, 2**64, -(2**64), 10**19, -(10**19), 10**30]
    edges += [0.1, -0.0, 1e300, 5e-324, 2.0, 1e22, float("nan"), float("inf")]
    texts = ["", "é", "\u2028", "\U0001f600", "\ud800", "a: 1234567890123456789012", '"', "\\", "\x00", "10, [20]"]

    def value(depth: int):
        kind = rnd.randrange(9 if depth < 3 else 6)
        if kind == 0:
            return rnd.choice(edges)
        if kind == 1:
            return rnd.randint(-(10**22), 10**22) if rnd.random() < 0.3 else rnd.randint(-1000, 1000)
        if kind == 2:
            return rnd.uniform(-1e6, 1e6)
        if kind == 3:
            return rnd.choice(texts) + str(rnd.randint(0, 99))
        if kind == 4:
            return rnd.choice([None, True, False])
        if kind == 5:
            return str(uuid.uuid4())
        if kind in (6, 7):
            return {rnd.choice(texts) + str(i): value(depth + 1) for i in range(rnd.randrange(4))}
        return [value(depth + 1) for _ in range(rnd.randrange(4))]

    for i in range(3000):
        payload = {"id": str(uuid.uuid4()), "signed": {"tool_args": value(0), "n": value(1)}, "approved_by": []}
        separators = (", ", " : ") if i % 2 else (",", ":")  # (PostgreSQL's json_build_object spaces them)
        text = json.dumps(payload, separators=separators, ensure_ascii=bool(i % 3))
        confirmation_id, parsed = realtime.parse_payload(text)
        assert confirmation_id == payload["id"]
        assert _same(parsed, json.loads(text)), text
