"""The gateway names its version: `X-Gateway-Version` on every answer — the agent API's hot paths (served
before Django), Django's API views and errors, the pages, the admin, the probes and the WebSocket
handshake — and `GET /api/v1/` (open to anyone), so a client can say "this gateway is too old for me"."""

from __future__ import annotations

import json
import re
import socket
from pathlib import Path

import httpx
import pytest
from websockets.sync.client import connect

from gateway.version import __version__
from tests.conftest import AgentClient

pytestmark = pytest.mark.django_db(transaction=True)

ROOT = Path(__file__).resolve().parents[2]


def test_the_version_is_semantic_and_the_same_for_the_server_and_the_typescript_client():
    assert re.fullmatch(r"\d+\.\d+\.\d+", __version__)
    assert json.loads((ROOT / "clients" / "typescript" / "package.json").read_text())["version"] == __version__
    assert f'VERSION = "{__version__}"' in (ROOT / "clients" / "typescript" / "src" / "version.ts").read_text()


def test_the_api_root_names_the_version_without_a_key(live_gateway):
    answer = httpx.get(f"{live_gateway.url}/api/v1/")

    assert answer.status_code == 200
    assert answer.json() == {"version": __version__, "api": "v1", "schema": "/api/v1/schema/", "docs": "/api/v1/docs/"}
    assert answer.headers["X-Gateway-Version"] == __version__


def test_the_api_root_answers_the_same_with_a_key_even_a_wrong_one(agent: AgentClient):
    with_key = agent.http.get("/api/v1/")
    wrong_key = agent.http.get("/api/v1/", headers={"Authorization": "Bearer gw_not-a-key"})

    assert with_key.status_code == wrong_key.status_code == 200
    assert with_key.json()["version"] == wrong_key.json()["version"] == __version__


def declared_too_large(agent: AgentClient) -> bytes:
    """The head of the answer to a request declaring a 100 MB body (none of which is sent)."""
    base = agent.http.base_url
    with socket.create_connection((base.host, base.port), timeout=15) as sock:
        sock.sendall(
            b"POST /api/v1/hooks/pre-tool-use HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            + f"Authorization: Bearer {agent.key}\r\nContent-Length: {100 * 1024 * 1024}\r\n\r\n".encode()
        )
        answer = b""
        while b"\r\n\r\n" not in answer:
            part = sock.recv(65536)
            assert part, answer
            answer += part
    return answer.partition(b"\r\n\r\n")[0] + b"\r\n"


def test_every_kind_of_answer_carries_the_version_header(agent: AgentClient, live_gateway):
    allowed = agent.pre_tool_use("web__search", {"q": "x"})  # the hot path (approvals.api.asgi)
    pending = agent.pre_tool_use("oa__purchase_pay", {"amount": 5})
    waited = agent.wait(pending.json()["confirmation_id"], timeout=0)  # the long-poll's own path
    refused = agent.http.post("/api/v1/hooks/pre-tool-use", json={"tool_name": "x"})  # DRF's 400
    unknown = agent.http.get("/api/v1/no-such-thing")  # Django's 404, in the API's shape
    too_large = declared_too_large(agent)  # the body gate's 413, before a byte of the body
    page = httpx.get(f"{live_gateway.url}/approvals/")  # the pages' own chain: a redirect to sign in
    admin = httpx.get(f"{live_gateway.url}/admin/login/")
    health = httpx.get(f"{live_gateway.url}/healthz")
    schema = httpx.get(f"{live_gateway.url}/api/v1/schema/")

    answers = (allowed, pending, waited, refused, unknown, page, admin, health, schema)
    assert [r.status_code for r in answers] == [200, 200, 200, 400, 404, 302, 200, 200, 200]
    assert allowed.json()["decision"] == "allow"
    for answer in answers:
        assert answer.headers.get_list("X-Gateway-Version") == [__version__], answer.request.url
    assert too_large.startswith(b"HTTP/1.1 413 ")
    assert too_large.lower().count(b"\r\nx-gateway-version: ") == 1
    assert f"\r\nx-gateway-version: {__version__}\r\n".encode() in too_large.lower()


def test_the_websocket_handshake_carries_the_version_header(agent: AgentClient):
    pending = agent.pre_tool_use("oa__purchase_pay", {"amount": 5}).json()
    base = agent.http.base_url
    url = f"ws://{base.host}:{base.port}/ws/v1/confirmations/{pending['confirmation_id']}"

    with connect(url, additional_headers={"Authorization": f"Bearer {agent.key}"}, open_timeout=10) as ws:
        assert ws.response.headers["X-Gateway-Version"] == __version__
        assert json.loads(ws.recv(timeout=5))["status"] == "pending"


def test_the_openapi_document_describes_the_api_root(live_gateway):
    schema = httpx.get(f"{live_gateway.url}/api/v1/schema/", headers={"Accept": "application/json"}).json()

    operation = schema["paths"]["/api/v1/"]["get"]
    assert "security" not in operation  # no key needed (an operation that needs one names ApiKey)
    assert schema["paths"]["/api/v1/confirmations/{confirmation_id}"]["get"]["security"] == [{"ApiKey": []}]
    properties = schema["components"]["schemas"]["ApiRoot"]["properties"]
    assert {"version", "api"} <= set(properties)
    assert schema["info"]["version"] == __version__
