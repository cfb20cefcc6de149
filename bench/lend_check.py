#!/usr/bin/env python
"""What looking at a pooled connection as it is lent costs the allowed path and a decision (docs/operating.md,
"Database failover").

Servers side by side in one run, on one database, each a `uvicorn bench.asgi:application` process pinned
to the server's CPU (as `make bench` runs them), measured in interleaved rounds so that the machine's other
work weighs on each alike:

- `poll` — the gateway as it is: its pool lends only connections the server has not closed, looked at with
  one `poll()` of the socket (gateway/postgresql/base.py);
- `none` — the same code on Django's own backend: nothing looked at (what a request after a drop meets);
- `round_trip` — Django's own backend with CONN_HEALTH_CHECKS: psycopg_pool's check, one empty query per
  lending;
- `before` (with `--before REV`) — the code of that revision, from `git archive`, as it ran before.

First, the lending alone, in this process: a connection taken from a psycopg pool and given back, with
each way of looking at it. Then, for each server: the allowed pre-tool-use call (throughput over `--concurrency` connections, and one call alone:
p50 of sequential calls) and an approver's decision on the web page (the form POST, sent → answered).
Run: `BENCH_DATABASE_URL=postgres://…/gw_lend python bench/lend_check.py --before <rev>` (the database is
dropped and re-created).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != ROOT / "bench"]
sys.path.insert(0, str(ROOT))

from bench import harness  # noqa: E402
from bench.database import setup_database  # noqa: E402
from bench.parts.allow import allow_targets  # noqa: E402
from bench.parts.create import part_decide  # noqa: E402


class VariantServer(harness.Server):
    """`bench.asgi` under uvicorn from `source` (a checkout of the gateway), with `env` added."""

    def __init__(self, name: str, *, source: Path, env: dict[str, str], pin: bool) -> None:
        super().__init__(pin=pin)
        self.name, self.source, self.extra = name, source, env

    def start(self, health: str = "/healthz") -> VariantServer:
        saved_root, saved_env = harness.ROOT, dict(harness.BENCH_ENV)
        harness.ROOT = self.source
        harness.BENCH_ENV.update(self.extra)
        try:
            super().start(health)
        finally:
            harness.ROOT = saved_root
            harness.BENCH_ENV.clear()
            harness.BENCH_ENV.update(saved_env)
        return self


def source_of(revision: str, into: Path) -> Path:
    """The tree of `revision` (git archive), to run the code as it was."""
    into.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", revision], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


async def measure(server: VariantServer, ids: dict[str, Any], *, seconds: float, concurrency: int, alone: int,
                  decisions: int) -> dict[str, Any]:  # fmt: skip
    target = allow_targets(ids)["pre_tool_use"]
    loop = await harness.closed_loop(server, *target, seconds=seconds, concurrency=concurrency)
    one = await harness.sequential(server, *target, n=alone)
    decided = await part_decide(server, ids, decisions=decisions)
    return {"rps": loop["rps"], "errors": loop["errors"], "alone": one, "decide_ms": decided["form_post_ms"]}


def lending_alone(n: int = 5000) -> dict[str, dict[str, float]]:
    """µs per connection taken from a pool (of one) and given back, with each way of looking at it."""
    from psycopg_pool import ConnectionPool

    from gateway.postgresql.base import closed_by_server

    looks = {"none": lambda conn: None, "poll": closed_by_server, "round_trip": ConnectionPool.check_connection}
    info = harness.DATABASE_URL
    timings: dict[str, list[float]] = {name: [] for name in looks}
    with ConnectionPool(info, min_size=1, max_size=1, kwargs={"autocommit": True}, open=True) as pool:
        pool.wait()
        for _ in range(5):  # interleaved rounds
            for name, look in looks.items():
                started = time.perf_counter()
                for _ in range(n):
                    conn = pool.getconn()
                    look(conn)
                    pool.putconn(conn)
                timings[name].append((time.perf_counter() - started) / n * 1e6)
    return {name: {"median_us": round(statistics.median(values), 2), "rounds_us": [round(v, 2) for v in values]}
            for name, values in timings.items()}  # fmt: skip


async def main_async(args: argparse.Namespace, variants: dict[str, tuple[Path, dict[str, str]]]) -> dict[str, Any]:
    ids = await asyncio.to_thread(setup_database)
    lending = await asyncio.to_thread(lending_alone)
    harness.log(f"lending alone: {lending}")
    servers = {name: VariantServer(name, source=src, env=env, pin=args.pin).start() for name, (src, env) in variants.items()}
    rounds: dict[str, list[dict[str, Any]]] = {name: [] for name in servers}
    try:
        for server in servers.values():  # warm-up: every code path loaded, the pool filled
            await harness.closed_loop(server, *allow_targets(ids)["pre_tool_use"], seconds=2, concurrency=args.concurrency)
        for number in range(args.rounds):
            order = list(servers) if number % 2 == 0 else list(reversed(servers))
            for name in order:
                harness.log(f"round {number + 1}/{args.rounds}: {name}")
                rounds[name].append(
                    await measure(servers[name], ids, seconds=args.seconds, concurrency=args.concurrency,
                                  alone=args.alone, decisions=args.decisions)  # fmt: skip
                )
    finally:
        for server in servers.values():
            server.stop()
    result: dict[str, Any] = {"lending_alone": lending}
    for name, measured in rounds.items():
        alone = [t for r in measured for t in r["alone"]]
        result[name] = {
            "allow_rps_median": round(statistics.median(r["rps"] for r in measured), 1),
            "allow_rps_rounds": [round(r["rps"], 1) for r in measured],
            "allow_errors": sum(r["errors"] for r in measured),
            "allow_alone_ms": harness.summary_ms(alone),
            "decide_p50_ms_rounds": [r["decide_ms"]["p50"] for r in measured],
            "decide_p50_ms_median": round(statistics.median(r["decide_ms"]["p50"] for r in measured), 3),
        }
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", help="also run the code of this git revision, as it was")
    parser.add_argument("--variants", default="poll,none,round_trip", help="of poll,none,round_trip")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=5, help="seconds of allowed calls per round")
    parser.add_argument("--alone", type=int, default=300, help="sequential allowed calls per round")
    parser.add_argument("--decisions", type=int, default=60, help="web decisions per round")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--no-pin", dest="pin", action="store_false")
    args = parser.parse_args()
    if args.pin and len(os.sched_getaffinity(0)) >= 2:
        os.sched_setaffinity(0, {harness.CLIENT_CPU})
    else:
        args.pin = False
    variants: dict[str, tuple[Path, dict[str, str]]] = {}
    with tempfile.TemporaryDirectory(prefix="gateway-before-") as tmp:
        if args.before:
            variants["before"] = (source_of(args.before, Path(tmp)), {})
        for name in args.variants.split(","):
            variants[name] = (ROOT, {"BENCH_LEND_CHECK": name})
        load = os.getloadavg()[0]
        try:
            import uvloop

            result = uvloop.run(main_async(args, variants))
        except ImportError:
            result = asyncio.run(main_async(args, variants))
    report = {"when": time.strftime("%Y-%m-%d %H:%M:%S"), "loadavg_1m_before_after": [round(load, 2), round(os.getloadavg()[0], 2)],
              "before": args.before, "args": vars(args), "results": result}  # fmt: skip
    out = ROOT / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / f"lend-check-{time.strftime('%Y%m%d-%H%M%S')}.json").write_text(json.dumps(report, indent=2))
    print("| server | allowed calls/s (median of rounds) | one call alone p50 | web decision p50 (median of rounds) |")
    print("|---|---|---|---|")
    for name, r in result.items():
        if name == "lending_alone":
            continue
        print(f"| {name} | {r['allow_rps_median']} {r['allow_rps_rounds']} | {r['allow_alone_ms']['p50']:.3f} ms "
              f"| {r['decide_p50_ms_median']:.2f} ms {r['decide_p50_ms_rounds']} |")  # fmt: skip
    print("\nA connection taken from the pool and given back, alone: "
          + ", ".join(f"{name} {r['median_us']} µs" for name, r in result["lending_alone"].items()))
    print(f"load average {report['loadavg_1m_before_after']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
