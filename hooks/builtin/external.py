"""What `command` and `webhook` hooks send and how their answers are read.

The shape matches Claude Code's hooks so existing hook scripts work: the event
arrives as JSON (with `hook_event_name`, `tool_name`, `tool_input`…), and the
answer is either ours, `{"decision", "reason", "tool_args"}`, or Claude Code's
`{"hookSpecificOutput": {"permissionDecision", "permissionDecisionReason", "updatedInput"}}`
(also `{"decision": "block", "reason"}` from its other events).
"""

from __future__ import annotations

from typing import Any

from hooks.base import HookContext, HookResult

CLAUDE_EVENT_NAMES = {
    "session_start": "SessionStart",
    "pre_turn": "UserPromptSubmit",
    "pre_tool_use": "PreToolUse",
    "post_tool_use": "PostToolUse",
    "tool_error": "PostToolUseFailure",
    "post_turn": "Stop",
    "session_end": "SessionEnd",
}


def event_payload(ctx: HookContext, hook_name: str) -> dict[str, Any]:
    payload: dict[str, Any] = {
        "hook_event_name": CLAUDE_EVENT_NAMES[ctx.event],
        "event": ctx.event,
        "hook": hook_name,
        "agent": ctx.agent,
        "session_id": ctx.session_id,
        "user_id": ctx.user_id,
        "metadata": ctx.metadata,
    }
    if ctx.tool_name:
        payload.update(
            tool_name=ctx.tool_name,
            tool_input=ctx.tool_args,
            tool_args=ctx.tool_args,
            tool_use_id=ctx.tool_call_id,
        )
    if ctx.event == "post_tool_use":
        payload.update(tool_response=ctx.result, result=ctx.result)
    if ctx.event == "tool_error":
        payload.update(error=ctx.error, attempt=ctx.attempt, elapsed_seconds=ctx.elapsed_seconds)
    if ctx.turn_id:
        payload["turn_id"] = ctx.turn_id
    if ctx.check_only:  # an approver's edit judged again: not a call being made (docs/policies.md)
        payload["check_only"] = True
    return payload


_DECISIONS = {"allow": "allow", "approve": "allow", "deny": "deny", "block": "deny", "ask": "ask"}


def parse_answer(data: Any) -> HookResult:
    """Read a hook's JSON answer; raise ValueError on a shape we do not know."""
    if data in (None, ""):
        return HookResult.no_opinion()
    if not isinstance(data, dict):
        raise ValueError("the answer must be a JSON object")
    specific = data.get("hookSpecificOutput")
    if isinstance(specific, dict):
        decision = specific.get("permissionDecision")
        reason = specific.get("permissionDecisionReason") or ""
        tool_args = specific.get("updatedInput")
    else:
        decision = data.get("decision")
        reason = data.get("reason") or ""
        tool_args = data.get("tool_args")
    if decision is not None and decision not in _DECISIONS:
        raise ValueError(f"unknown decision {decision!r}")
    if tool_args is not None and not isinstance(tool_args, dict):
        raise ValueError("tool_args / updatedInput must be a JSON object")
    if not isinstance(reason, str):
        raise ValueError("reason must be a string")
    result = HookResult(decision=_DECISIONS.get(decision, "none"), reason=reason, tool_args=tool_args)
    if "result" in data:
        result.result = data["result"]
    return result
