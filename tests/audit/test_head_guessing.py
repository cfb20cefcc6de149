"""Writers of one agent in one process take turns guessing its chain's head (`_Turn.guessing`, held by an
`audit_transaction` until its COMMIT): each guesses the head the previous one committed, so requests
created together never pay the locked re-read and second try of a stale guess — and the chain stays
one line that verifies."""

from __future__ import annotations

import threading

import pytest
from django.db import connection

from approvals import services
from approvals.models import Agent, AuditEntry, AuditHead, ConfirmationRequest
from tests.audit.support import verify
from tests.conftest import apply_config
from tests.support import on_new_connections

pytestmark = pytest.mark.django_db(transaction=True)

CONFIG = """
channels: [{name: web, kind: web}]
agents:
  - name: busy
    hooks: [{kind: approval_gate, tools: ["pay"], channel: web, approvers: [alice], timeout_seconds: 600}]
"""
THREADS, EACH = 6, 8


def test_requests_of_one_agent_created_together_never_re_read_the_head_under_its_lock():
    apply_config(CONFIG)
    agent = Agent.objects.get(name="busy")
    services.tool_call_pre(agent=agent, session_id="first", tool_name="pay", tool_args={})  # this process's guess
    locked_reads: list[str] = []

    def count(execute, sql, params, many, context):
        if "approvals_audithead" in sql and "FOR UPDATE" in sql:
            locked_reads.append(sql)
        return execute(sql, params, many, context)

    start, failures = threading.Barrier(THREADS), []

    def create(n: int) -> None:
        try:
            start.wait()
            for i in range(EACH):
                services.tool_call_pre(agent=agent, session_id=f"t{n}", tool_name="pay", tool_args={"n": n, "i": i})
        except BaseException as exc:  # noqa: BLE001 - the test checks there were none
            failures.append(exc)
        finally:
            connection.close()

    with on_new_connections(count):
        threads = [threading.Thread(target=create, args=(n,)) for n in range(THREADS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    assert failures == []
    assert ConfirmationRequest.objects.filter(agent=agent).count() == 1 + THREADS * EACH
    assert locked_reads == []  # every guess was the committed head
    head = AuditHead.objects.get(agent=agent)
    assert list(AuditEntry.objects.filter(agent=agent).order_by("seq").values_list("seq", flat=True)) == list(
        range(1, head.seq + 1)
    )
    assert "audit verified" in verify()
