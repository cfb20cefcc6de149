"""Agent-side client of the approval gateway (docs/reference/client.md). Needs only httpx (and tenacity).

- `GatewayClient` / `AsyncGatewayClient`: the agent API; `pre_tool_use(...)`
  returns the final `Decision`, waiting for a human as needed; `ask(...)` asks a
  human a question and returns the typed answer (docs/asking.md).
- `requires_approval`: a decorator that gates any function as a tool.
- `ToolGate`: one tool call through the gateway (ask, run with the answered
  arguments, report), the engine of the integrations below.
- `python -m gateway_client.claude_code`: a Claude Code PreToolUse /
  PermissionRequest hook command.
- `python -m gateway_client.mcp_proxy`: an MCP proxy that gates any MCP server.
- `gateway_client.openai_agents`, `gateway_client.langchain`: adapters for the
  OpenAI Agents SDK and LangChain v1 (their frameworks are optional).

`pip install approval-gateway-client` (extras `[openai-agents]`, `[langchain]`,
`[mcp]`); the commands `gateway-mcp-proxy` and `gateway-claude-code` are the
two `python -m` forms above. `__version__` is the client's version; a gateway
older than `MIN_GATEWAY_VERSION` is refused (`GatewayTooOld`).

See docs/agent-client.md and docs/integrations/.
"""

from gateway_client.client import AsyncGatewayClient, GatewayClient
from gateway_client.decisions import Answer, Decision
from gateway_client.decorators import requires_approval
from gateway_client.errors import (
    AlreadyDecided,
    Conflict,
    Forbidden,
    GatewayAPIError,
    GatewayClientError,
    GatewayTooOld,
    GatewayUnavailable,
    IdempotencyKeyReused,
    InvalidRequest,
    NoAnswer,
    NotFound,
    ServerError,
    ToolDenied,
    Unauthorized,
)
from gateway_client.gating import GateResult, ToolGate, ToolRunAborted
from gateway_client.version import MIN_GATEWAY_VERSION, __version__

__all__ = [
    "MIN_GATEWAY_VERSION",
    "__version__",
    "AlreadyDecided",
    "Answer",
    "NoAnswer",
    "AsyncGatewayClient",
    "Conflict",
    "Decision",
    "Forbidden",
    "GateResult",
    "GatewayAPIError",
    "GatewayClient",
    "GatewayClientError",
    "GatewayTooOld",
    "GatewayUnavailable",
    "IdempotencyKeyReused",
    "InvalidRequest",
    "NotFound",
    "ServerError",
    "ToolDenied",
    "ToolGate",
    "ToolRunAborted",
    "Unauthorized",
    "requires_approval",
]
