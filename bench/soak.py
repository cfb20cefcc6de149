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
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

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

from bench.harness import (  # noqa: E402
    APPROVER,
    APPROVER_PASSWORD,
    BENCH_ENV,
    DATABASE_URL,
    SLACK_SIGNING_SECRET,
    Server,
    Worker,
    purge_broker,
    raise_open_files_limit,
)
from bench.soak_load import (  # noqa: E402
    EXPIRY_SECONDS,
    KINDS,
    SLACK_USER,
    Gateways,
    Recorder,
    allow_loop,
    ask,
    expiry_loop,
    log,
    reconnect_loop,
    slack_loop,
    web_loop,
)
from bench.soak_processes import Beat, database_sessions, process_snapshot  # noqa: E402

CONFIG = f"""
channels:
  - name: web
    kind: web
  - name: slack
    kind: slack
    bot_token: xoxb-soak
    signing_secret: {SLACK_SIGNING_SECRET}
    channel_id: C0SOAK
    api_base_url: __FAKE_SLACK__
agents:
  - name: soak-bot
    hooks:
      - kind: approval_gate
        name: web-gate
        tools: ["web__*"]
        channel: web
        approvers: ["{APPROVER}"]
      - kind: approval_gate
        name: slack-gate
        tools: ["slack__*"]
        channel: slack
        approvers: ["{SLACK_USER}"]
      - kind: approval_gate
        name: quick-gate
        tools: ["quick__*"]
        channel: web
        approvers: ["{APPROVER}"]
        timeout_seconds: {EXPIRY_SECONDS}
      - kind: approval_gate
        name: hold-gate
        tools: ["hold__*"]
        channel: web
        approvers: ["{APPROVER}"]
        timeout_seconds: null   # never expires: the reconnecting waiters re-poll it for the whole run
"""


# --------------------------------------------------------------------------- setup


def setup(fake_slack_url: str) -> dict[str, Any]:
    """Re-create the database (as bench/database.py does for `make bench`), apply this config; the agent's key."""
    config = CONFIG.replace("__FAKE_SLACK__", fake_slack_url)
    import psycopg
    from psycopg import sql

    os.environ.update(BENCH_ENV)
    dbname = DATABASE_URL.rsplit("/", 1)[1]
    with psycopg.connect(DATABASE_URL.rsplit("/", 1)[0] + "/postgres", autocommit=True) as conn:
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

    services.config_apply(config=parse_config_text(config), source="soak")
    _, key = services.api_key_create(agent=Agent.objects.get(name="soak-bot"), name="soak")
    get_user_model().objects.create_user(APPROVER, password=APPROVER_PASSWORD)
    return {"key": key}


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
    servers: list[Server] = []
    worker = beat = None
    try:
        ids = await asyncio.to_thread(setup, fake_slack.base_url)
        await asyncio.to_thread(purge_broker)
        servers = [Server(pin=False).start() for _ in range(args.servers)]
        worker = Worker(pin=False).start()
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
    raise_open_files_limit()
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
