"""What a server process does while it wakes a crowd of waiters (`gateway_utils.realtime`): the cyclic
garbage collector waits until the woken waiters have run, and the re-check of waiters
(`approvals.waiting`) lets a burst of notifications through before it wakes anyone to read."""

from __future__ import annotations

import asyncio
import gc
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


def test_a_notification_s_payload_is_read_as_json_loads_reads_it_what_orjson_refuses_included():
    """`parse_payload` reads with orjson (10,000 at once) and falls back to json for what orjson refuses."""
    import json

    from gateway_utils.realtime import parse_payload

    payloads = [
        '{"id": "7d3c6a1e-0000-4000-8000-000000000001", "status": "approved", "n": 5, "f": 1.5e-7}',
        '{"id": "x", "big": 123456789012345678901234567890, "neg": -18446744073709551617}',  # over 64 bits
        '{"id": "x", "nan": NaN, "inf": Infinity, "huge": 1e400}',
        '{"id": "x", "lone": "\\ud800", "dup": 1, "dup": 2}',
    ]
    for payload in payloads:
        assert parse_payload(payload) == ("7d3c6a1e-0000-4000-8000-000000000001" if "7d3c" in payload else "x", json.loads(payload)) or (
            # (NaN is not equal to itself: compare the text json writes)
            json.dumps(parse_payload(payload)[1]) == json.dumps(json.loads(payload))
        )
    assert parse_payload("7d3c6a1e-0000-4000-8000-000000000001") == ("7d3c6a1e-0000-4000-8000-000000000001", None)
    assert parse_payload('{"no id": 1}') == ('{"no id": 1}', None)
    assert parse_payload("{not json") == ("{not json", None)


def test_random_payloads_are_read_exactly_as_json_loads_reads_them_to_the_type_of_each_number():
    """1 and 1.0 are equal in Python: each read is compared by the text json writes of it."""
    import json
    import random
    import struct

    from gateway_utils.realtime import _loads

    rng = random.Random(36)
    edges = [0, -1, 2**53 + 1, 2**63 - 1, 2**63, -(2**63), -(2**63) - 1, 2**64 - 1, 2**64, 10**18 - 1, 10**18, 10**30]

    def value(depth: int = 0):
        kind = rng.randrange(8 if depth < 3 else 5)
        if kind == 0:
            return rng.choice(edges) if rng.random() < 0.5 else rng.randrange(-(10**rng.randrange(1, 25)), 10**rng.randrange(1, 25))
        if kind == 1:
            f = struct.unpack("d", struct.pack("Q", rng.getrandbits(64)))[0]
            return f if f == f and abs(f) != float("inf") else rng.random()
        if kind == 2:
            return "".join(chr(rng.choice([rng.randrange(32, 127), rng.randrange(0x80, 0xD7FF), rng.randrange(0xE000, 0x10FFFF)])) for _ in range(rng.randrange(8)))
        if kind == 3:
            return rng.choice([True, False, None])
        if kind == 4:
            return rng.random() * 10 ** rng.randrange(-30, 30)
        if kind in (5, 6):
            return {f"k{i}": value(depth + 1) for i in range(rng.randrange(4))}
        return [value(depth + 1) for _ in range(rng.randrange(4))]

    for _ in range(5000):
        text = json.dumps({"id": "x", "state": value()}, ensure_ascii=rng.random() < 0.5)
        assert json.dumps(_loads(text)) == json.dumps(json.loads(text)), text
