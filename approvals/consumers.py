"""WebSocket `/ws/v1/confirmations/<id>`: every state change of one request, pushed.

The agent authenticates with its API key, in the first of these it sends:

- `Authorization: Bearer <key>` on the handshake (any non-browser client);
- the subprotocol list `["gateway.v1", "bearer.<key>"]` — browsers cannot set
  headers, so `new WebSocket(url, ["gateway.v1", "bearer." + key])`; the
  server selects `gateway.v1` and never echoes the key;
- `?api_key=<key>` in the URL (last resort: URLs end up in proxy logs).

Then it gets the request's current state at once (so connecting after the
decision still answers immediately), one message per later change (an
approval counted toward a quorum, the final decision), and a close with code
1000 after the final state. A bad or missing key closes with 4401; an unknown
id, or another agent's, closes with 4404 (the WebSocket form of the API's 404).

Each message is the API's confirmation dict (docs/reference/api.md) plus
`approvals_required` and `approved_by` (who has approved so far).

A connection waits like the long-poll does, on the one waiting primitive
(`approvals.waiting.confirmation_states`): one future in
`gateway_utils.realtime.waiters`, woken by PostgreSQL NOTIFY, with the process's
batched re-check as the safety net; database reads borrow a connection and
give it back at once. No thread, no held connection, no channel layer.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import uuid
from typing import Any
from urllib.parse import parse_qs

from channels.consumer import get_handler_name
from channels.exceptions import StopConsumer
from channels.generic.websocket import AsyncWebsocketConsumer

from approvals import selectors
from approvals.api.auth import bearer_token
from approvals.types import ConfirmationState
from approvals.waiting import agent_id_for_key, confirmation_states

SUBPROTOCOL = "gateway.v1"
BEARER_SUBPROTOCOL_PREFIX = "bearer."

logger = logging.getLogger("approvals.consumers")

CLOSE_NORMAL = 1000
CLOSE_INTERNAL_ERROR = 1011
CLOSE_UNAUTHORIZED = 4401
CLOSE_NOT_FOUND = 4404


def api_key_from_scope(scope: dict[str, Any]) -> str:
    """The API key from the handshake: Authorization header, then subprotocol, then `?api_key=`."""
    for name, value in scope.get("headers", []):
        if name.lower() == b"authorization":
            return bearer_token(value)
    for protocol in scope.get("subprotocols", []):
        if protocol.startswith(BEARER_SUBPROTOCOL_PREFIX):
            return protocol[len(BEARER_SUBPROTOCOL_PREFIX) :]
    query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
    return (query.get("api_key") or [""])[0]


def socket_message(state: ConfirmationState) -> dict[str, Any]:
    """What the socket pushes about one request: the API's view plus the approvals so far (a question:
    the questions API's view, docs/asking.md)."""
    if state.kind == "question":
        return selectors.question_as_dict(state)
    return {
        **selectors.confirmation_as_dict(state),
        "approvals_required": state.approvals_required,
        "approved_by": list(state.approved_by or ()),
    }


class ConfirmationConsumer(AsyncWebsocketConsumer):
    """Pushes one confirmation request's states to its agent, then closes."""

    # Not on the channel layer: wake-ups come from gateway_utils.realtime (PostgreSQL NOTIFY).
    channel_layer_alias = None

    agent_id: int | None = None
    confirmation_id: uuid.UUID | None = None
    watcher: asyncio.Task | None = None

    # Channels closes old DB connections before every handler and after a disconnect by
    # hopping onto the thread that serves Django's sync views. We never hold a connection
    # here (`approvals.waiting.db_call` gives it back at once), so these two overrides skip that hop.
    async def dispatch(self, message):
        handler = getattr(self, get_handler_name(message), None)
        if handler is None:
            raise ValueError(f"No handler for message type {message['type']}")
        await handler(message)

    async def websocket_disconnect(self, message):
        await self.disconnect(message.get("code"))
        raise StopConsumer()

    async def connect(self) -> None:
        subprotocol = SUBPROTOCOL if SUBPROTOCOL in self.scope.get("subprotocols", []) else None
        # Accept first, then close with a code: a refused handshake reaches the client as a
        # bare HTTP 403, which cannot say "bad key" from "no such request".
        await self.accept(subprotocol=subprotocol)
        agent_id = await agent_id_for_key(api_key_from_scope(self.scope))
        if agent_id is None:
            return await self.close(code=CLOSE_UNAUTHORIZED)
        try:
            self.confirmation_id = uuid.UUID(self.scope["url_route"]["kwargs"]["confirmation_id"])
        except ValueError:
            return await self.close(code=CLOSE_NOT_FOUND)
        self.agent_id = agent_id
        self.watcher = asyncio.create_task(self._watch_or_close(), name=f"ws-confirmation-{self.confirmation_id}")

    async def disconnect(self, code) -> None:
        if self.watcher is not None and not self.watcher.done():
            self.watcher.cancel()

    async def receive(self, text_data=None, bytes_data=None) -> None:
        """Nothing to say to us: the socket only pushes. Incoming frames are ignored."""

    async def _watch_or_close(self) -> None:
        try:
            await self._watch()
        except asyncio.CancelledError:
            raise
        except Exception:
            # Database gone, etc.: tell the client to reconnect rather than leave it hanging.
            logger.exception("websocket watcher for %s failed", self.confirmation_id)
            await self.close(code=CLOSE_INTERNAL_ERROR)

    async def _watch(self) -> None:
        """Send the state now and after every change; close after the final one.

        Every wake-up re-reads the request (NOTIFY is a hint); a state the
        client already has is not sent again.
        """
        states = confirmation_states(confirmation_id=self.confirmation_id, agent_id=self.agent_id, with_approvals=True)
        last_sent: dict[str, Any] | None = None
        async with contextlib.aclosing(states):
            async for state in states:
                message = socket_message(state)
                if message != last_sent:
                    await self.send(text_data=json.dumps(message))
                    last_sent = message
                if state.is_final:
                    return await self.close(code=CLOSE_NORMAL)
        if last_sent is None:  # nothing to watch: not a request of this agent's
            await self.close(code=CLOSE_NOT_FOUND)
