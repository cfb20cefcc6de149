"""The Feishu / Lark long connection: card callbacks without a public URL (`mode: long_connection`).

lark-oapi's WebSocket client (`lark_oapi.ws.Client`) first asks for an
endpoint — `POST {api_base_url}/callback/ws/endpoint` with `{"AppID",
"AppSecret"}`, answered `{"code": 0, "data": {"URL": "wss://…?device_id=…&
service_id=…", "ClientConfig": {…}}}` — then holds a WebSocket carrying
protobuf `Frame`s (`lark_oapi/ws/pb/pbbp2.proto`): control frames (ping/pong)
and data frames whose `type` header is `event` or `card`. A data frame is
answered by sending it back with the payload `{"code": 200, "data":
base64(<answer JSON>)}`; for a card callback the answer is the toast and the
redrawn card, and Feishu gives it 3 seconds before showing the clicker error
200340. Card callbacks reach a self-built app over this connection only when
its callback subscription uses it (developer console → Events & Callbacks).
An app may hold 50 connections; Feishu gives each event to one of them.

lark-oapi 1.7.5's traps, and what this module does about each:
1. **CARD frames are dropped unanswered** (`_handle_data_frame` returns early;
   larksuite/oapi-sdk-python issue 126). The supported route is an EVENT frame
   whose event type is `card.action.trigger`. `_GatewayWsClient` answers both,
   and `self_test()` checks at start-up, against the SDK's own handler and
   ours, which frame types get an answer.
2. **The handler runs on the event loop**, synchronously. Deciding is Django
   ORM work, which must not run there: it runs in a thread, and an answer not
   ready within `ANSWER_BUDGET_SECONDS` becomes a "received" toast (the click
   still completes; the worker redraws the card as always).
3. **`Client.start()` never returns**: it runs on a module-level event loop
   made at import time (so one client per process), reconnects by itself on
   the server's schedule (up to 30 s of jitter, then every 120 s) and loses a
   refused credential inside a task nobody awaits. Here the connection runs on
   this thread's own loop, never reconnects by itself, and reports refusals
   to the `channel_connections` runner, which stops the process on them and
   reconnects with backoff otherwise.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import json
import logging
import threading
import time
import uuid
from collections.abc import Callable, Coroutine
from typing import Any, Protocol
from urllib.parse import parse_qs, urlparse

import lark_oapi as lark
import requests
import websockets
from lark_oapi.core.const import FEISHU_DOMAIN, VERSION
from lark_oapi.core.json import JSON
from lark_oapi.event.callback.model.p2_card_action_trigger import P2CardActionTriggerResponse
from lark_oapi.ws.client import Client as LarkWsClient
from lark_oapi.ws.client import _parse_ws_conn_exception, _ws_connect_kwargs
from lark_oapi.ws.connection_config import build_connection_url
from lark_oapi.ws.const import (
    DEVICE_ID,
    EXCEED_CONN_LIMIT,
    HEADER_BIZ_RT,
    HEADER_MESSAGE_ID,
    HEADER_SEQ,
    HEADER_SUM,
    HEADER_TYPE,
    SERVICE_ID,
)
from lark_oapi.ws.enum import FrameType, MessageType
from lark_oapi.ws.exception import ClientException, ServerException
from lark_oapi.ws.model import ClientConfig, Response
from lark_oapi.ws.pb.pbbp2_pb2 import Frame
from websockets.exceptions import InvalidHandshake

from channels_ext.feishu.config import FeishuChannelConfig
from gateway_contract import Decide
from gateway_contract.links import CONNECTED, ConnectionRefused, Report, run_on_own_loop

logger = logging.getLogger(__name__)


class LongConnectionHost(Protocol):
    """What the link needs of its channel (the adapter hands itself, as slack-bolt hands its handler the app)."""

    name: str
    config: FeishuChannelConfig

    def answer_connection_event(self, body: bytes, decide: Decide, *, delivery_id: str = "") -> dict[str, Any] | None: ...

ANSWER_BUDGET_SECONDS = 2.5  # Feishu waits 3 s for the answer to a card callback
WATCH_INTERVAL_SECONDS = 0.2
STILL_WORKING = {"toast": {"type": "info", "content": "Received; the card will update in a moment."}}
# Endpoint codes lark-oapi raises as ClientException that a later attempt can get past:
# the app's 50 connections are taken (old ones still closing), and "system busy".
_TRANSIENT_CLIENT_CODES = frozenset({EXCEED_CONN_LIMIT, 1000040345})
CONSOLE_HINT = (
    "card callbacks arrive on it only if the app's callback subscription uses the long connection "
    "(developer console → Events & Callbacks → Callback configuration → receive callbacks through "
    "the persistent connection, with card.action.trigger added)"
)

Answer = Callable[[bytes, str, str], "dict[str, Any] | None"]  # (payload, frame type, message id)


class _GatewayWsClient(LarkWsClient):
    """lark-oapi's long-connection client, driven by `FeishuLongConnectionLink` (see the module docstring)."""

    def __init__(self, *, app_id: str, app_secret: str, domain: str, answer: Answer, budget: float):
        # Built inside the running loop: the SDK's frame cache schedules its cleanup on the current loop.
        super().__init__(app_id, app_secret, log_level=lark.LogLevel.WARNING, domain=domain, auto_reconnect=False)
        self._answer = answer
        self._budget = budget
        self.closed = asyncio.Event()
        self.lost_reason = ""
        self._tasks: set[asyncio.Task[Any]] = set()

    def spawn(self, coroutine: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        """A task on the running loop, kept referenced until done."""
        task = asyncio.get_running_loop().create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def close(self) -> None:
        await self._disconnect()
        for task in list(self._tasks):
            task.cancel()
        self._cache._cron.cancel()

    async def _connect(self) -> None:
        # The SDK's version schedules the receive loop on its import-time module loop and
        # leaves its lock held when already connected; this one uses the running loop.
        async with self._lock:
            if self._conn is not None:
                return
            # The endpoint request is a blocking `requests.post`: off the loop.
            endpoint = await asyncio.to_thread(self._get_conn_url)
            conn_url = build_connection_url(endpoint, self._connection_host)
            query = parse_qs(urlparse(conn_url).query)
            if not query.get(DEVICE_ID) or not query.get(SERVICE_ID):
                raise ServerException(500, "the endpoint URL has no device_id or service_id")
            try:
                conn = await websockets.connect(
                    conn_url, open_timeout=10, close_timeout=2, **_ws_connect_kwargs(self._connection_headers)
                )
            except InvalidHandshake as exc:
                _parse_ws_conn_exception(exc)  # Feishu's handshake-status headers → Client/ServerException
                raise
            self._conn = conn
            self._conn_url = conn_url
            self._conn_id = query[DEVICE_ID][0]
            self._service_id = query[SERVICE_ID][0]
            self.spawn(self._receive_message_loop())

    async def _disconnect(self) -> None:
        # The SDK's version releases its lock in `finally` even when acquiring it was cancelled.
        async with self._lock:
            conn, self._conn = self._conn, None
        if conn is not None:
            await conn.close()

    async def _receive_message_loop(self) -> None:
        # Unlike the SDK's, this one never reconnects by itself: it says the connection is gone.
        conn = self._conn
        try:
            while conn is not None:
                message = await conn.recv()
                self.spawn(self._handle_message(message))
        except Exception as exc:  # ConnectionClosed and the like
            self.lost_reason = f"{type(exc).__name__}: {exc}"
        finally:
            await self._disconnect()
            self.closed.set()

    def _configure(self, conf: ClientConfig) -> None:
        # The server's ClientConfig may leave keys out; keep the defaults for those.
        for key, attribute in (
            ("ReconnectCount", "_reconnect_count"),
            ("ReconnectInterval", "_reconnect_interval"),
            ("ReconnectNonce", "_reconnect_nonce"),
            ("PingInterval", "_ping_interval"),
        ):
            value = getattr(conf, key, None)
            if isinstance(value, int) and value >= 0:
                setattr(self, attribute, value)

    async def _handle_data_frame(self, frame: Frame) -> None:
        # Both EVENT and CARD frames carry clicks (issue 126); each is answered within the budget.
        headers = {header.key: header.value for header in frame.headers}
        message_type = headers.get(HEADER_TYPE)
        if message_type not in (MessageType.EVENT.value, MessageType.CARD.value):
            return
        message_id = headers.get(HEADER_MESSAGE_ID, "")
        payload: bytes | None = frame.payload
        parts = int(headers.get(HEADER_SUM) or 1)
        if parts > 1:  # a payload split over several frames: answer once it is whole
            payload = self._combine(message_id, parts, int(headers.get(HEADER_SEQ) or 0), frame.payload)
            if payload is None:
                return
        started = time.monotonic()
        work = asyncio.get_running_loop().run_in_executor(None, self._answer, payload, message_type, message_id)
        response = Response(code=200)
        try:
            result = await asyncio.wait_for(asyncio.shield(work), self._budget)
        except asyncio.TimeoutError:
            logger.warning(
                "feishu app %s: answered frame %s as received after %.1f s; the click is still being handled",
                self._app_id,
                message_id,
                time.monotonic() - started,
            )
            result = STILL_WORKING
        except Exception:
            logger.exception("feishu app %s: handling frame %s failed", self._app_id, message_id)
            response, result = Response(code=500), None
        if result is not None:
            response.data = base64.b64encode(JSON.marshal(result).encode())
        header = frame.headers.add()
        header.key = HEADER_BIZ_RT
        header.value = str(int((time.monotonic() - started) * 1000))
        frame.payload = JSON.marshal(response).encode()
        await self._write_message(frame.SerializeToString())


class FeishuLongConnectionLink:
    """One Feishu channel's long connection (gateway_contract/links.py's contract)."""

    def __init__(self, adapter: LongConnectionHost, decide: Decide, *, budget: float = ANSWER_BUDGET_SECONDS):
        self.adapter = adapter
        self.decide = decide
        self.budget = budget

    @property
    def name(self) -> str:
        return self.adapter.name

    def serve(self, stop: threading.Event, report: Report) -> None:
        """Open the long connection and answer its frames until it is lost or `stop` is set."""
        run_on_own_loop(self._serve(stop, report))

    def answer(self, payload: bytes, frame_type: str, message_id: str) -> dict[str, Any] | None:
        """A data frame's payload, in a worker thread: the adapter's answer to put in the response frame."""
        return self.adapter.answer_connection_event(payload, self.decide, delivery_id=f"feishu:frame:{message_id}")

    async def _serve(self, stop: threading.Event, report: Report) -> None:
        test = await self_test()
        if not test.callbacks_answered:
            raise ConnectionRefused(f"feishu channel {self.name!r}: card callbacks cannot arrive: {test.summary}")
        config = self.adapter.config
        client = _GatewayWsClient(
            app_id=config.app_id,
            app_secret=config.app_secret,
            domain=config.api_base_url.rstrip("/"),  # lark-oapi wants a bare origin
            answer=self.answer,
            budget=self.budget,
        )
        try:
            try:
                await client._connect()
            except ClientException as exc:
                raise self._failure(exc.code, str(exc), refused=exc.code not in _TRANSIENT_CLIENT_CODES) from None
            except ServerException as exc:
                # The endpoint's HTTP status: a 4xx is a refusal of this app, anything else a hiccup.
                refused = 400 <= exc.code < 500 and exc.code not in (408, 429)
                raise self._failure(exc.code, str(exc), refused=refused) from None
            except requests.RequestException as exc:
                raise ConnectionError(f"could not reach {config.api_base_url}: {type(exc).__name__}") from None
            logger.info(
                "feishu channel %s: the endpoint accepted app %s and the long connection is open (conn_id %s); %s",
                self.name,
                config.app_id,
                client._conn_id,
                CONSOLE_HINT,
            )
            report(CONNECTED, f"long connection open (conn_id {client._conn_id}); self-test: {test.summary}")
            client.spawn(client._ping_loop())
            while not stop.is_set() and not client.closed.is_set():
                try:
                    await asyncio.wait_for(client.closed.wait(), WATCH_INTERVAL_SECONDS)
                except asyncio.TimeoutError:
                    pass
            if client.closed.is_set():
                logger.warning("feishu channel %s: the long connection was lost (%s)", self.name, client.lost_reason)
        finally:
            await client.close()

    def _failure(self, code: int, message: str, *, refused: bool) -> Exception:
        config = self.adapter.config
        if not refused:
            return ConnectionError(f"Feishu's long-connection endpoint answered {message}")
        return ConnectionRefused(
            f"Feishu refused the long connection of channel {self.name!r} (app {config.app_id}): {message}. "
            "Check app_id and app_secret, and that the app is a self-built app whose events and callbacks "
            "use the long connection (developer console → Events & Callbacks)."
        )


# --------------------------------------------------------------------------- self-test


@dataclasses.dataclass(frozen=True)
class SelfTest:
    """Which data frames get an answer, from lark-oapi's own handler and from the gateway's."""

    sdk_version: str
    sdk_answers: tuple[str, ...]  # frame types the SDK's own handler answers
    gateway_answers: tuple[str, ...]  # frame types `_GatewayWsClient` answers

    @property
    def callbacks_answered(self) -> bool:
        return set(self.gateway_answers) == {MessageType.EVENT.value, MessageType.CARD.value}

    @property
    def summary(self) -> str:
        sdk = " and ".join(self.sdk_answers) or "no"
        ours = " and ".join(self.gateway_answers) or "no"
        dropped = {MessageType.EVENT.value, MessageType.CARD.value} - set(self.sdk_answers)
        note = f" (it drops {' and '.join(sorted(dropped))} frames: larksuite/oapi-sdk-python issue 126)" if dropped else ""
        verdict = "card clicks can be answered" if self.callbacks_answered else "card clicks would go unanswered"
        return (
            f"lark-oapi {self.sdk_version} by itself answers {sdk} frames{note}; "
            f"the gateway answers {ours} frames: {verdict}"
        )


_self_test: SelfTest | None = None
_self_test_lock = threading.Lock()

_PROBE_ANSWER = {"toast": {"type": "info", "content": "self-test"}}
_PROBE_CLICK = {
    "schema": "2.0",
    "header": {"event_id": "self-test", "event_type": "card.action.trigger", "token": "", "app_id": "cli_self_test"},
    "event": {
        "operator": {"open_id": "ou_self_test"},
        "token": "c-self-test",
        "action": {"value": {"decision": "approve"}, "tag": "button"},
        "context": {"open_message_id": "om_self_test", "open_chat_id": "oc_self_test"},
    },
}


async def self_test() -> SelfTest:
    """Feed one synthetic card click, as an EVENT frame and as a CARD frame, to lark-oapi's own
    frame handler and to the gateway's, and record which answer it (once per process; no network)."""
    global _self_test
    with _self_test_lock:
        if _self_test is not None:
            return _self_test
    dispatcher = (
        lark.EventDispatcherHandler.builder("", "")
        .register_p2_card_action_trigger(lambda _event: P2CardActionTriggerResponse(_PROBE_ANSWER))
        .build()
    )
    sdk_client = LarkWsClient("cli_self_test", "self-test", log_level=lark.LogLevel.CRITICAL, event_handler=dispatcher)
    gateway_client = _GatewayWsClient(
        app_id="cli_self_test",
        app_secret="self-test",
        domain=FEISHU_DOMAIN,
        answer=lambda payload, frame_type, message_id: _PROBE_ANSWER,
        budget=ANSWER_BUDGET_SECONDS,
    )
    try:
        result = SelfTest(
            sdk_version=VERSION,
            sdk_answers=await _answered_frame_types(sdk_client),
            gateway_answers=await _answered_frame_types(gateway_client),
        )
    finally:
        for client in (sdk_client, gateway_client):
            client._cache._cron.cancel()
    with _self_test_lock:
        _self_test = result
    logger.info("feishu self-test: %s", result.summary)
    return result


async def _answered_frame_types(client: LarkWsClient) -> tuple[str, ...]:
    answered = []
    for frame_type in (MessageType.EVENT.value, MessageType.CARD.value):
        sent: list[bytes] = []

        class _Probe:  # stands in for the WebSocket: keeps what the client sends back
            async def send(self, data: bytes) -> None:
                sent.append(data)

        client._conn = _Probe()
        try:
            await client._handle_data_frame(data_frame(frame_type, json.dumps(_PROBE_CLICK).encode()))
        except Exception:
            logger.exception("feishu self-test: the %s frame handler failed", frame_type)
        finally:
            client._conn = None
        if sent and decode_response(sent[-1]) == _PROBE_ANSWER:
            answered.append(frame_type)
    return tuple(answered)


def data_frame(frame_type: str, payload: bytes, *, message_id: str = "", service: int = 1) -> Frame:
    """A data frame as Feishu sends one (also used by the tests' fake server)."""
    frame = Frame()
    frame.SeqID = 0
    frame.LogID = 0
    frame.service = service
    frame.method = FrameType.DATA.value
    for key, value in (
        (HEADER_TYPE, frame_type),
        (HEADER_MESSAGE_ID, message_id or uuid.uuid4().hex),
        (HEADER_SUM, "1"),
        (HEADER_SEQ, "0"),
        ("trace_id", uuid.uuid4().hex),
    ):
        header = frame.headers.add()
        header.key = key
        header.value = value
    frame.payload = payload
    return frame


def decode_response(raw: bytes) -> dict[str, Any] | None:
    """The answer inside a response frame (the `data` of its `{"code", "data"}` payload), if any."""
    frame = Frame()
    frame.ParseFromString(raw)
    body = json.loads(frame.payload or b"{}")
    data = body.get("data") if isinstance(body, dict) else None
    return json.loads(base64.b64decode(data)) if data else None
