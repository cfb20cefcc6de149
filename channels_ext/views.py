"""`POST /channels/<name>/callback`: the Slack Request URL and the Feishu card callback URL."""

from __future__ import annotations

import logging

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from approvals import selectors, services
from approvals.api.errors import error_body
from approvals.models import Channel
from channels_ext.base import Callback, CallbackError, DecisionOutcome

logger = logging.getLogger("channels_ext")


@csrf_exempt
@require_POST
def channel_callback(request: HttpRequest, name: str) -> HttpResponse:
    channel = Channel.objects.filter(name=name).first()
    if channel is None:
        return JsonResponse(error_body("not_found", f"no channel named {name!r}"), status=404)
    adapter = selectors.channel_adapter(channel)

    def decide(callback: Callback) -> DecisionOutcome:
        return services.confirmation_respond(channel_name=channel.name, callback=callback)

    try:
        return adapter.handle_callback(request, decide)
    except CallbackError as exc:
        # Log the reason, never the secret or the signature.
        logger.warning("callback refused on channel %s: %s", channel.name, exc.message)
        return JsonResponse(error_body("callback_refused", exc.message), status=exc.status)
