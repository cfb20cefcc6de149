"""Bodies are bounded before they are read, are JSON or refused, and no API route answers with an HTML page
(docs/reference/api.md, "Limits"). Driven over real HTTP against the live gateway, with raw sockets where
the point is what the server does before the client has finished sending."""

from __future__ import annotations

import json
import socket
import uuid

import httpx
import pytest
from django.conf import settings
from django.contrib.auth.models import User
from django.db import connection

from approvals.models import AgentConfigVersion, ApiKey, ConfirmationRequest, ToolCall
from hooks.models import HookState
from tests.approvals.test_bad_input import counts

pytestmark = pytest.mark.django_db(transaction=True)

ASK = "/api/v1/hooks/pre-tool-use"
LIMIT = settings.GATEWAY_MAX_BODY_BYTES
CHUNK = 64 * 1024


def written() -> tuple[int, ...]:
    """Everything a request could have stored: what an ask writes, and what a lifecycle event does."""
    return (*counts(), HookState.objects.count())


def key_untouched(agent) -> bool:
    """The key was never looked up: its use is recorded on the first lookup (`api_key_touch`)."""
    return ApiKey.objects.get(key_hash=ApiKey.hash_key(agent.key)).last_used_at is None


def assert_error(status: int, body: bytes, expected_status: int, code: str) -> dict:
    assert status == expected_status, body[:500]
    error = json.loads(body)
    assert set(error) == {"error"} and set(error["error"]) == {"code", "message", "details"}, error
    assert error["error"]["code"] == code and error["error"]["message"], error
    return error["error"]


class RawHttp:
    """One HTTP/1.1 request written by hand on a socket, so a test controls exactly what is sent, and when."""

    def __init__(self, port: int, method: str, path: str, headers: dict[str, str]) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=15)
        head = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1", *(f"{k}: {v}" for k, v in headers.items())]
        self.sock.sendall(("\r\n".join(head) + "\r\n\r\n").encode("latin-1"))
        self.sent = 0

    def send_chunk(self, data: bytes) -> None:
        self.sock.sendall(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.sent += len(data)

    def response(self) -> tuple[int, dict[str, str], bytes]:
        data = b""
        while b"\r\n\r\n" not in data:
            part = self.sock.recv(65536)
            assert part, f"the connection closed before an answer: {data!r}"
            data += part
        head, _, body = data.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
        length = int(headers["content-length"])
        while len(body) < length:
            part = self.sock.recv(65536)
            assert part, "the connection closed in the middle of the answer"
            body += part
        return int(lines[0].split()[1]), headers, body[:length]

    def close(self) -> None:
        self.sock.close()


def send_past_the_limit(raw: RawHttp) -> None:
    """Send a chunked body just past the limit, and stop there: the body is never finished (no last chunk)."""
    raw.send_chunk(b'{"session_id": "s", "tool_name": "web__search", "tool_args": {"pad": "')
    while raw.sent <= LIMIT:
        raw.send_chunk(b"x" * CHUNK)


# --------------------------------------------------------------------------- 413: bounded before it is read

BODY_PATHS = [ASK, "/api/v1/hooks/session-start", "/channels/web/callback"]
CLAUDE_CODE = "/api/v1/claude-code/hooks"


def assert_blocked(status: int, body: bytes, why: str) -> None:
    """Claude Code's http hook is answered 200 with an output that blocks whatever the event: it runs a call
    whose hook answered 4xx (approvals/api/claude_code.py)."""
    assert status == 200, body
    answer = json.loads(body)
    assert (answer["continue"], answer["decision"]) == (False, "block")
    assert answer["stopReason"] == answer["reason"] and why in answer["reason"]


@pytest.mark.parametrize("path", BODY_PATHS)
@pytest.mark.parametrize("with_key", [True, False], ids=["with-key", "without-key"])
def test_a_declared_length_over_the_limit_is_refused_before_a_byte_of_the_body(agent, path, with_key):
    before = written()
    headers = {"Content-Type": "application/json", "Content-Length": str(100 * 1024 * 1024)}
    if with_key:
        headers["Authorization"] = f"Bearer {agent.key}"
    raw = RawHttp(agent.http.base_url.port, "POST", path, headers)
    try:
        status, _, body = raw.response()  # nothing of the 100 MB was sent
    finally:
        raw.close()

    error = assert_error(status, body, 413, "payload_too_large")
    assert error["details"] == {"max_bytes": LIMIT}
    assert written() == before and key_untouched(agent)


@pytest.mark.parametrize("path", BODY_PATHS)
def test_a_streamed_body_over_the_limit_is_refused_while_it_is_still_being_sent(agent, path):
    before = written()
    raw = RawHttp(
        agent.http.base_url.port, "POST", path,
        {"Content-Type": "application/json", "Transfer-Encoding": "chunked", "Authorization": f"Bearer {agent.key}"},
    )  # fmt: skip
    try:
        send_past_the_limit(raw)
        # The rest of the body never comes: the server answers from what it counted, not at the body's end.
        status, headers, body = raw.response()
    finally:
        raw.close()

    assert_error(status, body, 413, "payload_too_large")
    assert headers["connection"] == "close"  # the rest of the body is never read
    assert written() == before and key_untouched(agent)


def test_a_body_just_under_the_limit_is_served(agent):
    body = {"session_id": "s", "tool_name": "web__search", "tool_args": {"pad": ""}}
    body["tool_args"]["pad"] = "x" * (LIMIT - len(json.dumps(body)))
    content = json.dumps(body).encode()
    assert len(content) == LIMIT

    response = agent.http.post(ASK, content=content, headers={"content-type": "application/json"})

    assert response.status_code == 200 and response.json()["decision"] == "allow"


def test_the_limit_is_django_s_too():
    assert settings.DATA_UPLOAD_MAX_MEMORY_SIZE == settings.GATEWAY_MAX_BODY_BYTES == 1024 * 1024


# --------------------------------------------------------------------------- 415: JSON or nothing

NOT_JSON = {
    "form-encoded": "application/x-www-form-urlencoded",
    "text": "text/plain",
    "multipart": "multipart/form-data; boundary=x",
    "missing": None,
}


def post_as(client: httpx.Client, path: str, content: bytes, content_type: str | None) -> httpx.Response:
    request = client.build_request("POST", path, content=content)
    if content_type is None:
        request.headers.pop("content-type", None)
    else:
        request.headers["content-type"] = content_type
    return client.send(request)


@pytest.mark.parametrize("content_type", NOT_JSON.values(), ids=NOT_JSON.keys())
@pytest.mark.parametrize("path", [ASK, "/api/v1/hooks/session-start"])
def test_a_body_that_does_not_say_it_is_json_is_a_415_before_the_key_is_looked_up(agent, path, content_type):
    before = written()
    body = {"session_id": "s", "tool_name": "web__search", "tool_args": {}}

    response = post_as(agent.http, path, json.dumps(body).encode(), content_type)

    assert_error(response.status_code, response.content, 415, "unsupported_media_type")
    assert written() == before and key_untouched(agent)


@pytest.mark.parametrize("content_type", NOT_JSON.values(), ids=NOT_JSON.keys())
def test_claude_codes_hook_is_read_whatever_content_type_it_says_and_a_4xx_never_lets_a_call_through(
    agent, content_type
):
    """A 415 would be a non-blocking error to Claude Code: the call would run ungated. The hook is read as the
    JSON it is, and decided (here: an unknown key, so denied)."""
    hook = {"hook_event_name": "PreToolUse", "session_id": "s", "tool_name": "Bash", "tool_input": {"command": "ls"}}
    client = httpx.Client(base_url=agent.http.base_url, timeout=30)  # no key: denied, whatever the type

    response = post_as(client, CLAUDE_CODE, json.dumps(hook).encode(), content_type)

    assert response.status_code == 200
    decided = response.json()["hookSpecificOutput"]
    assert (decided["hookEventName"], decided["permissionDecision"]) == ("PreToolUse", "deny")


def test_claude_codes_hook_over_the_limit_or_unreadable_is_blocked_not_refused(agent):
    raw = RawHttp(
        agent.http.base_url.port, "POST", CLAUDE_CODE,
        {"Content-Type": "application/json", "Content-Length": str(100 * 1024 * 1024), "Authorization": f"Bearer {agent.key}"},
    )  # fmt: skip
    try:
        status, _, body = raw.response()
    finally:
        raw.close()
    assert_blocked(status, body, "GATEWAY_MAX_BODY_BYTES")

    raw = RawHttp(
        agent.http.base_url.port, "POST", CLAUDE_CODE,
        {"Content-Type": "application/json", "Transfer-Encoding": "chunked", "Authorization": f"Bearer {agent.key}"},
    )  # fmt: skip
    try:
        send_past_the_limit(raw)
        status, _, body = raw.response()
    finally:
        raw.close()
    assert_blocked(status, body, "GATEWAY_MAX_BODY_BYTES")

    for unreadable in (b"not json", b"[1, 2]", b'{"hook_event_name": "PreToolUse", "tool_input": {"n": NaN}}'):
        response = agent.http.post(CLAUDE_CODE, content=unreadable, headers={"content-type": "application/json"})
        assert_blocked(response.status_code, response.content, "approval gateway: the hook input")
    assert not ToolCall.objects.exists() and key_untouched(agent)


def test_a_cancel_with_a_body_that_is_not_json_is_a_415(agent):
    confirmation_id = agent.pre_tool_use("oa__purchase_pay", {}).json()["confirmation_id"]

    cancel = f"/api/v1/confirmations/{confirmation_id}/cancel"

    response = post_as(agent.http, cancel, b"reason=x", NOT_JSON["form-encoded"])

    assert_error(response.status_code, response.content, 415, "unsupported_media_type")
    assert ConfirmationRequest.objects.get().status == "pending"


@pytest.mark.parametrize("content_type", ["application/json", "application/json; charset=utf-8", "Application/JSON"])
def test_json_with_or_without_parameters_is_served(agent, content_type):
    body = json.dumps({"session_id": "s", "tool_name": "web__search"}).encode()

    response = post_as(agent.http, ASK, body, content_type)

    assert response.status_code == 200 and response.json()["decision"] == "allow"


def test_a_cancel_without_a_body_needs_no_content_type(agent):
    confirmation_id = agent.pre_tool_use("oa__purchase_pay", {}).json()["confirmation_id"]

    response = post_as(agent.http, f"/api/v1/confirmations/{confirmation_id}/cancel", b"", None)

    assert response.status_code == 200 and response.json()["status"] == "cancelled"


@pytest.fixture
def staff(live_gateway) -> httpx.Client:
    User.objects.create_user("olga", password="pw-olga", is_staff=True)
    with httpx.Client(base_url=live_gateway.url, auth=("olga", "pw-olga")) as client:
        yield client


def test_the_staff_routes_take_json_and_a_config_file_yaml_too(agent, staff):
    refused = post_as(staff, "/api/v1/config/validate", b"agents: []", "text/plain")
    assert_error(refused.status_code, refused.content, 415, "unsupported_media_type")
    put = staff.build_request("PUT", "/api/v1/agents/purchasing-bot/hooks", content=b'{"hooks": []}')
    put.headers["content-type"] = "text/plain"
    refused = staff.send(put)
    assert_error(refused.status_code, refused.content, 415, "unsupported_media_type")
    assert AgentConfigVersion.objects.filter(agent__name="purchasing-bot").count() == 1

    for content_type in ("application/yaml", "application/x-yaml", "text/yaml", "application/json"):
        response = post_as(staff, "/api/v1/config/validate", b"{channels: [], agents: []}", content_type)
        assert response.status_code == 200, (content_type, response.text)


# --------------------------------------------------------------------------- 400: JSON numbers only

NOT_NUMBERS = {
    "NaN deep in tool_args": b'{"session_id": "s", "tool_name": "web__search", "tool_args": {"a": [1, {"b": NaN}]}}',
    "Infinity in metadata": b'{"session_id": "s", "tool_name": "web__search", "metadata": {"x": Infinity}}',
    "-Infinity as wait_seconds": b'{"session_id": "s", "tool_name": "web__search", "wait_seconds": -Infinity}',
    "a number too large for a double": b'{"session_id": "s", "tool_name": "web__search", "tool_args": {"n": 1e400}}',
}


@pytest.mark.parametrize("body", NOT_NUMBERS.values(), ids=NOT_NUMBERS.keys())
@pytest.mark.parametrize("path", [ASK, "/api/v1/hooks/session-start"])
def test_nan_and_infinity_are_a_400_anywhere_in_a_body(agent, path, body):
    before = written()

    response = agent.http.post(path, content=body, headers={"content-type": "application/json"})

    error = assert_error(response.status_code, response.content, 400, "malformed")
    assert "NaN" in error["message"] or "Infinity" in error["message"] or "finite" in error["message"]
    assert written() == before


@pytest.mark.parametrize("depth", [900, 5000])
@pytest.mark.parametrize("path", [ASK, "/api/v1/hooks/session-start"])
def test_json_nested_deeper_than_the_api_reads_is_a_400(agent, path, depth):
    deep = b"[" * depth + b"]" * depth
    body = b'{"session_id": "s", "tool_name": "web__search", "tool_args": {"deep": ' + deep + b"}}"

    response = agent.http.post(path, content=body, headers={"content-type": "application/json"})

    error = assert_error(response.status_code, response.content, 400, "malformed")
    assert "nested" in error["message"]
    assert not ToolCall.objects.exists()


# --------------------------------------------------------------------------- never an HTML page under /api/


@pytest.fixture(params=[False, True], ids=["debug-off", "debug-on"])
def debug(request, settings):
    settings.DEBUG = request.param  # the live gateway runs in this process: it reads these settings
    return request.param


@pytest.mark.parametrize(
    "method, path, status, code",
    [
        ("GET", "/api/v1/nope", 404, "not_found"),
        ("POST", "/api/v1/hooks/nope", 404, "not_found"),
        ("GET", "/api/v1/claude-code/hooks", 405, "method_not_allowed"),
        ("DELETE", ASK, 405, "method_not_allowed"),
        ("PUT", "/api/v1/confirmations/" + str(uuid.UUID(int=1)) + "/wait", 405, "method_not_allowed"),
    ],
)
def test_unknown_paths_and_methods_answer_the_error_shape_never_html(agent, debug, method, path, status, code):
    response = agent.http.request(method, path)

    assert response.headers["content-type"] == "application/json"
    assert_error(response.status_code, response.content, status, code)


def test_a_failure_inside_the_gateway_answers_the_error_shape_never_html(agent, staff, debug):
    with connection.cursor() as cursor:  # a real failure: the table a staff read needs is gone
        cursor.execute("ALTER TABLE approvals_agentconfigversion RENAME TO approvals_agentconfigversion_away")
    try:
        response = staff.get("/api/v1/agents/purchasing-bot/hooks")
    finally:
        with connection.cursor() as cursor:
            cursor.execute("ALTER TABLE approvals_agentconfigversion_away RENAME TO approvals_agentconfigversion")

    assert response.headers["content-type"] == "application/json"
    error = assert_error(response.status_code, response.content, 500, "internal_error")
    assert "approvals_agentconfigversion" not in error["message"]  # no internals, with DEBUG on too
