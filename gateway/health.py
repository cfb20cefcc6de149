"""`/healthz` (the process is alive) and `/readyz` (its dependencies answer).

`/readyz` also shows the state of each channel's outbound connection (Slack
Socket Mode, the Feishu long connection, Telegram's long polling), as `channel_connections` processes
report it. Those states do not change its status code: the connections live
in another process, and a Slack outage must not take this server out of a load
balancer. Alert on `connections.<name>.state != "connected"` instead.
"""

from __future__ import annotations

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import connection
from django.http import JsonResponse

from channels_ext.connections.status import connection_states
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
