"""Retention: `purge` removes old records and cuts each chain at a checkpoint, after which
`verify_audit` still passes — and still names tampering with what was kept."""

from __future__ import annotations

import datetime as dt
import io
import os
import subprocess
import sys

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection
from django.utils import timezone

from approvals import services
from approvals.models import (
    Agent,
    AuditCheckpoint,
    AuditEntry,
    ConfirmationEvent,
    ConfirmationRequest,
    Grant,
    Outbox,
    ToolCall,
)
from tests.audit.support import agents, some_history, verify, verify_fails
from gateway_contract import Callback
from tests.conftest import apply_config, decide

pytestmark = pytest.mark.django_db(transaction=True)
DAYS = dt.timedelta(days=30)


def sql(statement: str, params: list) -> None:
    with connection.cursor() as cursor:
        cursor.execute(statement, params)


@pytest.fixture
def old_and_new():
    """Old records, then (after `cut`) new ones: purging as if 30 days had passed since `cut`."""
    payer, reader = agents()
    some_history(payer, session="old")
    some_history(reader, session="old-r")
    still_pending = services.tool_call_pre(agent=payer, session_id="old", tool_name="pay", tool_args={"amount": 5})
    cut = timezone.now()
    some_history(payer, session="new")
    # An old request decided now: its late event keeps it (and its call) out of the purge.
    decide(still_pending.confirmation_id, "approve", actor="alice")
    return payer, reader, cut, still_pending.confirmation_id


def test_purge_removes_what_is_older_and_verify_audit_still_passes(old_and_new):
    payer, reader, cut, late = old_and_new
    before = AuditEntry.objects.count()
    result = services.audit_purge(older_than=DAYS, now=cut + DAYS)
    assert result.chains_cut == 2
    # the old calls went, with their requests, events and deliveries; the new ones and the late one stayed
    assert set(ToolCall.objects.values_list("session_id", flat=True)) == {"new", "old"}
    assert ToolCall.objects.filter(session_id="old").get().confirmation_id is not None
    assert [str(pk) for pk in ConfirmationRequest.objects.filter(created_at__lt=cut).values_list("pk", flat=True)] == [
        late
    ]
    assert not ToolCall.objects.filter(agent=reader).exists()
    assert not Outbox.objects.filter(confirmation__created_at__lt=cut).exclude(confirmation_id=late).exists()
    assert result.tool_calls_removed == 8 and result.confirmations_removed == 1  # reader has no gate
    assert AuditEntry.objects.count() < before
    # the late request's old events were linked again above the cut
    assert result.entries_retained >= 1
    assert AuditEntry.objects.filter(action="retained", event__confirmation_id=late).exists()
    assert "audit verified" in verify()

    checkpoint = AuditCheckpoint.objects.get(agent=payer)
    first = AuditEntry.objects.filter(agent=payer).order_by("seq").first()
    assert first.seq == checkpoint.seq + 1 and first.prev_hash == checkpoint.hash


def test_tampering_after_a_purge_is_still_named(old_and_new):
    payer, _, cut, late = old_and_new
    services.audit_purge(older_than=DAYS, now=cut + DAYS)
    kept = ConfirmationEvent.objects.filter(confirmation_id=late, kind="created").get()
    sql("UPDATE approvals_confirmationevent SET actor = 'mallory' WHERE id = %s", [kept.pk])
    assert f"agent payer: event {kept.pk} was changed" in verify_fails()
    sql("UPDATE approvals_confirmationevent SET actor = 'agent:payer' WHERE id = %s", [kept.pk])
    assert "audit verified" in verify()

    # Moving the checkpoint, or dropping it, to hide removed entries does not work either.
    checkpoint = AuditCheckpoint.objects.get(agent=payer)
    sql("DELETE FROM approvals_auditcheckpoint WHERE id = %s", [checkpoint.pk])
    assert f"agent payer: entry #1…#{checkpoint.seq} was removed" in verify_fails()


def test_purge_refuses_a_chain_that_does_not_verify_and_changes_nothing(old_and_new):
    payer, _, cut, _ = old_and_new
    call = ToolCall.objects.filter(agent=payer, session_id="old").first()
    sql("UPDATE approvals_toolcall SET reason = 'edited' WHERE id = %s", [call.pk])
    before = (ToolCall.objects.count(), AuditEntry.objects.count())
    with pytest.raises(CommandError, match="the audit does not verify .*nothing was purged"):
        call_command("purge", "--older-than", "1", stdout=io.StringIO())
    assert (ToolCall.objects.count(), AuditEntry.objects.count()) == before
    assert not AuditCheckpoint.objects.exists()


def test_the_purge_command_keeps_recent_records(old_and_new):
    out = io.StringIO()
    call_command("purge", "--older-than", "1", stdout=out)
    assert "0 tool calls, 0 confirmation requests, 0 audit entries" in out.getvalue()
    assert "audit verified" in verify()
    with pytest.raises(CommandError, match="must be at least 1"):
        call_command("purge", "--older-than", "0")


def test_a_second_purge_starts_from_the_first_checkpoint(old_and_new):
    payer, _, cut, _ = old_and_new
    services.audit_purge(older_than=DAYS, now=cut + DAYS)
    second = services.audit_purge(older_than=DAYS, now=timezone.now() + DAYS + dt.timedelta(seconds=1))
    assert second.chains_cut >= 1 and not ToolCall.objects.filter(confirmation__status="approved").exists()
    assert AuditCheckpoint.objects.filter(agent=payer).count() == 2
    assert "audit verified" in verify()


def test_beat_purges_daily_when_retention_is_set():
    code = "from django.conf import settings; print(settings.CELERY_BEAT_SCHEDULE.get('purge-old-records'))"
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "gateway.settings"}
    run = lambda extra: subprocess.run(  # noqa: E731
        [sys.executable, "-c", f"import django; django.setup(); {code}"], env={**env, **extra},
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert run({"GATEWAY_RETENTION_DAYS": "90"}).stdout.strip() == (
        "{'task': 'approvals.tasks.purge_old_records', 'schedule': 86400.0}"
    )
    assert run({"GATEWAY_RETENTION_DAYS": "0"}).stdout.strip() == "None"
    assert "GATEWAY_RETENTION_DAYS must be 0" in run({"GATEWAY_RETENTION_DAYS": "-3"}).stderr


GRANTING = """
channels: [{name: web, kind: web}]
agents:
  - name: granter
    hooks:
      - {kind: approval_gate, name: gate, tools: ["pay"], channel: web, approvers: [alice],
         grants: [{scope: session, args: any}]}
"""


def test_a_grant_goes_with_its_request_unless_a_call_it_allowed_stays():
    apply_config(GRANTING)
    agent = Agent.objects.get(name="granter")

    def granted(session: str) -> str:
        asked = services.tool_call_pre(agent=agent, session_id=session, tool_name="pay", tool_args={"n": 1})
        services.confirmation_respond(
            channel_name="web", callback=Callback(confirmation_id=asked.confirmation_id, decision="approve", actor="alice", grant=0)
        )
        allowed = services.tool_call_pre(agent=agent, session_id=session, tool_name="pay", tool_args={"n": 2})
        assert "allowed_by_grant" in allowed.side_effects
        return asked.confirmation_id

    gone = granted("all-old")  # the request, its grant and the call the grant allowed: all old
    kept = granted("used-since")
    cut = timezone.now()
    used_since = services.tool_call_pre(agent=agent, session_id="used-since", tool_name="pay", tool_args={"n": 3})
    assert "allowed_by_grant" in used_since.side_effects

    services.audit_purge(older_than=DAYS, now=cut + DAYS)

    assert not ConfirmationRequest.objects.filter(pk=gone).exists()
    assert not Grant.objects.filter(session_id="all-old").exists()
    assert not ToolCall.objects.filter(session_id="all-old").exists()
    # the grant allowed a call after the cut-off: that call, the grant, its request and the request's
    # own call stay; the older call the grant allowed goes like any old call
    assert ConfirmationRequest.objects.filter(pk=kept).exists()
    assert Grant.objects.filter(session_id="used-since").count() == 1
    assert ToolCall.objects.filter(confirmation_id=kept).exists()
    assert list(ToolCall.objects.filter(session_id="used-since", grant__isnull=False).values_list("tool_args", flat=True)) == [
        {"n": 3}
    ]
    assert "audit verified" in verify()
