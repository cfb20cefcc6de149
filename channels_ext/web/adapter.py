"""The `web` channel: the approval page is the card; approvers are Django users."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse

from gateway_contract import CallbackError, CardView, ChannelAdapter, Decide, MessageRef
from channels_ext.web.config import WebChannelConfig


class WebAdapter(ChannelAdapter):
    """Nothing to post: the request's page (`card.url`) shows it to signed-in approvers."""

    kind = "web"
    config_model = WebChannelConfig

    def post_card(self, card: CardView, *, idempotency_key: str) -> MessageRef:
        return MessageRef({"url": card.url})

    def update_card(self, card: CardView, ref: MessageRef) -> None:
        """The page reads the row itself and refreshes when it changes."""

    def handle_callback(self, request: HttpRequest, decide: Decide) -> HttpResponse:
        raise CallbackError(404, "web approvals are made on the approval page, not through a callback")
