#!/usr/bin/env python
"""`make bench`: what every tool call costs, and how fast and how many waiting agents are answered.

Runs the real server (`uvicorn`, one process pinned to one core, `bench.asgi` =
the gateway plus a stats route and a minimal view) against PostgreSQL on
loopback, with the bare Django reference (`bench.bare`) as a second server in
the same run, and drives both from this process (pinned to the other core)
with a raw asyncio HTTP client. Each target is printed beside its reference,
measured in the same run (docs/waiting.md explains the rows):

1. allow: the allowed pre-tool-use call (auth, hook chain, audited ToolCall)
   against the bare reference: throughput with 8 connections, and one call
   alone (p50 of sequential calls on one connection).
2. wake: commit of a decision → the waiting agent's long-poll answered, beside
   the raw NOTIFY → LISTEN floor; and, for the whole path, a signed Slack
   click sent → answered.
3. crowd: 10,000 (and 1,000) long-poll waiters on one process, decided in one
   transaction: all answered correctly, commit → answer; memory per waiter.
4. expiry: 2,000 and 10,000 waiters whose requests expire one after another:
   each answer's delay after its own deadline.
5. create and decide: pending requests created by 8 clients (row, event,
   outbox, card delivered by a real Celery worker — checked to keep up), server
   and worker CPU per request; an approver's decision on the web page, sent →
   answered, right after the page loaded and after reading it (the server idle
   meanwhile: the click a gateway meets in use), with the server's CPU a click.
6. growth: the allow path and the expiry sweep on an empty database and with
   1,000,000 ToolCall rows and 100,000 pending requests.
7. proxy: an allowed `tools/call` through the MCP proxy to a trivial upstream,
   beside the upstream called directly and the gateway's own allowed call;
   8 calls at once through one proxy (not serialized).
8. idle: the server, a worker and beat doing nothing: CPU share of a core
   (run first, on the fresh database).

Results: a table on stdout and JSON in bench/results/. The database
(default gw_bench) is dropped, re-created and migrated on every run.

Each part is a module of bench/parts/; the servers, the client's loops and the
measurements they share are bench/harness.py, the database bench/database.py,
the table and the JSON bench/report.py. This script chooses and runs them.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
# Run as a script: import from the repository, never from bench/ itself.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != ROOT / "bench"]
sys.path.insert(0, str(ROOT))

from bench.database import setup_database  # noqa: E402
from bench.harness import (  # noqa: E402
    BENCH_ENV,
    CLIENT_CPU,
    DATABASE_URL,
    METRICS_DIR,
    METRICS_ENV,
    PEER,
    TARGETS,
    Server,
    Worker,
    log,
    purge_broker,
    raise_open_files_limit,
)
from bench.parts.allow import part_allow  # noqa: E402
from bench.parts.create import part_create, part_decide  # noqa: E402
from bench.parts.crowd import part_crowd_level  # noqa: E402
from bench.parts.expiry import part_expiry_level  # noqa: E402
from bench.parts.growth import part_growth  # noqa: E402
from bench.parts.idle import part_idle  # noqa: E402
from bench.parts.proxy import part_proxy  # noqa: E402
from bench.parts.wake import part_wake  # noqa: E402
from bench.report import save_json, table  # noqa: E402


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    from tests.fakes.slack_api import FakeSlack

    fake_slack = FakeSlack().start()  # Slack itself is never reached: cards go to this local fake
    try:
        return await _main_async(args, fake_slack)
    finally:
        fake_slack.stop()


async def _main_async(args: argparse.Namespace, fake_slack: Any) -> dict[str, Any]:
    ids = await asyncio.to_thread(setup_database, fake_slack.base_url)
    results: dict[str, Any] = {}
    parts = set(args.parts.split(","))
    if "idle" in parts:
        # First, on the fresh database: later parts leave cards their worker would still be trying to post.
        await asyncio.to_thread(purge_broker)
        results["idle"] = await part_idle(seconds=args.idle_seconds)
    if parts & {"allow", "wake", "proxy", "create", "growth"}:
        gateway = Server(pin=args.pin).start()
        bare = Server("bench.bare:application", pin=args.pin).start(health="/bare/insert")
        worker = None
        try:
            if "allow" in parts:
                results["allow"] = await part_allow(gateway, bare, ids, seconds=args.seconds, concurrency=args.concurrency)
            if "wake" in parts:
                results["wake"] = await part_wake(gateway, ids, args.decisions)
            if "proxy" in parts:
                results["proxy"] = await part_proxy(gateway, ids, calls=args.proxy_calls)
            if "create" in parts:
                # Only now a worker: the Slack cards earlier parts queued (to a discard port) are dropped.
                await asyncio.to_thread(purge_broker)
                worker = Worker(pin=args.pin).start()
                results["create"] = await part_create(gateway, worker, ids, seconds=args.create_seconds,
                                                      concurrency=args.concurrency)  # fmt: skip
                results["create_slack"] = await part_create(gateway, worker, ids, seconds=args.create_seconds,
                                                            concurrency=args.concurrency, channel="slack")  # fmt: skip
                worker.stop()
                results["decide"] = await part_decide(gateway, ids, decisions=args.decisions,
                                                      read_decisions=args.read_decisions)  # fmt: skip
            if "growth" in parts:
                results["growth"] = await part_growth(gateway, ids, seconds=args.seconds, concurrency=args.concurrency,
                                                      tool_calls=args.grow_tool_calls, pending=args.grow_pending)  # fmt: skip
        finally:
            gateway.stop()
            bare.stop()
            if worker is not None:
                worker.stop()
    if "crowd" in parts:
        results["crowd"] = [await part_crowd_level(n, ids, pin=args.pin) for n in args.crowd]
    if "expiry" in parts:
        results["expiry"] = [await part_expiry_level(n, ids, pin=args.pin) for n in args.expiry]
    return results


ALL_PARTS = "allow,wake,proxy,crowd,expiry,create,growth,idle"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--parts", default=ALL_PARTS, help=f"which parts to run (default: {ALL_PARTS})")
    parser.add_argument("--decisions", type=int, default=300, help="2/5: decisions measured (default 300)")
    parser.add_argument("--read-decisions", type=int, default=100,
                        help="5: decisions measured after reading the page 0.2-0.8 s (default 100)")
    parser.add_argument("--crowd", default="1000,10000", help="3: waiter counts (default 1000,10000)")
    parser.add_argument("--expiry", default="2000,10000", help="4: waiter counts (default 2000,10000)")
    parser.add_argument("--seconds", type=float, default=6, help="1/6: seconds per round (default 6)")
    parser.add_argument("--create-seconds", type=float, default=15, help="5: seconds of creation (default 15)")
    parser.add_argument("--proxy-calls", type=int, default=400, help="7: calls measured each way (default 400)")
    parser.add_argument("--idle-seconds", type=float, default=60, help="8: seconds doing nothing (default 60)")
    parser.add_argument("--concurrency", type=int, default=8, help="client connections (default 8)")
    parser.add_argument("--grow-tool-calls", type=int, default=1_000_000, help="6: ToolCall rows added")
    parser.add_argument("--grow-pending", type=int, default=100_000, help="6: pending requests added")
    parser.add_argument("--no-pin", dest="pin", action="store_false", help="do not pin server and client to a CPU each")
    parser.add_argument("--no-metrics", dest="metrics", action="store_false", help="servers without Prometheus metrics")
    args = parser.parse_args()
    if args.metrics:
        shutil.rmtree(METRICS_DIR, ignore_errors=True)  # counts of an earlier run are not this run's
        METRICS_DIR.mkdir(parents=True)
        BENCH_ENV.update(METRICS_ENV)
    args.crowd = [int(n) for n in args.crowd.split(",") if n]
    args.expiry = [int(n) for n in args.expiry.split(",") if n]

    nofile = raise_open_files_limit()
    most = max(args.crowd + args.expiry + [0])
    if most + 100 > nofile:
        log(f"open-files limit is {nofile}: not enough for {most} waiters")
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
        "peer_quoted": PEER,
        **results,
    }
    stamp = save_json(report)
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
