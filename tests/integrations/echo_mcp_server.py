"""A naive MCP server over stdio, for the proxy's tests: `python echo_mcp_server.py LOG_FILE [--linger]`.

Written without the MCP SDK on purpose: it runs every `tools/call` it reads, whatever its id (none,
null, a float, inside a batch) — as a careless server might — so a test sees any call that reached it
without the gateway. Each tool answers with the arguments it was called with, as JSON text and as
structured content. `LOG_FILE` gets one JSON line per event: `{"pid": …}` at start, `{"received": line}`
for every line read, `{"ran": tool, "arguments": …}` for every call run, `{"eof": true}` when stdin closes.
With `--linger` it does not exit when stdin closes (as a careless server might not): it has to be stopped.

Besides answering each call at once, three tools behave otherwise: `crash` exits (status 3) without
answering; `notify` sends a `notifications/message` before its answer; `hold` is answered only after
the next `release` call's own answer (so two calls in flight are answered in the other order) — as is any
request whose params say `"hold": true`. It ignores `notifications/cancelled`: what it holds is answered.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

TOOLS = [
    {
        "name": name,
        "description": description,
        "inputSchema": {"type": "object", "additionalProperties": True},
    }
    for name, description in (("pay_invoice", "Pay an invoice."), ("delete_customer", "Delete a customer."))
]


def main(log_path: str, linger: bool = False) -> None:
    with open(log_path, "a", buffering=1) as log:

        def note(**event: Any) -> None:
            log.write(json.dumps(event) + "\n")

        def send(message: dict[str, Any]) -> None:
            sys.stdout.write(json.dumps(message) + "\n")
            sys.stdout.flush()

        note(pid=os.getpid())
        held: list[dict[str, Any]] = []
        for line in sys.stdin:
            note(received=line.rstrip("\n"))
            try:
                data = json.loads(line)
            except ValueError:
                continue
            for message in data if isinstance(data, list) else [data]:
                if not isinstance(message, dict) or "method" not in message:
                    continue  # a response to a request of ours (we make none), or junk
                tool = (message.get("params") or {}).get("name") if message["method"] == "tools/call" else None
                if tool == "crash":
                    note(ran="crash")
                    os._exit(3)
                if tool == "notify":
                    send({"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": "hi"}})
                answer = handle(message, note)
                if tool == "hold" or (message.get("params") or {}).get("hold") is True:
                    held.append({"jsonrpc": "2.0", "id": message["id"], **answer})
                    continue
                if "id" in message and answer is not None:
                    send({"jsonrpc": "2.0", "id": message["id"], **answer})
                if tool == "release":
                    for later in held:
                        send(later)
                    held.clear()
        note(eof=True)
        while linger:
            time.sleep(60)


def handle(message: dict[str, Any], note: Any) -> dict[str, Any] | None:
    method, params = message["method"], message.get("params") or {}
    if method == "tools/call":
        arguments = params.get("arguments") or {}
        note(ran=params.get("name"), arguments=arguments)
        text = json.dumps(arguments, sort_keys=True)
        return {"result": {"content": [{"type": "text", "text": text}], "structuredContent": arguments}}
    if method == "initialize":
        return {
            "result": {
                "protocolVersion": params.get("protocolVersion", "2025-06-18"),
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "echo", "version": "1.0"},
            }
        }
    if method == "tools/list":
        return {"result": {"tools": TOOLS}}
    if method == "ping":
        return {"result": {}}
    if method.startswith("notifications/"):
        return None
    return {"error": {"code": -32601, "message": f"method not found: {method}"}}


if __name__ == "__main__":
    main(sys.argv[1], linger="--linger" in sys.argv[2:])
