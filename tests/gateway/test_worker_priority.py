"""`celery worker` and `celery beat` run at a lower CPU priority than the server (GATEWAY_WORKER_NICE,
gateway/celery.py): the worker's pool children too, since they are forked after it lowered its own. The
real commands in processes of their own, on an in-memory broker (nothing they send reaches another test's
worker); the priority read from /proc as the kernel holds it."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

from tests.support import wait_until

ROOT = Path(__file__).resolve().parents[2]


def nice_of(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as stat:
        return int(stat.read().rsplit(")", 1)[1].split()[16])


def children_of(pid: int) -> list[int]:
    with open(f"/proc/{pid}/task/{pid}/children") as children:
        return [int(child) for child in children.read().split()]


class Command:
    """`celery -A gateway <args>` until `ready` appears in what it logs."""

    def __init__(self, tmp_path: Path, *args: str, ready: str, **env: str) -> None:
        environment = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "DJANGO_"))}
        environment.pop("GATEWAY_WORKER_NICE", None)  # (the suite's own is 0: tests/settings.py) the default
        environment.update(DJANGO_SETTINGS_MODULE="gateway.settings", CELERY_BROKER_URL="memory://",
                           GATEWAY_VAR_DIR=str(tmp_path), **env)  # fmt: skip
        self.lines: list[str] = []
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "gateway", *args, "--loglevel", "INFO"],
            cwd=ROOT, env=environment, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        threading.Thread(target=self._read, daemon=True).start()
        wait_until(lambda: any(ready in line for line in self.lines) or self.proc.poll() is not None,
                   timeout=60, what=f"{args[0]} to start")  # fmt: skip
        assert self.proc.poll() is None, "\n".join(self.lines)

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.append(line.rstrip())

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def worker(tmp_path: Path, **env: str) -> Command:
    return Command(tmp_path, "worker", "-P", "prefork", "-c", "1", "-Q", f"priority-{os.getpid()}",
                   "--without-heartbeat", "--without-gossip", "--without-mingle", ready="ready.", **env)  # fmt: skip


def test_the_worker_its_pool_and_beat_run_at_a_lower_priority_than_the_server(tmp_path):
    started: list[Command] = []
    try:
        started.append(worker(tmp_path))
        # (beat says "Starting" before its `beat_init`, where it lowers its priority; its first send comes after)
        started.append(Command(tmp_path, "beat", "-s", str(tmp_path / "schedule"), ready="Sending due task"))
        pool = children_of(started[0].proc.pid)
        assert pool, "the prefork worker has no pool child"

        assert nice_of(started[0].proc.pid) == 10
        assert all(nice_of(child) == 10 for child in pool)
        assert nice_of(started[1].proc.pid) == 10
        assert os.nice(0) == 0  # (this test process, which started them, is as it was)
    finally:
        for command in started:
            command.stop()


def test_zero_keeps_the_servers_priority(tmp_path):
    started = worker(tmp_path, GATEWAY_WORKER_NICE="0")
    try:
        assert nice_of(started.proc.pid) == 0
    finally:
        started.stop()


def test_a_priority_out_of_range_stops_the_worker_with_a_clear_message(tmp_path):
    environment = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "DJANGO_"))}
    environment.update(DJANGO_SETTINGS_MODULE="gateway.settings", CELERY_BROKER_URL="memory://",
                       GATEWAY_VAR_DIR=str(tmp_path), GATEWAY_WORKER_NICE="25")  # fmt: skip
    refused = subprocess.run(
        [sys.executable, "-m", "celery", "-A", "gateway", "worker", "-P", "solo"],
        cwd=ROOT, env=environment, capture_output=True, text=True, timeout=60,
    )  # fmt: skip

    assert refused.returncode != 0
    assert "GATEWAY_WORKER_NICE must be between 0 and 19, got 25" in refused.stderr + refused.stdout
