"""An answer sent as ONE ASGI message, where the server offers it: what `gateway.http_protocol` (the HTTP
protocol `approval-gateway run` starts uvicorn with) offers and the agent API's hot paths
(`approvals.api.asgi`) use.

A server that offers it puts `WHOLE` in `scope["extensions"]`; an app that sees it may then send an answer
whose body it holds whole as one `http.response.start` message with the body under `BODY` and no
`content-length` (the server adds it), instead of `http.response.start` and `http.response.body`. Anywhere
else (another server, a test client) the extension is absent and the app sends the two messages. A
middleware between them that reads answers' bodies must read a whole message's too (as the tests' request
log does), or take `WHOLE` out of the scope it passes on."""

from __future__ import annotations

from typing import Any

WHOLE = "gateway.whole_response"
BODY = "gateway.body"


def offered(scope: dict[str, Any]) -> bool:
    """Whether the server serving `scope` takes a whole answer in one message."""
    return WHOLE in (scope.get("extensions") or ())
