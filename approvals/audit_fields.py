"""A field joins what a request's `decision_mac` signs: the requests already there, signed and linked anew.

`approvals.audit.REQUEST_SIGNED` is both what a request's MAC signs and what its chain entries hash. A
field added to it (docs/architecture.md, "The record") is added by a migration that calls
`resign_requests` with the tuple as it was and as it is now, both written out in the migration (so a later
change of the tuple does not change what an earlier migration did). Without it every existing request
would stop verifying — and be answered as the gateway's rejection or cancellation.

Nothing that did not verify is made to: a request whose MAC did not sign it over the old fields keeps its
MAC, and one changed since the latest chain entry about it gets no new entry. `verify_audit` names both, as
before the migration.
"""

from __future__ import annotations

from typing import Any

from django.db.models import OuterRef, Subquery

from approvals.audit import GENESIS, content_hash, current_key_id, decision_mac, decision_verifies, entry_hash, entry_tail
from approvals.models import AuditEntry, AuditHead, ConfirmationRequest

BATCH = 2000  # rows read, signed and written at a time


def resign_requests(apps: Any = None, *, before: tuple[str, ...], after: tuple[str, ...]) -> tuple[int, int]:
    """Every request whose MAC verifies over `before` signed over `after`; every request the latest chain
    entry about recorded as it is (over `before`) linked again into its agent's chain, as a `retained`
    entry of its content over `after`. Returns (requests signed, requests linked)."""
    get = apps.get_model if apps is not None else None
    requests = get("approvals", "ConfirmationRequest") if get else ConfirmationRequest
    entries = get("approvals", "AuditEntry") if get else AuditEntry
    heads = get("approvals", "AuditHead") if get else AuditHead
    key_id = current_key_id()
    latest = entries.objects.filter(confirmation_id=OuterRef("pk")).order_by("-seq").values("content_hash")[:1]
    signed = linked = 0
    for agent_id in requests.objects.order_by("agent_id").values_list("agent_id", flat=True).distinct():
        head = heads.objects.filter(agent_id=agent_id).first()
        seq, prev, before_prev = (head.seq, head.hash, head.prev_hash) if head else (0, GENESIS, GENESIS)
        rows = (
            requests.objects.filter(agent_id=agent_id)
            .annotate(audit_hash=Subquery(latest))
            .order_by("pk")
            .values(*{*before, *after, "id"}, "decision_mac", "audit_hash")
        )
        macs: list[Any] = []
        links: list[Any] = []
        for row in rows.iterator(chunk_size=BATCH):
            if decision_verifies(ConfirmationRequest, row, fields=before):
                macs.append(requests(pk=row["id"], decision_mac=decision_mac(ConfirmationRequest, row, fields=after)))
            if row["audit_hash"] == content_hash("request", row, fields=before):
                content = content_hash("request", row, fields=after)
                tail = entry_tail(action="retained", source="request", source_id=row["id"], content=content)
                seq += 1
                new = entry_hash(agent_id=agent_id, seq=seq, tail=tail, prev_hash=prev, key_id=key_id)
                links.append(entries(
                    agent_id=agent_id, seq=seq, action="retained", content_hash=content, prev_hash=prev,
                    entry_hash=new, key_id=key_id, confirmation_id=row["id"],
                ))  # fmt: skip
                before_prev, prev = prev, new
            if len(macs) >= BATCH or len(links) >= BATCH:
                signed, linked = signed + _write(requests, entries, macs, links), linked + len(links)
                macs, links = [], []
        signed, linked = signed + _write(requests, entries, macs, links), linked + len(links)
        if seq:
            heads.objects.update_or_create(agent_id=agent_id, defaults={"seq": seq, "hash": prev, "prev_hash": before_prev})
    return signed, linked


def _write(requests: Any, entries: Any, macs: list[Any], links: list[Any]) -> int:
    requests.objects.bulk_update(macs, ["decision_mac"])
    entries.objects.bulk_create(links)
    return len(macs)
