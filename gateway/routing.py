"""WebSocket routes (served by Channels from `gateway.asgi`)."""

from django.urls import path

from approvals.consumers import ConfirmationConsumer

websocket_urlpatterns = [
    path("ws/v1/confirmations/<str:confirmation_id>", ConfirmationConsumer.as_asgi(), name="ws-confirmation"),
]
