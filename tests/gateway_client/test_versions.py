"""The client's version (docs/agent-client.md, "Versions"): `gateway_client.__version__` is the installed
distribution's and every request names it in its User-Agent; a gateway that names a version older than
`MIN_GATEWAY_VERSION` in its `X-Gateway-Version` header is refused with `GatewayTooOld` — by the client, a
gated tool (which does not run) and the Claude Code hook (which blocks) — while a gateway that sends no
header (older than 0.4.0, whose API 0.3.0 fixed) is accepted. The gateways here are tiny HTTP servers on
loopback that answer like the agent API and name the version each test says."""

from __future__ import annotations

import asyncio
import importlib.metadata
import io
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

import gateway_client
from gateway_client import AsyncGatewayClient, GatewayClient, GatewayTooOld, ToolGate
from gateway_client.claude_code import main as claude_code_hook
from gateway_client.version import MIN_GATEWAY_VERSION
from tests.gateway_client.test_claude_code import hook_json

ALLOW = {"decision": "allow", "tool_args": {"q": 1}, "reason": "", "confirmation_id": None}


class VersionedGateway:
    """Answers every POST `allow` (the agent API's shape), with `X-Gateway-Version: <version>` unless None;
    records each request's User-Agent."""

    def __init__(self, version: str | None) -> None:
        self.user_agents: list[str] = []
        gateway = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                gateway.user_agents.append(self.headers["User-Agent"])
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                body = json.dumps(ALLOW).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                if version is not None:
                    self.send_header("X-Gateway-Version", version)
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def gateway_of() -> Iterator:
    started: list[VersionedGateway] = []

    def start(version: str | None) -> VersionedGateway:
        started.append(VersionedGateway(version))
        return started[-1]

    yield start
    for gateway in started:
        gateway.close()


def test_the_version_is_the_distributions_and_every_request_names_it_in_the_user_agent(gateway_of):
    gateway = gateway_of(None)
    with GatewayClient(gateway.url, "k") as client:
        client.pre_tool_use("s-1", "Read", {"q": 1})

    assert gateway_client.__version__ == importlib.metadata.version("approval-gateway-client") == "0.4.0"
    assert gateway.user_agents == ["approval-gateway-client/0.4.0 (python)"]


@pytest.mark.parametrize("version", [None, MIN_GATEWAY_VERSION, "0.4.0", "0.4.1rc1", "1.0.0", "not-a-version"])
def test_a_gateway_of_the_needed_version_or_naming_none_is_used(gateway_of, version):
    gateway = gateway_of(version)
    with GatewayClient(gateway.url, "k") as client:
        decision = client.pre_tool_use("s-1", "Read", {"q": 1})

    assert decision.allowed and decision.tool_args == {"q": 1}


@pytest.mark.parametrize("version", ["0.2.0", "0.2.9", "v0.1"])
def test_a_gateway_older_than_the_client_needs_is_refused_at_its_first_answer(gateway_of, version):
    gateway = gateway_of(version)
    with GatewayClient(gateway.url, "k", fail_open=True) as client:
        with pytest.raises(GatewayTooOld) as refused:
            client.pre_tool_use("s-1", "Read", {"q": 1})

    assert str(refused.value) == f"the gateway at {gateway.url} is {version}; this client needs 0.3.0 or newer"
    assert refused.value.gateway_version == version
    assert len(gateway.user_agents) == 1  # not retried, and not an outage: fail_open does not allow it


def test_the_async_client_refuses_a_gateway_too_old_too(gateway_of):
    gateway = gateway_of("0.2.0")

    async def ask() -> None:
        async with AsyncGatewayClient(gateway.url, "k") as client:
            await client.pre_tool_use("s-1", "Read", {"q": 1})

    with pytest.raises(GatewayTooOld, match=r"is 0\.2\.0; this client needs 0\.3\.0 or newer"):
        asyncio.run(ask())


def test_a_gated_tool_does_not_run_against_a_gateway_too_old_and_the_model_is_told_why(gateway_of):
    gateway = gateway_of("0.2.0")
    ran: list[dict] = []
    with GatewayClient(gateway.url, "k") as client:
        result = ToolGate(client).call(tool_name="Read", tool_args={"q": 1}, run=ran.append)

    assert ran == [] and result.status == "refused"
    assert f"the gateway at {gateway.url} is 0.2.0; this client needs 0.3.0 or newer" in result.message


def test_the_claude_code_hook_blocks_the_call_when_the_gateway_is_too_old(gateway_of, tmp_path):
    gateway = gateway_of("0.2.0")
    stdout, stderr = io.StringIO(), io.StringIO()
    status = claude_code_hook(
        ["--url", gateway.url, "--api-key", "k", "--state-dir", str(tmp_path)],
        stdin=io.StringIO(json.dumps(hook_json("Bash", {"command": "git push"}))),
        stdout=stdout,
        stderr=stderr,
    )

    assert status == 2 and stdout.getvalue() == ""  # Claude Code's blocking error: the call does not run
    assert f"the gateway at {gateway.url} is 0.2.0; this client needs 0.3.0 or newer" in stderr.getvalue()
