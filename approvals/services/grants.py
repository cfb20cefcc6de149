"""Grants: an approver's "approve for a scope" (docs/approving.md).

A grant is made in the transaction that approves its request, from one of the
scopes the gate offered (`grants:`). The ask path of pre-tool-use uses one — it
is consulted only where a gate would ask, after every deny rule had its say —
with ONE conditional UPDATE that re-checks the grant is still live; revoking is
the same kind of UPDATE. Both lock the grant's row, so a revocation and a call
racing it are ordered: a call either used the grant before the revocation
committed, or it asks a human.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.db import connection, transaction
from django.db.models import DateTimeField, F, Func, Q
from django.db.models.functions import Now
from django.utils import timezone

from approvals import selectors
from approvals.audit import GRANT_SIGNED, decision_mac, decision_verifies
from approvals.models import Agent, AuditAction, ConfirmationRequest, EventKind, Grant, GrantScope
from approvals.services.audit import audit_append, audit_append_many
from approvals.services.records import event_record
from gateway_contract import actor_label
from hooks.base import grant_label


def _clock() -> Func:
    """The database's clock at the moment the row is written — after any lock wait, unlike `now()`,
    which is the transaction's start: a revocation that waited for a call's use is stamped after it."""
    if connection.vendor == "postgresql":
        return Func(function="clock_timestamp", output_field=DateTimeField())
    return Now()


def grant_create(
    *,
    confirmation: ConfirmationRequest,
    option: dict[str, Any],
    granted_by: str,
    granted_by_name: str,
    channel: str,
    now: dt.datetime | None = None,
) -> Grant:
    """Record the scope an approval was given for (the caller holds the approving transaction)."""
    now = now or timezone.now()
    minutes = option.get("minutes") if option.get("scope") == GrantScope.MINUTES else None
    grant = Grant(
        agent_id=confirmation.agent_id,
        session_id=confirmation.session_id,
        user_id=confirmation.user_id,
        tool_name=confirmation.tool_name,
        gate=confirmation.hook_name,
        args_fingerprint=confirmation.args_fingerprint if option.get("args") != "any" else "",
        scope=option["scope"],
        minutes=minutes,
        expires_at=now + dt.timedelta(minutes=minutes) if minutes else None,
        granted_by=granted_by,
        granted_by_name=granted_by_name,
        channel=channel,
        confirmation=confirmation,
    )
    grant.decision_mac = decision_mac(Grant, grant)
    grant.save(force_insert=True)
    audit_append(agent_id=grant.agent_id, action=AuditAction.RECORDED, row=grant)
    until = f" until {grant.expires_at:%Y-%m-%d %H:%M:%S} UTC" if grant.expires_at else ""
    event_record(
        confirmation,
        EventKind.GRANTED,
        actor=granted_by,
        channel=channel,
        message=(
            f"approved {grant_label(option)}: later calls of {confirmation.tool_name} in session "
            f"{confirmation.session_id}{for_whom(confirmation.user_id)} are allowed without asking{until}"
        ),
        data={
            "grant": str(grant.pk), "scope": grant.scope, "minutes": minutes, "args": option.get("args", "same"),
            "user_id": confirmation.user_id,
        },  # fmt: skip
    )
    return grant


def for_whom(user_id: str) -> str:
    """` for user u-42`, or nothing for a call made for nobody in particular."""
    return f" for user {user_id}" if user_id else ""


def grant_use(
    *,
    agent: Agent,
    session_id: str,
    user_id: str,
    tool_name: str,
    gate: str,
    fingerprint: str,
    now: dt.datetime | None = None,
) -> Grant | None:
    """Use a live grant covering this call, if there is one: one conditional UPDATE (inside the
    caller's transaction, which records the call it allowed). None: ask a human.

    `user_id` is part of the scope: only a grant made for the same user (or, for a call without
    one, a grant made without one) covers the call."""
    now = now or timezone.now()
    for pk in selectors.live_grant_for(
        agent=agent,
        session_id=session_id,
        user_id=user_id,
        tool_name=tool_name,
        gate=gate,
        fingerprint=fingerprint,
        now=now,
    ):
        used = (
            Grant.objects.filter(pk=pk, revoked_at__isnull=True)
            .filter(Q(expires_at__isnull=True) | Q(expires_at__gt=now))
            .update(uses=F("uses") + 1, last_used_at=_clock())
        )
        if used:
            return Grant.objects.get(pk=pk)
    return None


def grant_revoke(*, grant_id: Any, actor: str) -> bool:
    """Revoke a grant at once (one conditional UPDATE, then its `decision_mac` signed anew in the same
    transaction). False if it was already revoked."""
    with transaction.atomic():
        revoked = _revoked(Grant.objects.filter(pk=grant_id, revoked_at__isnull=True), actor=actor)
        if revoked:
            grant = Grant.objects.get(pk=grant_id)
            event_record(
                grant.confirmation_id,
                EventKind.GRANTED,
                actor=actor,
                message=f"grant {str(grant.pk)[:8]} ({grant.scope_label}) revoked after {grant.uses} use(s)",
                data={"grant": str(grant.pk), "revoked": True},
            )
    return bool(revoked)


def grants_end_session(*, agent: Agent, session_id: str) -> int:
    """A session ended: its grants end with it. How many were live."""
    with transaction.atomic():
        return _revoked(
            Grant.objects.filter(agent=agent, session_id=session_id, revoked_at__isnull=True),
            actor="gateway: the session ended",
        )


def _revoked(grants: Any, *, actor: str) -> int:
    """Revoke these grants (the caller holds the transaction): stamped by the database's clock, then each
    one's `decision_mac` signed anew over its `revoked_at` — unless it did not verify before (it stays so)."""
    ids = list(grants.values_list("pk", flat=True))
    if not ids:
        return 0
    revoked = Grant.objects.filter(pk__in=ids, revoked_at__isnull=True)
    count = revoked.update(revoked_at=_clock(), revoked_by=actor)
    rows = list(Grant.objects.filter(pk__in=ids).select_for_update().values(*GRANT_SIGNED, "decision_mac"))
    updates = []
    for row in rows:
        was = {**row, "revoked_at": None}
        mac = decision_mac(Grant, row) if decision_verifies(Grant, was) else row["decision_mac"]
        updates.append(Grant(pk=row["id"], decision_mac=mac))
    Grant.objects.bulk_update(updates, ["decision_mac"])
    audit_append_many([(row["agent_id"], AuditAction.RECORDED, Grant(**row)) for row in rows])
    return count


def grant_reason(grant: Grant) -> str:
    """What the agent and the audit are told about a call a grant allowed."""
    who = actor_label(grant.granted_by, grant.granted_by_name)
    return (
        f"allowed by grant {str(grant.pk)[:8]}: approved {grant.scope_label}{for_whom(grant.user_id)} by {who} "
        f"at {grant.created_at:%Y-%m-%d %H:%M:%S} UTC"
    )
