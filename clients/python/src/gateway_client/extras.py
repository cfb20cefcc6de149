"""The optional parts of the package: each extra of `approval-gateway-client` (clients/python/pyproject.toml)
and the error a module raises when the packages of its extra are not installed."""

from __future__ import annotations

DISTRIBUTION = "approval-gateway-client"
EXTRAS = {  # extra -> what it brings
    "openai-agents": "the OpenAI Agents SDK (gateway_client.openai_agents)",
    "langchain": "LangChain v1 and LangGraph (gateway_client.langchain)",
    "mcp": "the MCP Python SDK (gateway_client.mcp_proxy, the gateway-mcp-proxy command)",
}


def install_line(extra: str) -> str:
    """The one command that installs the client with `extra`: `pip install 'approval-gateway-client[mcp]'`."""
    return f"pip install '{DISTRIBUTION}[{extra}]'"


class MissingExtra(ImportError):
    """A module of the client was imported without the packages of its extra (an `ImportError`, so code
    that guards an optional import keeps working)."""

    def __init__(self, module: str, extra: str, missing: str | None = None):
        needs = EXTRAS[extra].split(" (")[0]
        why = f" (no module named {missing!r})" if missing else ""
        super().__init__(f"{module} needs {needs}{why}: {install_line(extra)}", name=missing)
        self.module = module
        self.extra = extra
