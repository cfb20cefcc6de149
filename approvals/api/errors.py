"""One exception handler: every error leaves as `{"error": {"code", "message", "details"}}`."""

from __future__ import annotations

from typing import Any

from django.db import InterfaceError, OperationalError
from django.http import Http404
from rest_framework import exceptions, status
from rest_framework.response import Response

from approvals.errors import GatewayError, error_body


# The database could not be reached or gave up on the statement (a restart, a failover, a pool
# exhausted): nothing was decided, so the agent may send the same request again (docs/reference/api.md).
DATABASE_UNAVAILABLE_CODE = "database_unavailable"
DATABASE_UNAVAILABLE_MESSAGE = "the database is unavailable (restarting or failing over); retry shortly"
RETRY_AFTER_SECONDS = 1


def is_database_unavailable(exc: BaseException) -> bool:
    """True for a database that is gone or busy (Django's or psycopg's own OperationalError, InterfaceError)."""
    import psycopg

    return isinstance(exc, (OperationalError, InterfaceError, psycopg.OperationalError, psycopg.InterfaceError))


def database_unavailable_body() -> dict[str, Any]:
    return error_body(DATABASE_UNAVAILABLE_CODE, DATABASE_UNAVAILABLE_MESSAGE)


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    if is_database_unavailable(exc):
        response = Response(database_unavailable_body(), status=status.HTTP_503_SERVICE_UNAVAILABLE)
        response["Retry-After"] = str(RETRY_AFTER_SECONDS)
        return response
    if isinstance(exc, GatewayError):
        return Response(error_body(exc.code, exc.message, exc.details), status=exc.status)
    if isinstance(exc, Http404):
        return Response(error_body("not_found", "not found"), status=status.HTTP_404_NOT_FOUND)
    if isinstance(exc, exceptions.ValidationError):
        return Response(
            error_body("invalid", "the request is not valid; see details", exc.detail),
            status=status.HTTP_400_BAD_REQUEST,
        )
    if isinstance(exc, exceptions.ParseError):
        return Response(error_body("malformed", str(exc.detail)), status=status.HTTP_400_BAD_REQUEST)
    if isinstance(exc, (exceptions.NotAuthenticated, exceptions.AuthenticationFailed)):
        response = Response(error_body("unauthorized", str(exc.detail)), status=status.HTTP_401_UNAUTHORIZED)
        response["WWW-Authenticate"] = 'Bearer realm="gateway"'
        return response
    if isinstance(exc, exceptions.APIException):
        code = exc.get_codes() if isinstance(exc.get_codes(), str) else "error"
        return Response(error_body(code, str(exc.detail)), status=exc.status_code)
    return None
