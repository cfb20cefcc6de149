"""Retention and digests: a digest is purged with the last of the calls it listed, never before."""

from __future__ import annotations

import datetime as dt

import pytest

from approvals import services
from approvals.models import ConfirmationRequest, Digest, Outbox
from tests.audit.test_purge import DAYS, old_and_new  # noqa: F401 - fixture

pytestmark = pytest.mark.django_db(transaction=True)


def listed_in_a_digest(*confirmation_ids) -> Digest:
    """A digest listing these requests, as the digest tick leaves it (their card rows name it)."""
    first = ConfirmationRequest.objects.get(pk=confirmation_ids[0])
    digest = Digest.objects.create(channel=first.channel, shown_ids=[str(pk) for pk in confirmation_ids])
    Outbox.objects.filter(confirmation_id__in=confirmation_ids, kind="card").update(status="digested", digest=digest)
    return digest


def test_a_digest_goes_with_its_last_call(old_and_new):
    payer, reader, cut, late = old_and_new
    old = ConfirmationRequest.objects.filter(created_at__lt=cut).exclude(pk=late).values_list("pk", flat=True)
    gone = listed_in_a_digest(*old)
    kept = listed_in_a_digest(late)  # an old request the purge keeps (decided since)
    Digest.objects.filter(pk__in=[gone.pk, kept.pk]).update(created_at=cut - dt.timedelta(seconds=1))

    services.audit_purge(older_than=DAYS, now=cut + DAYS)

    assert list(Digest.objects.values_list("pk", flat=True)) == [kept.pk]
