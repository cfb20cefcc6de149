"""The OpenAI Agents SDK (`openai-agents`) gated by the approval gateway, in one call::

    from agents import Agent, Runner
    from gateway_client import AsyncGatewayClient
    from gateway_client.openai_agents import gate_agent

    gateway = AsyncGatewayClient(GATEWAY_URL, GATEWAY_API_KEY, max_wait=300)
    result = await Runner.run(gate_agent(agent, gateway), "Pay invoice INV-7")

`gate_agent` returns a copy of the agent whose function tools ask the gateway
before they run (`gate_tool` does it for one tool). Each gated tool wraps the
tool's own invoker, so what the SDK does around it — argument validation,
guardrails, hooks, tracing — is unchanged:

- allow: the tool runs with the arguments the gateway answered (a hook may
  have rewritten them); its output is reported (post-tool-use) and what the
  gateway answers (e.g. cut by `truncate_result`) is what the model gets.
- deny, reject, still pending at `max_wait`, or an unreachable gateway: the
  tool does not run; the model gets the reason as the tool's output
  (`pay_invoice was not run: rejected by bob: over budget`).
- the tool raises: tool-error; `retry` runs it again, `recover` gives the model
  the gateway's result, `abort` raises `ToolRunAborted` (the run stops), and
  `raise` leaves the error to the tool's own `failure_error_function`.

The gateway session is `session_id` (a string, or a function of the
`ToolContext`); by default the run's trace group (`RunConfig(group_id=...)`),
else the current trace (one per `Runner.run`, unless the caller wraps several
runs in one `trace()`), and with tracing off one session per run: a run begins
with each `Runner.run` / `run_sync` / `run_streamed` (told apart by the run's
own usage record, which every tool call of the run — nested agent tools
included — shares). Two runs never share a session, nor the grants approved in
it. See docs/integrations/openai-agents.md.
"""

from __future__ import annotations

import copy
import json
import threading
import uuid
import weakref
from collections.abc import Callable, Iterable
from typing import Any

from gateway_client.asking import TOOL_NAME, HumanAsker, describe, params_schema
from gateway_client.client import AsyncGatewayClient, GatewayClient
from gateway_client.extras import MissingExtra
from gateway_client.gating import ToolGate, ToolRunAborted, result_text

try:
    from agents import Agent, FunctionTool
    from agents.tool import maybe_invoke_function_tool_failure_error_function
    from agents.tool_context import ToolContext
    from agents.tracing import get_current_trace
except ImportError as exc:  # the [openai-agents] extra is not installed
    raise MissingExtra("gateway_client.openai_agents", "openai-agents", exc.name) from exc

__all__ = ["ToolRunAborted", "ask_human_tool", "gate_agent", "gate_tool", "tool_gate"]

SessionId = str | Callable[[ToolContext[Any]], str] | None


def tool_gate(
    client: GatewayClient | AsyncGatewayClient | ToolGate,
    *,
    user_id: str | None = None,
    metadata: dict[str, Any] | None = None,
    max_wait: float | None = None,
) -> ToolGate:
    """The `ToolGate` the gated tools share (pass a `ToolGate` through unchanged)."""
    if isinstance(client, ToolGate):
        return client
    return ToolGate(
        client,
        user_id=user_id,
        metadata={"source": "openai-agents", **(metadata or {})},
        max_wait=max_wait,
        key_prefix="openai-agents",
    )


def gate_agent(
    agent: Agent[Any],
    client: GatewayClient | AsyncGatewayClient | ToolGate,
    *,
    session_id: SessionId = None,
    user_id: str | None = None,
    metadata: dict[str, Any] | None = None,
    max_wait: float | None = None,
    tool_prefix: str = "",
    tools: Iterable[str] | None = None,
) -> Agent[Any]:
    """A copy of `agent` whose function tools (all, or those named in `tools`) ask the gateway first.

    tool_prefix: prepended to the tool names the gateway sees (`billing__` → `billing__pay_invoice`).
    Handoff agents are not changed: gate each agent. Tools of the agent's MCP servers are not
    `FunctionTool`s here: put the gateway's MCP proxy in front of those servers instead.
    """
    gate = tool_gate(client, user_id=user_id, metadata=metadata, max_wait=max_wait)
    only = set(tools) if tools is not None else None
    gated = [
        gate_tool(tool, gate, name=f"{tool_prefix}{tool.name}", session_id=session_id)
        if isinstance(tool, FunctionTool) and (only is None or tool.name in only) and tool.on_invoke_tool not in _ASKING_TOOLS
        else tool
        for tool in agent.tools
    ]
    return agent.clone(tools=gated)


def gate_tool(
    tool: FunctionTool,
    client: GatewayClient | AsyncGatewayClient | ToolGate,
    *,
    name: str | None = None,
    session_id: SessionId = None,
) -> FunctionTool:
    """A copy of `tool` that asks the gateway (as the tool `name`, default its own name) before it runs."""
    gate = tool_gate(client)
    gateway_name = name or tool.name
    original = tool.on_invoke_tool
    # Call beneath the SDK's failure handling, so a raising tool is seen (and reported) as a failure;
    # the tool's own failure_error_function still formats the error when the gateway says `raise`.
    invoke = getattr(original, "_invoke_tool_impl", original)

    async def on_invoke_tool(ctx: ToolContext[Any], input_json: str) -> Any:
        try:
            arguments = json.loads(input_json) if input_json else {}
        except ValueError:
            arguments = None
        if not isinstance(arguments, dict):
            return f"{tool.name} was not run: its arguments are not a JSON object"

        async def run(tool_args: dict[str, Any]) -> Any:
            return await invoke(ctx, input_json if tool_args == arguments else json.dumps(tool_args))

        result = await gate.acall(
            tool_name=gateway_name,
            tool_args=arguments,
            tool_call_id=ctx.tool_call_id,
            session_id=_session(ctx, session_id),
            run=run,
            report=_reportable,
        )
        if result.status == "ran":
            return result.value
        if result.status == "replaced":
            return result_text(result.result)
        if result.status == "aborted":
            raise ToolRunAborted(result.message, result)
        if result.status == "failed":
            if result.exception is None:
                return result.value
            message = await maybe_invoke_function_tool_failure_error_function(
                function_tool=tool, context=ctx, error=result.exception
            )
            if message is None:  # the tool was made with failure_error_function=None: errors fail the run
                raise result.exception
            return message
        return result.message  # refused or withheld

    gated = copy.copy(tool)
    gated.on_invoke_tool = on_invoke_tool
    return gated


# The invokers of the ask_human tools made here: asking a person is not a call to gate (gate_agent
# leaves those tools as they are). FunctionTool is not hashable; its invoker is.
_ASKING_TOOLS: weakref.WeakSet[Any] = weakref.WeakSet()


def ask_human_tool(
    client: GatewayClient | AsyncGatewayClient,
    *,
    name: str = TOOL_NAME,
    answer_schema: dict[str, Any] | None = None,
    session_id: SessionId = None,
    **where: Any,
) -> FunctionTool:
    """A tool the model calls to ask a person and wait for the answer (docs/asking.md).

    Without `answer_schema` the model gives a question and, optionally, choices (free text without);
    with one (a form, say) it gives only the question. `where`: `channel`, `gate`, `approvers`,
    `timeout_seconds`, `default_answer`, `user_id`, `metadata`, `max_wait` (as `GatewayClient.ask`).
    The session is `gate_agent`'s (by default the run's). The model gets the answer as JSON, or why there
    is none.
    """
    asker = HumanAsker(client, answer_schema=answer_schema, **where)

    async def on_invoke_tool(ctx: ToolContext[Any], input_json: str) -> str:
        try:
            arguments = json.loads(input_json) if input_json else {}
        except ValueError:
            arguments = None
        if not isinstance(arguments, dict) or not arguments.get("question"):
            return "No answer: ask_human needs a question"
        return await asker.aask(arguments, session_id=_session(ctx, session_id))

    tool = FunctionTool(
        name=name,
        description=describe(answer_schema),
        params_json_schema=params_schema(answer_schema),
        on_invoke_tool=on_invoke_tool,
        strict_json_schema=True,
    )
    _ASKING_TOOLS.add(on_invoke_tool)
    return tool


def _session(ctx: ToolContext[Any], session_id: SessionId) -> str | None:
    if callable(session_id):
        return str(session_id(ctx))
    if session_id:
        return session_id
    trace = get_current_trace()
    group = getattr(trace, "group_id", None)
    if group:
        return f"openai-agents-{group}"
    trace_id = getattr(trace, "trace_id", None)
    if trace_id and trace_id != "no-op":
        return f"openai-agents-{trace_id}"
    return _run_sessions.of(ctx.usage)


class _RunSessions:
    """One session id per run, keyed by the run's `Usage` object: the SDK makes one per `Runner.run`
    and hands that same object to every `ToolContext` of the run. Held weakly: an entry goes with its run."""

    def __init__(self) -> None:
        self._sessions: dict[int, tuple[weakref.ref[Any], str]] = {}
        self._lock = threading.RLock()  # re-entered when a collection inside `of` ends a run

    def of(self, run_usage: Any) -> str:
        key = id(run_usage)
        with self._lock:
            entry = self._sessions.get(key)
            if entry is not None and entry[0]() is run_usage:
                return entry[1]
            session = f"openai-agents-run-{uuid.uuid4().hex[:16]}"
            self._sessions[key] = (weakref.ref(run_usage, lambda ref: self._forget(key, ref)), session)
            return session

    def _forget(self, key: int, ref: weakref.ref[Any]) -> None:
        with self._lock:
            if key in self._sessions and self._sessions[key][0] is ref:
                del self._sessions[key]


_run_sessions = _RunSessions()


def _reportable(output: Any) -> Any:
    """A tool output as JSON for the gateway (pydantic outputs as their JSON)."""
    if hasattr(output, "model_dump"):
        try:
            return output.model_dump(mode="json")
        except Exception:
            return str(output)
    return output
