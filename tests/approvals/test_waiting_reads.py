"""Waiters' reads of their requests' states are coalesced (`approvals.waiting._FirstReads`): many agents
arriving at once are a few queries, each still sees only its own agent's request (another agent's is
"not found"), and a bad id is refused as a read of its own refuses it, failing no one else."""

from __future__ import annotations

import asyncio
import threading

import pytest
from django.core.exceptions import ValidationError

from approvals import services, waiting
from approvals.models import Agent
from tests.conftest import apply_config
from tests.support import on_new_connections

pytestmark = pytest.mark.django_db(transaction=True)

CONFIG = """
channels: [{name: web, kind: web}]
agents:
  - name: first
    hooks: [{kind: approval_gate, tools: ["pay"], channel: web, approvers: [alice], timeout_seconds: 600}]
  - name: second
    hooks: [{kind: approval_gate, tools: ["pay"], channel: web, approvers: [alice], timeout_seconds: 600}]
"""


class StatementCounter:
    """Counts the statements the waiters' database threads send (every connection they open)."""

    def __init__(self) -> None:
        self.statements: list[str] = []
        self.lock = threading.Lock()

    def __call__(self, execute, sql, params, many, context):
        with self.lock:
            self.statements.append(sql)
        return execute(sql, params, many, context)


def _asked(agent: Agent, n: int) -> list[str]:
    return [
        services.tool_call_pre(agent=agent, session_id=f"s-{i}", tool_name="pay", tool_args={"i": i}).confirmation_id
        for i in range(n)
    ]


def test_many_waiters_arriving_at_once_are_read_in_a_few_queries_each_seeing_only_its_own():
    apply_config(CONFIG)
    first, second = Agent.objects.get(name="first"), Agent.objects.get(name="second")
    mine, theirs = _asked(first, 40), _asked(second, 10)
    counter = StatementCounter()

    async def arrive():
        reads = [waiting._read(pk, first.pk, False) for pk in mine]  # 40 agents arrive at once
        reads += [waiting._read(pk.upper(), first.pk, False) for pk in mine[:5]]  # the same ids, written otherwise
        reads += [waiting._read(pk, first.pk, False) for pk in theirs]  # another agent's requests
        reads += [waiting._read("not-a-request", first.pk, False)]
        return await asyncio.gather(*reads, return_exceptions=True)

    with on_new_connections(counter):
        states = asyncio.run(arrive())

    own, upper, foreign, bad = states[:40], states[40:45], states[45:55], states[55]
    assert [s.id for s in own] == mine and all(s.status == "pending" and s.verified for s in own)
    assert [s.id for s in upper] == mine[:5]
    assert foreign == [None] * 10
    assert isinstance(bad, ValidationError)  # what its own read says (the routes answer 404 before)
    reads = [sql for sql in counter.statements if "approvals_confirmationrequest" in sql]
    # 55 reads asked for at once: one query (two if the first had left before the others queued);
    # the bad id is refused before any statement
    assert 1 <= len(reads) <= 2, reads


def test_a_read_that_fails_fails_every_waiter_it_was_for_and_the_next_read_works():
    apply_config(CONFIG)
    first = Agent.objects.get(name="first")
    asked = _asked(first, 3)

    def refuse(execute, sql, params, many, context):
        raise RuntimeError("database gone")

    async def arrive():
        return await asyncio.gather(*[waiting._read(pk, first.pk, False) for pk in asked], return_exceptions=True)

    with on_new_connections(refuse):
        failed = asyncio.run(arrive())
    assert all(isinstance(outcome, RuntimeError) for outcome in failed)

    async def again():
        return await asyncio.gather(*[waiting._read(pk, first.pk, False) for pk in asked])

    assert [s.id for s in asyncio.run(again())] == asked
