"""The waiting HTTP paths, served as coroutines in front of Django.

`WaitingMiddleware` sits in front of Django's ASGI handler (`gateway.asgi`) and
serves two paths itself:

- `GET /api/v1/confirmations/<id>/wait?timeout=N` — the long-poll;
- `POST /api/v1/hooks/pre-tool-use` with `wait_seconds` > 0 — Django answers
  first (in its own thread, which is released at once); if the answer is
  `pending`, the middleware holds the HTTP request as a coroutine until the
  request is final or `wait_seconds` pass, then answers with the final decision.

Both wait on `approvals.waiting.wait_for_final`: no thread, no held database
connection per waiting agent.
"""

from __future__ import annotations

import asyncio
import json
import re
import uuid
from typing import Any
from urllib.parse import parse_qs

from django.conf import settings

from approvals import selectors
from approvals.api.auth import bearer_token
from approvals.api.errors import error_body
from approvals.errors import InvalidInput
from approvals.types import ConfirmationState
from approvals.waiting import agent_id_for_key, parse_timeout, wait_for_final

WAIT_PATH = re.compile(r"^/api/v1/confirmations/(?P<id>[^/]+)/wait/?$")
PRE_TOOL_USE_PATH = re.compile(r"^/api/v1/hooks/pre-tool-use/?$")


def final_answer(confirmation: ConfirmationState, pending_answer: dict[str, Any]) -> dict[str, Any]:
    """The final pre-tool-use answer, built from the state the waiter has (no query) and the pending answer."""
    final = selectors.answer_for_confirmation(confirmation, tool_args=pending_answer.get("tool_args") or {})
    # The approver may have edited the arguments: the agent runs what was approved.
    return {**pending_answer, "decision": final.decision, "reason": final.reason, "tool_args": final.tool_args}


class WaitingMiddleware:
    """ASGI middleware: serves the waiting paths as coroutines, the rest goes to Django."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http":
            path = scope["path"]
            match = WAIT_PATH.match(path)
            if match and scope["method"] == "GET":
                return await self._wait(scope, send, match.group("id"))
            if PRE_TOOL_USE_PATH.match(path) and scope["method"] == "POST":
                return await self._pre_tool_use(scope, receive, send)
        return await self.app(scope, receive, send)

    async def _wait(self, scope, send, raw_id: str) -> None:
        raw_key = bearer_token(_header(scope, b"authorization"))
        if not raw_key:
            return await _send_json(send, 401, error_body("unauthorized", "missing 'Authorization: Bearer <api key>'"))
        agent_id = await agent_id_for_key(raw_key)
        if agent_id is None:
            return await _send_json(send, 401, error_body("unauthorized", "unknown or revoked API key"))
        try:
            confirmation_id = uuid.UUID(raw_id)
        except ValueError:
            return await _send_json(send, 404, error_body("not_found", f"no confirmation request {raw_id!r}"))
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
        try:
            timeout = parse_timeout((query.get("timeout") or [None])[0])
        except InvalidInput as exc:
            return await _send_json(send, 400, error_body(exc.code, exc.message, exc.details))
        confirmation = await wait_for_final(confirmation_id=confirmation_id, agent_id=agent_id, timeout=timeout)
        if confirmation is None:
            return await _send_json(send, 404, error_body("not_found", f"no confirmation request {raw_id}"))
        # Built from the state the waiter has: no query, so it runs on the event loop.
        await _send_json(send, 200, selectors.confirmation_as_dict(confirmation))

    async def _pre_tool_use(self, scope, receive, send) -> None:
        body = await _read_body(receive)
        wait_seconds = _wait_seconds_of(body)
        replay = _replay_receive(body)
        if not wait_seconds:
            return await self.app(scope, replay, send)
        captured = _CapturedResponse()
        await self.app(scope, replay, captured.send)
        answer = captured.json()
        if captured.status != 200 or answer is None or answer.get("decision") != "pending":
            return await captured.forward(send)
        agent_id = await agent_id_for_key(bearer_token(_header(scope, b"authorization")))
        if agent_id is None:  # Django answered, so the key was good a moment ago: it was revoked since
            return await captured.forward(send)
        confirmation = await wait_for_final(
            confirmation_id=answer["confirmation_id"], agent_id=agent_id, timeout=wait_seconds
        )
        if confirmation is None or not confirmation.is_final:
            return await captured.forward(send)
        await _send_json(send, 200, final_answer(confirmation, answer))


def _wait_seconds_of(body: bytes) -> float:
    """`wait_seconds` if the body is a JSON object with a sane positive number; else 0 (Django validates)."""
    try:
        data = json.loads(body)
    except ValueError:
        return 0
    value = data.get("wait_seconds") if isinstance(data, dict) else None
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        return 0
    return min(value, settings.GATEWAY_WAIT_MAX_SECONDS)


def _header(scope, name: bytes) -> str:
    for key, value in scope.get("headers", []):
        if key.lower() == name:
            return value.decode("latin-1")
    return ""


async def _read_body(receive) -> bytes:
    chunks = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            break
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            break
    return b"".join(chunks)


def _replay_receive(body: bytes):
    sent = False

    async def receive():
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        await asyncio.Event().wait()  # like a client that stays connected

    return receive


class _CapturedResponse:
    def __init__(self) -> None:
        self.status = 500
        self.headers: list[tuple[bytes, bytes]] = []
        self.body = bytearray()

    async def send(self, message) -> None:
        if message["type"] == "http.response.start":
            self.status = message["status"]
            self.headers = list(message.get("headers", []))
        elif message["type"] == "http.response.body":
            self.body.extend(message.get("body", b""))

    def json(self) -> dict[str, Any] | None:
        try:
            data = json.loads(self.body)
        except ValueError:
            return None
        return data if isinstance(data, dict) else None

    async def forward(self, send) -> None:
        await send({"type": "http.response.start", "status": self.status, "headers": self.headers})
        await send({"type": "http.response.body", "body": bytes(self.body)})


async def _send_json(send, status: int, data: dict[str, Any]) -> None:
    body = json.dumps(data).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})
