"""`python -m gateway.serve`: uvicorn's command line with a server that rests between its ticks (once a
second instead of ten times) and still stops at once when told — by a signal's handler or by code in another
thread — and still refreshes the `Date` header on every tick."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import threading
from email.utils import parsedate_to_datetime
from pathlib import Path

import httpx
import uvicorn

from gateway.serve import RestingServer
from tests.support import wait_until

ROOT = Path(__file__).resolve().parents[2]


async def _app(scope, receive, send):  # a bare ASGI app: the server's own loop is what is tested
    pass


def _server(tick: float) -> RestingServer:
    config = uvicorn.Config(app=_app, lifespan="off", log_level="warning")
    config.load()
    server = RestingServer(config)
    server.TICK = tick
    return server


def _stopped_by(stop) -> None:
    """Run the main loop with an hour between ticks; `stop(server, loop)` once it has ticked: it must end now."""
    server = _server(tick=3600.0)

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        task = asyncio.create_task(server.main_loop())
        while not server.server_state.default_headers:  # (its first tick: the Date header is set)
            await asyncio.sleep(0)
        assert not task.done()
        stop(server, loop)
        # Without the wake it would rest the rest of the hour: this bound is never reached when it works.
        await asyncio.wait_for(task, 30)

    asyncio.run(scenario())
    assert server.should_exit


def test_a_stop_set_from_another_thread_ends_the_rest_at_once():
    _stopped_by(lambda server, loop: threading.Thread(target=setattr, args=(server, "should_exit", True)).start())


def test_the_signal_handlers_stop_ends_the_rest_at_once():
    # (`capture_signals` installs `handle_exit` as the handler of SIGINT and SIGTERM)
    _stopped_by(lambda server, loop: loop.call_soon(server.handle_exit, signal.SIGTERM, None))


def test_every_tick_refreshes_the_date_header():
    class Observed(RestingServer):  # (uvicorn's on_tick, watched: a new list of headers each time it refreshes)
        refreshed: list[bool] = []

        async def on_tick(self, counter: int) -> bool:
            before = self.server_state.default_headers
            should_exit = await super().on_tick(counter)
            self.refreshed.append(self.server_state.default_headers is not before)
            return should_exit

    config = uvicorn.Config(app=_app, lifespan="off", log_level="warning")
    config.load()
    server = Observed(config)
    server.TICK = 0.005

    async def scenario() -> None:
        task = asyncio.create_task(server.main_loop())
        while len(server.refreshed) < 12:
            await asyncio.sleep(0.005)
        server.should_exit = True
        await asyncio.wait_for(task, 30)

    asyncio.run(scenario())
    assert all(server.refreshed), server.refreshed  # (uvicorn's loop: once in ten ticks)
    assert dict(server.server_state.default_headers)[b"date"]


def test_the_command_serves_the_gateway_and_stops_on_sigterm(transactional_db, tmp_path):
    from django.db import connection

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("PYTEST", "OTEL_"))},
        "DJANGO_SETTINGS_MODULE": "gateway.settings",
        "DATABASE_URL": f"postgres://postgres@127.0.0.1:5432/{connection.settings_dict['NAME']}",
        "GATEWAY_VAR_DIR": str(tmp_path / "var"),
        "GATEWAY_LOG_LEVEL": "WARNING",
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "gateway.serve", "gateway.asgi:application", "--http",
         "gateway.http_protocol:OneWriteProtocol", "--host", "127.0.0.1", "--port", str(port), "--lifespan", "off"],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:

        def answers() -> httpx.Response | None:
            assert proc.poll() is None, proc.stderr.read()
            try:
                return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2)
            except httpx.HTTPError:
                return None

        answer = wait_until(answers, timeout=60, what=f"gateway.serve on port {port}")
        assert answer.status_code == 200
        assert parsedate_to_datetime(answer.headers["date"]).tzinfo is not None
        assert answer.headers["x-gateway-version"]
        proc.send_signal(signal.SIGTERM)
        # (uvicorn shuts down gracefully, then raises the signal it caught again: it ends by SIGTERM, as uvicorn does)
        assert proc.wait(timeout=30) in (0, -signal.SIGTERM)
        assert "Finished server process" in proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
