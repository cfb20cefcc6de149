"""An MCP gateway proxy: `python -m gateway_client.mcp_proxy --name NAME -- UPSTREAM_COMMAND [ARGS…]`.

An MCP server over stdio that an MCP client (Claude Desktop, Cursor, Claude
Code, VS Code, an SDK's MCP support) launches in place of the upstream server.
It starts the upstream (a stdio command, or `--upstream-url` for streamable
HTTP) and relays the MCP session between the two, message by message: the
handshake, the tool list (unchanged: names, descriptions, schemas), resources,
prompts, completions, logging, notifications and the upstream's own requests
(sampling, elicitation, roots) all pass through as they are.

Every `tools/call` is the one exception. It is held and asked about as the
gateway tool `NAME__TOOL` (pre-tool-use), in the proxy's session:

- allow: the upstream is called with the arguments the gateway answered (a
  hook may have rewritten them); its result is reported (post-tool-use) and
  the gateway's answer — possibly cut by `truncate_result` — is what the
  client gets. A failure (an `isError` result or a JSON-RPC error) is
  reported as tool-error and its action followed (retry, recover, abort, raise).
- deny, reject, or nobody decided within `--max-wait`: an `isError` result
  saying why (`time__convert_time was not run: rejected by bob: not now`); the
  upstream never sees the call. Calling the same tool again with the same
  arguments picks up a decision given meanwhile.
- while a human decides, `notifications/progress` every `--progress-interval`
  seconds if the client sent a `progressToken`.
- the gateway unreachable: an `isError` result; the upstream is not called.
- the client cancels the request (`notifications/cancelled`): the confirmation
  is withdrawn (`POST /api/v1/confirmations/<id>/cancel`).

Nothing reaches the upstream as a `tools/call` without the gate. The proxy reads
the client's lines itself (`read_client_line`) and relays what it parsed, never
the raw line: a `tools/call` is gated only as a request with a string or integer
id; one with `id: null` or any other id gets a JSON-RPC error, one without an id
(a notification: nothing can answer it) is dropped and logged, and a JSON-RPC
batch (an array: MCP has none since 2025-06-18) is refused whole, each request
in it answered with an error.

When the client closes stdin, held calls are withdrawn, the upstream is stopped
(its stdin closed, then terminated if it lingers; an HTTP upstream's session is
ended with a DELETE) and the proxy exits 0. When the upstream goes (its process
exits, or an HTTP upstream says the session is gone) the proxy exits 1.

With `--ask-human` the proxy also offers the tool `ask_human` beside the
upstream's (added to each `tools/list` answer): a call asks a person through the
gateway (a question, docs/asking.md) and answers with what they said; it never
reaches the upstream. With `--elicitation gateway` an upstream's
`elicitation/create` request (a form) is not passed to the client, which may
have no person at the keyboard: the proxy asks it as a question through the
gateway and answers the upstream `accept` with the person's answer (`decline`
when nobody answered or the form cannot be asked as a question; URL-mode
elicitation too). `--elicitation client` (the default) passes it through.

Configuration: `GATEWAY_URL` and `GATEWAY_API_KEY` (or `--url`, `--api-key`),
`GATEWAY_USER_ID` (`--user-id`). The upstream command inherits the proxy's
environment without `GATEWAY_API_KEY`. See docs/integrations/mcp-proxy.md.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import logging
import os
import re
import sys
import threading
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from typing import Any, BinaryIO

import anyio
import anyio.from_thread
import anyio.lowlevel
from pydantic import BaseModel, ValidationError

from gateway_client.asking import TOOL_NAME as ASK_HUMAN, HumanAsker, describe, params_schema
from gateway_client.client import AsyncGatewayClient, NoAnswer
from gateway_client.gating import GateResult, ToolGate, result_text

try:
    from mcp.client.stdio import StdioServerParameters, stdio_client
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared.inbound import (
        MCP_METHOD_HEADER,
        MCP_NAME_HEADER,
        MCP_PROTOCOL_VERSION_HEADER,
        NAME_BEARING_METHODS,
        encode_header_value,
        mcp_param_headers,
        x_mcp_header_map,
    )
    from mcp.shared.message import ClientMessageMetadata, SessionMessage
    from mcp_types import (  # the MCP SDK's protocol types (`mcp.types` re-exports them)
        CLIENT_CAPABILITIES_META_KEY,
        INVALID_REQUEST,
        PARSE_ERROR,
        PROTOCOL_VERSION_META_KEY,
        CallToolResult,
        JSONRPCError,
        JSONRPCNotification,
        JSONRPCRequest,
        JSONRPCResponse,
        TextContent,
        jsonrpc_message_adapter,
    )
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError("gateway_client.mcp_proxy needs the MCP Python SDK: pip install 'mcp>=2.3,<3'") from exc

logger = logging.getLogger("gateway_client.mcp_proxy")

DEFAULT_MAX_WAIT = 300.0
DEFAULT_PROGRESS_INTERVAL = 5.0
DEFAULT_RECONNECT_FOR = 10.0
REQUEST_TIMEOUT = 10.0
NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]*$")
USAGE_ERROR = 2


# --------------------------------------------------------------------------- results


def text_result(text: str, *, is_error: bool) -> dict[str, Any]:
    """A `CallToolResult` with one text block, as wire JSON."""
    result = CallToolResult(content=[TextContent(type="text", text=text)], is_error=is_error)
    return result.model_dump(by_alias=True, mode="json", exclude_none=True)


def reported_result(message: JSONRPCResponse) -> Any:
    """What the gateway gets as the result of a successful call: its text, as the model reads it.

    The text blocks, joined; without text, the structured content; else the content blocks as JSON.
    """
    content = message.result.get("content") or []
    texts = [block.get("text", "") for block in content if isinstance(block, dict) and block.get("type") == "text"]
    if texts and len(texts) == len(content):
        return "\n".join(texts)
    if not content and message.result.get("structuredContent") is not None:
        return message.result["structuredContent"]
    return content


def call_failure(message: JSONRPCResponse | JSONRPCError) -> str | None:
    """The error of a failed call (a JSON-RPC error, or an `isError` result), or None."""
    if isinstance(message, JSONRPCError):
        return f"MCP error {message.error.code}: {message.error.message}"
    if message.result.get("isError"):
        return result_text(reported_result(message)) or "the tool reported an error"
    return None


# --------------------------------------------------------------------------- the client's lines

BATCH_REFUSED = "JSON-RPC batches are not supported (MCP has had none since 2025-06-18): send one message a line"
BAD_CALL_ID = "a tools/call needs an id that is a string or an integer"


@dataclasses.dataclass(frozen=True)
class Refused:
    """A line from the client that the proxy answers itself (`answer`: the JSON-RPC error(s); None when
    nothing can be answered) and relays nowhere; `why` is logged."""

    answer: dict[str, Any] | list[dict[str, Any]] | None
    why: str


def error_answer(request_id: str | int | None, code: int, message: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}}


def _answerable_id(data: Any) -> str | int | None:
    """The id an error answer can name: the message's own if it is a valid one, else null (JSON-RPC 2.0 §5)."""
    value = data.get("id") if isinstance(data, dict) else None
    if isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    return None


def read_client_line(line: str) -> SessionMessage | Refused | None:
    """One line from the client: the message as the upstream will get it (the proxy relays what it
    parsed, never the line itself), refused, or None for a blank line.

    Anything whose method is `tools/call` and that is not a request with a string or integer id — no
    id (a notification), `id: null`, a fractional, boolean or object id — is refused, and so is every
    batch: the SDK's own reading takes such a call for a notification, which would reach the upstream
    without the gate."""
    text = line.strip()
    if not text:
        return None
    try:
        data = json.loads(text)
    except ValueError:
        return Refused(error_answer(None, PARSE_ERROR, "Parse error: the line is not JSON"), "a line that is not JSON")
    if isinstance(data, list):
        if not data:
            return Refused(error_answer(None, INVALID_REQUEST, "an empty batch"), "an empty batch")
        answers = [
            error_answer(_answerable_id(item), INVALID_REQUEST, BATCH_REFUSED)
            for item in data
            if not isinstance(item, dict) or "id" in item  # a notification in it gets no answer
        ]
        return Refused(answers or None, f"a batch of {len(data)} message(s) refused; none was relayed")
    try:
        message = jsonrpc_message_adapter.validate_json(text, by_name=False)
    except ValidationError:
        if isinstance(data, dict) and not ("method" in data and "id" in data):
            return Refused(None, "a message that is not JSON-RPC, dropped")  # e.g. a malformed response
        invalid = error_answer(_answerable_id(data), INVALID_REQUEST, "not a JSON-RPC request")
        return Refused(invalid, "an invalid request")
    if data.get("method") == "tools/call" and not isinstance(message, JSONRPCRequest):
        if "id" not in data:
            return Refused(None, "a tools/call without an id (a notification) dropped: nothing could answer it")
        return Refused(error_answer(None, INVALID_REQUEST, BAD_CALL_ID), f"a tools/call with the id {data['id']!r}")
    return SessionMessage(message)


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


# --------------------------------------------------------------------------- the proxy


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


@dataclasses.dataclass(eq=False)
class HeldCall:
    """A `tools/call` from the client, from the moment it arrives until it is answered."""

    request: JSONRPCRequest
    scope: anyio.CancelScope = dataclasses.field(default_factory=anyio.CancelScope)
    pending: anyio.Event = dataclasses.field(default_factory=anyio.Event)  # a human is being asked
    confirmation_id: str | None = None
    forwarded: bool = False  # the upstream has the request
    answered: anyio.Event = dataclasses.field(default_factory=anyio.Event)
    upstream_answer: JSONRPCResponse | JSONRPCError | None = None
    started: float = dataclasses.field(default_factory=time.monotonic)

    @property
    def params(self) -> dict[str, Any]:
        return self.request.params or {}

    @property
    def progress_token(self) -> str | int | None:
        token = (self.params.get("_meta") or {}).get("progressToken")
        return token if isinstance(token, str | int) and not isinstance(token, bool) else None

    @property
    def modern(self) -> bool:
        return PROTOCOL_VERSION_META_KEY in (self.params.get("_meta") or {})


class McpGatewayProxy:
    """Relays one MCP session between a client and an upstream server, gating `tools/call`."""

    def __init__(
        self,
        *,
        name: str,
        gate: ToolGate,
        max_wait: float = DEFAULT_MAX_WAIT,
        progress_interval: float = DEFAULT_PROGRESS_INTERVAL,
        stamp: HttpStamp | None = None,
        session_watch: SessionWatch | None = None,
        asker: HumanAsker | None = None,
        elicitation: str = "client",
        offers_ask_human: bool = False,
    ):
        self.asker = asker  # where questions go (--ask-human, --elicitation gateway)
        self.offers_ask_human = offers_ask_human  # --ask-human: the ask_human tool, answered here
        self.elicitation = elicitation  # "gateway": the upstream's elicitation/create asked as a question
        self.listing: set[Any] = set()  # ids of tools/list requests whose answers get ask_human
        self.name = name
        self.gate = gate
        self.max_wait = max_wait
        self.progress_interval = progress_interval
        self.stamp = stamp
        self.session_watch = session_watch
        self.calls: dict[Any, HeldCall] = {}  # request id -> the call, while it is held or run
        self._client: Any = None  # a ClientStdio, or anything with its `lines()` and `send()`
        self._upstream_write: Any = None

    async def serve(self, client: Any, upstream_read: Any, upstream_write: Any) -> str:
        """Relay until either side closes; returns which one did: `client`, `upstream`, or `session` (an
        HTTP upstream no longer knows the session)."""
        self._client, self._upstream_write = client, upstream_write
        closed = "client"
        watch = self.session_watch
        async with anyio.create_task_group() as tg:
            self._task_group = tg

            async def from_upstream() -> None:
                nonlocal closed
                await self._pump_upstream(upstream_read)
                closed = "session" if watch is not None and watch.ended.is_set() else "upstream"
                tg.cancel_scope.cancel()

            async def when_the_session_ends(watch: SessionWatch) -> None:
                nonlocal closed
                await watch.ended.wait()
                if watch.answer_id is None:  # no answer to relay first (else the pump stops after it)
                    closed = "session"
                    tg.cancel_scope.cancel()

            tg.start_soon(from_upstream)
            if watch is not None:
                tg.start_soon(when_the_session_ends, watch)
            async for line in client.lines():
                item = read_client_line(line)
                if isinstance(item, Refused):
                    logger.warning("refused from the client: %s", item.why)
                    if item.answer is not None:
                        await client.send(item.answer)
                elif item is not None:
                    await self._from_client(item, tg)
            # The client is gone: held calls are cancelled, and so withdrawn.
            tg.cancel_scope.cancel()
        return closed

    # -- client -> upstream ----------------------------------------------------------

    async def _from_client(self, item: SessionMessage, tg: Any) -> None:
        message = item.message
        if isinstance(message, JSONRPCRequest) and self.elicitation == "gateway" and message.method == "initialize":
            # The upstream may elicit though the client cannot: the gateway answers (up to 2025-11-25).
            params = dict(message.params or {})
            params["capabilities"] = with_form_elicitation(params.get("capabilities"))
            message = JSONRPCRequest(jsonrpc="2.0", id=message.id, method=message.method, params=params)
        if isinstance(message, JSONRPCRequest) and self.offers_ask_human:
            if message.method == "tools/list":
                self.listing.add(message.id)
            elif message.method == "tools/call" and (message.params or {}).get("name") == ASK_HUMAN:
                call = HeldCall(message)
                self.calls[message.id] = call
                tg.start_soon(self._ask_human, call)
                return
        if isinstance(message, JSONRPCRequest) and message.method == "tools/call":
            call = HeldCall(message)
            self.calls[message.id] = call
            tg.start_soon(self._gated, call)
            return
        if isinstance(message, JSONRPCNotification) and message.method == "notifications/cancelled":
            call = self.calls.get((message.params or {}).get("requestId"))
            if call is not None:
                # Stop asking (which withdraws the confirmation) or waiting for the upstream.
                call.scope.cancel()
                if not call.forwarded:
                    return  # the upstream never saw this request
        await self._to_upstream(message)

    async def _to_upstream(self, message: Any) -> None:
        metadata = self.stamp.outbound(message) if self.stamp is not None else None
        await self._upstream_write.send(SessionMessage(message, metadata=metadata))

    # -- upstream -> client ----------------------------------------------------------

    async def _pump_upstream(self, upstream_read: Any) -> None:
        """Relay the upstream's messages until it closes (or an HTTP upstream says the session is gone)."""
        async for item in upstream_read:
            if isinstance(item, Exception):
                logger.warning("unreadable message from the upstream server: %s", item)
                continue
            message = item.message
            if self.stamp is not None:
                self.stamp.inbound(message)
            watch = self.session_watch
            if watch is not None and watch.ended.is_set() and getattr(message, "id", None) == watch.answer_id:
                await self._to_client(message)  # the request that found the session gone gets that answer
                return
            if isinstance(message, JSONRPCResponse) and message.id in self.listing:
                self.listing.discard(message.id)
                message = with_ask_human(message)
            if isinstance(message, JSONRPCError) and message.id in self.listing:
                self.listing.discard(message.id)
            if (
                self.elicitation == "gateway"
                and isinstance(message, JSONRPCRequest)
                and message.method == "elicitation/create"
            ):
                self._task_group.start_soon(self._elicit, message)  # answered in its own task: the pump goes on
                continue
            if isinstance(message, JSONRPCResponse | JSONRPCError):
                call = self.calls.get(message.id)
                if call is not None and call.forwarded and not call.answered.is_set():
                    call.upstream_answer = message
                    call.answered.set()
                    continue
            await self._to_client(message)

    async def _to_client(self, message: Any) -> None:
        await self._client.send(message)

    # -- one gated call ----------------------------------------------------------------

    async def _gated(self, call: HeldCall) -> None:
        tool = call.params.get("name")
        arguments = call.params.get("arguments") or {}
        try:
            with call.scope:
                if not isinstance(tool, str) or not isinstance(arguments, dict):
                    await self._answer(
                        call, text_result("tools/call needs a tool name and an arguments object", is_error=True)
                    )
                    return
                async with anyio.create_task_group() as ticker:
                    if call.progress_token is not None:
                        ticker.start_soon(self._report_progress, call)
                    try:
                        outcome = await self.gate.acall(
                            tool_name=f"{self.name}__{tool}",
                            tool_args=arguments,
                            tool_call_id=f"mcp-{uuid.uuid4().hex[:20]}",
                            run=lambda args: self._run_upstream(call, args),
                            report=reported_result,
                            failure=call_failure,
                            on_pending=lambda answer: self._on_pending(call, answer),
                        )
                    finally:
                        ticker.cancel_scope.cancel()
                await self._answer(call, self._response(call, outcome))
        except Exception:
            logger.exception("the proxy failed on a call to %s", tool)
            with contextlib.suppress(Exception):
                await self._answer(call, text_result(f"the gateway proxy failed on this call to {tool}", is_error=True))
        finally:
            self.calls.pop(call.request.id, None)

    async def _ask_human(self, call: HeldCall) -> None:
        """--ask-human: the tool is answered here, by a person through the gateway (docs/asking.md)."""
        assert self.asker is not None
        arguments = call.params.get("arguments") or {}
        try:
            with call.scope:
                if not isinstance(arguments, dict) or not str(arguments.get("question") or "").strip():
                    await self._answer(call, text_result("ask_human needs a question", is_error=True))
                    return
                output = await self.asker.aask(arguments, session_id=self.gate.session_id)
                await self._answer(call, text_result(output, is_error=output.startswith("No answer")))
        except Exception as exc:
            logger.exception("ask_human failed")
            with contextlib.suppress(Exception):
                await self._answer(call, text_result(f"ask_human failed: {exc}", is_error=True))
        finally:
            self.calls.pop(call.request.id, None)

    async def _elicit(self, request: JSONRPCRequest) -> None:
        """--elicitation gateway, up to 2025-11-25: the upstream's `elicitation/create` request answered here."""
        result = await self._elicitation_answer(request.params or {})
        await self._to_upstream(JSONRPCResponse(jsonrpc="2.0", id=request.id, result=result))

    async def _elicitation_answer(self, params: dict[str, Any]) -> dict[str, Any]:
        """An elicitation's form asked of a person as a question (docs/asking.md): `accept` with their answer,
        `decline` when nobody answered or it cannot be asked as a question, `cancel` when it was withdrawn."""
        try:
            schema = elicitation_schema(params)
            if schema is None:
                logger.warning("an elicitation the gateway cannot ask as a question (mode %s): declined", params.get("mode"))
                return {"action": "decline"}
            question = str(params.get("message") or "The tool needs your input.")
            where = self.asker.options if self.asker is not None else {}
            try:
                value = await self.gate.client.ask(
                    question, schema, session_id=self.gate.session_id, max_wait=self.max_wait,
                    channel=where.get("channel"), user_id=where.get("user_id"),
                )  # fmt: skip
            except NoAnswer as exc:
                return {"action": "cancel" if exc.answer.status == "cancelled" else "decline"}
            return {"action": "accept", "content": value}
        except Exception:
            logger.exception("the elicitation could not be asked through the gateway: declined")
            return {"action": "decline"}

    async def _input_responses(self, result: dict[str, Any]) -> dict[str, Any] | None:
        """--elicitation gateway, 2026-07-28: the answers to an `InputRequiredResult`'s elicitations, keyed as
        its `inputRequests`; None if it asks for anything else (sampling, roots: the client's business)."""
        requests = result.get("inputRequests") or {}
        if not isinstance(requests, dict) or not requests:
            return None
        if any(not isinstance(r, dict) or r.get("method") != "elicitation/create" for r in requests.values()):
            return None
        return {key: await self._elicitation_answer(r.get("params") or {}) for key, r in requests.items()}

    def _on_pending(self, call: HeldCall, answer: dict[str, Any]) -> None:
        call.confirmation_id = answer.get("confirmation_id")
        call.pending.set()

    async def _report_progress(self, call: HeldCall) -> None:
        """`notifications/progress` while a human decides (from the first pending answer until forwarded)."""
        await call.pending.wait()
        while not call.forwarded:
            waited = time.monotonic() - call.started
            params: dict[str, Any] = {"progressToken": call.progress_token, "progress": round(waited, 1)}
            if self.max_wait:
                params["total"] = self.max_wait
            if not call.modern:  # `message` is gone from 2026-07-28
                params["message"] = f"waiting for approval in the gateway (request {call.confirmation_id})"
            await self._to_client(JSONRPCNotification(jsonrpc="2.0", method="notifications/progress", params=params))
            await anyio.sleep(self.progress_interval)

    async def _run_upstream(self, call: HeldCall, arguments: dict[str, Any]) -> JSONRPCResponse | JSONRPCError:
        """Send the call upstream under the client's own request id (its progress token too) and await the answer."""
        call.answered = anyio.Event()
        call.upstream_answer = None
        call.forwarded = True
        params = {**call.params, "arguments": arguments}
        if self.elicitation == "gateway" and isinstance(params.get("_meta"), dict):
            # 2026-07-28: capabilities ride on each request; the gateway answers elicitations the client cannot.
            meta = dict(params["_meta"])
            if CLIENT_CAPABILITIES_META_KEY in meta:
                meta[CLIENT_CAPABILITIES_META_KEY] = with_form_elicitation(meta[CLIENT_CAPABILITIES_META_KEY])
                params["_meta"] = meta
        request = JSONRPCRequest(jsonrpc="2.0", id=call.request.id, method="tools/call", params=params)
        await self._to_upstream(request)
        await call.answered.wait()
        assert call.upstream_answer is not None
        answer = call.upstream_answer
        # --elicitation gateway: the upstream needs input (2026-07-28): a person gives it, the call is retried.
        while (
            self.elicitation == "gateway"
            and isinstance(answer, JSONRPCResponse)
            and (answer.result or {}).get("resultType") == "input_required"
        ):
            responses = await self._input_responses(answer.result or {})
            if responses is None:
                break  # not only elicitations: the client answers them
            retry = {**params, "inputResponses": responses}
            if (answer.result or {}).get("requestState") is not None:
                retry["requestState"] = answer.result["requestState"]
            call.answered = anyio.Event()
            call.upstream_answer = None
            await self._to_upstream(JSONRPCRequest(jsonrpc="2.0", id=call.request.id, method="tools/call", params=retry))
            await call.answered.wait()
            assert call.upstream_answer is not None
            answer = call.upstream_answer
        return answer

    def _response(self, call: HeldCall, outcome: GateResult) -> JSONRPCResponse | JSONRPCError:
        """What the client gets for a gated call."""
        if outcome.status == "ran":
            return outcome.value
        if outcome.status == "replaced":
            return JSONRPCResponse(
                jsonrpc="2.0", id=call.request.id, result=text_result(result_text(outcome.result), is_error=False)
            )
        if outcome.status == "failed" and isinstance(outcome.value, JSONRPCResponse | JSONRPCError):
            return outcome.value  # the upstream's own error, as it was
        message = outcome.message or f"{call.params.get('name')} failed: {outcome.exception}"
        return JSONRPCResponse(jsonrpc="2.0", id=call.request.id, result=text_result(message, is_error=True))

    async def _answer(self, call: HeldCall, response: JSONRPCResponse | JSONRPCError | dict[str, Any]) -> None:
        if isinstance(response, dict):
            response = JSONRPCResponse(jsonrpc="2.0", id=call.request.id, result=response)
        await self._to_client(response)


# --------------------------------------------------------------------------- asking a human


def with_ask_human(message: JSONRPCResponse) -> JSONRPCResponse:
    """A `tools/list` answer with the `ask_human` tool added (once, last)."""
    result = dict(message.result or {})
    tools = list(result.get("tools") or [])
    if not any(isinstance(t, dict) and t.get("name") == ASK_HUMAN for t in tools):
        tools.append({"name": ASK_HUMAN, "description": describe(None), "inputSchema": params_schema(None)})
    return JSONRPCResponse(jsonrpc="2.0", id=message.id, result={**result, "tools": tools})


_ELICIT_MAX_FIELDS = 8


def with_form_elicitation(capabilities: Any) -> dict[str, Any]:
    """Client capabilities that declare form elicitation (what --elicitation gateway answers)."""
    declared = dict(capabilities) if isinstance(capabilities, dict) else {}
    elicitation = dict(declared.get("elicitation") or {})
    elicitation.setdefault("form", {})
    declared["elicitation"] = elicitation
    return declared


def elicitation_schema(params: dict[str, Any]) -> dict[str, Any] | None:
    """An `elicitation/create` form as a question's answer schema (docs/asking.md); None if it cannot be one
    (URL mode, more than 8 fields, a field of another shape)."""
    if params.get("mode", "form") != "form":
        return None
    requested = params.get("requestedSchema") or {}
    properties = requested.get("properties") or {}
    if not isinstance(properties, dict) or not 0 < len(properties) <= _ELICIT_MAX_FIELDS:
        return None
    fields: dict[str, Any] = {}
    for name, prop in properties.items():
        field = _elicit_field(prop) if isinstance(prop, dict) else None
        if field is None or not re.match(r"^[A-Za-z_][A-Za-z0-9_]{0,39}$", name):
            return None
        fields[name] = field
    required = [n for n in requested.get("required") or [] if n in fields]
    return {"type": "object", "properties": fields, "required": required}


def _elicit_field(prop: dict[str, Any]) -> dict[str, Any] | None:
    titled = {k: str(prop[k])[:200 if k == "title" else 1000] for k in ("title", "description") if prop.get(k)}
    kind = prop.get("type")
    options = prop.get("enum") or [o.get("const") for o in prop.get("oneOf") or [] if isinstance(o, dict)]
    if kind == "string" and options:
        return {"type": "string", "enum": [str(o) for o in options], **titled}
    if kind == "string":
        limit = min(int(prop.get("maxLength") or 2000), 3000)
        field = {"type": "string", "maxLength": limit, **titled}
        if prop.get("minLength"):
            field["minLength"] = min(int(prop["minLength"]), limit)
        return field
    if kind in ("number", "integer"):
        bounds = {k: prop[k] for k in ("minimum", "maximum") if isinstance(prop.get(k), int | float)}
        return {"type": kind, **bounds, **titled}
    if kind == "boolean":
        return {"type": "boolean", **titled}
    if kind == "array":
        items = prop.get("items") or {}
        choices = items.get("enum") or [o.get("const") for o in items.get("anyOf") or [] if isinstance(o, dict)]
        if choices:
            return {"type": "array", "items": {"type": "string", "enum": [str(c) for c in choices]}, "uniqueItems": True,
                    **{k: prop[k] for k in ("minItems", "maxItems") if isinstance(prop.get(k), int)}, **titled}  # fmt: skip
    return None


# --------------------------------------------------------------------------- running it


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
    command, *command_args = args.upstream
    params = StdioServerParameters(command=command, args=command_args, env=env)
    async with stdio_client(params, errlog=sys.stderr) as streams:
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
    # (the SDK's stdio client), or its HTTP session ended with a DELETE.
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


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_arguments(argv)
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr, format="mcp_proxy %(levelname)s %(message)s")
    try:
        return anyio.run(run, args)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
