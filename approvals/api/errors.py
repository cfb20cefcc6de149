"""One exception handler: every error leaves as `{"error": {"code", "message", "details"}}`."""

from __future__ import annotations

from typing import Any

from django.http import Http404
from rest_framework import exceptions, status
from rest_framework.response import Response

from approvals.errors import GatewayError


def error_body(code: str, message: str, details: Any = None) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "details": details}}


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
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
