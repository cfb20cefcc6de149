"""The web pages (approval page, inbox, sign-in, people) served by Django with its middleware run
synchronously, in one hop to a thread.

Django's ASGI handler runs each sync middleware in async mode, which moves every `process_request`
and `process_response` to a thread and back: seven middleware, a dozen hops per page, each waiting
for the event loop (and the GIL) again. The pages are plain sync views, so their requests go to a
handler whose whole chain — middleware and view — is one sync call (`SyncChainHandler`). The API,
the Claude Code hook (an async view that may hold a request while a human decides), the admin's
streamed export and everything else keep Django's usual async chain (docs/architecture.md).
"""

from __future__ import annotations

from typing import Any

from asgiref.sync import sync_to_async
from django.core.handlers.asgi import ASGIHandler

# Paths served by sync views only (channels_ext/web/urls.py): nothing here awaits or streams.
SYNC_PAGE_PREFIXES = ("/approvals/", "/login/", "/logout/", "/people/")


class SyncChainHandler(ASGIHandler):
    """Django's ASGI handler with the middleware chain built for sync mode and run in one hop."""

    def load_middleware(self, is_async: bool = False) -> None:
        super().load_middleware(is_async=False)

    async def get_response_async(self, request: Any) -> Any:
        return await sync_to_async(self.get_response, thread_sensitive=True)(request)


class PagesRouter:
    """ASGI: the sync pages to `pages`, every other request to `django`."""

    def __init__(self, django: Any, pages: Any) -> None:
        self.django = django
        self.pages = pages

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["path"].startswith(SYNC_PAGE_PREFIXES):
            await self.pages(scope, receive, send)
        else:
            await self.django(scope, receive, send)
