"""What the chain keeps, and for how long (docs/audit.md): every head recorded outside the database
(`audit_checkpoint`), and the purge.

`audit_purge` removes old records and records a checkpoint (the hash of the
last entry it removed), from which `verify_audit` starts the chain again.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
from typing import Any

from django.db import transaction
from django.db.models import Exists, OuterRef, Q
from django.utils import timezone

from approvals.audit import LINKS, ExpectedHead, audit_verify, current_heads, heads_line
from approvals.errors import GatewayError
from approvals.models import (
    FINAL_STATUSES,
    ApproverResponse,
    AuditAction,
    AuditCheckpoint,
    AuditEntry,
    AuditHead,
    CallbackReceipt,
    ConfirmationEvent,
    ConfirmationRequest,
    Digest,
    Grant,
    Outbox,
    ToolCall,
)
from approvals.services.audit import audit_append

logger = logging.getLogger("approvals.audit")
PURGE_BATCH = 1000


# --------------------------------------------------------------------------- heads kept outside the database


def audit_checkpoint(*, path: str | None) -> list[ExpectedHead]:
    """Record every chain's head outside the database: one JSON line appended to `path` (beat, every
    GATEWAY_AUDIT_CHECKPOINT_SECONDS) and a log line, for `verify_audit --expect-head`. Ship the file or
    the log somewhere the database's keepers cannot rewrite (docs/audit.md)."""
    heads = current_heads()
    if heads and path:
        with open(path, "a", encoding="utf-8") as out:
            out.write(heads_line(heads) + "\n")
    if heads:
        logger.info("audit heads: %s", " ".join(str(h) for h in heads))
    return heads


# --------------------------------------------------------------------------- retention


class AuditBroken(GatewayError):
    """The chain does not verify: purging now would cut away the evidence."""

    status = 409
    code = "audit_broken"


@dataclasses.dataclass
class PurgeResult:
    cutoff: dt.datetime
    chains_cut: int = 0
    entries_removed: int = 0
    tool_calls_removed: int = 0
    confirmations_removed: int = 0
    entries_retained: int = 0  # kept rows re-linked above the cut


def audit_purge(*, older_than: dt.timedelta, now: dt.datetime | None = None) -> PurgeResult:
    """Remove tool calls, confirmation requests (with their grants, events, responses and outbox rows) and
    audit entries older than `older_than`, agent by agent, keeping every chain verifiable.

    Per agent, in one transaction holding its chain's head: the chain is cut at
    its last entry older than the cut-off. A tool call and its confirmation
    request go together, when both are that old, the request is final, and
    nothing about either (an event, a completion) is newer. A row that stays
    but whose latest entry is at or below the cut (a pending request's events,
    say) gets a fresh `retained` entry above it. Then the entries up to the cut
    go and an `AuditCheckpoint` records the hash at the cut. Refuses
    (AuditBroken) if the chains do not verify first: a purge must not cut away
    the evidence.
    """
    now = now or timezone.now()
    result = PurgeResult(cutoff=now - older_than)
    check = audit_verify()
    if not check.ok:
        first = check.first
        raise AuditBroken(f"the audit does not verify ({first.message if first else ''}); nothing was purged")
    for agent_id in AuditHead.objects.order_by("agent_id").values_list("agent_id", flat=True):
        with transaction.atomic():
            _purge_chain(agent_id, result)
    CallbackReceipt.objects.filter(created_at__lt=result.cutoff).delete()
    # A digest goes with the last of its calls (their card rows, which name it, went with them).
    Digest.objects.filter(created_at__lt=result.cutoff).exclude(Exists(Outbox.objects.filter(digest=OuterRef("pk")))).delete()
    return result


def _purge_chain(agent_id: int, result: PurgeResult) -> None:
    list(AuditHead.objects.select_for_update().filter(agent_id=agent_id))  # this agent's writers wait for us
    cutoff = result.cutoff
    last = AuditCheckpoint.objects.filter(agent_id=agent_id).order_by("-seq").values_list("seq", flat=True).first()
    cut_entry = (
        AuditEntry.objects.filter(agent_id=agent_id, seq__gt=last or 0, created_at__lt=cutoff)
        .order_by("-seq")
        .values("seq", "entry_hash")
        .first()
    )
    if cut_entry is None:
        return
    cut = cut_entry["seq"]
    old = AuditEntry.objects.filter(agent_id=agent_id, seq__lte=cut)
    newer = AuditEntry.objects.filter(agent_id=agent_id, seq__gt=cut)
    old_calls = ToolCall.objects.filter(agent_id=agent_id, created_at__lt=cutoff).exclude(
        Exists(newer.filter(tool_call_id=OuterRef("pk")))
    )
    # A call a grant allowed names the grant, and the grant its request: a request stays while a
    # call its grants allowed stays (those calls have no request of their own; old ones go).
    allowed_and_staying = ToolCall.objects.filter(grant__confirmation_id=OuterRef("pk")).exclude(
        pk__in=old_calls.filter(confirmation__isnull=True).values("pk")
    )
    # A tool call and its request go together or not at all: both old, the request final, nothing
    # about either linked above the cut (an old request decided yesterday keeps its call).
    settled = (
        ConfirmationRequest.objects.filter(agent_id=agent_id, created_at__lt=cutoff, status__in=FINAL_STATUSES)
        .exclude(Exists(newer.filter(event__confirmation_id=OuterRef("pk"))))
        .exclude(Exists(newer.filter(confirmation_id=OuterRef("pk"))))
        .exclude(Exists(newer.filter(response__confirmation_id=OuterRef("pk"))))
        .exclude(Exists(newer.filter(grant__confirmation_id=OuterRef("pk"))))
        .exclude(Exists(ConfirmationEvent.objects.filter(confirmation_id=OuterRef("pk"), created_at__gte=cutoff)))
        .exclude(Exists(allowed_and_staying))
    )
    calls = old_calls.filter(Q(confirmation__isnull=True) | Q(confirmation__in=settled.values("pk")))
    requests = settled.filter(Q(tool_call__isnull=True) | Q(tool_call__in=calls.values("pk")))

    # Rows that stay and whose latest entry is about to be cut away: link them again, above the cut.
    kept_calls = (
        ToolCall.objects.filter(agent_id=agent_id)
        .filter(Exists(old.filter(tool_call_id=OuterRef("pk"))))
        .exclude(Exists(newer.filter(tool_call_id=OuterRef("pk"))))
        .exclude(pk__in=calls.values("pk"))
    )
    kept_events = (
        ConfirmationEvent.objects.filter(confirmation__agent_id=agent_id)
        .filter(Exists(old.filter(event_id=OuterRef("pk"))))
        .exclude(Exists(newer.filter(event_id=OuterRef("pk"))))
        .exclude(confirmation_id__in=requests.values("pk"))
    )
    retained: list[tuple[str, Any]] = [("tool_call", c) for c in kept_calls.iterator(chunk_size=500)]
    retained += [("event", e) for e in kept_events.iterator(chunk_size=500)]
    for source, model, agent_field, request_field in (
        ("request", ConfirmationRequest, "agent_id", "pk"),
        ("response", ApproverResponse, "confirmation__agent_id", "confirmation_id"),
        ("grant", Grant, "agent_id", "confirmation_id"),
    ):
        link = LINKS[source]
        kept = (
            model.objects.filter(**{agent_field: agent_id})
            .filter(Exists(old.filter(**{link: OuterRef("pk")})))
            .exclude(Exists(newer.filter(**{link: OuterRef("pk")})))
            .exclude(**{f"{request_field}__in": requests.values("pk")})
        )
        retained += [(source, row) for row in kept.iterator(chunk_size=500)]
    for source, row in retained:
        audit_append(agent_id=agent_id, action=AuditAction.RETAINED, row=row, source=source)
    result.entries_retained += len(retained)

    # Calls first (the grants they name can go next), then each request with its grants, events,
    # responses and outbox rows — in batches, so memory stays flat.
    while batch := list(calls.values_list("pk", flat=True)[:PURGE_BATCH]):
        ToolCall.objects.filter(pk__in=batch).delete()
        result.tool_calls_removed += len(batch)
    while batch := list(requests.values_list("pk", flat=True)[:PURGE_BATCH]):
        Grant.objects.filter(confirmation_id__in=batch).delete()
        ConfirmationRequest.objects.filter(pk__in=batch).delete()
        result.confirmations_removed += len(batch)
    result.entries_removed += old.delete()[0]
    AuditCheckpoint.objects.create(agent_id=agent_id, seq=cut, hash=cut_entry["entry_hash"], cutoff=cutoff)
    result.chains_cut += 1
