"""A digest's outbox work (docs/policies.md, "Risk"): its message posted, redrawn as its calls are decided,
and a message that can reach nobody failing its calls closed — `approvals.services.delivery` hands these
rows here. Like a card: the post and each redraw draw the digest as it is when they run, and a change that
landed while the message was on its way is drawn again afterwards."""

from __future__ import annotations

import logging
from typing import Any

from django.utils import timezone

from approvals import selectors
from approvals.models import ConfirmationRequest, Digest, EventKind, Outbox, OutboxKind, OutboxStatus, Status
from approvals.services.confirmations import confirmation_transition
from approvals.services.records import event_record, outbox_add
from approvals.types import SYSTEM_ACTOR
from gateway_contract import DigestView, MessageRef
from gateway_utils.outbound import DeliveryFailed

logger = logging.getLogger("approvals.services")

# Most times one redraw sends a digest again because its calls changed while it was sending.
CURRENT_TRIES = 3


def digest_perform(row: Outbox) -> tuple[dict[str, Any] | None, DigestView | None]:
    """Post (DIGEST) or redraw (DIGEST_UPDATE) the row's digest: (the message's ref to store, the view drawn)."""
    digest = Digest.objects.select_related("channel").get(pk=row.digest_id)
    adapter = selectors.channel_adapter(digest.channel)
    view = selectors.digest_view(digest)
    if row.kind == OutboxKind.DIGEST:
        return adapter.post_digest(view, idempotency_key=row.dedupe_key).data, view
    if digest.message_ref is None:
        return None, None  # not posted yet: its post draws it as it is then
    ref = MessageRef(digest.message_ref)
    for _ in range(CURRENT_TRIES):
        adapter.update_digest(view, ref)
        now = selectors.digest_view(digest)
        if now == view:
            break
        view = now
    return None, None


def digest_posted(row: Outbox, message_ref: dict[str, Any] | None, drawn: DigestView) -> None:
    """After the post (in the caller's transaction): the message's ref kept, a `card_posted` event on each
    call it lists, and a redraw if a call changed while the message was on its way."""
    digest = Digest.objects.select_for_update().get(pk=row.digest_id)
    Digest.objects.filter(pk=digest.pk).update(message_ref=message_ref, posted_at=timezone.now())
    ids = sorted(digest.shown_ids)
    # Each request is locked before its event takes its agent's audit head: the order every path keeps.
    list(ConfirmationRequest.objects.select_for_update(no_key=True).filter(pk__in=ids).values_list("pk", flat=True))
    for pk in ids:
        event_record(
            pk, EventKind.CARD_POSTED, channel=row.channel.name, data={"ref": message_ref, "digest": digest.pk}
        )
    digest_redraw_add(digest, unless=drawn)


def digest_redraw_add(digest: Digest, *, unless: DigestView | None = None) -> None:
    """Queue a redraw of a posted digest (one row per state it shows, so repeats of a state add nothing);
    nothing if it shows what `unless` showed."""
    view = selectors.digest_view(digest)
    if unless is not None and view == unless:
        return
    outbox_add(
        digest.shown_ids[0],
        OutboxKind.DIGEST_UPDATE,
        dedupe_key=f"digest:{digest.pk}:update:{selectors.digest_state_key(view)}",
        channel=digest.channel,
        digest=digest,
    )


def digests_redraw_for(confirmation_id: Any) -> None:
    """A request changed: every posted digest that lists it is redrawn (queued)."""
    for digest in selectors.digests_showing(confirmation_id):
        digest_redraw_add(digest)


def digest_failed(row: Outbox, exc: DeliveryFailed) -> None:
    """A digest that could not be posted, for good (in the caller's transaction): `card_failed` on each call
    it lists, and each one no other card shows is rejected — no card can reach anyone, so deny rather
    than leave the agent waiting on nothing (as for a card)."""
    digest = Digest.objects.get(pk=row.digest_id)
    ids = sorted(digest.shown_ids)
    list(ConfirmationRequest.objects.select_for_update(no_key=True).filter(pk__in=ids).values_list("pk", flat=True))
    live = set(
        Outbox.objects.filter(
            confirmation_id__in=ids, kind=OutboxKind.CARD, status__in=[OutboxStatus.SENT, OutboxStatus.PENDING]
        ).values_list("confirmation_id", flat=True)
    )
    for pk in ids:
        event_record(pk, EventKind.CARD_FAILED, channel=row.channel.name, message=exc.message, data={"digest": digest.pk})
    for pk in ConfirmationRequest.objects.filter(pk__in=ids, status=Status.PENDING).values_list("pk", flat=True):
        if pk in live:
            continue
        confirmation_transition(
            pk,
            Status.REJECTED,
            decided_by=SYSTEM_ACTOR,
            decided_by_name=SYSTEM_ACTOR,
            reason=f"the digest could not be delivered to channel {row.channel.name}: {exc.message}",
            channel=row.channel.name,
        )
    logger.warning("digest %s could not be posted: %s", digest.pk, exc.message)


