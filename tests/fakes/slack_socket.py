"""Slack's side of Socket Mode, on 127.0.0.1, for slack-sdk's real SocketModeClient to talk to.

Attach it to a FakeSlack (`fake_slack.socket_mode = FakeSocketMode(app_token).start()`):
FakeSlack then answers `apps.connections.open` through it, and it serves the
WebSocket that URL names. The protocol, as Slack documents it
(https://docs.slack.dev/apis/events-api/using-socket-mode/):
- `apps.connections.open` (Bearer: the app-level `xapp-` token) answers
  `{"ok": true, "url": "wss://…/link/?ticket=…"}`; a bot token gets
  `not_allowed_token_type`, an unknown one `invalid_auth`;
- on connecting, Slack sends `{"type": "hello", "num_connections": N, …}`;
- each delivery is an envelope `{"envelope_id", "type", "accepts_response_payload",
  "payload"}`, acknowledged by the app with `{"envelope_id", "payload"?}`;
  Slack waits 3 s for the ack;
- `{"type": "disconnect", "reason": …}` asks the app to reconnect.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import threading
import time
import uuid
from typing import Any
from urllib.parse import parse_qs, urlsplit

from websockets.asyncio.server import Server, ServerConnection, serve

ACK_TIMEOUT = 3.0  # Slack's


@dataclasses.dataclass(frozen=True)
class Ack:
    """An app's acknowledgement of one envelope."""

    envelope_id: str
    payload: dict[str, Any] | None
    seconds: float  # from sending the envelope to receiving the ack


class FakeSocketMode:
    """The Socket Mode endpoint of one Slack app whose app-level token is `app_token`."""

    def __init__(self, app_token: str):
        self.app_token = app_token
        self.refusal: str | None = None  # when set, apps.connections.open answers this error
        self.opened = 0  # successful apps.connections.open calls
        self.accepted = 0  # WebSocket sessions accepted so far
        self.acks: list[Ack] = []
        self._tickets: set[str] = set()
        self._sessions: list[ServerConnection] = []
        self._pending: dict[tuple[int, str], asyncio.Future[dict[str, Any]]] = {}  # (session, envelope id)
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="fake-slack-socket-mode", daemon=True)
        self._server: Server | None = None

    # --- lifecycle ---------------------------------------------------------------

    def start(self) -> FakeSocketMode:
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
        assert self._server is not None, "FakeSocketMode is not started"
        return self._server.sockets[0].getsockname()[1]

    # --- what FakeSlack calls -----------------------------------------------------

    def open_connection(self, authorization: str) -> tuple[int, Any, dict[str, str]]:
        """Answer `apps.connections.open` as Slack does."""
        token = authorization.removeprefix("Bearer ").strip()
        if not token:
            return 200, {"ok": False, "error": "not_authed"}, {}
        if not token.startswith("xapp-"):
            return 200, {"ok": False, "error": "not_allowed_token_type"}, {}
        if token != self.app_token:
            return 200, {"ok": False, "error": "invalid_auth"}, {}
        if self.refusal:
            return 200, {"ok": False, "error": self.refusal}, {}
        ticket = uuid.uuid4().hex
        with self._lock:
            self._tickets.add(ticket)
            self.opened += 1
        return 200, {"ok": True, "url": f"ws://127.0.0.1:{self.port}/link/?ticket={ticket}&app_id=A111"}, {}

    # --- what tests call ---------------------------------------------------------

    @property
    def connections(self) -> int:
        """WebSocket sessions open right now."""
        with self._lock:
            return len(self._sessions)

    def deliver(
        self,
        payload: dict[str, Any],
        *,
        envelope_id: str | None = None,
        kind: str = "interactive",
        timeout: float = ACK_TIMEOUT,
        session: int = -1,
    ) -> Ack | None:
        """Send one envelope on an open session (the newest by default); the app's ack, or None after `timeout`."""
        envelope = {
            "envelope_id": envelope_id or str(uuid.uuid4()),
            "type": kind,
            "accepts_response_payload": kind != "events_api",
            "payload": payload,
        }
        return self._call(self._deliver(envelope, timeout, session), timeout=timeout + 5)

    def drop_connections(self) -> None:
        """Cut every session's TCP connection without a WebSocket close frame (a network drop)."""

        async def drop() -> None:
            for connection in list(self._sessions):
                connection.transport.close()

        self._call(drop())

    def send_disconnect(self, reason: str = "refresh_requested") -> None:
        """Ask the app to reconnect, as Slack does before recycling a connection."""
        message = json.dumps({"type": "disconnect", "reason": reason, "debug_info": {"host": "applink-fake"}})

        async def send() -> None:
            for connection in list(self._sessions):
                await connection.send(message)

        self._call(send())

    # --- the server ----------------------------------------------------------------

    def _call(self, coroutine: Any, timeout: float = 10) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(timeout)

    async def _serve(self) -> Server:
        return await serve(self._session, "127.0.0.1", 0)

    async def _session(self, connection: ServerConnection) -> None:
        query = parse_qs(urlsplit(connection.request.path).query)
        ticket = (query.get("ticket") or [""])[0]
        with self._lock:
            valid = ticket in self._tickets
            self._tickets.discard(ticket)  # a ticket is good for one connection
        if not valid:
            await connection.close(4001, "invalid ticket")
            return
        with self._lock:
            self._sessions.append(connection)
            self.accepted += 1
            count = len(self._sessions)
        try:
            await connection.send(
                json.dumps(
                    {
                        "type": "hello",
                        "num_connections": count,
                        "debug_info": {"host": "applink-fake", "build_number": 1, "approximate_connection_time": 18060},
                        "connection_info": {"app_id": "A111"},
                    }
                )
            )
            async for message in connection:
                try:
                    ack = json.loads(message)
                except ValueError:
                    continue
                key = (id(connection), ack.get("envelope_id")) if isinstance(ack, dict) else None
                future = self._pending.get(key) if key else None
                if future is not None and not future.done():
                    future.set_result(ack)
        except Exception:
            pass  # a dropped connection
        finally:
            with self._lock:
                if connection in self._sessions:
                    self._sessions.remove(connection)

    async def _deliver(self, envelope: dict[str, Any], timeout: float, session: int) -> Ack | None:
        with self._lock:
            connection = self._sessions[session]
        envelope_id = envelope["envelope_id"]
        future: asyncio.Future[dict[str, Any]] = self._loop.create_future()
        key = (id(connection), envelope_id)
        self._pending[key] = future
        started = time.monotonic()
        await connection.send(json.dumps(envelope))
        try:
            ack = await asyncio.wait_for(future, timeout)
        except asyncio.TimeoutError:
            return None
        finally:
            self._pending.pop(key, None)
        received = Ack(envelope_id=envelope_id, payload=ack.get("payload"), seconds=time.monotonic() - started)
        with self._lock:
            self.acks.append(received)
        return received
