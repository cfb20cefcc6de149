"""Fixtures for the agent-side client: a gateway that restarts on the same port,
an agent whose tools are allowed, rewritten, frozen or gated, and a human who decides
when the test says so."""

from __future__ import annotations

import asyncio
import socket
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
import yaml

from tests.conftest import apply_config, decide
from tests.support import DeadPort, RequestLog, wait_until

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
    """A human who answers the next pending request from another thread: as soon as it exists,
    or once `when(confirmation_id)` holds (e.g. `parked`: the agent is waiting for them)."""

    def __init__(self) -> None:
        self.threads: list[threading.Thread] = []
        self.errors: list[BaseException] = []

    def decides(
        self, decision: str, *, when: Callable[[str], Any] | None = None, reason: str = "", actor: str = "alice"
    ) -> None:
        def run() -> None:
            from django.db import connection

            from approvals.models import ConfirmationRequest

            def first_pending() -> str | None:
                pending = ConfirmationRequest.objects.filter(status="pending").order_by("created_at").first()
                return str(pending.pk) if pending is not None else None

            try:
                confirmation_id = wait_until(first_pending, timeout=30, what="a pending request")
                if when is not None:
                    try:
                        condition = getattr(when, "__name__", "the approver's cue")
                        wait_until(lambda: when(confirmation_id), timeout=30, what=condition)
                    except BaseException:
                        # Do not leave the agent waiting for the request's deadline: refuse, then fail the test.
                        decide(confirmation_id, "reject", actor=actor, reason="the cue never came")
                        raise
                decide(confirmation_id, decision, actor=actor, reason=reason)
            except BaseException as exc:  # raised by join(), in the test
                self.errors.append(exc)
            finally:
                connection.close()

        thread = threading.Thread(target=run, name="approver")
        thread.start()
        self.threads.append(thread)

    def join(self) -> None:
        for thread in self.threads:
            thread.join(timeout=40)
        assert not any(thread.is_alive() for thread in self.threads), "the approver never decided"
        if self.errors:
            raise self.errors[0]


@pytest.fixture
def approver():
    human = Approver()
    yield human
    human.join()


class RestartableGateway:
    """`gateway.asgi:application` under uvicorn in a thread, restartable on the same port.

    `requests` records every request it serves across restarts (`Exchange.server` says which start);
    `down()` holds the port while it is stopped, so a test sees the client run into the outage.
    """

    def __init__(self) -> None:
        from gateway.asgi import application

        probe = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        probe.bind(("127.0.0.1", 0))
        self.port = probe.getsockname()[1]
        probe.close()
        self.url = f"http://127.0.0.1:{self.port}"
        self.requests = RequestLog(application)
        self.server = None
        self.thread: threading.Thread | None = None
        self.starts = 0

    def start(self) -> RestartableGateway:
        import uvicorn

        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # the old server's port, at once
        sock.bind(("127.0.0.1", self.port))
        self.requests.server = self.starts + 1
        config = uvicorn.Config(self.requests, log_level="warning", lifespan="off", ws="websockets-sansio")
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
        """Stop as a deploy does: no new connections; requests in flight get their answer first."""
        if self.server is not None:
            self.server.should_exit = True
            self.thread.join(timeout=15)
            self.server = None

    def down(self) -> DeadPort:
        """While stopped: the port drops every connection, and counts the client's attempts."""
        assert self.server is None, "stop the gateway first"
        return DeadPort(self.port)


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
