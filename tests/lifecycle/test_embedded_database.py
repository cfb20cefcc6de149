"""`make run`'s embedded database (SQLite): the writes built as raw SQL for PostgreSQL's sake
(one-statement inserts, conflicts skipped, the audit chain) also work there, end to end."""

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
