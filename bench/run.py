#!/usr/bin/env python
"""`make bench`: how fast a waiting agent wakes, how many can wait, what the allow path costs.

Runs the real server (`uvicorn`, one process, `bench.asgi` = the gateway plus
two bench-only routes) against PostgreSQL on loopback, and drives it from this
process with a raw asyncio HTTP client:

(a) decision latency: an agent long-polls `GET /api/v1/confirmations/<id>/wait`;
    an approver clicks Approve in Slack, i.e. a signed Slack interactivity POST
    to `/channels/<name>/callback` (the adapter verifies the signature with
    slack_sdk, then the decision's conditional UPDATE + pg_notify commit).
    Latency = the agent's answer arriving minus the approver's POST being
    answered (and, for a fuller picture, minus the POST being sent). Beside it,
    the raw floor: a bare NOTIFY -> LISTEN round trip on the same PostgreSQL.
(b) concurrent waiters: N long-polls held by one fresh server process; RSS and
    thread count from /proc before and after; then all N are decided in one
    transaction (half approved, half rejected, one pg_notify each) and every
    answer is checked.
(c) allow path: closed-loop load on pre-tool-use for an ungated tool (auth,
    hook chain, one audited ToolCall row) beside `POST /bench/insert`, a
    minimal Django async view doing one INSERT, same server, same run.

Results: a table on stdout and JSON in bench/results/. The database
(default gw_bench) is dropped, re-created and migrated on every run.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import os
import resource
import secrets
import signal
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
# Run as a script: import from the repository, never from bench/ itself.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != ROOT / "bench"]
sys.path.insert(0, str(ROOT))

from bench.aioclient import Connection  # noqa: E402

DATABASE_URL = os.environ.get("BENCH_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/gw_bench")
REDIS_URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/6")
BROKER_URL = os.environ.get("BENCH_BROKER_URL", "redis://127.0.0.1:6379/7")
SLACK_SIGNING_SECRET = secrets.token_hex(16)
SLACK_USER = "UBENCH1"
SERVER_CPU, CLIENT_CPU = 0, 1

BENCH_ENV = {
    "DJANGO_SETTINGS_MODULE": "bench.settings",
    "DATABASE_URL": DATABASE_URL,
    "REDIS_URL": REDIS_URL,
    "CELERY_BROKER_URL": BROKER_URL,
    "GATEWAY_CHANNEL_PREFIX": "gw_bench",
    "GATEWAY_SECRET_KEY": secrets.token_urlsafe(40),  # shared with the server: we sign Slack button values
    "GATEWAY_WAIT_MAX_SECONDS": "600",
    "GATEWAY_LOG_LEVEL": "WARNING",
    "GATEWAY_VAR_DIR": str(ROOT / "var" / "bench"),
    "GATEWAY_PUBLIC_URL": "http://127.0.0.1:8000",
}

CONFIG = f"""
channels:
  - name: slack-bench
    kind: slack
    bot_token: xoxb-bench
    signing_secret: {SLACK_SIGNING_SECRET}
    channel_id: C0BENCH
    api_base_url: http://127.0.0.1:9/api/   # loopback discard port: nothing leaves the machine
agents:
  - name: bench-bot
    hooks:
      - kind: approval_gate
        name: pay-gate
        tools: ["oa__*"]
        channel: slack-bench
        approvers: ["{SLACK_USER}"]
"""

TARGETS = {
    "a_p99_ms": 10.0,
    "a_floor_ratio": 5.0,
    "b_waiters": 10_000,
    "b_kib_per_waiter": 16.0,
    "c_ratio": 0.70,
}


# --------------------------------------------------------------------------- helpers


def log(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    index = min(len(ordered) - 1, max(0, round(q / 100 * len(ordered) + 0.5) - 1))
    return ordered[index]


def summary_ms(seconds: list[float]) -> dict[str, float]:
    ms = [s * 1000 for s in seconds]
    return {
        "n": len(ms),
        "p50": round(percentile(ms, 50), 3),
        "p99": round(percentile(ms, 99), 3),
        "max": round(max(ms), 3),
        "mean": round(statistics.fmean(ms), 3),
    }


def raise_open_files_limit() -> int:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def proc_status(pid: int) -> dict[str, int]:
    """RSS (KiB) and thread count of a process, from /proc."""
    rss = 0
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1])
    return {"rss_kib": rss, "threads": len(os.listdir(f"/proc/{pid}/task"))}


def proc_cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --------------------------------------------------------------------------- database


def setup_database() -> dict[str, Any]:
    """Re-create and migrate the benchmark database; apply the config; return the agent's key and ids."""
    import psycopg
    from psycopg import sql

    os.environ.update(BENCH_ENV)
    dbname = DATABASE_URL.rsplit("/", 1)[1]
    admin_url = DATABASE_URL.rsplit("/", 1)[0] + "/postgres"
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(dbname)))
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(dbname)))

    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)

    from approvals import services
    from approvals.models import Agent, Channel
    from hooks.schema import parse_config_text

    services.config_apply(config=parse_config_text(CONFIG), source="bench")
    agent = Agent.objects.get(name="bench-bot")
    _, key = services.api_key_create(agent=agent, name="bench")
    return {"key": key, "agent_id": agent.pk, "channel_id": Channel.objects.get(name="slack-bench").pk}


def create_pending(n: int, *, agent_id: int, channel_id: int) -> list[str]:
    """N pending requests straight into the table (their creation is not what (b) measures)."""
    from approvals.models import ConfirmationRequest

    rows = [
        ConfirmationRequest(
            agent_id=agent_id, channel_id=channel_id, session_id="bench-b", tool_name="oa__pay", tool_args={"i": i}
        )
        for i in range(n)
    ]
    ConfirmationRequest.objects.bulk_create(rows, batch_size=2000)
    return [str(r.pk) for r in rows]


def decide_all(ids: list[str]) -> dict[str, str]:
    """Approve the even ones and reject the odd ones in ONE transaction, with one pg_notify per id,
    as `services._transition` does for each; returns the expected status per id."""
    from django.db import connection, transaction
    from django.utils import timezone

    from approvals.models import ConfirmationRequest
    from gateway.realtime import CHANNEL

    expected = {cid: ("approved" if i % 2 == 0 else "rejected") for i, cid in enumerate(ids)}
    now = timezone.now()
    with transaction.atomic():
        for status in ("approved", "rejected"):
            chosen = [cid for cid, s in expected.items() if s == status]
            ConfirmationRequest.objects.filter(pk__in=chosen, status="pending").update(
                status=status, decided_by="bench", decided_at=now
            )
        with connection.cursor() as cursor:
            cursor.execute("SELECT count(pg_notify(%s, x)) FROM unnest(%s::text[]) AS x", [CHANNEL, ids])
    return expected


# --------------------------------------------------------------------------- the server


class Server:
    """`uvicorn bench.asgi:application`, one process, pinned to one CPU."""

    def __init__(self, *, pin: bool) -> None:
        self.port = free_port()
        self.pin = pin
        self.proc: subprocess.Popen | None = None

    def start(self) -> Server:
        def prepare() -> None:
            raise_open_files_limit()
            if self.pin:
                os.sched_setaffinity(0, {SERVER_CPU})

        cmd = [
            sys.executable, "-m", "uvicorn", "bench.asgi:application",
            "--host", "127.0.0.1", "--port", str(self.port),
            "--interface", "asgi3", "--lifespan", "off", "--log-level", "warning", "--no-access-log",
            "--backlog", "4096",
        ]  # fmt: skip
        self.proc = subprocess.Popen(cmd, cwd=ROOT, env={**os.environ, **BENCH_ENV}, preexec_fn=prepare)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the server exited with {self.proc.returncode}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1) as s:
                    s.sendall(b"GET /healthz HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
                    if s.recv(64).startswith(b"HTTP/1.1 200"):
                        return self
            except OSError:
                time.sleep(0.1)
        raise RuntimeError("the server did not answer /healthz within 30 s")

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    async def connection(self) -> Connection:
        return await Connection("127.0.0.1", self.port).open()


async def waiters_registered(stats: Connection) -> int:
    """How many waiters the server holds (`/bench/stats`); reconnects if the server closed an idle connection."""
    for attempt in (1, 2):
        try:
            return (await stats.json("GET", "/bench/stats"))["waiters"]
        except (asyncio.IncompleteReadError, ConnectionError):
            if attempt == 2:
                raise
            stats.close()
            await stats.open()
    raise AssertionError("unreachable")


# --------------------------------------------------------------------------- (a) decision latency


async def raw_floor(samples: int, warmup: int = 50) -> list[float]:
    """NOTIFY on one autocommit connection -> the LISTENing connection's notifies() yields it."""
    import psycopg

    from gateway.realtime import _conninfo

    conninfo = _conninfo()
    async with await psycopg.AsyncConnection.connect(conninfo, autocommit=True) as listener, \
            await psycopg.AsyncConnection.connect(conninfo, autocommit=True) as sender:  # fmt: skip
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


async def part_a(server: Server, ids: dict[str, Any], decisions: int, warmup: int = 20) -> dict[str, Any]:
    from channels_ext.base import sign_confirmation_id
    from tests.fakes.slack_api import block_actions_payload, form_body, signed_slack_request

    log(f"(a) raw floor: {decisions} NOTIFY -> LISTEN round trips")
    floor = await raw_floor(decisions)

    log(f"(a) {decisions} decisions by signed Slack click while the agent long-polls")
    auth = {"authorization": f"Bearer {ids['key']}"}
    agent, waiter, approver, stats = [await server.connection() for _ in range(4)]
    from_answer, from_post, callback, from_decided_at = [], [], [], []

    async def read_wait() -> tuple[int, bytes, float, float]:
        status, _, body = await waiter.read_response()
        return status, body, time.perf_counter(), time.time()

    for i in range(decisions + warmup):
        pending = await agent.json(
            "POST",
            "/api/v1/hooks/pre-tool-use",
            headers=auth,
            payload={"session_id": "bench-a", "tool_name": "oa__pay", "tool_args": {"i": i}, "tool_call_id": f"a{i}"},
        )
        cid = pending["confirmation_id"]
        assert pending["decision"] == "pending", pending
        waiter.send("GET", f"/api/v1/confirmations/{cid}/wait?timeout=60", headers=auth)
        answer = asyncio.ensure_future(read_wait())
        while await waiters_registered(stats) < 1:
            await asyncio.sleep(0.001)
        await asyncio.sleep(0.01)  # past its first read: parked on the future, as a real waiter is
        assert not answer.done()

        body = form_body(block_actions_payload(action_id="approve", value=sign_confirmation_id(cid), user_id=SLACK_USER))
        headers = {"content-type": "application/x-www-form-urlencoded", **signed_slack_request(SLACK_SIGNING_SECRET, body)}
        posted = time.perf_counter()
        approver.send("POST", "/channels/slack-bench/callback", headers=headers, body=body)
        click_status, _, _ = await approver.read_response()
        answered = time.perf_counter()
        status, data, returned, returned_wall = await answer
        assert click_status == 200, click_status
        decided = json.loads(data)
        assert status == 200 and decided["status"] == "approved", (status, data[:200])
        if i >= warmup:
            from_answer.append(max(returned - answered, 0.0))
            from_post.append(returned - posted)
            callback.append(answered - posted)
            # decided_at is stamped (same host clock) just before the conditional UPDATE.
            from_decided_at.append(returned_wall - dt.datetime.fromisoformat(decided["decided_at"]).timestamp())
    for conn in (agent, waiter, approver, stats):
        conn.close()

    result = {
        "decisions": decisions,
        "decision_path": "signed Slack block_actions POST /channels/slack-bench/callback (slack_sdk verification, "
        "row lock, approver check, conditional UPDATE + pg_notify, card-redraw outbox row queued to Redis)",
        "wait_path": "GET /api/v1/confirmations/<id>/wait?timeout=60 (thin ASGI long-poll)",
        "from_callback_answered_ms": summary_ms(from_answer),
        "from_callback_sent_ms": summary_ms(from_post),
        "callback_round_trip_ms": summary_ms(callback),
        "from_decision_stamped_ms": summary_ms(from_decided_at),
        "raw_floor_ms": summary_ms(floor),
        "woken_before_callback_answered": sum(1 for v in from_answer if v == 0.0),
    }
    p99, floor_p99 = result["from_callback_answered_ms"]["p99"], result["raw_floor_ms"]["p99"]
    result["p99_over_floor_p99"] = round(p99 / floor_p99, 2) if floor_p99 else None
    result["met"] = p99 <= TARGETS["a_p99_ms"] and p99 <= TARGETS["a_floor_ratio"] * floor_p99
    return result


# --------------------------------------------------------------------------- (b) concurrent waiters


async def part_b_level(n: int, ids: dict[str, Any], *, pin: bool, timeout: int = 300) -> dict[str, Any]:
    log(f"(b) {n} waiters: fresh server")
    server = Server(pin=pin).start()
    try:
        auth = f"Bearer {ids['key']}"
        stats = await server.connection()

        # Warm up: every code path a waiter takes (auth, read, listener, executor threads, wake, answer).
        warm = await asyncio.to_thread(create_pending, 50, agent_id=ids["agent_id"], channel_id=ids["channel_id"])
        warm_conns = [await server.connection() for _ in warm]
        for conn, cid in zip(warm_conns, warm):
            conn.send("GET", f"/api/v1/confirmations/{cid}/wait?timeout=60", headers={"authorization": auth})
        while await waiters_registered(stats) < len(warm):
            await asyncio.sleep(0.05)
        await asyncio.to_thread(decide_all, warm)
        for conn in warm_conns:
            await conn.read_response()
            conn.close()
        await wait_until_idle(server.pid, limit=60)
        before = proc_status(server.pid)

        wait_ids = await asyncio.to_thread(create_pending, n, agent_id=ids["agent_id"], channel_id=ids["channel_id"])
        started = time.perf_counter()
        conns: list[Connection] = []
        for batch in range(0, n, 500):
            chunk = [Connection("127.0.0.1", server.port) for _ in wait_ids[batch : batch + 500]]
            await asyncio.gather(*(c.open() for c in chunk))
            conns.extend(chunk)
        for conn, cid in zip(conns, wait_ids):
            conn.send("GET", f"/api/v1/confirmations/{cid}/wait?timeout={timeout}", headers={"authorization": auth})

        async def read(conn: Connection) -> tuple[int, bytes, float]:
            status, _, body = await conn.read_response()
            return status, body, time.perf_counter()

        answers = [asyncio.ensure_future(read(c)) for c in conns]
        while (registered := await waiters_registered(stats)) < n:
            if time.perf_counter() - started > 180:
                raise RuntimeError(f"only {registered} of {n} waiters registered after 180 s")
            await asyncio.sleep(0.2)
        registered_in = time.perf_counter() - started
        # Registered is not yet parked: each waiter still does its first read. Wait for the server to go quiet.
        settled_in = await wait_until_idle(server.pid, limit=120)
        during = proc_status(server.pid)
        cpu_before = proc_cpu_seconds(server.pid)
        await asyncio.sleep(5)
        idle_cpu = (proc_cpu_seconds(server.pid) - cpu_before) / 5
        premature = sum(1 for a in answers if a.done())

        log(f"(b) {n} waiters held; deciding all of them in one transaction")
        expected = await asyncio.to_thread(decide_all, wait_ids)
        committed = time.perf_counter()
        results = await asyncio.wait_for(asyncio.gather(*answers), timeout=180)
        correct = sum(
            1
            for cid, (status, body, _) in zip(wait_ids, results)
            if status == 200 and json.loads(body)["status"] == expected[cid] and json.loads(body)["id"] == cid
        )
        wake = [returned - committed for _, _, returned in results]
        for conn in conns:
            conn.close()
        stats.close()

        kib_each = (during["rss_kib"] - before["rss_kib"]) / n
        result = {
            "waiters": n,
            "registered_in_s": round(registered_in, 2),
            "parked_in_s": round(registered_in + settled_in, 2),
            "rss_before_kib": before["rss_kib"],
            "rss_with_waiters_kib": during["rss_kib"],
            "kib_per_waiter": round(kib_each, 2),
            "threads_before": before["threads"],
            "threads_with_waiters": during["threads"],
            "threads_per_waiter": round((during["threads"] - before["threads"]) / n, 4),
            "idle_cpu_with_waiters": round(idle_cpu, 3),
            "answered_before_decision": premature,
            "woken_correctly": correct,
            "wake_after_commit_ms": summary_ms(wake),
        }
        result["met"] = (
            correct == n and premature == 0 and kib_each <= TARGETS["b_kib_per_waiter"] and during["threads"] <= before["threads"]
        )
        return result
    finally:
        server.stop()


async def wait_until_idle(pid: int, *, limit: float, below: float = 0.05) -> float:
    """Seconds until the process uses less than `below` of a core over a 1 s window."""
    started = time.perf_counter()
    while time.perf_counter() - started < limit:
        cpu = proc_cpu_seconds(pid)
        await asyncio.sleep(1)
        if proc_cpu_seconds(pid) - cpu < below:
            return time.perf_counter() - started
    raise RuntimeError(f"the server did not go idle within {limit:.0f} s")


# --------------------------------------------------------------------------- (c) allow path


async def closed_loop(server: Server, path: str, headers: dict[str, str], body: bytes, *, seconds: float, concurrency: int):
    conns = [await server.connection() for _ in range(concurrency)]
    latencies: list[float] = []
    errors = 0
    stop_at = time.perf_counter() + seconds

    async def worker(conn: Connection) -> None:
        nonlocal errors
        while time.perf_counter() < stop_at:
            t0 = time.perf_counter()
            status, _ = await conn.request("POST", path, headers=headers, body=body)
            latencies.append(time.perf_counter() - t0)
            errors += status != 200

    started = time.perf_counter()
    await asyncio.gather(*(worker(c) for c in conns))
    elapsed = time.perf_counter() - started
    for c in conns:
        c.close()
    return {"requests": len(latencies), "errors": errors, "rps": len(latencies) / elapsed, "latencies": latencies}


async def part_c(server: Server, ids: dict[str, Any], *, seconds: float, concurrency: int) -> dict[str, Any]:
    from approvals.models import ToolCall

    pre = (
        "/api/v1/hooks/pre-tool-use",
        {"authorization": f"Bearer {ids['key']}", "content-type": "application/json"},
        json.dumps({"session_id": "bench-c", "tool_name": "web__search", "tool_args": {"q": "weather"}}).encode(),
    )
    minimal = (f"/bench/insert?agent={ids['agent_id']}", {"content-type": "application/json"}, b'{"q": "weather"}')
    runs: dict[str, list[dict]] = {"pre_tool_use": [], "minimal_insert_view": []}
    log(f"(c) warm-up, then 2 x {seconds:.0f} s of each endpoint, interleaved, {concurrency} connections")
    for target in (pre, minimal):
        await closed_loop(server, *target, seconds=2, concurrency=concurrency)
    calls_before = await asyncio.to_thread(lambda: ToolCall.objects.filter(tool_name="web__search", decision="allow").count())
    for _ in range(2):
        runs["minimal_insert_view"].append(await closed_loop(server, *minimal, seconds=seconds, concurrency=concurrency))
        runs["pre_tool_use"].append(await closed_loop(server, *pre, seconds=seconds, concurrency=concurrency))
    audited = await asyncio.to_thread(lambda: ToolCall.objects.filter(tool_name="web__search", decision="allow").count())

    def combine(name: str) -> dict[str, Any]:
        rounds = runs[name]
        latencies = [v for r in rounds for v in r["latencies"]]
        return {
            "requests": sum(r["requests"] for r in rounds),
            "errors": sum(r["errors"] for r in rounds),
            "rps": round(statistics.fmean(r["rps"] for r in rounds), 1),
            "rps_per_round": [round(r["rps"], 1) for r in rounds],
            "latency_ms": summary_ms(latencies),
        }

    result = {"concurrency": concurrency, "seconds_per_round": seconds}
    result["pre_tool_use"] = combine("pre_tool_use")
    result["minimal_insert_view"] = combine("minimal_insert_view")
    result["audit_rows_written"] = audited - calls_before
    result["audit_rows_match_requests"] = audited - calls_before == result["pre_tool_use"]["requests"]
    result["ratio"] = round(result["pre_tool_use"]["rps"] / result["minimal_insert_view"]["rps"], 3)
    result["met"] = result["ratio"] >= TARGETS["c_ratio"] and result["pre_tool_use"]["errors"] == 0
    return result


# --------------------------------------------------------------------------- report


def table(results: dict[str, Any]) -> str:
    rows = ["| Part | Measure | Result | Target | Met |", "|---|---|---|---|---|"]
    mark = {True: "yes", False: "**no**"}
    if (a := results.get("a")) is not None:
        fa, fs, fl = a["from_callback_answered_ms"], a["from_callback_sent_ms"], a["raw_floor_ms"]
        rows.append(
            f"| (a) decision latency, {a['decisions']} decisions | Slack click answered → agent's long-poll returns, "
            f"p50 / p99 / max (0 = the agent had its answer first: {a['woken_before_callback_answered']} of "
            f"{a['decisions']}) | {fa['p50']:.2f} / {fa['p99']:.2f} / {fa['max']:.2f} ms "
            f"| p99 ≤ 10 ms and ≤ 5× floor ({a['p99_over_floor_p99']}×) | {mark[a['met']]} |"
        )
        rows.append(
            f"| | raw floor: NOTIFY → LISTEN, same PostgreSQL, p50 / p99 / max | "
            f"{fl['p50']:.2f} / {fl['p99']:.2f} / {fl['max']:.2f} ms | | |"
        )
        fd = a["from_decision_stamped_ms"]
        rows.append(
            f"| | decision stamped in the deciding transaction → agent's long-poll returns, p50 / p99 / max | "
            f"{fd['p50']:.2f} / {fd['p99']:.2f} / {fd['max']:.2f} ms | (for reference) | |"
        )
        rows.append(
            f"| | Slack click sent → agent's long-poll returns, p50 / p99 / max | "
            f"{fs['p50']:.2f} / {fs['p99']:.2f} / {fs['max']:.2f} ms | (for reference) | |"
        )
    for b in results.get("b", []):
        w = b["wake_after_commit_ms"]
        rows.append(
            f"| (b) {b['waiters']:,} long-poll waiters, one process | RSS per waiter; threads before → during "
            f"| {b['kib_per_waiter']:.1f} KiB; {b['threads_before']} → {b['threads_with_waiters']} "
            f"| ≤ 16 KiB, no thread each | {mark[b['met']]} |"
        )
        rows.append(
            f"| | woken correctly; commit → answer p50 / p99 / max; idle CPU while waiting "
            f"| {b['woken_correctly']:,} / {b['waiters']:,}; {w['p50']:.0f} / {w['p99']:.0f} / {w['max']:.0f} ms; "
            f"{b['idle_cpu_with_waiters'] * 100:.0f} % of a core | all | |"
        )
    if (c := results.get("c")) is not None:
        p, m = c["pre_tool_use"], c["minimal_insert_view"]
        rows.append(
            f"| (c) allow path, {c['concurrency']} connections | pre-tool-use (auth, hook chain, audited ToolCall): "
            f"req/s, p50 / p99 | {p['rps']:.0f} req/s, {p['latency_ms']['p50']:.1f} / {p['latency_ms']['p99']:.1f} ms "
            f"| ≥ 70 % of the minimal view ({c['ratio'] * 100:.0f} %) | {mark[c['met']]} |"
        )
        rows.append(
            f"| | minimal Django async view, one INSERT: req/s, p50 / p99 "
            f"| {m['rps']:.0f} req/s, {m['latency_ms']['p50']:.1f} / {m['latency_ms']['p99']:.1f} ms | | |"
        )
    return "\n".join(rows)


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    ids = await asyncio.to_thread(setup_database)
    results: dict[str, Any] = {}
    if "a" in args.parts or "c" in args.parts:
        server = Server(pin=args.pin).start()
        try:
            if "a" in args.parts:
                results["a"] = await part_a(server, ids, args.decisions)
            if "c" in args.parts:
                results["c"] = await part_c(server, ids, seconds=args.seconds, concurrency=args.concurrency)
        finally:
            server.stop()
    if "b" in args.parts:
        results["b"] = [await part_b_level(n, ids, pin=args.pin) for n in args.waiters]
    return results


def purge_broker() -> None:
    """Drop the card/redraw tasks the server queued (no worker runs in the benchmark)."""
    from gateway.celery import app

    try:
        app.control.purge()
    except Exception as exc:  # the results are what matter
        log(f"could not purge the benchmark broker: {exc}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--parts", default="abc", help="which parts to run (default: abc)")
    parser.add_argument("--decisions", type=int, default=500, help="(a) decisions measured (default 500)")
    parser.add_argument("--waiters", default="1000,10000", help="(b) waiter counts (default 1000,10000)")
    parser.add_argument("--seconds", type=float, default=6, help="(c) seconds per round (default 6)")
    parser.add_argument("--concurrency", type=int, default=8, help="(c) client connections (default 8)")
    parser.add_argument("--no-pin", dest="pin", action="store_false", help="do not pin server and client to a CPU each")
    args = parser.parse_args()
    args.waiters = [int(n) for n in args.waiters.split(",") if n]

    nofile = raise_open_files_limit()
    if args.waiters and max(args.waiters) + 100 > nofile:
        log(f"open-files limit is {nofile}: not enough for {max(args.waiters)} waiters")
        return 2
    if args.pin and len(os.sched_getaffinity(0)) >= 2:
        os.sched_setaffinity(0, {CLIENT_CPU})
    else:
        args.pin = False

    started = time.time()
    load_before = os.getloadavg()
    try:
        import uvloop

        results = uvloop.run(main_async(args))
    except ImportError:
        results = asyncio.run(main_async(args))
    purge_broker()

    report = {
        "when": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "duration_s": round(time.time() - started, 1),
        "machine": {
            "cpus": os.cpu_count(),
            "pinned": args.pin,
            "python": sys.version.split()[0],
            "loadavg_1m_before_after": [round(load_before[0], 2), round(os.getloadavg()[0], 2)],
        },
        "database": DATABASE_URL,
        "targets": TARGETS,
        **results,
    }
    out_dir = ROOT / "bench" / "results"
    out_dir.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    (out_dir / f"{stamp}.json").write_text(json.dumps(report, indent=2))
    (out_dir / "latest.json").write_text(json.dumps(report, indent=2))
    print(table(results))
    load = report["machine"]["loadavg_1m_before_after"]
    print(
        f"\n{os.cpu_count()} CPUs, server and client pinned to one each: {args.pin}; "
        f"load average {load[0]} before, {load[1]} after (other work on the machine inflates every figure)."
    )
    print(f"JSON: bench/results/{stamp}.json ({report['duration_s']} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
