"""A request's deadline: expired by a click that comes too late, by a waiter whose deadline passed, by
the beat sweep — each exactly once, through the same conditional UPDATE as any decision."""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from approvals.audit import REQUEST_SIGNED, decision_mac, decision_verifies
from approvals.models import AuditAction, ConfirmationEvent, ConfirmationRequest, EventKind, Outbox, OutboxKind, Status
from approvals.services.audit import audit_append_many
from approvals.services.confirmations import confirmation_transition, count_decided
from approvals.services.records import changes_notify, ids_in, needing_redraw, outbox_add_many, rows_update_each
from approvals.types import SYSTEM_ACTOR

EXPIRED_REASON = "no decision before the deadline"


def confirmation_expire(*, confirmation_id: Any) -> bool:
    """Expire one request whose deadline has passed (database clock). True if this call did it."""
    with transaction.atomic():
        return confirmation_transition(
            confirmation_id,
            Status.EXPIRED,
            decided_by=SYSTEM_ACTOR,
            decided_by_name=SYSTEM_ACTOR,
            reason=EXPIRED_REASON,
            extra_filter=Q(expires_at__lte=timezone.now()),
        )


def confirmation_expire_due(*, limit: int = 500) -> int:
    """The beat sweep: expire every pending request past its deadline. Returns how many."""
    return len(confirmations_expire(limit=limit))


def confirmations_expire(*, confirmation_ids: list[Any] | None = None, limit: int = 500) -> list[str]:
    """Expire pending requests past their deadline, each exactly once, in ONE transaction; the ids this call expired.

    The given requests (a server process's waiters whose deadlines passed), or with None
    any that are due (the sweep). Rows another transaction holds (a click being decided)
    are skipped, not waited for. Each expired request gets what `confirmation_transition`
    gives one: its event, its redraw and webhook outbox rows, the notification — in bulk.
    """
    now = timezone.now()
    with transaction.atomic():
        due = ConfirmationRequest.objects.select_for_update(skip_locked=True, no_key=True, of=("self",)).filter(
            status=Status.PENDING, expires_at__lte=now
        )
        if confirmation_ids is not None:
            due = due.filter(ids_in(ConfirmationRequest, confirmation_ids))
        signed = list(
            due.order_by("expires_at").values(
                *REQUEST_SIGNED, "decision_mac", "callback_url", "batch_lead_id", "created_at", "channel__name"
            )[:limit]
        )
        if not signed:
            return []
        rows = [(r["id"], r["agent_id"], r["callback_url"], r["batch_lead_id"]) for r in signed]
        ids = [pk for pk, _, _, _ in rows]
        callbacks = {pk: url for pk, _, url, _ in rows}
        expired = {"status": Status.EXPIRED, "decided_by": SYSTEM_ACTOR, "decided_at": now, "decision_reason": EXPIRED_REASON}
        macs = {
            r["id"]: decision_mac(ConfirmationRequest, {**r, **expired})
            if decision_verifies(ConfirmationRequest, r)
            else r["decision_mac"]  # (as `confirmations._signed_anew`: what does not verify stays so)
            for r in signed
        }
        rows_update_each(ConfirmationRequest, values={**expired, "decided_by_name": SYSTEM_ACTOR}, each="decision_mac", per_row=macs)
        moved = [
            (r["agent_id"], AuditAction.RECORDED, ConfirmationRequest(**{**{f: r[f] for f in REQUEST_SIGNED}, **expired}))
            for r in signed
        ]  # fmt: skip
        count_decided(
            ids, Status.EXPIRED, now=now, expired_by="sweep" if confirmation_ids is None else "waiter",
            known=[(r["id"], r["channel__name"], r["created_at"], r["tool_name"]) for r in signed],
        )  # fmt: skip
        expired = [
            ConfirmationEvent(confirmation_id=pk, kind=EventKind.EXPIRED, actor=SYSTEM_ACTOR, message=EXPIRED_REASON)
            for pk in ids
        ]
        # Each request's move and its event, chained in ONE append (per agent) after the events are written.
        events = ConfirmationEvent.objects.bulk_create(expired)
        audit_append_many([*moved, *((agent_id, AuditAction.EVENT, event) for (_, agent_id, _, _), event in zip(rows, events))])
        redrawn = needing_redraw({pk: lead for pk, _, _, lead in rows})
        outbox = [
            Outbox(confirmation_id=pk, kind=OutboxKind.UPDATE, dedupe_key=f"{pk}:update:expired")
            for pk in ids
            if pk in redrawn
        ]
        outbox += [
            Outbox(confirmation_id=pk, kind=OutboxKind.WEBHOOK, dedupe_key=f"{pk}:webhook")
            for pk in ids
            if callbacks.get(pk)
        ]
        outbox_add_many(outbox)
        changes_notify(ids)
    return [str(pk) for pk in ids]
