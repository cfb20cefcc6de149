"""A fake Slack Web API on 127.0.0.1 for the real slack-sdk to talk to, plus payload helpers.

Register with `pytest_plugins = ["tests.fakes.slack_api"]` to get the
`fake_slack` fixture. The server answers the way Slack does (shapes from
slack-sdk's own mock server and Slack's docs) and records every request.
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
import json
import threading
import time
from collections import deque
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote, urlsplit

import pytest
from slack_sdk.signature import SignatureVerifier

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "slack"
PROXY_VARIABLES = ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy")
RESPONSE_URL = "response_url"  # the key fail_next() and calls() use for response_url posts


@dataclasses.dataclass(frozen=True)
class RecordedRequest:
    """One request the fake received."""

    method: str  # HTTP verb
    path: str  # e.g. /api/chat.postMessage or /response_url/abc
    headers: dict[str, str]
    body: bytes
    json: Any = None  # the parsed body when it was JSON
    form: dict[str, str] | None = None  # the parsed body when it was a form

    @property
    def data(self) -> Any:
        """The parsed body, JSON or form."""
        return self.json if self.json is not None else self.form

    @property
    def api_method(self) -> str:
        """The Web API method name (`chat.postMessage`), or `response_url`."""
        if self.path.startswith("/api/"):
            return self.path.removeprefix("/api/").split("?", 1)[0]
        if self.path.startswith("/response_url/"):
            return RESPONSE_URL
        return self.path


@dataclasses.dataclass
class _Failure:
    status: int
    body: Any
    headers: dict[str, str]
    delay: float


class FakeSlack:
    """A threaded HTTP server speaking enough of Slack's Web API for an approval card.

    Paths: `/api/<method>` (chat.postMessage, chat.update, views.open, auth.test,
    and apps.connections.open when a `socket_mode` is attached: tests/fakes/slack_socket.py)
    and `/response_url/<anything>` for response_url posts.
    """

    def __init__(self) -> None:
        self.requests: list[RecordedRequest] = []
        self.messages: dict[tuple[str, str], dict[str, Any]] = {}  # (channel, ts) -> current message
        self._lock = threading.Lock()
        self._failures: dict[str, deque[_Failure]] = {}
        self._ts_counter = itertools.count(1)
        self._ts_base = int(time.time())
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.socket_mode: Any = None  # a FakeSocketMode answering apps.connections.open
        self.users_by_email: dict[str, str] = {}  # e-mail -> user id: the workspace's members (users.lookupByEmail)
        self._holds: dict[str, deque[threading.Event]] = {}

    # --- lifecycle --------------------------------------------------------

    def start(self) -> FakeSlack:
        fake = self

        class Handler(_Handler):
            slack = fake

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, name="fake-slack", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> FakeSlack:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def root_url(self) -> str:
        assert self._server is not None, "FakeSlack is not started"
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    @property
    def base_url(self) -> str:
        """What to configure as `api_base_url`."""
        return f"{self.root_url}/api/"

    def response_url(self, name: str = "abc") -> str:
        """A response_url that this fake accepts."""
        return f"{self.root_url}/response_url/{name}"

    # --- programming and inspecting ---------------------------------------

    def fail_next(
        self,
        method: str,
        *,
        status: int = 200,
        body: Any = None,
        headers: dict[str, str] | None = None,
        times: int = 1,
        delay: float = 0.0,
    ) -> None:
        """Make the next `times` calls to `method` answer `status`/`body`/`headers`.

        `method` is a Web API method (`chat.postMessage`) or `response_url`.
        `body` defaults to `{"ok": false, "error": "internal_error"}`; a str body is
        sent as text. `delay` sleeps before answering (to provoke timeouts).
        """
        failure = _Failure(
            status=status,
            body={"ok": False, "error": "internal_error"} if body is None else body,
            headers=dict(headers or {}),
            delay=delay,
        )
        with self._lock:
            queue = self._failures.setdefault(method, deque())
            queue.extend(dataclasses.replace(failure) for _ in range(times))

    def hold_next(self, method: str) -> threading.Event:
        """The next call to `method` is recorded at once but answered (and applied: a `chat.update`
        changes the message) only once the returned event is set — a slow request that lands late."""
        release = threading.Event()
        with self._lock:
            self._holds.setdefault(method, deque()).append(release)
        return release

    def calls(self, method: str) -> list[RecordedRequest]:
        """The requests made to one Web API method (or `response_url`), oldest first."""
        with self._lock:
            return [r for r in self.requests if r.api_method == method]

    def reset(self) -> None:
        with self._lock:
            self.requests.clear()
            self.messages.clear()
            self._failures.clear()

    # --- used by the handler ----------------------------------------------

    def _record(self, request: RecordedRequest) -> _Failure | None:
        with self._lock:
            self.requests.append(request)
            queue = self._failures.get(request.api_method)
            return queue.popleft() if queue else None

    def _next_ts(self) -> str:
        return f"{self._ts_base}.{next(self._ts_counter):06d}"

    def _answer(self, request: RecordedRequest) -> tuple[int, Any, dict[str, str]]:
        method = request.api_method
        if method == RESPONSE_URL:
            # Slack answers response_url posts with a bare "ok".
            return 200, "ok", {}
        authorization = request.headers.get("Authorization", "")
        if method == "apps.connections.open" and self.socket_mode is not None:
            return self.socket_mode.open_connection(authorization)
        if not authorization.startswith("Bearer "):
            return 200, {"ok": False, "error": "not_authed"}, {}
        args = request.data or {}
        if method == "auth.test":
            return (
                200,
                {
                    "ok": True,
                    "url": "https://fake.slack.com/",
                    "team": "Fake",
                    "user": "gateway",
                    "team_id": "T111",
                    "user_id": "U0BOT",
                    "bot_id": "B111",
                },
                {},
            )
        if method == "users.lookupByEmail":
            # https://docs.slack.dev/reference/methods/users.lookupByEmail (slack-sdk POSTs it as a form)
            email = str(args.get("email", ""))
            with self._lock:
                user_id = self.users_by_email.get(email.lower())
            if user_id is None:
                return 200, {"ok": False, "error": "users_not_found"}, {}
            return 200, {"ok": True, "user": {"id": user_id, "team_id": "T111", "profile": {"email": email}}}, {}
        if method == "chat.postMessage":
            return self._post_message(args)
        if method == "chat.update":
            return self._update_message(args)
        if method == "views.open":
            if not args.get("trigger_id"):
                return 200, {"ok": False, "error": "invalid_arguments"}, {}
            view = dict(args.get("view") or {})
            return (
                200,
                {
                    "ok": True,
                    "view": {
                        **view,
                        "id": "V1",
                        "team_id": "T111",
                        "state": {"values": {}},
                        "hash": "1700000000.abcdef",
                        "root_view_id": "V1",
                        "app_id": "A111",
                        "bot_id": "B111",
                    },
                },
                {},
            )
        return 200, {"ok": False, "error": "unknown_method"}, {}

    def _post_message(self, args: dict[str, Any]) -> tuple[int, Any, dict[str, str]]:
        channel = args.get("channel")
        if not channel:
            return 200, {"ok": False, "error": "channel_not_found"}, {}
        if not args.get("text") and not args.get("blocks"):
            return 200, {"ok": False, "error": "no_text"}, {}
        ts = self._next_ts()
        message = {
            "type": "message",
            "subtype": "bot_message",
            "text": args.get("text", ""),
            "ts": ts,
            "user": "U0BOT",
            "bot_id": "B111",
            "app_id": "A111",
            "team": "T111",
            "blocks": args.get("blocks", []),
        }
        if args.get("thread_ts"):
            message["thread_ts"] = args["thread_ts"]
        with self._lock:
            self.messages[(channel, ts)] = message
        return 200, {"ok": True, "channel": channel, "ts": ts, "message": message}, {}

    def _update_message(self, args: dict[str, Any]) -> tuple[int, Any, dict[str, str]]:
        key = (args.get("channel"), args.get("ts"))
        with self._lock:
            message = self.messages.get(key)  # type: ignore[arg-type]
            if message is None:
                return 200, {"ok": False, "error": "message_not_found"}, {}
            message.update(
                text=args.get("text", message["text"]),
                blocks=args.get("blocks", message["blocks"]),
                edited={"user": "U0BOT", "ts": self._next_ts()},
            )
            message = copy.deepcopy(message)
        return 200, {"ok": True, "channel": key[0], "ts": key[1], "text": message["text"], "message": message}, {}


class _Handler(BaseHTTPRequestHandler):
    slack: FakeSlack

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        content_type = self.headers.get("Content-Type", "")
        parsed_json: Any = None
        form: dict[str, str] | None = None
        if "json" in content_type or raw.lstrip().startswith(b"{"):
            parsed_json = json.loads(raw or b"null")
        elif raw:
            form = {k: v[0] for k, v in parse_qs(raw.decode(), keep_blank_values=True).items()}
        request = RecordedRequest(
            method=self.command,
            path=urlsplit(self.path).path,
            headers=dict(self.headers.items()),
            body=raw,
            json=parsed_json,
            form=form,
        )
        failure = self.slack._record(request)
        with self.slack._lock:
            holds = self.slack._holds.get(request.api_method)
            release = holds.popleft() if holds else None
        if release is not None and not release.wait(30):
            raise AssertionError(f"a held {request.api_method} was never released")
        if failure is not None:
            time.sleep(failure.delay)
            self._send(failure.status, failure.body, failure.headers)
        else:
            self._send(*self.slack._answer(request))

    def _send(self, status: int, body: Any, headers: dict[str, str]) -> None:
        if isinstance(body, str | bytes):
            payload = body.encode() if isinstance(body, str) else body
            content_type = "text/html; charset=utf-8"
        else:
            payload = json.dumps(body).encode()
            content_type = "application/json; charset=utf-8"
        try:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(payload)))
            for name, value in headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(payload)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (a timeout test)

    def log_message(self, format: str, *args: Any) -> None:
        pass  # keep test output clean


@pytest.fixture
def fake_slack(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeSlack]:
    """A started FakeSlack; proxy variables are unset, since slack-sdk ignores NO_PROXY."""
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    with FakeSlack() as fake:
        yield fake


# --- inbound payload helpers ------------------------------------------------


def signed_slack_request(signing_secret: str, body: bytes, timestamp: int | str | None = None) -> dict[str, str]:
    """Headers Slack would send with `body`, signed with `signing_secret`."""
    stamp = str(int(time.time()) if timestamp is None else timestamp)
    signature = SignatureVerifier(signing_secret).generate_signature(timestamp=stamp, body=body)
    assert signature is not None
    return {"X-Slack-Request-Timestamp": stamp, "X-Slack-Signature": signature}


def form_body(payload: dict[str, Any]) -> bytes:
    """The raw interactivity body: `payload=<URL-encoded JSON>`, as bolt-python's fixtures build it."""
    return f"payload={quote(json.dumps(payload))}".encode()


def load_fixture(name: str) -> dict[str, Any]:
    return json.loads((FIXTURES / name).read_text())


def block_actions_payload(
    *,
    action_id: str = "approve",
    value: str,
    user_id: str = "W111",
    user_name: str = "primary-owner",
    trigger_id: str = "111.222.valid",
    response_url: str = "https://hooks.slack.com/actions/T111/111/random-value",
    channel_id: str = "C111",
    message_ts: str = "1700000000.000100",
) -> dict[str, Any]:
    """A button click on a card message, from tests/fixtures/slack/block_actions.json."""
    payload = load_fixture("block_actions.json")
    payload["user"].update(id=user_id, username=user_name, name=user_name)
    payload["trigger_id"] = trigger_id
    payload["response_url"] = response_url
    payload["container"].update(channel_id=channel_id, message_ts=message_ts)
    payload["channel"]["id"] = channel_id
    payload["message"]["ts"] = message_ts
    action = payload["actions"][0]
    action.update(action_id=action_id, value=value)
    action["text"]["text"] = action_id.capitalize()
    action["style"] = "danger" if action_id == "reject" else "primary"
    for button in payload["message"]["blocks"][-1]["elements"]:
        button["value"] = value
    return payload


def view_submission_payload(
    *,
    private_metadata: str,
    reason: str | None = "Over budget this quarter",
    user_id: str = "W111",
    user_name: str = "primary-owner",
    callback_id: str = "reject_reason",
) -> dict[str, Any]:
    """A submitted reject-reason modal, from tests/fixtures/slack/view_submission.json."""
    payload = load_fixture("view_submission.json")
    payload["user"].update(id=user_id, username=user_name, name=user_name)
    view = payload["view"]
    view["private_metadata"] = private_metadata
    view["callback_id"] = callback_id
    view["state"]["values"]["reason"]["reason_input"]["value"] = reason
    return payload
