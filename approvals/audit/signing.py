"""What is hashed of each chained row and signed of each decision row, the audit key, and the formulas:
a decision row's MAC, a row's content hash, an entry's signature (docs/audit.md). The part both the
writers (`approvals.services.audit`) and the check (`approvals.audit.verify`) need."""

from __future__ import annotations

import datetime as dt
import functools
import hashlib
import hmac
import re
from collections.abc import Mapping
from json.encoder import encode_basestring_ascii as _string  # (C) what json.dumps makes of a str
from typing import Any

from django.conf import settings
from django.db import models

from approvals.audit.canonical_text import as_json_writes_it, canonical, with_canonical_numbers
from approvals.models import (
    ApproverResponse,
    AuditEntry,
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
    "risk",  # how risky the call is: what routes it and what approvers are shown (migration 0018)
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


def audit_key(key_id: str) -> bytes | None:
    """The audit key `key_id` (GATEWAY_AUDIT_KEY, or one of GATEWAY_AUDIT_OLD_KEYS); None if it is not configured."""
    return settings.GATEWAY_AUDIT_KEYS.get(key_id)


def _mac(key: bytes, text: str | bytes) -> str:
    mac = _keyed(key).copy()  # (a third less than `hmac.digest`, which sets the key up again each time)
    mac.update(text.encode() if isinstance(text, str) else text)
    return mac.hexdigest()


@functools.lru_cache(maxsize=16)
def _keyed(key: bytes) -> hmac.HMAC:
    """HMAC-SHA256 under `key`, set up once, before any data: each MAC is a copy of it."""
    return hmac.new(key, digestmod=hashlib.sha256)


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
    return _signs(mac, _signed_text(model, row, fields))


def told_decision_verifies(model: type, told: Mapping[str, Any]) -> bool:
    """`decision_verifies` of a decision row as JSON tells it — what a notification carries
    (`approvals.services.records.changes_notify`): its signed fields and `decision_mac` as `json.loads`
    made them, a moment as ISO 8601 text or null. A woken waiter checks its state this way, 10,000 of
    them at once: the fields' JSON text made in one call is tried first (`as_json_writes_it`) — where it
    is signed it is the canonical text —, then, if the row holds a number that call writes otherwise, the
    same with those numbers as `canonical` writes them (`with_canonical_numbers`); only a row whose text is
    still not signed (text not ASCII, a field missing or added, or altered) is made the slow way."""
    mac = told.get("decision_mac")
    row = dict(told)
    row.pop("decision_mac", None)
    try:
        for field in _moments(model):
            if field in row:
                row[field] = _moment_text(row[field])
    except (TypeError, ValueError):  # a moment that is not one
        return False
    row[_LABEL] = _SIGNED_NAME[model]
    try:
        if _signs(mac, as_json_writes_it(row)):
            return True
    except TypeError:  # (a number orjson does not write)
        pass
    # A number the one call writes otherwise (an amount of 100, an agent's id of 10, a float): written as
    # `canonical` writes it, and tried again in one call (~15 µs; the slow way ~55).
    fixed = with_canonical_numbers(row)
    if fixed is not row and _signs(mac, as_json_writes_it(fixed)):
        return True
    try:
        row = {field: row[field] for field in SIGNED[model]}
    except KeyError:  # a signed field missing
        return False
    row[_LABEL] = _SIGNED_NAME[model]
    return _signs(mac, canonical(row))


_LABEL = "signed"  # the key beside a decision row's fields that names what is signed (`_signed_text`)
# A moment in UTC as `canonical` writes it (six digits of fraction: its own canonical text) or as PostgreSQL's
# JSON writes it (the fraction's trailing zeros dropped, none at all on a whole second): padded back to six
# digits, the canonical text of the same moment.
_UTC_MOMENT = re.compile(r"([0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2})(?:\.([0-9]{1,6}))?\+00:00")


def _moment_text(value: Any) -> str | None:
    """The text `canonical` writes (without its quotes) of a moment told as ISO 8601 text; None for null."""
    if not value:
        return None
    if (utc := _UTC_MOMENT.fullmatch(value)) is not None:
        fraction = utc[2] or ""
        return value if len(fraction) == 6 else f"{utc[1]}.{fraction.ljust(6, '0')}+00:00"
    return dt.datetime.fromisoformat(value).astimezone(dt.timezone.utc).isoformat(timespec="microseconds")


@functools.cache
def _moments(model: type) -> tuple[str, ...]:
    """The signed fields of `model` that hold a moment."""
    return tuple(f for f in SIGNED[model] if isinstance(model._meta.get_field(f), models.DateTimeField))


def _signs(mac: Any, text: str | bytes) -> bool:
    """Whether `mac` (`<key id>:<HMAC>`) signs `text` under the key it names."""
    key_id, _, signature = (mac if isinstance(mac, str) else "").partition(":")
    key = audit_key(key_id)
    try:
        return key is not None and hmac.compare_digest(signature, _mac(key, text))
    except TypeError:  # (a signature with other than ASCII in it)
        return False


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


# --------------------------------------------------------------------------- content hashes and entries


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
    key = audit_key(key_id)
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
    if entry is None or audit_key(entry["key_id"]) is None:
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
