"""The errors the client raises (every one a `GatewayClientError`), and `api_error`, which reads the
contract's error shape `{"error": {"code", "message", "details"}}` off a non-2xx answer."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import httpx

from gateway_client.version import MIN_GATEWAY_VERSION

if TYPE_CHECKING:
    from gateway_client.decisions import Answer, Decision


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


class GatewayTooOld(GatewayClientError):
    """The gateway named a version (`X-Gateway-Version`) older than this client needs: nothing it answered
    is used. Upgrade the gateway, or use a client as old as it."""

    def __init__(self, base_url: str, gateway_version: str):
        super().__init__(
            f"the gateway at {base_url} is {gateway_version}; this client needs {MIN_GATEWAY_VERSION} or newer"
        )
        self.base_url = base_url
        self.gateway_version = gateway_version


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
