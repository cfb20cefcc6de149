"""The tamper-evident record (docs/audit.md): what a chained row says, its signatures, and the check.

Every write of a `ToolCall` and of a `ConfirmationEvent` appends one
`AuditEntry` to its agent's chain (`approvals.services.audit`), signed with the
audit key (HMAC-SHA256; the key comes from the environment and is never stored
in the database). Every row that decides — a `ConfirmationRequest` (its
transitions and an approver's edits), an `ApproverResponse`, a `Grant` (and
its revocation) — carries `decision_mac`, an HMAC of the fields that decide
(`SIGNED`, one declared tuple per model), written by the service that changes
them; agents are answered only from rows whose MAC verifies
(`decision_verifies`). This module is the part both the writers and the
checker need — the canonical content of a row, the key, the signatures — and
the check itself, `audit_verify`, which `python manage.py verify_audit` runs.

The check walks every chain from its start (or from the checkpoint `purge` cut
it at) and recomputes each entry; then it compares every chained row with the
latest entry about it, checks every decision row's MAC, and — given heads
recorded outside the database (`expected_heads`) — that the chain still
reaches them. A row changed, removed or inserted behind the gateway's back, and
an entry changed, removed or inserted, are each named.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import decimal
import functools
import hashlib
import hmac
import json
import uuid
from collections.abc import Callable, Mapping
from json.encoder import encode_basestring_ascii as _string  # (C) what json.dumps makes of a str
from typing import Any

from django.conf import settings
from django.db.models import Exists, F, OuterRef, Q, Subquery

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


# What `decision_mac` signs of each decision row: the fields that decide what an agent is answered or
# whether a click may decide. ONE tuple per model: a field that comes to decide (a person, an answer)
# is added here — and signed for existing rows by a migration that calls `sign_all` — and every
# writer and reader follows. (Fields the timers move — `remind_at`, `warn_at`, `escalated_at` — and
# counters — a grant's `uses` — are not signed: changing them decides nothing.)
REQUEST_SIGNED = (
    "id", "agent_id", "session_id", "tool_name", "tool_args", "user_id", "channel_id", "approvers",
    "approvals_required", "allow_self_approval", "status", "decided_by", "decided_at", "decision_reason",
    "hook_name", "editable_paths", "edit_types", "arg_edits", "approved_args", "grant_options", "args_fingerprint",
    "turn_id", "expires_at", "on_timeout", "escalate_channel_id", "escalate_approvers", "callback_url",
    "approver_people", "escalate_approver_people", "kind", "answer_schema", "answer", "default_answer",
    "reason",  # the question's text, or why the call was gated: what the people deciding read (migration 0016)
)  # fmt: skip
RESPONSE_SIGNED = ("confirmation_id", "approver", "person", "on_behalf_of", "decision", "reason", "channel")
GRANT_SIGNED = (
    "id", "agent_id", "session_id", "user_id", "tool_name", "gate", "args_fingerprint", "scope", "minutes",
    "expires_at", "granted_by", "confirmation_id", "revoked_at",
)  # fmt: skip
# Every chained source: what is hashed of its rows (for a decision row, what its MAC signs), and the
# entry column that names the row.
SOURCES = {
    "tool_call": TOOL_CALL_FIELDS,
    "event": EVENT_FIELDS,
    "request": REQUEST_SIGNED,
    "response": ("id", *RESPONSE_SIGNED),
    "grant": GRANT_SIGNED,
}
LINKS = {
    "tool_call": "tool_call_id",
    "event": "event_id",
    "request": "confirmation_id",
    "response": "response_id",
    "grant": "grant_id",
}
SOURCE_OF: dict[type, str] = {
    ToolCall: "tool_call",
    ConfirmationEvent: "event",
    ConfirmationRequest: "request",
    ApproverResponse: "response",
    Grant: "grant",
}
SIGNED: dict[type, tuple[str, ...]] = {
    ConfirmationRequest: REQUEST_SIGNED,
    ApproverResponse: RESPONSE_SIGNED,
    Grant: GRANT_SIGNED,
}
_SIGNED_NAME = {ConfirmationRequest: "request", ApproverResponse: "response", Grant: "grant"}


# --------------------------------------------------------------------------- the audit key


def current_key_id() -> str:
    """The id of the key new entries and decision rows are signed with (GATEWAY_AUDIT_KEY)."""
    return settings.GATEWAY_AUDIT_KEY_ID


def _audit_key(key_id: str) -> bytes | None:
    return settings.GATEWAY_AUDIT_KEYS.get(key_id)


def _mac(key: bytes, text: str) -> str:
    return hmac.new(key, text.encode(), hashlib.sha256).hexdigest()


def decision_mac(model: type, row: Any, *, fields: tuple[str, ...] | None = None) -> str:
    """`<key id>:<HMAC>` of a decision row's signed fields (a model instance or a `values()` dict), under
    the current key: what the service that writes those fields stores in `decision_mac`. (`fields`: other
    than `SIGNED[model]`, for a migration that changes them.)"""
    key_id = current_key_id()
    return f"{key_id}:{_mac(settings.GATEWAY_AUDIT_KEYS[key_id], _signed_text(model, row, fields))}"


def decision_verifies(model: type, row: Any, mac: str | None = None, *, fields: tuple[str, ...] | None = None) -> bool:
    """Whether a decision row's `decision_mac` (or `mac`) signs its fields as they are, under the key it
    names (the current key or one listed in GATEWAY_AUDIT_OLD_KEYS). (`fields`: as `decision_mac`'s.)"""
    if mac is None:
        mac = row["decision_mac"] if isinstance(row, Mapping) else row.decision_mac
    key_id, _, signature = (mac or "").partition(":")
    key = _audit_key(key_id)
    return key is not None and hmac.compare_digest(signature, _mac(key, _signed_text(model, row, fields)))


def _signed_text(model: type, row: Any, fields: tuple[str, ...] | None = None) -> str:
    """`canonical({"signed": <name>, <field>: <value>, …})` of a decision row's signed fields."""
    return _record_text("signed", _SIGNED_NAME[model], fields or SIGNED[model], row)


def _record_text(label: str, name: str, fields: tuple[str, ...], row: Any) -> str:
    """`canonical({label: name, **{field: row's value}})`, with the keys' order and text worked out once
    per tuple of fields (every key is a plain field name)."""
    get = row.__getitem__ if isinstance(row, Mapping) else functools.partial(getattr, row)
    return "{" + ",".join([
        prefix + (canonical(get(field)) if field is not None else _string(name))
        for prefix, field in _record_keys(label, fields)
    ]) + "}"  # fmt: skip


@functools.cache
def _record_keys(label: str, fields: tuple[str, ...]) -> tuple[tuple[str, str | None], ...]:
    """(`"key":`, the field it holds — None for `label`), in canonical (sorted) order."""
    return tuple((_string(key) + ":", key if key in fields else None) for key in sorted({label, *fields}))


# --------------------------------------------------------------------------- canonical content and hashes


def canonical(value: Any) -> str:
    """`value` as one canonical JSON text: keys sorted, no spaces, ASCII, and numbers as
    normalised decimals — so a row hashes the same before it is stored and after
    PostgreSQL's jsonb has rewritten its numbers (`1e20` comes back as `100000000000000000000`).

    Every chained row and every decision row is hashed through here — several times per request
    created, decided or expired, and once per waiter woken — so the common types are dispatched by
    exact type first (`_EXACT`); anything else (a `str` or `int` subclass, a tuple, a Decimal) takes
    `_canonical_other`. Both give the same text for the same value."""
    write = _EXACT.get(type(value))
    return write(value) if write is not None else _canonical_other(value)


def _canonical_other(value: Any) -> str:
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, (int, float, decimal.Decimal)):
        return _number(value)
    if isinstance(value, str):
        return _string(value)
    if isinstance(value, dt.datetime):
        return _moment(value)
    if isinstance(value, uuid.UUID):
        return f'"{value}"'
    if isinstance(value, Mapping):
        return _mapping(value)
    if isinstance(value, (list, tuple)):
        return "[" + ",".join([canonical(v) for v in value]) + "]"
    raise TypeError(f"cannot hash a {type(value).__name__}")


def _mapping(value: Mapping[Any, Any]) -> str:
    keys = list(value)
    if all(type(k) is str for k in keys):  # (the common case: distinct text keys sort as themselves)
        keys.sort()
        return "{" + ",".join([_string(k) + ":" + canonical(value[k]) for k in keys]) + "}"
    items = sorted((_key(k), v) for k, v in value.items())
    return "{" + ",".join([_string(k) + ":" + canonical(v) for k, v in items]) + "}"


def _int(value: int) -> str:
    if value % 10:  # no trailing zero: normalising changes nothing (`_number` keeps every digit)
        return str(value)
    return _number(value)


def _moment(value: dt.datetime) -> str:
    return '"' + value.astimezone(dt.timezone.utc).isoformat(timespec="microseconds") + '"'


_EXACT: dict[type, Callable[[Any], str]] = {
    str: _string,
    dict: _mapping,
    list: lambda value: "[" + ",".join([canonical(v) for v in value]) + "]",
    type(None): lambda value: "null",
    bool: lambda value: "true" if value else "false",
    int: _int,
    dt.datetime: _moment,
    uuid.UUID: lambda value: f'"{value}"',
}


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


def content_hash(source: str, row: Any, *, fields: tuple[str, ...] | None = None) -> str:
    """SHA-256 of what a chained row says now (`fields`: other than `SOURCES[source]`, for a migration)."""
    text = _record_text("source", source, fields or SOURCES[source], row)
    return hashlib.sha256(text.encode()).hexdigest()


def entry_tail(*, action: str, source: str, source_id: Any, content: str) -> str:
    """The part of an entry's hashed text known before its place in the chain."""
    return f"{action}|{source}|{source_id}|{content}"


def entry_hash(*, agent_id: int, seq: int, tail: str, prev_hash: str, key_id: str) -> str:
    """HMAC-SHA256, under the audit key `key_id`, of `key id|agent|seq|action|source|source id|content
    hash|previous hash`: without the key, no one can write an entry that verifies."""
    key = _audit_key(key_id)
    if key is None:
        raise KeyError(f"audit key {key_id!r} is not configured (GATEWAY_AUDIT_KEY, GATEWAY_AUDIT_OLD_KEYS)")
    return _mac(key, f"{key_id}|{agent_id}|{seq}|{tail}|{prev_hash}")


def chained_row_verifies(source: str, row: Any) -> bool:
    """Whether a chained row (a `ToolCall`, as read) is what the latest entry about it recorded, and that
    entry is signed: what a repeat ask answers from (one indexed read)."""
    link = LINKS[source]
    row_id = row["id"] if isinstance(row, Mapping) else row.pk
    entry = (
        AuditEntry.objects.filter(**{link: row_id})
        .order_by("-seq")
        .values("agent_id", "seq", "action", "content_hash", "prev_hash", "entry_hash", "key_id")
        .first()
    )
    if entry is None or _audit_key(entry["key_id"]) is None:
        return False
    tail = entry_tail(action=entry["action"], source=source, source_id=row_id, content=entry["content_hash"])
    signed = entry_hash(agent_id=entry["agent_id"], seq=entry["seq"], tail=tail, prev_hash=entry["prev_hash"],
                        key_id=entry["key_id"])  # fmt: skip
    return hmac.compare_digest(signed, entry["entry_hash"]) and content_hash(source, row) == entry["content_hash"]


def entry_source(entry: AuditEntry | Mapping[str, Any]) -> tuple[str, Any]:
    """(source, id) of the row an entry is about."""
    get = entry.get if isinstance(entry, Mapping) else lambda f: getattr(entry, f)
    for source, link in LINKS.items():
        if get(link) is not None:
            return source, get(link)
    return "event", None


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


# --------------------------------------------------------------------------- heads kept outside the chain


@dataclasses.dataclass(frozen=True, order=True)
class ExpectedHead:
    """A chain's head as recorded outside the database: `<agent>@<seq>:<hash>`."""

    agent: str
    seq: int
    hash: str

    def __str__(self) -> str:
        return f"{self.agent}@{self.seq}:{self.hash}"

    @classmethod
    def parse(cls, text: str) -> ExpectedHead:
        name, _, rest = text.strip().rpartition("@")
        seq, _, hash_ = rest.partition(":")
        if not name or not seq.isdigit() or len(hash_) != 64 or any(c not in "0123456789abcdef" for c in hash_):
            raise ValueError(f"not a head (<agent>@<seq>:<64 hex digits>): {text!r}")
        return cls(name, int(seq), hash_)


def current_heads(agent: Agent | None = None) -> list[ExpectedHead]:
    """Every chain's head as it is now, to record outside the database."""
    heads = AuditHead.objects.filter(seq__gt=0)
    if agent is not None:
        heads = heads.filter(agent_id=agent.pk)
    names = dict(Agent.objects.values_list("pk", "name"))
    return sorted(
        ExpectedHead(names.get(agent_id, str(agent_id)), seq, hash_)
        for agent_id, seq, hash_ in heads.values_list("agent_id", "seq", "hash")
    )


def heads_line(heads: list[ExpectedHead]) -> str:
    """One JSON line of heads, as `verify_audit --expect-head FILE` reads them."""
    return json.dumps({"at": dt.datetime.now(dt.timezone.utc).isoformat(), "heads": [str(h) for h in heads]})


def heads_from_text(text: str) -> list[ExpectedHead]:
    """Heads from a file of them: `<agent>@<seq>:<hash>` tokens, or JSON lines with a `heads` list of
    them (what the beat checkpoint and `export_audit --heads` write)."""
    found = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("{"):
            found += [ExpectedHead.parse(h) for h in json.loads(line).get("heads", [])]
        else:
            found += [ExpectedHead.parse(token) for token in line.split()]
    return found


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
        if _audit_key(entry["key_id"]) is None:
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



# --------------------------------------------------------------------------- signing what is there (migrations)


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


def sign_decisions(apps: Any = None, *, only_valid: bool = False) -> int:
    """Sign every decision row under the current key (migration 0011 for rows from before MACs; after a
    key rotation, `only_valid` re-signs only rows whose MAC verifies under the old keys — a row that did
    not verify stays unverifiable). Returns the rows signed."""
    signed = 0
    for model in SIGNED:
        table = apps.get_model("approvals", model.__name__) if apps is not None else model
        batch = []
        for row in table.objects.order_by("pk").iterator(chunk_size=2000):
            if only_valid and not decision_verifies(model, row):
                continue
            row.decision_mac = decision_mac(model, row)
            batch.append(row)
            if len(batch) >= 2000:
                table.objects.bulk_update(batch, ["decision_mac"])
                signed += len(batch)
                batch = []
        table.objects.bulk_update(batch, ["decision_mac"])
        signed += len(batch)
    return signed


def link_decisions(apps: Any = None) -> int:
    """Link every decision row as it is into its agent's chain (`recorded` entries; migration 0011, for
    rows from before decision rows were chained). Returns the rows linked."""
    get = apps.get_model if apps is not None else None
    entries_model = get("approvals", "AuditEntry") if get else AuditEntry
    heads_model = get("approvals", "AuditHead") if get else AuditHead
    linked = 0
    for model, agent_field in ((ConfirmationRequest, "agent_id"), (ApproverResponse, "confirmation__agent_id"),
                               (Grant, "agent_id")):  # fmt: skip
        source = SOURCE_OF[model]
        table = get("approvals", model.__name__) if get else model
        for row in table.objects.annotate(chain_agent=F(agent_field)).order_by("pk").values(*{*SOURCES[source], "id"}, "chain_agent"):
            agent_id = row["chain_agent"]
            head = heads_model.objects.filter(agent_id=agent_id).first()
            seq, prev = (head.seq, head.hash) if head else (0, GENESIS)
            content = content_hash(source, row)
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
