"""The records written beside a change, in its transaction: its events and its outbox rows.

An event is one line of a request's append-only history, linked into its
agent's tamper-evident chain in the same transaction (docs/audit.md). An outbox row is work
to do outside the database (post a card, redraw the cards, remind the
approvers, POST a webhook): written with the change, queued for a worker once
the change commits, and re-sent by beat's relay if no worker ever picked it up.
"""

from __future__ import annotations

import logging
from typing import Any

from django.db import transaction

from approvals.models import AuditAction, Channel, ConfirmationEvent, ConfirmationRequest, Outbox
from approvals.services.audit import audit_append
from gateway.celery import app

logger = logging.getLogger("approvals.services")

# The Celery task that delivers one outbox row (`approvals.tasks.deliver_outbox`), queued
# by name so that writing a row needs no import of the tasks that run services.
DELIVER_OUTBOX_TASK = "approvals.tasks.deliver_outbox"


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


def enqueue(task_name: str, *args: Any) -> None:
    """Queue a task by name; if the broker is down, beat's outbox relay picks the row up later."""
    try:
        app.send_task(task_name, args=args, retry=False)
    except Exception as exc:
        logger.warning("could not queue %s%s (%s); the outbox relay will retry", task_name, args, exc)
