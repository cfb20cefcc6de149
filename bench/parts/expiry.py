"""4. expiry: waiters whose requests' deadlines fall one after another, no beat running: each answer's
delay after its own deadline (docs/waiting.md#benchmark)."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
from typing import Any

from bench.database import create_pending
from bench.harness import TARGETS, Server, hold_waiters, log, summary_ms


async def part_expiry_level(n: int, ids: dict[str, Any], *, pin: bool, spread: float = 10.0,
                            lead: float = 20.0) -> dict[str, Any]:  # fmt: skip
    """N waiters whose requests' deadlines fall one after another over `spread` seconds, starting `lead`
    seconds from now (time to get them all parked). No beat runs: the server alone keeps the deadlines."""
    log(f"4. expiry: {n} waiters, deadlines over {spread:.0f} s: fresh server")
    server = Server(pin=pin).start()
    try:
        auth = f"Bearer {ids['key']}"
        stats = await server.connection()
        first = dt.datetime.now(dt.timezone.utc) + dt.timedelta(seconds=lead)
        deadlines = [first + dt.timedelta(seconds=spread * i / n) for i in range(n)]
        wait_ids = await asyncio.to_thread(
            create_pending, n, agent_id=ids["agent_id"], channel_id=ids["channel_id"], expires_at=deadlines
        )
        conns, answers, registered_in = await hold_waiters(server, stats, auth, wait_ids)
        if dt.datetime.now(dt.timezone.utc) >= first:
            raise RuntimeError(f"parking {n} waiters took {registered_in:.0f} s, longer than the {lead:.0f} s lead")
        results = await asyncio.wait_for(asyncio.gather(*answers), timeout=lead + spread + 120)
        late, correct = [], 0
        for deadline, (status, body, _, wall) in zip(deadlines, results):
            answer = json.loads(body)
            correct += status == 200 and answer["status"] == "expired"
            late.append(max(wall - deadline.timestamp(), 0.0))
        for conn in conns:
            conn.close()
        stats.close()
        result = {
            "waiters": n,
            "spread_s": spread,
            "expired_correctly": correct,
            "after_deadline_ms": summary_ms(late),
        }
        result["met"] = correct == n and result["after_deadline_ms"]["p99"] <= TARGETS["expiry_p99_ms"]
        return result
    finally:
        server.stop()
