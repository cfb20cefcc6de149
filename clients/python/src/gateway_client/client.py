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
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
import uuid
from collections.abc import Awaitable, Callable, Generator
from typing import Any, Generic, Literal, TypeVar

import httpx
from tenacity import AsyncRetrying, RetryCallState, Retrying, retry_if_exception, wait_exponential_jitter

try:  # the agent's own OpenTelemetry, if it has one: the gateway's spans continue its trace
    from opentelemetry import propagate as _propagate
except ImportError:  # pragma: no cover - the client needs only httpx
    _propagate = None

API_PREFIX = "/api/v1"
DEFAULT_TIMEOUT = 10.0  # seconds for one request that the gateway does not hold
DEFAULT_LONG_POLL = 25  # seconds the gateway holds one waiting request (its maximum is 60)
DEFAULT_RECONNECT_FOR = 30.0  # seconds an outage is tolerated before giving up
USER_AGENT = "gateway-client/1"


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


# --------------------------------------------------------------------------- errors


class GatewayClientError(Exception):
    """Base class of every error this package raises."""


class GatewayUnavailable(GatewayClientError):
    """The gateway could not be reached (or kept failing with 5xx) for `reconnect_for` seconds."""


class GatewayAPIError(GatewayClientError):
    """The gateway answered with an error: `{"error": {"code", "message", "details"}}`."""

    def __init__(self, status_code: int, code: str, message: str, details: Any = None):
        super().__init__(f"HTTP {status_code} {code}: {message}")
        self.status_code = status_code
        self.code = code
        self.message = message
        self.details = details


class InvalidRequest(GatewayAPIError):
    """400: the request failed validation; `details` names each field."""


class Unauthorized(GatewayAPIError):
    """401: missing, unknown or revoked API key."""


class Forbidden(GatewayAPIError):
    """403."""


class NotFound(GatewayAPIError):
    """404: no such confirmation request (or it belongs to another agent)."""


class Conflict(GatewayAPIError):
    """409."""


class AlreadyDecided(Conflict):
    """409 `already_decided`: e.g. cancelling a request that was already decided."""


class IdempotencyKeyReused(GatewayAPIError):
    """422: this idempotency key was used before with a different request body."""


class ServerError(GatewayAPIError):
    """5xx. Retried like a network error; raised as `GatewayUnavailable` when it persists."""


class NoAnswer(GatewayClientError):
    """A question ended without an answer to return: expired with no default, cancelled, undeliverable,
    still pending at the deadline, or the gateway could not be reached. `answer` says what is known."""

    def __init__(self, answer: Answer):
        super().__init__(answer.reason or f"the question ended {answer.status} without an answer")
        self.answer = answer


class ToolDenied(GatewayClientError):
    """A gated tool was refused (raised by `requires_approval`). Carries the reason and the request id."""

    def __init__(self, tool_name: str, decision: Decision):
        self.tool_name = tool_name
        self.decision = decision
        self.reason = decision.reason
        self.confirmation_id = decision.confirmation_id
        where = f" (confirmation {decision.confirmation_id})" if decision.confirmation_id else ""
        super().__init__(f"{tool_name} was denied{where}: {decision.reason}")


_ERRORS_BY_STATUS: dict[int, type[GatewayAPIError]] = {
    400: InvalidRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    422: IdempotencyKeyReused,
}


def api_error(response: httpx.Response) -> GatewayAPIError:
    """The exception for a non-2xx answer, read from the contract's error shape when present."""
    code, message, details = "http_error", response.reason_phrase or "error", None
    try:
        error = response.json().get("error")
    except (ValueError, AttributeError):
        error = None
    if isinstance(error, dict):
        code = str(error.get("code") or code)
        message = str(error.get("message") or message)
        details = error.get("details")
    status = response.status_code
    if status >= 500:
        cls: type[GatewayAPIError] = ServerError
    elif status == 409 and code == "already_decided":
        cls = AlreadyDecided
    else:
        cls = _ERRORS_BY_STATUS.get(status, GatewayAPIError)
    return cls(status, code, message, details)


# --------------------------------------------------------------------------- the decision


@dataclasses.dataclass(frozen=True)
class Decision:
    """The final answer to a pre-tool-use call.

    `decision` is `allow` (run the tool with `tool_args`), `deny` (do not run
    it; `reason` says why) or `skip` (the same idempotent call already
    completed: do not run it again, use `result`).
    """

    decision: Literal["allow", "deny", "skip"]
    tool_args: dict[str, Any]
    reason: str = ""
    confirmation_id: str | None = None
    result: Any = None
    hook_decisions: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    side_effects: list[str] = dataclasses.field(default_factory=list)
    idempotency_key: str | None = None
    still_pending: bool = False  # denied because nobody decided before the client's deadline
    unreachable: bool = False  # decided here, without the gateway (fail closed, or fail open)

    @property
    def allowed(self) -> bool:
        return self.decision == "allow"

    @property
    def denied(self) -> bool:
        return self.decision == "deny"

    @property
    def skipped(self) -> bool:
        return self.decision == "skip"

    @classmethod
    def from_answer(cls, answer: dict[str, Any], *, idempotency_key: str | None) -> Decision:
        return cls(
            decision=answer["decision"],
            tool_args=answer.get("tool_args") or {},
            reason=answer.get("reason") or "",
            confirmation_id=answer.get("confirmation_id"),
            result=answer.get("result"),
            hook_decisions=list(answer.get("hook_decisions") or []),
            side_effects=list(answer.get("side_effects") or []),
            idempotency_key=idempotency_key,
        )


# --------------------------------------------------------------------------- requests as data

@dataclasses.dataclass(frozen=True)
class Answer:
    """A question's outcome (docs/asking.md): `value` is the answer, typed as the schema says."""

    question_id: str | None
    status: str  # answered | expired | cancelled | rejected | pending (still, at the deadline) | unreachable
    value: Any = None  # the answer given, or the default once expired (`defaulted`)
    defaulted: bool = False
    answered_by: str | None = None  # channel-qualified: slack:U…, feishu:ou_…, web:<user>
    answered_by_name: str | None = None
    reason: str = ""
    url: str | None = None

    @property
    def answered(self) -> bool:
        """There is a value to use: a person's answer, or the default at expiry."""
        return self.status == "answered" or (self.defaulted and self.value is not None)

    @classmethod
    def from_question(cls, question: dict[str, Any]) -> Answer:
        return cls(
            question_id=question.get("id"),
            status=question.get("status", ""),
            value=question.get("answer"),
            defaulted=bool(question.get("defaulted")),
            answered_by=question.get("answered_by"),
            answered_by_name=question.get("answered_by_name"),
            reason=question.get("reason") or "",
            url=question.get("url"),
        )


# Each operation is written once, as a generator that yields the HTTP calls it
# needs and receives their parsed JSON answers (or has the error thrown in).
# The sync and async clients only differ in how they perform one call.


@dataclasses.dataclass(frozen=True)
class _Call:
    method: str
    path: str
    json: dict[str, Any] | None = None
    params: dict[str, Any] | None = None
    hold: float = 0  # seconds the gateway may hold this request before answering
    resend: bool = False  # safe to send again after a lost response (idempotent)


_Flow = Generator[_Call, Any, Any]


def _single(call: _Call) -> _Flow:
    return (yield call)


def canonical_json(value: Any) -> str:
    """The one JSON spelling of a value (sorted keys, no spaces): for keys and fingerprints."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def _drop_none(**fields: Any) -> dict[str, Any]:
    return {k: v for k, v in fields.items() if v is not None}


class _PreToolUse:
    """The waiting logic of `pre_tool_use`, shared by both clients."""

    def __init__(
        self,
        *,
        body: dict[str, Any],
        deadline: float | None,
        long_poll: float,
        fail_open: bool,
        base_url: str,
        on_pending: Callable[[dict[str, Any]], None] | None = None,
    ):
        self.body = body
        self.deadline = deadline
        self.long_poll = long_poll
        self.fail_open = fail_open
        self.base_url = base_url
        self.on_pending = on_pending
        self.started = time.monotonic()

    def _hold(self) -> float | None:
        """Seconds to hold the next waiting request; None once the deadline has passed."""
        if self.deadline is None:
            return self.long_poll
        remaining = self.deadline - time.monotonic()
        return min(self.long_poll, remaining) if remaining > 0 else None

    def _ask(self, hold: float) -> _Call:
        # wait_seconds is an integer in the contract; a shorter hold falls through to /wait.
        body = {**self.body, "wait_seconds": int(hold)}
        return _Call("POST", f"{API_PREFIX}/hooks/pre-tool-use", json=body, hold=int(hold), resend=True)

    def flow(self) -> _Flow:
        answer: dict[str, Any] | None = None
        try:
            # With on_pending the first ask is not held, so the caller learns at once that a
            # human is being asked (and which request to withdraw if it is cancelled).
            answer = yield self._ask(0 if self.on_pending is not None else self._hold() or 0)
            if answer["decision"] == "pending" and self.on_pending is not None:
                self.on_pending(answer)
            while answer["decision"] == "pending":
                hold = self._hold()
                if hold is None:
                    return self._still_pending(answer)
                state = yield _Call(
                    "GET",
                    f"{API_PREFIX}/confirmations/{answer['confirmation_id']}/wait",
                    params={"timeout": round(hold, 3)},
                    hold=hold,
                    resend=True,
                )
                if state.get("status") != "pending":
                    # Final: ask again under the same key for the answer the gateway derives
                    # from it (on_timeout, the reason, the arguments to run with).
                    answer = yield self._ask(0)
        except GatewayUnavailable as exc:
            return self._unreachable(exc, answer)
        return Decision.from_answer(answer, idempotency_key=self.body["idempotency_key"])

    def _still_pending(self, answer: dict[str, Any]) -> Decision:
        waited = time.monotonic() - self.started
        return Decision(
            decision="deny",
            tool_args=answer.get("tool_args") or self.body["tool_args"],
            reason=(
                f"approval is still pending after {waited:.0f}s (confirmation {answer['confirmation_id']}); "
                "ask again with the same idempotency key to pick up the decision"
            ),
            confirmation_id=answer["confirmation_id"],
            hook_decisions=list(answer.get("hook_decisions") or []),
            side_effects=list(answer.get("side_effects") or []),
            idempotency_key=self.body["idempotency_key"],
            still_pending=True,
        )

    def _unreachable(self, exc: GatewayUnavailable, answer: dict[str, Any] | None) -> Decision:
        # Fail-open covers a gateway that never answered; once a human has been asked
        # (a pending request exists), losing the gateway must not bypass them.
        if self.fail_open and answer is None:
            decision: Literal["allow", "deny"] = "allow"
            reason = (
                f"allowed without approval: the gateway at {self.base_url} could not be reached ({exc}); "
                "fail_open is on"
            )
        else:
            decision = "deny"
            reason = f"denied: the gateway at {self.base_url} could not be reached ({exc}); failing closed"
        return Decision(
            decision=decision,
            tool_args=self.body["tool_args"],
            reason=reason,
            confirmation_id=(answer or {}).get("confirmation_id"),
            idempotency_key=self.body["idempotency_key"],
            unreachable=True,
        )


class _Ask:
    """The waiting logic of `ask`: ask (held), then long-poll the question until it is final."""

    def __init__(self, *, body: dict[str, Any], deadline: float | None, long_poll: float, base_url: str):
        self.body = body
        self.deadline = deadline
        self.long_poll = long_poll
        self.base_url = base_url

    def _hold(self) -> float | None:
        if self.deadline is None:
            return self.long_poll
        remaining = self.deadline - time.monotonic()
        return min(self.long_poll, remaining) if remaining > 0 else None

    def flow(self) -> _Flow:
        question: dict[str, Any] | None = None
        try:
            hold = int(self._hold() or 0)
            # Not resent after a lost response: a second POST would ask a second question.
            question = yield _Call("POST", f"{API_PREFIX}/questions", json={**self.body, "wait_seconds": hold}, hold=hold)
            while question["status"] == "pending":
                hold = self._hold()
                if hold is None:
                    answer = Answer.from_question(question)
                    return dataclasses.replace(
                        answer, reason=f"question {question['id']} is still pending at the deadline; nobody answered yet"
                    )
                question = yield _Call(
                    "GET", f"{API_PREFIX}/questions/{question['id']}/wait", params={"timeout": round(hold, 3)},
                    hold=hold, resend=True,
                )  # fmt: skip
        except GatewayUnavailable as exc:
            return Answer(
                question_id=(question or {}).get("id"),
                status="unreachable",
                reason=f"the gateway at {self.base_url} could not be reached ({exc})",
            )
        return Answer.from_question(question)


# --------------------------------------------------------------------------- retries


def _is_transient(exc: BaseException, call: _Call) -> bool:
    """Worth sending again: the gateway was not reached, or the call is safe to repeat."""
    if isinstance(exc, (httpx.ConnectError, httpx.ConnectTimeout)):
        return True  # never reached the gateway
    if isinstance(exc, ServerError):
        return call.resend or exc.status_code in (502, 503, 504)
    if isinstance(exc, httpx.TransportError):
        return call.resend  # the request may have been processed; only idempotent calls repeat
    return False


class _StopAfterOutage:
    """Stop retrying `reconnect_for` seconds after the first failure, or at the overall deadline."""

    def __init__(self, reconnect_for: float, deadline: float | None):
        self.reconnect_for = reconnect_for
        self.deadline = deadline
        self.first_failure: float | None = None

    def __call__(self, retry_state: RetryCallState) -> bool:
        now = time.monotonic()
        if self.first_failure is None:
            self.first_failure = now
        give_up_at = self.first_failure + self.reconnect_for
        if self.deadline is not None:
            give_up_at = min(give_up_at, self.deadline)
        return now + (retry_state.upcoming_sleep or 0) >= give_up_at


def _retry_options(call: _Call, reconnect_for: float, deadline: float | None) -> dict[str, Any]:
    return {
        "retry": retry_if_exception(lambda exc: _is_transient(exc, call)),
        "stop": _StopAfterOutage(reconnect_for, deadline),
        "wait": wait_exponential_jitter(multiplier=0.1, max=2.0, jitter=0.1),
        "reraise": True,
    }


def _unavailable(exc: Exception, call: _Call) -> GatewayUnavailable:
    if isinstance(exc, ServerError):
        return GatewayUnavailable(f"{call.method} {call.path} kept failing: {exc}")
    return GatewayUnavailable(f"{call.method} {call.path}: {type(exc).__name__}: {exc}".rstrip(": "))


def _parse(response: httpx.Response) -> Any:
    if response.status_code >= 300:
        raise api_error(response)
    try:
        return response.json()
    except ValueError:
        raise ServerError(
            response.status_code, "malformed", "the gateway answered with something other than JSON"
        ) from None


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

    def _drive(self, flow: _Flow, deadline: float | None = None) -> Any:
        raise NotImplementedError

    def _timeout(self, call: _Call) -> httpx.Timeout:
        return httpx.Timeout(self.timeout, read=self.timeout + call.hold)

    def _http_options(self) -> dict[str, Any]:
        return {"base_url": self.base_url, "headers": self._headers, "timeout": self.timeout}

    def _request(self, call: _Call) -> httpx.Request:
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
        body = _drop_none(
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
        waiting = _PreToolUse(
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
        body = _drop_none(
            question=question, answer_schema=answer_schema, channel=channel, gate=gate, approvers=approvers,
            timeout_seconds=timeout_seconds, default_answer=default_answer, session_id=session_id,
            user_id=user_id, metadata=metadata, callback_url=callback_url,
        )  # fmt: skip
        limit = max_wait if max_wait is not None else self.max_wait
        deadline = time.monotonic() + limit if limit is not None else None
        flow = _Ask(body=body, deadline=deadline, long_poll=self.long_poll, base_url=self.base_url).flow()
        return self._drive(flow, deadline)

    def get_question(self, question_id: str) -> _D:
        """The question as the gateway holds it (`docs/asking.md`)."""
        return self._drive(_single(_Call("GET", f"{API_PREFIX}/questions/{question_id}", resend=True)))

    # -- the other lifecycle events (thin: the parsed answer) ----------------------

    def _event(self, slug: str, body: dict[str, Any]) -> _D:
        return self._drive(_single(_Call("POST", f"{API_PREFIX}/hooks/{slug}", json=body)))

    def session_start(
        self, session_id: str, *, user_id: str | None = None, metadata: dict[str, Any] | None = None
    ) -> _D:
        """`{"decision", "reason", "messages", "side_effects"}`: put `messages` into the history."""
        return self._event("session-start", _drop_none(session_id=session_id, user_id=user_id, metadata=metadata))

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
            "pre-turn", _drop_none(session_id=session_id, turn_id=turn_id, user_id=user_id, metadata=metadata)
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
        body = _drop_none(
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
            _drop_none(
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
            "post-turn", _drop_none(session_id=session_id, turn_id=turn_id, user_id=user_id, metadata=metadata)
        )

    def session_end(self, session_id: str, *, user_id: str | None = None, metadata: dict[str, Any] | None = None) -> _D:
        """`{"side_effects"}` when the session ends."""
        return self._event("session-end", _drop_none(session_id=session_id, user_id=user_id, metadata=metadata))

    # -- confirmation requests ------------------------------------------------------

    def get_confirmation(self, confirmation_id: str) -> _D:
        """`{"id", "status", "tool_name", "tool_args", "reason", "decided_by", "decided_at", "expires_at", "url"}`."""
        return self._drive(_single(_Call("GET", f"{API_PREFIX}/confirmations/{confirmation_id}", resend=True)))

    def wait(self, confirmation_id: str, timeout: float = DEFAULT_LONG_POLL) -> _D:
        """One long-poll: the request as soon as it is final, or still pending after `timeout` seconds."""
        call = _Call(
            "GET",
            f"{API_PREFIX}/confirmations/{confirmation_id}/wait",
            params={"timeout": timeout},
            hold=timeout,
            resend=True,
        )
        return self._drive(_single(call))

    def cancel(self, confirmation_id: str) -> _D:
        """Withdraw a pending request; raises `AlreadyDecided` if it was decided first."""
        return self._drive(_single(_Call("POST", f"{API_PREFIX}/confirmations/{confirmation_id}/cancel")))


class GatewayClient(_BaseClient[dict[str, Any], Decision]):
    """The agent API over blocking HTTP (httpx). Use as a context manager, or call `close()`."""

    def __init__(self, base_url: str, api_key: str, **options: Any):
        super().__init__(base_url, api_key, **options)
        self._http = httpx.Client(**self._http_options())

    def _send(self, call: _Call, deadline: float | None) -> Any:
        try:
            for attempt in Retrying(**_retry_options(call, self.reconnect_for, deadline)):
                with attempt:
                    return _parse(self._http.send(self._request(call)))
        except (httpx.TransportError, ServerError) as exc:
            raise _unavailable(exc, call) from exc

    def _drive(self, flow: _Flow, deadline: float | None = None) -> Any:
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

    async def _send(self, call: _Call, deadline: float | None) -> Any:
        try:
            async for attempt in AsyncRetrying(**_retry_options(call, self.reconnect_for, deadline)):
                with attempt:
                    return _parse(await self._http.send(self._request(call)))
        except (httpx.TransportError, ServerError) as exc:
            raise _unavailable(exc, call) from exc

    async def _drive(self, flow: _Flow, deadline: float | None = None) -> Any:
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
