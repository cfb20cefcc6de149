"""The proxy's two wires: the client's, JSON-RPC lines on stdin and stdout (`ClientStdio`), and what a
streamable-HTTP upstream needs beyond the relayed messages: the headers each one carries (`HttpStamp`) and
the end of its session (`SessionWatch`)."""

from __future__ import annotations

import contextlib
import json
import os
import threading
from collections.abc import AsyncIterator
from typing import Any, BinaryIO

import anyio
import anyio.from_thread
import anyio.lowlevel
import anyio.to_thread
from mcp.shared.inbound import (
    MCP_METHOD_HEADER,
    MCP_NAME_HEADER,
    MCP_PROTOCOL_VERSION_HEADER,
    NAME_BEARING_METHODS,
    encode_header_value,
    mcp_param_headers,
    x_mcp_header_map,
)
from mcp.shared.message import ClientMessageMetadata
from mcp_types import PROTOCOL_VERSION_META_KEY, JSONRPCError, JSONRPCRequest, JSONRPCResponse
from pydantic import BaseModel


class ClientStdio:
    """The client's side of the proxy: JSON-RPC, one message a line, on the proxy's stdin and stdout.

    While it runs, fd 0 reads the null device and fd 1 is stderr, so a stray print cannot reach the
    wire. Lines are read by a daemon thread (a blocked read never holds the proxy's exit) and written by
    one task, in order; `lines()` ends when the client closes stdin."""

    def __init__(self) -> None:
        self._lines_in, self._lines = anyio.create_memory_object_stream[str](16)
        self._out_in, self._out = anyio.create_memory_object_stream[str](16)
        self._wire_in: BinaryIO | None = None
        self._wire_out: BinaryIO | None = None

    @contextlib.asynccontextmanager
    async def open(self) -> AsyncIterator[ClientStdio]:
        saved_in, saved_out = os.dup(0), os.dup(1)
        self._wire_in, self._wire_out = os.fdopen(os.dup(0), "rb"), os.fdopen(os.dup(1), "wb")
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        os.dup2(2, 1)
        token = anyio.lowlevel.current_token()
        threading.Thread(target=self._read, args=(token,), name="mcp-proxy-stdin", daemon=True).start()
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._write)
                try:
                    yield self
                finally:
                    self._out_in.close()  # the writer sends what is queued, then ends
        finally:
            os.dup2(saved_in, 0)
            os.dup2(saved_out, 1)
            os.close(saved_in)
            os.close(saved_out)

    async def lines(self) -> AsyncIterator[str]:
        async with self._lines:
            async for line in self._lines:
                yield line

    async def send(self, message: BaseModel | dict[str, Any] | list[dict[str, Any]]) -> None:
        if isinstance(message, BaseModel):
            text = message.model_dump_json(by_alias=True, exclude_unset=True)
        else:
            text = json.dumps(message, separators=(",", ":"))
        with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):  # the client is gone
            await self._out_in.send(text)

    def _read(self, token: Any) -> None:
        assert self._wire_in is not None
        try:
            for raw in self._wire_in:
                anyio.from_thread.run(self._lines_in.send, raw.decode("utf-8", errors="replace"), token=token)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, RuntimeError, OSError):
            return  # the proxy is stopping
        with contextlib.suppress(RuntimeError):
            anyio.from_thread.run_sync(self._lines_in.close, token=token)  # stdin closed: the client is gone

    async def _write(self) -> None:
        assert self._wire_out is not None
        wire = self._wire_out

        def write(text: str) -> None:
            wire.write(text.encode() + b"\n")
            wire.flush()

        async with self._out:
            async for text in self._out:
                try:
                    await anyio.to_thread.run_sync(write, text)
                except OSError:  # the client closed its end of the pipe
                    return


# --------------------------------------------------------------------------- streamable HTTP headers


class HttpStamp:
    """The HTTP headers a message to a streamable-HTTP upstream needs (the SDK's session stamps them
    for its own messages; a relayed message carries none).

    Handshake era: `MCP-Protocol-Version` after `initialize`. 2026-07-28 era (a request whose
    `_meta` names the protocol version): that version, `Mcp-Method`, `Mcp-Name` and the
    `Mcp-Param-*` headers that the tool's input schema asks for (learnt from `tools/list`).
    """

    def __init__(self) -> None:
        self.handshake_version: str | None = None
        self.initialize_ids: set[Any] = set()
        self.tools_list_ids: set[Any] = set()
        self.header_maps: dict[str, dict[tuple[str, ...], str]] = {}

    def outbound(self, message: Any) -> ClientMessageMetadata | None:
        if isinstance(message, JSONRPCRequest):
            if message.method == "initialize":
                self.initialize_ids.add(message.id)
                return None
            if message.method == "tools/list":
                self.tools_list_ids.add(message.id)
            params = message.params or {}
            version = (params.get("_meta") or {}).get(PROTOCOL_VERSION_META_KEY)
            if isinstance(version, str):
                headers = {MCP_PROTOCOL_VERSION_HEADER: version, MCP_METHOD_HEADER: message.method}
                name_key = NAME_BEARING_METHODS.get(message.method)
                if name_key is not None and isinstance(name := params.get(name_key), str):
                    headers[MCP_NAME_HEADER] = encode_header_value(name)
                    if message.method == "tools/call" and name in self.header_maps:
                        headers.update(mcp_param_headers(self.header_maps[name], params.get("arguments") or {}))
                return ClientMessageMetadata(headers=headers)
        if self.handshake_version is not None:
            return ClientMessageMetadata(headers={MCP_PROTOCOL_VERSION_HEADER: self.handshake_version})
        return None

    def inbound(self, message: Any) -> None:
        if not isinstance(message, JSONRPCResponse | JSONRPCError):
            return
        if message.id in self.initialize_ids:
            self.initialize_ids.discard(message.id)
            if isinstance(message, JSONRPCResponse) and isinstance(message.result.get("protocolVersion"), str):
                self.handshake_version = message.result["protocolVersion"]
        elif message.id in self.tools_list_ids:
            self.tools_list_ids.discard(message.id)
            if isinstance(message, JSONRPCResponse):
                for tool in message.result.get("tools") or []:
                    if isinstance(tool, dict) and isinstance(tool.get("name"), str):
                        self.header_maps[tool["name"]] = x_mcp_header_map(tool.get("inputSchema") or {})


# --------------------------------------------------------------------------- the end of an HTTP session


class SessionWatch:
    """Sees a streamable-HTTP upstream end the MCP session: an HTTP 404 to a request that carried the
    session id (MCP: the server no longer knows the session). The proxy then stops — its client's
    session cannot go on in a new one — after relaying the answer to the request that found out."""

    def __init__(self) -> None:
        self.ended = anyio.Event()
        self.answer_id: Any = None  # the JSON-RPC request whose answer ends the relay; None: none comes

    async def on_response(self, response: Any) -> None:
        """An `httpx` response hook on the upstream's HTTP client."""
        if response.status_code != 404 or "mcp-session-id" not in response.request.headers or self.ended.is_set():
            return
        try:
            body = json.loads(response.request.content or b"null")
        except Exception:  # a streamed body, or not JSON
            body = None
        self.answer_id = body.get("id") if isinstance(body, dict) and "method" in body else None
        self.ended.set()

