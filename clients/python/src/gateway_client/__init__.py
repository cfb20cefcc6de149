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

See docs/agent-client.md and docs/integrations/.
"""

from gateway_client.client import (
    AlreadyDecided,
    Answer,
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
    NoAnswer,
    NotFound,
    ServerError,
    ToolDenied,
    Unauthorized,
)
from gateway_client.decorators import requires_approval
from gateway_client.gating import GateResult, ToolGate, ToolRunAborted

__all__ = [
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
