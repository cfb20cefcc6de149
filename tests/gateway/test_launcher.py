"""`approval-gateway run` says "Running" only once its server answers: a cold machine that takes longer than
any fixed limit to start the server is waited out (CI once got "Running" from a server not yet listening,
and the next request was refused), and a server that dies first stops the run instead."""

from __future__ import annotations

import io
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

from gateway import launcher
from tests.support import wait_until


class Healthy(BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 (http.server's name)
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args):
        pass


def test_a_slow_server_is_waited_for_past_any_limit_and_running_is_said_only_once_it_answers():
    with socket.socket() as reserved:
        reserved.bind(("127.0.0.1", 0))
        port = reserved.getsockname()[1]
    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    said = io.StringIO()
    outcome: list[bool] = []
    waiter = threading.Thread(
        target=lambda: outcome.append(
            launcher._wait_until_serving({"server": alive}, "127.0.0.1", str(port), say_every=0.2, out=said)
        )
    )
    server = None
    try:
        waiter.start()
        # Nothing listens yet: the launcher keeps saying what it waits for, and does not return.
        wait_until(lambda: said.getvalue().count("waiting for the server") >= 3, what="three progress lines")
        assert outcome == [] and waiter.is_alive()
        assert f"http://127.0.0.1:{port}/healthz" in said.getvalue()

        server = HTTPServer(("127.0.0.1", port), Healthy)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        waiter.join(20)
        assert outcome == [True]
    finally:
        alive.kill()
        alive.wait()
        if server:
            server.shutdown()
            server.server_close()
        waiter.join(5)


def test_a_server_that_dies_before_answering_ends_the_wait_with_false():
    dead = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    dead.wait()

    assert launcher._wait_until_serving({"server": dead}, "127.0.0.1", "9", say_every=0.2, out=io.StringIO()) is False


def test_run_reports_the_process_that_died_and_exits_with_its_status(tmp_path, monkeypatch, capsys):
    # Embedded defaults in an empty var directory, nothing of the suite's services shared.
    monkeypatch.setenv("GATEWAY_VAR_DIR", str(tmp_path))
    monkeypatch.setenv("DJANGO_SETTINGS_MODULE", "gateway.settings")  # not the suite's (its services)
    for name in ("DATABASE_URL", "REDIS_URL", "CELERY_BROKER_URL", "GATEWAY_METRICS_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    sigterm = signal.getsignal(signal.SIGTERM)
    # A port in use by this test: the server `run` starts cannot listen on it and exits.
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        try:
            status = launcher.run("127.0.0.1", str(taken.getsockname()[1]))
        finally:
            signal.signal(signal.SIGTERM, sigterm)
    said = capsys.readouterr()

    assert status != 0
    assert "stopped before the server answered: server exited with" in said.err
    assert "Ctrl-C stops everything" not in said.out


def _python(code: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code], env={**os.environ, **env}, capture_output=True, text=True, timeout=120
    )


def test_the_embedded_broker_is_prepared_once_before_the_processes_that_share_it_start(tmp_path):
    """`run` makes the SQLite broker's tables and queue first (`prepare_embedded_broker`): the server, worker
    and beat then each find them made, where making them at once is a race one loses (`UNIQUE constraint
    failed: kombu_queue.name` stops the worker). Four processes connecting at once to the prepared broker
    and declaring the queue all do; a Redis broker needs nothing."""
    broker = f"sqla+sqlite:///{tmp_path / 'broker.sqlite3'}"
    prepare = "from gateway.celery import prepare_embedded_broker as p; print(p())"
    made = _python(prepare, CELERY_BROKER_URL=broker)
    assert made.returncode == 0 and made.stdout.strip() == "True", made.stderr
    with sqlite3.connect(tmp_path / "broker.sqlite3") as db:
        tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        queues = [row[0] for row in db.execute("SELECT name FROM kombu_queue")]
    assert {"kombu_queue", "kombu_message"} <= tables and queues == ["celery"]

    declare = (
        "from gateway.celery import app\n"
        "with app.connection_for_write() as c:\n"
        "    [q.bind(c.default_channel).declare() for q in app.amqp.queues.values()]\n"
    )
    at_once = [
        subprocess.Popen([sys.executable, "-c", declare], env={**os.environ, "CELERY_BROKER_URL": broker},
                         stderr=subprocess.PIPE, text=True)
        for _ in range(4)
    ]  # fmt: skip
    for proc in at_once:
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err

    redis = _python(prepare, CELERY_BROKER_URL="redis://127.0.0.1:6379/5")
    assert redis.returncode == 0 and redis.stdout.strip() == "False", redis.stderr


def test_run_prepares_the_embedded_broker_after_migrating_and_before_starting_anything(tmp_path, monkeypatch):
    """The order `run` follows (each command as it would run it, none run): migrate, the broker, the demo,
    then the processes."""
    calls: list[str] = []

    def ran(argv, **kwargs):
        calls.append(" ".join(argv[1:]))
        return subprocess.CompletedProcess(argv, 0, stdout="", stderr="")

    def started(argv, **kwargs):
        calls.append("start " + " ".join(argv[1:]))
        raise SystemExit(0)  # (nothing is started)

    monkeypatch.setattr(launcher.subprocess, "run", ran)
    monkeypatch.setattr(launcher.subprocess, "Popen", started)
    monkeypatch.setenv("GATEWAY_VAR_DIR", str(tmp_path))
    sigterm = signal.getsignal(signal.SIGTERM)
    try:
        launcher.run(port="1")
    except SystemExit:
        pass
    finally:
        signal.signal(signal.SIGTERM, sigterm)
    migrate, broker, demo = (
        next(i for i, c in enumerate(calls) if what in c) for what in ("migrate", "prepare_embedded_broker", "demo_setup")
    )
    first_start = next(i for i, c in enumerate(calls) if c.startswith("start "))
    assert migrate < broker < demo < first_start, calls
