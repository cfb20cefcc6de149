"""A tiny keep-alive HTTP/1.1 client on asyncio streams.

The benchmark measures the server, so the client must cost as little as
possible: no pooling logic, no redirects, no decoding beyond status, headers
and body (Content-Length or chunked).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any


class HttpError(Exception):
    pass


class Connection:
    """One TCP connection to the server, used for one request at a time."""

    def __init__(self, host: str, port: int) -> None:
        self.host = host
        self.port = port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def open(self) -> Connection:
        self.reader, self.writer = await asyncio.open_connection(self.host, self.port, limit=1 << 20)
        return self

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None

    def send(self, method: str, path: str, *, headers: dict[str, str] | None = None, body: bytes = b"") -> None:
        """Write a request (not waiting for the answer: see `read_response`)."""
        lines = [f"{method} {path} HTTP/1.1", f"host: {self.host}:{self.port}", f"content-length: {len(body)}"]
        lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
        assert self.writer is not None
        self.writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body)

    async def read_response(self) -> tuple[int, dict[str, str], bytes]:
        assert self.reader is not None
        head = await self.reader.readuntil(b"\r\n\r\n")
        status_line, *header_lines = head.decode("latin-1").split("\r\n")
        status = int(status_line.split(" ", 2)[1])
        headers: dict[str, str] = {}
        for line in header_lines:
            if line:
                name, _, value = line.partition(":")
                name, value = name.strip().lower(), value.strip()
                # Repeated headers (Set-Cookie) are kept, one per line.
                headers[name] = f"{headers[name]}\n{value}" if name in headers else value
        if "content-length" in headers:
            body = await self.reader.readexactly(int(headers["content-length"]))
        elif headers.get("transfer-encoding", "").lower() == "chunked":
            chunks = []
            while True:
                size = int((await self.reader.readuntil(b"\r\n")).split(b";")[0], 16)
                if size == 0:
                    await self.reader.readuntil(b"\r\n")
                    break
                chunks.append(await self.reader.readexactly(size))
                await self.reader.readexactly(2)
            body = b"".join(chunks)
        else:
            body = await self.reader.read()
        return status, headers, body

    async def request(
        self, method: str, path: str, *, headers: dict[str, str] | None = None, body: bytes = b""
    ) -> tuple[int, bytes]:
        self.send(method, path, headers=headers, body=body)
        status, _, data = await self.read_response()
        return status, data

    async def request_full(
        self, method: str, path: str, *, headers: dict[str, str] | None = None, body: bytes = b""
    ) -> tuple[int, dict[str, str], bytes]:
        self.send(method, path, headers=headers, body=body)
        return await self.read_response()

    async def json(self, method: str, path: str, *, headers: dict[str, str] | None = None, payload: Any = None) -> Any:
        body = json.dumps(payload).encode() if payload is not None else b""
        hdrs = {"content-type": "application/json", **(headers or {})}
        status, data = await self.request(method, path, headers=hdrs, body=body)
        if status >= 400:
            raise HttpError(f"{method} {path} answered {status}: {data[:300]!r}")
        return json.loads(data)
