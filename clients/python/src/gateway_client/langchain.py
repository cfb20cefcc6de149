"""LangChain v1 / LangGraph agents gated by the approval gateway: one middleware for `create_agent`::

    from langchain.agents import create_agent
    from gateway_client import GatewayClient
    from gateway_client.langchain import GatewayMiddleware

    gateway = GatewayClient(GATEWAY_URL, GATEWAY_API_KEY, max_wait=300)
    agent = create_agent(model, tools=[pay_invoice, get_balance], middleware=[GatewayMiddleware(gateway)])

`GatewayMiddleware` wraps every tool call (`wrap_tool_call` for `invoke` /
`stream`, `awrap_tool_call` for `ainvoke` / `astream`):

- allow: the tool runs with the arguments the gateway answered (a hook may
  have rewritten them: `request.override(tool_call=...)`); its result is
  reported (post-tool-use) and, if the gateway changed it (e.g. cut it with
  `truncate_result`), the model gets the gateway's version in the `ToolMessage`.
- deny, reject, still pending at `max_wait`, or an unreachable gateway: the
  tool does not run; the model gets a `ToolMessage` (`status="error"`) with the
  reason (`pay_invoice was not run: rejected by bob: over budget`).
- the tool fails (raises, or returns an error `ToolMessage`): tool-error;
  `retry` runs it again, `recover` gives the model the gateway's result,
  `abort` raises `ToolRunAborted`, and `raise` leaves the error as it was (an
  exception propagates as it would without the middleware).

The gateway session is `session_id` (a string, or a function of the
`ToolCallRequest`); by default the LangGraph thread (`config["configurable"]
["thread_id"]`), else one session per run of the agent: a run begins with each
`invoke` / `ainvoke` / `stream` / `astream` (the middleware's `before_agent`
names a new session, kept in the agent's state, private to the middleware), so
two runs never share a session — nor the grants approved in it. A
`GatewayClient` serves both sync and async runs; an `AsyncGatewayClient` only
async ones. See docs/integrations/langchain.md.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Iterable
from typing import Annotated, Any, NotRequired

from gateway_client.asking import TOOL_NAME, HumanAsker, describe, params_schema
from gateway_client.client import AsyncGatewayClient, GatewayClient
from gateway_client.extras import MissingExtra
from gateway_client.gating import GateResult, ToolGate, ToolRunAborted, result_text

try:
    from langchain.agents.middleware import AgentMiddleware, AgentState
    from langchain.agents.middleware.types import PrivateStateAttr
    from langchain.tools import ToolRuntime
    from langchain_core.messages import ToolMessage
    from langchain_core.tools import StructuredTool
    from langgraph.prebuilt.tool_node import ToolCallRequest
    from langgraph.types import Command
except ImportError as exc:  # the [langchain] extra is not installed
    raise MissingExtra("gateway_client.langchain", "langchain", exc.name) from exc

__all__ = ["GatewayMiddleware", "ToolRunAborted", "ask_human_tool"]
ASKS_HUMAN = "gateway_asks_human"  # a tool's metadata key: asking a person is not a call to gate

SessionId = str | Callable[[ToolCallRequest], str] | None
RUN_SESSION = "gateway_session_id"  # the state key naming the session of the current run


class GatewayState(AgentState[Any]):
    """The agent's state, plus the gateway session of the current run (neither input nor output)."""

    gateway_session_id: NotRequired[Annotated[str, PrivateStateAttr]]


class GatewayMiddleware(AgentMiddleware):
    """Asks the gateway before each tool call of a `create_agent` agent (see the module docstring).

    client: a `GatewayClient` (sync and async runs) or `AsyncGatewayClient` (async runs), or a `ToolGate`.
    session_id: the gateway session (a string, or a function of the `ToolCallRequest`).
    user_id, metadata: sent with every call. max_wait: seconds to wait for a human.
    tool_prefix: prepended to the tool names the gateway sees. tools: gate only these tool names.
    """

    state_schema = GatewayState

    def __init__(
        self,
        client: GatewayClient | AsyncGatewayClient | ToolGate,
        *,
        session_id: SessionId = None,
        user_id: str | None = None,
        metadata: dict[str, Any] | None = None,
        max_wait: float | None = None,
        tool_prefix: str = "",
        tools: Iterable[str] | None = None,
    ):
        super().__init__()
        self.gate = (
            client
            if isinstance(client, ToolGate)
            else ToolGate(
                client,
                user_id=user_id,
                metadata={"source": "langchain", **(metadata or {})},
                max_wait=max_wait,
                key_prefix="langchain",
            )
        )
        self.session_id = session_id
        self.tool_prefix = tool_prefix
        self.only = set(tools) if tools is not None else None

    def before_agent(self, state: Any, runtime: Any) -> dict[str, Any]:
        """A run begins: it gets a session of its own (used when neither `session_id` nor a thread names one)."""
        return {RUN_SESSION: f"langchain-{uuid.uuid4().hex[:16]}"}

    async def abefore_agent(self, state: Any, runtime: Any) -> dict[str, Any]:
        return self.before_agent(state, runtime)

    def wrap_tool_call(
        self, request: ToolCallRequest, handler: Callable[[ToolCallRequest], ToolMessage | Command[Any]]
    ) -> ToolMessage | Command[Any]:
        call = request.tool_call
        if not self._gated(call) or _asks_human(request):
            return handler(request)
        if not isinstance(self.gate.client, GatewayClient):
            raise TypeError(
                "GatewayMiddleware with an AsyncGatewayClient gates async runs only (ainvoke/astream); "
                "give it a GatewayClient to gate invoke/stream"
            )
        arguments = dict(call.get("args") or {})
        result = self.gate.call(
            tool_name=f"{self.tool_prefix}{call['name']}",
            tool_args=arguments,
            tool_call_id=call.get("id"),
            session_id=self._session(request),
            run=lambda tool_args: handler(_with_args(request, arguments, tool_args)),
            report=_reportable,
            failure=_failure,
        )
        return _answer(request, result)

    async def awrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], Awaitable[ToolMessage | Command[Any]]],
    ) -> ToolMessage | Command[Any]:
        call = request.tool_call
        if not self._gated(call) or _asks_human(request):
            return await handler(request)
        arguments = dict(call.get("args") or {})
        result = await self.gate.acall(
            tool_name=f"{self.tool_prefix}{call['name']}",
            tool_args=arguments,
            tool_call_id=call.get("id"),
            session_id=self._session(request),
            run=lambda tool_args: handler(_with_args(request, arguments, tool_args)),
            report=_reportable,
            failure=_failure,
        )
        return _answer(request, result)

    def _gated(self, call: dict[str, Any]) -> bool:
        return self.only is None or call.get("name") in self.only

    def _session(self, request: ToolCallRequest) -> str | None:
        if callable(self.session_id):
            return str(self.session_id(request))
        if self.session_id:
            return self.session_id
        config = getattr(request.runtime, "config", None) or {}
        thread = (config.get("configurable") or {}).get("thread_id")
        if thread:
            return f"langgraph-{thread}"
        state = request.state
        run = state.get(RUN_SESSION) if isinstance(state, dict) else getattr(state, RUN_SESSION, None)
        return run or None  # None (a tool node run outside `create_agent`): the gate's own session


def _run_session(runtime: Any) -> str | None:
    """The session of the run a tool is called in: the LangGraph thread, else the run's (the
    middleware's, or one named by the run's first message)."""
    config = getattr(runtime, "config", None) or {}
    thread = (config.get("configurable") or {}).get("thread_id")
    if thread:
        return f"langgraph-{thread}"
    state = getattr(runtime, "state", None) or {}
    if isinstance(state, dict):
        if state.get(RUN_SESSION):
            return state[RUN_SESSION]
        messages = state.get("messages") or []
        first = getattr(messages[0], "id", None) if messages else None
        if first:
            return f"langchain-{first}"
    return None


def _asks_human(request: ToolCallRequest) -> bool:
    """An `ask_human_tool`: asking a person is not a tool call to gate."""
    return bool((getattr(request.tool, "metadata", None) or {}).get(ASKS_HUMAN))


def _with_args(request: ToolCallRequest, asked: dict[str, Any], answered: dict[str, Any]) -> ToolCallRequest:
    """The request to run: the gateway's arguments (a hook may have rewritten them)."""
    if answered == asked:
        return request
    return request.override(tool_call={**request.tool_call, "args": answered})


def _reportable(value: Any) -> Any:
    """What the gateway gets as the result: the ToolMessage's content (a Command's messages' contents)."""
    if isinstance(value, ToolMessage):
        return value.content
    if isinstance(value, Command):
        update = value.update if isinstance(value.update, dict) else {}
        messages = [m.content for m in update.get("messages", []) if isinstance(m, ToolMessage)]
        return messages if messages else repr(value)
    return value


def _failure(value: Any) -> str | None:
    if isinstance(value, ToolMessage) and value.status == "error":
        return result_text(value.content) or "the tool failed"
    return None


def _answer(request: ToolCallRequest, result: GateResult) -> ToolMessage | Command[Any]:
    call = request.tool_call
    if result.status == "ran":
        return result.value
    if result.status == "replaced":
        return ToolMessage(content=result_text(result.result), tool_call_id=call.get("id"), name=call.get("name"))
    if result.status == "aborted":
        raise ToolRunAborted(result.message, result)
    if result.status == "failed":
        if result.exception is not None:
            raise result.exception
        return result.value
    return ToolMessage(content=result.message, tool_call_id=call.get("id"), name=call.get("name"), status="error")


def ask_human_tool(
    client: GatewayClient | AsyncGatewayClient,
    *,
    name: str = TOOL_NAME,
    answer_schema: dict[str, Any] | None = None,
    session_id: str | None = None,
    **where: Any,
) -> StructuredTool:
    """A LangChain tool the model calls to ask a person and wait for the answer (docs/asking.md).

    Without `answer_schema` the model gives a question and, optionally, choices (free text without);
    with one (a form, say) it gives only the question. `where`: `channel`, `gate`, `approvers`,
    `timeout_seconds`, `default_answer`, `user_id`, `metadata`, `max_wait` (as `GatewayClient.ask`).
    A `GatewayClient` serves sync and async runs, an `AsyncGatewayClient` async ones. `GatewayMiddleware`
    does not gate it (its metadata says it asks a human). The model gets the answer as JSON, or why there
    is none.
    """
    asker = HumanAsker(client, answer_schema=answer_schema, **where)

    def ask_human(runtime: ToolRuntime, **arguments: Any) -> str:
        return asker.ask(arguments, session_id=session_id or _run_session(runtime))

    async def aask_human(runtime: ToolRuntime, **arguments: Any) -> str:
        return await asker.aask(arguments, session_id=session_id or _run_session(runtime))

    return StructuredTool.from_function(
        func=ask_human if isinstance(client, GatewayClient) else None,
        coroutine=aask_human,
        name=name,
        description=describe(answer_schema),
        args_schema=params_schema(answer_schema),
        metadata={ASKS_HUMAN: True},
    )
