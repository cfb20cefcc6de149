"""2. wake: a decision committed → the waiting agent's long-poll answered, beside the raw NOTIFY → LISTEN
floor; and a signed Slack click sent → answered (docs/waiting.md#benchmark)."""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from typing import Any

from bench.aioclient import Connection
from bench.database import decide_one
from bench.harness import SLACK_SIGNING_SECRET, SLACK_USER, TARGETS, Server, log, summary_ms, waiters_registered


async def raw_floor(samples: int, warmup: int = 50) -> list[float]:
    """NOTIFY on one autocommit connection -> the LISTENing connection's notifies() yields it."""
    import psycopg

    from gateway_utils.realtime import conninfo

    info = conninfo()
    async with await psycopg.AsyncConnection.connect(info, autocommit=True) as listener, \
            await psycopg.AsyncConnection.connect(info, autocommit=True) as sender:  # fmt: skip
        await listener.execute("LISTEN bench_floor")
        notifications = listener.notifies()

        async def next_arrival() -> float:
            await anext(notifications)
            return time.perf_counter()

        times = []
        for i in range(samples + warmup):
            arrival = asyncio.ensure_future(next_arrival())
            await asyncio.sleep(0.002)  # the listener is parked on its socket, like the server's
            started = time.perf_counter()
            await sender.execute("SELECT pg_notify('bench_floor', %s)", [str(i)])
            arrived = await arrival
            if i >= warmup:
                times.append(arrived - started)
        await notifications.aclose()
    return times


async def parked_waiter(server: Server, stats: Connection, auth: dict[str, str], cid: str):
    """Open a long-poll on `cid` and return once the server holds it parked; the future of its answer."""
    waiter = await server.connection()
    waiter.send("GET", f"/api/v1/confirmations/{cid}/wait?timeout=60", headers=auth)

    async def read() -> tuple[int, bytes, float]:
        status, _, body = await waiter.read_response()
        waiter.close()
        return status, body, time.perf_counter()

    answer = asyncio.ensure_future(read())
    while await waiters_registered(stats) < 1:
        await asyncio.sleep(0.001)
    await asyncio.sleep(0.01)  # past its first read: parked on the future, as a real waiter is
    assert not answer.done()
    return answer


def _decider_ready(path: list[str], environ: dict[str, str]) -> None:
    """A deciding process of its own (spawned: nothing of this one's connections or threads): Django set up
    as here."""
    sys.path[:] = path
    os.environ.update(environ)
    import django

    django.setup()


def decider() -> ProcessPoolExecutor:
    """Where the decisions are committed: a process of their own, beside the measuring one on its core.
    Committed in a thread of the measuring process, the decision's own after-commit work (queueing its
    card's redraw: a broker client made and a message sent, ~1.5 ms of Python) held that process's GIL
    while the agent's answer arrived, and was measured as the server's."""
    return ProcessPoolExecutor(
        max_workers=1,
        mp_context=multiprocessing.get_context("spawn"),
        initializer=_decider_ready,
        initargs=(list(sys.path), dict(os.environ)),
    )


async def part_wake(server: Server, ids: dict[str, Any], decisions: int, warmup: int = 20) -> dict[str, Any]:
    from gateway_contract import sign_confirmation_id
    from tests.fakes.slack_api import block_actions_payload, form_body, signed_slack_request

    log(f"2. wake: raw floor, {decisions} NOTIFY -> LISTEN round trips")
    floor = await raw_floor(decisions)
    auth = {"authorization": f"Bearer {ids['key']}"}
    agent, approver, stats = [await server.connection() for _ in range(3)]

    async def pending(i: int) -> str:
        answer = await agent.json(
            "POST",
            "/api/v1/hooks/pre-tool-use",
            headers=auth,
            payload={"session_id": "bench-wake", "tool_name": "oa__pay", "tool_args": {"i": i}},
        )
        assert answer["decision"] == "pending", answer
        return answer["confirmation_id"]

    log(f"2. wake: {decisions} decisions committed by a deciding process while the agent long-polls")
    commit_to_answer = []
    loop = asyncio.get_running_loop()
    with decider() as deciding:
        for i in range(decisions + warmup):
            cid = await pending(i)
            answer = await parked_waiter(server, stats, auth, cid)
            # (CLOCK_MONOTONIC, perf_counter's clock, is one clock for every process of the machine)
            committed = await loop.run_in_executor(deciding, decide_one, cid)
            status, body, returned = await answer
            assert status == 200 and json.loads(body)["status"] == "approved", (status, body[:200])
            if i >= warmup:
                commit_to_answer.append(max(returned - committed, 0.0))

    log(f"2. wake: {decisions} signed Slack clicks while the agent long-polls")
    click_sent, click_answered, callback = [], [], []
    for i in range(decisions + warmup):
        cid = await pending(decisions + warmup + i)
        answer = await parked_waiter(server, stats, auth, cid)
        body = form_body(block_actions_payload(action_id="approve", value=sign_confirmation_id(cid), user_id=SLACK_USER))
        headers = {"content-type": "application/x-www-form-urlencoded", **signed_slack_request(SLACK_SIGNING_SECRET, body)}
        posted = time.perf_counter()
        approver.send("POST", "/channels/slack-bench/callback", headers=headers, body=body)
        click_status, _, _ = await approver.read_response()
        answered = time.perf_counter()
        status, data, returned = await answer
        assert click_status == 200 and status == 200 and json.loads(data)["status"] == "approved"
        if i >= warmup:
            click_sent.append(returned - posted)
            click_answered.append(max(returned - answered, 0.0))
            callback.append(answered - posted)
    for conn in (agent, approver, stats):
        conn.close()

    result = {
        "decisions": decisions,
        "commit_to_answer_ms": summary_ms(commit_to_answer),
        "raw_floor_ms": summary_ms(floor),
        "click_sent_to_answer_ms": summary_ms(click_sent),
        "click_answered_to_answer_ms": summary_ms(click_answered),
        "click_round_trip_ms": summary_ms(callback),
        "agent_answered_before_click_answered": sum(1 for v in click_answered if v == 0.0),
    }
    p99, floor_p99 = result["commit_to_answer_ms"]["p99"], result["raw_floor_ms"]["p99"]
    result["p99_over_floor_p99"] = round(p99 / floor_p99, 2) if floor_p99 else None
    result["met"] = p99 <= TARGETS["wake_p99_ms"] and p99 <= TARGETS["wake_floor_ratio"] * floor_p99
    return result
