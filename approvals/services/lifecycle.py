"""The lifecycle events other than pre-tool-use (docs/events/): session-start, pre-turn,
post-tool-use, tool-error, post-turn, session-end.

A context nests session → turn → tool call. What a session-start says
(`user_id`, `metadata`) and the current turn id are remembered per session in
the hooks' store (`hooks.state.session_remember`), so a hook deep inside a tool
call sees them: as `ctx.session` (`session.user_id`, `session.metadata` in a
`when`), and as the defaults of `ctx.user_id` / `ctx.metadata` — an inner
level's own values win, key by key.

Deciding events (session_start, pre_turn) stop at the first deny; observing
events (post_tool_use, tool_error, post_turn, session_end) run every hook
(`hooks.chain.run_chain`). Post-tool-use and tool-error complete the call's
`ToolCall` record with one conditional UPDATE; the record as it then is joins
the agent's tamper-evident chain in the same transaction (docs/audit.md).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.db import transaction
from django.utils import timezone

from approvals import selectors
from approvals.audit import TOOL_CALL_FIELDS
from approvals.models import Agent, AuditAction, ToolCall
from approvals.prepared import PreparedRead
from approvals.services.audit import audit_append
from hooks import state as hook_state
from hooks.base import HookContext, result_text
from approvals.services.grants import grants_end_session
from hooks.chain import mask_args, run_chain, tool_error_verdict


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
    """Run the agent's hooks for a lifecycle event other than pre-tool-use; the API's answer.

    `now` is the clock every hook of this event sees (`HookContext.now`);
    None means the current time.
    """
    now = now or timezone.now()
    call = None
    if event in ("post_tool_use", "tool_error"):
        # Refuses (409) a call that was never allowed, and (404) one never announced.
        call = selectors.tool_call_for_completion(agent=agent, session_id=session_id, tool_call_id=tool_call_id)
        if event == "post_tool_use" and call.outcome == "success":
            # A retried post-tool-use: the success is already recorded; hooks do not run twice.
            return {"result": call.result, "side_effects": ["already_completed"]}

    if event == "session_start":
        session = hook_state.session_remember(
            agent=agent.name,
            session_id=session_id,
            values={"user_id": user_id, "metadata": metadata or {}, "started_at": now.isoformat()},
        )
    else:
        session = hook_state.session_values(agent=agent.name, session_id=session_id)

    if event not in ("session_start", "pre_turn"):  # these open a turn: never inherit the last one's id
        turn_id = turn_id or (call.turn_id if call else "") or session.get("turn_id", "")
    version, hooks = selectors.agent_hooks(agent=agent)
    ctx = HookContext(
        event=event,
        agent=agent.name,
        session_id=session_id,
        user_id=user_id or (call.user_id if call else "") or session.get("user_id", ""),
        # Outer levels first; an inner level's own keys win.
        metadata={**session.get("metadata", {}), **(call.metadata if call else {}), **(metadata or {})},
        tool_name=call.tool_name if call else tool_name,
        tool_args=tool_args or (call.tool_args if call else {}),
        tool_call_id=tool_call_id,
        turn_id=turn_id,
        agent_read_only=agent.read_only,
        config_version=version,
        result=result,
        error=error,
        attempt=attempt,
        elapsed_seconds=elapsed_seconds,
        now=now,
        session={"user_id": "", "metadata": {}, "turn_id": "", **session},  # `when` may rely on these keys
    )
    chain = run_chain(hooks, ctx)
    decisions = [dict(d, event=event, config_version=version) for d in chain.hook_decisions]

    if event == "post_tool_use":
        assert call is not None
        final = chain.result if chain.result_rewritten else result
        _tool_call_complete(
            call,
            # What ran (the third record of an edited approval), masked like everything stored.
            ran_args=mask_args(hooks, tool_args) if tool_args else None,
            outcome=outcome,
            result=final,
            result_size=result_size(result),
            duration_ms=duration_ms if duration_ms is not None else _ms_since_allowed(call, now),
            turn_id=turn_id,
            decisions=decisions,
            now=now,
            supersede=True,
        )
        return {"result": final, "side_effects": chain.side_effects}

    if event == "tool_error":
        assert call is not None
        verdict = tool_error_verdict(hooks, chain, ctx)
        decisions = [dict(d, attempt=ctx.attempt) for d in decisions]
        # A retry leaves the call open; any other answer ends it (unless it had already ended).
        ended = verdict.action != "retry" and _tool_call_complete(
            call,
            outcome="recovered" if verdict.action == "recover" else "error",
            result=(
                verdict.result
                if verdict.action == "recover"
                else {"error": ctx.error, "action": verdict.action, "attempt": ctx.attempt}
            ),
            result_size=result_size(verdict.result),
            duration_ms=(
                duration_ms if duration_ms is not None else min(int(ctx.elapsed_seconds * 1000), MAX_DURATION_MS)
            ),
            turn_id=ctx.turn_id,
            decisions=decisions,
            now=now,
        )
        if not ended:
            _tool_call_note(call, decisions)
        return {
            "action": verdict.action,
            "delay_seconds": verdict.delay_seconds,
            "result": verdict.result,
            "reason": verdict.reason,
            "side_effects": verdict.side_effects,
        }

    if event in ("session_start", "pre_turn"):
        decision = "deny" if chain.decision == "ask" else chain.decision  # no human to ask outside a tool call
        if event == "pre_turn" and decision == "allow" and turn_id and turn_id != session.get("turn_id"):
            hook_state.session_remember(agent=agent.name, session_id=session_id, values={"turn_id": turn_id})
        return {
            "decision": decision,
            "reason": chain.reason,
            "messages": chain.messages,
            "side_effects": chain.side_effects,
        }

    if event == "session_end":
        hook_state.session_remember(agent=agent.name, session_id=session_id, values={"ended_at": now.isoformat()})
        grants_end_session(agent=agent, session_id=session_id)  # "for this session" ends with it
    return {"side_effects": chain.side_effects}


MAX_DURATION_MS = 2**31 - 1  # what `ToolCall.duration_ms` holds (24.8 days); longer is recorded as that


def result_size(result: Any) -> int:
    """The size of a result as the model reads it: characters of its text (JSON for non-strings)."""
    return len(result_text(result)) if result is not None else 0


def _ms_since_allowed(call: ToolCall, now: dt.datetime) -> int:
    """Duration when the agent does not say: from the moment the call was allowed until now."""
    allowed_at = call.created_at
    if call.confirmation is not None and call.confirmation.decided_at is not None:
        allowed_at = call.confirmation.decided_at
    return min(max(0, int((now - allowed_at).total_seconds() * 1000)), MAX_DURATION_MS)


def _tool_call_complete(
    call: ToolCall,
    *,
    outcome: str,
    result: Any,
    result_size: int,
    duration_ms: int,
    turn_id: str,
    decisions: list[dict[str, Any]],
    now: dt.datetime,
    supersede: bool = False,
    ran_args: dict[str, Any] | None = None,
) -> bool:
    """Record how the call ended: one conditional UPDATE. True if this did it.

    A success is final. `supersede` (post-tool-use) may replace an ended-in-error
    or recovered record — the agent ran the tool again and it worked; otherwise
    only an open call is completed.
    """
    rows = ToolCall.objects.filter(pk=call.pk)
    rows = rows.exclude(outcome="success") if supersede else rows.filter(completed_at__isnull=True)
    with transaction.atomic():
        changed = rows.update(
            outcome=outcome,
            result=result,
            result_size=result_size,
            duration_ms=duration_ms,
            completed_at=now,
            turn_id=call.turn_id or turn_id,
            hook_decisions=call.hook_decisions + decisions,
            **({"ran_args": ran_args} if ran_args is not None else {}),
        )
        if changed:
            _audit(call, AuditAction.COMPLETED)
    return bool(changed)


def _tool_call_note(call: ToolCall, decisions: list[dict[str, Any]]) -> None:
    """Append a tool-error's hook decisions to the call's audit trail."""
    with transaction.atomic():
        # The row lock keeps two notes (or a note and a completion) from losing each other's decisions.
        current = ToolCall.objects.select_for_update().filter(pk=call.pk).values_list("hook_decisions", flat=True).first()
        ToolCall.objects.filter(pk=call.pk).update(hook_decisions=(current or []) + decisions)
        _audit(call, AuditAction.NOTED)


# A completed call read back for its chain entry: every allowed call's post-tool-use makes it, and the ORM
# composing it each time cost more than running it (approvals.prepared).
_READ_BACK = PreparedRead(lambda pk: ToolCall.objects.filter(pk=pk))


def _audit(call: ToolCall, action: str) -> None:
    """Link the record as the database now holds it (read back: what was just written, exactly — the
    ORM's own conversion of each column, as `.values()` gives it)."""
    written = _READ_BACK.first(call.pk)
    if written is None:
        raise ToolCall.DoesNotExist(f"tool call {call.pk} is gone")
    row = {name: getattr(written, name) for name in TOOL_CALL_FIELDS}
    audit_append(agent_id=row["agent_id"], action=action, row=row, source="tool_call")
