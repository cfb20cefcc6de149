"""`/healthz` (the process is alive), `/readyz` (its dependencies answer) and `/metrics` (Prometheus).

`/readyz` also shows the state of each channel's outbound connection (Slack
Socket Mode, the Feishu long connection, Telegram's long polling), as `channel_connections` processes
report it. Those states do not change its status code: the connections live
in another process, and a Slack outage must not take this server out of a load
balancer. Alert on `connections.<name>.state != "connected"` instead.
"""

from __future__ import annotations

import hmac
from collections.abc import Iterator

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.conf import settings
from django.db import connection
from django.http import HttpResponse, JsonResponse
from django.utils import timezone
from prometheus_client.core import Metric

from approvals.api.auth import bearer_token
from approvals.api.errors import error_body
from approvals.selectors import pending_by_channel
from gateway_contract.links import CONNECTED
from channels_ext.connections.status import connection_states
from gateway_utils import metrics
from gateway.celery import app as celery_app


def healthz(request):
    return JsonResponse({"status": "ok"})


def readyz(request):
    checks: dict[str, str] = {}
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        checks["database"] = "ok"
    except Exception as exc:
        checks["database"] = f"error: {exc}"
    try:
        with celery_app.connection_for_write() as conn:
            conn.ensure_connection(max_retries=1, timeout=2)
        checks["broker"] = "ok"
    except Exception as exc:
        checks["broker"] = f"error: {exc}"
    try:
        layer = get_channel_layer()
        async_to_sync(layer.send)("readyz.probe", {"type": "readyz.probe"})
        checks["channel_layer"] = "ok"
    except Exception as exc:
        checks["channel_layer"] = f"error: {exc}"
    ready = all(v == "ok" for v in checks.values())
    body: dict = {"status": "ok" if ready else "unavailable", "checks": checks}
    if checks["database"] == "ok":
        try:
            connections = connection_states()
        except Exception as exc:  # e.g. not migrated yet
            connections = {"error": f"{type(exc).__name__}: {exc}"}
        if connections:
            body["connections"] = connections
    return JsonResponse(body, status=200 if ready else 503)


def metrics_view(request):
    """`GET /metrics`: the Prometheus text exposition, for a scraper holding GATEWAY_METRICS_TOKEN.

    Off (404) while no token is set: the counts name agents and channels, so they are not shown to
    whoever can reach the server (docs/operating.md, "Metrics")."""
    token = settings.GATEWAY_METRICS_TOKEN
    if not token:
        return JsonResponse(
            error_body("not_found", "metrics are off: set GATEWAY_METRICS_TOKEN"),
            status=404,
        )
    given = bearer_token(request.headers.get("Authorization")) or ""
    if not hmac.compare_digest(given.encode(), token.encode()):
        response = JsonResponse(
            error_body(
                "unauthorized",
                "missing or wrong 'Authorization: Bearer <metrics token>'",
            )
        )
        response.status_code = 401
        response["WWW-Authenticate"] = 'Bearer realm="metrics"'
        return response
    return HttpResponse(
        metrics.exposition(_database_now), content_type=metrics.CONTENT_TYPE
    )


def _database_now() -> Iterator[Metric]:
    """What is true now, read from the database: pending requests and their age, each channel link's state."""
    now = timezone.now()
    pending = pending_by_channel()
    yield metrics.gauge(
        "gateway_pending_requests",
        "Confirmation requests waiting for a decision, by channel.",
        ["channel"],
        (([name], count) for name, (count, _) in sorted(pending.items())),
    )
    yield metrics.gauge(
        "gateway_pending_oldest_age_seconds",
        "Age of the oldest request waiting for a decision, by channel (0 when none is waiting).",
        ["channel"],
        (
            ([name], (now - oldest).total_seconds() if oldest else 0.0)
            for name, (_, oldest) in sorted(pending.items())
        ),
    )
    links = connection_states()
    yield metrics.gauge(
        "gateway_channel_link_up",
        "1 while a channel_connections process holds the channel's link (Socket Mode, long connection, "
        "stream, polling) connected, else 0; by channel and mode.",
        ["channel", "mode"],
        (
            ([name, state["mode"]], 1.0 if state["state"] == CONNECTED else 0.0)
            for name, state in sorted(links.items())
        ),
    )
    yield metrics.gauge(
        "gateway_channel_link_processes",
        "How many channel_connections processes hold the channel's link connected.",
        ["channel", "mode"],
        (
            ([name, state["mode"]], float(state["processes"]))
            for name, state in sorted(links.items())
        ),
    )
