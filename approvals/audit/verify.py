"""The check (docs/audit.md), which `python manage.py verify_audit` runs: `audit_verify`.

It walks every chain from its start (or from the checkpoint `purge` cut
it at) and recomputes each entry; then it compares every chained row with the
latest entry about it, checks every decision row's MAC, and — given heads
recorded outside the database (`expected_heads`) — that the chain still
reaches them. A row changed, removed or inserted behind the gateway's back, and
an entry changed, removed or inserted, are each named.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hmac
from collections.abc import Callable
from typing import Any

from django.db.models import Exists, F, OuterRef, Q, Subquery

from approvals.audit.heads import ExpectedHead
from approvals.audit.signing import (
    GENESIS,
    LINKS,
    SIGNED,
    SOURCES,
    audit_key,
    content_hash,
    decision_verifies,
    entry_hash,
    entry_source,
    entry_tail,
)
from approvals.models import (
    Agent,
    ApproverResponse,
    AuditCheckpoint,
    AuditEntry,
    AuditHead,
    ConfirmationEvent,
    ConfirmationRequest,
    Grant,
    ToolCall,
)


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
    expected_heads: list[ExpectedHead] | None = None,
) -> Verification:
    """Walk every chain and check every chained row and every decision row; return what was found
    (`ok`, `problems`).

    `since` checks only entries written since then (the chain is taken as it
    was at the last entry before) and the rows they, or rows created since,
    are about. `expected_heads`: heads recorded earlier outside the database
    (`export_audit --heads`, the beat checkpoint's file): each chain must still
    hold each one, as it was — a tail cut off and the head rewound to an
    earlier entry is caught only this way. Streams: memory stays flat however
    long the chains are.
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
    _check_decisions(names, since, result)
    for expected in expected_heads or ():
        if agent is None or expected.agent == agent.name:
            _check_expected(expected, result)
    return result


def _check_expected(expected: ExpectedHead, result: Verification) -> None:
    agent_id = Agent.objects.filter(name=expected.agent).values_list("pk", flat=True).first()
    where = f"agent {expected.agent}"
    if agent_id is None:
        result.problems.append(Problem(0, 0, f"{where}: the agent of the recorded head {expected} is gone"))
        return
    entry = AuditEntry.objects.filter(agent_id=agent_id, seq=expected.seq).values_list("entry_hash", flat=True).first()
    if entry is not None:
        if entry != expected.hash:
            result.problems.append(
                Problem(agent_id, expected.seq, f"{where}: entry #{expected.seq} is not the one recorded as head "
                                                f"{expected}: the chain was rewritten up to there")  # fmt: skip
            )
        return
    checkpoint = AuditCheckpoint.objects.filter(agent_id=agent_id, seq__gte=expected.seq).order_by("seq").first()
    if checkpoint is not None:  # purged since: only a cut exactly there can be compared
        if checkpoint.seq == expected.seq and checkpoint.hash != expected.hash:
            result.problems.append(
                Problem(agent_id, expected.seq, f"{where}: the chain was cut at #{expected.seq}, but not at the "
                                                f"recorded head {expected}")  # fmt: skip
            )
        return
    last = AuditEntry.objects.filter(agent_id=agent_id).order_by("-seq").values_list("seq", flat=True).first() or 0
    missing = f"#{expected.seq}" if last + 1 == expected.seq else f"#{last + 1}…#{expected.seq}"
    result.problems.append(
        Problem(agent_id, last + 1, f"{where}: entry {missing} was removed: the chain ends at #{last}, but head "
                                    f"{expected} was recorded (the tail was cut off)")  # fmt: skip
    )


# --------------------------------------------------------------------------- decision rows


def _check_decisions(names: dict[int, str], since: dt.datetime | None, result: Verification) -> None:
    """Every decision row's MAC against its signed fields as they are now."""
    for model, agent_field, label in (
        (ConfirmationRequest, "agent_id", "confirmation request"),
        (ApproverResponse, "confirmation__agent_id", "approver response"),
        (Grant, "agent_id", "grant"),
    ):
        rows = model.objects.filter(**{f"{agent_field}__in": list(names)})
        if since is not None and model is not ApproverResponse:
            rows = rows.filter(Q(created_at__gte=since) | Q(decided_at__gte=since) if model is ConfirmationRequest
                               else Q(created_at__gte=since) | Q(revoked_at__gte=since))  # fmt: skip
        elif since is not None:
            rows = rows.filter(created_at__gte=since)
        extra = ("pk", "decision_mac", "row_agent")
        rows = rows.annotate(row_agent=F(agent_field)).values(*{*SIGNED[model], *extra})
        for row in rows.iterator(chunk_size=2000):
            result.rows += 1
            if decision_verifies(model, row):
                continue
            why = "has no signature" if not row["decision_mac"] else "does not match its signature"
            result.problems.append(
                Problem(row["row_agent"], _after_head(row["row_agent"]),
                        f"agent {names.get(row['row_agent'])}: {label} {row['pk']} {why}: its deciding fields were "
                        "changed or it was inserted behind the gateway's back")
            )  # fmt: skip


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
    fields = ("seq", "action", *LINKS.values(), "content_hash", "prev_hash", "entry_hash", "key_id")
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
        if audit_key(entry["key_id"]) is None:
            result.problems.append(
                Problem(agent_id, number, f"{where}: entry #{number} is signed with audit key {entry['key_id']!r}, "
                                          "which is not configured (GATEWAY_AUDIT_OLD_KEYS)")  # fmt: skip
            )
        elif not hmac.compare_digest(
            entry_hash(agent_id=agent_id, seq=number, tail=tail, prev_hash=entry["prev_hash"], key_id=entry["key_id"]),
            entry["entry_hash"],
        ):
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
        ("request", ConfirmationRequest, "agent_id", "confirmation request"),
        ("response", ApproverResponse, "confirmation__agent_id", "approver response"),
        ("grant", Grant, "agent_id", "grant"),
    ):
        link = LINKS[source]
        latest = AuditEntry.objects.filter(**{link: OuterRef("pk")}).order_by("-seq")
        rows = model.objects.filter(**{f"{agent_field}__in": list(names)}).annotate(
            audit_agent=Subquery(latest.values("agent_id")[:1]),
            audit_seq=Subquery(latest.values("seq")[:1]),
            audit_hash=Subquery(latest.values("content_hash")[:1]),
            audit_at=Subquery(latest.values("created_at")[:1]),
            chain_agent=F(agent_field),
            row_created=F("created_at"),
        )
        for row in rows.values(
            *{*SOURCES[source], "id"}, "audit_agent", "audit_seq", "audit_hash", "audit_at", "chain_agent", "row_created"
        ).iterator(chunk_size=2000):
            if since is not None and row["row_created"] < since and (row["audit_at"] is None or row["audit_at"] < since):
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


def _after_head(agent_id: int) -> int:
    """Where a row with no entry is placed among the problems: after everything the chain holds."""
    head = AuditHead.objects.filter(agent_id=agent_id).values_list("seq", flat=True).first()
    return (head or 0) + 1
