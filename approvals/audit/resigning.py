"""Signing what is there: every chain's entries and every decision row signed again under the current key,
and decision rows from before they were chained linked in (migrations 0011 and 0015, `verify_audit
--resign` after a key rotation; docs/audit.md)."""

from __future__ import annotations

from typing import Any

from django.db.models import F

from approvals.audit.signing import (
    GENESIS,
    LINKS,
    SIGNED,
    SOURCE_OF,
    SOURCES,
    content_hash,
    current_key_id,
    decision_mac,
    decision_verifies,
    entry_hash,
    entry_source,
    entry_tail,
)
from approvals.models import ApproverResponse, AuditCheckpoint, AuditEntry, AuditHead, ConfirmationRequest, Grant


def resign_chains(apps: Any = None) -> int:
    """Sign every entry of every chain again under the current key, in place, from its start or its
    checkpoint (migration 0011, and `verify_audit --resign` after a key rotation, docs/audit.md).
    What the chains say is kept; only the signatures change. Returns the entries signed."""
    get = apps.get_model if apps is not None else None
    entries_model = get("approvals", "AuditEntry") if get else AuditEntry
    heads_model = get("approvals", "AuditHead") if get else AuditHead
    checkpoints_model = get("approvals", "AuditCheckpoint") if get else AuditCheckpoint
    key_id = current_key_id()
    signed = 0
    for head in heads_model.objects.order_by("agent_id"):
        checkpoint = checkpoints_model.objects.filter(agent_id=head.agent_id).order_by("-seq").first()
        prev = checkpoint.hash if checkpoint else GENESIS
        before = prev
        batch = []
        for entry in entries_model.objects.filter(agent_id=head.agent_id).order_by("seq").iterator(chunk_size=2000):
            source, source_id = entry_source(entry)
            tail = entry_tail(action=entry.action, source=source, source_id=source_id, content=entry.content_hash)
            entry.prev_hash, entry.key_id = prev, key_id
            entry.entry_hash = entry_hash(agent_id=head.agent_id, seq=entry.seq, tail=tail, prev_hash=prev, key_id=key_id)
            before, prev = entry.prev_hash, entry.entry_hash
            batch.append(entry)
            if len(batch) >= 2000:
                entries_model.objects.bulk_update(batch, ["prev_hash", "entry_hash", "key_id"])
                signed += len(batch)
                batch = []
        entries_model.objects.bulk_update(batch, ["prev_hash", "entry_hash", "key_id"])
        signed += len(batch)
        heads_model.objects.filter(agent_id=head.agent_id).update(hash=prev, prev_hash=before)
    return signed  # (every process's guess of a head is now stale: its next append reads the head again)


def sign_decisions(apps: Any = None, *, only_valid: bool = False, request_fields: tuple[str, ...] | None = None) -> int:
    """Sign every decision row under the current key (migration 0011 for rows from before MACs; after a
    key rotation, `only_valid` re-signs only rows whose MAC verifies under the old keys — a row that did
    not verify stays unverifiable). `request_fields`: what a request's MAC signed at the migration that
    calls this (a later migration adds fields, and re-signs). Returns the rows signed."""
    signed = 0
    for model in SIGNED:
        table = apps.get_model("approvals", model.__name__) if apps is not None else model
        fields = request_fields if model is ConfirmationRequest else None
        batch = []
        for row in table.objects.order_by("pk").iterator(chunk_size=2000):
            if only_valid and not decision_verifies(model, row, fields=fields):
                continue
            row.decision_mac = decision_mac(model, row, fields=fields)
            batch.append(row)
            if len(batch) >= 2000:
                table.objects.bulk_update(batch, ["decision_mac"])
                signed += len(batch)
                batch = []
        table.objects.bulk_update(batch, ["decision_mac"])
        signed += len(batch)
    return signed


def link_decisions(apps: Any = None, *, request_fields: tuple[str, ...] | None = None) -> int:
    """Link every decision row as it is into its agent's chain (`recorded` entries; migration 0011, for
    rows from before decision rows were chained). `request_fields`: as `sign_decisions`'s. Returns the
    rows linked."""
    get = apps.get_model if apps is not None else None
    entries_model = get("approvals", "AuditEntry") if get else AuditEntry
    heads_model = get("approvals", "AuditHead") if get else AuditHead
    linked = 0
    for model, agent_field in ((ConfirmationRequest, "agent_id"), (ApproverResponse, "confirmation__agent_id"),
                               (Grant, "agent_id")):  # fmt: skip
        source = SOURCE_OF[model]
        table = get("approvals", model.__name__) if get else model
        fields = (request_fields if model is ConfirmationRequest else None) or SOURCES[source]
        for row in table.objects.annotate(chain_agent=F(agent_field)).order_by("pk").values(*{*fields, "id"}, "chain_agent"):
            agent_id = row["chain_agent"]
            head = heads_model.objects.filter(agent_id=agent_id).first()
            seq, prev = (head.seq, head.hash) if head else (0, GENESIS)
            content = content_hash(source, row, fields=fields)
            tail = entry_tail(action="recorded", source=source, source_id=row["id"], content=content)
            new = entry_hash(agent_id=agent_id, seq=seq + 1, tail=tail, prev_hash=prev, key_id=current_key_id())
            entries_model.objects.create(
                agent_id=agent_id, seq=seq + 1, action="recorded", content_hash=content, prev_hash=prev, entry_hash=new,
                key_id=current_key_id(), **{LINKS[source]: row["id"]},
            )  # fmt: skip
            if head:
                heads_model.objects.filter(agent_id=agent_id).update(seq=seq + 1, hash=new, prev_hash=prev)
            else:
                heads_model.objects.create(agent_id=agent_id, seq=seq + 1, hash=new, prev_hash=prev)
            linked += 1
    return linked
