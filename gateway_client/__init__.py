"""Agent-side client of the approval gateway (docs/reference/client.md). Needs only httpx (and tenacity).

- `GatewayClient` / `AsyncGatewayClient`: the agent API; `pre_tool_use(...)`
  returns the final `Decision`, waiting for a human as needed.
- `requires_approval`: a decorator that gates any function as a tool.
- `python -m gateway_client.claude_code`: a Claude Code PreToolUse /
  PermissionRequest hook command.

See docs/agent-client.md.
"""

from gateway_client.client import (
    AlreadyDecided,
    AsyncGatewayClient,
    Conflict,
    Decision,
    Forbidden,
    GatewayAPIError,
    GatewayClient,
    GatewayClientError,
    GatewayUnavailable,
    IdempotencyKeyReused,
    InvalidRequest,
    NotFound,
    ServerError,
    ToolDenied,
    Unauthorized,
)
from gateway_client.decorators import requires_approval

__all__ = [
    "AlreadyDecided",
    "AsyncGatewayClient",
    "Conflict",
    "Decision",
    "Forbidden",
    "GatewayAPIError",
    "GatewayClient",
    "GatewayClientError",
    "GatewayUnavailable",
    "IdempotencyKeyReused",
    "InvalidRequest",
    "NotFound",
    "ServerError",
    "ToolDenied",
    "Unauthorized",
    "requires_approval",
]
