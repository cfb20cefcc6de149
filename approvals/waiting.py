"""Waiting for a decision without holding a thread or a database connection.

`WaitingMiddleware` sits in front of Django's ASGI handler and serves two paths
itself:

- `GET /api/v1/confirmations/<id>/wait?timeout=N` — the long-poll;
- `POST /api/v1/hooks/pre-tool-use` with `wait_seconds` > 0 — Django answers
  first (in its own thread, which is released at once); if the answer is
  `pending`, the middleware holds the HTTP request as a coroutine until the
  request is final or `wait_seconds` pass, then answers with the final decision.

A waiter is one future in `gateway.realtime.waiters` and one timer (its timeout
or the request's deadline); database reads borrow a connection from a small
executor and return it immediately. Lost notifications are caught by one
batched re-check per process every GATEWAY_WAIT_RECHECK_SECONDS.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import re
import uuid
import weakref
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from urllib.parse import parse_qs

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import connection

from approvals.api.auth import bearer_token
from approvals.api.errors import error_body
from approvals.errors import InvalidInput
from gateway.realtime import waiters

logger = logging.getLogger("approvals.waiting")

WAIT_PATH = re.compile(r"^/api/v1/confirmations/(?P<id>[^/]+)/wait/?$")
PRE_TOOL_USE_PATH = re.compile(r"^/api/v1/hooks/pre-tool-use/?$")
DEFAULT_TIMEOUT = 25
POLL_INTERVAL_WITHOUT_PUSH = 0.2  # SQLite: no NOTIFY, so waiters poll
RECHECK_BATCH = 1000  # ids per re-check query

# Short database reads for waiters: a few threads shared by every waiter.
_DB_THREADS = 4
_db_executor = ThreadPoolExecutor(max_workers=_DB_THREADS, thread_name_prefix="gateway-wait-db")
# Reads beyond what the threads can take wait here as one small future each, not as
# a queued executor job each: a burst of 10,000 arriving waiters otherwise holds
# 10,000 jobs at once and leaves the heap fragmented long after (bench/run.py part b).
_db_slots: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = weakref.WeakKeyDictionary()


@functools.cache
def _db(fn):
    """Run a short ORM read off the event loop and give the connection back at once."""

    def call(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        finally:
            connection.close()  # with the psycopg pool: back to the pool

    run = sync_to_async(call, thread_sensitive=False, executor=_db_executor)

    async def bounded(*args, **kwargs):
        loop = asyncio.get_running_loop()
        slots = _db_slots.get(loop)
        if slots is None:
            slots = _db_slots[loop] = asyncio.Semaphore(2 * _DB_THREADS)
        async with slots:
            return await run(*args, **kwargs)

    return bounded


def parse_timeout(raw: str | None) -> float:
    if raw in (None, ""):
        return DEFAULT_TIMEOUT
    try:
        value = float(raw)
    except ValueError:
        raise InvalidInput("timeout must be a number of seconds", details={"timeout": [f"not a number: {raw!r}"]}) from None
    if value < 0 or value > settings.GATEWAY_WAIT_MAX_SECONDS:
        raise InvalidInput(
            f"timeout must be between 0 and {settings.GATEWAY_WAIT_MAX_SECONDS}",
            details={"timeout": ["out of range"]},
        )
    return value


def _read_confirmation(confirmation_id: Any, agent_id: int):
    from approvals.models import ConfirmationRequest

    return ConfirmationRequest.objects.select_related("agent").filter(pk=confirmation_id, agent_id=agent_id).first()


def _expire(confirmation_id: Any) -> None:
    from approvals import services

    services.confirmation_expire(confirmation_id=confirmation_id)


def _settled_ids(ids: list[str]) -> list[str]:
    """Of these request ids, the ones no longer pending."""
    from approvals.models import ConfirmationRequest, Status

    rows = ConfirmationRequest.objects.filter(pk__in=ids).exclude(status=Status.PENDING).values_list("pk", flat=True)
    return [str(pk) for pk in rows]


async def _recheck_forever(interval: float) -> None:
    """The safety net for lost notifications: every `interval`, ONE query per batch of
    waited-on ids wakes those no longer pending. (A re-read per waiter instead costs
    10,000 waiters / 5 s = 2,000 queries/s, and keeps thousands of reads in flight.)"""
    while True:
        await asyncio.sleep(interval)
        try:
            ids = [i for i in waiters.registered_ids() if _is_uuid(i)]
            for start in range(0, len(ids), RECHECK_BATCH):
                for confirmation_id in await _db(_settled_ids)(ids[start : start + RECHECK_BATCH]):
                    waiters.wake(confirmation_id)
        except Exception:  # database briefly gone: try again next time
            logger.warning("re-checking waiters failed", exc_info=True)


def _is_uuid(value: str) -> bool:
    try:
        uuid.UUID(value)
    except ValueError:
        return False
    return True


_rechecker: asyncio.Task | None = None


def _ensure_rechecker() -> None:
    """One re-check task per process and event loop, started by the first waiter."""
    global _rechecker
    loop = asyncio.get_running_loop()
    if _rechecker is None or _rechecker.done() or _rechecker.get_loop() is not loop:
        interval = settings.GATEWAY_WAIT_RECHECK_SECONDS if waiters.push_enabled else POLL_INTERVAL_WITHOUT_PUSH
        _rechecker = loop.create_task(_recheck_forever(interval), name="gateway-wait-recheck")


async def wait_for_final(*, confirmation_id: Any, agent_id: int, timeout: float):
    """Wait until the request is final or `timeout` passes; the row as last read (None if gone).

    Registers before the first read (closing the read/commit race), re-reads on
    every wake-up (a notification, or the batched re-check in case one was lost),
    and expires the request itself when its deadline passes.
    """
    from django.utils import timezone

    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    _ensure_rechecker()
    future = waiters.register(str(confirmation_id))
    try:
        while True:
            confirmation = await _db(_read_confirmation)(confirmation_id, agent_id)
            if confirmation is None or confirmation.is_final:
                return confirmation
            step = deadline - loop.time()
            if confirmation.expires_at is not None:
                until_expiry = (confirmation.expires_at - timezone.now()).total_seconds()
                if until_expiry <= 0:
                    await _db(_expire)(confirmation.pk)
                    continue
                step = min(step, until_expiry + 0.01)
            if step <= 0:
                return confirmation
            # While parked, hold nothing but the future and one timer (for the timeout or
            # the request's deadline): every byte here is multiplied by the number of
            # waiting agents (bench/run.py part b). Each turn re-reads the row anyway.
            del confirmation
            timer = loop.call_later(step, _resolve, future)
            try:
                await future
            finally:
                timer.cancel()
            if future.done():
                waiters.unregister(str(confirmation_id), future)
                future = waiters.register(str(confirmation_id))
    finally:
        waiters.unregister(str(confirmation_id), future)


def _resolve(future: asyncio.Future[None]) -> None:
    """A waiter's own timer: wake it as a notification would."""
    if not future.done():
        future.set_result(None)


def _agent_id_for_key(raw_key: str) -> int | None:
    """The id of the agent owning a live API key (an id, not a row: waiters keep it for their whole wait)."""
    from approvals import selectors

    key = selectors.api_key_lookup(raw_key=raw_key)
    return key.agent_id if key else None


def _confirmation_dict(confirmation) -> dict[str, Any]:
    """Built from the row already read: no query, so it runs on the event loop."""
    from approvals import selectors

    return selectors.confirmation_as_dict(confirmation)


def _final_answer(confirmation, pending_answer: dict[str, Any]) -> dict[str, Any]:
    """The final pre-tool-use answer from the row already read (no query)."""
    from approvals import selectors

    final = selectors.answer_for_confirmation(confirmation, tool_args=pending_answer.get("tool_args") or {})
    return {
        **pending_answer,
        "decision": final.decision,
        "reason": final.reason,
    }


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
        agent_id = await _db(_agent_id_for_key)(raw_key)
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
        await _send_json(send, 200, _confirmation_dict(confirmation))

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
        raw_key = bearer_token(_header(scope, b"authorization"))
        agent_id = await _db(_agent_id_for_key)(raw_key)
        confirmation = await wait_for_final(
            confirmation_id=answer["confirmation_id"], agent_id=agent_id, timeout=wait_seconds
        )
        if confirmation is None or not confirmation.is_final:
            return await captured.forward(send)
        await _send_json(send, 200, _final_answer(confirmation, answer))


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
