"""The benchmark's database (default gw_bench): re-created, migrated and configured on every run; the rows
the parts put straight into it and their decisions, as the services write them."""

from __future__ import annotations

import datetime as dt
import os
import time
from typing import Any

from bench.harness import APPROVER, APPROVER_PASSWORD, BENCH_ENV, DATABASE_URL, SLACK_SIGNING_SECRET, SLACK_USER


CONFIG = f"""
channels:
  - name: slack-bench
    kind: slack
    bot_token: xoxb-bench
    signing_secret: {SLACK_SIGNING_SECRET}
    channel_id: C0BENCH
    api_base_url: http://127.0.0.1:9/api/   # loopback discard port: nothing leaves the machine
  - name: web
    kind: web
  - name: slack-cards
    kind: slack
    bot_token: xoxb-bench-cards
    signing_secret: {SLACK_SIGNING_SECRET}
    channel_id: C0CARDS
    api_base_url: __FAKE_SLACK__   # a local fake Slack Web API (tests/fakes/slack_api.py) in this process
agents:
  - name: bench-bot
    hooks:
      - kind: approval_gate
        name: pay-gate
        tools: ["oa__*"]
        channel: slack-bench
        approvers: ["{SLACK_USER}"]
  - name: bench-slack
    hooks:
      - kind: approval_gate
        name: slack-gate
        tools: ["oa__*"]
        channel: slack-cards
        approvers: ["{SLACK_USER}"]
  - name: bench-web
    hooks:
      - kind: approval_gate
        name: web-gate
        tools: ["oa__*"]
        channel: web
        approvers: ["{APPROVER}"]
"""



def setup_database(fake_slack_url: str = "http://127.0.0.1:9/api/") -> dict[str, Any]:
    """Re-create and migrate the benchmark database; apply the config; return the agents' keys and ids."""
    import psycopg
    from psycopg import sql

    os.environ.update(BENCH_ENV)
    dbname = DATABASE_URL.rsplit("/", 1)[1]
    admin_url = DATABASE_URL.rsplit("/", 1)[0] + "/postgres"
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(dbname)))
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(dbname)))

    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.core.management import call_command

    call_command("migrate", verbosity=0)

    from approvals import services
    from approvals.config_schema import parse_config_text
    from approvals.models import Agent, Channel

    services.config_apply(config=parse_config_text(CONFIG.replace("__FAKE_SLACK__", fake_slack_url)), source="bench")
    agent, web_agent = Agent.objects.get(name="bench-bot"), Agent.objects.get(name="bench-web")
    slack_agent = Agent.objects.get(name="bench-slack")
    _, key = services.api_key_create(agent=agent, name="bench")
    _, web_key = services.api_key_create(agent=web_agent, name="bench")
    _, slack_key = services.api_key_create(agent=slack_agent, name="bench")
    get_user_model().objects.create_user(APPROVER, password=APPROVER_PASSWORD)
    return {
        "key": key,
        "agent_id": agent.pk,
        "channel_id": Channel.objects.get(name="slack-bench").pk,
        "web_key": web_key,
        "web_agent_id": web_agent.pk,
        "slack_key": slack_key,
        "slack_agent_id": slack_agent.pk,
    }


def create_pending(n: int, *, agent_id: int, channel_id: int, expires_at: list[dt.datetime] | None = None) -> list[str]:
    """N pending requests straight into the table (their creation is not what these parts measure)."""
    from approvals.models import ConfirmationRequest

    rows = [
        ConfirmationRequest(
            agent_id=agent_id,
            channel_id=channel_id,
            session_id="bench",
            tool_name="oa__pay",
            tool_args={"i": i},
            expires_at=expires_at[i] if expires_at else None,
        )
        for i in range(n)
    ]
    from approvals.audit import decision_mac

    for row in rows:  # signed as the gateway signs what it writes (docs/audit.md)
        row.decision_mac = decision_mac(ConfirmationRequest, row)
    ConfirmationRequest.objects.bulk_create(rows, batch_size=2000)
    return [str(r.pk) for r in rows]


def decide_in_one_transaction(ids: list[str]) -> tuple[dict[str, str], float]:
    """Approve the even ones and reject the odd ones in ONE transaction, notifying as the product
    does (`services.records.changes_notify`); (the expected status per id, when the commit returned)."""
    from django.db import transaction
    from django.utils import timezone

    from approvals.models import ConfirmationRequest
    from approvals.services.records import changes_notify

    from approvals.audit import decision_mac

    expected = {cid: ("approved" if i % 2 == 0 else "rejected") for i, cid in enumerate(ids)}
    now = timezone.now()
    # signed as the gateway signs a decision (docs/audit.md); the signing is not what this part measures
    rows = list(ConfirmationRequest.objects.filter(pk__in=ids))
    for row in rows:
        row.status, row.decided_by, row.decided_at = expected[str(row.pk)], "bench", now
        row.decision_mac = decision_mac(ConfirmationRequest, row)
    with transaction.atomic():
        ConfirmationRequest.objects.bulk_update(rows, ["status", "decided_by", "decided_at", "decision_mac"], batch_size=2000)
        changes_notify(ids)
    return expected, time.perf_counter()


def decide_one(confirmation_id: str) -> float:
    """Approve one request the way the services do (the conditional UPDATE, its event, its outbox rows,
    its notification, one transaction); the moment the commit returned (stamped by the first of the
    transaction's on-commit callbacks, before the outbox's own enqueue theirs to the broker)."""
    from django.db import transaction

    from approvals import services

    stamp: list[float] = []
    with transaction.atomic():
        transaction.on_commit(lambda: stamp.append(time.perf_counter()))
        assert services.confirmation_transition(confirmation_id, "approved", decided_by="bench")
    return stamp[0]


def vacuum_analyze() -> None:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE")
