"""`approval-gateway run` says "Running" only once its server answers: a cold machine that takes longer than
any fixed limit to start the server is waited out (CI once got "Running" from a server not yet listening,
and the next request was refused), and a server that dies first stops the run instead."""

from __future__ import annotations

import io
import signal
import socket
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
