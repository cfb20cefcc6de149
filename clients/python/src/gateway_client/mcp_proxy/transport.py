"""The proxy's two wires: the client's, JSON-RPC lines on stdin and stdout (`ClientStdio`), and what a
streamable-HTTP upstream needs beyond the relayed messages: the headers each one carries (`HttpStamp`) and
the end of its session (`SessionWatch`)."""

from __future__ import annotations

import contextlib
import json
import os
import stat
import sys
import threading
from collections.abc import AsyncIterator
from typing import Any

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
    wire. The client's pipes (or sockets) are read and written in the event loop, without a thread: a
    line is read and relayed, and an answer written, with no hop to another thread or task on the way
    (a hop costs a context switch, and on one core the GIL's hand-over: most of what the proxy added to
    a call). A line that cannot be written at once is finished by one writer task, in order, before
    anything after it. Anything else (a terminal, a file) is read by a daemon thread (a blocked read never
    holds the proxy's exit) and written from a worker thread. `lines()` ends when the client closes stdin."""

    QUEUED = 16  # lines waiting for the client to read before `send` waits too

    def __init__(self) -> None:
        self._out_in, self._out = anyio.create_memory_object_stream[bytes](self.QUEUED)
        self._queued = 0  # lines handed to the writer task and not yet written
        self._gone = False  # the client closed its end of stdout
        self._in_fd = self._out_fd = -1
        self._in_polled = self._out_polled = False

    @contextlib.asynccontextmanager
    async def open(self) -> AsyncIterator[ClientStdio]:
        saved_in, saved_out = os.dup(0), os.dup(1)
        self._in_fd, self._out_fd = os.dup(0), os.dup(1)
        self._in_polled, self._out_polled = _pollable(self._in_fd), _pollable(self._out_fd)
        blocking = {fd: os.get_blocking(fd) for fd in (self._in_fd, self._out_fd)}
        for fd, polled in ((self._in_fd, self._in_polled), (self._out_fd, self._out_polled)):
            if polled:
                os.set_blocking(fd, False)  # the pipe's own: the client has its other end
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        os.dup2(2, 1)
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._write)
                try:
                    yield self
                finally:
                    self._out_in.close()  # the writer sends what is queued, then ends
        finally:
            with contextlib.suppress(Exception):  # a stray print still buffered goes to stderr, not the client
                sys.stdout.flush()
            for fd, was_blocking in blocking.items():
                with contextlib.suppress(OSError):
                    os.set_blocking(fd, was_blocking)
                if fd != self._in_fd or self._in_polled:  # a reader thread may still be blocked on its fd
                    os.close(fd)
            os.dup2(saved_in, 0)
            os.dup2(saved_out, 1)
            os.close(saved_in)
            os.close(saved_out)

    async def lines(self) -> AsyncIterator[str]:
        chunks = self._polled_chunks() if self._in_polled else self._threaded_chunks()
        pending = bytearray()  # a line read in part
        async for chunk in chunks:
            start = 0
            while (end := chunk.find(b"\n", start)) >= 0:
                pending += chunk[start : end + 1]  # a line with its newline, as a file's lines are
                yield pending.decode("utf-8", errors="replace")
                pending.clear()
                start = end + 1
            pending += chunk[start:]
        if pending:  # a last line without its newline
            yield pending.decode("utf-8", errors="replace")

    async def send(self, message: BaseModel | dict[str, Any] | list[dict[str, Any]]) -> None:
        if isinstance(message, BaseModel):
            text = message.model_dump_json(by_alias=True, exclude_unset=True)
        else:
            text = json.dumps(message, separators=(",", ":"))
        if self._gone:
            return
        data = text.encode() + b"\n"
        rest: bytes | None = None
        if self._out_polled and self._queued == 0:  # nothing before it: written now, in this task
            rest = self._write_now(data)
            if not rest:
                return
        self._queued += 1
        try:
            if rest is not None:
                self._out_in.send_nowait(rest)  # a line begun is finished first (the queue is empty)
            else:
                await self._out_in.send(data)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):  # the client is gone
            self._queued -= 1
        except BaseException:
            self._queued -= 1
            raise

    # -- the wire

    async def _polled_chunks(self) -> AsyncIterator[bytes]:
        while True:
            try:
                chunk = os.read(self._in_fd, 65536)
            except BlockingIOError:
                await anyio.wait_readable(self._in_fd)
                continue
            except OSError:
                return
            if not chunk:
                return  # stdin closed: the client is gone
            yield chunk

    async def _threaded_chunks(self) -> AsyncIterator[bytes]:
        chunks_in, chunks = anyio.create_memory_object_stream[bytes](16)
        token = anyio.lowlevel.current_token()
        fd = self._in_fd

        def read() -> None:
            try:
                while chunk := os.read(fd, 65536):
                    anyio.from_thread.run(chunks_in.send, chunk, token=token)
            except (anyio.BrokenResourceError, anyio.ClosedResourceError, RuntimeError, OSError):
                return  # the proxy is stopping
            with contextlib.suppress(RuntimeError):
                anyio.from_thread.run_sync(chunks_in.close, token=token)

        threading.Thread(target=read, name="mcp-proxy-stdin", daemon=True).start()
        async with chunks:
            async for chunk in chunks:
                yield chunk

    def _write_now(self, data: bytes) -> bytes | None:
        """Write what the client's pipe takes now; the rest (b"" when all of it), or None: the client is gone."""
        try:
            return data[os.write(self._out_fd, data) :]
        except BlockingIOError:
            return data
        except OSError:
            self._gone = True
            return None

    async def _write(self) -> None:
        async with self._out:
            async for data in self._out:
                try:
                    if self._out_polled:
                        while (data := self._write_now(data)) and not self._gone:
                            await anyio.wait_writable(self._out_fd)
                    else:
                        await anyio.to_thread.run_sync(_write_all, self._out_fd, data)
                except OSError:  # the client closed its end of the pipe
                    self._gone = True
                finally:
                    self._queued -= 1
                if self._gone:
                    return


def _pollable(fd: int) -> bool:
    """A pipe or a socket: read and written without blocking, in the event loop."""
    mode = os.fstat(fd).st_mode
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)


def _write_all(fd: int, data: bytes) -> None:
    while data:
        data = data[os.write(fd, data) :]


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

