"""Under `/api/` every error is the API's error shape, never an HTML page (docs/reference/api.md).

DRF's views answer their errors in the shape already (`approvals.api.errors`). What they cannot reach is
Django's own answers: a path no route matches (404; with DEBUG on, Django's technical 404 page), a method
a plain Django view refuses (`require_POST`: an empty `text/html` 405), an exception that escaped a view
(500; with DEBUG on, the technical page with the traceback). This middleware, first in MIDDLEWARE, sees
every answer last and gives each such one the error shape, with DEBUG on or off. Headers that say how to
retry (`Allow`, `WWW-Authenticate`) are kept; the page itself, and any internals in it, are dropped (the
traceback is in the log: Django logs every 500).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from http import HTTPStatus

from asgiref.sync import iscoroutinefunction
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.utils.decorators import sync_and_async_middleware

from approvals.api.errors import error_body

API_PREFIX = "/api/"
KEPT_HEADERS = ("Allow", "WWW-Authenticate")
# The codes of the error shape for Django's own answers (DRF's views give theirs: approvals.api.errors).
CODES = {
    400: "bad_request",
    401: "unauthorized",
    403: "permission_denied",
    404: "not_found",
    405: "method_not_allowed",
    413: "payload_too_large",
    415: "unsupported_media_type",
    500: "internal_error",
}
MESSAGES = {
    404: "no such API path",
    500: "the gateway failed while answering; see its log",
}


def _in_error_shape(request: HttpRequest, response: HttpResponse) -> HttpResponse:
    if (
        response.status_code < 400
        or not request.path.startswith(API_PREFIX)
        or response.get("Content-Type", "").startswith("application/json")
    ):
        return response
    status = response.status_code
    if status == 405:
        message = f"method {request.method} is not allowed here (allowed: {response.get('Allow', 'none')})"
    elif status in MESSAGES:
        message = MESSAGES[status]
    else:
        try:
            message = HTTPStatus(status).phrase.lower()
        except ValueError:  # a status Python does not name
            message = f"error {status}"
    shaped = JsonResponse(error_body(CODES.get(status, "error"), message), status=status)
    for header in KEPT_HEADERS:
        if header in response:
            shaped[header] = response[header]
    response.close()
    return shaped


@sync_and_async_middleware
def api_errors_as_json(
    get_response: Callable[[HttpRequest], HttpResponse | Awaitable[HttpResponse]],
) -> Callable[[HttpRequest], HttpResponse | Awaitable[HttpResponse]]:
    """Django middleware: an error under `/api/` that is not JSON becomes the API's error shape."""
    if iscoroutinefunction(get_response):

        async def middleware_async(request: HttpRequest) -> HttpResponse:
            return _in_error_shape(request, await get_response(request))

        return middleware_async

    def middleware(request: HttpRequest) -> HttpResponse:
        return _in_error_shape(request, get_response(request))

    return middleware
