"""WebSocket routes."""

websocket_urlpatterns: list = []
