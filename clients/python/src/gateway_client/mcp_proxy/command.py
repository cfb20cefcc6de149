"""The command: `gateway-mcp-proxy --name NAME [options] -- UPSTREAM_COMMAND [ARGS…]` (or `python -m
gateway_client.mcp_proxy`, the same arguments; `--upstream-url URL` for an upstream over streamable HTTP).
It reads its options, starts the upstream, and serves the client on stdin and stdout until either side
closes: exit 0 when the client did, 1 when the upstream did, 2 for bad options."""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import re
import sys
import uuid
from collections.abc import AsyncIterator, Sequence
from typing import Any

import anyio
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from gateway_client.asking import HumanAsker
from gateway_client.client import AsyncGatewayClient
from gateway_client.gating import ToolGate
from gateway_client.mcp_proxy.gating import DEFAULT_MAX_WAIT, DEFAULT_PROGRESS_INTERVAL, McpGatewayProxy
from gateway_client.mcp_proxy.transport import ClientStdio, HttpStamp, SessionWatch
from gateway_client.mcp_proxy.upstream import stdio_upstream

DEFAULT_RECONNECT_FOR = 10.0
REQUEST_TIMEOUT = 10.0
NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]*$")
USAGE_ERROR = 2


@contextlib.asynccontextmanager
async def upstream_streams(
    args: argparse.Namespace, session_watch: SessionWatch | None = None
) -> AsyncIterator[tuple[Any, Any]]:
    """The upstream's (read, write) streams: its command started, or its URL (watched by `session_watch`)."""
    if args.upstream_url:
        import httpx2  # the MCP SDK's HTTP client

        headers = dict(_header(h) for h in args.upstream_header)
        # The SDK's own defaults: 30 s to connect and send, 300 s to read (a response may be an SSE stream).
        timeout = httpx2.Timeout(30.0, read=300.0)
        hooks = {"response": [session_watch.on_response]} if session_watch is not None else {}
        async with httpx2.AsyncClient(headers=headers, timeout=timeout, event_hooks=hooks) as http:
            async with streamable_http_client(args.upstream_url, http_client=http) as streams:
                yield streams
        return
    # The upstream inherits the proxy's environment, but not the gateway key.
    env = {k: v for k, v in os.environ.items() if k != "GATEWAY_API_KEY"}
    if sys.platform != "win32":  # its pipes relayed by the proxy's own tasks (upstream.py)
        async with stdio_upstream(args.upstream, env) as streams:
            yield streams
        return
    command, *command_args = args.upstream
    params = StdioServerParameters(command=command, args=command_args, env=env)
    async with stdio_client(params, errlog=sys.stderr) as streams:  # Windows: the SDK's (a job object)
        yield streams


def _header(text: str) -> tuple[str, str]:
    name, sep, value = text.partition(":")
    if not sep or not name.strip():
        raise SystemExit(f"--upstream-header must look like 'Name: value', not {text!r}")
    return name.strip(), value.strip()


async def run(args: argparse.Namespace) -> int:
    gateway = AsyncGatewayClient(
        args.url, args.api_key, timeout=REQUEST_TIMEOUT, max_wait=args.max_wait, reconnect_for=args.reconnect_for
    )
    gate = ToolGate(
        gateway,
        session_id=args.session_id or f"mcp-{args.name}-{uuid.uuid4().hex[:12]}",
        user_id=args.user_id,
        metadata={"source": "mcp-proxy", "mcp_server": args.name},
        max_wait=args.max_wait,
        key_prefix="mcp-proxy",
    )
    session_watch = SessionWatch() if args.upstream_url else None
    proxy = McpGatewayProxy(
        name=args.name,
        gate=gate,
        max_wait=args.max_wait,
        progress_interval=args.progress_interval,
        stamp=HttpStamp() if args.upstream_url else None,
        session_watch=session_watch,
        asker=(
            HumanAsker(gateway, channel=args.ask_channel, user_id=args.user_id, max_wait=args.max_wait)
            if args.ask_human or args.elicitation == "gateway"
            else None
        ),
        elicitation=args.elicitation,
        offers_ask_human=args.ask_human,
    )
    async with gateway:
        async with upstream_streams(args, session_watch) as (upstream_read, upstream_write):
            async with ClientStdio().open() as client:
                closed = await proxy.serve(client, upstream_read, upstream_write)
    # Leaving `upstream_streams` stopped the upstream: its stdin closed, then terminated if it lingered
    # (upstream.py; the SDK's stdio client on Windows), or its HTTP session ended with a DELETE.
    if closed == "upstream":
        print(f"mcp_proxy: the upstream server {args.name!r} closed the connection", file=sys.stderr)
        return 1
    if closed == "session":
        print(f"mcp_proxy: the upstream server {args.name!r} ended the MCP session", file=sys.stderr)
        return 1
    return 0


def parse_arguments(argv: Sequence[str] | None = None) -> argparse.Namespace:
    argv = list(sys.argv[1:] if argv is None else argv)
    upstream: list[str] = []
    if "--" in argv:
        at = argv.index("--")
        argv, upstream = argv[:at], argv[at + 1 :]
    parser = argparse.ArgumentParser(
        prog="python -m gateway_client.mcp_proxy",
        description="An MCP stdio server in front of an upstream MCP server: every tools/call asks the approval "
        "gateway first.",
        usage="%(prog)s --name NAME [options] -- UPSTREAM_COMMAND [ARGS...]\n"
        "       %(prog)s --name NAME [options] --upstream-url URL",
    )
    parser.add_argument("--name", required=True, help="the upstream's name: its tools are NAME__TOOL in the gateway")
    parser.add_argument("--url", default=os.environ.get("GATEWAY_URL"), help="gateway base URL (env GATEWAY_URL)")
    parser.add_argument(
        "--api-key", default=os.environ.get("GATEWAY_API_KEY"), help="agent API key (env GATEWAY_API_KEY)"
    )
    parser.add_argument("--session-id", help="the gateway session of every call (default: one per proxy process)")
    parser.add_argument("--user-id", default=os.environ.get("GATEWAY_USER_ID"), help="who the calls are made for")
    parser.add_argument(
        "--max-wait",
        type=float,
        default=DEFAULT_MAX_WAIT,
        help=f"seconds a call waits for a human before it is answered as still pending (default {DEFAULT_MAX_WAIT:g})",
    )
    parser.add_argument(
        "--progress-interval",
        type=float,
        default=DEFAULT_PROGRESS_INTERVAL,
        help=f"seconds between progress notifications while waiting (default {DEFAULT_PROGRESS_INTERVAL:g})",
    )
    parser.add_argument(
        "--reconnect-for",
        type=float,
        default=DEFAULT_RECONNECT_FOR,
        help=f"seconds to retry an unreachable gateway before a call fails closed (default {DEFAULT_RECONNECT_FOR:g})",
    )
    parser.add_argument("--upstream-url", help="an upstream MCP server over streamable HTTP, instead of a command")
    parser.add_argument(
        "--upstream-header",
        action="append",
        default=[],
        metavar="'NAME: VALUE'",
        help="an HTTP header for --upstream-url (repeatable), e.g. 'Authorization: Bearer …'",
    )
    parser.add_argument(
        "--ask-human",
        action="store_true",
        help="offer the tool ask_human beside the upstream's: a person answers through the gateway (docs/asking.md)",
    )
    parser.add_argument(
        "--ask-channel",
        help="the gateway channel that asks (ask_human and --elicitation gateway); default: the agent's first gate's",
    )
    parser.add_argument(
        "--elicitation",
        choices=["client", "gateway"],
        default="client",
        help="the upstream's elicitation/create: pass it to the client (default), or ask a person through the gateway",
    )
    parser.add_argument("--log-level", default="WARNING", help="log level on stderr (default WARNING)")
    args = parser.parse_args(argv)
    args.upstream = upstream
    if bool(upstream) == bool(args.upstream_url):
        parser.error("give the upstream either as a command after -- or as --upstream-url, not both")
    if not NAME_PATTERN.match(args.name) or "__" in args.name:
        parser.error("--name must be letters, digits, - and _ (and no '__'), e.g. time")
    if not args.url or not args.api_key:
        parser.error("GATEWAY_URL and GATEWAY_API_KEY (or --url and --api-key) must be set")
    if args.max_wait < 0 or args.progress_interval <= 0:
        parser.error("--max-wait must be >= 0 and --progress-interval > 0")
    return args


def _loop_options() -> dict[str, Any]:
    """uvloop when it is installed (the [mcp] extra has it, but on Windows): the relay and the gateway's
    HTTP calls are mostly the event loop's own work, which uvloop does in C."""
    try:
        import uvloop  # noqa: F401
    except ImportError:
        return {}
    return {"use_uvloop": True}


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_arguments(argv)
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr, format="mcp_proxy %(levelname)s %(message)s")
    try:
        return anyio.run(run, args, backend_options=_loop_options())
    except KeyboardInterrupt:
        return 130
