"""A tiny real MCP server (the `mcp` package's MCPServer, formerly FastMCP) for the tests.

    mcp_server.py CALLS_FILE              # over stdio
    mcp_server.py CALLS_FILE PORT         # streamable HTTP at http://127.0.0.1:PORT/mcp

Every call of a tool is appended to CALLS_FILE, so a test can count how often
the gateway really called it.
"""

import sys

from mcp.server.mcpserver import MCPServer

CALLS_FILE = sys.argv[1]
server = MCPServer("lifecycle-test-tools")


def _count(name: str) -> None:
    with open(CALLS_FILE, "a", encoding="utf-8") as calls:
        calls.write(name + "\n")


@server.tool()
def get_customer_profile(customer_id: str) -> str:
    """The customer's profile, as text."""
    _count("get_customer_profile")
    return f"customer {customer_id}: plan gold, since 2019"


@server.tool()
def broken() -> str:
    """Always fails."""
    _count("broken")
    raise RuntimeError("the CRM is down")


if __name__ == "__main__":
    if len(sys.argv) > 2:
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        server.run("stdio")
