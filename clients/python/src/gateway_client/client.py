"""`GatewayClient` and `AsyncGatewayClient`: the agent API (docs/reference/api.md) from Python.

Both clients have the same methods; the async one returns awaitables::

    client = GatewayClient("http://127.0.0.1:8000", api_key, max_wait=600)
    decision = client.pre_tool_use("session-1", "oa__purchase_pay", {"amount": 80000})
    if decision.allowed:
        pay(**decision.tool_args)          # the gateway may have rewritten the arguments
    else:
        print("refused:", decision.reason)

`pre_tool_use` returns the *final* decision. It asks with `wait_seconds` (one
long-poll round), then long-polls `/confirmations/<id>/wait` round after round
until a human decides or the client's own deadline (`max_wait`) passes. Network
errors and gateway restarts are retried with backoff (tenacity) for up to
`reconnect_for` seconds per outage; every ask carries an idempotency key (one
is generated when you give none), so a retry after a lost response finds the
same request instead of making a second one.

It fails closed: when the gateway cannot be reached the decision is `deny`
(`decision.unreachable` is true), unless the client was made with
`fail_open=True`, which then answers `allow` with the original arguments —
but only if the gateway never answered: once it has asked a human, losing
the gateway denies even with `fail_open`.
A request still pending at the deadline is always denied
(`decision.still_pending`); it stays pending in the gateway, and asking again
with `decision.idempotency_key` picks up a decision that arrives later.

Answers other than 2xx raise `GatewayAPIError` subclasses carrying the
contract's `code`, `message` and `details`.

Every request names this client in its User-Agent (`approval-gateway-client/0.4.0 (python)`); a
gateway that names a version older than `MIN_GATEWAY_VERSION` in its `X-Gateway-Version` header is
refused with `GatewayTooOld` (gateway_client/version.py).
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, Generic, Literal, TypeVar

import httpx
from tenacity import AsyncRetrying, Retrying

from gateway_client.decisions import Answer, Decision
from gateway_client.errors import (
    AlreadyDecided,
    Conflict,
    Forbidden,
    GatewayAPIError,
    GatewayClientError,
    GatewayTooOld,
    GatewayUnavailable,
    IdempotencyKeyReused,
    InvalidRequest,
    NoAnswer,
    NotFound,
    ServerError,
    ToolDenied,
    Unauthorized,
    api_error,
)
from gateway_client.flows import API_PREFIX, AskFlow, Call, Flow, PreToolUseFlow, canonical_json, drop_none, single
from gateway_client.sending import parse, retry_options, unavailable
from gateway_client.version import USER_AGENT

try:  # the agent's own OpenTelemetry, if it has one: the gateway's spans continue its trace
    from opentelemetry import propagate as _propagate
except ImportError:  # pragma: no cover - the client needs only httpx
    _propagate = None

__all__ = [  # what `gateway_client.client` has always offered; the errors and answers now live beside it
    "API_PREFIX", "DEFAULT_LONG_POLL", "DEFAULT_RECONNECT_FOR", "DEFAULT_TIMEOUT", "USER_AGENT",
    "AlreadyDecided", "Answer", "AsyncGatewayClient", "Conflict", "Decision", "Forbidden", "GatewayAPIError",
    "GatewayClient", "GatewayClientError", "GatewayTooOld", "GatewayUnavailable", "IdempotencyKeyReused",
    "InvalidRequest", "NoAnswer", "NotFound", "ServerError", "ToolDenied", "Unauthorized", "api_error",
    "canonical_json", "trace_headers",
]  # fmt: skip

DEFAULT_TIMEOUT = 10.0  # seconds for one request that the gateway does not hold
DEFAULT_LONG_POLL = 25  # seconds the gateway holds one waiting request (its maximum is 60)
DEFAULT_RECONNECT_FOR = 30.0  # seconds an outage is tolerated before giving up


def trace_headers() -> dict[str, str]:
    """The W3C trace context (`traceparent`, `tracestate`) every request carries: the agent's current
    OpenTelemetry span if it has one, else `TRACEPARENT` / `TRACESTATE` from the environment (how a
    parent process hands its trace to a command such as the Claude Code hook). Empty when neither."""
    headers: dict[str, str] = {}
    if _propagate is not None:
        _propagate.inject(headers)
    if "traceparent" not in headers and os.environ.get("TRACEPARENT"):
        headers["traceparent"] = os.environ["TRACEPARENT"]
        if os.environ.get("TRACESTATE"):
            headers["tracestate"] = os.environ["TRACESTATE"]
    return headers


# --------------------------------------------------------------------------- the clients

_D = TypeVar("_D")  # what a method returns: the value (sync) or an awaitable of it (async)
_R = TypeVar("_R")


class _BaseClient(Generic[_D, _R]):
    """Every operation of the agent API, written once; subclasses perform the calls."""

    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        fail_open: bool = False,
        max_wait: float | None = None,
        reconnect_for: float = DEFAULT_RECONNECT_FOR,
        long_poll: float = DEFAULT_LONG_POLL,
    ):
        """
        base_url: the gateway, e.g. `http://127.0.0.1:8000`.
        api_key: the agent's key (`manage.py create_api_key AGENT`).
        timeout: seconds for one request the gateway does not hold.
        fail_open: when the gateway cannot be reached (before it asked a human), allow instead of deny.
        max_wait: default deadline of `pre_tool_use`, in seconds (None: wait until
            the request is decided or expires in the gateway).
        reconnect_for: seconds an outage (network error, restart, 5xx) is retried.
        long_poll: seconds the gateway holds one waiting request (at most 60).
        """
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self.fail_open = fail_open
        self.max_wait = max_wait
        self.reconnect_for = reconnect_for
        self.long_poll = long_poll
        self._headers = {"Authorization": f"Bearer {api_key}", "User-Agent": USER_AGENT}

    _http: Any  # httpx.Client or httpx.AsyncClient

    def _drive(self, flow: Flow, deadline: float | None = None) -> Any:
        raise NotImplementedError

    def _timeout(self, call: Call) -> httpx.Timeout:
        return httpx.Timeout(self.timeout, read=self.timeout + call.hold)

    def _http_options(self) -> dict[str, Any]:
        return {"base_url": self.base_url, "headers": self._headers, "timeout": self.timeout}

    def _request(self, call: Call) -> httpx.Request:
        return self._http.build_request(
            call.method,
            call.path,
            json=call.json,
            params=call.params,
            timeout=self._timeout(call),
            headers=trace_headers() or None,
        )

    # -- pre-tool-use -----------------------------------------------------------

    def pre_tool_use(
        self,
        session_id: str,
        tool_name: str,
        tool_args: dict[str, Any] | None = None,
        *,
        tool_call_id: str | None = None,
        user_id: str | None = None,
        metadata: dict[str, Any] | None = None,
        idempotency_key: str | None = None,
        callback_url: str | None = None,
        max_wait: float | None = None,
        on_pending: Callable[[dict[str, Any]], None] | None = None,
        turn_id: str | None = None,
    ) -> _R:
        """Ask before a tool call; returns the final `Decision` (allow / deny / skip).

        Waits for a human as long as needed, up to `max_wait` seconds (default: the
        client's). Raises `GatewayAPIError` for a 4xx answer (bad input, bad key);
        an unreachable gateway is a deny (or an allow with `fail_open`), not an error.
        `on_pending(answer)` is called once, as soon as the gateway says a human has to
        decide (the answer carries the `confirmation_id`), before the wait; with it the
        first ask is not held (one more request for a call that waits, none for the rest).
        `turn_id` names the agent turn the call belongs to (default: the session's current turn,
        from `pre_turn`); the gateway shows a turn's gated calls on one card.
        An approver may have edited the arguments: run the tool with `decision.tool_args`.
        """
        body = drop_none(
            session_id=session_id,
            tool_name=tool_name,
            tool_args=dict(tool_args or {}),
            tool_call_id=tool_call_id,
            turn_id=turn_id,
            user_id=user_id,
            metadata=metadata,
            idempotency_key=idempotency_key or f"gwc-{uuid.uuid4().hex}",
            callback_url=callback_url,
        )
        limit = max_wait if max_wait is not None else self.max_wait
        deadline = time.monotonic() + limit if limit is not None else None
        waiting = PreToolUseFlow(
            body=body,
            deadline=deadline,
            long_poll=self.long_poll,
            fail_open=self.fail_open,
            base_url=self.base_url,
            on_pending=on_pending,
        )
        return self._drive(waiting.flow(), deadline)

    # -- questions (docs/asking.md) -------------------------------------------------

    def ask_question(
        self,
        question: str,
        answer_schema: dict[str, Any],
        *,
        channel: str | None = None,
        gate: str | None = None,
        approvers: list[str] | None = None,
        timeout_seconds: int | None = None,
        default_answer: Any = None,
        session_id: str | None = None,
        user_id: str | None = None,
        metadata: dict[str, Any] | None = None,
        callback_url: str | None = None,
        max_wait: float | None = None,
    ) -> Any:
        """Ask a human `question`, to be answered as `answer_schema` says; the `Answer` once it is final
        (or still pending after `max_wait` seconds, default: the client's). Raises `GatewayAPIError`
        for a question the gateway refuses (a 400 says why)."""
        body = drop_none(
            question=question, answer_schema=answer_schema, channel=channel, gate=gate, approvers=approvers,
            timeout_seconds=timeout_seconds, default_answer=default_answer, session_id=session_id,
            user_id=user_id, metadata=metadata, callback_url=callback_url,
        )  # fmt: skip
        limit = max_wait if max_wait is not None else self.max_wait
        deadline = time.monotonic() + limit if limit is not None else None
        flow = AskFlow(body=body, deadline=deadline, long_poll=self.long_poll, base_url=self.base_url).flow()
        return self._drive(flow, deadline)

    def get_question(self, question_id: str) -> _D:
        """The question as the gateway holds it (`docs/asking.md`)."""
        return self._drive(single(Call("GET", f"{API_PREFIX}/questions/{question_id}", resend=True)))

    # -- the other lifecycle events (thin: the parsed answer) ----------------------

    def _event(self, slug: str, body: dict[str, Any]) -> _D:
        return self._drive(single(Call("POST", f"{API_PREFIX}/hooks/{slug}", json=body)))

    def session_start(
        self, session_id: str, *, user_id: str | None = None, metadata: dict[str, Any] | None = None
    ) -> _D:
        """`{"decision", "reason", "messages", "side_effects"}`: put `messages` into the history."""
        return self._event("session-start", drop_none(session_id=session_id, user_id=user_id, metadata=metadata))

    def pre_turn(
        self,
        session_id: str,
        *,
        turn_id: str | None = None,
        user_id: str | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> _D:
        """`{"decision", "reason", "messages", "side_effects"}` before a turn."""
        return self._event(
            "pre-turn", drop_none(session_id=session_id, turn_id=turn_id, user_id=user_id, metadata=metadata)
        )

    def post_tool_use(
        self,
        session_id: str,
        tool_call_id: str,
        *,
        result: Any = None,
        tool_name: str | None = None,
        tool_args: dict[str, Any] | None = None,
        duration_ms: int | None = None,
        outcome: Literal["success", "error"] = "success",
        user_id: str | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> _D:
        """Report an allowed call's result; `{"result", "side_effects"}` (hooks may rewrite the result)."""
        body = drop_none(
            session_id=session_id,
            tool_call_id=tool_call_id,
            tool_name=tool_name,
            tool_args=tool_args,
            duration_ms=duration_ms,
            outcome=outcome,
            user_id=user_id,
            metadata=metadata,
        )
        return self._event("post-tool-use", {**body, "result": result})

    def tool_error(
        self,
        session_id: str,
        tool_call_id: str,
        error: str,
        *,
        attempt: int = 1,
        elapsed_seconds: float = 0.0,
        tool_name: str | None = None,
        tool_args: dict[str, Any] | None = None,
        user_id: str | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> _D:
        """Report a failed call; `{"action": "retry|recover|abort|raise", "delay_seconds", "result", "reason"}`."""
        return self._event(
            "tool-error",
            drop_none(
                session_id=session_id,
                tool_call_id=tool_call_id,
                error=error,
                attempt=attempt,
                elapsed_seconds=elapsed_seconds,
                tool_name=tool_name,
                tool_args=tool_args,
                user_id=user_id,
                metadata=metadata,
            ),
        )

    def post_turn(
        self,
        session_id: str,
        *,
        turn_id: str | None = None,
        user_id: str | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> _D:
        """`{"side_effects"}` after a turn."""
        return self._event(
            "post-turn", drop_none(session_id=session_id, turn_id=turn_id, user_id=user_id, metadata=metadata)
        )

    def session_end(self, session_id: str, *, user_id: str | None = None, metadata: dict[str, Any] | None = None) -> _D:
        """`{"side_effects"}` when the session ends."""
        return self._event("session-end", drop_none(session_id=session_id, user_id=user_id, metadata=metadata))

    # -- confirmation requests ------------------------------------------------------

    def get_confirmation(self, confirmation_id: str) -> _D:
        """`{"id", "status", "tool_name", "tool_args", "reason", "decided_by", "decided_at", "expires_at", "url"}`."""
        return self._drive(single(Call("GET", f"{API_PREFIX}/confirmations/{confirmation_id}", resend=True)))

    def wait(self, confirmation_id: str, timeout: float = DEFAULT_LONG_POLL) -> _D:
        """One long-poll: the request as soon as it is final, or still pending after `timeout` seconds."""
        call = Call(
            "GET",
            f"{API_PREFIX}/confirmations/{confirmation_id}/wait",
            params={"timeout": timeout},
            hold=timeout,
            resend=True,
        )
        return self._drive(single(call))

    def cancel(self, confirmation_id: str) -> _D:
        """Withdraw a pending request; raises `AlreadyDecided` if it was decided first."""
        return self._drive(single(Call("POST", f"{API_PREFIX}/confirmations/{confirmation_id}/cancel")))


class GatewayClient(_BaseClient[dict[str, Any], Decision]):
    """The agent API over blocking HTTP (httpx). Use as a context manager, or call `close()`."""

    def __init__(self, base_url: str, api_key: str, **options: Any):
        super().__init__(base_url, api_key, **options)
        self._http = httpx.Client(**self._http_options())

    def _send(self, call: Call, deadline: float | None) -> Any:
        try:
            for attempt in Retrying(**retry_options(call, self.reconnect_for, deadline)):
                with attempt:
                    return parse(self._http.send(self._request(call)), self.base_url)
        except (httpx.TransportError, ServerError) as exc:
            raise unavailable(exc, call) from exc

    def _drive(self, flow: Flow, deadline: float | None = None) -> Any:
        try:
            call = next(flow)
            while True:
                try:
                    answer = self._send(call, deadline)
                except GatewayClientError as exc:
                    call = flow.throw(exc)
                else:
                    call = flow.send(answer)
        except StopIteration as done:
            return done.value

    def ask(self, question: str, answer_schema: dict[str, Any], **options: Any) -> Any:
        """Ask a human and return the typed answer (or the default, if it expired with one).

        Raises `NoAnswer` when there is none to return (expired without a default, cancelled,
        still pending at `max_wait`, the gateway unreachable); `ask_question` returns the `Answer`
        instead. Options as `ask_question`'s.
        """
        answer = self.ask_question(question, answer_schema, **options)
        if not answer.answered:
            raise NoAnswer(answer)
        return answer.value

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> GatewayClient:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()


class AsyncGatewayClient(_BaseClient[Awaitable[dict[str, Any]], Awaitable[Decision]]):
    """The agent API over asyncio (httpx.AsyncClient): the same methods, awaited."""

    def __init__(self, base_url: str, api_key: str, **options: Any):
        super().__init__(base_url, api_key, **options)
        self._http = httpx.AsyncClient(**self._http_options())

    async def _send(self, call: Call, deadline: float | None) -> Any:
        try:
            async for attempt in AsyncRetrying(**retry_options(call, self.reconnect_for, deadline)):
                with attempt:
                    return parse(await self._http.send(self._request(call)), self.base_url)
        except (httpx.TransportError, ServerError) as exc:
            raise unavailable(exc, call) from exc

    async def _drive(self, flow: Flow, deadline: float | None = None) -> Any:
        try:
            call = next(flow)
            while True:
                try:
                    answer = await self._send(call, deadline)
                except GatewayClientError as exc:
                    call = flow.throw(exc)
                else:
                    call = flow.send(answer)
        except StopIteration as done:
            return done.value

    async def ask(self, question: str, answer_schema: dict[str, Any], **options: Any) -> Any:
        """As `GatewayClient.ask`, awaited."""
        answer = await self.ask_question(question, answer_schema, **options)
        if not answer.answered:
            raise NoAnswer(answer)
        return answer.value

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncGatewayClient:
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        await self.aclose()
