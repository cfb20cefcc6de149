"""What a digest message shows (`digest_view`), and which digests show a request (docs/policies.md, "Risk")."""

from __future__ import annotations

import hashlib
from typing import Any

from approvals.models import ConfirmationRequest, Digest, OutboxKind, OutboxStatus
from approvals.selectors.requests import confirmation_url
from gateway_contract import DigestItem, DigestView, digest_config, takes_digests


def digest_lookup(digest_id: Any) -> Digest | None:
    """A digest by id (as a button carries it: text); None if there is none."""
    try:
        return Digest.objects.select_related("channel").filter(pk=int(digest_id)).first()
    except (TypeError, ValueError):
        return None


def digest_view(digest: Digest) -> DigestView:
    """The digest's calls as they are now, in the order it lists them (a request purged since is left out)."""
    rows = {
        str(c.pk): c
        for c in ConfirmationRequest.objects.select_related("agent").filter(pk__in=digest.shown_ids)
    }
    items = tuple(
        DigestItem(
            confirmation_id=pk,
            agent=c.agent.name,
            tool_name=c.tool_name,
            tool_args=c.approved_args if c.approved_args is not None else c.tool_args,
            risk=c.risk,
            status=c.status,
            url=confirmation_url(c),
            expires_at=c.expires_at,
            decided_by=c.decided_by,
            decided_by_name=c.decided_by_name,
            decision_reason=c.decision_reason,
        )
        for pk in digest.shown_ids
        if (c := rows.get(pk)) is not None
    )
    return DigestView(digest_id=str(digest.pk), channel=digest.channel.name, items=items, created_at=digest.created_at)


def digest_state_key(view: DigestView) -> str:
    """A short key of what a digest shows (each call's state): one redraw row per state it passes through."""
    text = ",".join(f"{item.confirmation_id}={item.status}" for item in view.items)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def digests_showing(confirmation_id: Any) -> list[Digest]:
    """The posted digests that list this request (its card gathered into them)."""
    return list(
        Digest.objects.select_related("channel")
        .filter(
            outbox__confirmation_id=confirmation_id,
            outbox__kind=OutboxKind.CARD,
            outbox__status=OutboxStatus.DIGESTED,
            message_ref__isnull=False,
        )
        .distinct()
    )


def digested_risks(channel: Any) -> frozenset[str]:
    """The risks a channel gathers into digests (its `digest:` key); empty: it sends every card at once."""
    if not takes_digests(channel.kind):
        return frozenset()
    settings = digest_config(channel.config)
    return frozenset(settings.risks) if settings is not None else frozenset()
