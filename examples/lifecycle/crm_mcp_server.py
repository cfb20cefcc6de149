"""A stand-in CRM as an MCP server over stdio, for examples/lifecycle/session-start.yaml.

    .venv/bin/python examples/lifecycle/crm_mcp_server.py   # speaks MCP on stdin/stdout
"""

from mcp.server.mcpserver import MCPServer

server = MCPServer("crm")


@server.tool()
def get_customer_profile(customer_id: str) -> str:
    """A customer's plan and open tickets."""
    return f"customer {customer_id}: plan gold since 2019; open tickets: 2 (billing, login)"


if __name__ == "__main__":
    server.run("stdio")
