"""A real MCP client (the MCP SDK's, from this virtualenv) that launches `gateway-mcp-proxy` BY NAME, as an
MCP client's config does, in front of the echo MCP server; it lists the tools, calls `pay_invoice` (gated:
it waits for a person) and `ask_human` (a person answers). One JSON line per step.

    python mcp_session.py LOG_FILE      # GATEWAY_URL, GATEWAY_API_KEY and PATH from the environment
"""

import json
import os
import sys

import anyio
from mcp import Client, StdioServerParameters


def text(result) -> str:
    return "\n".join(block.text for block in result.content if block.type == "text")


async def main(log_file: str) -> None:
    proxy = StdioServerParameters(
        command="gateway-mcp-proxy",  # found on the PATH
        args=["--name", "billing", "--ask-human", "--", sys.executable, "echo_mcp_server.py", log_file],
        env={name: os.environ[name] for name in ("GATEWAY_URL", "GATEWAY_API_KEY", "PATH")},
    )
    async with Client(proxy, read_timeout_seconds=120) as client:
        tools = [tool.name for tool in (await client.list_tools()).tools]
        print(json.dumps({"tools": tools}), flush=True)
        paid = await client.call_tool("pay_invoice", {"invoice_id": "INV-7", "amount": 120})
        print(json.dumps({"paid": text(paid), "is_error": paid.is_error}), flush=True)
        question = {"question": "Which vendor?", "choices": ["Acme", "Globex"], "several": False}
        asked = await client.call_tool("ask_human", question)
        print(json.dumps({"asked": text(asked), "is_error": asked.is_error}), flush=True)


anyio.run(main, sys.argv[1])
