"""What `bench/soak.py` runs beside the gateways and watches: Celery beat, and each process's memory,
threads, file descriptors and sockets (from /proc), and the database's sessions."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from typing import Any

from bench.harness import BENCH_ENV, DATABASE_URL, ROOT, proc_status


class Beat:
    def __init__(self) -> None:
        schedule = ROOT / "var" / "soak-celerybeat-schedule"
        cmd = [sys.executable, "-m", "celery", "--quiet", "-A", "gateway", "beat", "--loglevel", "WARNING",
               "-s", str(schedule)]  # fmt: skip
        self.proc = subprocess.Popen(cmd, cwd=ROOT, env={**os.environ, **BENCH_ENV})

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
            status = proc_status(p)
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

    dbname = DATABASE_URL.rsplit("/", 1)[1]
    with psycopg.connect(DATABASE_URL.rsplit("/", 1)[0] + "/postgres", autocommit=True) as conn:
        return conn.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = %s", [dbname]).fetchone()[0]
