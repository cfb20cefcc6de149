"""The tamper-evident chain's writes (docs/audit.md): one entry per write of a chained row, and the purge.

`audit_append` is called in the transaction of the write it records, right
after it. On PostgreSQL it is ONE statement: an upsert that advances the
agent's `AuditHead` (which locks that row until the transaction ends) and, in
the same statement, inserts the entry whose hash PostgreSQL computes from the
head it just advanced. Two writers of one agent therefore queue on the head
row and can never fork the chain; writers of different agents never meet.
Elsewhere (SQLite for `make run`) the head is read and written in the
transaction, which SQLite's IMMEDIATE transactions already serialise.

Lock order: a transaction that writes an event about a confirmation request and
also locks that request locks the request first (every path here does), so the
head lock is the last one it waits for. Requests and agents are locked FOR NO
KEY UPDATE (`select_for_update(no_key=True)`), which never blocks the
foreign-key checks of rows inserted about them: deciding a call of a turn
writes an outbox row for the turn's card on the lead request, and must not wait
behind a card delivery that holds the lead and waits for the head.

A transaction that writes several chained rows of one agent (creating a
request: the call, its `created` and `card_posted` events) wraps them in
`audit_deferred()`: the links are queued as the rows are written and appended
together when the block ends, in ONE statement per agent that locks the head,
chains the entries (PostgreSQL computes each hash from the one before) and
advances the head. The head is then held for that statement and the COMMIT
only, not from the first event to the end of the transaction, which is what
lets an agent's requests be created in parallel.

`audit_purge` removes old records and records a checkpoint (the hash of the
last entry it removed), from which `verify_audit` starts the chain again.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import datetime as dt
from collections.abc import Iterable, Iterator
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
    Grant,
    ToolCall,
)
from gateway import metrics

PURGE_BATCH = 1000
_HEAD = AuditHead._meta.db_table
_ENTRY = AuditEntry._meta.db_table
# The entry's hash is `entry_hash()` of approvals.audit, computed by PostgreSQL where seq and prev are known.
# `{source}` is "" (append unconditionally) or "FROM written" (append only if the statement's
# `written` part, an INSERT of the chained row, wrote it).
_APPEND_SQL = f"""
head AS (
    INSERT INTO {_HEAD} AS h (agent_id, seq, hash, prev_hash)
    SELECT %(agent)s::bigint, 1,
           encode(sha256(convert_to(%(agent)s::text || '|1|' || %(tail)s::text || '|' || %(genesis)s::text, 'UTF8')), 'hex'),
           %(genesis)s::varchar {{source}}
    ON CONFLICT (agent_id) DO UPDATE SET
        seq = h.seq + 1,
        prev_hash = h.hash,
        hash = encode(sha256(convert_to(
            h.agent_id::text || '|' || (h.seq + 1)::text || '|' || %(tail)s::text || '|' || h.hash, 'UTF8')), 'hex')
    RETURNING seq, hash, prev_hash
)
INSERT INTO {_ENTRY} (agent_id, seq, action, tool_call_id, event_id, content_hash, prev_hash, entry_hash, created_at)
SELECT %(agent)s::bigint, seq, %(action)s::varchar, %(tool_call)s::uuid, %(event)s::bigint, %(content)s::varchar,
       prev_hash, hash, %(now)s::timestamptz FROM head
"""


# Several links of one agent in one statement (`audit_deferred`): the head locked and read, the
# entries chained from it one after another (a recursive CTE), written, and the head advanced.
_APPEND_MANY_SQL = f"""
WITH RECURSIVE
old AS (SELECT seq, hash FROM {_HEAD} WHERE agent_id = %(agent)s FOR UPDATE),
links (i, tail, action, tool_call, event, content, created_at) AS (VALUES {{values}}),
chain (i, seq, hash, prev) AS (
    SELECT 0, seq, hash::text, NULL::text FROM old
    UNION ALL
    SELECT c.i + 1, c.seq + 1,
           encode(sha256(convert_to(
               %(agent)s::text || '|' || (c.seq + 1)::text || '|' || l.tail || '|' || c.hash, 'UTF8')), 'hex'),
           c.hash
    FROM chain c JOIN links l ON l.i = c.i + 1
),
entries AS (
    INSERT INTO {_ENTRY}
        (agent_id, seq, action, tool_call_id, event_id, content_hash, prev_hash, entry_hash, created_at)
    SELECT %(agent)s::bigint, c.seq, l.action, l.tool_call, l.event, l.content, c.prev, c.hash, l.created_at
    FROM chain c JOIN links l ON l.i = c.i
)
UPDATE {_HEAD} h SET seq = last.seq, hash = last.hash, prev_hash = last.prev
FROM (SELECT seq, hash, prev FROM chain ORDER BY i DESC LIMIT 1) last
WHERE h.agent_id = %(agent)s AND last.prev IS NOT NULL
"""
_LINK_VALUES = (
    "(%(i{n})s::int, %(tail{n})s::text, %(action{n})s::varchar, %(tool_call{n})s::uuid, %(event{n})s::bigint, "
    "%(content{n})s::varchar, %(now{n})s::timestamptz)"
)

# The links queued by the innermost `audit_deferred` block of this context (None: none is open).
_deferred: contextvars.ContextVar[list[tuple[int, dict[str, Any]]] | None] = contextvars.ContextVar(
    "audit_deferred", default=None
)


@contextlib.contextmanager
def audit_deferred() -> Iterator[None]:
    """Queue the chain links of the writes in this block and append them all when it ends without an
    error — one statement per agent (PostgreSQL; elsewhere each link is appended as it is made).
    Open it inside the transaction that writes the rows, so the entries commit with them. Nested
    blocks share the outer one's queue."""
    if _deferred.get() is not None or connection.vendor != "postgresql":
        yield
        return
    if not connection.in_atomic_block:
        raise RuntimeError("audit_deferred() needs a transaction: the entries must commit with their rows")
    queued: list[tuple[int, dict[str, Any]]] = []
    token = _deferred.set(queued)
    try:
        yield
    finally:
        _deferred.reset(token)
    for agent_id in sorted({agent_id for agent_id, _ in queued}):  # heads locked in agent order
        _append_many(agent_id, [link for owner, link in queued if owner == agent_id])


def _count_appended(links: Iterable[dict[str, Any]]) -> None:
    """`gateway_audit_appends_total`, at commit: entries rolled back were never appended."""
    tool_calls = events = 0
    for link in links:
        if link["tool_call"] is not None:
            tool_calls += 1
        else:
            events += 1

    def count() -> None:
        if tool_calls:
            metrics.AUDIT_APPENDS.labels("tool_call").inc(tool_calls)
        if events:
            metrics.AUDIT_APPENDS.labels("event").inc(events)

    transaction.on_commit(count)


def _append_many(agent_id: int, links: list[dict[str, Any]]) -> None:
    values = ", ".join(_LINK_VALUES.format(n=n) for n in range(len(links)))
    params: dict[str, Any] = {"agent": agent_id}
    for n, link in enumerate(links):
        params.update({f"{key}{n}": link[key] for key in ("tail", "action", "tool_call", "event", "content", "now")})
        params[f"i{n}"] = n + 1
    sql = _APPEND_MANY_SQL.format(values=values)
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        if cursor.rowcount == 1:
            _count_appended(links)
            return
        # The agent's first entries: give it a head at the genesis, then append.
        genesis = AuditHead(agent_id=agent_id, seq=0, hash=GENESIS, prev_hash=GENESIS)
        AuditHead.objects.bulk_create([genesis], ignore_conflicts=True)
        cursor.execute(sql, params)
        if cursor.rowcount != 1:
            raise RuntimeError(f"could not advance the audit head of agent {agent_id}")
    _count_appended(links)


def _link(*, agent_id: int, action: str, row: Any, source: str | None) -> dict[str, Any]:
    """The parameters of `_APPEND_SQL` for one write of `row` (as it is now)."""
    if source is None:
        source = "tool_call" if isinstance(row, ToolCall) else "event"
    row_id = row["id"] if isinstance(row, dict) else row.pk
    content = content_hash(source, row)
    return {
        "agent": agent_id,
        "tail": entry_tail(action=action, source=source, source_id=row_id, content=content),
        "genesis": GENESIS,
        "action": action,
        "content": content,
        "now": timezone.now(),
        "tool_call": row_id if source == "tool_call" else None,
        "event": row_id if source == "event" else None,
    }


def audit_append(*, agent_id: int, action: str, row: Any, source: str | None = None) -> None:
    """Link one write of a chained row (a `ToolCall` or a `ConfirmationEvent`, as it is now) into
    its agent's chain. Call it inside the transaction of the write, after it."""
    params = _link(agent_id=agent_id, action=action, row=row, source=source)
    queued = _deferred.get()
    if queued is not None:
        queued.append((agent_id, params))
        return
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("WITH " + _APPEND_SQL.format(source=""), params)
    else:
        with transaction.atomic(savepoint=False):
            _append_here(params)
    _count_appended([params])


def audit_insert_linked(*, insert_sql: str, params: dict[str, Any], agent_id: int, action: str, row: Any) -> bool:
    """Write one chained row and its chain entry in ONE statement (PostgreSQL); False if nothing was written.

    `insert_sql` is an `INSERT … SELECT …` of `row` with named parameters (`params`), whose
    WHERE may hold it back; the entry is appended only if the row was written. Elsewhere:
    the INSERT, then `audit_append`, in one transaction. One statement means one round trip
    and the head row locked only for that statement, so an agent's writers queue on it for
    microseconds, not for a transaction's length. Inside `audit_deferred()`: the INSERT
    now, its entry with the block's others at the block's end.
    """
    link = _link(agent_id=agent_id, action=action, row=row, source="tool_call" if isinstance(row, ToolCall) else "event")
    queued = _deferred.get()
    with connection.cursor() as cursor:
        if queued is not None:  # the entry goes with the block's others, at its end
            cursor.execute(insert_sql, params)
            if cursor.rowcount == 1:
                queued.append((agent_id, link))
            return cursor.rowcount == 1
        if connection.vendor == "postgresql":
            sql = f"WITH written AS ({insert_sql} RETURNING 1), " + _APPEND_SQL.format(source="FROM written")
            cursor.execute(sql, {**params, **link})
            written = cursor.rowcount == 1
        else:
            with transaction.atomic(savepoint=False):
                cursor.execute(insert_sql, params)
                written = cursor.rowcount == 1
                if written:
                    _append_here(link)
    if written:
        _count_appended([link])
    return written


def audit_append_many(links: list[tuple[int, str, Any]]) -> None:
    """Link several writes (`(agent_id, action, row)`, rows as they are now) into their agents' chains,
    in a few statements however many: the heads locked together in agent order (so two bulk
    writers never wait on each other in a circle), the hashes chained here, the entries written
    in one INSERT and the heads advanced in one UPDATE."""
    if not links:
        return
    if connection.vendor != "postgresql":
        for agent_id, action, row in sorted(links, key=lambda link: link[0]):
            audit_append(agent_id=agent_id, action=action, row=row)
        return
    agents = sorted({agent_id for agent_id, _, _ in links})
    AuditHead.objects.bulk_create(
        [AuditHead(agent_id=agent_id, seq=0, hash=GENESIS, prev_hash=GENESIS) for agent_id in agents],
        ignore_conflicts=True,
    )
    heads = {
        agent_id: (seq, hash_)
        for agent_id, seq, hash_ in AuditHead.objects.select_for_update()
        .filter(agent_id__in=agents)
        .order_by("agent_id")
        .values_list("agent_id", "seq", "hash")
    }
    now = timezone.now()
    entries = []
    for agent_id, action, row in sorted(links, key=lambda link: link[0]):
        link = _link(agent_id=agent_id, action=action, row=row, source=None)
        seq, prev = heads[agent_id]
        new = entry_hash(agent_id=agent_id, seq=seq + 1, tail=link["tail"], prev_hash=prev)
        entries.append(
            AuditEntry(
                agent_id=agent_id, seq=seq + 1, action=action, tool_call_id=link["tool_call"], event_id=link["event"],
                content_hash=link["content"], prev_hash=prev, entry_hash=new, created_at=now,
            )
        )  # fmt: skip
        heads[agent_id] = (seq + 1, new)
    AuditEntry.objects.bulk_create(entries)
    _count_appended({"tool_call": entry.tool_call_id} for entry in entries)
    last = {entry.agent_id: entry for entry in entries}
    AuditHead.objects.bulk_update(
        [AuditHead(agent_id=a, seq=e.seq, hash=e.entry_hash, prev_hash=e.prev_hash) for a, e in last.items()],
        ["seq", "hash", "prev_hash"],
    )


def _append_here(link: dict[str, Any]) -> None:
    """The append done step by step (SQLite, whose IMMEDIATE transactions serialise writers)."""
    agent_id = link["agent"]
    head = AuditHead.objects.select_for_update().filter(agent_id=agent_id).values_list("seq", "hash").first()
    seq, prev = (head[0] + 1, head[1]) if head else (1, GENESIS)
    new = entry_hash(agent_id=agent_id, seq=seq, tail=link["tail"], prev_hash=prev)
    if head:
        AuditHead.objects.filter(agent_id=agent_id).update(seq=seq, hash=new, prev_hash=prev)
    else:
        AuditHead.objects.create(agent_id=agent_id, seq=seq, hash=new, prev_hash=prev)
    AuditEntry.objects.create(
        agent_id=agent_id,
        seq=seq,
        action=link["action"],
        tool_call_id=link["tool_call"],
        event_id=link["event"],
        content_hash=link["content"],
        prev_hash=prev,
        entry_hash=new,
        created_at=link["now"],
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
