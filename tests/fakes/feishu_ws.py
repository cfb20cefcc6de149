"""Feishu's side of the long connection, on 127.0.0.1, for lark-oapi's real WebSocket client.

Attach it to a FakeFeishu (`fake_feishu.long_connection = FakeLongConnection(app_id, app_secret).start()`):
FakeFeishu then answers `POST /callback/ws/endpoint` through it, and it serves
the WebSocket that endpoint names. Frames are protobuf `Frame`s built with
lark-oapi's own generated types (`lark_oapi.ws.pb.pbbp2_pb2`):
- the client pings with a control frame (method 0, header `type: ping`); the
  server answers `type: pong`, with its ClientConfig as the payload;
- a delivery is a data frame (method 1) with headers `type` (`event` or
  `card`), `message_id`, `sum`, `seq`, `trace_id` and the event JSON as payload;
- the client answers by sending the frame back with the payload
  `{"code": 200, "data": base64(<answer JSON>)}`. Feishu waits 3 s for it.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import json
import threading
import time
import uuid
from typing import Any
from urllib.parse import parse_qs, urlsplit

from lark_oapi.ws.pb.pbbp2_pb2 import Frame
from websockets.asyncio.server import Server, ServerConnection, serve

ANSWER_TIMEOUT = 3.0  # Feishu's, for a card callback
# Codes the endpoint answers for refused credentials. Feishu does not publish them; what
# matters is that they are not 0 (ok), 1 (busy) or 1000040343 (internal error): lark-oapi
# raises every other code as a ClientException. 1000040346 is what deployments report
# for a wrong app_id ("app_id is invalid").
APP_ID_INVALID = {"code": 1000040346, "msg": "app_id is invalid"}
APP_SECRET_INVALID = {"code": 1000040346, "msg": "app_secret is invalid"}


@dataclasses.dataclass(frozen=True)
class FrameAnswer:
    """What the client sent back for one data frame."""

    code: int  # the response's status code (200, or 500 when its handler failed)
    data: dict[str, Any] | None  # the decoded answer (toast, card), if any
    headers: dict[str, str]
    seconds: float  # from sending the frame to receiving the answer


class FakeLongConnection:
    """The long-connection endpoint of one self-built app (`app_id`, `app_secret`)."""

    def __init__(self, app_id: str, app_secret: str, *, ping_interval: int = 120):
        self.app_id = app_id
        self.app_secret = app_secret
        self.ping_interval = ping_interval
        self.endpoint_calls = 0
        self.accepted = 0  # WebSocket sessions accepted so far
        self.pings = 0
        self._tickets: set[str] = set()
        self._sessions: list[ServerConnection] = []
        self._pending: dict[tuple[int, str], asyncio.Future[Frame]] = {}
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="fake-feishu-ws", daemon=True)
        self._server: Server | None = None

    # --- lifecycle ---------------------------------------------------------------

    def start(self) -> FakeLongConnection:
        self._thread.start()
        self._server = self._call(self._serve())
        return self

    def stop(self) -> None:
        if self._server is not None:

            async def close() -> None:
                assert self._server is not None
                self._server.close()
                await self._server.wait_closed()

            self._call(close())
            self._server = None
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)

    @property
    def port(self) -> int:
        assert self._server is not None, "FakeLongConnection is not started"
        return self._server.sockets[0].getsockname()[1]

    @property
    def client_config(self) -> dict[str, int]:
        return {"ReconnectCount": -1, "ReconnectInterval": 120, "ReconnectNonce": 30, "PingInterval": self.ping_interval}

    # --- what FakeFeishu calls -----------------------------------------------------

    def endpoint(self, body: Any) -> tuple[int, dict[str, Any]]:
        """Answer `POST /callback/ws/endpoint` as Feishu does."""
        sent = body if isinstance(body, dict) else {}
        with self._lock:
            self.endpoint_calls += 1
        if sent.get("AppID") != self.app_id:
            return 200, APP_ID_INVALID
        if sent.get("AppSecret") != self.app_secret:
            return 200, APP_SECRET_INVALID
        ticket = uuid.uuid4().hex
        with self._lock:
            self._tickets.add(ticket)
        url = f"ws://127.0.0.1:{self.port}/ws?device_id={uuid.uuid4().int % 10**19}&service_id=33554678&ticket={ticket}"
        return 200, {"code": 0, "msg": "ok", "data": {"URL": url, "ClientConfig": self.client_config}}

    # --- what tests call ---------------------------------------------------------

    @property
    def connections(self) -> int:
        with self._lock:
            return len(self._sessions)

    def deliver(
        self,
        payload: dict[str, Any],
        *,
        frame_type: str = "event",
        message_id: str | None = None,
        timeout: float = ANSWER_TIMEOUT,
    ) -> FrameAnswer | None:
        """Send one data frame on the newest session; the client's answer, or None after `timeout`."""
        return self._call(self._deliver(payload, frame_type, message_id or uuid.uuid4().hex, timeout), timeout + 5)

    def drop_connections(self) -> None:
        """Cut every session's TCP connection without a WebSocket close frame (a network drop)."""

        async def drop() -> None:
            for connection in list(self._sessions):
                connection.transport.close()

        self._call(drop())

    # --- the server ----------------------------------------------------------------

    def _call(self, coroutine: Any, timeout: float = 10) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(timeout)

    async def _serve(self) -> Server:
        return await serve(self._session, "127.0.0.1", 0)

    async def _session(self, connection: ServerConnection) -> None:
        query = parse_qs(urlsplit(connection.request.path).query)
        ticket = (query.get("ticket") or [""])[0]
        with self._lock:
            valid = ticket in self._tickets and query.get("device_id") and query.get("service_id")
            self._tickets.discard(ticket)
        if not valid:
            await connection.close(1008, "invalid ticket")
            return
        with self._lock:
            self._sessions.append(connection)
            self.accepted += 1
        try:
            async for message in connection:
                if not isinstance(message, bytes):
                    continue
                frame = Frame()
                frame.ParseFromString(message)
                headers = {header.key: header.value for header in frame.headers}
                if frame.method == 0:  # control
                    if headers.get("type") == "ping":
                        with self._lock:
                            self.pings += 1
                        await connection.send(self._pong(frame.service).SerializeToString())
                    continue
                future = self._pending.get((id(connection), headers.get("message_id", "")))
                if future is not None and not future.done():
                    future.set_result(frame)
        except Exception:
            pass  # a dropped connection
        finally:
            with self._lock:
                if connection in self._sessions:
                    self._sessions.remove(connection)

    def _pong(self, service: int) -> Frame:
        frame = Frame()
        frame.SeqID = 0
        frame.LogID = 0
        frame.service = service
        frame.method = 0
        header = frame.headers.add()
        header.key, header.value = "type", "pong"
        frame.payload = json.dumps(self.client_config).encode()
        return frame

    async def _deliver(self, payload: dict[str, Any], frame_type: str, message_id: str, timeout: float) -> FrameAnswer | None:
        with self._lock:
            connection = self._sessions[-1]
        frame = Frame()
        frame.SeqID = 1
        frame.LogID = 0
        frame.service = 33554678
        frame.method = 1  # data
        for key, value in (
            ("type", frame_type),
            ("message_id", message_id),
            ("sum", "1"),
            ("seq", "0"),
            ("trace_id", uuid.uuid4().hex),
            ("timestamp", str(int(time.time() * 1000))),
        ):
            header = frame.headers.add()
            header.key, header.value = key, value
        frame.payload = json.dumps(payload).encode()
        key = (id(connection), message_id)
        future: asyncio.Future[Frame] = self._loop.create_future()
        self._pending[key] = future
        started = time.monotonic()
        await connection.send(frame.SerializeToString())
        try:
            answered = await asyncio.wait_for(future, timeout)
        except asyncio.TimeoutError:
            return None
        finally:
            self._pending.pop(key, None)
        response = json.loads(answered.payload)
        data = json.loads(base64.b64decode(response["data"])) if response.get("data") else None
        return FrameAnswer(
            code=response.get("code"),
            data=data,
            headers={header.key: header.value for header in answered.headers},
            seconds=time.monotonic() - started,
        )
