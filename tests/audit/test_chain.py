"""The tamper-evident chain against the real PostgreSQL: `verify_audit` passes on what the
gateway wrote, and names the first entry or row changed, removed or inserted directly in SQL;
writers racing on one agent never fork its chain."""

from __future__ import annotations

import datetime as dt
import threading
import time

import pytest
from django.db import connection, transaction
from django.utils import timezone

from approvals import services
from approvals.audit import audit_verify
from approvals.caches import StaleCache
from approvals.services.audit import audit_deferred
from approvals.models import Agent, AuditEntry, AuditHead, ConfirmationEvent, ConfirmationRequest, ToolCall
from tests.audit.support import agents, some_history, verify, verify_fails
from tests.conftest import apply_config
from tests.support import rewrite_request

pytestmark = pytest.mark.django_db(transaction=True)


def sql(statement: str, params: list | None = None) -> int:
    """Tamper the way someone with database access would: behind the gateway's back."""
    with connection.cursor() as cursor:
        cursor.execute(statement, params or [])
        return cursor.rowcount


@pytest.fixture
def history():
    payer, reader = agents()
    some_history(payer)
    some_history(reader, session="s-2")
    return payer, reader


def test_verify_audit_passes_on_what_the_gateway_wrote_and_prints_each_head(history):
    payer, reader = history
    out = verify()
    heads = {h.agent_id: h for h in AuditHead.objects.all()}
    assert f"payer: head #{heads[payer.pk].seq} {heads[payer.pk].hash}" in out
    assert f"reader: head #{heads[reader.pk].seq} {heads[reader.pk].hash}" in out
    # every write of a chained row is an entry: 4 calls asked, 2 completed, 1 noted, and the events
    assert AuditEntry.objects.filter(agent=payer, action="asked").count() == 4
    assert AuditEntry.objects.filter(agent=payer, action="completed").count() == 2
    assert AuditEntry.objects.filter(agent=payer, action="noted").count() == 1
    events = ConfirmationEvent.objects.filter(confirmation__agent=payer).count()
    assert events >= 2 and AuditEntry.objects.filter(agent=payer, action="event").count() == events
    assert list(AuditEntry.objects.filter(agent=payer).order_by("seq").values_list("seq", flat=True)) == list(
        range(1, heads[payer.pk].seq + 1)
    )


def test_a_tool_call_changed_in_sql_is_named_with_the_entry_that_recorded_it(history):
    payer, _ = history
    call = ToolCall.objects.get(agent=payer, tool_name="rm")
    assert sql("UPDATE approvals_toolcall SET decision = 'allow' WHERE id = %s", [call.pk]) == 1
    latest = AuditEntry.objects.filter(tool_call=call).order_by("-seq").first()
    message = verify_fails()
    assert f"agent payer: tool call {call.pk} was changed after entry #{latest.seq} recorded it" in message


def test_a_json_value_changed_in_sql_is_caught_too(history):
    payer, _ = history
    call = ToolCall.objects.get(agent=payer, tool_name="pay")
    sql("""UPDATE approvals_toolcall SET tool_args = jsonb_set(tool_args, '{amount}', '2') WHERE id = %s""", [call.pk])
    assert f"tool call {call.pk} was changed" in verify_fails()


def test_an_event_deleted_in_sql_is_named(history):
    payer, _ = history
    event = ConfirmationEvent.objects.filter(confirmation__agent=payer, kind="approved").get()
    entry = AuditEntry.objects.get(event=event)
    sql("DELETE FROM approvals_confirmationevent WHERE id = %s", [event.pk])
    assert f"agent payer: event {event.pk} recorded by entry #{entry.seq} was removed" in verify_fails()


def test_a_tool_call_inserted_in_sql_is_named(history):
    payer, _ = history
    sql(
        """INSERT INTO approvals_toolcall (id, agent_id, session_id, turn_id, tool_call_id, tool_name, tool_args,
               user_id, metadata, decision, reason, decided_by_hook, hook_decisions, config_version,
               request_fingerprint, response, created_at, outcome)
           VALUES ('00000000-0000-0000-0000-00000000beef', %s, 's-1', '', 'forged', 'pay', '{}', '', '{}', 'allow',
                   '', '', '[]', 1, '', '{}', now(), '')""",
        [payer.pk],
    )
    message = verify_fails()
    assert "tool call 00000000-0000-0000-0000-00000000beef has no audit entry" in message


def test_an_entry_changed_removed_or_inserted_is_named_by_its_place(history):
    payer, _ = history
    head = AuditHead.objects.get(agent=payer)
    assert head.seq >= 8

    sql("UPDATE approvals_auditentry SET action = 'event' WHERE agent_id = %s AND seq = 3", [payer.pk])
    assert "agent payer: entry #3 was changed" in verify_fails()
    sql("UPDATE approvals_auditentry SET action = 'asked' WHERE agent_id = %s AND seq = 3", [payer.pk])
    assert verify()  # put back: passes again

    saved = AuditEntry.objects.get(agent=payer, seq=5)
    sql("DELETE FROM approvals_auditentry WHERE agent_id = %s AND seq = 5", [payer.pk])
    message = verify_fails()
    assert "agent payer: entry #5 was removed" in message

    # Someone re-numbers the chain to hide the gap and slips a forged entry into it.
    saved.pk, saved.content_hash = None, "f" * 64
    saved.save()
    message = verify_fails()
    assert "agent payer: entry #5 was changed" in message

    # The last entries cut off: the head still says how long the chain was.
    sql("DELETE FROM approvals_auditentry WHERE agent_id = %s AND seq >= %s", [payer.pk, head.seq - 1])
    message = verify_fails()
    assert "entry #5 was changed" in message
    problems = [p.message for p in audit_verify().problems]
    assert f"agent payer: entry #{head.seq - 1}…#{head.seq} was removed (the head is #{head.seq})" in problems


def test_verify_since_checks_only_what_was_written_since(history):
    payer, _ = history
    later = timezone.now()
    some_history(payer, session="s-3")
    assert "audit verified" in verify("--since", later.isoformat())
    old = ToolCall.objects.filter(agent=payer, session_id="s-1", tool_name="ls").get()
    sql("UPDATE approvals_toolcall SET reason = 'edited' WHERE id = %s", [old.pk])
    assert "audit verified" in verify("--since", later.isoformat())  # the old call is before the window
    assert f"tool call {old.pk} was changed" in verify_fails()


def test_writers_racing_on_one_agent_never_fork_its_chain(transactional_db):
    payer, reader = agents()
    per_thread, threads = 6, 8
    barrier = threading.Barrier(threads)
    errors: list[BaseException] = []

    def writer(n: int) -> None:
        try:
            barrier.wait()
            for i in range(per_thread):
                agent = payer if (n + i) % 4 else reader
                services.tool_call_pre(agent=agent, session_id=f"race-{n}", tool_name="ls", tool_args={"i": i})
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            connection.close()

    workers = [threading.Thread(target=writer, args=(n,)) for n in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert not errors, errors
    for agent in (payer, reader):
        seqs = list(AuditEntry.objects.filter(agent=agent).order_by("seq").values_list("seq", flat=True))
        assert seqs == list(range(1, len(seqs) + 1))
        assert AuditHead.objects.get(agent=agent).seq == len(seqs) == ToolCall.objects.filter(agent=agent).count()
        # one chain, no fork: every entry's prev is the entry before it
        hashes = list(AuditEntry.objects.filter(agent=agent).order_by("seq").values_list("prev_hash", "entry_hash"))
        assert all(hashes[i][0] == hashes[i - 1][1] for i in range(1, len(hashes)))
    assert "audit verified" in verify()


def test_requests_created_and_decided_in_parallel_on_one_agent_keep_one_chain(transactional_db):
    """Creating a request links the call and its events together at the end of its transaction
    (`audit_deferred`: one statement for all three); racing creators and deciders never fork the chain."""
    payer, _ = agents()
    per_thread, threads = 5, 8
    barrier = threading.Barrier(threads)
    errors: list[BaseException] = []
    asked: list[str] = []

    def writer(n: int) -> None:
        try:
            barrier.wait()
            for i in range(per_thread):
                answer = services.tool_call_pre(agent=payer, session_id=f"ask-{n}", tool_name="pay", tool_args={"i": i})
                asked.append(answer.confirmation_id)
                if i % 2:  # decide some while others are still being created
                    assert services.confirmation_transition(answer.confirmation_id, "approved", decided_by="web:alice")
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            connection.close()

    workers = [threading.Thread(target=writer, args=(n,)) for n in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert not errors, errors
    assert len(set(asked)) == per_thread * threads
    seqs = list(AuditEntry.objects.filter(agent=payer).order_by("seq").values_list("seq", flat=True))
    events = ConfirmationEvent.objects.filter(confirmation__agent=payer).count()
    assert seqs == list(range(1, len(seqs) + 1))
    # each request is linked when created and when decided (`recorded`: its signed fields, docs/audit.md)
    recorded = ConfirmationRequest.objects.filter(agent=payer).count() + ConfirmationRequest.objects.filter(
        agent=payer, status="approved"
    ).count()
    assert AuditEntry.objects.filter(agent=payer, action="recorded").count() == recorded
    assert len(seqs) == ToolCall.objects.filter(agent=payer).count() + events + recorded == AuditHead.objects.get(agent=payer).seq
    hashes = list(AuditEntry.objects.filter(agent=payer).order_by("seq").values_list("prev_hash", "entry_hash"))
    assert all(hashes[i][0] == hashes[i - 1][1] for i in range(1, len(hashes)))
    assert "audit verified" in verify()


def test_a_deferred_block_that_fails_links_nothing_and_writes_nothing():
    payer, _ = agents()
    services.tool_call_pre(agent=payer, session_id="s", tool_name="ls", tool_args={})
    head = AuditHead.objects.get(agent=payer).seq

    with pytest.raises(ZeroDivisionError), transaction.atomic(), audit_deferred():
        services.tool_call_pre(agent=payer, session_id="s", tool_name="pay", tool_args={"n": 1})
        1 / 0

    assert AuditHead.objects.get(agent=payer).seq == head == AuditEntry.objects.filter(agent=payer).count()
    assert not ConfirmationRequest.objects.exists()
    assert "audit verified" in verify()


def test_a_deferred_block_needs_a_transaction():
    with pytest.raises(RuntimeError, match="needs a transaction"), audit_deferred():
        pass


TWO_GATED = """
channels: [{name: web, kind: web}]
agents:
  - name: first
    hooks: [{kind: approval_gate, tools: ["pay"], channel: web, approvers: [alice], timeout_seconds: 600}]
  - name: second
    hooks: [{kind: approval_gate, tools: ["pay"], channel: web, approvers: [alice], timeout_seconds: 600}]
"""


def test_requests_expired_together_are_linked_into_each_agents_chain():
    apply_config(TWO_GATED)
    first, second = Agent.objects.get(name="first"), Agent.objects.get(name="second")
    asked = [
        services.tool_call_pre(agent=agent, session_id=f"x-{i}", tool_name="pay", tool_args={"i": i}).confirmation_id
        for i, agent in enumerate([second, first, second, first, second])
    ]
    rewrite_request(list(asked), expires_at=timezone.now() - dt.timedelta(seconds=1))

    expired = services.confirmations_expire()  # one transaction, the events linked in bulk

    assert sorted(expired) == sorted(asked)
    assert AuditEntry.objects.filter(agent=first, event__kind="expired").count() == 2
    assert AuditEntry.objects.filter(agent=second, event__kind="expired").count() == 3
    for agent in (first, second):
        seqs = list(AuditEntry.objects.filter(agent=agent).order_by("seq").values_list("seq", flat=True))
        assert seqs == list(range(1, AuditHead.objects.get(agent=agent).seq + 1))
    assert "audit verified" in verify()


def test_a_call_served_from_a_stale_cache_writes_neither_the_call_nor_an_entry():
    _, reader = agents()
    served_under = Agent.objects.get(pk=reader.pk).generation
    services.agent_set_read_only(agent=reader, read_only=True)  # a new generation
    entries = AuditEntry.objects.count()

    with pytest.raises(StaleCache):
        services.tool_call_pre(agent=reader, session_id="s", tool_name="ls", tool_args={}, served_under=served_under)

    assert not ToolCall.objects.filter(agent=reader).exists()
    assert AuditEntry.objects.count() == entries
    current = Agent.objects.get(pk=reader.pk).generation
    services.tool_call_pre(agent=reader, session_id="s", tool_name="ls", tool_args={}, served_under=current)
    assert AuditEntry.objects.filter(agent=reader, action="asked").count() == 1
    assert "audit verified" in verify()


def _queued_behind_the_turn(agent, calls: list[dict]) -> tuple[list[threading.Thread], list]:
    """Each call's `tool_call_pre` in a thread of its own, all queued behind this agent's turn, which
    the test holds (as a thread writing an append holds it); returns the threads and their outcomes."""
    from approvals.services import audit as audit_service

    turn = audit_service._turn_of(agent.pk)
    outcomes: list = [None] * len(calls)

    def call(n: int) -> None:
        try:
            outcomes[n] = services.tool_call_pre(agent=agent, **calls[n])
        except BaseException as exc:  # noqa: BLE001 - checked by the test
            outcomes[n] = exc
        finally:
            connection.close()

    threads = [threading.Thread(target=call, args=(n,)) for n in range(len(calls))]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 10
    while len(turn.queued) < len(calls):  # every append waits for the turn
        assert time.monotonic() < deadline, f"{len(turn.queued)} of {len(calls)} appends queued"
        time.sleep(0.005)
    return threads, outcomes


def test_appends_queued_behind_an_agents_turn_are_written_together_in_one_transaction():
    """Group commit: the thread whose turn it is writes every append queued by then in one statement —
    one transaction (one `xmin`) for all the calls and their entries — and the chain stays one."""
    from approvals.services import audit as audit_service

    payer, _ = agents()
    services.tool_call_pre(agent=payer, session_id="warm", tool_name="ls", tool_args={})  # this process knows the head
    turn = audit_service._turn_of(payer.pk)
    with turn.turn:
        threads, outcomes = _queued_behind_the_turn(
            payer, [{"session_id": f"g-{n}", "tool_name": "ls", "tool_args": {"n": n}} for n in range(6)]
        )
    for thread in threads:
        thread.join(10)

    assert all(getattr(o, "decision", None) == "allow" for o in outcomes), outcomes
    calls = ToolCall.objects.filter(agent=payer, session_id__startswith="g-")
    assert calls.count() == 6
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(DISTINCT xmin::text) FROM approvals_toolcall WHERE agent_id = %s AND session_id LIKE 'g-%%'",
            [payer.pk],
        )
        assert cursor.fetchone()[0] == 1  # written by one statement
    seqs = list(AuditEntry.objects.filter(agent=payer).order_by("seq").values_list("seq", flat=True))
    assert seqs == list(range(1, 8))
    assert "audit verified" in verify()


def test_a_queued_append_held_back_by_its_condition_leaves_the_others_of_its_group_written():
    """One call of the group was served from a stale cache (its agent changed): the group's statement
    writes nothing, each append is made on its own, and only the stale one is refused."""
    from approvals.services import audit as audit_service

    payer, _ = agents()
    services.tool_call_pre(agent=payer, session_id="warm", tool_name="ls", tool_args={})
    stale = Agent.objects.get(pk=payer.pk).generation
    Agent.objects.filter(pk=payer.pk).update(generation=stale + 1)  # as a config change does
    fresh = stale + 1
    calls = [{"session_id": f"g-{n}", "tool_name": "ls", "tool_args": {"n": n}, "served_under": fresh} for n in range(4)]
    calls[2]["served_under"] = stale
    turn = audit_service._turn_of(payer.pk)
    with turn.turn:
        threads, outcomes = _queued_behind_the_turn(payer, calls)
    for thread in threads:
        thread.join(10)

    assert isinstance(outcomes[2], StaleCache)
    assert [getattr(o, "decision", None) for n, o in enumerate(outcomes) if n != 2] == ["allow"] * 3
    assert sorted(ToolCall.objects.filter(agent=payer, session_id__startswith="g-").values_list("session_id", flat=True)) == [
        "g-0", "g-1", "g-3"
    ]
    assert "audit verified" in verify()


def test_two_asks_with_one_idempotency_key_queued_together_record_one_call_and_replay_it_to_the_other():
    """A group whose statement is refused (the second call takes the idempotency key the first one
    takes) writes nothing; made one by one, the first is recorded and the second is answered from it."""
    from approvals.services import audit as audit_service

    payer, _ = agents()
    services.tool_call_pre(agent=payer, session_id="warm", tool_name="ls", tool_args={})
    same = {"session_id": "g", "tool_name": "ls", "tool_args": {"n": 1}, "idempotency_key": "once"}
    turn = audit_service._turn_of(payer.pk)
    with turn.turn:
        threads, outcomes = _queued_behind_the_turn(payer, [dict(same), dict(same), {**same, "idempotency_key": "other"}])
    for thread in threads:
        thread.join(10)

    assert [getattr(o, "decision", o) for o in outcomes] == ["allow", "allow", "allow"], outcomes
    assert ToolCall.objects.filter(agent=payer, idempotency_key="once").count() == 1
    assert ToolCall.objects.filter(agent=payer, idempotency_key="other").count() == 1
    assert "audit verified" in verify()


def test_a_completed_call_is_linked_as_the_orm_reads_it_back_whatever_its_result_holds():
    """A post-tool-use links the call as the database holds it once completed (read back by a prepared
    statement, `lifecycle._audit`): exactly what `.values()` gives, so the entry's hash is the one
    `verify_audit` recomputes — for results of every JSON shape."""
    payer, _ = agents()
    results = [
        {"nested": {"list": [1, 2.5, None, True], "é": "ünïcode ✓"}},
        "a string with \"quotes\" and \\ backslashes",
        12345678901234567890123,  # past 64 bits
        [1e20, 0.1, -0.0],
        None,
    ]
    for n, result in enumerate(results):
        services.tool_call_pre(agent=payer, session_id="s-r", tool_name="ls", tool_args={"n": n}, tool_call_id=f"r-{n}")
        services.hook_event_run(agent=payer, event="post_tool_use", session_id="s-r", tool_call_id=f"r-{n}", result=result)

    calls = ToolCall.objects.filter(session_id="s-r").order_by("tool_call_id")
    assert [call.result for call in calls] == results and all(call.completed_at for call in calls)
    entries = AuditEntry.objects.filter(agent_id=payer.pk, action="completed", tool_call__in=calls)
    assert entries.count() == len(results)
    assert audit_verify().ok
    verify()  # (the command's own walk of every chain: no problem named)
