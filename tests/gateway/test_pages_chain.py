"""The web pages run Django's middleware chain synchronously, in one hop to a thread; everything else
keeps Django's async chain (gateway/pages.py). The pages themselves are driven end to end by the
browser and page tests (tests/channels_ext/web), through `gateway.asgi:application`."""

from __future__ import annotations

import pytest
from asgiref.sync import iscoroutinefunction

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
