"""Microsoft's side of a Teams bot, on 127.0.0.1, for the real Microsoft 365 Agents SDK.

Two local servers, recording what they are sent:
- `login` (HTTPS, a self-signed certificate for 127.0.0.1 that the test trusts through
  REQUESTS_CA_BUNDLE; MSAL takes only https authorities): an Entra-like tenant with its
  OpenID discovery document and its token endpoint, which grants the bot its client
  credentials token for `https://api.botframework.com/.default`;
- `connector` (HTTP): Bot Framework's OpenID metadata and signing keys (JWKS), and the Bot
  Connector service a conversation's `serviceUrl` names (`/teams/v3/conversations/…`).
A test signs the activities it posts to the gateway with `activity_token(...)`, with the key
whose public half the JWKS serves (or, to forge, with another).
"""

from __future__ import annotations

import base64
import copy
import dataclasses
import datetime as dt
import ipaddress
import json
import ssl
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator, Mapping
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl

import jwt
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID

from tests.fakes.http_support import Failure, FailureQueue, JsonApiHandler, send_json

BOT_FRAMEWORK_ISSUER = "https://api.botframework.com"
OPENID_PATH = "/botframework/v1/.well-known/openidconfiguration"
JWKS_PATH = "/botframework/v1/.well-known/keys"
SERVICE_PATH = "/teams/"
CONVERSATIONS_PATH = "/teams/v3/conversations/"

RATE_LIMITED = {"error": {"code": "TooManyRequests", "message": "Too many requests"}}
BOT_NOT_IN_CONVERSATION = {"error": {"code": "BotNotInConversationRoster", "message": "The bot is not part of the conversation roster."}}


@dataclasses.dataclass(frozen=True)
class RecordedRequest:
    server: str  # "login" or "connector"
    method: str
    path: str
    headers: dict[str, str]  # names lower-cased
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body) if self.body else None

    def form(self) -> dict[str, str]:
        return dict(parse_qsl(self.body.decode()))


@dataclasses.dataclass
class FakeActivity:
    """A message the fake conversation holds, as posted or last updated."""

    activity_id: str
    conversation_id: str
    activity: dict[str, Any]
    updates: int = 0
    first: dict[str, Any] = dataclasses.field(default_factory=dict)  # as posted, before any update

    def __post_init__(self) -> None:
        self.first = self.first or copy.deepcopy(self.activity)

    @property
    def card(self) -> dict[str, Any]:
        """The Adaptive Card the message shows."""
        return _adaptive_card(self.activity)

    @property
    def posted_card(self) -> dict[str, Any]:
        """The Adaptive Card as it was posted (a person may press its buttons after it was updated)."""
        return _adaptive_card(self.first)


def _adaptive_card(activity: dict[str, Any]) -> dict[str, Any]:
    (attachment,) = activity["attachments"]
    assert attachment["contentType"] == "application/vnd.microsoft.card.adaptive"
    return attachment["content"]


def _rsa_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def _self_signed_certificate(directory: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 and its key, as PEM files in `directory`."""
    key = _rsa_key()
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "fake-login.127.0.0.1")])
    now = dt.datetime.now(dt.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / "login.pem", directory / "login-key.pem"
    cert_path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return cert_path, key_path


def _jwk(key: rsa.RSAPrivateKey, kid: str) -> dict[str, Any]:
    numbers = key.public_key().public_numbers()

    def b64(value: int) -> str:
        raw = value.to_bytes((value.bit_length() + 7) // 8, "big")
        return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()

    return {"kty": "RSA", "use": "sig", "kid": kid, "n": b64(numbers.n), "e": b64(numbers.e), "endorsements": ["msteams"]}


class FakeTeams:
    """Entra (login), Bot Framework's keys and the Bot Connector, for one bot (`app_id`, `app_password`)."""

    def __init__(self, *, app_id: str, app_password: str, tenant_id: str) -> None:
        self.app_id = app_id
        self.app_password = app_password
        self.tenant_id = tenant_id
        self.signing_key = _rsa_key()
        self.kid = f"kid-{uuid.uuid4().hex[:8]}"
        self._lock = threading.Lock()
        self._requests: list[RecordedRequest] = []
        self._failures = FailureQueue()
        self._tokens: set[str] = set()
        self.activities: dict[str, FakeActivity] = {}
        self._directory = tempfile.TemporaryDirectory(prefix="fake-teams-")
        self.ca_bundle, key_path = _self_signed_certificate(Path(self._directory.name))

        login_handler = type("FakeLoginHandler", (_Handler,), {"fake": self, "server_name": "login"})
        self._login = ThreadingHTTPServer(("127.0.0.1", 0), login_handler)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(self.ca_bundle, key_path)
        self._login.socket = context.wrap_socket(self._login.socket, server_side=True)
        connector_handler = type("FakeConnectorHandler", (_Handler,), {"fake": self, "server_name": "connector"})
        self._connector = ThreadingHTTPServer(("127.0.0.1", 0), connector_handler)
        self._threads = [
            threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
            for server in (self._login, self._connector)
        ]
        for server in (self._login, self._connector):
            server.daemon_threads = True

    # --- addresses to configure -------------------------------------------------

    @property
    def login_url(self) -> str:
        return f"https://127.0.0.1:{self._login.server_address[1]}"

    @property
    def connector_base(self) -> str:
        return f"http://127.0.0.1:{self._connector.server_address[1]}"

    @property
    def service_url(self) -> str:
        return self.connector_base + SERVICE_PATH

    @property
    def openid_metadata_url(self) -> str:
        return self.connector_base + OPENID_PATH

    def start(self) -> FakeTeams:
        for thread in self._threads:
            thread.start()
        return self

    def close(self) -> None:
        for server, thread in zip((self._login, self._connector), self._threads, strict=True):
            if thread.is_alive():
                server.shutdown()
            server.server_close()
        self._directory.cleanup()

    # --- what tests use -----------------------------------------------------------

    def activity_token(
        self,
        *,
        audience: str | None = None,
        issuer: str = BOT_FRAMEWORK_ISSUER,
        service_url: str | None = None,
        expires_in: float = 3600,
        key: rsa.RSAPrivateKey | None = None,
        kid: str | None = None,
    ) -> str:
        """A JWT as Bot Framework signs the activities it sends the bot (by default: valid)."""
        now = int(time.time())
        claims = {
            "iss": issuer,
            "aud": audience or self.app_id,
            "serviceurl": service_url or self.service_url,
            "nbf": now - 60,
            "exp": now + int(expires_in),
        }
        return jwt.encode(claims, key or self.signing_key, algorithm="RS256", headers={"kid": kid or self.kid})

    @property
    def requests(self) -> list[RecordedRequest]:
        with self._lock:
            return list(self._requests)

    def calls(self, method: str, path_prefix: str, server: str = "connector") -> list[RecordedRequest]:
        return [r for r in self.requests if r.server == server and r.method == method and r.path.startswith(path_prefix)]

    def posted(self) -> list[FakeActivity]:
        with self._lock:
            return list(self.activities.values())

    def fail_next(
        self,
        path_prefix: str,
        status: int = 429,
        body: Mapping[str, Any] = RATE_LIMITED,
        headers: Mapping[str, str] | None = None,
        times: int = 1,
        method: str | None = None,
    ) -> None:
        """Answer the next `times` connector requests under `path_prefix` with this failure (default: 429,
        `Retry-After: 1`)."""
        headers = {"Retry-After": "1"} if headers is None else dict(headers)
        self._failures.add(Failure(method, path_prefix, status, body, headers, times))

    # --- used by the handler --------------------------------------------------------

    def _record(self, request: RecordedRequest) -> Failure | None:
        with self._lock:
            self._requests.append(request)
        return self._failures.take(request.method, request.path)

    def _issue_token(self) -> str:
        token = f"bot-token-{uuid.uuid4().hex}"
        with self._lock:
            self._tokens.add(token)
        return token

    def _knows(self, authorization: str | None) -> bool:
        with self._lock:
            return bool(authorization) and authorization.removeprefix("Bearer ") in self._tokens


class _Handler(JsonApiHandler):
    fake: FakeTeams
    server_name: str

    def answer(self, method: str, path: str, headers: dict[str, str], body: bytes) -> None:
        request = RecordedRequest(self.server_name, method, path, headers, body)
        failure = self.fake._record(request) if self.server_name == "connector" else None
        if failure is not None:
            send_json(self, failure.status, failure.body, failure.headers)
            return
        send_json(self, *(self._login_route(request) if self.server_name == "login" else self._connector_route(request)))

    # Entra: https://learn.microsoft.com/entra/identity-platform/v2-oauth2-client-creds-grant-flow
    def _login_route(self, request: RecordedRequest) -> tuple[int, dict[str, Any]]:
        fake = self.fake
        tenant_base = f"{fake.login_url}/{fake.tenant_id}"
        if request.method == "GET" and request.path == f"/{fake.tenant_id}/v2.0/.well-known/openid-configuration":
            return 200, {
                "issuer": f"{tenant_base}/v2.0",
                "authorization_endpoint": f"{tenant_base}/oauth2/v2.0/authorize",
                "token_endpoint": f"{tenant_base}/oauth2/v2.0/token",
                "jwks_uri": f"{tenant_base}/discovery/v2.0/keys",
            }
        if request.method == "GET" and request.path.endswith("/v2.0/.well-known/openid-configuration"):
            return 400, {"error": "invalid_tenant", "error_description": "AADSTS90002: Tenant not found."}
        if request.method == "POST" and request.path == f"/{fake.tenant_id}/oauth2/v2.0/token":
            form = request.form()
            if form.get("grant_type") != "client_credentials" or form.get("scope") != "https://api.botframework.com/.default":
                return 400, {"error": "invalid_request", "error_description": "AADSTS900144: bad grant or scope."}
            if form.get("client_id") != fake.app_id:
                return 400, {"error": "unauthorized_client", "error_description": "AADSTS700016: Application not found."}
            if form.get("client_secret") != fake.app_password:
                return 401, {"error": "invalid_client", "error_description": "AADSTS7000215: Invalid client secret provided."}
            return 200, {"token_type": "Bearer", "expires_in": 3599, "ext_expires_in": 3599, "access_token": fake._issue_token()}
        return 404, {"error": "not_found"}

    # Bot Connector: https://learn.microsoft.com/azure/bot-service/rest-api/bot-framework-rest-connector-api-reference
    def _connector_route(self, request: RecordedRequest) -> tuple[int, dict[str, Any]]:
        fake = self.fake
        if request.method == "GET" and request.path == OPENID_PATH:
            return 200, {
                "issuer": BOT_FRAMEWORK_ISSUER,
                "authorization_endpoint": "https://invalid.botframework.com",
                "jwks_uri": fake.connector_base + JWKS_PATH,
                "id_token_signing_alg_values_supported": ["RS256"],
                "token_endpoint_auth_methods_supported": ["private_key_jwt"],
            }
        if request.method == "GET" and request.path == JWKS_PATH:
            return 200, {"keys": [_jwk(fake.signing_key, fake.kid)]}
        if not request.path.startswith(CONVERSATIONS_PATH):
            return 404, {"error": {"code": "NotFound", "message": "no such path"}}
        if not fake._knows(request.headers.get("authorization")):
            return 401, {"message": "Authorization has been denied for this request."}
        conversation_id, _, rest = request.path.removeprefix(CONVERSATIONS_PATH).partition("/")
        sent = request.json() or {}
        if request.method == "POST" and rest == "activities":
            activity = FakeActivity(f"1{int(time.time() * 1000)}{uuid.uuid4().int % 1000:03d}", conversation_id, sent)
            with fake._lock:
                fake.activities[activity.activity_id] = activity
            return 201, {"id": activity.activity_id}
        if request.method == "PUT" and rest.startswith("activities/"):
            activity_id = rest.removeprefix("activities/")
            with fake._lock:
                held = fake.activities.get(activity_id)
                if held is None or held.conversation_id != conversation_id:
                    return 404, {"error": {"code": "ActivityNotFoundInConversation", "message": "not found"}}
                held.activity = sent
                held.updates += 1
            return 200, {"id": activity_id}
        return 404, {"error": {"code": "NotFound", "message": "no such operation"}}


APP_ID = "6f1c8a52-7d3e-4b9a-9d2f-1e0c5b7a4d21"
TENANT_ID = "72f988bf-86f1-41af-91ab-2d7cd011db47"


@pytest.fixture
def fake_teams(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeTeams]:
    """A started FakeTeams whose login certificate this process trusts (requests: MSAL), stopped after."""
    fake = FakeTeams(app_id=APP_ID, app_password=f"secret-{uuid.uuid4().hex}", tenant_id=TENANT_ID).start()
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(fake.ca_bundle))
    try:
        yield fake
    finally:
        fake.close()
