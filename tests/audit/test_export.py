"""`export_audit` and the admin's export: the record round-trips, formula-like cells are
neutralised, large exports stream in flat memory with a progress line."""

from __future__ import annotations

import csv
import io
import json
import tracemalloc
import warnings

import httpx
import pytest
from django.conf import settings
from django.contrib.auth.models import User
from django.core.management import call_command
from django.test import Client

from approvals import selectors, services
from approvals.exports import audit_records, csv_cells, csv_guard, csv_row_values, csv_unguard, export_lines
from approvals.models import AuditEntry, ToolCall
from tests.audit.support import agents, some_history

pytestmark = pytest.mark.django_db(transaction=True)

HOSTILE = {
    "tool_name": "=cmd|' /C calc'!A0",
    "user_id": "@SUM(1+1)*cmd|' /C calc'!A0",
    "session_id": "+1+1",
    "tool_call_id": "-2+3",
    "metadata": {"note": "\t=1+1", "cr": "\r=1", "quote": "'=already quoted"},
}


def export(*args: str) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    call_command("export_audit", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


@pytest.fixture
def records():
    payer, reader = agents()
    some_history(payer)
    some_history(reader, session="s-2")
    services.tool_call_pre(agent=reader, tool_args={"x": "=HYPERLINK(\"http://evil\")"}, **HOSTILE)
    return payer, reader


def test_jsonl_round_trips_each_tool_call_as_describe_toolcall_shows_it(records):
    payer, _ = records
    text, err = export("--format", "jsonl")
    lines = [json.loads(line) for line in text.splitlines()]
    assert len(lines) == ToolCall.objects.count() == 9
    assert err.strip().endswith("export_audit: 9 records written")
    for line in lines:
        call = ToolCall.objects.get(pk=line["id"])
        expected = json.loads(json.dumps(selectors.tool_call_audit(tool_call_id=line["id"]), default=str))
        latest = AuditEntry.objects.filter(tool_call=call).order_by("-seq").first()
        assert line == {**expected, "audit": {"seq": latest.seq, "entry_hash": latest.entry_hash}}
    paid = next(line for line in lines if line["tool_name"] == "pay")
    # what was asked, every hook's decision with the config version, who decided, what ran
    assert paid["tool_args"] == {"amount": 1e20, "n": 0.1}
    assert paid["hook_decisions"][0]["config_version"] == 1 and paid["hook_decisions"][0]["hook"] == "pay-gate"
    assert paid["approval"]["decided_by"] == "web:alice" and paid["approval"]["status"] == "approved"
    assert [e["kind"] for e in paid["approval"]["events"]][:1] == ["created"]
    assert paid["outcome"] == "success" and paid["result"] == "paid"


def test_since_and_agent_narrow_the_export(records):
    payer, _ = records
    text, _ = export("--format", "jsonl", "--agent", "payer")
    assert {json.loads(line)["agent"] for line in text.splitlines()} == {"payer"}
    assert len(text.splitlines()) == 4
    text, _ = export("--format", "jsonl", "--since", "2999-01-01")
    assert text == ""


def test_csv_neutralises_formula_cells_and_round_trips(records, tmp_path):
    target = tmp_path / "audit.csv"
    export("--format", "csv", "--output", str(target))
    raw = target.read_text(encoding="utf-8")
    rows = list(csv.DictReader(io.StringIO(raw, newline="")))
    assert len(rows) == 9
    hostile = next(r for r in rows if csv_unguard(r["tool_name"]) == HOSTILE["tool_name"])
    for column in ("tool_name", "user_id", "session_id", "tool_call_id"):
        assert hostile[column] == "'" + HOSTILE[column], column  # shown as text, never run
    for row in rows:
        assert not any(cell.startswith(("=", "+", "-", "@", "\t", "\r")) for cell in row.values())
    by_id = {r["id"]: csv_row_values(r) for r in rows}
    for record in audit_records():
        header_cells = dict(zip([c for c in rows[0]], csv_cells(record), strict=True))
        values = by_id[record["id"]]
        assert values["tool_args"] == record["tool_args"] and values["metadata"] == record["metadata"]
        assert values["approval"] == json.loads(json.dumps(record["approval"]))
        assert values["tool_name"] == record["tool_name"] and values["reason"] == record["reason"]
        assert header_cells["id"] == record["id"]


def test_the_guard_is_the_documented_rule_and_undoes_exactly():
    for cell in ("=1+1", "+1", "-1", "@x", "\tx", "\rx", "'x", "'=x"):
        assert csv_guard(cell) == "'" + cell and csv_unguard(csv_guard(cell)) == cell
    for cell in ("", "plain", "1-1", " =1", "{\"a\": 1}"):
        assert csv_guard(cell) == cell and csv_unguard(cell) == cell


def test_a_large_export_streams_in_flat_memory_with_a_progress_line(transactional_db):
    payer, _ = agents()
    ToolCall.objects.bulk_create(
        ToolCall(agent=payer, session_id="bulk", tool_name="ls", tool_args={"i": i, "pad": "x" * 400}, decision="allow")
        for i in range(3000)
    )

    def peak(limit: int) -> int:
        calls = ToolCall.objects.filter(pk__in=ToolCall.objects.order_by("created_at", "id").values("pk")[:limit])
        tracemalloc.start()
        count = sum(1 for _ in export_lines(audit_records(calls), "csv"))
        size = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        assert count == limit + 1
        return size

    # Rows are read CHUNK (500) at a time: past two chunks, three times the records, not three times the memory.
    small, large = peak(1000), peak(3000)
    assert large < small * 1.2, (small, large)
    _, err = export("--format", "jsonl")
    assert "export_audit: 1000 records" in err and "export_audit: 3000 records written" in err


@pytest.fixture
def staff(transactional_db) -> User:
    return User.objects.create_superuser("olga", "olga@example.com", "pw")


def test_the_admin_exports_the_filtered_list(records, staff):
    payer, reader = records
    client = Client()
    client.force_login(staff)
    page = client.get("/admin/approvals/toolcall/", {"agent__id__exact": reader.pk})
    assert b"Export CSV" in page.content and f"agent__id__exact={reader.pk}".encode() in page.content
    response = client.get("/admin/approvals/toolcall/export/", {"agent__id__exact": reader.pk, "format": "jsonl"})
    assert response.status_code == 200 and response.streaming
    lines = [json.loads(line) for line in b"".join(response.streaming_content).decode().splitlines()]
    assert {line["agent"] for line in lines} == {"reader"} and len(lines) == 5
    assert 'filename="tool-calls-' in response["Content-Disposition"]


def test_the_admin_export_streams_through_the_asgi_server(records, staff, live_gateway):
    client = Client()
    client.force_login(staff)
    cookies = {settings.SESSION_COOKIE_NAME: client.cookies[settings.SESSION_COOKIE_NAME].value}
    with warnings.catch_warnings(record=True) as caught, httpx.Client(base_url=live_gateway.url, cookies=cookies) as http:
        warnings.simplefilter("always")
        response = http.get("/admin/approvals/toolcall/export/", params={"decision": "deny", "format": "csv"})
    # Django reads a plain iterator into one list under ASGI, and says so; ours is streamed.
    assert not [w for w in caught if "must consume synchronous iterators" in str(w.message)]
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(response.text, newline="")))
    assert [csv_unguard(r["tool_name"]) for r in rows] == ["rm"]


def test_outsiders_get_no_export(records):
    response = Client().get("/admin/approvals/toolcall/export/", {"format": "csv"})
    assert response.status_code == 302 and "/admin/login/" in response["Location"]
