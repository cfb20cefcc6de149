"""A trivial MCP server over stdio for `make bench`'s proxy part (bench/parts/proxy.py): newline-delimited
JSON-RPC, nothing but the handshake, `tools/list` and two tools — `search` answers at once, `slow` after
`seconds` (default 0.1) without holding up other calls. As cheap as an upstream can be, so what the
measurement sees is the relay in front of it."""

from __future__ import annotations

import asyncio
import json
import sys

TOOLS = [
    {"name": "search", "description": "Answers at once.", "inputSchema": {"type": "object"}},
    {"name": "slow", "description": "Answers after `seconds`.", "inputSchema": {"type": "object"}},
]


async def answer(request: dict, write) -> None:
    method, params = request.get("method"), request.get("params") or {}
    if method == "initialize":
        result = {
            "protocolVersion": params.get("protocolVersion", "2025-06-18"),
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "bench-upstream", "version": "1"},
        }
    elif method == "tools/list":
        result = {"tools": TOOLS}
    elif method == "tools/call":
        arguments = params.get("arguments") or {}
        if params.get("name") == "slow":
            await asyncio.sleep(float(arguments.get("seconds", 0.1)))
        result = {"content": [{"type": "text", "text": json.dumps(arguments)}], "isError": False}
    elif method == "ping":
        result = {}
    else:
        write({"jsonrpc": "2.0", "id": request["id"], "error": {"code": -32601, "message": f"no {method}"}})
        return
    write({"jsonrpc": "2.0", "id": request["id"], "result": result})


async def main() -> None:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)

    def write(message: dict) -> None:
        sys.stdout.write(json.dumps(message) + "\n")
        sys.stdout.flush()

    tasks = set()
    while line := await reader.readline():
        message = json.loads(line)
        if "id" in message and "method" in message:  # a request (notifications need no answer)
            task = asyncio.create_task(answer(message, write))
            tasks.add(task)
            task.add_done_callback(tasks.discard)


if __name__ == "__main__":
    asyncio.run(main())
