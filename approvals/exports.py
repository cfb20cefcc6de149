"""The audit record as a file: JSON Lines or CSV, streamed (docs/audit.md).

One record per tool call, the same document `describe_toolcall --json`
prints (`selectors.tool_call_record`): what was asked, every hook's decision
with the config version, who decided (the approval, its responses and
events), what ran, plus `audit` — the seq and entry hash of the latest chain
entry about the call, to check the file against `verify_audit`'s heads.

Rows are read with a server-side cursor in chunks (`iterator(chunk_size=…)`,
each chunk's related rows fetched with it), and written as they come: memory
stays flat however large the export. `python manage.py export_audit` and the
admin's export buttons both use `export_lines`.

CSV cells are guarded against formula injection (OWASP, "CSV Injection"): a
cell whose first character is `=`, `+`, `-`, `@`, a tab or a carriage return
— or a `'`, so that the rule can be undone exactly — gets a `'` in front.
Spreadsheets then show it as text; `csv_unguard` gives the value back.
(`defusedcsv` does not guard tabs and carriage returns and rewrites `|`, which
could not be undone.)
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import itertools
import json
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from typing import Any

from asgiref.sync import sync_to_async
from django.db.models import OuterRef, Prefetch, QuerySet, Subquery

from approvals import selectors
from approvals.models import ApproverResponse, AuditEntry, ConfirmationEvent, ToolCall

FORMATS = ("jsonl", "csv")
CHUNK = 500
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r", "'")

# (column, where in the record, JSON-encoded?). Text columns write None as an empty cell.
CSV_COLUMNS: tuple[tuple[str, Callable[[dict[str, Any]], Any], bool], ...] = (
    ("id", lambda r: r["id"], False),
    ("agent", lambda r: r["agent"], False),
    ("created_at", lambda r: r["created_at"], False),
    ("session_id", lambda r: r["session_id"], False),
    ("turn_id", lambda r: r["turn_id"], False),
    ("tool_call_id", lambda r: r["tool_call_id"], False),
    ("user_id", lambda r: r["user_id"], False),
    ("tool_name", lambda r: r["tool_name"], False),
    ("tool_args", lambda r: r["tool_args"], True),
    ("metadata", lambda r: r["metadata"], True),
    ("idempotency_key", lambda r: r["idempotency_key"], False),
    ("decision", lambda r: r["decision"], False),
    ("reason", lambda r: r["reason"], False),
    ("decided_by_hook", lambda r: r["decided_by_hook"], False),
    ("config_version", lambda r: r["config_version"], True),
    ("hook_decisions", lambda r: r["hook_decisions"], True),
    ("approval_id", lambda r: (r["approval"] or {}).get("id"), False),
    ("approval_status", lambda r: (r["approval"] or {}).get("status"), False),
    ("approval_decided_by", lambda r: (r["approval"] or {}).get("decided_by"), False),
    ("approval_decided_at", lambda r: (r["approval"] or {}).get("decided_at"), False),
    ("approval_decision_reason", lambda r: (r["approval"] or {}).get("decision_reason"), False),
    ("approval", lambda r: r["approval"], True),
    ("outcome", lambda r: r["outcome"], False),
    ("result", lambda r: r["result"], True),
    ("result_size", lambda r: r["result_size"], True),
    ("duration_ms", lambda r: r["duration_ms"], True),
    ("completed_at", lambda r: r["completed_at"], False),
    ("audit_seq", lambda r: r["audit"]["seq"], True),
    ("audit_entry_hash", lambda r: r["audit"]["entry_hash"], False),
)
CSV_HEADER = tuple(name for name, _, _ in CSV_COLUMNS)


def csv_guard(cell: str) -> str:
    """A cell a spreadsheet will not run: `'` in front of one that starts like a formula (or with `'`)."""
    return "'" + cell if cell.startswith(FORMULA_STARTS) else cell


def csv_unguard(cell: str) -> str:
    """The value `csv_guard` was given."""
    return cell[1:] if cell.startswith("'") else cell


def csv_cells(record: dict[str, Any]) -> list[str]:
    """One record as its CSV row, before guarding: text columns as text, the others as JSON."""
    cells = []
    for _, get, as_json in CSV_COLUMNS:
        value = get(record)
        if as_json:
            cells.append(json.dumps(value, ensure_ascii=False, sort_keys=True, default=str))
        else:
            cells.append("" if value is None else str(value))
    return cells


def csv_row_values(row: dict[str, str]) -> dict[str, Any]:
    """A row read back from an exported CSV (`csv.DictReader`): cells unguarded, JSON columns decoded."""
    values = {}
    for name, _, as_json in CSV_COLUMNS:
        cell = csv_unguard(row[name])
        values[name] = json.loads(cell) if as_json else cell
    return values


def audit_records(queryset: QuerySet[ToolCall] | None = None) -> Iterator[dict[str, Any]]:
    """Each tool call of `queryset` (default: all) as its audit record, oldest first, streamed."""
    queryset = ToolCall.objects.all() if queryset is None else queryset
    latest = AuditEntry.objects.filter(tool_call_id=OuterRef("pk")).order_by("-seq")
    rows = (
        queryset.select_related("agent", "confirmation", "confirmation__channel", "grant")
        .prefetch_related(
            "confirmation__grants",
            Prefetch("confirmation__responses", queryset=ApproverResponse.objects.order_by("created_at", "id")),
            Prefetch("confirmation__events", queryset=ConfirmationEvent.objects.order_by("created_at", "id")),
        )
        .annotate(audit_seq=Subquery(latest.values("seq")[:1]), audit_hash=Subquery(latest.values("entry_hash")[:1]))
        .order_by("created_at", "id")
    )
    for call in rows.iterator(chunk_size=CHUNK):
        record = selectors.tool_call_record(call)
        record["audit"] = {"seq": call.audit_seq, "entry_hash": call.audit_hash}
        yield record


def filtered_tool_calls(
    *, since: dt.datetime | None = None, agent: Any = None, team: Any = None
) -> QuerySet[ToolCall]:
    """The tool calls `export_audit --since --agent --team` names."""
    queryset = ToolCall.objects.all()
    if team is not None:
        queryset = queryset.filter(agent__team=team)
    if since is not None:
        queryset = queryset.filter(created_at__gte=since)
    if agent is not None:
        queryset = queryset.filter(agent=agent)
    return queryset


def export_lines(records: Iterable[dict[str, Any]], fmt: str) -> Iterator[str]:
    """The file, piece by piece: one JSON object per line, or a CSV header and one guarded row per record."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}; one of {', '.join(FORMATS)}")
    if fmt == "jsonl":
        for record in records:
            yield json.dumps(record, ensure_ascii=False, sort_keys=True, default=str) + "\n"
        return
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\r\n")

    def line(cells: Iterable[str]) -> str:
        writer.writerow([csv_guard(cell) for cell in cells])
        text = buffer.getvalue()
        buffer.seek(0)
        buffer.truncate()
        return text

    yield line(CSV_HEADER)
    for record in records:
        yield line(csv_cells(record))


async def export_lines_async(lines: Iterator[str], *, batch: int = 200) -> AsyncIterator[str]:
    """`lines` for an ASGI response, a batch at a time: Django would read a plain iterator into a
    list first. Each batch is read in Django's one thread for sync code, so the server-side cursor
    (and its connection) stay the same from the first batch to the last."""

    def take() -> list[str]:
        return list(itertools.islice(lines, batch))

    while chunk := await sync_to_async(take, thread_sensitive=True)():
        for line in chunk:
            yield line


CONTENT_TYPES = {"jsonl": "application/x-ndjson; charset=utf-8", "csv": "text/csv; charset=utf-8"}
