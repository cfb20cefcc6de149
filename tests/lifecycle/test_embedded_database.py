"""`make run`'s embedded database (SQLite): the writes built as raw SQL for PostgreSQL's sake
(one-statement inserts, conflicts skipped, the audit chain) also work there, end to end; and the
oversight page, whose percentiles PostgreSQL computes, interpolates them itself there."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = """
from django.core.management import call_command
call_command("migrate", verbosity=0)

from approvals import services
from approvals.config_schema import parse_config_text
from approvals.models import Agent, ApproverResponse, ConfirmationRequest, Outbox
from gateway_contract import Callback
from django.contrib.auth.models import User

for name in ("alice", "carol"):
    User.objects.create_user(name)  # (bob is no user: a person of his own)

services.config_apply(config=parse_config_text('''
channels: [{name: web, kind: web}]
agents: [{name: bot, hooks: [{kind: approval_gate, channel: web, approvers: [alice, bob, carol], approvals_required: 2}]}]
'''), source="test")
bot = Agent.objects.get(name="bot")
asked = services.tool_call_pre(agent=bot, session_id="s", tool_name="deploy", tool_args={"to": "prod"}, user_id="carol")
confirmation = ConfirmationRequest.objects.get(pk=asked.confirmation_id)
card = Outbox.objects.get(confirmation=confirmation)
print("card", card.status, card.message_ref["url"].endswith(f"/approvals/{confirmation.pk}/"))

def click(actor):
    return services.confirmation_respond(
        channel_name="web", callback=Callback(confirmation_id=str(confirmation.pk), decision="approve", actor=actor)
    ).code

print("clicks", click("carol"), click("alice"), click("alice"), click("bob"))  # the call is carol's
confirmation.refresh_from_db()
print("decided", confirmation.status, ApproverResponse.objects.count())
call_command("verify_audit")
"""


def test_a_request_is_asked_decided_and_audited_on_the_embedded_database(tmp_path):
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in {"DATABASE_URL", "REDIS_URL", "CELERY_BROKER_URL", "GATEWAY_CONFIG"}
    }
    env.update(
        DJANGO_SETTINGS_MODULE="gateway.settings",
        DATABASE_URL=f"sqlite:///{tmp_path / 'gateway.sqlite3'}",
        GATEWAY_VAR_DIR=str(tmp_path),
    )
    run = subprocess.run(
        [sys.executable, "-c", f"import django; django.setup()\n{SCRIPT}"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
    )  # fmt: skip

    assert run.returncode == 0, run.stderr[-3000:]
    lines = run.stdout.splitlines()
    assert "card sent True" in lines
    assert "clicks self_approval recorded duplicate decided" in lines
    assert "decided approved 2" in lines
    assert any(line.startswith("audit verified: 1 chain(s)") for line in lines), run.stdout


OVERSIGHT = """
import datetime as dt
from django.core.management import call_command
call_command("migrate", verbosity=0)

from django.contrib.auth.models import User
from django.db.models import F
from django.test import Client
from approvals import services
from approvals.config_schema import parse_config_text
from approvals.models import Agent, ConfirmationEvent, ConfirmationRequest
from gateway_contract import Callback

for name in ("alice", "bob"):
    User.objects.create_user(name)
services.config_apply(config=parse_config_text('''
channels: [{name: web, kind: web}]
agents: [{name: bot, hooks: [{kind: approval_gate, tools: ["*"], channel: web, approvers: [alice, bob]}]}]
'''), source="test")
bot = Agent.objects.get(name="bot")
for tool, actor, decision, seconds in [("pay", "alice", "approve", 30), ("pay", "alice", "reject", 90), ("rm", "bob", "approve", 12)]:
    pk = services.tool_call_pre(agent=bot, session_id="s", tool_name=tool, tool_args={}).confirmation_id
    back = dt.timedelta(seconds=seconds)
    ConfirmationRequest.objects.filter(pk=pk).update(created_at=F("created_at") - back)
    ConfirmationEvent.objects.filter(confirmation_id=pk).update(created_at=F("created_at") - back)
    services.confirmation_respond(channel_name="web", callback=Callback(confirmation_id=str(pk), decision=decision, actor=actor, reason="no"))
admin = Client()
admin.force_login(User.objects.create_superuser("root", "root@example.com", "pw"))
page = admin.get("/admin/approvals/confirmationrequest/oversight/?days=7", HTTP_HOST="127.0.0.1")
text = page.content.decode()
print("page", page.status_code, text.count('class="point p50"'))
import re
for row in re.findall(r"<tr><td>(.*?)</tr>", text, re.S):
    cells = [re.sub(r"<[^>]+>", "", cell).strip() for cell in re.findall(r"<td[^>]*>(.*?)</td>", "<td>" + row, re.S)]
    print("row", " ".join(cell for cell in cells if not cell.startswith("web:")))
"""


def test_the_oversight_page_computes_its_percentiles_without_postgresql(tmp_path):
    """SQLite has no percentile_cont: the page interpolates the same percentiles itself."""
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in {"DATABASE_URL", "REDIS_URL", "CELERY_BROKER_URL", "GATEWAY_CONFIG"}
    }
    env.update(
        DJANGO_SETTINGS_MODULE="gateway.settings",
        DATABASE_URL=f"sqlite:///{tmp_path / 'gateway.sqlite3'}",
        GATEWAY_VAR_DIR=str(tmp_path),
        GATEWAY_OVERSIGHT_FAST_SECONDS="20",
    )
    run = subprocess.run(
        [sys.executable, "-c", f"import django; django.setup()\n{OVERSIGHT}"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
    )  # fmt: skip

    assert run.returncode == 0, run.stderr[-3000:]
    lines = run.stdout.splitlines()
    assert "page 200 1" in lines
    # alice's answers after 30 s and 90 s: p50 60 s, p90 84 s (30 + 0.9 × 60); bob's after 12 s: fast (under 20 s)
    # (name, answers, p50, p90, approval rate, fast, fast share, expired)
    assert "row alice 2 60 s 84 s 50% 0 0% 0" in lines, run.stdout
    assert "row bob 1 12 s 12 s 100% 1 100% 0" in lines, run.stdout
    assert "row pay 2 60 s 84 s 50% 0 0% 0" in lines, run.stdout
