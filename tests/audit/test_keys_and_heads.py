"""The chain resists its keeper (docs/audit.md): entries are signed with a key the database never
sees, so a chain rewritten without it does not verify; a tail cut off and the head rewound is caught
against a head recorded outside the database (`--expect-head`: `export_audit --heads`, the beat
checkpoint); keys rotate; the gateway refuses to run on the published development key."""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.management import call_command
from django.db import connection
from django.test import override_settings

from approvals import tasks
from approvals.audit import entry_source, entry_tail
from approvals.models import AuditEntry, AuditHead, ToolCall
from tests.audit.support import agents, some_history, verify, verify_fails

pytestmark = pytest.mark.django_db(transaction=True)

ROOT = Path(__file__).resolve().parents[2]
NEW_KEY = ("k-2027", b"the next audit key, thirty-two characters or more")


def sql(statement: str, params: list | None = None) -> int:
    with connection.cursor() as cursor:
        cursor.execute(statement, params or [])
        return cursor.rowcount


@pytest.fixture
def payer():
    payer, _ = agents()
    some_history(payer)
    return payer


def cut_tail(agent) -> int:
    """Delete the last entries of the chain and the rows they recorded (as many as it takes for no row
    to have entries on both sides of the cut), and rewind the head: a consistent chain, only shorter.
    Returns the seq it now ends at."""
    entries = list(AuditEntry.objects.filter(agent=agent).order_by("seq").values_list("seq", "tool_call_id", "event_id"))
    keep = len(entries) - 1
    while keep > 0:
        before = {(c, e) for _, c, e in entries[:keep]}
        after = {(c, e) for _, c, e in entries[keep:]}
        if not before & after:
            break
        keep -= 1
    cut = entries[keep:]
    calls = [str(c) for _, c, _ in cut if c]
    sql("DELETE FROM approvals_auditentry WHERE agent_id = %s AND seq > %s", [agent.pk, keep])
    sql("DELETE FROM approvals_confirmationevent WHERE id = ANY(%s)", [[e for _, _, e in cut if e]])
    sql("DELETE FROM approvals_toolcall WHERE id = ANY(%s::uuid[])", [calls])
    kept = AuditEntry.objects.get(agent=agent, seq=keep)
    sql("UPDATE approvals_audithead SET seq = %s, hash = %s, prev_hash = %s WHERE agent_id = %s",
        [keep, kept.entry_hash, kept.prev_hash, agent.pk])  # fmt: skip
    return keep


def test_a_truncated_tail_passes_alone_and_fails_against_the_head_export_audit_recorded(payer, tmp_path):
    heads_file = tmp_path / "heads.jsonl"
    err = io.StringIO()
    call_command("export_audit", "--format", "jsonl", "--heads", str(heads_file), stdout=io.StringIO(), stderr=err)
    head = AuditHead.objects.get(agent=payer)
    token = f"payer@{head.seq}:{head.hash}"
    assert f"chain head {token}" in err.getvalue()
    assert token in json.loads(heads_file.read_text().splitlines()[-1])["heads"]
    assert "audit verified" in verify("--expect-head", token, "--expect-head", str(heads_file))

    keep = cut_tail(payer)

    # What the database holds is a consistent, shorter chain: on its own it verifies (nothing can tell).
    assert "audit verified" in verify()
    message = verify_fails("--expect-head", token)
    removed = f"#{keep + 1}" if keep + 1 == head.seq else f"#{keep + 1}…#{head.seq}"
    assert f"agent payer: entry {removed} was removed: the chain ends at #{keep}" in message
    assert "the tail was cut off" in verify_fails("--expect-head", str(heads_file))


def test_the_beat_checkpoint_records_heads_outside_the_database_and_catches_a_rewound_head(payer, settings, tmp_path):
    settings.GATEWAY_AUDIT_HEADS_FILE = str(tmp_path / "audit-heads.jsonl")
    assert tasks.audit_checkpoint.apply().get() == 1
    recorded = Path(settings.GATEWAY_AUDIT_HEADS_FILE).read_text()
    head = AuditHead.objects.get(agent=payer)
    assert f"payer@{head.seq}:{head.hash}" in recorded

    cut_tail(payer)
    assert "audit verified" in verify()
    assert "the tail was cut off" in verify_fails("--expect-head", settings.GATEWAY_AUDIT_HEADS_FILE)


def test_a_recorded_head_the_chain_was_rewritten_under_is_named(payer):
    head = AuditHead.objects.get(agent=payer)
    token = f"payer@{head.seq}:{'0' * 64}"
    assert f"entry #{head.seq} is not the one recorded as head {token}" in verify_fails("--expect-head", token)
    with pytest.raises(Exception, match="not a head"):
        verify("--expect-head", "payer@x:y")


def rewrite_chain(agent, sign) -> None:
    """Recompute every entry and the head the way the keeper of the database could: with `sign`."""
    prev = "0" * 64
    for entry in AuditEntry.objects.filter(agent=agent).order_by("seq"):
        source, source_id = entry_source(entry)
        tail = entry_tail(action=entry.action, source=source, source_id=source_id, content=entry.content_hash)
        new = sign(f"{entry.key_id}|{agent.pk}|{entry.seq}|{tail}|{prev}")
        sql("UPDATE approvals_auditentry SET prev_hash = %s, entry_hash = %s WHERE id = %s", [prev, new, entry.pk])
        prev, last = new, entry
    sql("UPDATE approvals_audithead SET hash = %s, prev_hash = %s WHERE agent_id = %s", [prev, last.prev_hash, agent.pk])


def test_without_the_key_a_call_removed_and_the_chain_relinked_does_not_verify(payer):
    """The keeper of the database removes a denied call and links the chain again, consistently — but
    without the key: with plain SHA-256, or with a key of their own."""
    denied = ToolCall.objects.get(agent=payer, tool_name="rm")
    for entry in AuditEntry.objects.filter(tool_call=denied):
        sql("DELETE FROM approvals_auditentry WHERE id = %s", [entry.pk])
        sql("UPDATE approvals_auditentry SET seq = seq + 1000000 WHERE agent_id = %s AND seq > %s", [payer.pk, entry.seq])
        sql("UPDATE approvals_auditentry SET seq = seq - 1000001 WHERE agent_id = %s AND seq > 1000000", [payer.pk])
    sql("DELETE FROM approvals_toolcall WHERE id = %s", [denied.pk])
    sql("UPDATE approvals_audithead SET seq = seq - 1 WHERE agent_id = %s", [payer.pk])

    rewrite_chain(payer, lambda text: hashlib.sha256(text.encode()).hexdigest())
    assert "agent payer: entry #1 was changed" in verify_fails()
    import hmac

    rewrite_chain(payer, lambda text: hmac.new(b"a key of my own", text.encode(), hashlib.sha256).hexdigest())
    assert "agent payer: entry #1 was changed" in verify_fails()


def test_keys_rotate_old_entries_verify_while_their_key_is_listed_and_resign_moves_them(payer, settings):
    old_id = settings.GATEWAY_AUDIT_KEY_ID
    old = {old_id: settings.GATEWAY_AUDIT_KEYS[old_id]}
    with override_settings(GATEWAY_AUDIT_KEY_ID=NEW_KEY[0], GATEWAY_AUDIT_KEYS={NEW_KEY[0]: NEW_KEY[1], **old}):
        some_history(payer, session="s-new")  # new entries under the new key, after the old ones
        assert set(AuditEntry.objects.values_list("key_id", flat=True)) == {old_id, NEW_KEY[0]}
        assert "audit verified" in verify()
    with override_settings(GATEWAY_AUDIT_KEY_ID=NEW_KEY[0], GATEWAY_AUDIT_KEYS={NEW_KEY[0]: NEW_KEY[1]}):
        message = verify_fails()  # the old key dropped too early
        assert f"is signed with audit key {old_id!r}, which is not configured" in message
    with override_settings(GATEWAY_AUDIT_KEY_ID=NEW_KEY[0], GATEWAY_AUDIT_KEYS={NEW_KEY[0]: NEW_KEY[1], **old}):
        assert "signed again under the current key" in verify("--resign")
    with override_settings(GATEWAY_AUDIT_KEY_ID=NEW_KEY[0], GATEWAY_AUDIT_KEYS={NEW_KEY[0]: NEW_KEY[1]}):
        assert set(AuditEntry.objects.values_list("key_id", flat=True)) == {NEW_KEY[0]}
        assert "audit verified" in verify()  # the old key is no longer needed
        some_history(payer, session="s-after")
        assert "audit verified" in verify()


def test_resign_refuses_what_does_not_verify(payer):
    sql("UPDATE approvals_toolcall SET decision = 'allow' WHERE tool_name = 'rm'")
    assert "does not verify" in verify_fails("--resign")


def manage(*args: str, **env: str) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("GATEWAY_AUDIT") and k != "GATEWAY_ALLOW_DEV_AUDIT_KEY"}
    clean.update(DJANGO_SETTINGS_MODULE="gateway.settings", **env)
    return subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=clean, capture_output=True, text=True, timeout=120)


def test_the_gateway_refuses_to_start_on_the_development_key_unless_told_it_is_development():
    refused = manage("check")
    assert refused.returncode != 0
    assert "approvals.E001" in refused.stderr and "GATEWAY_AUDIT_KEY is not set" in refused.stderr
    assert manage("check", GATEWAY_ALLOW_DEV_AUDIT_KEY="1").returncode == 0  # `make run`
    assert manage("check", GATEWAY_AUDIT_KEY="prod-1:" + "s" * 40).returncode == 0
    short = manage("check", GATEWAY_AUDIT_KEY="prod-1:short")
    assert short.returncode != 0 and "at least 32 characters" in short.stderr
    # The server itself refuses too, not only `manage.py check`.
    server = subprocess.run(
        [sys.executable, "-c", "import gateway.asgi"], cwd=ROOT, capture_output=True, text=True, timeout=120,
        env={**{k: v for k, v in os.environ.items() if not k.startswith("GATEWAY_AUDIT")},
             "DJANGO_SETTINGS_MODULE": "gateway.settings", "GATEWAY_ALLOW_DEV_AUDIT_KEY": "0"},
    )  # fmt: skip
    assert server.returncode != 0 and "GATEWAY_AUDIT_KEY is not set" in server.stderr


def test_the_migration_signs_an_unkeyed_chain_and_unsigned_decision_rows_as_they_are(payer):
    """What 0015_keyed_audit finds: chains hashed with plain SHA-256 (no key id), decision rows without a
    MAC and without entries. After it and the migrations that sign more of a request after it (0016, 0018:
    the upgrade path), everything verifies under the key, and a change is still named."""
    from django.apps import apps

    from approvals.models import ConfirmationRequest

    migration = __import__("importlib").import_module("approvals.migrations.0015_keyed_audit")
    sql("DELETE FROM approvals_auditentry WHERE action = 'recorded'")
    sql("UPDATE approvals_auditentry e SET seq = r.n + 1000000 FROM (SELECT id, row_number() OVER (ORDER BY seq) AS n "
        "FROM approvals_auditentry WHERE agent_id = %s) r WHERE e.id = r.id", [payer.pk])  # fmt: skip
    sql("UPDATE approvals_auditentry SET seq = seq - 1000000 WHERE agent_id = %s", [payer.pk])
    sql("UPDATE approvals_audithead SET seq = (SELECT count(*) FROM approvals_auditentry WHERE agent_id = %s) "
        "WHERE agent_id = %s", [payer.pk, payer.pk])  # fmt: skip
    sql("UPDATE approvals_confirmationrequest SET decision_mac = ''")
    sql("UPDATE approvals_approverresponse SET decision_mac = ''")
    sql("UPDATE approvals_auditentry SET key_id = ''")
    rewrite_chain(payer, lambda text: hashlib.sha256(text.encode()).hexdigest())
    verify_fails()  # the old chain is not signed: it does not verify as it is

    migration.sign_everything(apps, None)
    for later in ("0016_question_text_signed", "0018_request_risk"):
        __import__("importlib").import_module(f"approvals.migrations.{later}").forwards(apps, None)

    assert "audit verified" in verify()
    request = ConfirmationRequest.objects.get(agent=payer)
    assert AuditEntry.objects.filter(confirmation_id=request.pk, action="recorded").exists()
    sql("UPDATE approvals_confirmationrequest SET status = 'rejected' WHERE id = %s", [request.pk])
    assert f"confirmation request {request.pk}" in verify_fails()
