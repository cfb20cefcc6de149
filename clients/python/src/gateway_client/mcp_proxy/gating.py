"""The proxy: one MCP session relayed between a client and an upstream server, message by message, with
every `tools/call` held and asked about in the gateway first (`ToolGate`): run upstream with the
arguments the gateway answered, or refused with the reason (the package's docstring says every case)."""

from __future__ import annotations

import contextlib
import logging
import time
import uuid
from typing import Any

import anyio
from mcp.shared.message import SessionMessage
from mcp_types import (
    CLIENT_CAPABILITIES_META_KEY,
    CONNECTION_CLOSED,
    INVALID_REQUEST,
    JSONRPCError,
    JSONRPCNotification,
    JSONRPCRequest,
    JSONRPCResponse,
)

from gateway_client.asking import HumanAsker
from gateway_client.gating import GateResult, ToolGate, result_text
from gateway_client.mcp_proxy.asking import ASK_HUMAN, AsksHuman, with_ask_human
from gateway_client.mcp_proxy.elicitation import AnswersElicitations, with_form_elicitation
from gateway_client.mcp_proxy.protocol import (
    ID_IN_USE,
    UPSTREAM_CLOSED,
    HeldCall,
    Refused,
    call_failure,
    error_answer,
    read_client_line,
    reported_result,
    text_result,
)
from gateway_client.mcp_proxy.transport import HttpStamp, SessionWatch

logger = logging.getLogger("gateway_client.mcp_proxy")

DEFAULT_MAX_WAIT = 300.0
DEFAULT_PROGRESS_INTERVAL = 5.0


class McpGatewayProxy(AsksHuman, AnswersElicitations):
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
        self.relayed: set[Any] = set()  # ids of the client's other requests the upstream has not answered
        # ids of calls the client cancelled after they were sent upstream, whose answer has not come: an
        # upstream may still answer (its answer in flight, or cancellation ignored), and that result, relayed,
        # would reach the client without the gateway's post-tool-use hooks. It is dropped when it comes.
        self.cancelled: set[Any] = set()
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
                await self._answer_unanswered()
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
        if isinstance(message, JSONRPCRequest):
            if message.id in self.calls or message.id in self.relayed or message.id in self.cancelled:
                # An upstream answer to one would be taken for the other's: a call's result could reach
                # the client unreported (never cut by the gateway), or the wrong answer reported.
                logger.warning("refused from the client: a request reusing the id %r", message.id)
                await self._to_client(error_answer(message.id, INVALID_REQUEST, ID_IN_USE))
                return
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
        if isinstance(message, JSONRPCRequest):
            self.relayed.add(message.id)
        elif isinstance(message, JSONRPCNotification) and message.method == "notifications/cancelled":
            # (A cancelled request's id stays in use until the upstream answers it, if it does.)
            call = self.calls.get((message.params or {}).get("requestId"))
            if call is not None:
                # Stop asking (which withdraws the confirmation) or waiting for the upstream.
                call.scope.cancel()
                if not call.forwarded:
                    return  # the upstream never saw this request
                if not call.answered.is_set():
                    self.cancelled.add(call.request.id)
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
                if message.id in self.cancelled:
                    self.cancelled.discard(message.id)
                    logger.info("dropped the upstream's answer to the cancelled call %r", message.id)
                    continue
                self.relayed.discard(message.id)
                call = self.calls.get(message.id)
                if call is not None and call.forwarded and not call.answered.is_set():
                    call.upstream_answer = message
                    call.answered.set()
                    continue
            await self._to_client(message)

    async def _to_client(self, message: Any) -> None:
        await self._client.send(message)

    async def _answer_unanswered(self) -> None:
        """The upstream is gone: each request of the client's still open gets an error, not silence (a
        held call is then withdrawn from the gateway as the relay stops)."""
        for request_id in [*self.relayed, *self.calls]:
            await self._to_client(error_answer(request_id, CONNECTION_CLOSED, UPSTREAM_CLOSED))
        self.relayed.clear()
        self.calls.clear()

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
                if call.progress_token is None:  # no ticker to start and stop (a cancel costs a task's repr)
                    outcome = await self._gate_call(call, tool, arguments)
                else:
                    async with anyio.create_task_group() as ticker:
                        ticker.start_soon(self._report_progress, call)
                        try:
                            outcome = await self._gate_call(call, tool, arguments)
                        finally:
                            ticker.cancel_scope.cancel()
                await self._answer(call, self._response(call, outcome))
        except Exception:
            logger.exception("the proxy failed on a call to %s", tool)
            with contextlib.suppress(Exception):
                await self._answer(call, text_result(f"the gateway proxy failed on this call to {tool}", is_error=True))
        finally:
            self.calls.pop(call.request.id, None)

    async def _gate_call(self, call: HeldCall, tool: str, arguments: dict[str, Any]) -> GateResult:
        """Ask the gateway (pre-tool-use), run the call upstream if allowed, report its result (post-tool-use)."""
        return await self.gate.acall(
            tool_name=f"{self.name}__{tool}",
            tool_args=arguments,
            tool_call_id=f"mcp-{uuid.uuid4().hex[:20]}",
            run=lambda args: self._run_upstream(call, args),
            report=reported_result,
            failure=call_failure,
            on_pending=lambda answer: self._on_pending(call, answer),
        )

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

