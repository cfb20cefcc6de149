"""5. create and decide: pending requests created by 8 clients with a real Celery worker (web and Slack
channels), then an approver's decisions on the web page (docs/waiting.md#benchmark)."""

from __future__ import annotations

import asyncio
import json
import statistics
import time
from typing import Any

from bench.harness import (
    APPROVER,
    APPROVER_PASSWORD,
    CSRF_INPUT,
    TARGETS,
    Server,
    Worker,
    closed_loop,
    combine,
    cookie_header,
    cookies,
    log,
    proc_cpu_seconds,
    proc_run_seconds,
    summary_ms,
)


def postgres_sessions() -> int:
    """Sessions ever opened to the benchmark database (pg_stat_database, PostgreSQL 14+)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT sessions FROM pg_stat_database WHERE datname = current_database()")
        return cursor.fetchone()[0]


def outbox_backlog(agent_id: int) -> int:
    """The agent's outbox rows not yet done (cards to post, redraws)."""
    from approvals.models import Outbox

    return Outbox.objects.filter(status="pending", confirmation__agent_id=agent_id).count()


async def part_create(server: Server, worker: Worker, ids: dict[str, Any], *, seconds: float,
                      concurrency: int, channel: str = "web") -> dict[str, Any]:  # fmt: skip
    """`channel` web: the card is the request's page, recorded as posted in its own transaction;
    slack: the worker posts each card to the local fake Slack API."""
    from approvals.models import ConfirmationRequest, Outbox

    agent_id = ids[f"{channel}_agent_id"]
    headers = {"authorization": f"Bearer {ids[f'{channel}_key']}", "content-type": "application/json"}
    bodies = [
        json.dumps({"session_id": f"bench-create-{i % 50}", "tool_name": "oa__pay", "tool_args": {"i": i}}).encode()
        for i in range(100_000)
    ]
    log(f"5. create ({channel}): warm-up")
    await closed_loop(server, "/api/v1/hooks/pre-tool-use", headers, bodies[:2000], seconds=2, concurrency=concurrency)
    while await asyncio.to_thread(outbox_backlog, agent_id):
        await asyncio.sleep(0.2)
    before = await asyncio.to_thread(lambda: ConfirmationRequest.objects.filter(agent_id=agent_id).count())
    cpu_server, cpu_worker = proc_cpu_seconds(server.pid), proc_cpu_seconds(worker.pid)
    sessions_before = await asyncio.to_thread(postgres_sessions)
    log(f"5. create ({channel}): {seconds:.0f} s of pending requests, {concurrency} connections, a worker running")
    run = await closed_loop(server, "/api/v1/hooks/pre-tool-use", headers, bodies[2000:], seconds=seconds,
                            concurrency=concurrency)  # fmt: skip
    ended = time.perf_counter()
    backlog_at_end = await asyncio.to_thread(outbox_backlog, agent_id)
    while await asyncio.to_thread(outbox_backlog, agent_id):
        if time.perf_counter() - ended > 120:
            break
        await asyncio.sleep(0.1)
    drained_in = time.perf_counter() - ended
    new_sessions = await asyncio.to_thread(postgres_sessions) - sessions_before - 2  # the bench's own reads
    server_cpu = proc_cpu_seconds(server.pid) - cpu_server
    worker_cpu = proc_cpu_seconds(worker.pid) - cpu_worker
    created = await asyncio.to_thread(
        lambda: ConfirmationRequest.objects.filter(agent_id=agent_id).count()
    ) - before
    delivered = await asyncio.to_thread(
        lambda: Outbox.objects.filter(kind="card", status="sent", confirmation__agent_id=agent_id).count()
    )
    result = {
        "channel": channel,
        "concurrency": concurrency,
        "seconds": seconds,
        **combine([run]),
        "created": created,
        "cards_delivered_total": delivered,
        "backlog_at_end": backlog_at_end,
        "drained_in_s": round(drained_in, 2),
        "server_cpu_ms_each": round(server_cpu / max(created, 1) * 1000, 2),
        "worker_cpu_ms_each": round(worker_cpu / max(created, 1) * 1000, 2),
        "postgres_sessions_opened_each": round(max(new_sessions, 0) / max(created, 1), 3),
    }
    result["met"] = result["rps"] >= TARGETS["create_rps"] and run["errors"] == 0 and drained_in < 1.0
    return result


async def part_decide(server: Server, ids: dict[str, Any], *, decisions: int, read_decisions: int = 0) -> dict[str, Any]:
    """An approver, signed in on the web page, approves one pending request after another (the form POST):
    `decisions` as soon as each page is loaded, then `read_decisions` after reading it for 0.2–0.8 s — the
    click a gateway meets in use, on a process that was idle: its caches gone cold (on this machine a click
    after an idle half second takes 2–3 times the server's CPU of one right after another). Both with the
    server's CPU per click."""
    from urllib.parse import urlencode

    conn = await server.connection()
    jar: dict[str, str] = {}
    status, headers, body = await conn.request_full("GET", "/login/")
    cookies(headers, jar)
    token = CSRF_INPUT.search(body.decode()).group(1)  # type: ignore[union-attr]
    form = urlencode({"username": APPROVER, "password": APPROVER_PASSWORD, "csrfmiddlewaretoken": token}).encode()
    status, headers, _ = await conn.request_full(
        "POST", "/login/", headers={"content-type": "application/x-www-form-urlencoded", "cookie": cookie_header(jar)},
        body=form,
    )  # fmt: skip
    assert status == 302, status
    cookies(headers, jar)
    agent = await server.connection()
    auth = {"authorization": f"Bearer {ids['web_key']}"}
    warm = await _decisions(server, conn, agent, auth, jar, decisions, reading=0.0)
    read = await _decisions(server, conn, agent, auth, jar, read_decisions, reading=0.5) if read_decisions else None
    conn.close()
    agent.close()
    result = {"decisions": decisions, "form_post_ms": summary_ms(warm["times"]), "server_cpu_ms_each": warm["cpu_ms"]}
    if read is not None:
        result["after_reading"] = {"decisions": read_decisions, "form_post_ms": summary_ms(read["times"]),
                                   "server_cpu_ms_each": read["cpu_ms"]}  # fmt: skip
    result["met"] = result["form_post_ms"]["p50"] <= TARGETS["decide_p50_ms"]
    return result


async def _decisions(server: Server, conn: Any, agent: Any, auth: dict[str, str], jar: dict[str, str], decisions: int,
                     *, reading: float) -> dict[str, Any]:  # fmt: skip
    """`decisions` approvals (after 20 not counted), each POSTed `reading` × 0.4–1.6 s after its page loaded:
    sent → answered, and the server's CPU (all its threads) from send to answer, median per click."""
    import random
    from urllib.parse import urlencode

    pauses = random.Random(5)
    times, cpu = [], []
    log(f"5. decide: {decisions} approvals on the web page" + (", each after reading it" if reading else ""))
    for i in range(decisions + 20):
        pending = await agent.json(
            "POST", "/api/v1/hooks/pre-tool-use", headers=auth,
            payload={"session_id": "bench-decide", "tool_name": "oa__pay", "tool_args": {"d": i}},
        )  # fmt: skip
        page = f"/approvals/{pending['confirmation_id']}/"
        status, headers, body = await conn.request_full("GET", page, headers={"cookie": cookie_header(jar)})
        cookies(headers, jar)
        token = CSRF_INPUT.search(body.decode()).group(1)  # type: ignore[union-attr]
        form = urlencode({"decision": "approve", "reason": "", "csrfmiddlewaretoken": token}).encode()
        post_headers = {"content-type": "application/x-www-form-urlencoded", "cookie": cookie_header(jar),
                        "referer": f"http://127.0.0.1:{server.port}{page}"}  # fmt: skip
        if reading and i >= 20:  # (the 20 that warm the paths up are not read)
            await asyncio.sleep(reading * pauses.uniform(0.4, 1.6))
        cpu0 = proc_run_seconds(server.pid)
        t0 = time.perf_counter()
        status, headers, _ = await conn.request_full("POST", page, headers=post_headers, body=form)
        elapsed = time.perf_counter() - t0
        used = proc_run_seconds(server.pid) - cpu0
        assert status == 302, status
        cookies(headers, jar)
        if i >= 20:
            times.append(elapsed)
            cpu.append(used)
    return {"times": times, "cpu_ms": round(statistics.median(cpu) * 1000, 2)}
