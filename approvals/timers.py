"""Reminders and escalations of pending requests: the work `approvals.tasks.run_timers` does on beat.

Each due request moves with one conditional UPDATE (`remind_at` cleared,
`escalated_at` set) in its own transaction, with its event and outbox rows, so
two beat processes — or a beat racing a decision — remind and escalate a
request exactly once, and never a request that is no longer pending.
"""

from __future__ import annotations

import dataclasses
import datetime as dt

from django.db import transaction
from django.utils import timezone

from approvals.models import ConfirmationRequest, EventKind, HookState, OutboxKind, Status
from approvals.services import SYSTEM_ACTOR, _event, _outbox

REMINDER_TEXT = "Reminder: this request is still waiting for your decision."
# Rate-limit counters are kept this long past their window, then deleted.
COUNTER_GRACE = dt.timedelta(hours=1)


@dataclasses.dataclass
class TimersRun:
    reminded: int = 0
    escalated: int = 0
    counters_purged: int = 0


def confirmation_timers_due(*, limit: int = 200) -> TimersRun:
    """Send the reminders and escalations that are due; returns how many of each."""
    now = timezone.now()
    run = TimersRun()
    due = ConfirmationRequest.objects.filter(status=Status.PENDING)
    for pk in due.filter(remind_at__lte=now).order_by("remind_at").values_list("pk", flat=True)[:limit]:
        run.reminded += confirmation_remind(confirmation_id=pk, now=now)
    escalations = due.filter(escalate_at__lte=now, escalated_at__isnull=True, escalate_channel__isnull=False)
    for pk in escalations.order_by("escalate_at").values_list("pk", flat=True)[:limit]:
        run.escalated += confirmation_escalate(confirmation_id=pk, now=now)
    run.counters_purged = hook_counters_purge(now=now)
    return run


@transaction.atomic
def confirmation_remind(*, confirmation_id, now: dt.datetime) -> bool:
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
    _event(confirmation, EventKind.REMINDED, actor=SYSTEM_ACTOR, message=text)
    _outbox(confirmation, OutboxKind.REMIND, dedupe_key=f"{confirmation.pk}:remind", payload={"text": text})
    return True


@transaction.atomic
def confirmation_escalate(*, confirmation_id, now: dt.datetime) -> bool:
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
    _event(
        confirmation,
        EventKind.ESCALATED,
        actor=SYSTEM_ACTOR,
        channel=target.name,
        message=f"escalated to {target.name} ({who}); approvers on {confirmation.channel.name} may still decide",
    )
    # Its own dedupe key: an escalation to the request's own channel still posts a second card.
    _outbox(confirmation, OutboxKind.CARD, channel=target, dedupe_key=f"{confirmation.pk}:card:{target.name}:escalation")
    _outbox(confirmation, OutboxKind.UPDATE, dedupe_key=f"{confirmation.pk}:update:escalated")
    return True


def hook_counters_purge(*, now: dt.datetime, limit: int = 1000) -> int:
    """Delete rate-limit counters whose window ended over an hour ago (a new call starts a new one)."""
    from hooks.builtin.rate_limit import SCOPE_PREFIX

    stale = HookState.objects.filter(scope__startswith=SCOPE_PREFIX, expires_at__lt=now - COUNTER_GRACE)
    pks = list(stale.values_list("pk", flat=True)[:limit])
    if not pks:
        return 0
    return HookState.objects.filter(pk__in=pks, expires_at__lt=now - COUNTER_GRACE).delete()[0]
