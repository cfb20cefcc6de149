"""Fixtures for the agent-side client: a gateway that restarts on the same port,
an agent whose tools are allowed, rewritten, frozen or gated, and a human who decides later."""

from __future__ import annotations

import asyncio
import socket
import sys
import threading
import time

import pytest
import yaml

from tests.conftest import apply_config, decide

# `command` hooks in the agent's config (Claude Code's hook protocol, run by the gateway).
HTTPS_ONLY = (
    "import json,sys; e=json.load(sys.stdin); a=e['tool_input']; "
    "a['url']=a['url'].replace('http:','https:',1); print(json.dumps({'tool_args': a}))"
)
CAP_AT_100 = (
    "import json,sys; e=json.load(sys.stdin); a=e['tool_input']; "
    "a['amount']=min(a['amount'],100); print(json.dumps({'tool_args': a}))"
)
FREEZE = "import sys; sys.stderr.write('writes are frozen'); sys.exit(2)"


def coder_config() -> str:
    """`coder`: Read runs; WebFetch goes https; pay is capped at 100 and, like Bash, needs alice; Write is frozen."""
    config = {
        "channels": [{"name": "web", "kind": "web"}],
        "agents": [
            {
                "name": "coder",
                "hooks": [
                    {
                        "kind": "command",
                        "name": "https-only",
                        "event": "pre_tool_use",
                        "tools": ["WebFetch"],
                        "command": [sys.executable, "-c", HTTPS_ONLY],
                    },
                    {
                        "kind": "command",
                        "name": "cap",
                        "event": "pre_tool_use",
                        "tools": ["pay"],
                        "command": [sys.executable, "-c", CAP_AT_100],
                    },
                    {
                        "kind": "command",
                        "name": "freeze-writes",
                        "event": "pre_tool_use",
                        "tools": ["Write"],
                        "command": [sys.executable, "-c", FREEZE],
                    },
                    {
                        "kind": "approval_gate",
                        "name": "ask-a-human",
                        "tools": ["Bash", "pay"],
                        "channel": "web",
                        "approvers": ["alice"],
                        "timeout_seconds": 600,
                    },
                ],
            }
        ],
    }
    return yaml.safe_dump(config)


def new_api_key(agent_name: str) -> str:
    from approvals import services
    from approvals.models import Agent

    _, raw = services.api_key_create(agent=Agent.objects.get(name=agent_name))
    return raw


@pytest.fixture
def coder_key(transactional_db) -> str:
    apply_config(coder_config())
    return new_api_key("coder")


class Approver:
    """A human who answers the next pending request from another thread, after a delay."""

    def __init__(self) -> None:
        self.threads: list[threading.Thread] = []

    def decides(self, decision: str, *, after: float = 0.0, reason: str = "", actor: str = "alice") -> None:
        def run() -> None:
            from django.db import connection

            from approvals.models import ConfirmationRequest

            try:
                deadline = time.monotonic() + 30
                while time.monotonic() < deadline:
                    pending = ConfirmationRequest.objects.filter(status="pending").order_by("created_at").first()
                    if pending is not None:
                        time.sleep(after)
                        decide(pending.pk, decision, actor=actor, reason=reason)
                        return
                    time.sleep(0.05)
            finally:
                connection.close()

        thread = threading.Thread(target=run, name="approver")
        thread.start()
        self.threads.append(thread)

    def join(self) -> None:
        for thread in self.threads:
            thread.join(timeout=40)


@pytest.fixture
def approver():
    human = Approver()
    yield human
    human.join()


class RestartableGateway:
    """`gateway.asgi:application` under uvicorn in a thread, restartable on the same port."""

    def __init__(self) -> None:
        probe = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        probe.bind(("127.0.0.1", 0))
        self.port = probe.getsockname()[1]
        probe.close()
        self.url = f"http://127.0.0.1:{self.port}"
        self.server = None
        self.thread: threading.Thread | None = None
        self.starts = 0

    def start(self) -> RestartableGateway:
        import uvicorn

        from gateway.asgi import application

        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # the old server's port, at once
        sock.bind(("127.0.0.1", self.port))
        config = uvicorn.Config(application, log_level="warning", lifespan="off", ws="websockets-sansio")
        server = uvicorn.Server(config)
        thread = threading.Thread(target=lambda: asyncio.run(server.serve(sockets=[sock])), daemon=True)
        thread.start()
        deadline = time.monotonic() + 15
        while not server.started:
            if time.monotonic() > deadline:
                raise RuntimeError("the gateway did not start")
            time.sleep(0.02)
        self.server, self.thread = server, thread
        self.starts += 1
        return self

    def stop(self) -> None:
        if self.server is not None:
            self.server.should_exit = True
            self.thread.join(timeout=15)
            self.server = None

    def restart_later(self, *, after: float, downtime: float) -> threading.Thread:
        """Stop the gateway `after` seconds from now and start a new one `downtime` seconds later."""

        def run() -> None:
            time.sleep(after)
            self.stop()
            time.sleep(downtime)
            self.start()

        thread = threading.Thread(target=run, name="gateway-restart")
        thread.start()
        return thread


@pytest.fixture
def restartable_gateway(django_db_setup):
    gateway = RestartableGateway()
    yield gateway
    gateway.stop()


@pytest.fixture
def closed_port_url() -> str:
    """A URL where nothing listens."""
    probe = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    return f"http://127.0.0.1:{port}"


@pytest.fixture
def gateway_client():
    """Makes `GatewayClient`s and closes them after the test (an open keep-alive connection slows the server's stop)."""
    from gateway_client import GatewayClient

    made: list[GatewayClient] = []

    def make(base_url: str, api_key: str, **options) -> GatewayClient:
        client = GatewayClient(base_url, api_key, **options)
        made.append(client)
        return client

    yield make
    for client in made:
        client.close()
