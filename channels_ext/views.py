"""`/channels/<name>/callback`: the Slack Request URL, the Feishu card callback URL, the Telegram
webhook, and the links of e-mail messages.

A POST is a click (`handle_callback`, which may decide). A GET or HEAD is answered
only for kinds whose messages carry links (`ChannelAdapter.opens_links`), and only
with a page that shows the request (`handle_link`, which is given no way to decide):
a link previewer or a mail scanner that fetches the URL changes nothing.
"""

from __future__ import annotations

import logging

from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_http_methods

from approvals import selectors, services
from approvals.errors import error_body
from gateway_contract import Callback, CallbackError, CardView, DecisionOutcome

logger = logging.getLogger("channels_ext")


@csrf_exempt
@require_http_methods(["GET", "HEAD", "POST"])
def channel_callback(request: HttpRequest, name: str) -> HttpResponse:
    channel = selectors.channel_lookup(name=name)
    if channel is None:
        return JsonResponse(error_body("not_found", f"no channel named {name!r}"), status=404)
    adapter = selectors.channel_adapter(channel)
    if request.method != "POST" and not adapter.opens_links:
        return HttpResponseNotAllowed(["POST"])

    def decide(callback: Callback) -> DecisionOutcome:
        return services.confirmation_respond(channel_name=channel.name, callback=callback)

    def show(confirmation_id: str) -> CardView | None:
        confirmation = selectors.confirmation_lookup(confirmation_id=confirmation_id)  # (None for junk)
        if confirmation is None:
            return None
        return selectors.card_view(selectors.card_owner(confirmation), channel_name=channel.name)

    try:
        if request.method == "POST":
            return adapter.handle_callback(request, decide)
        return adapter.handle_link(request, show)
    except CallbackError as exc:
        # Log the reason, never the secret or the signature.
        logger.warning("callback refused on channel %s: %s", channel.name, exc.message)
        return JsonResponse(error_body("callback_refused", exc.message), status=exc.status)
