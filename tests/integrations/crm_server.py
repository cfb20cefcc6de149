"""A small CRM as an MCP server over streamable HTTP (the MCP SDK's own `MCPServer` under uvicorn, on
127.0.0.1): the upstream the proxy reaches with `--upstream-url`. It records every tool call it runs,
so a test can show a refused call never reached it, and every HTTP request it serves (method and MCP
session), so a test can see a session ended."""

from __future__ import annotations

import asyncio
import socket
import threading
import time

import uvicorn
from mcp.server.mcpserver import Context, MCPServer

PROFILE = (
    "Customer {customer_id}: plan gold since 2019; owner Dana Ruiz; open tickets: billing (2), login (1); "
    "renewal due in March; last contact 3 days ago about the invoice dispute; notes: prefers email, "
    "escalate billing issues to finance; NPS 9."
)


class CrmServer:
    def __init__(self) -> None:
        self.calls: list[tuple[str, dict]] = []
        self.requests: list[tuple[str, str | None]] = []  # (HTTP method, Mcp-Session-Id)
        server = MCPServer("crm", version="1.0")

        @server.tool(structured_output=False)
        async def lookup(customer_id: str, ctx: Context) -> str:
            """A customer's profile."""
            self.calls.append(("lookup", {"customer_id": customer_id}))
            await ctx.report_progress(1, 2, "reading the profile")
            await ctx.report_progress(2, 2, "done")
            return PROFILE.format(customer_id=customer_id)

        @server.tool(structured_output=False)
        def delete_customer(customer_id: str) -> str:
            """Delete a customer and all their data."""
            self.calls.append(("delete_customer", {"customer_id": customer_id}))
            return f"deleted {customer_id}"

        @server.resource("crm://customers/{customer_id}", mime_type="text/plain")
        def customer(customer_id: str) -> str:
            """A customer record."""
            return f"record of {customer_id}"

        @server.prompt()
        def follow_up(customer_id: str) -> str:
            """Draft a follow-up to a customer."""
            return f"Write a short follow-up email to customer {customer_id}."

        self.server = server
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        self.sock = sock
        self.port = sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        app = server.streamable_http_app()

        async def recorded(scope, receive, send):
            if scope["type"] == "http":
                session = dict(scope["headers"]).get(b"mcp-session-id")
                self.requests.append((scope["method"], session.decode() if session else None))
            await app(scope, receive, send)

        # An open SSE stream holds a graceful stop: a second is plenty.
        config = uvicorn.Config(recorded, log_level="warning", lifespan="on", timeout_graceful_shutdown=1)
        self.uvicorn = uvicorn.Server(config)
        self.thread = threading.Thread(
            target=lambda: asyncio.run(self.uvicorn.serve(sockets=[sock])), name="crm-mcp", daemon=True
        )

    def start(self) -> CrmServer:
        self.thread.start()
        deadline = time.monotonic() + 15
        while not self.uvicorn.started:
            if time.monotonic() > deadline:
                raise RuntimeError("the CRM MCP server did not start")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        self.uvicorn.should_exit = True
        self.thread.join(timeout=10)
