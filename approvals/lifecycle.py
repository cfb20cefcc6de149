"""Services for the lifecycle events other than pre-tool-use (CONTRACT §4):
session-start, pre-turn, post-tool-use, tool-error, post-turn, session-end.
"""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

from django.utils import timezone

from approvals import selectors
from approvals.models import Agent, ToolCall


def hook_event_run(
    *,
    agent: Agent,
    event: str,
    session_id: str,
    turn_id: str = "",
    tool_name: str = "",
    tool_args: dict[str, Any] | None = None,
    tool_call_id: str = "",
    user_id: str = "",
    metadata: dict[str, Any] | None = None,
    result: Any = None,
    error: str = "",
    attempt: int = 1,
    elapsed_seconds: float = 0.0,
    duration_ms: int | None = None,
    outcome: str = "success",
    now: dt.datetime | None = None,
) -> dict[str, Any]:
    """Run the agent's hooks for a lifecycle event other than pre-tool-use; the contract's answer."""
    from hooks.base import HookContext
    from hooks.registry import run_chain

    call = None
    if event in ("post_tool_use", "tool_error"):
        call = selectors.tool_call_for_completion(agent=agent, session_id=session_id, tool_call_id=tool_call_id)
        tool_name = tool_name or call.tool_name
    version, hooks = selectors.agent_hooks(agent=agent)
    ctx = HookContext(
        event=event,
        agent=agent.name,
        session_id=session_id,
        user_id=user_id or (call.user_id if call else ""),
        metadata=metadata or (call.metadata if call else {}),
        tool_name=tool_name,
        tool_args=tool_args or {},
        tool_call_id=tool_call_id,
        turn_id=turn_id,
        agent_read_only=agent.read_only,
        config_version=version,
        result=result,
        error=error,
        attempt=attempt,
        elapsed_seconds=elapsed_seconds,
        now=now,
    )
    chain = run_chain(hooks, ctx)
    if event == "post_tool_use":
        final = chain.result if chain.result_rewritten else result
        size = len(json.dumps(result, default=str)) if result is not None else 0
        ToolCall.objects.filter(pk=call.pk).update(
            outcome=outcome,
            result=final,
            result_size=size,
            duration_ms=duration_ms,
            completed_at=timezone.now(),
            hook_decisions=call.hook_decisions + [dict(d, event=event) for d in chain.hook_decisions],
        )
        return {"result": final, "side_effects": chain.side_effects}
    if event == "tool_error":
        return {
            "action": chain.action or "raise",
            "delay_seconds": chain.delay_seconds,
            "result": chain.result if chain.result_rewritten else None,
            "reason": chain.reason,
        }
    if event in ("session_start", "pre_turn"):
        return {
            "decision": chain.decision if chain.decision != "ask" else "deny",
            "reason": chain.reason,
            "messages": chain.messages,
            "side_effects": chain.side_effects,
        }
    return {"side_effects": chain.side_effects}
