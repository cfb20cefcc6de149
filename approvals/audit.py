"""The tamper-evident record (docs/audit.md): what a chained row says, its hashes, and the check.

Every write of a `ToolCall` and of a `ConfirmationEvent` appends one
`AuditEntry` to its agent's chain (`approvals.services.audit`). This module is
the part both the writers and the checker need — the canonical content of a
row and the two hash formulas — and the check itself, `audit_verify`, which
`python manage.py verify_audit` runs.

The check walks every chain from its start (or from the checkpoint `purge` cut
it at) and recomputes each entry; then it compares every chained row with the
latest entry about it. A row changed, removed or inserted behind the
gateway's back, and an entry changed, removed or inserted, are each named.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import decimal
import hashlib
import json
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from django.db.models import Exists, F, OuterRef, Subquery

from approvals.models import (
    Agent,
    AuditCheckpoint,
    AuditEntry,
    AuditHead,
    ConfirmationEvent,
    ToolCall,
)

GENESIS = "0" * 64  # the `prev_hash` of an agent's first entry

# What is hashed of each chained row: every column, so no change to a row goes unseen. A column
# added to a chained model must be added here, by a migration that links every existing row again
# (a `retained` entry each), or rows written before it stop verifying.
TOOL_CALL_FIELDS = (
    "id", "agent_id", "session_id", "turn_id", "tool_call_id", "tool_name", "tool_args", "user_id", "metadata",
    "decision", "reason", "decided_by_hook", "hook_decisions", "config_version", "confirmation_id",
    "idempotency_key", "request_fingerprint", "response", "created_at", "outcome", "result", "result_size",
    "duration_ms", "completed_at", "grant_id", "ran_args",
)  # fmt: skip
EVENT_FIELDS = ("id", "confirmation_id", "kind", "actor", "channel", "message", "data", "created_at")

SOURCES = {"tool_call": TOOL_CALL_FIELDS, "event": EVENT_FIELDS}


# --------------------------------------------------------------------------- canonical content and hashes


def canonical(value: Any) -> str:
    """`value` as one canonical JSON text: keys sorted, no spaces, ASCII, and numbers as
    normalised decimals — so a row hashes the same before it is stored and after
    PostgreSQL's jsonb has rewritten its numbers (`1e20` comes back as `100000000000000000000`)."""
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, (int, float, decimal.Decimal)):
        return _number(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, dt.datetime):
        return json.dumps(value.astimezone(dt.timezone.utc).isoformat(timespec="microseconds"))
    if isinstance(value, uuid.UUID):
        return json.dumps(str(value))
    if isinstance(value, Mapping):
        items = sorted((_key(k), v) for k, v in value.items())
        return "{" + ",".join(json.dumps(k) + ":" + canonical(v) for k, v in items) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(canonical(v) for v in value) + "]"
    raise TypeError(f"cannot hash a {type(value).__name__}")


def _key(key: Any) -> str:
    """A mapping key as JSON makes it (what the stored row will have)."""
    if isinstance(key, str):
        return key
    return json.dumps(key)  # True -> "true", 1 -> "1", None -> "null", as json.dumps does for keys


def _number(value: int | float | decimal.Decimal) -> str:
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            return json.dumps(repr(value))
        number = decimal.Decimal(repr(value))
    else:
        number = decimal.Decimal(value)
    if number.is_zero():
        return "0"
    digits = len(number.as_tuple().digits)
    return str(number.normalize(decimal.Context(prec=max(28, digits))))


def content_of(source: str, row: Any) -> dict[str, Any]:
    """The hashed fields of a row (a model instance or a `values()` dict)."""
    fields = SOURCES[source]
    if isinstance(row, Mapping):
        return {f: row[f] for f in fields}
    return {f: getattr(row, f) for f in fields}


def content_hash(source: str, row: Any) -> str:
    """SHA-256 of what a chained row says now."""
    text = canonical({"source": source, **content_of(source, row)})
    return hashlib.sha256(text.encode()).hexdigest()


def entry_tail(*, action: str, source: str, source_id: Any, content: str) -> str:
    """The part of an entry's hashed text known before its place in the chain."""
    return f"{action}|{source}|{source_id}|{content}"


def entry_hash(*, agent_id: int, seq: int, tail: str, prev_hash: str) -> str:
    """SHA-256 of `agent|seq|action|source|source id|content hash|previous hash`.

    `approvals.services.audit` computes the same text inside PostgreSQL, where
    the sequence number and the previous hash are known; keep the two in step.
    """
    return hashlib.sha256(f"{agent_id}|{seq}|{tail}|{prev_hash}".encode()).hexdigest()


def entry_source(entry: AuditEntry | Mapping[str, Any]) -> tuple[str, Any]:
    """(source, id) of the row an entry is about."""
    get = entry.get if isinstance(entry, Mapping) else lambda f: getattr(entry, f)
    if get("tool_call_id") is not None:
        return "tool_call", get("tool_call_id")
    return "event", get("event_id")


# --------------------------------------------------------------------------- the check


@dataclasses.dataclass(frozen=True, order=True)
class Problem:
    """One thing the check found, placed in its chain (`agent`, `seq`) so the first can be named."""

    agent_id: int
    seq: int
    message: str


@dataclasses.dataclass
class Verification:
    chains: int = 0
    entries: int = 0
    rows: int = 0
    heads: dict[str, tuple[int, str]] = dataclasses.field(default_factory=dict)  # agent name -> (seq, hash)
    problems: list[Problem] = dataclasses.field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def first(self) -> Problem | None:
        return min(self.problems) if self.problems else None


def audit_verify(
    *,
    since: dt.datetime | None = None,
    agent: Agent | None = None,
    progress: Callable[[str], None] | None = None,
) -> Verification:
    """Walk every chain and check every chained row; return what was found (`ok`, `problems`).

    `since` checks only entries written since then (the chain is taken as it
    was at the last entry before) and the rows they, or rows created since,
    are about. Streams: memory stays flat however long the chains are.
    """
    result = Verification()
    agents = Agent.objects.order_by("pk")
    if agent is not None:
        agents = agents.filter(pk=agent.pk)
    names = dict(agents.values_list("pk", "name"))

    for agent_id, name in names.items():
        if _walk_chain(agent_id, name, since, result):
            result.chains += 1
        if progress:
            progress(f"chain of {name}: checked")
    _check_rows(names, since, result)
    return result


def _walk_chain(agent_id: int, name: str, since: dt.datetime | None, result: Verification) -> bool:
    """Recompute one agent's chain; False if the agent has none."""
    checkpoint = AuditCheckpoint.objects.filter(agent_id=agent_id).order_by("-seq").first()
    head = AuditHead.objects.filter(agent_id=agent_id).first()
    seq, prev = (checkpoint.seq, checkpoint.hash) if checkpoint else (0, GENESIS)
    where = f"agent {name}"
    entries = AuditEntry.objects.filter(agent_id=agent_id, seq__gt=seq)
    if since is not None:
        before = entries.filter(created_at__lt=since).order_by("-seq").values_list("seq", "entry_hash").first()
        if before is not None:
            seq, prev = before
            entries = entries.filter(seq__gt=seq)
    found = False
    fields = ("seq", "action", "tool_call_id", "event_id", "content_hash", "prev_hash", "entry_hash")
    for entry in entries.order_by("seq").values(*fields).iterator(chunk_size=2000):
        found = True
        result.entries += 1
        number = entry["seq"]
        if number != seq + 1:
            missing = f"#{seq + 1}" if number == seq + 2 else f"#{seq + 1}…#{number - 1}"
            result.problems.append(Problem(agent_id, seq + 1, f"{where}: entry {missing} was removed"))
        elif entry["prev_hash"] != prev:
            result.problems.append(
                Problem(agent_id, number, f"{where}: entry #{number} does not follow the entry before it "
                                          "(an entry was changed, removed or inserted there)")  # fmt: skip
            )
        source, source_id = entry_source(entry)
        tail = entry_tail(action=entry["action"], source=source, source_id=source_id, content=entry["content_hash"])
        if entry_hash(agent_id=agent_id, seq=number, tail=tail, prev_hash=entry["prev_hash"]) != entry["entry_hash"]:
            result.problems.append(Problem(agent_id, number, f"{where}: entry #{number} was changed"))
        seq, prev = number, entry["entry_hash"]
    if head is None:
        if found or checkpoint is not None:
            result.problems.append(Problem(agent_id, seq + 1, f"{where}: the chain's head is missing"))
        return found
    if head.seq > seq:
        missing = f"#{seq + 1}" if head.seq == seq + 1 else f"#{seq + 1}…#{head.seq}"
        result.problems.append(Problem(agent_id, seq + 1, f"{where}: entry {missing} was removed (the head is #{head.seq})"))
    elif head.seq < seq or head.hash != prev:
        result.problems.append(
            Problem(agent_id, seq, f"{where}: entry #{seq} is not the head the gateway wrote (#{head.seq}): "
                                   "entries were inserted or changed at the end")  # fmt: skip
        )
    result.heads[name] = (head.seq, head.hash)
    return True


def _check_rows(names: dict[int, str], since: dt.datetime | None, result: Verification) -> None:
    """Every chained row against the latest entry about it; entries about rows that are gone."""
    for source, model, agent_field, label in (
        ("tool_call", ToolCall, "agent_id", "tool call"),
        ("event", ConfirmationEvent, "confirmation__agent_id", "event"),
    ):
        link = {"tool_call": "tool_call_id", "event": "event_id"}[source]
        latest = AuditEntry.objects.filter(**{link: OuterRef("pk")}).order_by("-seq")
        rows = model.objects.filter(**{f"{agent_field}__in": list(names)}).annotate(
            audit_agent=Subquery(latest.values("agent_id")[:1]),
            audit_seq=Subquery(latest.values("seq")[:1]),
            audit_hash=Subquery(latest.values("content_hash")[:1]),
            audit_at=Subquery(latest.values("created_at")[:1]),
            chain_agent=_agent_of(source),
        )
        for row in rows.values(*SOURCES[source], "audit_agent", "audit_seq", "audit_hash", "audit_at", "chain_agent").iterator(
            chunk_size=2000
        ):
            if since is not None and row["created_at"] < since and (row["audit_at"] is None or row["audit_at"] < since):
                continue
            result.rows += 1
            where = f"agent {names.get(row['chain_agent'], row['chain_agent'])}"
            if row["audit_seq"] is None:
                result.problems.append(
                    Problem(row["chain_agent"], _after_head(row["chain_agent"]),
                            f"{where}: {label} {row['id']} has no audit entry (inserted behind the gateway's back)")
                )  # fmt: skip
            elif content_hash(source, row) != row["audit_hash"]:
                result.problems.append(
                    Problem(row["audit_agent"], row["audit_seq"],
                            f"{where}: {label} {row['id']} was changed after entry #{row['audit_seq']} recorded it")
                )  # fmt: skip
        gone = (
            AuditEntry.objects.filter(**{f"{link}__isnull": False, "agent_id__in": list(names)})
            .annotate(present=Exists(model.objects.filter(pk=OuterRef(link))))
            .filter(present=False)
        )
        if since is not None:
            gone = gone.filter(created_at__gte=since)
        reported: set[Any] = set()
        for entry in gone.order_by("agent_id", "seq").values("agent_id", "seq", link).iterator(chunk_size=2000):
            if entry[link] in reported:
                continue
            reported.add(entry[link])
            result.problems.append(
                Problem(entry["agent_id"], entry["seq"],
                        f"agent {names.get(entry['agent_id'])}: {label} {entry[link]} recorded by entry "
                        f"#{entry['seq']} was removed")
            )  # fmt: skip


def _agent_of(source: str) -> Any:
    return F("agent_id") if source == "tool_call" else F("confirmation__agent_id")


def _after_head(agent_id: int) -> int:
    """Where a row with no entry is placed among the problems: after everything the chain holds."""
    head = AuditHead.objects.filter(agent_id=agent_id).values_list("seq", flat=True).first()
    return (head or 0) + 1

