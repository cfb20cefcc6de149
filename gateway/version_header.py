"""`X-Gateway-Version` on every HTTP answer and WebSocket handshake (docs/reference/api.md, "Versions").

An ASGI wrapper, outermost in `gateway.asgi`: the agent API's hot paths (`approvals.api.asgi`), which answer
without Django's middleware, carry it as the pages and the admin do. A header is bytes added to the message
that starts the answer; the body is never looked at."""

from __future__ import annotations

from typing import Any

from gateway.version import __version__

HEADER = (b"x-gateway-version", __version__.encode("ascii"))
STARTS = frozenset({"http.response.start", "websocket.accept"})


class VersionHeader:
    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        async def send_with_version(message: dict[str, Any]) -> None:
            if message["type"] in STARTS:
                message = {**message, "headers": [*message.get("headers", ()), HEADER]}
            await send(message)

        await self.app(scope, receive, send_with_version)
