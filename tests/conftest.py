"""Shared fixtures: the gateway served over real HTTP, a real Celery worker,
and the personas every test talks about (an agent, an approver, an outsider)."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Iterator

import httpx
import pytest

from tests.support import RequestLog

pytest_plugins = ["tests.fakes.slack_api", "tests.fakes.feishu_api", "tests.fakes.smtp_server", "tests.fakes.telegram_api"]


class LiveGateway:
    """`gateway.asgi:application` under uvicorn in a thread, on 127.0.0.1:<free port>.

    `requests` records what it serves while a test asks for it (the `gateway_requests` fixture).
    """

    def __init__(self) -> None:
        import uvicorn

        from gateway.asgi import application

        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.requests = RequestLog(application, recording=False)
        from gateway.http_protocol import OneWriteProtocol  # (as `approval-gateway run` serves it)

        config = uvicorn.Config(
            self.requests, http=OneWriteProtocol, log_level="warning", lifespan="off", ws="websockets-sansio"
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self._run, name="live-gateway", daemon=True)

    def _run(self) -> None:
        asyncio.run(self.server.serve(sockets=[self.sock]))

    def start(self) -> LiveGateway:
        self.thread.start()
        deadline = time.monotonic() + 15
        while not self.server.started:
            if time.monotonic() > deadline:
                raise RuntimeError("the gateway did not start")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)


@pytest.fixture(scope="session")
def live_gateway(django_db_setup, django_db_blocker):
    gateway = LiveGateway().start()
    yield gateway
    gateway.stop()


@pytest.fixture
def gateway_requests(live_gateway) -> Iterator[RequestLog]:
    """What the live gateway serves during this test: each request, when, and what it answered."""
    yield live_gateway.requests.start()
    live_gateway.requests.stop()


@pytest.fixture
def celery_worker(transactional_db):
    """A real Celery worker (threads) consuming the test broker on Redis, for this test only.

    Tests without it have no worker at all, so "nobody picked the task up" is real there.
    """
    from celery.contrib.testing.worker import start_worker

    from gateway.celery import app

    app.control.purge()  # tasks queued by earlier tests name rows that no longer exist
    with start_worker(app, pool="threads", concurrency=4, perform_ping_check=False, loglevel="WARNING") as worker:
        yield worker


# --------------------------------------------------------------------------- personas


def apply_config(text: str) -> None:
    """Apply a YAML config exactly as `manage.py apply_config` would."""
    from approvals import services
    from approvals.config_schema import parse_config_text

    services.config_apply(config=parse_config_text(text), source="test")


WEB_GATE_CONFIG = """
channels:
  - {name: web, kind: web}
agents:
  - name: purchasing-bot
    hooks:
      - kind: approval_gate
        name: finance-gate
        tools: ["oa__purchase_pay", "fs__*"]
        channel: web
        approvers: ["alice", "bob"]
        timeout_seconds: 1800
  - name: other-bot
    hooks: []
"""


class AgentClient:
    """An agent talking to the live gateway over HTTP with its API key."""

    def __init__(self, base_url: str, key: str, agent):
        self.key = key
        self.agent = agent
        self.http = httpx.Client(base_url=base_url, headers={"Authorization": f"Bearer {key}"}, timeout=30)

    def pre_tool_use(self, tool_name: str, tool_args: dict | None = None, **extra) -> httpx.Response:
        body = {"session_id": "s-1", "tool_name": tool_name, "tool_args": tool_args or {}, **extra}
        return self.http.post("/api/v1/hooks/pre-tool-use", json=body)

    def wait(self, confirmation_id: str, timeout: float = 10) -> httpx.Response:
        return self.http.get(f"/api/v1/confirmations/{confirmation_id}/wait", params={"timeout": timeout})

    def get(self, confirmation_id: str) -> httpx.Response:
        return self.http.get(f"/api/v1/confirmations/{confirmation_id}")


def make_agent_client(live_gateway, agent_name: str) -> AgentClient:
    from approvals import services
    from approvals.models import Agent

    agent = Agent.objects.get(name=agent_name)
    _, raw = services.api_key_create(agent=agent)
    return AgentClient(live_gateway.url, raw, agent)


@pytest.fixture
def web_gate(transactional_db):
    apply_config(WEB_GATE_CONFIG)


@pytest.fixture
def agent(live_gateway, web_gate):
    """purchasing-bot: oa__purchase_pay and fs__* need alice's or bob's approval on the web channel."""
    client = make_agent_client(live_gateway, "purchasing-bot")
    yield client
    client.http.close()  # an open keep-alive connection slows the server's shutdown


@pytest.fixture
def other_agent(live_gateway, web_gate):
    client = make_agent_client(live_gateway, "other-bot")
    yield client
    client.http.close()


def ask_in_turn(agent: AgentClient, amount: int, turn: str = "t-1") -> str:
    """A gated payment of `turn` (pending: a later one joins the first one's card); its confirmation id."""
    answer = agent.pre_tool_use("oa__purchase_pay", {"amount": amount}, turn_id=turn, user_id="u-42").json()
    assert answer["decision"] == "pending", answer
    return answer["confirmation_id"]


def decisions(*confirmation_ids: str) -> list[tuple]:
    """What a click could change about these requests: (status, when decided, how many responses) each."""
    from approvals.models import ConfirmationRequest

    rows = []
    for pk in confirmation_ids:
        confirmation = ConfirmationRequest.objects.get(pk=pk)
        rows.append((confirmation.status, confirmation.decided_at, confirmation.responses.count()))
    return rows


def decide(confirmation_id: str, decision: str, actor: str = "alice", reason: str = "", channel: str = "web"):
    """An approver's click, through the same service every channel calls."""
    from approvals import services
    from gateway_contract import Callback

    return services.confirmation_respond(
        channel_name=channel,
        callback=Callback(confirmation_id=str(confirmation_id), decision=decision, actor=actor, reason=reason),
    )
