"""Tool calls and grants: the live grants that cover a call, the grants a person sees, the call a completion
reports on, and a call's full record for audits."""

from __future__ import annotations

import datetime as dt
import logging
import uuid
from typing import Any

from django.db.models import Q, QuerySet
from django.utils import timezone

from approvals.audit import GRANT_SIGNED, chained_row_verifies, decision_verifies
from approvals.errors import Conflict, InvalidInput, NotFound
from approvals.models import Agent, ConfirmationRequest, Grant, Status, ToolCall
from approvals.prepared import PreparedRead
from approvals.selectors.requests import answer_for_confirmation
from approvals.selectors.teams import of_teams


logger = logging.getLogger("approvals.audit")


def live_grant_for(
    *, agent: Agent, session_id: str, user_id: str, tool_name: str, gate: str, fingerprint: str, now: dt.datetime
) -> list[Any]:
    """Ids of the live grants whose scope covers this call (its user's, or made without a user for a
    call without one), oldest first (the caller uses one with a conditional UPDATE, which re-checks
    that it is still live). Only grants that verify — their `decision_mac`, and the latest entry of the
    audit chain about them: one inserted, widened or un-revoked behind the gateway's back allows nothing."""
    rows = (
        Grant.objects.filter(
            agent=agent, session_id=session_id, user_id=user_id, tool_name=tool_name, gate=gate, revoked_at__isnull=True
        )
        .filter(Q(expires_at__isnull=True) | Q(expires_at__gt=now))
        .filter(Q(args_fingerprint="") | Q(args_fingerprint=fingerprint))
        .order_by("created_at")
        .values(*GRANT_SIGNED, "decision_mac")[:5]
    )
    live = []
    for row in rows:
        # Its MAC (nothing made up), and the chain's latest entry about it (nothing rolled back to a state
        # it really had: a grant restored from before its revocation).
        if decision_verifies(Grant, row) and chained_row_verifies("grant", row):
            live.append(row["id"])
        else:
            logger.error("grant %s does not verify against its decision_mac and its audit entry: not used", row["id"])
    return live


def grants_live_for(*, user: Any) -> QuerySet[Grant]:
    """The live grants of `user`'s teams, latest first, at most 200, with their request and its channels (the
    page keeps those the user granted or could have decided: `channels_ext.web.display.live_grants_for`)."""
    now = timezone.now()
    return of_teams(
        Grant.objects.select_related("agent", "confirmation__agent", "confirmation__channel", "confirmation__escalate_channel")
        .filter(revoked_at__isnull=True)
        .filter(Q(expires_at__isnull=True) | Q(expires_at__gt=now))
        .order_by("-created_at"),
        user,
        path="agent__team",
    )[:200]


def grant_is_revoked(*, grant_id: Any) -> bool:
    """Whether the grant `grant_id` exists and was revoked."""
    return Grant.objects.filter(pk=grant_id, revoked_at__isnull=False).exists()


def grants_of_confirmation(*, confirmation: ConfirmationRequest) -> QuerySet[Grant]:
    """The grants made with a request's approval, first first."""
    return Grant.objects.filter(confirmation=confirmation).order_by("created_at")


# The call a post-tool-use or tool-error reports on: every allowed call's report reads it, and composing it
# with the ORM each time cost more than running it — prepared once per connection (approvals.prepared).
_FOR_COMPLETION = PreparedRead(
    lambda agent_id, session_id, tool_call_id: ToolCall.objects.select_related("confirmation")
    .filter(agent_id=agent_id, session_id=session_id, tool_call_id=tool_call_id)
    .order_by("-created_at")[:1],
    placeholders=(-2_147_480_001, "\x1fsession-id", "\x1ftool-call-id"),
)


def tool_call_for_completion(*, agent: Agent, session_id: str, tool_call_id: str) -> ToolCall:
    """The allowed call a post-tool-use / tool-error reports on; refuses calls never allowed."""
    if not tool_call_id:
        raise InvalidInput("tool_call_id is required for this event", details={"tool_call_id": ["required"]})
    call = _FOR_COMPLETION.first(agent.pk, session_id, tool_call_id)
    if call is None:
        raise NotFound(f"no pre-tool-use call {tool_call_id!r} in session {session_id!r}")
    allowed = call.decision in ("allow", "skip")
    if call.confirmation is not None:
        allowed = answer_for_confirmation(call.confirmation, tool_args={}).decision == "allow"
    if not allowed:
        raise Conflict(f"tool call {tool_call_id!r} was never allowed to run", details={"decision": call.decision})
    return call


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
    call = ToolCall.objects.select_related("agent", "confirmation", "confirmation__channel", "grant").get(pk=calls[0].pk)
    return tool_call_record(call)


def _iso(value: dt.datetime | None) -> str | None:
    return value.isoformat() if value else None


def tool_call_record(call: ToolCall) -> dict[str, Any]:
    """One ToolCall as an audit record: what was asked, every hook's decision with the config version,
    who decided (the approval with its responses and events), what ran. `describe_toolcall --json`
    prints it; `export_audit` streams it (with the call's agent, confirmation, its channel, responses and
    events fetched beforehand, so building a record reads nothing more)."""
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
            "decided_by_name": c.decided_by_name or None,
            "decided_at": _iso(c.decided_at),
            "decision_reason": c.decision_reason,
            "expires_at": _iso(c.expires_at),
            "turn_id": c.turn_id,
            # The three records of an approval: what the agent proposed, what was approved, what ran.
            "proposed_args": c.tool_args,
            "approved_args": c.approved_args if c.edited else (c.tool_args if c.status == Status.APPROVED else None),
            "edited": c.edited,
            "edited_paths": sorted(c.arg_edits or {}),
            "ran_args": call.ran_args,
            "grants": [
                {
                    "id": str(g.pk),
                    "scope": g.scope_label,
                    "granted_by": g.granted_by,
                    "granted_by_name": g.granted_by_name,
                    "at": _iso(g.created_at),
                    "expires_at": _iso(g.expires_at),
                    "revoked_at": _iso(g.revoked_at),
                    "uses": g.uses,
                }
                for g in c.grants.all()
            ],
            "responses": [
                {
                    "approver": r.approver,
                    "approver_name": r.approver_name,
                    "decision": r.decision,
                    "reason": r.reason,
                    "channel": r.channel,
                    "at": _iso(r.created_at),
                }
                for r in c.responses.all()
            ],
            "events": [
                {"kind": e.kind, "actor": e.actor, "channel": e.channel, "message": e.message, "at": _iso(e.created_at)}
                for e in c.events.all()
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
        "allowed_by_grant": (
            {
                "id": str(call.grant.pk),
                "scope": call.grant.scope_label,
                "granted_by": call.grant.granted_by,
                "granted_by_name": call.grant.granted_by_name,
                "at": _iso(call.grant.created_at),
                "request": str(call.grant.confirmation_id),
            }
            if call.grant
            else None
        ),
        "ran_args": call.ran_args,
        "outcome": call.outcome or None,
        "result": call.result,
        "result_size": call.result_size,
        "duration_ms": call.duration_ms,
        "created_at": _iso(call.created_at),
        "completed_at": _iso(call.completed_at),
    }
