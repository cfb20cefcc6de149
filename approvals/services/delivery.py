"""Doing the outbox's work: posting cards, redrawing them, reminding approvers, POSTing webhooks.

A worker takes a lease on a row with one conditional UPDATE, does the outside
call, and records the result. A transient failure (`DeliveryFailed`, e.g. a
429 or a network error) is rescheduled with backoff; a permanent one is
recorded on the row and the channel, and a card that can reach nobody fails
its request closed (rejected, with the reason).
"""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models import F, Q
from django.db.models.expressions import RawSQL
from django.utils import timezone

from approvals import selectors
from approvals.models import Channel, ConfirmationRequest, EventKind, Outbox, OutboxKind, OutboxStatus, Status
from approvals.services.confirmations import confirmation_transition
from approvals.services.digest_delivery import digest_failed, digest_perform, digest_posted, digests_redraw_for
from approvals.services.records import event_record, outbox_add
from approvals.types import SYSTEM_ACTOR, DeliveryResult
from approvals.webhooks import send_decision_webhook
from gateway_contract import MessageRef
from gateway_utils import logs, metrics, tracing
from gateway_utils.outbound import DeliveryFailed

logger = logging.getLogger("approvals.services")


LEASE_SECONDS = 60
# A lease younger than this is never judged by its session: the list of live sessions a statement reads is
# the one of its start, so a session that began a moment later (a worker just started) and took the row
# meanwhile would look gone to it.
LEASE_SETTLING_SECONDS = 2


def outbox_claim(*, outbox_id: int, lease_seconds: int = LEASE_SECONDS) -> Outbox | None:
    """Take a lease on a due outbox row (one conditional UPDATE); None if someone else has it.

    The lease is held by this worker's database session (its backend's pid, `locked_by`) and lasts at most
    `lease_seconds`: a row leased by a session that is gone — its worker killed while it delivered, the
    process's connections closed with it — is free at once, once the lease is LEASE_SETTLING_SECONDS old
    (PostgreSQL; elsewhere after `lease_seconds`)."""
    now = timezone.now()
    claimed = (
        Outbox.objects.filter(pk=outbox_id, status=OutboxStatus.PENDING)
        .filter(_lease_free(now))
        .filter(Q(next_attempt_at__isnull=True) | Q(next_attempt_at__lte=now))
        .update(
            locked_until=now + dt.timedelta(seconds=lease_seconds),
            locked_by=_this_session(),
            attempts=F("attempts") + 1,
        )
    )
    if not claimed:
        return None
    return Outbox.objects.select_related("channel", "confirmation", "confirmation__agent").get(pk=outbox_id)


def _lease_free(now: dt.datetime) -> Q:
    """No lease on the row: none taken, its time up, or (PostgreSQL) the session that took it is gone."""
    free = Q(locked_until__isnull=True) | Q(locked_until__lt=now)
    if connection.vendor == "postgresql":
        settled = now + dt.timedelta(seconds=LEASE_SECONDS - LEASE_SETTLING_SECONDS)
        gone = ~Q(locked_by__in=RawSQL("SELECT pid FROM pg_stat_activity", []))
        free |= Q(locked_by__isnull=False, locked_until__lt=settled) & gone
    return free


def _this_session() -> Any:
    return RawSQL("pg_backend_pid()", []) if connection.vendor == "postgresql" else None


def outbox_deliver(*, outbox_id: int) -> DeliveryResult:
    """Do one outbox row's work. Transient failures are rescheduled; permanent ones recorded."""
    row = outbox_claim(outbox_id=outbox_id)
    if row is None:
        return DeliveryResult(sent=False)
    channel = row.channel.name if row.channel_id else ""
    with logs.bound(confirmation_id=str(row.confirmation_id), channel=channel):
        if not tracing.active():
            return _deliver(row)
        attributes = {
            "gateway.confirmation.id": str(row.confirmation_id),
            "gateway.channel": channel,
            "gateway.outbox.kind": row.kind,
            "gateway.outbox.attempt": row.attempts,
        }
        name = "deliver_webhook" if row.kind == OutboxKind.WEBHOOK else f"deliver_card {channel}"
        with tracing.span(name, attributes=attributes):
            return _deliver(row)


def _deliver(row: Outbox) -> DeliveryResult:
    try:
        message_ref, drawn = _perform(row)
    except DeliveryFailed as exc:
        tracing.failed(exc)
        result = _delivery_failed(row, exc)
        _count(row, "retrying" if result.retry_in is not None else "failed", error=exc.code)
        return result
    _count(row, "sent")
    logger.info("outbox %s: %s sent (attempt %s)", row.pk, row.kind, row.attempts)
    with transaction.atomic():
        if row.kind == OutboxKind.CARD:
            _lock_request(row)
        Outbox.objects.filter(pk=row.pk).update(
            status=OutboxStatus.SENT, sent_at=timezone.now(), locked_until=None, locked_by=None, last_error="",
            message_ref=message_ref,
        )
        if row.kind == OutboxKind.CARD:
            event_record(row.confirmation, EventKind.CARD_POSTED, channel=row.channel.name, data={"ref": message_ref})
            _redraw_if_changed_in_flight(row, drawn)
        elif row.kind == OutboxKind.DIGEST:
            digest_posted(row, message_ref, drawn)
        elif row.kind == OutboxKind.WEBHOOK:
            event_record(
                row.confirmation,
                EventKind.WEBHOOK_SENT,
                message=row.confirmation.callback_url,
                data={"attempt": row.attempts},
            )
    return DeliveryResult(sent=True)


# What each outbox row's kind does to a card (`gateway_card_deliveries_total{operation}`).
_CARD_OPERATIONS = {
    OutboxKind.CARD: "post",
    OutboxKind.UPDATE: "update",
    OutboxKind.REMIND: "remind",
    OutboxKind.DIGEST: "digest",
    OutboxKind.DIGEST_UPDATE: "digest_update",
}


def _count(row: Outbox, outcome: str, *, error: str = "") -> None:
    if row.kind == OutboxKind.WEBHOOK:
        metrics.WEBHOOK_DELIVERIES.labels(outcome).inc()
        return
    channel = row.channel.name if row.channel_id else ""
    metrics.card_delivery(channel=channel, operation=_CARD_OPERATIONS.get(row.kind, row.kind), outcome=outcome, error=error)


def outbox_due_ids(*, limit: int = 200) -> list[int]:
    """Rows the relay should (re)send: never picked up after a grace period, or due for a retry."""
    now = timezone.now()
    grace = now - dt.timedelta(seconds=settings.GATEWAY_OUTBOX_RELAY_AFTER_SECONDS)
    # A row a worker began and lost (claimed: `attempts`) is due at once; one never picked up after the grace
    # (its task may still be on its way to a worker).
    started = Q(attempts__gt=0, next_attempt_at__isnull=True)
    return list(
        Outbox.objects.filter(status=OutboxStatus.PENDING)
        .filter(_lease_free(now))
        .filter(Q(next_attempt_at__lte=now) | started | Q(next_attempt_at__isnull=True, created_at__lte=grace))
        .order_by("created_at")
        .values_list("pk", flat=True)[:limit]
    )


def _lock_request(row: Outbox) -> None:
    """Lock the request before anything else in a transaction that may also decide or lock it:
    the event it writes then takes its agent's audit head last, the order every path keeps
    (approvals.services.audit), so two transactions never wait on each other in a circle."""
    list(ConfirmationRequest.objects.select_for_update(no_key=True).filter(pk=row.confirmation_id).values_list("pk", flat=True))


def _redraw_if_changed_in_flight(row: Outbox, drawn: Any) -> None:
    """A change committed while this card was being posted queued a redraw that ran
    before the card row was SENT, so it could not see this card: redraw it now.

    Locks the request row: every transition updates it, so this serialises with them.
    """
    confirmation = (
        ConfirmationRequest.objects.select_for_update(of=("self",), no_key=True)
        .select_related("agent", "channel", "escalate_channel")
        .get(pk=row.confirmation_id)
    )
    if selectors.card_view(confirmation, channel_name=row.channel.name) != drawn:
        outbox_add(confirmation, OutboxKind.UPDATE, dedupe_key=f"{confirmation.pk}:update:after-card-{row.pk}")


def _perform(row: Outbox) -> tuple[dict[str, Any] | None, Any]:
    """Do the outside work of one row: (message reference to store, card drawn if any)."""
    confirmation = row.confirmation
    if row.kind in (OutboxKind.DIGEST, OutboxKind.DIGEST_UPDATE):
        return digest_perform(row)
    if row.kind == OutboxKind.CARD:
        adapter = selectors.channel_adapter(row.channel)
        card = selectors.card_view(confirmation, channel_name=row.channel.name)
        return adapter.post_card(card, idempotency_key=row.dedupe_key).data, card
    if row.kind == OutboxKind.REMIND and not _still_worth_a_ping(row):
        return None, None
    if row.kind in (OutboxKind.UPDATE, OutboxKind.REMIND):
        for card_row in selectors.posted_cards(confirmation):
            adapter = selectors.channel_adapter(card_row.channel)
            # The card's own request: for a call of a turn, the turn's card lists it.
            card = selectors.card_view(card_row.confirmation, channel_name=card_row.channel.name)
            ref = MessageRef(card_row.message_ref or {})
            if row.kind == OutboxKind.REMIND:
                adapter.notify_approvers(card, ref, row.payload.get("text", "Reminder: this request is waiting for you."))
            else:
                adapter.update_card(card, ref)
                _update_until_current(adapter, card_row, card, ref)
        if row.kind == OutboxKind.UPDATE:
            digests_redraw_for(confirmation.pk)  # a digest that lists it is redrawn too (a row of its own)
        return None, None
    if row.kind == OutboxKind.WEBHOOK:
        send_decision_webhook(confirmation)
        return None, None
    raise ValueError(f"unknown outbox kind {row.kind!r}")


# Most times one delivery sends a card again because its request changed while it was sending.
CURRENT_TRIES = 3


def _update_until_current(adapter: Any, card_row: Outbox, sent: Any, ref: MessageRef) -> None:
    """Two redraws of one card (two workers, each drawing the state when it starts) may land in either
    order, so an older state could be the last one sent — a decided request's card left with its
    buttons. After sending, the card is drawn again from the rows as they are now and sent again while
    it differs from what was sent: whichever delivery ends last, it leaves the card as the request is."""
    for _ in range(CURRENT_TRIES):
        now = ConfirmationRequest.objects.select_related("agent", "channel", "escalate_channel").get(
            pk=card_row.confirmation_id
        )
        card = selectors.card_view(now, channel_name=card_row.channel.name)
        if card == sent:
            return
        adapter.update_card(card, ref)
        sent = card


def _still_worth_a_ping(row: Outbox) -> bool:
    """A reminder or warning delivered late: nothing is sent once its request is decided or past its
    deadline (swept or not) — a warning never comes after the deadline."""
    confirmation = row.confirmation
    late = confirmation.expires_at is not None and confirmation.expires_at <= timezone.now()
    if confirmation.status != Status.PENDING or late:
        logger.info("outbox %s: %s of %s not sent: %s", row.pk, row.kind, confirmation.pk,
                    "the deadline passed" if late else f"it is {confirmation.status}")  # fmt: skip
        return False
    return True


def _delivery_failed(row: Outbox, exc: DeliveryFailed) -> DeliveryResult:
    now = timezone.now()
    exhausted = row.attempts >= settings.GATEWAY_OUTBOX_MAX_ATTEMPTS
    if exc.permanent or exhausted:
        with transaction.atomic():
            if row.kind == OutboxKind.CARD:
                _lock_request(row)
            Outbox.objects.filter(pk=row.pk).update(
                status=OutboxStatus.FAILED, locked_until=None, locked_by=None, last_error=exc.message
            )
            if row.channel_id:
                Channel.objects.filter(pk=row.channel_id).update(last_error=exc.message, last_error_at=now)
            if row.kind == OutboxKind.CARD:
                event_record(row.confirmation, EventKind.CARD_FAILED, channel=row.channel.name, message=exc.message)
                _fail_closed_if_undelivered(row, exc)
            elif row.kind == OutboxKind.DIGEST:
                digest_failed(row, exc)
            elif row.kind == OutboxKind.WEBHOOK:
                event_record(
                    row.confirmation, EventKind.WEBHOOK_FAILED, message=exc.message, data={"attempt": row.attempts}
                )
        logger.warning("outbox %s failed for good: %s", row.pk, exc.message)
        return DeliveryResult(sent=False)
    delay = exc.retry_after if exc.retry_after is not None else min(2 ** (row.attempts - 1), 300)
    with transaction.atomic():
        Outbox.objects.filter(pk=row.pk).update(
            locked_until=None, locked_by=None, last_error=exc.message, next_attempt_at=now + dt.timedelta(seconds=delay)
        )
        if row.kind == OutboxKind.WEBHOOK:
            event_record(row.confirmation, EventKind.WEBHOOK_FAILED, message=exc.message, data={"attempt": row.attempts})
    logger.info("outbox %s attempt %s failed (%s); retrying in %.1fs", row.pk, row.attempts, exc.message, delay)
    return DeliveryResult(sent=False, retry_in=delay)


def _fail_closed_if_undelivered(row: Outbox, exc: DeliveryFailed) -> None:
    """No card can reach anyone: deny rather than leave the agent waiting on nothing."""
    others = Outbox.objects.filter(confirmation_id=row.confirmation_id, kind=OutboxKind.CARD).exclude(pk=row.pk)
    # (a card kept for a digest, or shown on one, still reaches someone)
    alive = [OutboxStatus.SENT, OutboxStatus.PENDING, OutboxStatus.HELD, OutboxStatus.DIGESTED]
    if others.filter(status__in=alive).exists():
        return
    # The calls of its turn shown on this card can reach nobody either.
    members = ConfirmationRequest.objects.filter(batch_lead_id=row.confirmation_id, status=Status.PENDING)
    for pk in [row.confirmation_id, *members.values_list("pk", flat=True)]:
        confirmation_transition(
            pk,
            Status.REJECTED,
            decided_by=SYSTEM_ACTOR,
            decided_by_name=SYSTEM_ACTOR,
            reason=f"the approval card could not be delivered to channel {row.channel.name}: {exc.message}",
            channel=row.channel.name,
        )
