"""The timers of a pending request (beat): reminded, warned of its deadline, escalated.

Reminders and escalations move with their own conditional UPDATE
(`remind_at` cleared, `escalated_at` set), so two beat processes — or beat
racing a decision — remind and escalate a request exactly once, and never one
that is no longer pending.
"""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any

from django.db import transaction
from django.utils import timezone

from approvals.models import ConfirmationRequest, EventKind, OutboxKind, RequestKind, Status
from approvals.services.confirmations import card_add
from approvals.services.records import event_record, redraw_add
from approvals.types import SYSTEM_ACTOR, TimersRun
from gateway_utils import metrics
from hooks import state as hook_state

logger = logging.getLogger("approvals.confirmations")

REMINDER_TEXT = "Reminder: this request is still waiting for your decision."


def confirmation_timers_due(*, limit: int = 200) -> TimersRun:
    """Send the reminders and escalations that are due, and drop expired hook state; how many of each."""
    now = timezone.now()
    run = TimersRun()
    due = ConfirmationRequest.objects.filter(status=Status.PENDING)
    for pk in due.filter(remind_at__lte=now).order_by("remind_at").values_list("pk", flat=True)[:limit]:
        run.reminded += confirmation_remind(confirmation_id=pk, now=now)
    for pk in due.filter(warn_at__lte=now, expires_at__gt=now).order_by("warn_at").values_list("pk", flat=True)[:limit]:
        run.warned += confirmation_warn(confirmation_id=pk, now=now)
    escalations = due.filter(escalate_at__lte=now, escalated_at__isnull=True, escalate_channel__isnull=False)
    for pk in escalations.order_by("escalate_at").values_list("pk", flat=True)[:limit]:
        run.escalated += confirmation_escalate(confirmation_id=pk, now=now)
    run.counters_purged = hook_state.purge_expired(now=now)
    return run


@transaction.atomic
def confirmation_remind(*, confirmation_id: Any, now: dt.datetime) -> bool:
    """Re-ping the approvers of a pending request once. True if this call did it."""
    changed = ConfirmationRequest.objects.filter(
        pk=confirmation_id, status=Status.PENDING, remind_at__lte=now
    ).update(remind_at=None)
    if not changed:
        return False
    confirmation = ConfirmationRequest.objects.get(pk=confirmation_id)
    text = REMINDER_TEXT
    if confirmation.approvals_required > 1:
        approvals = confirmation.responses.filter(decision="approve").count()
        text += f" ({approvals} of {confirmation.approvals_required} approvals so far)"
    event_record(confirmation, EventKind.REMINDED, actor=SYSTEM_ACTOR, message=text)
    transaction.on_commit(metrics.REMINDERS.inc)
    logger.info("reminder queued", extra={"confirmation_id": str(confirmation.pk)})
    redraw_add(confirmation.pk, OutboxKind.REMIND, dedupe_key=f"{confirmation.pk}:remind", payload={"text": text})
    return True


def warning_text(confirmation: ConfirmationRequest, *, now: dt.datetime) -> str:
    """The warning before the deadline: how long is left and what the agent is told then."""
    left = max(0, int((confirmation.expires_at - now).total_seconds())) if confirmation.expires_at else 0
    span = f"{left // 60} min {left % 60} s" if left >= 60 else f"{left} s"
    then = "allow" if confirmation.on_timeout == "allow" else "deny"
    told = f"the agent is told {then}"
    if confirmation.kind == RequestKind.QUESTION:
        told = "the agent gets the default answer" if confirmation.default_answer is not None else "the agent gets no answer"
    return f"Deadline soon: {span} left (until {confirmation.expires_at:%Y-%m-%d %H:%M:%S} UTC); then {told}."


@transaction.atomic
def confirmation_warn(*, confirmation_id: Any, now: dt.datetime) -> bool:
    """Warn the approvers of a pending request that its deadline is near, once (`warn_before_seconds`).
    True if this call did it.

    Never after the deadline: a timer that runs late finds nothing to do (the warning is dropped,
    not sent late), and a worker that reaches its outbox row after the deadline sends nothing
    either (`delivery`)."""
    changed = ConfirmationRequest.objects.filter(
        pk=confirmation_id, status=Status.PENDING, warn_at__lte=now, expires_at__gt=now
    ).update(warn_at=None)
    if not changed:
        return False
    confirmation = ConfirmationRequest.objects.get(pk=confirmation_id)
    text = warning_text(confirmation, now=now)
    event_record(confirmation, EventKind.WARNED, actor=SYSTEM_ACTOR, message=text)
    transaction.on_commit(metrics.WARNINGS.inc)
    logger.info("deadline warning queued", extra={"confirmation_id": str(confirmation.pk)})
    redraw_add(confirmation.pk, OutboxKind.REMIND, dedupe_key=f"{confirmation.pk}:warn", payload={"text": text})
    return True


@transaction.atomic
def confirmation_escalate(*, confirmation_id: Any, now: dt.datetime) -> bool:
    """Post a card to the escalation channel and mark the first card escalated. True if this call did it."""
    changed = ConfirmationRequest.objects.filter(
        pk=confirmation_id,
        status=Status.PENDING,
        escalate_at__lte=now,
        escalated_at__isnull=True,
        escalate_channel__isnull=False,
    ).update(escalated_at=now)
    if not changed:
        return False
    confirmation = ConfirmationRequest.objects.select_related("channel", "escalate_channel").get(pk=confirmation_id)
    target = confirmation.escalate_channel
    who = ", ".join(confirmation.escalate_approvers) or "any member"
    event_record(
        confirmation,
        EventKind.ESCALATED,
        actor=SYSTEM_ACTOR,
        channel=target.name,
        message=f"escalated to {target.name} ({who}); approvers on {confirmation.channel.name} may still decide",
    )
    # Its own dedupe key: an escalation to the request's own channel still posts a second card.
    card_add(confirmation, target, dedupe_key=f"{confirmation.pk}:card:{target.name}:escalation")
    transaction.on_commit(metrics.ESCALATIONS.inc)
    logger.info("escalated to %s", target.name, extra={"confirmation_id": str(confirmation.pk), "channel": target.name})
    redraw_add(confirmation.pk, OutboxKind.UPDATE, dedupe_key=f"{confirmation.pk}:update:escalated")
    return True
