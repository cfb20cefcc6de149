"""The tamper-evident chain's writes (docs/audit.md): one entry per write of a chained row, and the purge.

`audit_append` is called in the transaction of the write it records, right
after it. On PostgreSQL it is ONE statement: an upsert that advances the
agent's `AuditHead` (which locks that row until the transaction ends) and, in
the same statement, inserts the entry whose hash PostgreSQL computes from the
head it just advanced. Two writers of one agent therefore queue on the head
row and can never fork the chain; writers of different agents never meet.
Elsewhere (SQLite for `make run`) the head is read and written in the
transaction, which SQLite's IMMEDIATE transactions already serialise.

Lock order: a transaction that writes an event about a confirmation request
and also locks that request locks the request first (every path here does), so
the head lock is always the last one taken and two transactions never wait on
each other in a circle.

`audit_purge` removes old records and records a checkpoint (the hash of the
last entry it removed), from which `verify_audit` starts the chain again.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import Any

from django.db import connection, transaction
from django.db.models import Exists, OuterRef, Q
from django.utils import timezone

from approvals.audit import GENESIS, audit_verify, content_hash, entry_hash, entry_tail
from approvals.errors import GatewayError
from approvals.models import (
    FINAL_STATUSES,
    AuditAction,
    AuditCheckpoint,
    AuditEntry,
    AuditHead,
    CallbackReceipt,
    ConfirmationEvent,
    ConfirmationRequest,
    ToolCall,
)

PURGE_BATCH = 1000
_HEAD = AuditHead._meta.db_table
_ENTRY = AuditEntry._meta.db_table
# The entry's hash is `entry_hash()` of approvals.audit, computed by PostgreSQL where seq and prev are known.
_APPEND_SQL = f"""
WITH head AS (
    INSERT INTO {_HEAD} AS h (agent_id, seq, hash, prev_hash)
    VALUES (%(agent)s, 1,
            encode(sha256(convert_to(%(agent)s::text || '|1|' || %(tail)s || '|' || %(genesis)s, 'UTF8')), 'hex'),
            %(genesis)s)
    ON CONFLICT (agent_id) DO UPDATE SET
        seq = h.seq + 1,
        prev_hash = h.hash,
        hash = encode(sha256(convert_to(
            h.agent_id::text || '|' || (h.seq + 1)::text || '|' || %(tail)s || '|' || h.hash, 'UTF8')), 'hex')
    RETURNING seq, hash, prev_hash
)
INSERT INTO {_ENTRY} (agent_id, seq, action, tool_call_id, event_id, content_hash, prev_hash, entry_hash, created_at)
SELECT %(agent)s, seq, %(action)s, %(tool_call)s, %(event)s, %(content)s, prev_hash, hash, %(now)s FROM head
"""


def audit_append(*, agent_id: int, action: str, row: Any, source: str | None = None) -> None:
    """Link one write of a chained row (a `ToolCall` or a `ConfirmationEvent`, as it is now) into
    its agent's chain. Call it inside the transaction of the write, after it."""
    if source is None:
        source = "tool_call" if isinstance(row, ToolCall) else "event"
    row_id = row["id"] if isinstance(row, dict) else row.pk
    content = content_hash(source, row)
    tail = entry_tail(action=action, source=source, source_id=row_id, content=content)
    links = {"tool_call": row_id if source == "tool_call" else None, "event": row_id if source == "event" else None}
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(
                _APPEND_SQL,
                {"agent": agent_id, "tail": tail, "genesis": GENESIS, "action": action, "content": content,
                 "now": timezone.now(), **links},
            )  # fmt: skip
        return
    with transaction.atomic(savepoint=False):
        head = AuditHead.objects.select_for_update().filter(agent_id=agent_id).values_list("seq", "hash").first()
        seq, prev = (head[0] + 1, head[1]) if head else (1, GENESIS)
        new = entry_hash(agent_id=agent_id, seq=seq, tail=tail, prev_hash=prev)
        if head:
            AuditHead.objects.filter(agent_id=agent_id).update(seq=seq, hash=new, prev_hash=prev)
        else:
            AuditHead.objects.create(agent_id=agent_id, seq=seq, hash=new, prev_hash=prev)
        AuditEntry.objects.create(
            agent_id=agent_id,
            seq=seq,
            action=action,
            tool_call_id=links["tool_call"],
            event_id=links["event"],
            content_hash=content,
            prev_hash=prev,
            entry_hash=new,
        )


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
    """Remove tool calls, confirmation requests (with their events, responses and outbox rows) and
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
    # A tool call and its request go together or not at all: both old, the request final, nothing
    # about either linked above the cut (an old request decided yesterday keeps its call).
    settled = (
        ConfirmationRequest.objects.filter(agent_id=agent_id, created_at__lt=cutoff, status__in=FINAL_STATUSES)
        .exclude(Exists(newer.filter(event__confirmation_id=OuterRef("pk"))))
        .exclude(Exists(ConfirmationEvent.objects.filter(confirmation_id=OuterRef("pk"), created_at__gte=cutoff)))
    )
    calls = (
        ToolCall.objects.filter(agent_id=agent_id, created_at__lt=cutoff)
        .exclude(Exists(newer.filter(tool_call_id=OuterRef("pk"))))
        .filter(Q(confirmation__isnull=True) | Q(confirmation__in=settled.values("pk")))
    )
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
    for source, row in retained:
        audit_append(agent_id=agent_id, action=AuditAction.RETAINED, row=row, source=source)
    result.entries_retained += len(retained)

    # Requests first (their events, responses and outbox rows go with them; their tool calls,
    # which go next, lose the link), in batches so memory stays flat.
    while batch := list(requests.values_list("pk", flat=True)[:PURGE_BATCH]):
        ConfirmationRequest.objects.filter(pk__in=batch).delete()
        result.confirmations_removed += len(batch)
    while batch := list(calls.values_list("pk", flat=True)[:PURGE_BATCH]):
        ToolCall.objects.filter(pk__in=batch).delete()
        result.tool_calls_removed += len(batch)
    result.entries_removed += old.delete()[0]
    AuditCheckpoint.objects.create(agent_id=agent_id, seq=cut, hash=cut_entry["entry_hash"], cutoff=cutoff)
    result.chains_cut += 1
