"""The web pages run Django's middleware chain synchronously, in one hop to a thread; everything else
keeps Django's async chain (gateway/pages.py). The pages themselves are driven end to end by the
browser and page tests (tests/channels_ext/web), through `gateway.asgi:application`."""

from __future__ import annotations

import threading

import pytest
from asgiref.sync import async_to_sync, iscoroutinefunction
from django.db import connection
from django.urls import path

from gateway.pages import SYNC_PAGE_PREFIXES, SyncChainHandler


@pytest.mark.django_db
def test_the_pages_chain_is_one_sync_call_and_the_rest_keeps_the_async_one():
    from django.core.asgi import get_asgi_application

    pages, django = SyncChainHandler(), get_asgi_application()

    assert not iscoroutinefunction(pages._middleware_chain)  # middleware and view: one sync call
    assert iscoroutinefunction(django._middleware_chain)  # (the Claude Code hook's async view is served here)
    assert "/approvals/" in SYNC_PAGE_PREFIXES
    assert not any(prefix.startswith(("/api/", "/admin/", "/channels/", "/mcp")) for prefix in SYNC_PAGE_PREFIXES)


def test_the_served_app_freezes_what_it_loaded_so_the_collector_never_walks_it_again():
    import gc

    import gateway.asgi  # noqa: F401 - the app as uvicorn loads it

    assert gc.get_freeze_count() > 50_000  # Django, the apps and the SDKs, out of every full collection


# --------------------------------------------------------------------------- one hop


def scope(path: str) -> dict:
    return {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "GET", "scheme": "http",
        "path": path, "raw_path": path.encode(), "query_string": b"", "root_path": "",
        "headers": [(b"host", b"testserver")], "client": ("127.0.0.1", 40000), "server": ("127.0.0.1", 80),
    }  # fmt: skip


async def served(app, path: str, events: list) -> tuple[int, bytes]:
    """`path` through the ASGI `app`, in process; what the app sends is noted in `events`."""
    from asgiref.testing import ApplicationCommunicator

    async def noting(scope, receive, send):
        async def send_noted(message):
            events.append((message["type"], threading.current_thread().name))
            await send(message)

        await app(scope, receive, send_noted)

    communicator = ApplicationCommunicator(noting, scope(path))
    await communicator.send_input({"type": "http.request", "body": b""})
    start = await communicator.receive_output(10)
    body = b""
    while True:
        message = await communicator.receive_output(10)
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    await communicator.wait(10)
    return start["status"], body


@pytest.fixture
def signals_noted():
    from django.core import signals

    events: list = []

    def started(**kwargs):
        events.append(("request_started", threading.current_thread().name))

    def finished(**kwargs):
        events.append(("request_finished", threading.current_thread().name))

    signals.request_started.connect(started)
    signals.request_finished.connect(finished)
    yield events
    signals.request_started.disconnect(started)
    signals.request_finished.disconnect(finished)


@pytest.mark.django_db(transaction=True)
def test_a_page_is_served_in_one_hop_to_a_lasting_thread_its_connection_given_back_before_its_answer(signals_noted):
    handler = SyncChainHandler()
    for _ in range(2):
        status, body = async_to_sync(served)(handler, "/login/", signals_noted)
        assert status == 200 and b"csrfmiddlewaretoken" in body
        stats = connection.pool.get_stats()
        # every connection but this test's own is back in the pool: the page threads keep none
        assert stats["pool_available"] >= stats["pool_size"] - 1, stats

    first, second = signals_noted[:4], signals_noted[4:]
    for events in (first, second):
        kinds = [kind for kind, _ in events]
        # the connection is handed out and given back (request_started / _finished) in the page's
        # own hop, before a byte of the answer is sent
        assert kinds == ["request_started", "request_finished", "http.response.start", "http.response.body"]
        assert events[0][1] == events[1][1] and events[0][1].startswith("gateway-page")  # one thread, a lasting one


def streamed(request):
    from django.contrib.auth import get_user_model
    from django.http import StreamingHttpResponse

    get_user_model().objects.count()  # (a connection taken)
    return StreamingHttpResponse(iter([b"one ", b"two"]))


urlpatterns = [path("approvals/streamed/", streamed)]


@pytest.mark.django_db(transaction=True)
@pytest.mark.filterwarnings("ignore:StreamingHttpResponse must consume synchronous iterators")
def test_a_streamed_page_is_sent_whole_and_finished_after_it_is_sent(signals_noted, settings):
    settings.ROOT_URLCONF = __name__

    status, body = async_to_sync(served)(SyncChainHandler(), "/approvals/streamed/", signals_noted)

    assert (status, body) == (200, b"one two")
    kinds = [kind for kind, _ in signals_noted]
    assert kinds[0] == "request_started" and kinds[-1] == "request_finished"  # closed after it was sent
    assert kinds.count("http.response.body") >= 2
