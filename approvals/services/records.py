"""What is written beside a change, in its transaction: its events, its outbox rows, its notification.

An event is one line of a request's append-only history, linked into its
agent's tamper-evident chain in the same transaction (docs/audit.md). An outbox row is work
to do outside the database (post a card, redraw the cards, remind the
approvers, POST a webhook): written with the change, queued for a worker once
the change commits, and re-sent by beat's relay if no worker ever picked it up.
A notification wakes the agents waiting on the request, in every server
process, carrying the request's new state (`approvals.types.ConfirmationState`).
"""

from __future__ import annotations

import logging
from typing import Any

from django.db import transaction

from approvals.models import ApproverResponse, AuditAction, Channel, ConfirmationEvent, ConfirmationRequest, Outbox
from approvals.services.audit import audit_append, audit_append_many
from gateway import realtime
from gateway.celery import app

logger = logging.getLogger("approvals.services")

# The Celery tasks that deliver outbox rows (`approvals.tasks`), queued by name so that writing
# a row needs no import of the tasks that run services: one row, or many written together.
DELIVER_OUTBOX_TASK = "approvals.tasks.deliver_outbox"
DELIVER_OUTBOX_BATCH_TASK = "approvals.tasks.deliver_outbox_batch"
OUTBOX_BATCH = 200  # rows per message of a batch


def event_record(
    confirmation: ConfirmationRequest | Any,
    kind: str,
    *,
    actor: str = "",
    channel: str = "",
    message: str = "",
    data: dict[str, Any] | None = None,
) -> None:
    """Append one event to a request's history (`confirmation`: the row or its id) and to its agent's chain."""
    if isinstance(confirmation, ConfirmationRequest):
        confirmation_id, agent_id = confirmation.pk, confirmation.agent_id
    else:
        confirmation_id = confirmation
        agent_id = ConfirmationRequest.objects.values_list("agent_id", flat=True).get(pk=confirmation_id)
    with transaction.atomic(savepoint=False):
        event = ConfirmationEvent.objects.create(
            confirmation_id=confirmation_id, kind=kind, actor=actor, channel=channel, message=message, data=data or {}
        )
        audit_append(agent_id=agent_id, action=AuditAction.EVENT, row=event)


def outbox_add(
    confirmation: ConfirmationRequest | Any,
    kind: str,
    *,
    dedupe_key: str,
    channel: Channel | None = None,
    payload: dict[str, Any] | None = None,
) -> None:
    """Write an outbox row (idempotent on `dedupe_key`) and queue its delivery after commit."""
    confirmation_id = confirmation.pk if isinstance(confirmation, ConfirmationRequest) else confirmation
    row, created = Outbox.objects.get_or_create(
        dedupe_key=dedupe_key,
        defaults={"confirmation_id": confirmation_id, "kind": kind, "channel": channel, "payload": payload or {}},
    )
    if created:
        transaction.on_commit(lambda: enqueue(DELIVER_OUTBOX_TASK, row.pk), robust=True)


def event_record_many(events: list[tuple[int, ConfirmationEvent]]) -> None:
    """Append several events (`(agent_id, event)`) in one statement, and link them into their agents' chains."""
    created = ConfirmationEvent.objects.bulk_create([event for _, event in events])
    audit_append_many([(agent_id, AuditAction.EVENT, event) for (agent_id, _), event in zip(events, created)])


def outbox_add_many(rows: list[Outbox]) -> None:
    """Write several outbox rows whose dedupe keys cannot exist yet (e.g. each request's redraw for a
    state it just entered) in one statement, and queue them for delivery after commit, a batch per
    message (thousands of requests expiring at once are thousands of rows, not thousands of messages)."""
    created = [row.pk for row in Outbox.objects.bulk_create(rows)]
    batches = [created[i : i + OUTBOX_BATCH] for i in range(0, len(created), OUTBOX_BATCH)]
    transaction.on_commit(lambda: [enqueue(DELIVER_OUTBOX_BATCH_TASK, batch) for batch in batches], robust=True)


def enqueue(task_name: str, *args: Any) -> None:
    """Queue a task by name; if the broker is down, beat's outbox relay picks the row up later."""
    try:
        app.send_task(task_name, args=args, retry=False)
    except Exception as exc:
        logger.warning("could not queue %s%s (%s); the outbox relay will retry", task_name, args, exc)


def _state_sql() -> str:
    """SELECT id, payload for the requests whose ids are the one parameter: each one's
    `ConfirmationState` as JSON, built by PostgreSQL from the row the transaction just changed."""
    requests = ConfirmationRequest._meta.db_table
    responses = ApproverResponse._meta.db_table
    return (
        "SELECT cr.id, json_build_object("
        "'id', cr.id, 'agent_id', cr.agent_id, 'status', cr.status, 'tool_name', cr.tool_name, "
        "'tool_args', cr.tool_args, 'reason', cr.reason, 'decision_reason', cr.decision_reason, "
        "'decided_by', cr.decided_by, 'decided_by_name', cr.decided_by_name, 'decided_at', cr.decided_at, "
        "'expires_at', cr.expires_at, 'arg_edits', cr.arg_edits, 'approved_args', cr.approved_args, "
        "'on_timeout', cr.on_timeout, 'approvals_required', cr.approvals_required, "
        "'approved_by', COALESCE((SELECT json_agg(r.approver ORDER BY r.created_at, r.id) "
        f"FROM {responses} r WHERE r.confirmation_id = cr.id AND r.decision = 'approve'), '[]'::json)"
        f")::text AS payload FROM {requests} cr WHERE cr.id = ANY(%s::uuid[])"
    )


def changes_notify(confirmation_ids: list[Any]) -> None:
    """Wake the agents waiting on these requests, telling them each one's new state. Delivered at commit:
    one statement, however many requests (PostgreSQL only; elsewhere waiters poll)."""
    if confirmation_ids:
        realtime.notify_sql(_state_sql(), [[str(pk) for pk in confirmation_ids]])

