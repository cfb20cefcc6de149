"""Confirmation requests: created, decided, cancelled, expired, reminded and escalated.

Every move out of `pending` is ONE conditional UPDATE (`confirmation_transition`);
the loser of any race (a double click, a vendor retry, the sweep against a
click, a cancel against an approval) updates 0 rows and is told the winner.
The event, the NOTIFY that wakes waiting agents (delivered at commit) and the
card-redraw / webhook outbox rows are written in the same transaction.

Reminders and escalations move with their own conditional UPDATE
(`remind_at` cleared, `escalated_at` set), so two beat processes — or beat
racing a decision — remind and escalate a request exactly once, and never one
that is no longer pending.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone

from approvals import selectors
from approvals.errors import AlreadyDecided, InvalidInput
from approvals.models import (
    Agent,
    ApproverResponse,
    CallbackReceipt,
    Channel,
    ConfirmationEvent,
    ConfirmationRequest,
    EventKind,
    Outbox,
    OutboxKind,
    Status,
)
from approvals.services.records import (
    changes_notify,
    event_record,
    event_record_many,
    outbox_add,
    outbox_add_many,
)
from approvals.types import SYSTEM_ACTOR, TimersRun
from channels_ext.base import Callback, DecisionOutcome
from hooks import state as hook_state
from hooks.base import AskSpec

REMINDER_TEXT = "Reminder: this request is still waiting for your decision."
EXPIRED_REASON = "no decision before the deadline"

_TERMINAL_EVENT = {
    Status.APPROVED: EventKind.APPROVED,
    Status.REJECTED: EventKind.REJECTED,
    Status.EXPIRED: EventKind.EXPIRED,
    Status.CANCELLED: EventKind.CANCELLED,
}


# --------------------------------------------------------------------------- creating


def confirmation_create(
    *,
    agent: Agent,
    spec: AskSpec,
    session_id: str,
    tool_name: str,
    stored_args: dict[str, Any],
    tool_call_id: str,
    user_id: str,
    metadata: dict[str, Any],
    config_version: int,
    callback_url: str,
    now: dt.datetime | None,
) -> ConfirmationRequest:
    """Insert the request, its `created` event and its card outbox row (the caller holds the transaction)."""
    now = now or timezone.now()
    try:
        channel = Channel.objects.get(name=spec.channel)
    except Channel.DoesNotExist:
        raise InvalidInput(f"approval gate {spec.gate!r} names channel {spec.channel!r}, which does not exist") from None
    escalate_channel = None
    if spec.escalate_channel:
        escalate_channel = Channel.objects.filter(name=spec.escalate_channel).first()
    confirmation = ConfirmationRequest.objects.create(
        agent=agent,
        session_id=session_id,
        tool_name=tool_name,
        tool_args=stored_args,
        tool_call_id=tool_call_id,
        user_id=user_id,
        metadata=metadata,
        channel=channel,
        approvers=list(spec.approvers),
        approvals_required=spec.approvals_required,
        allow_self_approval=spec.allow_self_approval,
        reason=spec.reason,
        hook_name=spec.gate,
        config_version=config_version,
        expires_at=now + dt.timedelta(seconds=spec.timeout_seconds) if spec.timeout_seconds else None,
        on_timeout=spec.on_timeout,
        remind_at=now + dt.timedelta(seconds=spec.remind_after_seconds) if spec.remind_after_seconds else None,
        escalate_at=(
            now + dt.timedelta(seconds=spec.escalate_after_seconds)
            if spec.escalate_after_seconds and escalate_channel
            else None
        ),
        escalate_channel=escalate_channel,
        escalate_approvers=list(spec.escalate_approvers),
        callback_url=callback_url,
    )
    event_record(confirmation, EventKind.CREATED, actor=f"agent:{agent.name}", message=spec.reason)
    outbox_add(confirmation, OutboxKind.CARD, channel=channel, dedupe_key=f"{confirmation.id}:card:{channel.name}")
    return confirmation


# --------------------------------------------------------------------------- deciding


def confirmation_transition(
    confirmation_id: Any,
    to_status: str,
    *,
    decided_by: str,
    reason: str = "",
    channel: str = "",
    extra_filter: Q | None = None,
) -> bool:
    """pending -> `to_status` as ONE conditional UPDATE. True if this call won.

    Must run inside a transaction: the event, the NOTIFY (delivered at commit)
    and the card-redraw / webhook outbox rows commit with the change or not at all.
    """
    now = timezone.now()
    qs = ConfirmationRequest.objects.filter(pk=confirmation_id, status=Status.PENDING)
    if extra_filter is not None:
        qs = qs.filter(extra_filter)
    changed = qs.update(status=to_status, decided_by=decided_by, decided_at=now, decision_reason=reason)
    if not changed:
        return False
    confirmation = ConfirmationRequest.objects.select_related("channel", "escalate_channel").get(pk=confirmation_id)
    event_record(confirmation, _TERMINAL_EVENT[to_status], actor=decided_by, channel=channel, message=reason)
    changes_notify([confirmation.pk])
    # One redraw row per state, so an in-flight redraw of an older state cannot swallow this one.
    outbox_add(confirmation, OutboxKind.UPDATE, dedupe_key=f"{confirmation.pk}:update:{to_status}")
    if confirmation.callback_url:
        outbox_add(confirmation, OutboxKind.WEBHOOK, dedupe_key=f"{confirmation.pk}:webhook")
    return True


def confirmation_respond(*, channel_name: str, callback: Callback, as_admin: bool = False) -> DecisionOutcome:
    """An approver's click (any channel), applied exactly once.

    Checks who may decide, records one response per approver, and decides the
    request when a reject arrives or the approvals reach the quorum.
    `as_admin` (Django admin / staff on the web page) skips the approver list.
    """
    try:
        with transaction.atomic():
            verdict = _respond(channel_name=channel_name, callback=callback, as_admin=as_admin)
    except _Duplicate as dup:
        verdict = dup.outcome
    if verdict.code == "not_found":
        return verdict
    # The card is drawn after commit: the row lock, the NOTIFY and the waiting agent don't wait for it.
    confirmation = ConfirmationRequest.objects.select_related("agent", "channel", "escalate_channel").get(
        pk=callback.confirmation_id
    )
    return dataclasses.replace(verdict, card=selectors.card_view(confirmation, channel_name=channel_name))


class _Duplicate(Exception):
    def __init__(self, outcome: DecisionOutcome):
        self.outcome = outcome


def _respond(*, channel_name: str, callback: Callback, as_admin: bool) -> DecisionOutcome:
    # Row lock: responses to one request are counted one at a time (quorum), and
    # a click and the expiry sweep cannot interleave.
    confirmation = (
        ConfirmationRequest.objects.select_for_update(of=("self",))
        .select_related("agent", "channel", "escalate_channel")
        .filter(pk=callback.confirmation_id)
        .first()
    )
    if confirmation is None:
        return DecisionOutcome(applied=False, code="not_found", message="This approval request no longer exists.", card=None)

    def outcome(applied: bool, code: str, message: str) -> DecisionOutcome:
        return DecisionOutcome(applied=applied, code=code, message=message, card=None)  # card: after commit

    if callback.dedupe_key and not callback.dry_run:
        try:
            with transaction.atomic():
                CallbackReceipt.objects.create(channel=channel_name, key=callback.dedupe_key[:200])
        except IntegrityError:
            raise _Duplicate(outcome(False, "duplicate", "This click was already handled.")) from None

    if confirmation.is_final:
        message = selectors.final_state_sentence(confirmation)
        # recorded for dry runs too: a refused Reject never gets as far as its modal
        event_record(confirmation, EventKind.LATE_CLICK, actor=callback.actor, channel=channel_name, message=message)
        return outcome(False, "already_decided", message)

    if confirmation.expires_at is not None and confirmation.expires_at <= timezone.now():
        # Past its deadline but not yet swept: expire it now rather than accept a late decision.
        if not callback.dry_run:
            confirmation_expire(confirmation_id=confirmation.pk)
            event_record(confirmation, EventKind.LATE_CLICK, actor=callback.actor, channel=channel_name)
        return outcome(False, "already_decided", "This request expired before you answered.")

    # Staff skip the approver list, never the self-approval rule.
    if as_admin:
        refusal = selectors.self_approval_refusal(confirmation, actor=callback.actor)
    else:
        refusal = selectors.approver_refusal(confirmation, channel_name=channel_name, actor=callback.actor)
    if refusal is not None:
        code, message = refusal
        event_record(confirmation, EventKind.REFUSED_CLICK, actor=callback.actor, channel=channel_name, message=message)
        return outcome(False, code, message)

    if callback.dry_run:
        return outcome(True, "would_apply", "")

    try:
        with transaction.atomic():
            ApproverResponse.objects.create(
                confirmation=confirmation,
                approver=callback.actor,
                decision=callback.decision,
                reason=callback.reason,
                channel=channel_name,
            )
    except IntegrityError:
        return outcome(False, "duplicate", "You have already answered this request.")

    actor = callback.actor_name or callback.actor
    if callback.decision == "reject":
        confirmation_transition(
            confirmation.pk, Status.REJECTED, decided_by=actor, reason=callback.reason, channel=channel_name
        )
        return outcome(True, "decided", "Rejected.")
    approvals = confirmation.responses.filter(decision="approve").count()
    if approvals >= confirmation.approvals_required:
        confirmation_transition(
            confirmation.pk, Status.APPROVED, decided_by=actor, reason=callback.reason, channel=channel_name
        )
        return outcome(True, "decided", "Approved.")
    event_record(
        confirmation,
        EventKind.RESPONSE,
        actor=actor,
        channel=channel_name,
        message=f"approval {approvals} of {confirmation.approvals_required}",
    )
    changes_notify([confirmation.pk])  # WebSocket watchers see the count move
    outbox_add(confirmation, OutboxKind.UPDATE, dedupe_key=f"{confirmation.pk}:update:approvals-{approvals}")
    return outcome(True, "recorded", f"Approval recorded ({approvals} of {confirmation.approvals_required}).")


@transaction.atomic
def confirmation_cancel(*, agent: Agent, confirmation_id: Any) -> ConfirmationRequest:
    """The agent withdraws its request. 409 if it was already decided."""
    confirmation = selectors.confirmation_for_agent(agent=agent, confirmation_id=confirmation_id)
    cancelled = confirmation_transition(
        confirmation.pk, Status.CANCELLED, decided_by=f"agent:{agent.name}", reason="cancelled by the agent"
    )
    confirmation.refresh_from_db()
    if not cancelled:
        raise AlreadyDecided(selectors.final_state_sentence(confirmation), details={"status": confirmation.status})
    return confirmation


@transaction.atomic
def confirmation_cancel_by_staff(*, confirmation_id: Any, actor: str, reason: str = "") -> bool:
    """An operator withdraws a pending request (Django admin). False if it was already final."""
    return confirmation_transition(
        confirmation_id, Status.CANCELLED, decided_by=actor, reason=reason or f"cancelled by {actor}"
    )


def confirmation_expire(*, confirmation_id: Any) -> bool:
    """Expire one request whose deadline has passed (database clock). True if this call did it."""
    with transaction.atomic():
        return confirmation_transition(
            confirmation_id,
            Status.EXPIRED,
            decided_by=SYSTEM_ACTOR,
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
        due = ConfirmationRequest.objects.select_for_update(skip_locked=True).filter(
            status=Status.PENDING, expires_at__lte=now
        )
        if confirmation_ids is not None:
            due = due.filter(pk__in=confirmation_ids)
        rows = list(due.order_by("expires_at").values_list("pk", "agent_id", "callback_url")[:limit])
        if not rows:
            return []
        ids = [pk for pk, _, _ in rows]
        callbacks = {pk: url for pk, _, url in rows}
        ConfirmationRequest.objects.filter(pk__in=ids).update(
            status=Status.EXPIRED, decided_by=SYSTEM_ACTOR, decided_at=now, decision_reason=EXPIRED_REASON
        )
        expired = [
            ConfirmationEvent(confirmation_id=pk, kind=EventKind.EXPIRED, actor=SYSTEM_ACTOR, message=EXPIRED_REASON)
            for pk in ids
        ]
        event_record_many([(agent_id, event) for (_, agent_id, _), event in zip(rows, expired)])
        outbox = [Outbox(confirmation_id=pk, kind=OutboxKind.UPDATE, dedupe_key=f"{pk}:update:expired") for pk in ids]
        outbox += [
            Outbox(confirmation_id=pk, kind=OutboxKind.WEBHOOK, dedupe_key=f"{pk}:webhook")
            for pk in ids
            if callbacks.get(pk)
        ]
        outbox_add_many(outbox)
        changes_notify(ids)
    return [str(pk) for pk in ids]


# --------------------------------------------------------------------------- timers (beat)


def confirmation_timers_due(*, limit: int = 200) -> TimersRun:
    """Send the reminders and escalations that are due, and drop expired hook state; how many of each."""
    now = timezone.now()
    run = TimersRun()
    due = ConfirmationRequest.objects.filter(status=Status.PENDING)
    for pk in due.filter(remind_at__lte=now).order_by("remind_at").values_list("pk", flat=True)[:limit]:
        run.reminded += confirmation_remind(confirmation_id=pk, now=now)
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
    outbox_add(confirmation, OutboxKind.REMIND, dedupe_key=f"{confirmation.pk}:remind", payload={"text": text})
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
    outbox_add(confirmation, OutboxKind.CARD, channel=target, dedupe_key=f"{confirmation.pk}:card:{target.name}:escalation")
    outbox_add(confirmation, OutboxKind.UPDATE, dedupe_key=f"{confirmation.pk}:update:escalated")
    return True
