"""The gateway's URLs plus one bench-only view: the baseline for pre-tool-use throughput.

`POST /bench/insert?agent=<id>` is the smallest honest Django async view that
writes: no auth, no validation, one INSERT of an audit row, a JSON answer —
through the same middleware and server as the product's views.
"""

from django.http import JsonResponse
from django.urls import path
from django.views.decorators.csrf import csrf_exempt

from approvals.models import ToolCall
from gateway.urls import urlpatterns as gateway_urlpatterns


@csrf_exempt
async def insert_one(request):
    row = await ToolCall.objects.acreate(
        agent_id=int(request.GET["agent"]), session_id="bench", tool_name="bench__insert", decision="allow"
    )
    return JsonResponse({"id": str(row.pk)})


urlpatterns = [path("bench/insert", insert_one), *gateway_urlpatterns]
