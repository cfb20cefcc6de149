"""A prefork Celery worker's database connection (gateway/celery.py, docs/operating.md "Scaling each"):
kept in the child's pool between tasks, not opened anew for each (celery/celery#10554), and checked as
it is lent, so a connection that died between two tasks costs the second nothing.

A real worker (`celery -A gateway worker -P prefork`) in a process of its own, on this test's database
and the test broker, consuming a queue no other test uses; its connections are told apart in
`pg_stat_activity` by their application name."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import uuid
from pathlib import Path

import pytest
from django.db import connection

from gateway.celery import app
from tests.support import wait_until

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.django_db(transaction=True)


class PreforkWorker:
    """`celery worker -P prefork -c 1` on a queue of its own; `run(task)` queues a task there and
    waits for the worker to log how it ended."""

    def __init__(self) -> None:
        self.queue = f"test-{uuid.uuid4().hex}"
        self.name = f"gateway-test-worker-{uuid.uuid4().hex[:8]}"
        self.lines: list[str] = []
        db = connection.settings_dict
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "DJANGO_"))}
        env.update(
            DATABASE_URL=f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}",
            DJANGO_SETTINGS_MODULE="gateway.settings",
            PGAPPNAME=self.name,  # libpq's application_name for every connection the worker makes
        )
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "gateway", "worker", "-P", "prefork", "-c", "1",
             "-Q", self.queue, "-n", f"{self.name}@%h", "--loglevel", "INFO",
             "--without-heartbeat", "--without-gossip", "--without-mingle"],
            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        wait_until(lambda: any("ready." in line for line in self.lines) or self.proc.poll() is not None,
                   timeout=60, what="the worker to start")  # fmt: skip
        assert self.proc.poll() is None, "\n".join(self.lines)

    def _read(self) -> None:
        for line in self.proc.stderr:
            self.lines.append(line.rstrip())

    def run(self, task_name: str) -> str:
        """Queue `task_name` for this worker; the line it logged when the task ended."""
        task_id = app.send_task(task_name, queue=self.queue).id
        ended = re.compile(rf"\[{task_id}\] (succeeded|raised|failed)")
        return wait_until(
            lambda: next((line for line in self.lines if ended.search(line)), None),
            timeout=30, what=f"{task_name} to end",
        )  # fmt: skip

    def connections(self) -> list[int]:
        """The backend pids of the worker's open database connections."""
        with connection.cursor() as cursor:
            cursor.execute("SELECT pid FROM pg_stat_activity WHERE application_name = %s ORDER BY pid", [self.name])
            return [row[0] for row in cursor.fetchall()]

    def stop(self) -> None:
        self.proc.terminate()  # a warm shutdown
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def prefork_worker():
    worker = PreforkWorker()
    yield worker
    worker.stop()


EXPIRE_DUE = "approvals.tasks.expire_due"  # beat's sweep, every 2 s: it reads and, when due, writes


def test_a_prefork_worker_runs_task_after_task_on_one_kept_connection(prefork_worker):
    held = []
    for _ in range(4):
        assert "succeeded" in prefork_worker.run(EXPIRE_DUE)
        held.append(prefork_worker.connections())

    # Celery's own fix-up closes the pool at each task's end: no connection between tasks, a new one each time.
    assert held[0], held  # (the child's pool: as it opens, psycopg's pool may make a second connection)
    assert held == [held[0]] * 4

    prefork_worker.stop()  # and the child's connection goes with it
    assert prefork_worker.proc.returncode == 0, "\n".join(prefork_worker.lines[-20:])
    wait_until(lambda: not prefork_worker.connections(), what="the worker's connection to close")


def test_a_connection_cut_between_two_tasks_costs_the_second_task_nothing(prefork_worker):
    assert "succeeded" in prefork_worker.run(EXPIRE_DUE)
    cut = prefork_worker.connections()
    assert cut
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_terminate_backend(pid) FROM unnest(%s::int[]) AS pid", [cut])  # as a restart would
    # The cut ones gone (the pool may already have opened others in their place: waiting for none at all
    # timed out whenever it had — a flaky test, not a finding).
    wait_until(lambda: not set(prefork_worker.connections()) & set(cut), what="the cut connections to be gone")

    ended = prefork_worker.run(EXPIRE_DUE)

    assert "succeeded" in ended, "\n".join(prefork_worker.lines[-20:])
    now = prefork_worker.connections()
    assert now and not set(now) & set(cut)
