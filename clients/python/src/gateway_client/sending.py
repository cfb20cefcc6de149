"""How one call is sent: which failures are tried again (with tenacity, never by hand), for how long,
and how an answer is read — the gateway's version first (`GatewayTooOld`), then its status and JSON."""

from __future__ import annotations

import time
from typing import Any

import httpx
from tenacity import RetryCallState, retry_if_exception, wait_exponential_jitter

from gateway_client.errors import GatewayTooOld, GatewayUnavailable, ServerError, api_error
from gateway_client.flows import Call
from gateway_client.version import VERSION_HEADER, too_old


def is_transient(exc: BaseException, call: Call) -> bool:
    """Worth sending again: the gateway was not reached, or the call is safe to repeat."""
    if isinstance(exc, (httpx.ConnectError, httpx.ConnectTimeout)):
        return True  # never reached the gateway
    if isinstance(exc, ServerError):
        return call.resend or exc.status_code in (502, 503, 504)
    if isinstance(exc, httpx.TransportError):
        return call.resend  # the request may have been processed; only idempotent calls repeat
    return False


class StopAfterOutage:
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


def retry_options(call: Call, reconnect_for: float, deadline: float | None) -> dict[str, Any]:
    return {
        "retry": retry_if_exception(lambda exc: is_transient(exc, call)),
        "stop": StopAfterOutage(reconnect_for, deadline),
        "wait": wait_exponential_jitter(multiplier=0.1, max=2.0, jitter=0.1),
        "reraise": True,
    }


def unavailable(exc: Exception, call: Call) -> GatewayUnavailable:
    if isinstance(exc, ServerError):
        return GatewayUnavailable(f"{call.method} {call.path} kept failing: {exc}")
    return GatewayUnavailable(f"{call.method} {call.path}: {type(exc).__name__}: {exc}".rstrip(": "))


def parse(response: httpx.Response, base_url: str) -> Any:
    """The answer's JSON; raises `GatewayTooOld` when the gateway names a version older than this client
    needs (whatever it answered), else `GatewayAPIError` for a non-2xx answer."""
    gateway_version = response.headers.get(VERSION_HEADER)
    if gateway_version is not None and too_old(gateway_version):
        raise GatewayTooOld(base_url, gateway_version)
    if response.status_code >= 300:
        raise api_error(response)
    try:
        return response.json()
    except ValueError:
        raise ServerError(
            response.status_code, "malformed", "the gateway answered with something other than JSON"
        ) from None

