"""`bench.bare:application`: the reference the allow path is measured against (docs/waiting.md).

The smallest honest Django 5 async view that does what an allowed tool call must:
no middleware, Django's psycopg pool, validate a small JSON body, INSERT one
audit row through the ORM, answer JSON. It runs in its own server process (its
settings have no middleware at all) beside the gateway in the same benchmark run.
"""

import json
import os

os.environ["DJANGO_SETTINGS_MODULE"] = "bench.bare_settings"

import django  # noqa: E402
from django.core.asgi import get_asgi_application  # noqa: E402

django.setup()

from django.http import HttpResponseBadRequest, JsonResponse  # noqa: E402
from django.urls import path  # noqa: E402

from approvals.models import ToolCall  # noqa: E402


async def insert_one(request):
    try:
        body = json.loads(request.body)
    except ValueError:
        return HttpResponseBadRequest("not JSON")
    if not isinstance(body, dict) or not isinstance(body.get("session_id"), str) or not isinstance(
        body.get("tool_name"), str
    ) or not isinstance(body.get("tool_args", {}), dict):
        return HttpResponseBadRequest("session_id and tool_name must be strings, tool_args an object")
    row = await ToolCall.objects.acreate(
        agent_id=int(request.GET["agent"]),
        session_id=body["session_id"],
        tool_name=body["tool_name"],
        tool_args=body.get("tool_args", {}),
        decision="allow",
    )
    return JsonResponse({"decision": "allow", "id": str(row.pk)})


urlpatterns = [path("bare/insert", insert_one)]
application = get_asgi_application()
