"""uvicorn's HTTP protocol (httptools) writing an answer of known length in one `send()`.

uvicorn writes an answer's status line and headers when the app sends `http.response.start`, and its
body when the app sends `http.response.body`: two writes, two system calls, two TCP segments for the
client to read. When 10,000 waiting agents are answered at once (docs/waiting.md) the header writes alone
were a seventh of the server's CPU per waiter. Here the status line and headers of an answer whose length
is known (`content-length` > 0) are held until its first body message, and leave in the same write; an
answer streamed (chunked), a HEAD, an empty answer and a WebSocket handshake are written as uvicorn writes
them. Nothing else about the protocol changes.

Selected with `--http gateway.http_protocol:OneWriteProtocol` (uvicorn imports a protocol class given by
path: docs/operating.md); `approval-gateway run` and the benchmarks start uvicorn with it.
"""

from __future__ import annotations

from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle


class _Holding:
    """The transport as the cycle sees it while it writes the status line and headers: keeps them."""

    __slots__ = ("transport", "head")

    def __init__(self, transport: Any) -> None:
        self.transport = transport
        self.head = b""

    def write(self, data: bytes) -> None:
        self.head += data

    def __getattr__(self, name: str) -> Any:
        return getattr(self.transport, name)


class _Prefixing:
    """The transport as the cycle sees it while it writes the body: the held head goes out in front."""

    __slots__ = ("transport", "head")

    def __init__(self, transport: Any, head: bytes) -> None:
        self.transport = transport
        self.head = head

    def write(self, data: bytes) -> None:
        head, self.head = self.head, b""
        self.transport.write(head + data)

    def close(self) -> None:
        self.flush()
        self.transport.close()

    def flush(self) -> None:
        if self.head:
            head, self.head = self.head, b""
            self.transport.write(head)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.transport, name)


def _holds(cycle: RequestResponseCycle, message: dict[str, Any]) -> bool:
    """Whether this answer's head may wait for its body: a length is declared and a body will follow."""
    if cycle.scope["method"] == "HEAD":
        return False
    for name, value in message.get("headers", ()):
        if name.lower() == b"content-length":
            return value.strip() not in (b"0", b"")
    return False


class OneWriteCycle(RequestResponseCycle):
    """uvicorn's request/response cycle, the head of an answer of known length written with its body."""

    _head = b""

    async def send(self, message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start" and not self.response_started and _holds(self, message):
            transport = self.transport
            self.transport = holding = _Holding(transport)
            try:
                await super().send(message)
            finally:
                self.transport = transport
            self._head = holding.head
            return
        head = self._head
        if not head:
            return await super().send(message)
        self._head = b""
        transport = self.transport
        self.transport = prefixing = _Prefixing(transport, head)
        try:
            await super().send(message)
        finally:
            self.transport = transport
            if not transport.is_closing():
                prefixing.flush()  # (the body message wrote nothing: the head goes alone, as uvicorn's would)


class OneWriteProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol whose requests are served by `OneWriteCycle`."""

    def on_headers_complete(self) -> None:
        super().on_headers_complete()
        cycle = self.cycle
        # The cycle uvicorn just made (its task is created, not yet run): the same object, our `send`.
        if type(cycle) is RequestResponseCycle and not cycle.response_started:
            cycle.__class__ = OneWriteCycle
