"""What every part of `make bench` (bench/run.py) shares: the run's environment and targets, the
servers it starts (uvicorn, the Celery worker) and their pinning to a CPU, the raw asyncio HTTP client's
loops, and the measurements (percentiles, /proc)."""

from __future__ import annotations

import asyncio
import os
import re
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

from bench.aioclient import Connection


ROOT = Path(__file__).resolve().parent.parent

DATABASE_URL = os.environ.get("BENCH_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/gw_bench")
REDIS_URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/6")
BROKER_URL = os.environ.get("BENCH_BROKER_URL", "redis://127.0.0.1:6379/7")
SLACK_SIGNING_SECRET = secrets.token_hex(16)
SLACK_USER = "UBENCH1"
APPROVER, APPROVER_PASSWORD = "bench-approver", secrets.token_urlsafe(12)
SERVER_CPU, CLIENT_CPU = 0, 1
# The servers run as `approval-gateway run` and docs/operating.md start them: uvicorn with the gateway's
# HTTP protocol (gateway/http_protocol.py); BENCH_HTTP=httptools measures uvicorn's own.
HTTP_PROTOCOL = ("--http", os.environ.get("BENCH_HTTP", "gateway.http_protocol:OneWriteProtocol"))

BENCH_ENV = {
    "DJANGO_SETTINGS_MODULE": "bench.settings",
    "DATABASE_URL": DATABASE_URL,
    "REDIS_URL": REDIS_URL,
    "CELERY_BROKER_URL": BROKER_URL,
    "GATEWAY_CHANNEL_PREFIX": "gw_bench",
    "GATEWAY_SECRET_KEY": secrets.token_urlsafe(40),  # shared with the server: we sign Slack button values
    # shared with the server: we sign requests we put straight into the table (docs/audit.md)
    "GATEWAY_AUDIT_KEY": "bench:" + secrets.token_urlsafe(40),
    "GATEWAY_WAIT_MAX_SECONDS": "600",
    "GATEWAY_LOG_LEVEL": "WARNING",
    "GATEWAY_VAR_DIR": str(ROOT / "var" / "bench"),
    "GATEWAY_PUBLIC_URL": "http://127.0.0.1:8000",
}
# Metrics on, as in production (`--no-metrics` to compare): every server process counts into files in
# this directory (prometheus_client's multi-process mode, the costlier one), and /metrics answers.
METRICS_DIR = ROOT / "var" / "bench" / "prometheus"
METRICS_ENV = {"PROMETHEUS_MULTIPROC_DIR": str(METRICS_DIR), "GATEWAY_METRICS_TOKEN": secrets.token_urlsafe(24)}

TARGETS = {
    "allow_ratio": 0.70,  # of the bare reference's throughput (aim 0.90)
    "allow_single_p50_ratio": 2.0,  # one call alone, p50, at most this many times the reference's
    "wake_floor_ratio": 5.0,  # commit -> answer p99 at most this many times the NOTIFY floor's p99
    "wake_p99_ms": 2.0,
    "crowd_p99_ms": 1000.0,
    "expiry_p99_ms": 500.0,
    "create_rps": 300.0,
    "decide_p50_ms": 10.0,
    "growth_ratio": 1.2,
}
# A comparable open-source approval server (FastAPI, asyncpg), measured on this machine in the
# issue that set these targets; not re-run here (quoted, so the table says so).
PEER = {"create_rps": 212, "create_p50_ms": 35.0, "decide_p50_ms": 11.5}


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
        "max": round(max(ms), 3) if ms else float("nan"),
        "mean": round(statistics.fmean(ms), 3) if ms else float("nan"),
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
    """User + system CPU of a process and its children (the worker's threads are its own)."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def proc_run_seconds(pid: int) -> float:
    """CPU time of every thread of a process so far, in nanoseconds' resolution (/proc/<pid>/task/*/schedstat):
    fine enough for one request's share, which `proc_cpu_seconds`' clock ticks (10 ms) are not."""
    total = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/schedstat") as schedstat:
                total += int(schedstat.read().split()[0])
        except OSError:  # (a thread gone meanwhile)
            pass
    return total / 1e9


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --------------------------------------------------------------------------- servers


class Server:
    """An ASGI app under `uvicorn`, one process, pinned to the server's CPU."""

    def __init__(self, app: str = "bench.asgi:application", *, pin: bool) -> None:
        self.app = app
        self.port = free_port()
        self.pin = pin
        self.proc: subprocess.Popen | None = None

    def start(self, health: str = "/healthz") -> Server:
        def prepare() -> None:
            raise_open_files_limit()
            if self.pin:
                os.sched_setaffinity(0, {SERVER_CPU})

        cmd = [
            sys.executable, "-m", "gateway.serve", self.app,  # (uvicorn's command line: gateway/serve.py)
            "--host", "127.0.0.1", "--port", str(self.port),
            "--interface", "asgi3", "--lifespan", "off", "--log-level", "warning", "--no-access-log",
            "--backlog", "4096", *HTTP_PROTOCOL,
        ]  # fmt: skip
        self.proc = subprocess.Popen(cmd, cwd=ROOT, env={**os.environ, **BENCH_ENV}, preexec_fn=prepare)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.app} exited with {self.proc.returncode}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1) as s:
                    s.sendall(f"GET {health} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n".encode())
                    if s.recv(64).startswith(b"HTTP/1.1 "):
                        return self
            except OSError:
                time.sleep(0.1)
        raise RuntimeError(f"{self.app} did not answer within 30 s")

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


class Worker:
    """A Celery worker (threads), as `make run` starts one, pinned to the client's CPU."""

    def __init__(self, *, pin: bool) -> None:
        self.pin = pin
        self.proc: subprocess.Popen | None = None

    def start(self) -> Worker:
        def prepare() -> None:
            if self.pin:
                os.sched_setaffinity(0, {CLIENT_CPU})

        cmd = [sys.executable, "-m", "celery", "--quiet", "-A", "gateway", "worker", "--pool", "threads",
               "--concurrency", "4", "--loglevel", "WARNING", "--without-gossip", "--without-mingle"]  # fmt: skip
        self.proc = subprocess.Popen(cmd, cwd=ROOT, env={**os.environ, **BENCH_ENV}, preexec_fn=prepare)
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


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


async def wait_until_idle(pid: int, *, limit: float, below: float = 0.05) -> float:
    """Seconds until the process uses less than `below` of a core over a 1 s window."""
    started = time.perf_counter()
    while time.perf_counter() - started < limit:
        cpu = proc_cpu_seconds(pid)
        await asyncio.sleep(1)
        if proc_cpu_seconds(pid) - cpu < below:
            return time.perf_counter() - started
    raise RuntimeError(f"the server did not go idle within {limit:.0f} s")


async def closed_loop(server: Server, path: str, headers: dict[str, str], body: bytes | list[bytes], *,
                      seconds: float, concurrency: int) -> dict[str, Any]:  # fmt: skip
    """`concurrency` connections each sending the next request as soon as the last is answered."""
    conns = [await server.connection() for _ in range(concurrency)]
    latencies: list[float] = []
    errors = 0
    stop_at = time.perf_counter() + seconds
    bodies = body if isinstance(body, list) else None
    sent = 0

    async def worker(conn: Connection) -> None:
        nonlocal errors, sent
        while time.perf_counter() < stop_at:
            payload = bodies[sent % len(bodies)] if bodies else body
            sent += 1
            t0 = time.perf_counter()
            status, _ = await conn.request("POST", path, headers=headers, body=payload)  # type: ignore[arg-type]
            latencies.append(time.perf_counter() - t0)
            errors += status != 200

    started = time.perf_counter()
    await asyncio.gather(*(worker(c) for c in conns))
    elapsed = time.perf_counter() - started
    for c in conns:
        c.close()
    return {"requests": len(latencies), "errors": errors, "rps": len(latencies) / elapsed, "latencies": latencies}


async def sequential(server: Server, path: str, headers: dict[str, str], body: bytes, *, n: int) -> list[float]:
    """One connection, one request at a time: what one call costs alone."""
    conn = await server.connection()
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        status, _ = await conn.request("POST", path, headers=headers, body=body)
        times.append(time.perf_counter() - t0)
        assert status == 200, status
    conn.close()
    return times


def combine(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    latencies = [v for r in rounds for v in r["latencies"]]
    return {
        "requests": sum(r["requests"] for r in rounds),
        "errors": sum(r["errors"] for r in rounds),
        "rps": round(statistics.fmean(r["rps"] for r in rounds), 1),
        "rps_per_round": [round(r["rps"], 1) for r in rounds],
        "latency_ms": summary_ms(latencies),
    }


# --------------------------------------------------------------------------- clients shared by the parts


async def hold_waiters(server: Server, stats: Connection, auth: str, wait_ids: list[str], *, timeout: int = 300):
    """A long-poll per id, each on its own connection; returns once the server holds them all, parked."""
    started = time.perf_counter()
    conns: list[Connection] = []
    for batch in range(0, len(wait_ids), 500):
        chunk = [Connection("127.0.0.1", server.port) for _ in wait_ids[batch : batch + 500]]
        await asyncio.gather(*(c.open() for c in chunk))
        conns.extend(chunk)
    for conn, cid in zip(conns, wait_ids):
        conn.send("GET", f"/api/v1/confirmations/{cid}/wait?timeout={timeout}", headers={"authorization": auth})

    async def read(conn: Connection) -> tuple[int, bytes, float, float]:
        status, _, body = await conn.read_response()
        return status, body, time.perf_counter(), time.time()

    answers = [asyncio.ensure_future(read(c)) for c in conns]
    while (registered := await waiters_registered(stats)) < len(wait_ids):
        if time.perf_counter() - started > 180:
            raise RuntimeError(f"only {registered} of {len(wait_ids)} waiters registered after 180 s")
        await asyncio.sleep(0.1)
    return conns, answers, time.perf_counter() - started


def cookies(headers: dict[str, str], jar: dict[str, str]) -> dict[str, str]:
    for line in headers.get("set-cookie", "").split("\n"):
        if "=" in line:
            name, _, rest = line.partition("=")
            jar[name.strip()] = rest.split(";", 1)[0]
    return jar


def cookie_header(jar: dict[str, str]) -> str:
    return "; ".join(f"{k}={v}" for k, v in jar.items())


CSRF_INPUT = re.compile(r'name="csrfmiddlewaretoken" value="([^"]+)"')


def purge_broker() -> None:
    """Drop the card/redraw tasks the server queued that no worker ran."""
    from gateway.celery import app

    try:
        app.control.purge()
    except Exception as exc:  # the results are what matter
        log(f"could not purge the benchmark broker: {exc}")
