"""ASGI entry point `gateway.asgi:application`: HTTP (Django behind the thin
waiting layer, and the MCP endpoint `/mcp`) and WebSocket (Channels)."""

import gc
import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gateway.settings")

from django.core.asgi import get_asgi_application  # noqa: E402

from gateway_utils import tracing  # noqa: E402

tracing.configure()  # off unless OTEL_* variables ask for traces

django_asgi_app = get_asgi_application()

from gateway.startup import apply_startup_config, check_audit_key  # noqa: E402

check_audit_key()
apply_startup_config()

from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402

from approvals.api.asgi import AgentApiMiddleware  # noqa: E402
from approvals.api.mcp import McpEndpoint  # noqa: E402
from gateway.pages import PagesRouter, SyncChainHandler  # noqa: E402
from gateway.routing import websocket_urlpatterns  # noqa: E402
from gateway.version_header import VersionHeader  # noqa: E402

application = ProtocolTypeRouter(
    {
        "http": VersionHeader(AgentApiMiddleware(McpEndpoint(PagesRouter(django_asgi_app, SyncChainHandler())))),
        "websocket": VersionHeader(URLRouter(websocket_urlpatterns)),
    }
)

# Everything loaded so far (Django, the apps, the vendor SDKs: ~190,000 objects) lives as long as the
# process. Frozen, the collector never walks it again: a full collection took ~130 ms of the one core a
# request was waiting on — the tail of an approver's click (docs/architecture.md, "What a server process
# does to stay fast").
gc.collect()
gc.freeze()

