"""The gateway's error classes; the API's exception handler turns them into
`{"error": {"code", "message", "details"}}` with their status."""

from __future__ import annotations

from typing import Any


def error_body(code: str, message: str, details: Any = None) -> dict[str, Any]:
    """The contract's error shape (docs/reference/api.md), for the API and for every other answer in it."""
    return {"error": {"code": code, "message": message, "details": details}}


class GatewayError(Exception):
    status = 400
    code = "bad_request"

    def __init__(self, message: str, *, details: Any = None):
        super().__init__(message)
        self.message = message
        self.details = details


class NotFound(GatewayError):
    status = 404
    code = "not_found"


class InvalidInput(GatewayError):
    status = 400
    code = "invalid"


class Conflict(GatewayError):
    status = 409
    code = "conflict"


class AlreadyDecided(Conflict):
    code = "already_decided"


class RateLimited(GatewayError):
    """Over a limit per caller (e.g. one-time links asked for per user); `retry_after`: seconds until it allows again."""

    status = 429
    code = "rate_limited"

    def __init__(self, message: str, *, retry_after: int, details: Any = None):
        super().__init__(message, details=details)
        self.retry_after = retry_after


class IdempotencyMismatch(GatewayError):
    status = 422
    code = "idempotency_key_reused"


class PayloadTooLarge(GatewayError):
    """The body is over GATEWAY_MAX_BODY_BYTES: refused before it is read."""

    status = 413
    code = "payload_too_large"


class UnsupportedMediaType(GatewayError):
    """The body does not say it is JSON (or, where a route takes it, YAML): refused before it is read."""

    status = 415
    code = "unsupported_media_type"


class SignInNeedsAdmin(GatewayError):
    """An identity provider's account whose e-mail is a user's who may not be linked by e-mail (staff, a
    superuser, a password, linked already, a look-alike address): only an admin links it (docs/approving.md §7)."""

    status = 403
    code = "sign_in_needs_admin"
