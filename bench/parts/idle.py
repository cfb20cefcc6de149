"""8. idle: what the gateway costs doing nothing (docs/benchmarks.md) — the server, a Celery worker and
Celery beat started as `approval-gateway run` starts them (gateway/launcher.py's commands), on the
benchmark's PostgreSQL and Redis, then left alone: the CPU each uses, as a share of one core, read from
/proc before and after. Nothing else runs meanwhile (no client, no waiter), so every tick counted is the
gateway's own: beat's schedule, the worker's broker reads, the server's background tasks."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from typing import Any

from bench.harness import BENCH_ENV, ROOT, Server, log, proc_cpu_seconds

IDLE_TARGET_CORES = 0.010  # the three together (the peer's server alone: 0.006)


def _start(args: tuple[str, ...]) -> subprocess.Popen:
    env = {**os.environ, **BENCH_ENV, "GATEWAY_VAR_DIR": str(ROOT / "var" / "bench-idle")}
    return subprocess.Popen([sys.executable, "-m", *args], cwd=ROOT, env=env)


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _cpu_with_children(pid: int) -> float:
    """A process's CPU and its live children's (a prefork worker's children; threads are the process's)."""
    total = proc_cpu_seconds(pid)
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as children:
            total += sum(proc_cpu_seconds(int(c)) for c in children.read().split())
    except FileNotFoundError:
        pass
    return total


async def part_idle(*, seconds: float, settle: float = 15.0) -> dict[str, Any]:
    from gateway.launcher import BEAT_ARGS, WORKER_ARGS

    server = Server("gateway.asgi:application", pin=False).start()
    worker, beat = _start(WORKER_ARGS), _start(BEAT_ARGS)
    procs = {"server": server.pid, "worker": worker.pid, "beat": beat.pid}
    try:
        log(f"8. idle: server, worker and beat started; {settle:.0f} s to settle, then {seconds:.0f} s doing nothing")
        await asyncio.sleep(settle)  # start-up's imports and connections are not idleness
        for name, proc in (("worker", worker), ("beat", beat)):
            if proc.poll() is not None:
                raise RuntimeError(f"the {name} exited with {proc.returncode}")
        before = {name: _cpu_with_children(pid) for name, pid in procs.items()}
        t0 = time.monotonic()
        await asyncio.sleep(seconds)
        elapsed = time.monotonic() - t0
        after = {name: _cpu_with_children(pid) for name, pid in procs.items()}
    finally:
        server.stop()
        _stop(worker)
        _stop(beat)
    cores = {name: round((after[name] - before[name]) / elapsed, 4) for name in procs}
    total = round(sum(cores.values()), 4)
    return {"seconds": round(elapsed, 1), "cores": cores, "total_cores": total, "met": total <= IDLE_TARGET_CORES}
