"""The MCP proxy cannot be walked around (docs/integrations/mcp-proxy.md): the real proxy, run as a
subprocess, is written raw JSON lines on its stdin — as any MCP client, or anything else, may write
them — in front of a naive upstream that would run any `tools/call` it is sent (`echo_mcp_server.py`).
Every `tools/call` goes through the gate or is refused with a JSON-RPC error; when the client closes
stdin, or an HTTP upstream's session ends, the proxy stops the upstream and exits."""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from approvals.models import ConfirmationRequest, ToolCall
from tests.integrations.conftest import WAIT
from tests.integrations.crm_server import CrmServer
from tests.support import wait_until

pytestmark = pytest.mark.django_db(transaction=True)

ECHO_SERVER = str(Path(__file__).with_name("echo_mcp_server.py"))
PROXY_COMMAND = str(Path(sys.executable).with_name("gateway-mcp-proxy"))  # the console command in this venv
PAY = {"name": "pay_invoice", "arguments": {"invoice_id": "INV-7", "amount": 900}}
BAD_CALL_ID = {"code": -32600, "message": "a tools/call needs an id that is a string or an integer"}
BATCH_REFUSED = {
    "code": -32600,
    "message": "JSON-RPC batches are not supported (MCP has had none since 2025-06-18): send one message a line",
}
EXIT_WITHIN = 15.0  # seconds from stdin closed to the proxy's exit (a lingering upstream is killed after ~4 s)


class RawProxy:
    """The `gateway-mcp-proxy` command (the installed package's) with pipes: JSON lines in, JSON lines out,
    nothing in between."""

    def __init__(self, gateway_url: str, api_key: str, *options: str, upstream: list[str] | None = None) -> None:
        """`upstream`: its command; None when `options` name an `--upstream-url`."""
        env = {**os.environ, "GATEWAY_URL": gateway_url, "GATEWAY_API_KEY": api_key}
        args = [PROXY_COMMAND, "--name", "billing", *options]
        self.process = subprocess.Popen(
            [*args, *(["--", *upstream] if upstream else [])],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            cwd="/",  # the installed command, from any directory
            text=True,
        )
        self.answers: queue.Queue[Any] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.process.stdout:
            self.answers.put(json.loads(line))

    def write(self, message: Any) -> None:
        """One line: a message, a batch, or raw text."""
        self.process.stdin.write((message if isinstance(message, str) else json.dumps(message)) + "\n")
        self.process.stdin.flush()

    def answer(self, timeout: float = WAIT) -> Any:
        return self.answers.get(timeout=timeout)

    def answers_until(self, request_id: Any) -> list[Any]:
        """Every answer up to and including the one to `request_id` (the proxy answers in order what it refuses)."""
        seen = []
        while True:
            seen.append(self.answer())
            if isinstance(seen[-1], dict) and seen[-1].get("id") == request_id:
                return seen

    def handshake(self) -> dict[str, Any]:
        self.write(
            {
                "jsonrpc": "2.0", "id": "init", "method": "initialize",
                "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}},
            }
        )  # fmt: skip
        answer = self.answer()
        self.write({"jsonrpc": "2.0", "method": "notifications/initialized"})
        return answer

    def close_stdin_and_wait(self) -> tuple[int, float]:
        """Close stdin as a client that goes away does; the exit status and how long the exit took."""
        closed = time.monotonic()
        self.process.stdin.close()
        status = self.process.wait(timeout=EXIT_WITHIN)
        return status, time.monotonic() - closed

    def stderr_after_exit(self) -> str:
        """Close stdin, wait for the exit; what the proxy logged."""
        self.close_stdin_and_wait()
        return self.process.stderr.read()

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)


def logged(log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False
    return "\nState:\tZ" not in state  # a zombie has exited


@pytest.fixture
def key(live_gateway, transactional_db) -> str:
    from approvals import services
    from approvals.models import Agent
    from tests.conftest import apply_config

    apply_config(
        """
channels: [{name: web, kind: web}]
agents:
  - name: mcp-agent
    hooks:
      - {kind: approval_gate, name: ask-alice, tools: ["billing__*"], channel: web, approvers: [alice], timeout_seconds: 600}
"""
    )
    return services.api_key_create(agent=Agent.objects.get(name="mcp-agent"))[1]


@pytest.fixture
def started(live_gateway, key, tmp_path):
    """Start proxies in front of the echo upstream (logging to `tmp_path/upstream.log`); stopped afterwards."""
    proxies: list[RawProxy] = []

    def start(*options: str, linger: bool = False) -> tuple[RawProxy, Path]:
        log = tmp_path / f"upstream-{len(proxies)}.log"
        upstream = [sys.executable, ECHO_SERVER, str(log), *(["--linger"] if linger else [])]
        proxies.append(RawProxy(live_gateway.url, key, *options, upstream=upstream))
        return proxies[-1], log

    yield start
    for proxy in proxies:
        proxy.stop()


def call(request_id: Any = None, **envelope: Any) -> dict[str, Any]:
    """A tools/call of pay_invoice; `request_id` None: no id at all."""
    message = {"jsonrpc": "2.0", "method": "tools/call", "params": PAY, **envelope}
    if request_id is not None:
        message["id"] = request_id
    return message


def test_a_tools_call_without_a_usable_id_or_in_a_batch_is_refused_and_never_reaches_the_upstream(started):
    proxy, log = started("--max-wait", "0.5")
    proxy.handshake()

    proxy.write(call())  # a notification: nothing can answer it
    for bad_id in (None, 1.5, True, {"n": 1}, [1]):
        proxy.write({**call(), "id": bad_id})
    proxy.write([call(7), call(), {"jsonrpc": "2.0", "id": 8, "method": "tools/list"}])
    proxy.write([])
    proxy.write("{not json")
    proxy.write(call("call-a"))  # a string id: a request like any other, so gated
    answers = proxy.answers_until("call-a")

    assert answers[:5] == [{"jsonrpc": "2.0", "id": None, "error": BAD_CALL_ID}] * 5
    assert answers[5] == [
        {"jsonrpc": "2.0", "id": 7, "error": BATCH_REFUSED},
        {"jsonrpc": "2.0", "id": 8, "error": BATCH_REFUSED},
    ]
    assert answers[6] == {"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": "an empty batch"}}
    assert answers[7]["error"]["code"] == -32700
    gated = answers[8]
    assert gated["result"]["isError"] is True
    assert "billing__pay_invoice was not run: approval is still pending" in gated["result"]["content"][0]["text"]
    proxy.write({"jsonrpc": "2.0", "id": "last", "method": "ping"})  # everything before it has reached the upstream
    assert proxy.answer() == {"jsonrpc": "2.0", "id": "last", "result": {}}

    assert [e for e in logged(log) if "ran" in e] == []
    received = [json.loads(e["received"]).get("method") for e in logged(log) if "received" in e]
    assert received == ["initialize", "notifications/initialized", "ping"]
    (asked,) = ToolCall.objects.all()  # only the call with a proper id was asked about
    assert (asked.tool_name, asked.decision) == ("billing__pay_invoice", "pending")
    assert ConfirmationRequest.objects.count() == 1
    assert "a tools/call without an id (a notification) dropped" in proxy.stderr_after_exit()


def test_when_the_client_closes_stdin_the_proxy_stops_its_upstream_and_exits(started):
    proxy, log = started()
    proxy.handshake()
    pid = wait_until(lambda: next((e["pid"] for e in logged(log) if "pid" in e), None), WAIT, "the upstream's pid")

    status, took = proxy.close_stdin_and_wait()

    assert (status, took < EXIT_WITHIN) == (0, True)
    wait_until(lambda: not alive(pid), 5, "the upstream's exit")
    assert logged(log)[-1] == {"eof": True}  # it was told first: its stdin closed


def test_an_upstream_that_ignores_its_stdin_closing_is_terminated_and_the_proxy_exits(started):
    proxy, log = started(linger=True)
    proxy.handshake()
    pid = wait_until(lambda: next((e["pid"] for e in logged(log) if "pid" in e), None), WAIT, "the upstream's pid")

    status, took = proxy.close_stdin_and_wait()

    assert (status, took < EXIT_WITHIN) == (0, True)
    wait_until(lambda: not alive(pid), 5, "the upstream's exit")


def test_a_call_held_for_a_human_is_withdrawn_when_the_client_goes_and_the_proxy_still_exits(started):
    proxy, log = started()
    proxy.handshake()
    proxy.write(call(3))
    pending = wait_until(lambda: ConfirmationRequest.objects.filter(status="pending").first(), WAIT, "the request")

    status, _ = proxy.close_stdin_and_wait()

    assert status == 0
    pending.refresh_from_db()
    assert (pending.status, pending.decided_by) == ("cancelled", "agent:mcp-agent")
    assert [e for e in logged(log) if "ran" in e] == []


# --------------------------------------------------------------------------- an HTTP upstream


@pytest.fixture
def crm():
    servers: list[CrmServer] = []

    def start() -> CrmServer:
        servers.append(CrmServer().start())
        return servers[-1]

    yield start
    for server in servers:
        server.stop()


def test_with_an_http_upstream_closing_stdin_ends_the_session_and_the_proxy_exits(live_gateway, key, crm):
    server = crm()
    proxy = RawProxy(live_gateway.url, key, "--upstream-url", server.url)
    try:
        proxy.handshake()
        proxy.write({"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
        assert [t["name"] for t in proxy.answer()["result"]["tools"]] == ["lookup", "delete_customer"]
        session = next(s for _, s in server.requests if s)

        status, took = proxy.close_stdin_and_wait()
    finally:
        proxy.stop()

    assert (status, took < EXIT_WITHIN) == (0, True)
    assert ("DELETE", session) in server.requests


def test_when_the_http_upstream_ends_the_session_the_proxy_says_so_and_exits(live_gateway, key, crm):
    server = crm()
    proxy = RawProxy(live_gateway.url, key, "--upstream-url", server.url)
    try:
        proxy.handshake()
        session = wait_until(lambda: next((s for _, s in server.requests if s), None), WAIT, "the MCP session")
        ended = httpx.delete(server.url, headers={"mcp-session-id": session, "mcp-protocol-version": "2025-06-18"})
        assert ended.status_code == 200, ended.text  # the server ends it: it answers 404 on it from now on
        proxy.write({"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
        status = proxy.process.wait(timeout=EXIT_WITHIN)
        stderr = proxy.process.stderr.read()
    finally:
        proxy.stop()

    assert status == 1
    assert "mcp_proxy: the upstream server 'billing' ended the MCP session" in stderr
    answers = [proxy.answers.get_nowait() for _ in range(proxy.answers.qsize())]
    # The tools/list gets the server's own answer, unless its SSE stream found the session gone first.
    assert all(a["id"] == 2 and "error" in a for a in answers), answers
