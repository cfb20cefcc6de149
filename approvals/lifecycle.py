"""Services for the lifecycle events other than pre-tool-use (CONTRACT §4):
session-start, pre-turn, post-tool-use, tool-error, post-turn, session-end.

A context nests session → turn → tool call. What a session-start says
(`user_id`, `metadata`) and the current turn id are remembered per session in
HookState (scope `session:<id>`, key `context`), so a hook deep inside a tool
call sees them: as `ctx.session` (`session.user_id`, `session.metadata` in a
`when`), and as the defaults of `ctx.user_id` / `ctx.metadata` — an inner
level's own values win, key by key.

Deciding events (session_start, pre_turn) stop at the first deny; observing
events (post_tool_use, tool_error, post_turn, session_end) run every hook
(`hooks.registry.run_chain`).

Hooks keep small state through the `hook_state_*` services at the end of this
module; they never write models themselves.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import uuid
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import timezone

from approvals import selectors
from approvals.errors import NotFound
from approvals.models import Agent, ConfirmationEvent, HookState, ToolCall

SESSION_CONTEXT_KEY = "context"
_MAX_STATE_FIELD = 200  # HookState.scope and .key


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
    """Run the agent's hooks for a lifecycle event other than pre-tool-use; the contract's answer.

    `now` is the clock every hook of this event sees (`HookContext.now`);
    None means the current time.
    """
    from hooks.base import HookContext
    from hooks.registry import run_chain

    now = now or timezone.now()
    call = None
    if event in ("post_tool_use", "tool_error"):
        # Refuses (409) a call that was never allowed, and (404) one never announced.
        call = selectors.tool_call_for_completion(agent=agent, session_id=session_id, tool_call_id=tool_call_id)
        if event == "post_tool_use" and call.outcome == "success":
            # A retried post-tool-use: the success is already recorded; hooks do not run twice.
            return {"result": call.result, "side_effects": ["already_completed"]}

    if event == "session_start":
        session = session_remember(
            agent=agent,
            session_id=session_id,
            values={"user_id": user_id, "metadata": metadata or {}, "started_at": now.isoformat()},
        )
    else:
        session = session_values(agent=agent, session_id=session_id)

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
        final = chain.result if chain.result_rewritten else result
        _tool_call_complete(
            call,
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
        return _tool_error_answer(call, hooks, chain, decisions, ctx=ctx, duration_ms=duration_ms, now=now)

    if event in ("session_start", "pre_turn"):
        decision = "deny" if chain.decision == "ask" else chain.decision  # no human to ask outside a tool call
        if event == "pre_turn" and decision == "allow" and turn_id and turn_id != session.get("turn_id"):
            session_remember(agent=agent, session_id=session_id, values={"turn_id": turn_id})
        return {
            "decision": decision,
            "reason": chain.reason,
            "messages": chain.messages,
            "side_effects": chain.side_effects,
        }

    if event == "session_end":
        session_remember(agent=agent, session_id=session_id, values={"ended_at": now.isoformat()})
    return {"side_effects": chain.side_effects}


# --------------------------------------------------------------------------- tool calls


def result_size(result: Any) -> int:
    """The size of a result as the model reads it: characters of its text (JSON for non-strings)."""
    from hooks.builtin.truncate_result import result_text

    return len(result_text(result)) if result is not None else 0


def _ms_since_allowed(call: ToolCall, now: dt.datetime) -> int:
    """Duration when the agent does not say: from the moment the call was allowed until now."""
    allowed_at = call.created_at
    if call.confirmation is not None and call.confirmation.decided_at is not None:
        allowed_at = call.confirmation.decided_at
    return max(0, int((now - allowed_at).total_seconds() * 1000))


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
) -> bool:
    """Record how the call ended: one conditional UPDATE. True if this did it.

    A success is final. `supersede` (post-tool-use) may replace an ended-in-error
    or recovered record — the agent ran the tool again and it worked; otherwise
    only an open call is completed.
    """
    rows = ToolCall.objects.filter(pk=call.pk)
    rows = rows.exclude(outcome="success") if supersede else rows.filter(completed_at__isnull=True)
    return bool(
        rows.update(
            outcome=outcome,
            result=result,
            result_size=result_size,
            duration_ms=duration_ms,
            completed_at=now,
            turn_id=call.turn_id or turn_id,
            hook_decisions=call.hook_decisions + decisions,
        )
    )


def _tool_error_answer(
    call: ToolCall,
    hooks: list[Any],
    chain: Any,
    decisions: list[dict[str, Any]],
    *,
    ctx: Any,
    duration_ms: int | None,
    now: dt.datetime,
) -> dict[str, Any]:
    """The tool-error answer, with the retry caps applied whatever the hooks said.

    In priority order the first hook to answer an action wins, a hook's deny
    (a `command` exiting 2) counting as `abort` where it stands; with no
    action, a rewritten result recovers with it; else the error is raised.
    """
    side_effects = list(chain.side_effects)
    action, delay, reason = chain.action, float(chain.delay_seconds or 0), chain.reason
    order = [d["hook"] for d in chain.hook_decisions]
    denial = next((i for i, d in enumerate(chain.hook_decisions) if d["decision"] == "deny"), None)
    if denial is not None and (not action or denial < order.index(chain.decided_by)):
        hook = chain.hook_decisions[denial]
        action, delay, reason = "abort", 0.0, hook["reason"] or f"aborted by {hook['hook']}"
    elif not action:
        action = "recover" if chain.result_rewritten else "raise"
        reason = "; ".join(d["reason"] for d in chain.hook_decisions if d["reason"]) or (
            "recovered by a hook" if chain.result_rewritten else "no hook asked to retry or recover"
        )
    if action == "retry":
        max_attempts, max_total = retry_caps(hooks=hooks, ran=[d["hook"] for d in chain.hook_decisions])
        if ctx.attempt >= max_attempts:
            action, delay = "raise", 0.0
            reason = f"gave up after {ctx.attempt} attempts (max_attempts {max_attempts})"
            side_effects.append("retry_capped:max_attempts")
        elif ctx.elapsed_seconds + delay > max_total:
            action, delay = "raise", 0.0
            reason = (
                f"gave up after {ctx.elapsed_seconds:g} s: retrying in {chain.delay_seconds:g} s "
                f"would pass max_total_seconds {max_total:g}"
            )
            side_effects.append("retry_capped:max_total_seconds")
    if action != "retry":
        delay = 0.0
    result = chain.result if action == "recover" else None

    decisions = [dict(d, attempt=ctx.attempt) for d in decisions]
    # A retry leaves the call open; any other answer ends it (unless it had already ended).
    ended = action != "retry" and _tool_call_complete(
        call,
        outcome="recovered" if action == "recover" else "error",
        result=result if action == "recover" else {"error": ctx.error, "action": action, "attempt": ctx.attempt},
        result_size=result_size(result),
        duration_ms=duration_ms if duration_ms is not None else int(ctx.elapsed_seconds * 1000),
        turn_id=ctx.turn_id,
        decisions=decisions,
        now=now,
    )
    if not ended:
        _tool_call_note(call, decisions)
    return {
        "action": action,
        "delay_seconds": delay,
        "result": result,
        "reason": reason,
        "side_effects": side_effects,
    }


def retry_caps(*, hooks: list[Any], ran: list[str]) -> tuple[int, float]:
    """(max_attempts, max_total_seconds) for a retry: the tightest of the agent's
    `retry_on_error` hooks that ran for this error, or that kind's defaults if none did."""
    from hooks.schema import RetryOnErrorConfig

    configs = [h.config for h in hooks if h.kind == "retry_on_error" and h.name in ran]
    if not configs:
        fields = RetryOnErrorConfig.model_fields
        return fields["max_attempts"].default, float(fields["max_total_seconds"].default)
    return min(c.max_attempts for c in configs), float(min(c.max_total_seconds for c in configs))


def _tool_call_note(call: ToolCall, decisions: list[dict[str, Any]]) -> None:
    """Append a tool-error's hook decisions to the call's audit trail."""
    current = ToolCall.objects.filter(pk=call.pk).values_list("hook_decisions", flat=True).first() or []
    ToolCall.objects.filter(pk=call.pk).update(hook_decisions=current + decisions)


def tool_call_audit(*, tool_call_id: str) -> dict[str, Any]:
    """One ToolCall in full, for audits (`manage.py describe_toolcall`): args, every
    hook's decision with its config version, the approval and its events, result, timings.

    `tool_call_id` is the record's UUID, or an agent's `tool_call_id` that names one record.
    """
    try:
        calls = list(ToolCall.objects.filter(pk=uuid.UUID(str(tool_call_id))))
    except ValueError:
        calls = []
    if not calls:
        calls = list(ToolCall.objects.filter(tool_call_id=tool_call_id)[:10])
    if not calls:
        raise NotFound(f"no tool call {tool_call_id!r}")
    if len(calls) > 1:
        ids = ", ".join(str(c.pk) for c in calls)
        raise NotFound(f"{tool_call_id!r} names several tool calls; give one id: {ids}")
    call = ToolCall.objects.select_related("agent", "confirmation", "confirmation__channel").get(pk=calls[0].pk)

    def iso(value: dt.datetime | None) -> str | None:
        return value.isoformat() if value else None

    approval = None
    if call.confirmation is not None:
        c = call.confirmation
        approval = {
            "id": str(c.pk),
            "status": c.status,
            "channel": c.channel.name,
            "approvers": c.approvers,
            "approvals_required": c.approvals_required,
            "gate": c.hook_name,
            "config_version": c.config_version,
            "reason": c.reason,
            "decided_by": c.decided_by or None,
            "decided_at": iso(c.decided_at),
            "decision_reason": c.decision_reason,
            "expires_at": iso(c.expires_at),
            "responses": [
                {
                    "approver": r.approver,
                    "decision": r.decision,
                    "reason": r.reason,
                    "channel": r.channel,
                    "at": iso(r.created_at),
                }
                for r in c.responses.all()
            ],
            "events": [
                {"kind": e.kind, "actor": e.actor, "channel": e.channel, "message": e.message, "at": iso(e.created_at)}
                for e in ConfirmationEvent.objects.filter(confirmation=c)
            ],
        }
    return {
        "id": str(call.pk),
        "agent": call.agent.name,
        "session_id": call.session_id,
        "turn_id": call.turn_id,
        "tool_call_id": call.tool_call_id,
        "tool_name": call.tool_name,
        "tool_args": call.tool_args,
        "user_id": call.user_id,
        "metadata": call.metadata,
        "idempotency_key": call.idempotency_key,
        "decision": call.decision,
        "reason": call.reason,
        "decided_by_hook": call.decided_by_hook,
        "config_version": call.config_version,
        # pre-tool-use decisions were stored without event and version: they are the call's own.
        "hook_decisions": [
            {"event": "pre_tool_use", "config_version": call.config_version, **d} for d in call.hook_decisions
        ],
        "approval": approval,
        "outcome": call.outcome or None,
        "result": call.result,
        "result_size": call.result_size,
        "duration_ms": call.duration_ms,
        "created_at": iso(call.created_at),
        "completed_at": iso(call.completed_at),
    }


# --------------------------------------------------------------------------- session context


def state_field(*parts: str) -> str:
    """Join parts into a HookState scope or key, hashing the tail if it would not fit."""
    text = ":".join(parts)
    if len(text) <= _MAX_STATE_FIELD:
        return text
    digest = hashlib.sha256(text.encode()).hexdigest()
    return f"{text[: _MAX_STATE_FIELD - len(digest) - 1]}~{digest}"


def session_scope(session_id: str) -> str:
    return state_field("session", session_id)


def session_values(*, agent: Agent, session_id: str) -> dict[str, Any]:
    """What outer levels set for this session: `user_id`, `metadata` (session-start),
    `turn_id` (the current turn), `started_at`, `ended_at`. {} if nothing was said."""
    value = (
        HookState.objects.filter(agent=agent, scope=session_scope(session_id), key=SESSION_CONTEXT_KEY)
        .values_list("value", flat=True)
        .first()
    )
    return dict(value) if isinstance(value, dict) else {}


def session_remember(*, agent: Agent, session_id: str, values: dict[str, Any]) -> dict[str, Any]:
    """Merge `values` into the session's context; returns the context now stored."""
    scope = session_scope(session_id)
    with transaction.atomic():
        state, _ = HookState.objects.select_for_update().get_or_create(
            agent=agent, scope=scope, key=SESSION_CONTEXT_KEY, defaults={"value": {}}
        )
        merged = {**(state.value or {}), **values}
        if merged != state.value:
            HookState.objects.filter(pk=state.pk).update(value=merged)
    return merged


# --------------------------------------------------------------------------- hook state (for hooks)


def _agent_id(agent_name: str) -> int:
    return Agent.objects.values_list("pk", flat=True).get(name=agent_name)


def hook_state_get(*, agent_name: str, scope: str, key: str, now: dt.datetime | None = None) -> Any:
    """A stored value, or None if there is none or it expired by `now`."""
    row = (
        HookState.objects.filter(agent__name=agent_name, scope=scope, key=key)
        .values_list("value", "expires_at")
        .first()
    )
    if row is None:
        return None
    value, expires_at = row
    if expires_at is not None and expires_at <= (now or timezone.now()):
        return None
    return value


def hook_state_put(
    *, agent_name: str, scope: str, key: str, value: Any, expires_at: dt.datetime | None = None
) -> None:
    """Store a value (replacing any), optionally until `expires_at`."""
    HookState.objects.update_or_create(
        agent_id=_agent_id(agent_name), scope=scope, key=key, defaults={"value": value, "expires_at": expires_at}
    )


def hook_state_swap(*, agent_name: str, scope: str, key: str, value: Any) -> bool:
    """Store `value` unless it is what is stored already. True if it changed."""
    agent_id = _agent_id(agent_name)
    with transaction.atomic():
        state, created = HookState.objects.select_for_update().get_or_create(
            agent_id=agent_id, scope=scope, key=key, defaults={"value": value}
        )
        if created:
            return True
        if state.value == value:
            return False
        HookState.objects.filter(pk=state.pk).update(value=value)
        return True


def hook_state_claim(*, agent_name: str, scope: str, key: str) -> bool:
    """Insert a marker if there is none. True for the one caller that inserted it."""
    try:
        with transaction.atomic():
            HookState.objects.create(agent_id=_agent_id(agent_name), scope=scope, key=key)
    except IntegrityError:
        return False
    return True


def hook_state_release(*, agent_name: str, scope: str, key: str) -> None:
    """Remove a marker (a claim whose work failed)."""
    HookState.objects.filter(agent__name=agent_name, scope=scope, key=key).delete()


class _Refused(Exception):
    pass


def hook_state_count(*, agent_name: str, scope: str, key: str, limit: int, once_per: str = "") -> tuple[bool, int]:
    """Count one more under `limit`: (counted, count now). Exact under concurrency:
    the increment is one conditional UPDATE (`counter < limit`).

    `once_per` (e.g. a turn id) makes a repeat harmless: a second count for the
    same value is answered as counted without counting again.
    """
    agent_id = _agent_id(agent_name)
    rows = HookState.objects.filter(agent_id=agent_id, scope=scope, key=key)
    try:
        with transaction.atomic():
            if once_per:
                try:
                    with transaction.atomic():
                        HookState.objects.create(agent_id=agent_id, scope=scope, key=state_field(key, "seen", once_per))
                except IntegrityError:
                    return True, rows.values_list("counter", flat=True).first() or 0
            HookState.objects.get_or_create(agent_id=agent_id, scope=scope, key=key)
            counted = rows.filter(counter__lt=limit).update(counter=F("counter") + 1)
            if not counted:
                raise _Refused  # rolls back the `once_per` marker: a refused count is not remembered
    except _Refused:
        return False, rows.values_list("counter", flat=True).first() or 0
    return True, rows.values_list("counter", flat=True).first() or 0
