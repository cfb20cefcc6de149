"""Digests (docs/policies.md, "Risk"): a channel's low-risk cards kept back and sent together.

A request whose risk its channel's `digest:` gathers gets a card row written `held` instead of `pending`
(`confirmation_create`): no worker posts it. Beat's tick (`digests_gather`, a plain function the task calls)
takes, per channel whose oldest held card is older than `every_minutes`, the held cards whose requests are
still pending, up to DIGEST_MAX_ITEMS a message, into a `Digest` row (the ids it shows, in order) and an
outbox row that posts it (`approvals.services.digest_delivery`). A request decided or expired before the
tick is left out; one that arrives after waits for the next. The request itself is untouched: its agent
waits as ever, its deadline holds (the expiry sweep knows nothing of digests).
"""

from __future__ import annotations

import datetime as dt
import logging

from django.db import transaction
from django.utils import timezone

from approvals.models import Channel, Digest, Outbox, OutboxKind, OutboxStatus, Status
from approvals.services.records import outbox_add, outbox_queued
from gateway_contract import CHANNEL_KINDS, DIGEST_MAX_ITEMS, DigestConfig, digest_config, takes_digests

logger = logging.getLogger("approvals.services")


def digests_gather(*, now: dt.datetime | None = None) -> int:
    """Beat's digest tick: every channel's due held cards gathered into digest messages; how many digests
    were made. A channel whose `digest:` key was removed sends its held cards at once, one by one."""
    now = now or timezone.now()
    made = 0
    for channel in Channel.objects.filter(kind__in=[kind for kind in CHANNEL_KINDS if takes_digests(kind)]):
        settings = digest_config(channel.config)
        if settings is None:
            _release(channel)
        else:
            made += _gather(channel, settings, now)
    return made


def _gather(channel: Channel, settings: DigestConfig, now: dt.datetime) -> int:
    with transaction.atomic():
        # Another tick at the same time skips what this one holds: each card is gathered once.
        held = list(
            Outbox.objects.select_for_update(of=("self",), skip_locked=True)
            .select_related("confirmation")
            .filter(channel=channel, kind=OutboxKind.CARD, status=OutboxStatus.HELD)
            .order_by("created_at", "id")
        )
        if not held or held[0].created_at > now - dt.timedelta(minutes=settings.every_minutes):
            return 0
        pending = [row for row in held if row.confirmation.status == Status.PENDING]
        gone = [row.pk for row in held if row.confirmation.status != Status.PENDING]
        if gone:  # decided or expired before any digest showed them
            Outbox.objects.filter(pk__in=gone).update(status=OutboxStatus.DIGESTED)
        made = 0
        for start in range(0, len(pending), DIGEST_MAX_ITEMS):
            chunk = pending[start : start + DIGEST_MAX_ITEMS]
            digest = Digest.objects.create(channel=channel, shown_ids=[str(row.confirmation_id) for row in chunk])
            Outbox.objects.filter(pk__in=[row.pk for row in chunk]).update(status=OutboxStatus.DIGESTED, digest=digest)
            outbox_add(
                chunk[0].confirmation_id, OutboxKind.DIGEST, dedupe_key=f"digest:{digest.pk}", channel=channel, digest=digest
            )
            made += 1
    if made:
        logger.info("channel %s: %s call(s) gathered into %s digest(s)", channel.name, len(pending), made)
    return made


def _release(channel: Channel) -> None:
    """Held cards of a channel that no longer gathers digests: each is posted on its own now."""
    with transaction.atomic():
        rows = list(
            Outbox.objects.select_for_update(skip_locked=True).filter(
                channel=channel, kind=OutboxKind.CARD, status=OutboxStatus.HELD
            )
        )
        if not rows:
            return
        Outbox.objects.filter(pk__in=[row.pk for row in rows]).update(status=OutboxStatus.PENDING)
        for row in rows:
            row.status = OutboxStatus.PENDING
            outbox_queued(row)

