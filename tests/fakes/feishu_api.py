"""A fake Feishu/Lark Open API on 127.0.0.1 for the real lark-oapi client, plus callback helpers.

Register with `pytest_plugins = ["tests.fakes.feishu_api"]` to get the
`fake_feishu` fixture. The server answers with the shapes Feishu documents
(see docs/feishu.md) and records every request.

lark-oapi caches tenant tokens process-wide, keyed by app_id: give each test
its own app_id (`unique_app_id()`) rather than expecting a token call per test.
"""

from __future__ import annotations

import base64
import copy
import dataclasses
import hashlib
import json
import os
import threading
import time
import uuid
from collections.abc import Iterator, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import pytest
from cryptography.hazmat.primitives import padding
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from gateway_contract import sign_confirmation_id

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "feishu"

TOKEN_PATH = "/open-apis/auth/v3/tenant_access_token/internal"
MESSAGES_PATH = "/open-apis/im/v1/messages"
CARD_UPDATE_PATH = "/open-apis/interactive/v1/card/update"
BATCH_GET_ID_PATH = "/open-apis/contact/v3/users/batch_get_id"
WS_ENDPOINT_PATH = "/callback/ws/endpoint"  # the long connection's endpoint request (lark_oapi.ws)

# Canned failures for fail_next(), as Feishu sends them.
RATE_LIMITED = {"code": 99991400, "msg": "request trigger frequency limit"}
BOT_NOT_IN_CHAT = {"code": 230002, "msg": "Bot/User can NOT be out of the chat."}
APP_SECRET_INVALID = {"code": 10014, "msg": "app secret invalid"}
INVALID_ACCESS_TOKEN = {
    "code": 99991663,
    "msg": "Invalid access token for authorization. Please make a request with token attached.",
}
HTML_502 = "<html>\r\n<head><title>502 Bad Gateway</title></head>\r\n<body><center><h1>502 Bad Gateway</h1></center></body>\r\n</html>\r\n"

APP_TENANT_KEY = "2ca1d211f64f6438"


@dataclasses.dataclass(frozen=True)
class RecordedRequest:
    """One request the fake received."""

    method: str
    path: str  # without the query string
    query: dict[str, str]
    headers: dict[str, str]  # names lower-cased
    body: bytes

    def json(self) -> Any:
        """The body parsed as JSON (lark-oapi's token request has no Content-Type, so never check it)."""
        return json.loads(self.body) if self.body else None


@dataclasses.dataclass
class _Failure:
    method: str | None
    path_prefix: str
    status: int
    body: Mapping[str, Any] | str | bytes
    headers: dict[str, str]
    times: int


@dataclasses.dataclass
class FakeMessage:
    """A message the fake holds, as sent or last patched."""

    message_id: str
    chat_id: str
    msg_type: str
    content: str
    uuid: str | None = None
    first: str = ""  # the content as sent, before any patch

    def __post_init__(self) -> None:
        self.first = self.first or self.content

    @property
    def card(self) -> dict[str, Any]:
        """The card JSON the message currently shows."""
        return json.loads(self.content)

    @property
    def sent_card(self) -> dict[str, Any]:
        """The card JSON as sent (a person may press its buttons after it was patched)."""
        return json.loads(self.first)


class FakeFeishu:
    """A threaded local HTTP server that answers like open.feishu.cn."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._requests: list[RecordedRequest] = []
        self._failures: list[_Failure] = []
        self._tokens: dict[str, str] = {}  # token -> app_id
        self.messages: dict[str, FakeMessage] = {}
        self.long_connection: Any = None  # a FakeLongConnection answering /callback/ws/endpoint (feishu_ws.py)
        self.users_by_email: dict[str, str] = {}  # e-mail -> open_id: the tenant's directory (contact.v3 batch_get_id)
        handler = type("FakeFeishuHandler", (_Handler,), {"fake": self})
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    @property
    def domain(self) -> str:
        """What to configure as `api_base_url`: http://127.0.0.1:PORT, no trailing slash."""
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> FakeFeishu:
        """Serve in a daemon thread."""
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop serving and free the port."""
        if self._thread.is_alive():
            self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> FakeFeishu:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # --- what tests look at ---------------------------------------------------

    @property
    def requests(self) -> list[RecordedRequest]:
        """Every request received so far, oldest first."""
        with self._lock:
            return list(self._requests)

    def calls(self, method: str, path_prefix: str) -> list[RecordedRequest]:
        """The requests with this HTTP method whose path starts with `path_prefix`."""
        return [r for r in self.requests if r.method == method.upper() and r.path.startswith(path_prefix)]

    def sent_messages(self) -> list[FakeMessage]:
        """The messages created so far, oldest first."""
        with self._lock:
            return list(self.messages.values())

    def fail_next(
        self,
        path_prefix: str,
        status: int = 429,
        body: Mapping[str, Any] | str | bytes = RATE_LIMITED,
        headers: Mapping[str, str] | None = None,
        times: int = 1,
        method: str | None = None,
    ) -> None:
        """Answer the next `times` requests under `path_prefix` (and `method`, if given) with this failure.

        Defaults to Feishu's rate limit: HTTP 429, code 99991400, `x-ogw-ratelimit-reset: 1`.
        A str/bytes body is sent as text/html (a gateway error page).
        """
        if headers is None:
            headers = {"x-ogw-ratelimit-reset": "1"}
        failure = _Failure(method.upper() if method else None, path_prefix, status, body, dict(headers), times)
        with self._lock:
            self._failures.append(failure)

    # --- used by the handler ---------------------------------------------------

    def _record(self, request: RecordedRequest) -> _Failure | None:
        with self._lock:
            self._requests.append(request)
            for failure in self._failures:
                if failure.times > 0 and request.path.startswith(failure.path_prefix):
                    if failure.method in (None, request.method):
                        failure.times -= 1
                        return failure
        return None

    def _issue_token(self, app_id: str) -> str:
        token = f"t-{uuid.uuid4().hex}"
        with self._lock:
            self._tokens[token] = app_id
        return token

    def _knows_token(self, authorization: str | None) -> bool:
        if not authorization or not authorization.startswith("Bearer "):
            return False
        with self._lock:
            return authorization.removeprefix("Bearer ") in self._tokens

    def _create_message(self, chat_id: str, msg_type: str, content: str, request_uuid: str | None) -> FakeMessage:
        with self._lock:
            if request_uuid:
                for message in self.messages.values():
                    if message.uuid == request_uuid:  # Feishu de-duplicates on uuid for an hour
                        return message
            message = FakeMessage(f"om_{uuid.uuid4().hex}", chat_id, msg_type, content, request_uuid)
            self.messages[message.message_id] = message
            return message

    def _patch_message(self, message_id: str, content: str) -> bool:
        with self._lock:
            message = self.messages.get(message_id)
            if message is None:
                return False
            message.content = content
            return True


class _Handler(BaseHTTPRequestHandler):
    fake: FakeFeishu

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - BaseHTTPRequestHandler's name
        pass

    def do_GET(self) -> None:
        self._handle()

    def do_POST(self) -> None:
        self._handle()

    def do_PATCH(self) -> None:
        self._handle()

    def _handle(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        url = urlsplit(self.path)
        request = RecordedRequest(
            method=self.command,
            path=url.path,
            query=dict(parse_qsl(url.query)),
            headers={name.lower(): value for name, value in self.headers.items()},
            body=body,
        )
        failure = self.fake._record(request)
        if failure is not None:
            self._reply(failure.status, failure.body, failure.headers)
            return
        status, answer = self._route(request)
        self._reply(status, answer)

    def _route(self, request: RecordedRequest) -> tuple[int, dict[str, Any]]:
        if request.method == "POST" and request.path == TOKEN_PATH:
            return self._tenant_token(request)
        if request.method == "POST" and request.path == WS_ENDPOINT_PATH and self.fake.long_connection is not None:
            return self.fake.long_connection.endpoint(request.json())
        if not request.path.startswith("/open-apis/"):
            return 404, {"code": 404, "msg": "404 page not found"}
        if not self.fake._knows_token(request.headers.get("authorization")):
            return 400, INVALID_ACCESS_TOKEN
        if request.method == "POST" and request.path == MESSAGES_PATH:
            return self._create_message(request)
        if request.method == "PATCH" and request.path.startswith(MESSAGES_PATH + "/"):
            return self._patch_message(request)
        if request.method == "POST" and request.path == CARD_UPDATE_PATH:
            return 200, {"code": 0, "msg": "success"}
        if request.method == "POST" and request.path == BATCH_GET_ID_PATH:
            return self._batch_get_id(request)
        return 404, {"code": 404, "msg": "404 page not found"}

    def _tenant_token(self, request: RecordedRequest) -> tuple[int, dict[str, Any]]:
        try:
            sent = request.json() or {}
        except ValueError:
            sent = {}
        if not sent.get("app_id") or not sent.get("app_secret"):
            return 400, {"code": 10003, "msg": "invalid param"}
        token = self.fake._issue_token(sent["app_id"])
        return 200, {"code": 0, "msg": "ok", "tenant_access_token": token, "expire": 7200}

    def _batch_get_id(self, request: RecordedRequest) -> tuple[int, dict[str, Any]]:
        """As Feishu answers: one entry per e-mail asked, with `user_id` (of `user_id_type`) only when known."""
        if request.query.get("user_id_type") != "open_id":
            return 400, {"code": 99992402, "msg": "field validation failed"}
        emails = (request.json() or {}).get("emails") or []
        users = []
        for email in emails:
            entry = {"email": email}
            with self.fake._lock:
                open_id = self.fake.users_by_email.get(email.lower())
            if open_id:
                entry["user_id"] = open_id
            users.append(entry)
        return 200, {"code": 0, "msg": "success", "data": {"user_list": users}}

    def _create_message(self, request: RecordedRequest) -> tuple[int, dict[str, Any]]:
        sent = request.json() or {}
        if request.query.get("receive_id_type") not in ("chat_id", "open_id") or not sent.get("receive_id"):
            return 400, {"code": 230001, "msg": "Your request contains an invalid request parameter."}
        message = self.fake._create_message(sent["receive_id"], sent.get("msg_type", ""), sent.get("content", ""), sent.get("uuid"))
        now_ms = str(int(time.time() * 1000))
        data = {
            "message_id": message.message_id,
            "root_id": "",
            "parent_id": "",
            "msg_type": message.msg_type,
            "create_time": now_ms,
            "update_time": now_ms,
            "deleted": False,
            "updated": False,
            "chat_id": message.chat_id,
            "sender": {"id": "cli_9f5343c580712544", "id_type": "app_id", "sender_type": "app", "tenant_key": APP_TENANT_KEY},
            "body": {"content": message.content},
        }
        return 200, {"code": 0, "msg": "success", "data": data}

    def _patch_message(self, request: RecordedRequest) -> tuple[int, dict[str, Any]]:
        message_id = request.path.removeprefix(MESSAGES_PATH + "/")
        sent = request.json() or {}
        if not self.fake._patch_message(message_id, sent.get("content", "")):
            return 400, {"code": 230001, "msg": "Your request contains an invalid request parameter."}
        return 200, {"code": 0, "msg": "success", "data": {}}

    def _reply(self, status: int, body: Mapping[str, Any] | str | bytes, headers: Mapping[str, str] | None = None) -> None:
        if isinstance(body, Mapping):
            payload, content_type = json.dumps(body).encode(), "application/json; charset=utf-8"
        else:
            payload = body.encode() if isinstance(body, str) else body
            content_type = "text/html"
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(payload)))
        headers = dict(headers or {})
        if not any(name.lower() == "x-tt-logid" for name in headers):
            headers["X-Tt-Logid"] = f"20250101{uuid.uuid4().hex[:24].upper()}"  # Feishu's request log id
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(payload)


@pytest.fixture
def fake_feishu() -> Iterator[FakeFeishu]:
    """A started FakeFeishu, stopped after the test."""
    with FakeFeishu() as fake:
        yield fake


def unique_app_id() -> str:
    """An app_id no other test uses, so lark-oapi's process-wide token cache starts empty for it."""
    return f"cli_{uuid.uuid4().hex[:16]}"


# --- inbound callback helpers --------------------------------------------------


def load_fixture(name: str) -> dict[str, Any]:
    """A recorded payload from tests/fixtures/feishu/, as a fresh dict."""
    return json.loads((FIXTURES / name).read_text())


def encrypt_feishu(encrypt_key: str, plaintext: str) -> str:
    """Encrypt like Feishu: AES-256-CBC, key SHA-256(encrypt_key), random IV prefixed, PKCS7, base64."""
    key = hashlib.sha256(encrypt_key.encode()).digest()
    iv = os.urandom(16)
    padder = padding.PKCS7(128).padder()
    padded = padder.update(plaintext.encode()) + padder.finalize()
    encryptor = Cipher(algorithms.AES(key), modes.CBC(iv)).encryptor()
    return base64.b64encode(iv + encryptor.update(padded) + encryptor.finalize()).decode()


def encrypted_body(encrypt_key: str, payload: Mapping[str, Any]) -> bytes:
    """The body Feishu posts when an Encrypt Key is configured: `{"encrypt": "<base64>"}`."""
    return json.dumps({"encrypt": encrypt_feishu(encrypt_key, json.dumps(payload))}).encode()


def signed_feishu_headers(
    encrypt_key: str, body: bytes, timestamp: int | str | None = None, nonce: str | None = None
) -> dict[str, str]:
    """The headers Feishu signs a callback with: hex SHA-256 of timestamp + nonce + encrypt_key + body."""
    stamp = str(int(time.time()) if timestamp is None else timestamp)
    nonce = nonce if nonce is not None else uuid.uuid4().hex
    signature = hashlib.sha256((stamp + nonce + encrypt_key).encode() + body).hexdigest()
    return {"X-Lark-Request-Timestamp": stamp, "X-Lark-Request-Nonce": nonce, "X-Lark-Signature": signature}


def card_action_payload(
    confirmation_id: str,
    decision: str = "approve",
    *,
    token: str,
    open_id: str = "ou_3c14f3a59eaf2825dbe25359f15211a2",
    reason: str | None = None,
    event_id: str | None = None,
    value: Mapping[str, Any] | str | None = None,
) -> dict[str, Any]:
    """A schema 2.0 `card.action.trigger` click on one of our buttons, after decryption.

    `value` replaces the button value (a dict, or a JSON string as some clients send);
    by default it is what our card carries: the decision and the signed confirmation id.
    `reason` fills the reject form's `form_value.reason`.
    """
    payload = load_fixture("card_action_trigger_reject.json" if decision == "reject" else "card_action_trigger_approve.json")
    payload["header"]["token"] = token
    payload["header"]["event_id"] = event_id or uuid.uuid4().hex
    action = payload["event"]["action"]
    action["value"] = (
        copy.deepcopy(value)
        if value is not None
        else {"decision": decision, "confirmation_id": sign_confirmation_id(confirmation_id)}
    )
    action.pop("form_value", None)
    if reason is not None:
        action["form_value"] = {"reason": reason}
    payload["event"]["operator"]["open_id"] = open_id
    return payload


def url_verification_payload(*, token: str, challenge: str = "ajls384kdjx98XX") -> dict[str, Any]:
    """The handshake Feishu sends when a callback URL is saved."""
    payload = load_fixture("url_verification.json")
    payload.update(token=token, challenge=challenge)
    return payload
