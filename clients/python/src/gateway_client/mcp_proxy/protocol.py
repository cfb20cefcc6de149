"""The MCP messages the proxy reads and writes: the results it answers a `tools/call` with, what it
reports to the gateway of a call's result, the client's lines read strictly (`read_client_line`), and a
call held while the gateway is asked (`HeldCall`)."""

from __future__ import annotations

import dataclasses
import json
import time
from typing import Any

import anyio
from mcp.shared.message import SessionMessage
from mcp_types import (  # the MCP SDK's protocol types (`mcp.types` re-exports them)
    INVALID_REQUEST,
    PARSE_ERROR,
    PROTOCOL_VERSION_META_KEY,
    CallToolResult,
    JSONRPCError,
    JSONRPCRequest,
    JSONRPCResponse,
    TextContent,
    jsonrpc_message_adapter,
)
from pydantic import ValidationError

from gateway_client.gating import result_text


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
BAD_CALL_METHOD = "the method is tools/call, spelled exactly so"
ID_IN_USE = "the request id is already in use by a request not yet answered"
UPSTREAM_CLOSED = "the upstream server closed the connection before it answered"


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
    without the gate. So is a method that is `tools/call` but for case or surrounding blanks."""
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
    method = data.get("method")
    if isinstance(method, str) and method != "tools/call" and method.strip().lower() == "tools/call":
        # `Tools/Call`, ` tools/call`: not the method to an exact server, but one that folds case runs it.
        return Refused(
            error_answer(_answerable_id(data), INVALID_REQUEST, BAD_CALL_METHOD) if "id" in data else None,
            f"a message with the method {method!r} refused",
        )
    if method == "tools/call" and not isinstance(message, JSONRPCRequest):
        if "id" not in data:
            return Refused(None, "a tools/call without an id (a notification) dropped: nothing could answer it")
        return Refused(error_answer(None, INVALID_REQUEST, BAD_CALL_ID), f"a tools/call with the id {data['id']!r}")
    return SessionMessage(message)


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

