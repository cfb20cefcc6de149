"""uvicorn's HTTP protocol (httptools) writing an answer of known length in one `send()`.

uvicorn writes an answer's status line and headers when the app sends `http.response.start`, and its
body when the app sends `http.response.body`: two writes, two system calls, two TCP segments for the
client to read. When 10,000 waiting agents are answered at once (docs/waiting.md) the header writes alone
were a seventh of the server's CPU per waiter. Here the status line and headers of an answer whose length
is known (`content-length` > 0) are held until its first body message, and leave in the same write; an
answer streamed (chunked), a HEAD, an empty answer and a WebSocket handshake are written as uvicorn writes
them. Nothing else about the protocol changes.

It also offers the app a scope extension (`gateway_utils.whole_response`): an app that sees it may send an
answer whose body it holds whole as ONE message — `http.response.start` with the body under `WHOLE_BODY`, no
`content-length` (it is added) — which is written as uvicorn writes that answer from its two messages, byte
for byte, access line and all, without passing through uvicorn's `send` twice: the agent API's hot paths
answer so (`approvals.api.asgi`), ten thousand woken waiters one after another. Anything unusual about such
an answer (a HEAD, writing paused, a length or an encoding given) is sent as the two messages instead,
through uvicorn.

Selected with `--http gateway.http_protocol:OneWriteProtocol` (uvicorn imports a protocol class given by
path: docs/operating.md); `approval-gateway run` and the benchmarks start uvicorn with it. Under any other
server the extension is not offered, and the apps send the two messages.
"""

from __future__ import annotations

from typing import Any

from uvicorn.protocols.http.httptools_impl import (
    HEADER_RE,
    HEADER_VALUE_RE,
    STATUS_LINE,
    HttpToolsProtocol,
    RequestResponseCycle,
)
from uvicorn.protocols.utils import get_client_addr, get_path_with_query_string

from gateway_utils.whole_response import BODY as WHOLE_BODY
from gateway_utils.whole_response import WHOLE

_LENGTH_OR_ENCODING = (b"content-length", b"transfer-encoding")


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
        if WHOLE_BODY in message and message["type"] == "http.response.start":
            if self._writes_whole(message):
                return
            body = message[WHOLE_BODY]  # as the two messages, through uvicorn
            start = {key: value for key, value in message.items() if key != WHOLE_BODY}
            start["headers"] = headers = list(message.get("headers", ()))
            if not any(name.lower() in _LENGTH_OR_ENCODING for name, _ in headers):
                headers.append((b"content-length", b"%d" % len(body)))
            await self.send(start)
            return await self.send({"type": "http.response.body", "body": body})
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

    def _writes_whole(self, message: dict[str, Any]) -> bool:
        """Write a whole answer (`WHOLE_BODY`) as uvicorn's `send` writes it from its two messages — status line,
        its default headers and the app's, checked as it checks them, `content-length`, a `connection: close`
        where the connection will not be kept — in one write, and complete the cycle as it does. False, with
        nothing done, where the two messages must go through uvicorn instead."""
        if self.response_started or self.disconnected or self.flow.write_paused or self.scope["method"] == "HEAD":
            return False
        body, status = message[WHOLE_BODY], message["status"]
        content = [STATUS_LINE[status]]
        closing = False
        for name, value in (*self.default_headers, *message.get("headers", ())):
            if HEADER_RE.search(name):
                raise RuntimeError("Invalid HTTP header name.")
            if HEADER_VALUE_RE.search(value):
                raise RuntimeError("Invalid HTTP header value.")
            name = name.lower()
            if name in _LENGTH_OR_ENCODING:
                return False  # (the app's own: what it means is uvicorn's to decide)
            if name == b"connection" and b"close" in [token.lower().strip() for token in value.split(b",")]:
                closing = True
            content.extend((name, b": ", value, b"\r\n"))
        content.append(b"content-length: %d\r\n" % len(body))
        if closing:
            self.keep_alive = False
        elif not self.keep_alive:
            content.append(b"connection: close\r\n")
        content.extend((b"\r\n", body))
        if self.access_log:
            scope = self.scope
            self.access_logger.info(
                '%s - "%s %s HTTP/%s" %d',
                get_client_addr(scope),
                scope["method"],
                get_path_with_query_string(scope),
                scope["http_version"],
                status,
            )
        self.response_started = self.response_complete = True
        self.waiting_for_100_continue = False
        self.chunked_encoding, self.expected_content_length = False, 0
        self.transport.write(b"".join(content))
        self.message_event.set()
        if not self.keep_alive:
            self.transport.close()
        self.on_response()
        return True


class OneWriteProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol whose requests are served by `OneWriteCycle`."""

    def on_headers_complete(self) -> None:
        super().on_headers_complete()
        cycle = self.cycle
        # The cycle uvicorn just made (its task is created, not yet run): the same object, our `send`.
        if type(cycle) is RequestResponseCycle and not cycle.response_started:
            cycle.__class__ = OneWriteCycle
            # (the app has not run yet: it sees the extension from the start)
            cycle.scope["extensions"] = {**(cycle.scope.get("extensions") or {}), WHOLE: {}}
