"""3. crowd: 1,000 and 10,000 long-polls held by one fresh server, decided in one transaction: every
answer checked, commit → answer, memory and threads per waiter (docs/waiting.md#benchmark)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from bench.database import create_pending, decide_in_one_transaction
from bench.harness import TARGETS, Server, hold_waiters, log, proc_cpu_seconds, proc_status, summary_ms, wait_until_idle


async def part_crowd_level(n: int, ids: dict[str, Any], *, pin: bool) -> dict[str, Any]:
    log(f"3. crowd: {n} waiters: fresh server")
    server = Server(pin=pin).start()
    try:
        auth = f"Bearer {ids['key']}"
        stats = await server.connection()
        # Warm up every code path a waiter takes (auth, read, listener, executor threads, wake, answer).
        warm = await asyncio.to_thread(create_pending, 50, agent_id=ids["agent_id"], channel_id=ids["channel_id"])
        warm_conns, warm_answers, _ = await hold_waiters(server, stats, auth, warm)
        await asyncio.to_thread(decide_in_one_transaction, warm)
        await asyncio.gather(*warm_answers)
        for conn in warm_conns:
            conn.close()
        await wait_until_idle(server.pid, limit=60)
        before = proc_status(server.pid)

        wait_ids = await asyncio.to_thread(create_pending, n, agent_id=ids["agent_id"], channel_id=ids["channel_id"])
        conns, answers, registered_in = await hold_waiters(server, stats, auth, wait_ids)
        # Registered is not yet parked: each waiter still does its first read. Wait for the server to go quiet.
        settled_in = await wait_until_idle(server.pid, limit=120)
        during = proc_status(server.pid)
        cpu_before = proc_cpu_seconds(server.pid)
        await asyncio.sleep(5)
        idle_cpu = (proc_cpu_seconds(server.pid) - cpu_before) / 5
        premature = sum(1 for a in answers if a.done())

        log(f"3. crowd: {n} waiters held; deciding all of them in one transaction")
        cpu_before = proc_cpu_seconds(server.pid)
        expected, committed = await asyncio.to_thread(decide_in_one_transaction, wait_ids)
        results = await asyncio.wait_for(asyncio.gather(*answers), timeout=180)
        fan_out_cpu = proc_cpu_seconds(server.pid) - cpu_before  # (the decision's own work is this process's)
        correct = sum(
            1
            for cid, (status, body, _, _) in zip(wait_ids, results)
            if status == 200 and json.loads(body)["status"] == expected[cid] and json.loads(body)["id"] == cid
        )
        wake = [max(returned - committed, 0.0) for _, _, returned, _ in results]
        for conn in conns:
            conn.close()
        stats.close()
        kib_each = (during["rss_kib"] - before["rss_kib"]) / n
        result = {
            "waiters": n,
            "registered_in_s": round(registered_in, 2),
            "parked_in_s": round(registered_in + settled_in, 2),
            "kib_per_waiter": round(kib_each, 2),
            "threads_before": before["threads"],
            "threads_with_waiters": during["threads"],
            "idle_cpu_with_waiters": round(idle_cpu, 3),
            "answered_before_decision": premature,
            "woken_correctly": correct,
            "commit_to_answer_ms": summary_ms(wake),
            "server_cpu_ms_per_waiter": round(fan_out_cpu * 1000 / n, 4),
        }
        result["met"] = (
            correct == n and premature == 0 and result["commit_to_answer_ms"]["p99"] <= TARGETS["crowd_p99_ms"]
        )
        return result
    finally:
        server.stop()
