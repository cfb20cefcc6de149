"""gateway/http_protocol.py: uvicorn's httptools protocol writing an answer of known length in one write.

What a client receives is byte for byte what uvicorn's own protocol sends (real uvicorn servers on loopback,
the same apps, the same requests); what differs is how many writes carry it (the protocol given a
transport that records its writes, as uvicorn's own tests do)."""

from __future__ import annotations

import asyncio
import functools
import logging
import socket
import threading
import time
from typing import Any

import pytest
import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.server import ServerState

from gateway.http_protocol import OneWriteProtocol
from gateway_utils import whole_response

BODY = b'{"status":"approved"}'


def _run(test: Any) -> Any:
    """A coroutine test run on its own event loop."""

    @functools.wraps(test)
    def run() -> None:
        asyncio.run(test())

    return run


async def known_length(scope, receive, send):
    if scope["type"] != "http":
        return
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(BODY))]})  # fmt: skip
    await send({"type": "http.response.body", "body": BODY})


async def in_parts(scope, receive, send):
    """A length declared, the body in three messages."""
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"9")]})
    for part in (b"abc", b"", b"def"):
        await send({"type": "http.response.body", "body": part, "more_body": True})
    await send({"type": "http.response.body", "body": b"ghi"})


async def streamed(scope, receive, send):
    """No length: chunked, each part written as it is sent."""
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
    for part in (b"one", b"two"):
        await send({"type": "http.response.body", "body": part, "more_body": True})
    await send({"type": "http.response.body", "body": b""})


async def empty(scope, receive, send):
    await send({"type": "http.response.start", "status": 204, "headers": []})
    await send({"type": "http.response.body", "body": b""})


async def redirect(scope, receive, send):
    await send({"type": "http.response.start", "status": 302, "headers": [(b"location", b"/x"), (b"content-length", b"0")]})
    await send({"type": "http.response.body", "body": b""})


def whole(status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> Any:
    """An app answering as the agent API's hot paths do: in one message where the server offers it
    (`gateway_utils.whole_response`), else as the two (the length added unless the app gives its own)."""

    async def app(scope, receive, send):
        if scope["type"] != "http":
            return
        if whole_response.offered(scope):
            await send({"type": "http.response.start", "status": status, "headers": headers, whole_response.BODY: body})
            return
        own = any(name.lower() in (b"content-length", b"transfer-encoding") for name, _ in headers)
        length = [] if own else [(b"content-length", b"%d" % len(body))]
        await send({"type": "http.response.start", "status": status, "headers": [*headers, *length]})
        await send({"type": "http.response.body", "body": body})

    return app


JSON = (b"content-type", b"application/json")
APPS = {
    "known_length": known_length,
    "in_parts": in_parts,
    "streamed": streamed,
    "empty": empty,
    "redirect": redirect,
    "whole": whole(200, [JSON, (b"x-gateway-version", b"1.0")], BODY),
    "whole_closing": whole(401, [JSON, (b"Connection", b"keep-alive, Close")], BODY),
    "whole_empty": whole(200, [], b""),
    "whole_own_length": whole(200, [JSON, (b"Content-Length", b"%d" % len(BODY))], BODY),
}
REQUESTS = {
    "one": b"GET / HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n",
    "head": b"HEAD / HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n",
    "pipelined": b"GET /a HTTP/1.1\r\nhost: x\r\n\r\nGET /b HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n",
    "http10": b"GET / HTTP/1.0\r\n\r\n",
}


class _Server:
    """An ASGI app under a real uvicorn server in a thread, on 127.0.0.1:<free port>."""

    def __init__(self, app: Any, http: Any) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        config = uvicorn.Config(app, http=http, log_level="warning", lifespan="off", date_header=False, server_header=False)
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=lambda: asyncio.run(self.server.serve(sockets=[self.sock])), daemon=True)

    def __enter__(self) -> _Server:
        self.thread.start()
        deadline = time.monotonic() + 15
        while not self.server.started:
            assert time.monotonic() < deadline, "the server did not start"
            time.sleep(0.01)
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)

    def exchange(self, request: bytes) -> bytes:
        """Everything the server sends back until it closes the connection."""
        with socket.create_connection(("127.0.0.1", self.port), timeout=10) as conn:
            conn.sendall(request)
            received = b""
            while chunk := conn.recv(65536):
                received += chunk
        return received


@pytest.mark.parametrize("app", sorted(APPS))
def test_every_answer_reaches_the_client_byte_for_byte_as_uvicorns_own_protocol_sends_it(app):
    received = {}
    for name, http in (("uvicorn", "httptools"), ("gateway", OneWriteProtocol)):
        with _Server(APPS[app], http) as server:
            received[name] = {request: server.exchange(raw) for request, raw in REQUESTS.items()}
    assert received["gateway"] == received["uvicorn"]
    assert received["gateway"]["one"].startswith(b"HTTP/1.1 ")
    # (an app that asks for the connection to be closed is answered once: the second request is never read)
    assert received["gateway"]["pipelined"].count(b"HTTP/1.1 ") == (1 if app == "whole_closing" else 2)


class _Recording(asyncio.Transport):
    """The socket's side of a transport: every write kept as written."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[bytes] = []
        self.closed = False

    def write(self, data: bytes) -> None:
        self.writes.append(bytes(data))

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"sockname": ("127.0.0.1", 8000), "peername": ("127.0.0.1", 50000)}.get(name, default)

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def set_protocol(self, protocol: Any) -> None:
        pass


async def _writes(protocol_class: type, app: Any, request: bytes, until: Any) -> list[bytes]:
    config = uvicorn.Config(app, log_level="warning", lifespan="off", date_header=False, server_header=False)
    config.load()
    protocol = protocol_class(config=config, server_state=ServerState(), app_state={})
    transport = _Recording()
    protocol.connection_made(transport)
    protocol.data_received(request)
    for _ in range(1000):
        if until(transport):
            break
        await asyncio.sleep(0)
    else:
        pytest.fail(f"the answer was not written: {transport.writes}")
    protocol.connection_lost(None)
    return transport.writes


@_run
async def test_an_answer_of_known_length_is_written_in_one_write_where_uvicorn_makes_two():
    request = REQUESTS["one"]
    closed = lambda transport: transport.closed  # noqa: E731
    theirs = await _writes(HttpToolsProtocol, known_length, request, closed)
    ours = await _writes(OneWriteProtocol, known_length, request, closed)

    assert len(theirs) == 2 and theirs[1] == BODY
    assert ours == [b"".join(theirs)]


@_run
async def test_a_body_in_parts_keeps_its_parts_the_head_riding_on_the_first():
    theirs = await _writes(HttpToolsProtocol, in_parts, REQUESTS["one"], lambda t: t.closed)
    ours = await _writes(OneWriteProtocol, in_parts, REQUESTS["one"], lambda t: t.closed)

    assert b"".join(ours) == b"".join(theirs)
    assert ours[0] == theirs[0] + b"abc" and ours[1:] == [b"", b"def", b"ghi"]


@_run
async def test_a_streamed_answer_s_head_leaves_before_its_body_is_made():
    """An answer without a length (a stream) is not held: its head is on the wire while the app still
    waits for its first part."""
    release = asyncio.Event()

    async def app(scope, receive, send):
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]})
        await release.wait()
        await send({"type": "http.response.body", "body": b"data: 1\n\n"})

    async def head_written(transport):
        return transport.writes and transport.writes[0].startswith(b"HTTP/1.1 200")

    config = uvicorn.Config(app, log_level="warning", lifespan="off")
    config.load()
    protocol = OneWriteProtocol(config=config, server_state=ServerState(), app_state={})
    transport = _Recording()
    protocol.connection_made(transport)
    protocol.data_received(REQUESTS["one"])
    for _ in range(1000):
        if await head_written(transport):
            break
        await asyncio.sleep(0)
    assert len(transport.writes) == 1 and b"transfer-encoding: chunked" in transport.writes[0]
    release.set()
    for _ in range(1000):
        if transport.closed:
            break
        await asyncio.sleep(0)
    assert transport.writes[1:] == [b"9\r\ndata: 1\n\n\r\n0\r\n\r\n"]
    protocol.connection_lost(None)


@_run
async def test_a_head_answer_and_an_empty_one_are_written_as_uvicorn_writes_them():
    for app, request in ((known_length, REQUESTS["head"]), (redirect, REQUESTS["one"]), (empty, REQUESTS["one"])):
        theirs = await _writes(HttpToolsProtocol, app, request, lambda t: t.closed)
        ours = await _writes(OneWriteProtocol, app, request, lambda t: t.closed)
        assert ours == theirs


@_run
async def test_an_app_that_fails_after_its_head_closes_the_connection_without_a_partial_answer():
    """uvicorn closes a connection whose app raised after starting its answer; the held head is not sent
    alone (the client sees the connection closed, as it would after uvicorn's bare head)."""

    async def app(scope, receive, send):
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"5")]})
        raise RuntimeError("boom")

    writes = await _writes(OneWriteProtocol, app, REQUESTS["one"], lambda t: t.closed)
    assert writes == []


@_run
async def test_an_answer_sent_whole_in_one_message_is_written_once_as_uvicorn_writes_it_from_two():
    """The hot paths' answers (`gateway_utils.whole_response`): offered by this protocol only; written in one
    write, byte for byte what uvicorn writes from the two messages the app sends it instead — kept alive,
    closed (asked by the client or by the app), and a HEAD (which goes through uvicorn: no body)."""
    offered = {}

    async def looks(scope, receive, send):
        offered[len(offered)] = whole_response.offered(scope)
        await known_length(scope, receive, send)

    await _writes(HttpToolsProtocol, looks, REQUESTS["one"], lambda t: t.closed)
    await _writes(OneWriteProtocol, looks, REQUESTS["one"], lambda t: t.closed)
    assert offered == {0: False, 1: True}

    for app, request in (
        (APPS["whole"], REQUESTS["one"]),
        (APPS["whole"], REQUESTS["http10"]),
        (APPS["whole_closing"], b"GET / HTTP/1.1\r\nhost: x\r\n\r\n"),
        (APPS["whole_empty"], REQUESTS["one"]),
    ):
        theirs = await _writes(HttpToolsProtocol, app, request, lambda t: t.closed)
        ours = await _writes(OneWriteProtocol, app, request, lambda t: t.closed)
        assert len(theirs) == 2 and ours == [b"".join(theirs)], (request, theirs, ours)

    keep_alive = b"GET / HTTP/1.1\r\nhost: x\r\n\r\n"
    answered = lambda t: any(BODY in w for w in t.writes)  # noqa: E731 (kept alive: never closed)
    theirs = await _writes(HttpToolsProtocol, APPS["whole"], keep_alive, answered)
    ours = await _writes(OneWriteProtocol, APPS["whole"], keep_alive, answered)
    assert b"connection: close" not in theirs[0] and ours == [b"".join(theirs)]

    theirs = await _writes(HttpToolsProtocol, APPS["whole"], REQUESTS["head"], lambda t: t.closed)
    ours = await _writes(OneWriteProtocol, APPS["whole"], REQUESTS["head"], lambda t: t.closed)
    assert ours == theirs and BODY not in b"".join(ours)


@_run
async def test_an_answer_sent_whole_is_logged_as_uvicorn_logs_it():
    """The access line of an answer written whole (`uvicorn.access`, INFO) is the one uvicorn writes."""
    lines: dict[str, list[str]] = {"uvicorn": [], "gateway": []}
    for name, protocol_class in (("uvicorn", HttpToolsProtocol), ("gateway", OneWriteProtocol)):
        config = uvicorn.Config(APPS["whole_closing"], log_level="info", lifespan="off")  # (sets up its loggers)
        config.load()
        handler = logging.Handler()
        handler.emit = lambda record, kept=lines[name]: kept.append(record.getMessage())
        logger = logging.getLogger("uvicorn.access")
        logger.addHandler(handler)
        try:
            for request in (REQUESTS["one"], b"GET /x?y=1 HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n"):
                protocol = protocol_class(config=config, server_state=ServerState(), app_state={})
                transport = _Recording()
                protocol.connection_made(transport)
                protocol.data_received(request)
                for _ in range(1000):
                    if transport.closed:
                        break
                    await asyncio.sleep(0)
                protocol.connection_lost(None)
        finally:
            logger.removeHandler(handler)
    expected = ['127.0.0.1:50000 - "GET / HTTP/1.1" 401', '127.0.0.1:50000 - "GET /x?y=1 HTTP/1.1" 401']
    assert lines["gateway"] == lines["uvicorn"] == expected
