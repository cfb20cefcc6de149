"""The agent API's hot paths, served as coroutines in front of Django, and the bound on every body.

`AgentApiMiddleware` sits in front of Django's ASGI handler (`gateway.asgi`).
Every HTTP request passes its body gate first, before anything is looked up
or stored (docs/reference/api.md, "Limits"): a declared `Content-Length` over
GATEWAY_MAX_BODY_BYTES is a 413 at once, and a body without one (chunked) is
counted as it streams in and refused with a 413 the moment the count passes
the limit — whoever reads it, the hot path below or Django (whose own reading
is unbounded: it spools any body to a temporary file). Under `/api/` a body
that does not say it is JSON is a 415. Both answers close the connection: the
rest of the body is never read. It then serves two paths itself:

- `POST /api/v1/hooks/pre-tool-use` — every tool call of every agent. A
  well-formed request from a live key is served here, without Django's
  request cycle: the key's agent comes from the per-process cache
  (`approvals.caches`), the body is validated by the same DRF serializer, and
  `services.tool_call_pre` runs in a thread of its own pool (hooks may block).
  With `wait_seconds` > 0 a pending answer is held as a coroutine until the
  request is final or the time passes. Anything else — no key, an unknown or
  revoked one, a malformed or invalid body — goes to Django and DRF, which
  answer with the API's exact errors (`approvals.api.views.PreToolUseApi`).
- `GET /api/v1/confirmations/<id>/wait?timeout=N` — the long-poll.

Both wait on `approvals.waiting.wait_for_final`: no thread, no held database
connection per waiting agent.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import re
import uuid
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar
from urllib.parse import parse_qs

import orjson
from asgiref.sync import sync_to_async
from django.conf import settings

from approvals import selectors, services
from approvals.api.auth import bearer_token
from approvals.api.errors import RETRY_AFTER_SECONDS, database_unavailable_body, error_body, is_database_unavailable
from approvals.api.parsing import JSON_MEDIA_TYPES, YAML_MEDIA_TYPES, json_loads, media_type
from approvals.api.views import PreToolUseApi
from approvals.caches import KeyHolder, StaleCache, cache
from approvals.errors import GatewayError, InvalidInput, PayloadTooLarge, UnsupportedMediaType
from approvals.models import Agent, ApiKey
from approvals.types import IDEMPOTENT_REPLAY, ConfirmationState, PreToolUseAnswer
from approvals.waiting import agent_id_for_key, connection_given_back, db_call, parse_timeout, wait_for_final
from gateway_client.claude_code import blocked_output
from gateway_utils import logs, tracing, whole_response
from gateway_utils.realtime import waiters
from hooks.state import session_changed

logger = logging.getLogger("approvals.api")
R = TypeVar("R")

WAIT_PATH = re.compile(r"^/api/v1/(?P<what>confirmations|questions)/(?P<id>[^/]+)/wait/?$")
QUESTIONS_PATH = re.compile(r"^/api/v1/questions/?$")
CLAUDE_CODE_PATH = re.compile(r"^/api/v1/claude-code/hooks/?$")
PRE_TOOL_USE_PATH = re.compile(r"^/api/v1/hooks/pre-tool-use/?$")
API_PREFIX = "/api/"
BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})
# The bodies API routes take: JSON, and a config file to validate may be YAML too (docs/policies.md).
BODY_MEDIA_TYPES = {"/api/v1/config/validate": JSON_MEDIA_TYPES | YAML_MEDIA_TYPES}


def final_answer(confirmation: ConfirmationState, pending_answer: dict[str, Any]) -> dict[str, Any]:
    """The final pre-tool-use answer, built from the state the waiter has (no query) and the pending
    answer of a first ask, whose `tool_args` are the hooks' own (a repeat ask's are rebuilt from what
    was stored, so a held repeat ask is answered by asking again: `is_replay`)."""
    final = selectors.answer_for_confirmation(confirmation, tool_args=pending_answer.get("tool_args") or {})
    # The approver may have edited the arguments: the agent runs what was approved.
    return {**pending_answer, "decision": final.decision, "reason": final.reason, "tool_args": final.tool_args}


def is_replay(answer: dict[str, Any]) -> bool:
    """An answer to a repeat ask (its idempotency key was seen before)."""
    return IDEMPOTENT_REPLAY in (answer.get("side_effects") or ())


# Tool calls run here: hooks may block (a command, a webhook), so not on the event loop, and not
# in the waiters' small read pool either.
_CALL_THREADS = 8
_call_executor = ThreadPoolExecutor(max_workers=_CALL_THREADS, thread_name_prefix="gateway-call")


@functools.cache
def in_call_thread(fn: Callable[..., R]) -> Callable[..., Awaitable[R]]:
    """`fn` run in the tool-call pool; its database connection goes back to the pool afterwards."""
    return sync_to_async(connection_given_back(fn), thread_sensitive=False, executor=_call_executor)


def _ask(holder: KeyHolder, validated: dict[str, Any], fingerprint: str) -> PreToolUseAnswer:
    """What PreToolUseApi does once DRF has authenticated and validated: record use of the key, ask."""
    services.api_key_touch_by_id(key_id=holder.key_id)
    agent = Agent(
        pk=holder.agent_id, name=holder.agent_name, read_only=holder.agent_read_only, generation=holder.generation,
        team_id=holder.agent_team_id,  # (given: the field's default would read the default team on every call)
    )  # fmt: skip
    return services.tool_call_pre(
        served_under=holder.generation,
        agent=agent,
        session_id=validated["session_id"],
        tool_name=validated["tool_name"],
        tool_args=validated["tool_args"],
        tool_call_id=validated["tool_call_id"],
        user_id=validated["user_id"],
        metadata=validated["metadata"],
        idempotency_key=validated["idempotency_key"],
        callback_url=validated["callback_url"],
        fingerprint=fingerprint,
        turn_id=validated["turn_id"],
    )


def _holder(raw_key: str) -> KeyHolder | None:
    return selectors.key_holder(raw_key=raw_key)


class AgentApiMiddleware:
    """ASGI middleware: bounds every HTTP request's body, serves the agent API's hot paths as coroutines,
    and hands the rest to Django."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        # Every line logged while serving it names the request (Django's threads copy the context).
        token = logs.bind(request_id=logs.request_id(_header(scope, b"x-request-id")))
        try:
            return await self._serve(scope, receive, send)
        finally:
            logs.unbind(token)

    async def _serve(self, scope, receive, send):
        refused = body_refusal(scope)
        if refused is not None:
            return await _send_refusal(send, refused, scope)
        receive = bounded_receive(receive, settings.GATEWAY_MAX_BODY_BYTES)
        path, method = scope["path"], scope["method"]
        match = WAIT_PATH.match(path) if method == "GET" else None
        route = "wait" if match else None
        if method == "POST":  # (pre-tool-use first: it is the hot path)
            route = "ask" if PRE_TOOL_USE_PATH.match(path) else "question" if QUESTIONS_PATH.match(path) else None
        if route is not None:
            try:
                if match:
                    return await self._wait(scope, send, match.group("id"), question=match.group("what") == "questions")
                if route == "question":
                    return await self._question(scope, receive, send)
                return await self._pre_tool_use(scope, receive, send)
            except PayloadTooLarge as exc:
                return await _send_refusal(send, exc, scope)
            except Exception as exc:  # e.g. the database unreachable: still the API's error shape
                if is_database_unavailable(exc):
                    logger.warning("%s %s: the database is unavailable (%s)", method, path, exc)
                    return await _send_unavailable(send)
                logger.exception("%s %s failed", method, path)
                return await _send_json(send, 500, error_body("internal_error", "the gateway failed; see its log"))
        try:
            return await self.app(scope, receive, send)
        except PayloadTooLarge as exc:  # Django reads the whole body before anything else: nothing was sent
            return await _send_refusal(send, exc, scope)

    async def _wait(self, scope, send, raw_id: str, *, question: bool = False) -> None:
        raw_key = bearer_token(_header(scope, b"authorization"))
        if not raw_key:
            return await _send_json(send, 401, error_body("unauthorized", "missing 'Authorization: Bearer <api key>'"))
        agent_id = await agent_id_for_key(raw_key)
        if agent_id is None:
            return await _send_json(send, 401, error_body("unauthorized", "unknown or revoked API key"))
        what = "question" if question else "confirmation request"
        try:
            confirmation_id = uuid.UUID(raw_id)
        except ValueError:
            return await _send_json(send, 404, error_body("not_found", f"no {what} {raw_id!r}"))
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
        try:
            timeout = parse_timeout((query.get("timeout") or [None])[0])
        except InvalidInput as exc:
            return await _send_json(send, 400, error_body(exc.code, exc.message, exc.details))
        url = selectors.confirmation_url(str(confirmation_id))  # (made now: not in the burst of answers)
        with tracing.span(
            "wait_confirmation",
            kind="server",
            context=tracing.extract(scope.get("headers", ())),
            attributes={"gateway.confirmation.id": str(confirmation_id)},
        ):
            confirmation = await wait_for_final(confirmation_id=confirmation_id, agent_id=agent_id, timeout=timeout)
        if confirmation is None or (confirmation.kind == "question") != question:
            return await _send_json(send, 404, error_body("not_found", f"no {what} {raw_id}"))
        # Built from the state the waiter has: no query, so it runs on the event loop.
        as_dict = selectors.question_as_dict if question else selectors.confirmation_as_dict
        await _send_json(send, 200, as_dict(confirmation, url=url), scope=scope)

    async def _question(self, scope, receive, send) -> None:
        """POST /api/v1/questions: Django and DRF create the question; with `wait_seconds` the answer is
        then held here, as a coroutine, until the question is final or the time is up (docs/asking.md)."""
        body = await _read_body(receive)
        wait_seconds = _wait_seconds_of(body)
        replay = _replay_receive(body)
        if not wait_seconds:
            return await self.app(scope, replay, send)
        captured = _CapturedResponse()
        await self.app(scope, replay, captured.send)
        answer = captured.json()
        if captured.status != 201 or answer is None or answer.get("status") != "pending":
            return await captured.forward(send)
        agent_id = await agent_id_for_key(bearer_token(_header(scope, b"authorization")))
        if agent_id is None:
            return await captured.forward(send)
        state = await wait_for_final(confirmation_id=answer["id"], agent_id=agent_id, timeout=wait_seconds)
        if state is None or not state.is_final:
            return await captured.forward(send)
        await _send_json(send, 201, selectors.question_as_dict(state), scope=scope)

    async def _pre_tool_use(self, scope, receive, send) -> None:
        body = await _read_body(receive)
        if not tracing.active():
            return await self._ask(scope, body, send)
        data = _json_object(body)
        with tracing.tool_span(
            tool_name=_text(data.get("tool_name")),
            tool_call_id=_text(data.get("tool_call_id")),
            session_id=_text(data.get("session_id")),
            context=tracing.extract(scope.get("headers", ())),
        ):
            return await self._ask(scope, body, send)

    async def _ask(self, scope, body: bytes, send) -> None:
        if await serve_pre_tool_use(scope, body, send):
            return
        # No key, an unknown or revoked one, a malformed or invalid body: Django and DRF answer,
        # with the API's exact errors (and wait, if asked, as below).
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
            confirmation_id=answer["confirmation_id"], agent_id=agent_id, timeout=wait_seconds, via="pre_tool_use"
        )
        if confirmation is None or not confirmation.is_final:
            return await captured.forward(send)
        if is_replay(answer):  # the repeat ask, asked again now that it is final
            final = _CapturedResponse()
            await self.app(scope, _replay_receive(body), final.send)
            return await final.forward(send)
        answered = final_answer(confirmation, answer)
        tracing.annotate({"gateway.decision": answered["decision"]})
        await _send_json(send, 200, answered, scope=scope)


async def serve_pre_tool_use(scope, body: bytes, send) -> bool:
    """Serve a well-formed pre-tool-use from a live key; False (nothing sent) for anything else."""
    waiters.ensure_listener()  # the caches serve only while this process hears changes
    raw_key = bearer_token(_header(scope, b"authorization"))
    if not raw_key:
        return False
    holder = cache.peek_key_holder(ApiKey.hash_key(raw_key)) or await db_call(_holder)(raw_key)
    if holder is None:
        return False
    try:
        data = json_loads(body)
    except ValueError:
        return False  # Django answers with what is wrong (400 `malformed`)
    if not isinstance(data, dict):
        return False
    serializer = PreToolUseApi.InputSerializer(data=data)
    if not serializer.is_valid():
        return False
    validated = serializer.validated_data
    fingerprint = services.request_fingerprint(data)
    try:
        answer = await in_call_thread(_ask)(holder, validated, fingerprint)
        result = answer.as_dict()
        if result["decision"] == "pending" and validated["wait_seconds"] > 0:
            state = await wait_for_final(
                confirmation_id=answer.confirmation_id,
                agent_id=holder.agent_id,
                timeout=validated["wait_seconds"],
                via="pre_tool_use",
            )
            if state is not None and state.is_final and is_replay(result):
                # The repeat ask, asked again now that it is final: it rebuilds the arguments to run
                # (and writes nothing, so it cannot meet a stale cache).
                result = (await in_call_thread(_ask)(holder, validated, fingerprint)).as_dict()
            elif state is not None and state.is_final:
                result = final_answer(state, result)
    except StaleCache:
        # A change committed that this process has not heard of yet: forget what the call read.
        cache.forget(f"agent:{holder.agent_id}")
        cache.forget(session_changed(holder.agent_name, validated["session_id"]))
        return False  # served afresh by Django, which reads the key and the agent from the database
    except GatewayError as exc:
        await _send_json(send, exc.status, error_body(exc.code, exc.message, exc.details))
        return True
    except Exception as exc:
        if is_database_unavailable(exc):
            logger.warning("pre-tool-use for agent %s: the database is unavailable (%s)", holder.agent_name, exc)
            await _send_unavailable(send)
            return True
        logger.exception("pre-tool-use failed for agent %s", holder.agent_name)
        await _send_json(send, 500, error_body("internal_error", "the gateway failed while deciding; see its log"))
        return True
    tracing.annotate({"gateway.decision": result["decision"]})  # the final one, if it was waited for
    await _send_json(send, 200, result, scope=scope)
    return True


def _json_object(body: bytes) -> dict[str, Any]:
    try:
        data = json_loads(body)
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _wait_seconds_of(body: bytes) -> float:
    """`wait_seconds` if the body is a JSON object with a sane positive number; else 0 (Django validates)."""
    try:
        data = json_loads(body)
    except ValueError:
        return 0
    value = data.get("wait_seconds") if isinstance(data, dict) else None
    if isinstance(value, float) and value.is_integer():
        value = int(value)  # 5.0 is the integer 5, as the view reads it too
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        return 0
    return min(value, settings.GATEWAY_WAIT_MAX_SECONDS)


def _header(scope, name: bytes) -> str:
    for key, value in scope.get("headers", []):
        if key.lower() == name:
            return value.decode("latin-1")
    return ""


def body_refusal(scope) -> GatewayError | None:
    """Why this request's body is refused before a byte of it is read, or None: a declared length over
    the limit (413), or under `/api/` a body that is not of a media type its route takes (415)."""
    length, content_type, chunked = None, None, False
    for key, value in scope.get("headers", ()):
        key = key.lower()
        if key == b"content-length":
            length = int(value) if value.isdigit() else None  # the server has refused a bad one already
        elif key == b"content-type":
            content_type = value.decode("latin-1")
        elif key == b"transfer-encoding":
            chunked = True
    limit = settings.GATEWAY_MAX_BODY_BYTES
    if length is not None and length > limit:
        return PayloadTooLarge(
            f"the body is {length} bytes; the gateway reads at most {limit} (GATEWAY_MAX_BODY_BYTES)",
            details={"max_bytes": limit},
        )
    path = scope["path"]
    if CLAUDE_CODE_PATH.match(path):
        return None  # whatever Claude Code says its body is: the view reads it, and blocks if it cannot
    if path.startswith(API_PREFIX) and scope["method"] in BODY_METHODS and (chunked or length):
        accepted = BODY_MEDIA_TYPES.get(path.rstrip("/"), JSON_MEDIA_TYPES)
        if content_type is None or media_type(content_type) not in accepted:
            return UnsupportedMediaType(
                f"the body must be sent as {' or '.join(sorted(accepted))}, not "
                + (repr(content_type) if content_type is not None else "without a Content-Type"),
                details={"accepted": sorted(accepted)},
            )
    return None


def bounded_receive(receive, limit: int):
    """`receive`, counting the body as it streams in: PayloadTooLarge the moment it passes `limit` bytes."""
    received = 0

    async def bounded():
        nonlocal received
        message = await receive()
        received += len(message.get("body", b""))
        if received > limit:
            raise PayloadTooLarge(
                f"the body is over {limit} bytes (GATEWAY_MAX_BODY_BYTES); the rest was not read",
                details={"max_bytes": limit},
            )
        return message

    return bounded


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


_JSON = (b"content-type", b"application/json")


async def _send_json(
    send,
    status: int,
    data: dict[str, Any],
    *,
    close: bool = False,
    extra: list[tuple[bytes, bytes]] = (),
    scope: dict[str, Any] | None = None,
) -> None:
    """`data` as the JSON answer; given the request's `scope`, in ONE message where the server offers that
    (`gateway_utils.whole_response`: the answers ten thousand woken waiters get one after another)."""
    body = json_body(data)
    headers = [_JSON, *extra]
    if close:
        headers.append((b"connection", b"close"))
    if scope is not None and whole_response.offered(scope):
        start = {"type": "http.response.start", "status": status, "headers": headers, whole_response.BODY: body}
        return await send(start)
    headers.insert(1, (b"content-length", b"%d" % len(body)))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def json_body(data: dict[str, Any]) -> bytes:
    """An answer's JSON as DRF's renderer writes it (compact, UTF-8), made by orjson: one call, ~10x
    `json.dumps` (ten thousand woken waiters are answered one after another). What orjson does not write
    (an integer past 64 bits, a key that is not text) is written by `json.dumps`."""
    try:
        return orjson.dumps(data)
    except TypeError:
        return json.dumps(data, separators=(",", ":"), ensure_ascii=False).encode()


async def _send_unavailable(send) -> None:
    """503 database_unavailable with Retry-After: nothing was decided; the same request may be sent again."""
    await _send_json(send, 503, database_unavailable_body(), extra=[(b"retry-after", str(RETRY_AFTER_SECONDS).encode())])


async def _send_refusal(send, refused: GatewayError, scope) -> None:
    """A refused body's answer; the connection closes after it, as the rest of the body is never read.

    To Claude Code's http hook it is a 200 that blocks the call: Claude Code runs a call whose hook
    answered 4xx (approvals.api.claude_code)."""
    if CLAUDE_CODE_PATH.match(scope["path"]):
        await _send_json(send, 200, blocked_output(f"approval gateway: {refused.message}"), close=True)
        return
    await _send_json(send, refused.status, error_body(refused.code, refused.message, refused.details), close=True)
