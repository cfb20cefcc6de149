"""The agent client of this release works against the API surface of the previous one (0.3.0, its
recorded OpenAPI document; docs/reference/api.md, "Compatibility").

The client talks to the live gateway through a loopback proxy that stands for a 0.3.0 server: each request
must be an operation of the recorded document, with only the query parameters it declares and a body its
request schema accepts; each answer is cut down to the fields the recorded response schema declares (and
must satisfy it), without the `X-Gateway-Version` header 0.3.0 did not send; a path 0.3.0 did not serve
answers its 404. The client's calls — asked, approved with rewritten arguments, refused, left pending,
cancelled, a question answered, every lifecycle event — must come out as they do against this release.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

import gateway_client
from gateway_client import GatewayClient
from tests.compat.openapi import Document, recorded
from tests.gateway_client.conftest import approver, coder_key  # noqa: F401 (fixtures)
from tests.gateway_client.test_ask import FORM, answer, the_question
from tests.support import InThread, parked, wait_until

pytestmark = pytest.mark.django_db(transaction=True)

# What 0.3.0 did not serve and a client may still ask for: the version probe (`GET /api/v1/`, new in 0.4.0),
# which such a server answers 404.
PROBES = {("GET", "/api/v1/")}
# The operations of the agent API the client has a method for (the staff's config endpoints it has none).
CLIENT_OPERATIONS = {
    ("post", "/api/v1/hooks/pre-tool-use"),
    *{("post", f"/api/v1/hooks/{event}") for event in
      ("session-start", "pre-turn", "post-tool-use", "tool-error", "post-turn", "session-end")},
    ("get", "/api/v1/confirmations/{confirmation_id}"),
    ("get", "/api/v1/confirmations/{confirmation_id}/wait"),
    ("post", "/api/v1/confirmations/{confirmation_id}/cancel"),
    ("post", "/api/v1/questions"),
    ("get", "/api/v1/questions/{question_id}"),
    ("get", "/api/v1/questions/{question_id}/wait"),
}  # fmt: skip


class OldSurface:
    """A loopback proxy in front of the live gateway that answers as the recorded 0.3.0 document says."""

    def __init__(self, document: Document, upstream: str) -> None:
        self.document = document
        self.upstream = httpx.Client(base_url=upstream, timeout=90)
        self.served: set[tuple[str, str]] = set()
        self.beyond: list[tuple[str, str]] = []
        self.problems: list[str] = []
        self.dropped: set[str] = set()
        surface = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                surface.handle(self)

            do_POST = do_GET

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def handle(self, request: BaseHTTPRequestHandler) -> None:
        url = urlsplit(request.path)
        body = request.rfile.read(int(request.headers.get("Content-Length") or 0))
        operation = self.document.operation(request.command, url.path)
        if operation is None:
            self.beyond.append((request.command, url.path))
            error = {"error": {"code": "not_found", "message": "Not found.", "details": None}}
            return self.reply(request, 404, error)
        where = f"{request.command} {operation.path}"
        self.served.add((operation.method, operation.path))
        unknown = set(parse_qs(url.query)) - operation.query_parameters()
        if unknown:
            self.problems.append(f"{where}: query parameters 0.3.0 did not take: {sorted(unknown)}")
        schema = operation.request_schema()
        if body and schema is not None:
            self.problems += [f"{where} request: {e}" for e in self.document.errors(json.loads(body), schema)]
        headers = {k: v for k, v in request.headers.items() if k.lower() in ("authorization", "content-type", "user-agent")}
        answer = self.upstream.request(request.command, request.path, content=body, headers=headers)
        value = answer.json()
        schema = operation.response_schema(answer.status_code)
        if schema is None:
            self.problems.append(f"{where}: 0.3.0 never answered {answer.status_code}")
        else:
            value = self.document.cut(value, schema, self.dropped)
            self.problems += [f"{where} {answer.status_code}: {e}" for e in self.document.errors(value, schema)]
        self.reply(request, answer.status_code, value)

    @staticmethod
    def reply(request: BaseHTTPRequestHandler, status: int, value: object) -> None:
        data = json.dumps(value).encode()
        request.send_response(status)
        request.send_header("Content-Type", "application/json")
        request.send_header("Content-Length", str(len(data)))
        request.end_headers()
        request.wfile.write(data)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.upstream.close()


@pytest.fixture
def old_surface(live_gateway) -> Iterator[OldSurface]:
    surface = OldSurface(Document(recorded("0.3.0")), live_gateway.url)
    yield surface
    surface.close()


def test_the_client_works_against_the_0_3_0_surface(old_surface: OldSurface, coder_key, approver):
    with GatewayClient(old_surface.url, coder_key, long_poll=1) as client:
        started = client.session_start("s-1")
        turn = client.pre_turn("s-1", turn_id="t-1")
        read = client.pre_tool_use("s-1", "Read", {"path": "README.md"}, tool_call_id="c-1")
        reported = client.post_tool_use("s-1", "c-1", result="the file", tool_name="Read")
        failed = client.tool_error("s-1", "c-1", "disk on fire", tool_name="Read")
        frozen = client.pre_tool_use("s-1", "Write", {"path": "x"})

        approver.decides("approve", when=parked)
        paid = client.pre_tool_use("s-1", "pay", {"amount": 500})  # capped at 100 by a hook, then approved
        approver.join()
        approver.decides("reject", when=parked, reason="not on a Friday")
        refused = client.pre_tool_use("s-1", "Bash", {"command": "deploy"})
        approver.join()

        left = client.pre_tool_use("s-1", "Bash", {"command": "ls"}, max_wait=0)
        looked = client.get_confirmation(left.confirmation_id)
        polled = client.wait(left.confirmation_id, timeout=0)
        cancelled = client.cancel(left.confirmation_id)

        asking = InThread(client.ask_question, "What should I order?", FORM, channel="web", approvers=["alice"])
        question_id = the_question()
        # Answered once the client long-polls (its first ask, held for `long_poll`, has ended by then).
        wait_until(lambda: ("get", "/api/v1/questions/{question_id}/wait") in old_surface.served, what="a long-poll")
        wait_until(lambda: parked(question_id), what="the client to wait")
        answer(question_id, {"vendor": "Globex", "budget": 1200})
        answered = asking.result()
        question = client.get_question(question_id)
        ended = (client.post_turn("s-1", turn_id="t-1"), client.session_end("s-1"))

    assert old_surface.problems == []
    assert set(old_surface.beyond) <= PROBES
    assert old_surface.served == CLIENT_OPERATIONS
    assert started["decision"] == turn["decision"] == "allow"
    assert read.allowed and reported["result"] == "the file" and failed["action"] in ("raise", "abort")
    assert frozen.denied and "writes are frozen" in frozen.reason
    assert paid.allowed and paid.tool_args == {"amount": 100}
    assert refused.denied and "not on a Friday" in refused.reason
    assert left.still_pending and looked["status"] == polled["status"] == "pending"
    assert cancelled["status"] == "cancelled"
    assert (answered.status, answered.value, answered.answered_by) == ("answered", {"vendor": "Globex", "budget": 1200}, "web:alice")
    assert question["status"] == "answered"
    assert all("side_effects" in done for done in ended)


def test_every_path_the_clients_code_names_is_in_the_0_3_0_document():
    document = Document(recorded("0.3.0"))
    source = Path(gateway_client.__file__).resolve().parent
    named = set()
    for module in source.rglob("*.py"):
        text = module.read_text()
        named |= {m for m in re.findall(r'f?"\{API_PREFIX\}(/[^"]*)"', text)}
        named |= {m.removeprefix("/api/v1") for m in re.findall(r'"(/api/v1/[^"\s]*)"', text)}
    paths = {"/api/v1" + re.sub(r"\{[^}]*\}", "x", path) for path in named}
    slugs = {path.replace("/hooks/x", f"/hooks/{event}") for path in paths if path.endswith("/hooks/x")
             for event in ("session-start", "pre-turn", "post-tool-use", "tool-error", "post-turn", "session-end")}  # fmt: skip

    served = {p for p in (paths - {p for p in paths if p.endswith("/hooks/x")}) | slugs}
    assert "/api/v1/hooks/pre-tool-use" in served and len(served) >= 10  # the scan finds the client's calls
    missing = {p for p in served if not any(document.operation(m, p) for m in ("GET", "POST"))}
    assert missing <= {path for _, path in PROBES}


def test_the_old_surface_catches_what_0_3_0_did_not_have(old_surface: OldSurface, coder_key):
    # The checks above must be able to fail: a field 0.3.0 did not take, a path it did not serve, and an
    # answer field it did not send are each seen.
    http = httpx.Client(base_url=old_surface.url, headers={"Authorization": f"Bearer {coder_key}"}, timeout=30)
    http.post("/api/v1/hooks/pre-tool-use", json={"session_id": "s", "tool_name": "Read", "novelty": 1})
    probe = http.get("/api/v1/")
    http.close()
    ask = old_surface.document.operation("POST", "/api/v1/hooks/pre-tool-use")
    dropped: set[str] = set()
    cut = old_surface.document.cut(
        {"decision": "allow", "tool_args": {"a": 1}, "hook_decisions": [{"hook": "h", "decision": "allow", "reason": "", "new": 1}],
         "brand_new": True}, ask.response_schema(200), dropped,
    )  # fmt: skip

    assert any("novelty" in problem for problem in old_surface.problems), old_surface.problems
    assert probe.status_code == 404 and "X-Gateway-Version" not in probe.headers
    assert old_surface.beyond == [("GET", "/api/v1/")]
    assert dropped == {"brand_new", "hook_decisions[].new"} and cut["tool_args"] == {"a": 1}
