"""DingTalk's side of an internal app, on 127.0.0.1: its OpenAPI and its Stream gateway.

- HTTP (`api_base_url`): the access token (`POST /v1.0/oauth2/accessToken`), cards
  (`POST /v1.0/card/instances/createAndDeliver`, `PUT /v1.0/card/instances`) and the Stream's
  connection endpoint (`POST /v1.0/gateway/connections/open`, answered with a WebSocket endpoint
  and a one-time ticket);
- WebSocket: the Stream itself. `deliver_card_callback(...)` sends a CALLBACK message on topic
  `/v1.0/card/instances/callback` as DingTalk does and waits for the client's ack (the same
  `messageId`); `send_system("disconnect")` asks the client to reconnect; `drop_connections()`
  cuts the TCP connections without a close frame.
Everything received is recorded.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import threading
import time
import uuid
from collections.abc import Iterator, Mapping
from http.server import ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from websockets.asyncio.server import Server, ServerConnection, serve

from tests.fakes.http_support import Failure, FailureQueue, JsonApiHandler, send_json

TOKEN_PATH = "/v1.0/oauth2/accessToken"
CREATE_AND_DELIVER_PATH = "/v1.0/card/instances/createAndDeliver"
CARD_INSTANCES_PATH = "/v1.0/card/instances"
OPEN_CONNECTION_PATH = "/v1.0/gateway/connections/open"
CARD_CALLBACK_TOPIC = "/v1.0/card/instances/callback"

RATE_LIMITED = {"code": "Forbidden.AccessDenied.QpsLimitForApi", "message": "Too many requests", "requestid": "r-1"}
NO_PERMISSION = {"code": "Forbidden.AccessDenied.AccessTokenPermissionDenied", "message": "No permission: Card.Instance.Write"}
BAD_CREDENTIALS = {"code": "invalidClientIdOrSecret", "message": "the client id or secret is not valid"}
ACK_TIMEOUT = 5.0


@dataclasses.dataclass(frozen=True)
class RecordedRequest:
    method: str
    path: str
    headers: dict[str, str]  # names lower-cased
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body) if self.body else None


@dataclasses.dataclass
class FakeCard:
    """A card instance DingTalk holds, as created or last updated."""

    out_track_id: str
    template_id: str
    open_space_id: str
    params: dict[str, str]
    callback_type: str
    updates: int = 0

    @property
    def buttons(self) -> list[dict[str, Any]]:
        return json.loads(self.params["sys_full_json_obj"]).get("msgButtons", [])


@dataclasses.dataclass(frozen=True)
class Ack:
    """What the client acknowledged one callback with."""

    code: int
    response: dict[str, Any] | None  # the ack's `data.response`
    seconds: float


class FakeDingTalk:
    """DingTalk for one internal app (`client_id`, `client_secret`)."""

    def __init__(self, client_id: str, client_secret: str) -> None:
        self.client_id = client_id
        self.client_secret = client_secret
        self.cards: dict[str, FakeCard] = {}
        self.endpoint_calls = 0
        self.accepted = 0  # WebSocket sessions accepted so far
        self._lock = threading.Lock()
        self._requests: list[RecordedRequest] = []
        self._failures = FailureQueue()
        self._tokens: set[str] = set()
        self._tickets: set[str] = set()
        self._sessions: list[ServerConnection] = []
        self._acks: dict[str, asyncio.Future[dict[str, Any]]] = {}
        handler = type("FakeDingTalkHandler", (_Handler,), {"fake": self})
        self._http = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._http.daemon_threads = True
        self._http_thread = threading.Thread(target=self._http.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._loop = asyncio.new_event_loop()
        self._loop_thread = threading.Thread(target=self._loop.run_forever, name="fake-dingtalk-stream", daemon=True)
        self._ws: Server | None = None

    @property
    def api_base_url(self) -> str:
        return f"http://127.0.0.1:{self._http.server_address[1]}"

    def start(self) -> FakeDingTalk:
        self._http_thread.start()
        self._loop_thread.start()
        self._ws = self._call(self._serve())
        return self

    def close(self) -> None:
        if self._ws is not None:

            async def close() -> None:
                assert self._ws is not None
                self._ws.close()
                await self._ws.wait_closed()

            self._call(close())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._loop_thread.join(timeout=5)
        self._http.shutdown()
        self._http.server_close()

    # --- what tests use ----------------------------------------------------------

    @property
    def requests(self) -> list[RecordedRequest]:
        with self._lock:
            return list(self._requests)

    def calls(self, method: str, path: str) -> list[RecordedRequest]:
        return [r for r in self.requests if r.method == method and r.path == path]

    def posted(self) -> list[FakeCard]:
        with self._lock:
            return list(self.cards.values())

    @property
    def connections(self) -> int:
        with self._lock:
            return len(self._sessions)

    def fail_next(
        self,
        path: str,
        status: int = 429,
        body: Mapping[str, Any] = RATE_LIMITED,
        headers: Mapping[str, str] | None = None,
        times: int = 1,
        method: str | None = None,
    ) -> None:
        """Answer the next `times` requests to `path` with this failure (default: 429, `Retry-After: 1`)."""
        headers = {"Retry-After": "1"} if headers is None else dict(headers)
        self._failures.add(Failure(method, path, status, body, headers, times))

    def deliver_card_callback(
        self,
        *,
        out_track_id: str,
        button_id: str,
        user_id: str,
        params: dict[str, Any] | None = None,
        message_id: str | None = None,
        timeout: float = ACK_TIMEOUT,
    ) -> Ack | None:
        """A click on the card's button `button_id` by `user_id` (with the card's input values in `params`), as
        the Stream delivers it; the client's ack, or None if none came within `timeout`."""
        content = {"cardPrivateData": {"actionIds": [button_id], "params": params or {}}}
        data = {
            "outTrackId": out_track_id,
            "corpId": "ding9f50b15bccd16741",
            "userId": user_id,
            "userIdType": 1,
            "type": "actionCallback",
            "spaceType": "IM_GROUP",
            "spaceId": "cidAbCdEf123==",
            "content": json.dumps(content),
            "extension": "{}",
        }
        return self.deliver(CARD_CALLBACK_TOPIC, data, message_id=message_id, timeout=timeout)

    def deliver(self, topic: str, data: dict[str, Any], *, message_id: str | None = None, timeout: float = ACK_TIMEOUT) -> Ack | None:
        return self._call(self._deliver(topic, data, message_id or uuid.uuid4().hex, timeout), timeout + 5)

    def send_system(self, topic: str) -> None:
        """A SYSTEM message (`disconnect`: DingTalk asks the client to reconnect)."""
        message = {
            "specVersion": "1.0",
            "type": "SYSTEM",
            "headers": {"topic": topic, "messageId": uuid.uuid4().hex, "contentType": "application/json", "time": str(int(time.time() * 1000))},
            "data": json.dumps({"reason": "server is going to restart"}),
        }
        self._call(self._broadcast(json.dumps(message)))

    def drop_connections(self) -> None:
        """Cut every session's TCP connection without a WebSocket close frame (a network drop)."""

        async def drop() -> None:
            for connection in list(self._sessions):
                connection.transport.close()

        self._call(drop())

    # --- internals -----------------------------------------------------------------

    def _call(self, coroutine: Any, timeout: float = 10) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(timeout)

    def open_connection(self, body: Any) -> tuple[int, dict[str, Any]]:
        sent = body if isinstance(body, dict) else {}
        with self._lock:
            self.endpoint_calls += 1
        if sent.get("clientId") != self.client_id or sent.get("clientSecret") != self.client_secret:
            return 401, BAD_CREDENTIALS
        topics = {(s.get("type"), s.get("topic")) for s in sent.get("subscriptions") or [] if isinstance(s, dict)}
        if ("CALLBACK", CARD_CALLBACK_TOPIC) not in topics:
            return 400, {"code": "invalidParameter", "message": "no subscription"}
        ticket = uuid.uuid4().hex
        with self._lock:
            self._tickets.add(ticket)
        assert self._ws is not None
        return 200, {"endpoint": f"ws://127.0.0.1:{self._ws.sockets[0].getsockname()[1]}/connect", "ticket": ticket}

    async def _serve(self) -> Server:
        return await serve(self._session, "127.0.0.1", 0)

    async def _session(self, connection: ServerConnection) -> None:
        ticket = (parse_qs(urlsplit(connection.request.path).query).get("ticket") or [""])[0]
        with self._lock:
            valid = ticket in self._tickets
            self._tickets.discard(ticket)
            if valid:
                self._sessions.append(connection)
                self.accepted += 1
        if not valid:
            await connection.close(1008, "invalid ticket")
            return
        try:
            async for raw in connection:
                ack = json.loads(raw)
                message_id = (ack.get("headers") or {}).get("messageId")
                future = self._acks.get(message_id)
                if future is not None and not future.done():
                    future.set_result(ack)
        except Exception:  # noqa: BLE001 - a dropped connection ends the session
            pass
        finally:
            with self._lock:
                self._sessions.remove(connection)

    async def _broadcast(self, raw: str) -> None:
        for connection in list(self._sessions):
            await connection.send(raw)

    async def _deliver(self, topic: str, data: dict[str, Any], message_id: str, timeout: float) -> Ack | None:
        with self._lock:
            session = self._sessions[-1] if self._sessions else None
        if session is None:
            raise AssertionError("no Stream connection is open to deliver to")
        future: asyncio.Future[dict[str, Any]] = self._loop.create_future()
        self._acks[message_id] = future
        message = {
            "specVersion": "1.0",
            "type": "CALLBACK",
            "headers": {
                "appId": "app-1",
                "connectionId": uuid.uuid4().hex,
                "contentType": "application/json",
                "messageId": message_id,
                "time": str(int(time.time() * 1000)),
                "topic": topic,
            },
            "data": json.dumps(data),
        }
        started = time.monotonic()
        await session.send(json.dumps(message))
        try:
            ack = await asyncio.wait_for(future, timeout)
        except asyncio.TimeoutError:
            return None
        finally:
            self._acks.pop(message_id, None)
        payload = json.loads(ack.get("data") or "{}")
        return Ack(code=int(ack.get("code", 0)), response=payload.get("response"), seconds=time.monotonic() - started)

    def _record(self, request: RecordedRequest) -> Failure | None:
        with self._lock:
            self._requests.append(request)
        return self._failures.take(request.method, request.path)


class _Handler(JsonApiHandler):
    fake: FakeDingTalk

    def answer(self, method: str, path: str, headers: dict[str, str], body: bytes) -> None:
        request = RecordedRequest(method, path, headers, body)
        failure = self.fake._record(request)
        if failure is not None:
            send_json(self, failure.status, failure.body, failure.headers)
            return
        send_json(self, *self._route(request))

    def _route(self, request: RecordedRequest) -> tuple[int, dict[str, Any]]:
        fake = self.fake
        sent = request.json() or {}
        if request.method == "POST" and request.path == TOKEN_PATH:
            if sent.get("appKey") != fake.client_id or sent.get("appSecret") != fake.client_secret:
                return 400, BAD_CREDENTIALS
            token = uuid.uuid4().hex
            with fake._lock:
                fake._tokens.add(token)
            return 200, {"accessToken": token, "expireIn": 7200}
        if request.method == "POST" and request.path == OPEN_CONNECTION_PATH:
            return fake.open_connection(sent)
        with fake._lock:
            known = request.headers.get("x-acs-dingtalk-access-token") in fake._tokens
        if not known:
            return 401, {"code": "InvalidAuthentication", "message": "the access token is not valid"}
        if request.method == "POST" and request.path == CREATE_AND_DELIVER_PATH:
            return self._create(sent)
        if request.method == "PUT" and request.path == CARD_INSTANCES_PATH:
            with fake._lock:
                card = fake.cards.get(sent.get("outTrackId"))
                if card is None:
                    return 400, {"code": "param.cardNotExist", "message": "the card does not exist"}
                card.params.update((sent.get("cardData") or {}).get("cardParamMap") or {})
                card.updates += 1
            return 200, {"success": True, "result": True}
        return 404, {"code": "NotFound", "message": "no such API"}

    def _create(self, sent: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        fake = self.fake
        out_track_id = sent.get("outTrackId")
        params = (sent.get("cardData") or {}).get("cardParamMap")
        space = sent.get("openSpaceId", "")
        if not out_track_id or not isinstance(params, dict) or not sent.get("cardTemplateId"):
            return 400, {"code": "param.empty", "message": "outTrackId, cardTemplateId and cardData are required"}
        if not all(isinstance(value, str) for value in params.values()):
            return 400, {"code": "param.invalid", "message": "cardParamMap values must be strings"}
        if (sent.get("imGroupOpenDeliverModel") or {}).get("robotCode") != fake.client_id:
            return 400, {"code": "param.robotCodeInvalid", "message": "robotCode is not this app's"}
        with fake._lock:
            if out_track_id not in fake.cards:  # one card per outTrackId
                fake.cards[out_track_id] = FakeCard(
                    out_track_id, sent["cardTemplateId"], space, dict(params), sent.get("callbackType", "")
                )
        space_id = space.rpartition(".")[2]
        return 200, {
            "success": True,
            "result": {"outTrackId": out_track_id, "deliverResults": [{"spaceType": "IM_GROUP", "spaceId": space_id, "success": True}]},
        }


CLIENT_ID = "dingoxqzvmxj1zbq8r0k"


@pytest.fixture
def fake_dingtalk() -> Iterator[FakeDingTalk]:
    """A started FakeDingTalk for app CLIENT_ID (a fresh secret each test), stopped after."""
    fake = FakeDingTalk(CLIENT_ID, f"secret-{uuid.uuid4().hex}").start()
    try:
        yield fake
    finally:
        fake.close()
