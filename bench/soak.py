#!/usr/bin/env python
"""`python bench/soak.py --minutes 30`: a mixed load for a chosen time, to see that nothing grows or fails.

The production process layout on one machine: two gateway servers (uvicorn, one process each; this
client spreads its requests over both, as a proxy would), a Celery worker and Celery beat, PostgreSQL
and Redis on loopback, the chat vendor a local fake (tests/fakes/slack_api.py, in this process). The
load, all of it at once for the whole run:

- allow: agents' allowed tool calls, paced (`--allow-rps`) over 4 keep-alive connections;
- web: an agent asks, long-polls; an approver signed in on the web page approves (GET the page, POST
  the form); measured from the form POST to the agent's answer;
- slack: an agent asks; the worker posts the card to the fake Slack; a signed click approves; measured
  from the click to the agent's answer (the card's delivery is counted too);
- expiry: an agent asks on a gate with a 5 s deadline and long-polls; measured from the deadline to the
  agent's `expired` answer (the servers' expiry queues and beat's sweep);
- reconnect: waiters on requests nobody decides, long-polling with a short timeout on a new connection
  each round, one round in five dropped by the agent before its answer.

Every minute it prints the latency percentiles of each kind and its errors; at the start and the end,
each process's RSS, threads, open file descriptors and sockets, and the database's sessions. Results
also go to bench/results/soak-<time>.json. The database (default gw_soak) is dropped and re-created.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import os
import random
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

ROOT = Path(__file__).resolve().parent.parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != ROOT / "bench"]
sys.path.insert(0, str(ROOT))

from tests.pg_pair import PgPair  # noqa: E402

# PostgreSQL of its own (initdb in a temp dir, a loopback port, fsync on): the machine's cluster is
# shared, and another user's connections must not run it out of `max_connections` mid-soak.
if "BENCH_DATABASE_URL" not in os.environ:
    OWN_POSTGRES = PgPair().start_primary_only()
    os.environ["BENCH_DATABASE_URL"] = f"postgres://postgres@127.0.0.1:{OWN_POSTGRES.primary_port}/gw_soak"
else:
    OWN_POSTGRES = None

from bench import run  # noqa: E402
from bench.aioclient import Connection  # noqa: E402

SLACK_USER = "USOAK1"
EXPIRY_SECONDS = 5
CONFIG = f"""
channels:
  - name: web
    kind: web
  - name: slack
    kind: slack
    bot_token: xoxb-soak
    signing_secret: {run.SLACK_SIGNING_SECRET}
    channel_id: C0SOAK
    api_base_url: __FAKE_SLACK__
agents:
  - name: soak-bot
    hooks:
      - kind: approval_gate
        name: web-gate
        tools: ["web__*"]
        channel: web
        approvers: ["{run.APPROVER}"]
      - kind: approval_gate
        name: slack-gate
        tools: ["slack__*"]
        channel: slack
        approvers: ["{SLACK_USER}"]
      - kind: approval_gate
        name: quick-gate
        tools: ["quick__*"]
        channel: web
        approvers: ["{run.APPROVER}"]
        timeout_seconds: {EXPIRY_SECONDS}
      - kind: approval_gate
        name: hold-gate
        tools: ["hold__*"]
        channel: web
        approvers: ["{run.APPROVER}"]
        timeout_seconds: null   # never expires: the reconnecting waiters re-poll it for the whole run
"""
KINDS = ("allow", "web", "slack", "expiry", "reconnect")
# What each kind's latency is: see the module's docstring; `reconnect` is the time beyond the round's timeout.


def log(message: str) -> None:
    print(f"[soak {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- setup and processes


def setup(fake_slack_url: str) -> dict[str, Any]:
    """Re-create the database (bench/run.py's way), apply this config; the agent's key."""
    run.CONFIG = CONFIG.replace("__FAKE_SLACK__", fake_slack_url)
    import psycopg
    from psycopg import sql

    os.environ.update(run.BENCH_ENV)
    dbname = run.DATABASE_URL.rsplit("/", 1)[1]
    with psycopg.connect(run.DATABASE_URL.rsplit("/", 1)[0] + "/postgres", autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(dbname)))
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(dbname)))
    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    from approvals import services
    from approvals.config_schema import parse_config_text
    from approvals.models import Agent

    services.config_apply(config=parse_config_text(run.CONFIG), source="soak")
    _, key = services.api_key_create(agent=Agent.objects.get(name="soak-bot"), name="soak")
    get_user_model().objects.create_user(run.APPROVER, password=run.APPROVER_PASSWORD)
    return {"key": key}


class Beat:
    def __init__(self) -> None:
        schedule = ROOT / "var" / "soak-celerybeat-schedule"
        cmd = [sys.executable, "-m", "celery", "--quiet", "-A", "gateway", "beat", "--loglevel", "WARNING",
               "-s", str(schedule)]  # fmt: skip
        self.proc = subprocess.Popen(cmd, cwd=ROOT, env={**os.environ, **run.BENCH_ENV})

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def process_snapshot(name: str, pid: int, *, children: bool = True) -> dict[str, Any]:
    """RSS, threads, open file descriptors and sockets of one process (and its children), from /proc."""
    pids = [pid, *_children(pid)] if children else [pid]
    rss = pss = threads = fds = sockets = 0
    for p in pids:
        try:
            status = run.proc_status(p)
            fd_names = os.listdir(f"/proc/{p}/fd")
        except (FileNotFoundError, ProcessLookupError):
            continue
        rss += status["rss_kib"]
        pss += _pss_kib(p)
        threads += status["threads"]
        links = []
        for fd in fd_names:
            try:
                links.append(os.readlink(f"/proc/{p}/fd/{fd}"))
            except FileNotFoundError:  # closed meanwhile (the listing's own descriptor, for this process)
                pass
        fds += len(links)
        sockets += sum(1 for link in links if link.startswith("socket:"))
    return {"process": name, "pids": len(pids), "rss_mib": round(rss / 1024, 1), "pss_mib": round(pss / 1024, 1),
            "threads": threads, "fds": fds, "sockets": sockets}  # fmt: skip


def _pss_kib(pid: int) -> int:
    """Proportional set size: shared pages (PostgreSQL's shared buffers) counted once across processes."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as rollup:
            for line in rollup:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        pass
    return 0


def _children(pid: int) -> list[int]:
    found = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except FileNotFoundError:
        return found
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/children") as children:
                for child in children.read().split():
                    found += [int(child), *_children(int(child))]
        except FileNotFoundError:
            pass
    return found


def database_sessions() -> int:
    import psycopg

    dbname = run.DATABASE_URL.rsplit("/", 1)[1]
    with psycopg.connect(run.DATABASE_URL.rsplit("/", 1)[0] + "/postgres", autocommit=True) as conn:
        return conn.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = %s", [dbname]).fetchone()[0]


# --------------------------------------------------------------------------- the load


class Recorder:
    """Latencies and errors per kind and minute."""

    def __init__(self) -> None:
        self.started = time.monotonic()
        self.samples: dict[tuple[int, str], list[float]] = {}
        self.errors: dict[tuple[int, str], int] = {}
        self.error_messages: list[str] = []
        self.counts: dict[str, int] = {}

    def minute(self) -> int:
        return int((time.monotonic() - self.started) // 60)

    def ok(self, kind: str, seconds: float) -> None:
        self.samples.setdefault((self.minute(), kind), []).append(seconds)

    def count(self, what: str) -> None:
        self.counts[what] = self.counts.get(what, 0) + 1

    def error(self, kind: str, message: str) -> None:
        key = (self.minute(), kind)
        self.errors[key] = self.errors.get(key, 0) + 1
        if len(self.error_messages) < 50:
            self.error_messages.append(f"min {key[0]} {kind}: {message}")
            log(f"ERROR {kind}: {message}")

    def row(self, minute: int) -> dict[str, Any]:
        row: dict[str, Any] = {"minute": minute}
        for kind in KINDS:
            values = [v * 1000 for v in self.samples.get((minute, kind), [])]
            row[kind] = {
                "n": len(values),
                "p50": round(run.percentile(values, 50), 1) if values else None,
                "p99": round(run.percentile(values, 99), 1) if values else None,
                "max": round(max(values), 1) if values else None,
                "errors": self.errors.get((minute, kind), 0),
            }
        return row


class Gateways:
    """The servers behind the 'proxy': each new connection goes to the next one."""

    def __init__(self, servers: list[run.Server]) -> None:
        self.servers = servers
        self.turn = 0

    async def connection(self) -> Connection:
        self.turn += 1
        return await self.servers[self.turn % len(self.servers)].connection()


def _moment(value: str) -> float:
    return dt.datetime.fromisoformat(value).timestamp()


async def ask(gateways: Gateways, auth: dict[str, str], tool: str, **args: Any) -> dict[str, Any]:
    """One ask on a connection of its own (a keep-alive connection idle for 5 s is closed by uvicorn)."""
    conn = await gateways.connection()
    try:
        return await conn.json("POST", "/api/v1/hooks/pre-tool-use", headers=auth,
                               payload={"session_id": "soak", "tool_name": tool, "tool_args": args})  # fmt: skip
    finally:
        conn.close()


async def long_poll(gateways: Gateways, auth: dict[str, str], cid: str, timeout: float = 60) -> dict[str, Any]:
    """Wait for the request's final state as an agent does: re-poll on a pending answer."""
    while True:
        conn = await gateways.connection()
        try:
            status, body = await conn.request(
                "GET", f"/api/v1/confirmations/{cid}/wait?timeout={timeout}", headers=auth
            )
        finally:
            conn.close()
        if status != 200:
            raise RuntimeError(f"wait answered {status}: {body[:200]!r}")
        state = json.loads(body)
        if state["status"] != "pending":
            return state


async def allow_loop(gateways: Gateways, auth: dict[str, str], rec: Recorder, stop: float, rps: float) -> None:
    conn = await gateways.connection()
    body = json.dumps({"session_id": "soak-allow", "tool_name": "fs__read", "tool_args": {"path": "/tmp/x"}}).encode()
    headers = {"content-type": "application/json", **auth}
    interval = 4 / rps  # four of these loops
    next_at = time.monotonic()
    while time.monotonic() < stop:
        next_at += interval
        t0 = time.perf_counter()
        try:
            status, data = await conn.request("POST", "/api/v1/hooks/pre-tool-use", headers=headers, body=body)
            if status == 200 and json.loads(data)["decision"] == "allow":
                rec.ok("allow", time.perf_counter() - t0)
            else:
                rec.error("allow", f"{status} {data[:200]!r}")
        except (OSError, asyncio.IncompleteReadError) as exc:
            rec.error("allow", repr(exc))
            conn.close()
            conn = await gateways.connection()
        await asyncio.sleep(max(0.0, next_at - time.monotonic()))
    conn.close()


class WebApprover:
    """The approver on the web page: signed in once, then GET page + POST form per request."""

    CSRF = re.compile(r'name="csrfmiddlewaretoken" value="([^"]+)"')

    def __init__(self, server: run.Server) -> None:
        self.server = server
        self.jar: dict[str, str] = {}
        self.conn: Connection | None = None

    async def sign_in(self) -> None:
        self.conn = await self.server.connection()
        _, headers, body = await self.conn.request_full("GET", "/login/")
        run._cookies(headers, self.jar)
        token = self.CSRF.search(body.decode()).group(1)  # type: ignore[union-attr]
        form = urlencode({"username": run.APPROVER, "password": run.APPROVER_PASSWORD, "csrfmiddlewaretoken": token})
        status, headers, _ = await self.conn.request_full(
            "POST", "/login/", body=form.encode(),
            headers={"content-type": "application/x-www-form-urlencoded", "cookie": run._cookie_header(self.jar)},
        )  # fmt: skip
        assert status == 302, status
        run._cookies(headers, self.jar)

    async def approve(self, cid: str) -> None:
        assert self.conn is not None
        page = f"/approvals/{cid}/"
        status, headers, body = await self.conn.request_full(
            "GET", page, headers={"cookie": run._cookie_header(self.jar)}
        )
        if status != 200:
            raise RuntimeError(f"page answered {status}")
        run._cookies(headers, self.jar)
        token = self.CSRF.search(body.decode()).group(1)  # type: ignore[union-attr]
        form = urlencode({"decision": "approve", "reason": "", "csrfmiddlewaretoken": token}).encode()
        headers = {"content-type": "application/x-www-form-urlencoded", "cookie": run._cookie_header(self.jar),
                   "referer": f"http://127.0.0.1:{self.server.port}{page}"}  # fmt: skip
        status, answer_headers, _ = await self.conn.request_full("POST", page, headers=headers, body=form)
        if status != 302:
            raise RuntimeError(f"form POST answered {status}")
        run._cookies(answer_headers, self.jar)


async def web_loop(gateways: Gateways, auth: dict[str, str], rec: Recorder, stop: float, every: float) -> None:
    approver = WebApprover(gateways.servers[0])
    await approver.sign_in()
    i = 0
    while time.monotonic() < stop:
        i += 1
        started = time.monotonic()
        try:
            cid = (await ask(gateways, auth, "web__pay", i=i))["confirmation_id"]
            waiter = asyncio.ensure_future(long_poll(gateways, auth, cid))
            await asyncio.sleep(0.05)
            posted = time.perf_counter()
            await approver.approve(cid)
            state = await asyncio.wait_for(waiter, 60)
            if state["status"] == "approved":
                rec.ok("web", time.perf_counter() - posted)
            else:
                rec.error("web", f"final {state['status']}")
        except Exception as exc:
            rec.error("web", repr(exc)[:300])
            approver = WebApprover(gateways.servers[0])
            await approver.sign_in()
        await asyncio.sleep(max(0.0, every - (time.monotonic() - started)))


async def slack_loop(gateways: Gateways, auth: dict[str, str], rec: Recorder, stop: float, every: float,
                     fake_slack: Any) -> None:  # fmt: skip
    from gateway_contract import sign_confirmation_id
    from tests.fakes.slack_api import block_actions_payload, form_body, signed_slack_request

    i = 0
    while time.monotonic() < stop:
        i += 1
        started = time.monotonic()
        try:
            cards_before = len(fake_slack.calls("chat.postMessage"))
            cid = (await ask(gateways, auth, "slack__pay", i=i))["confirmation_id"]
            waiter = asyncio.ensure_future(long_poll(gateways, auth, cid))
            deadline = time.monotonic() + 30
            while len(fake_slack.calls("chat.postMessage")) <= cards_before:  # the worker delivered the card
                if time.monotonic() > deadline:
                    raise RuntimeError("no card delivered within 30 s")
                await asyncio.sleep(0.02)
            rec.count("cards delivered")
            payload = block_actions_payload(
                action_id="approve", value=sign_confirmation_id(cid), user_id=SLACK_USER,
                response_url=fake_slack.response_url("soak"), channel_id="C0SOAK",
            )  # fmt: skip
            body = form_body(payload)
            headers = {"content-type": "application/x-www-form-urlencoded",
                       **signed_slack_request(run.SLACK_SIGNING_SECRET, body)}  # fmt: skip
            clicker = await gateways.connection()
            posted = time.perf_counter()
            try:
                status, data = await clicker.request("POST", "/channels/slack/callback", headers=headers, body=body)
            finally:
                clicker.close()
            if status != 200:
                raise RuntimeError(f"click answered {status}: {data[:200]!r}")
            state = await asyncio.wait_for(waiter, 60)
            if state["status"] == "approved":
                rec.ok("slack", time.perf_counter() - posted)
            else:
                rec.error("slack", f"final {state['status']}")
        except Exception as exc:
            rec.error("slack", repr(exc)[:300])
        await asyncio.sleep(max(0.0, every - (time.monotonic() - started)))


async def expiry_loop(gateways: Gateways, auth: dict[str, str], rec: Recorder, stop: float, every: float) -> None:
    pending: set[asyncio.Task] = set()
    i = 0

    async def one(cid: str) -> None:
        try:
            conn = await gateways.connection()
            try:
                status, body = await conn.request("GET", f"/api/v1/confirmations/{cid}/wait?timeout=0", headers=auth)
            finally:
                conn.close()
            if status != 200:
                raise RuntimeError(f"wait answered {status}: {body[:200]!r}")
            expires_at = _moment(json.loads(body)["expires_at"])
            state = await asyncio.wait_for(long_poll(gateways, auth, cid), 60)
            if state["status"] == "expired":
                rec.ok("expiry", max(0.0, time.time() - expires_at))
            else:
                rec.error("expiry", f"final {state['status']}")
        except Exception as exc:
            rec.error("expiry", repr(exc)[:300])

    while time.monotonic() < stop:
        i += 1
        started = time.monotonic()
        try:
            cid = (await ask(gateways, auth, "quick__deploy", i=i))["confirmation_id"]
            task = asyncio.ensure_future(one(cid))
            pending.add(task)
            task.add_done_callback(pending.discard)
        except Exception as exc:
            rec.error("expiry", repr(exc)[:300])
        await asyncio.sleep(max(0.0, every - (time.monotonic() - started)))
    if pending:
        await asyncio.wait(pending, timeout=EXPIRY_SECONDS + 30)


async def reconnect_loop(gateways: Gateways, auth: dict[str, str], rec: Recorder, stop: float, cid: str,
                         seed: int) -> None:  # fmt: skip
    """One agent re-polling a request nobody decides: a new connection per round, some dropped early."""
    rng = random.Random(seed)
    while time.monotonic() < stop:
        conn = await gateways.connection()
        t0 = time.perf_counter()
        try:
            if rng.random() < 0.2:  # the agent goes away mid-wait
                conn.send("GET", f"/api/v1/confirmations/{cid}/wait?timeout=10", headers=auth)
                await asyncio.sleep(rng.uniform(0.05, 1.0))
                rec.count("waits dropped by the agent")
                continue
            status, body = await conn.request("GET", f"/api/v1/confirmations/{cid}/wait?timeout=2", headers=auth)
            if status == 200 and json.loads(body)["status"] == "pending":
                rec.ok("reconnect", max(0.0, time.perf_counter() - t0 - 2))  # beyond its 2 s timeout
            else:
                rec.error("reconnect", f"{status} {body[:200]!r}")
        except Exception as exc:
            rec.error("reconnect", repr(exc)[:300])
            await asyncio.sleep(0.5)
        finally:
            conn.close()


# --------------------------------------------------------------------------- report


def minute_table(rows: list[dict[str, Any]]) -> str:
    head = "| min | " + " | ".join(f"{k} n / p50 / p99 / max ms" for k in KINDS) + " | errors |"
    lines = [head, "|" + "---|" * (len(KINDS) + 2)]
    for row in rows:
        cells = []
        for kind in KINDS:
            c = row[kind]
            cells.append(f"{c['n']} / {c['p50']} / {c['p99']} / {c['max']}" if c["n"] else "0")
        errors = sum(row[k]["errors"] for k in KINDS)
        lines.append(f"| {row['minute'] + 1} | " + " | ".join(cells) + f" | {errors} |")
    return "\n".join(lines)


def process_table(start: list[dict[str, Any]], end: list[dict[str, Any]]) -> str:
    lines = ["| process | RSS MiB | PSS MiB | threads | fds | sockets |", "|---|---|---|---|---|---|"]
    for a, b in zip(start, end, strict=True):
        lines.append(
            f"| {a['process']} | {a['rss_mib']} → {b['rss_mib']} | {a['pss_mib']} → {b['pss_mib']} | "
            f"{a['threads']} → {b['threads']} | {a['fds']} → {b['fds']} | {a['sockets']} → {b['sockets']} |"
        )
    return "\n".join(lines)


async def soak(args: argparse.Namespace) -> dict[str, Any]:
    from tests.fakes.slack_api import FakeSlack

    fake_slack = FakeSlack().start()
    servers: list[run.Server] = []
    worker = beat = None
    try:
        ids = await asyncio.to_thread(setup, fake_slack.base_url)
        await asyncio.to_thread(run.purge_broker)
        servers = [run.Server(pin=False).start() for _ in range(args.servers)]
        worker = run.Worker(pin=False).start()
        beat = Beat()
        gateways = Gateways(servers)
        auth = {"authorization": f"Bearer {ids['key']}"}
        held = [(await ask(gateways, auth, "hold__wait", i=i))["confirmation_id"] for i in range(args.reconnecting)]

        def snapshot() -> dict[str, Any]:
            named = [(f"server {n + 1}", s.pid) for n, s in enumerate(servers)]
            named += [("celery worker", worker.pid), ("celery beat", beat.pid)]
            if OWN_POSTGRES is not None:  # the postmaster and every backend
                postmaster = int((OWN_POSTGRES.primary_dir / "postmaster.pid").read_text().split()[0])
                named.append(("postgres (all backends)", postmaster))
            processes = [process_snapshot(name, pid) for name, pid in named]
            processes.append(process_snapshot("soak client + fake Slack", os.getpid(), children=False))
            return {"processes": processes, "database_sessions": database_sessions()}

        await asyncio.sleep(10)  # every process up and connected
        start = snapshot()
        log(f"start: {json.dumps(start)}")
        rec = Recorder()
        stop = time.monotonic() + args.minutes * 60
        tasks = [allow_loop(gateways, auth, rec, stop, args.allow_rps) for _ in range(4)]
        tasks.append(web_loop(gateways, auth, rec, stop, args.every))
        tasks.append(slack_loop(gateways, auth, rec, stop, args.every, fake_slack))
        tasks.append(expiry_loop(gateways, auth, rec, stop, args.every))
        tasks += [reconnect_loop(gateways, auth, rec, stop, cid, n) for n, cid in enumerate(held)]

        async def report() -> None:
            shown = 0
            while time.monotonic() < stop + 5:
                await asyncio.sleep(5)
                while rec.minute() > shown:
                    log(minute_table([rec.row(shown)]).splitlines()[-1])
                    shown += 1

        reporter = asyncio.ensure_future(report())
        warmed: dict[str, Any] = {}

        async def after_warm_up() -> None:
            await asyncio.sleep(min(60, args.minutes * 30))
            warmed.update(snapshot())
            log(f"after warm-up: {json.dumps(warmed)}")

        warm_up = asyncio.ensure_future(after_warm_up())
        await asyncio.gather(*tasks)
        await warm_up
        reporter.cancel()
        await asyncio.sleep(10)  # in-flight work settles (cards, expiries) before the last snapshot
        end = snapshot()
        minutes = int(args.minutes + 0.999)
        rows = [rec.row(m) for m in range(minutes)]
        return {
            "minutes": args.minutes,
            "servers": args.servers,
            "rows": rows,
            "start": start,
            "warmed": warmed,
            "end": end,
            "counts": rec.counts,
            "errors": rec.error_messages,
            "total_errors": sum(rec.errors.values()),
            "load": {"allow_rps": args.allow_rps, "every_s": args.every, "reconnecting": args.reconnecting},
        }
    finally:
        for server in servers:
            server.stop()
        if worker is not None:
            worker.stop()
        if beat is not None:
            beat.stop()
        fake_slack.stop()
        if OWN_POSTGRES is not None:
            OWN_POSTGRES.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=30)
    parser.add_argument("--servers", type=int, default=2)
    parser.add_argument("--allow-rps", type=float, default=40, help="allowed calls per second (all four loops)")
    parser.add_argument("--every", type=float, default=2.0, help="seconds between a web, a Slack and an expiring ask")
    parser.add_argument("--reconnecting", type=int, default=20, help="agents re-polling undecided requests")
    args = parser.parse_args()
    run.raise_open_files_limit()
    results = asyncio.run(soak(args))
    print(f"\nSoak: {args.minutes:g} min, {args.servers} servers, {results['total_errors']} errors\n")
    print(minute_table(results["rows"]))
    print()
    print("At the start (idle) → at the end:\n")
    print(process_table(results["start"]["processes"], results["end"]["processes"]))
    print("\nAfter the first minute (warmed up) → at the end:\n")
    print(process_table(results["warmed"]["processes"], results["end"]["processes"]))
    sessions = [results[k]["database_sessions"] for k in ("start", "warmed", "end")]
    print(f"\ndatabase sessions: start {sessions[0]}, warmed up {sessions[1]}, end {sessions[2]}")
    print(f"counts: {results['counts']}")
    for message in results["errors"]:
        print(f"error: {message}")
    out = ROOT / "bench" / "results"
    out.mkdir(exist_ok=True)
    path = out / f"soak-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.write_text(json.dumps(results, indent=2))
    print(f"\n{path}")
    return 0 if results["total_errors"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
