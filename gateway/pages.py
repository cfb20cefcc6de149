"""The web pages (approval page, inbox, sign-in, people) served by Django with its middleware run
synchronously, in one hop to a thread.

Django's ASGI handler runs each sync middleware in async mode, which moves every `process_request`
and `process_response` to a thread and back: seven middleware, a dozen hops per page, each waiting
for the event loop (and the GIL) again; and it sends the request-started and request-finished
signals (which hand the database connection out of and back to the pool) in hops of their own. The
pages are plain sync views, so their requests go to a handler that does all of it — the signals, the
request, middleware and view — in one sync call (`SyncChainHandler`). The API,
the Claude Code hook (an async view that may hold a request while a human decides), the admin's
streamed export and everything else keep Django's usual async chain (docs/architecture.md).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from asgiref.sync import sync_to_async
from django.core import signals
from django.core.exceptions import RequestAborted
from django.core.handlers.asgi import ASGIHandler, get_script_prefix
from django.db import close_old_connections
from django.http import FileResponse
from django.urls import set_script_prefix

# Paths served by sync views only (channels_ext/web/urls.py): nothing here awaits or streams.
SYNC_PAGE_PREFIXES = ("/approvals/", "/login/", "/logout/", "/people/")


# Threads serving pages (a sign-in's password hash takes one for ~0.2 s); at most this many pages are
# served at once by one process, the others wait their turn.
PAGE_THREADS = 8
_page_executor = ThreadPoolExecutor(max_workers=PAGE_THREADS, thread_name_prefix="gateway-page")


def _in_page_thread(fn: Callable[..., Any]) -> Callable[..., Awaitable[Any]]:
    return sync_to_async(fn, thread_sensitive=False, executor=_page_executor)


class SyncChainHandler(ASGIHandler):
    """Django's ASGI handler with the middleware chain built for sync mode, and the request served in
    one hop to a thread of `PAGE_THREADS`: the request-started signal, the request, the chain and — for
    an answer held in memory, which every page but a static file is — the request-finished signal, so
    the page's database connection is back in the pool before its answer is sent. A streamed answer is
    closed after it is sent, as Django does.

    Django's handler runs a request's sync code in a thread made for that request (asgiref's
    `ThreadSensitiveContext`: a new single-thread executor per request, shut down at its end); the
    page threads live as long as the process. Nor does this handler listen for the client going away
    meanwhile: a sync view is not interrupted by that anyway (Django only cancels the task awaiting it)."""

    def load_middleware(self, is_async: bool = False) -> None:
        super().load_middleware(is_async=False)

    async def handle(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        try:
            body_file = await self.read_body(receive)
        except RequestAborted:
            return
        set_script_prefix(get_script_prefix(scope))
        try:
            response = await _in_page_thread(self._serve)(scope, body_file)
            try:
                await self.send_response(response, send)
            finally:
                if response.streaming:
                    await _in_page_thread(response.close)()
        finally:
            body_file.close()

    def _serve(self, scope: dict[str, Any], body_file: Any) -> Any:
        try:
            signals.request_started.send(sender=self.__class__, scope=scope)
            request, response = self.create_request(scope, body_file)
            if request is not None:
                response = self.get_response(request)
        except BaseException:
            close_old_connections()
            raise
        response._handler_class = self.__class__  # (the sender of request_finished)
        if isinstance(response, FileResponse):
            response.block_size = self.chunk_size
        if response.streaming:
            close_old_connections()  # (its request_finished comes after sending, maybe in another thread)
        else:
            response.close()  # request_finished: the connection back to the pool
        return response


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
