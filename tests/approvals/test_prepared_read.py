"""A click's locked read as a prepared statement (approvals/prepared.py): the same instance the ORM
makes, its related rows attached, planned once per connection."""

from __future__ import annotations

import uuid

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from approvals.models import ConfirmationRequest
from approvals.services.responses import _LOCKED_READ
from tests.conftest import apply_config

pytestmark = pytest.mark.django_db(transaction=True)

CONFIG = """
channels:
  - {name: web, kind: web}
agents:
  - name: purchasing-bot
    hooks:
      - {kind: approval_gate, name: finance-gate, tools: ["oa__*"], channel: web, approvers: [alice]}
"""


def a_pending_request() -> ConfirmationRequest:
    from approvals import services
    from approvals.models import Agent

    apply_config(CONFIG)
    agent = Agent.objects.get(name="purchasing-bot")
    answer = services.tool_call_pre(
        agent=agent, session_id="s", tool_name="oa__pay", tool_args={"amount": 12.5, "to": "ACME"}, user_id="u-1"
    )
    return ConfirmationRequest.objects.get(pk=answer.confirmation_id)


def test_the_prepared_read_makes_the_instance_the_orm_makes_with_its_related_rows():
    made = a_pending_request()
    orm = ConfirmationRequest.objects.select_related("agent__team", "channel").get(pk=made.pk)

    with transaction.atomic():
        read = _LOCKED_READ.first(str(made.pk))
        with CaptureQueriesContext(connection) as later:
            agent, team, channel = read.agent, read.agent.team, read.channel  # attached: no query

    assert len(later) == 0
    fields = [f.attname for f in ConfirmationRequest._meta.concrete_fields]
    assert {f: getattr(read, f) for f in fields} == {f: getattr(orm, f) for f in fields}
    assert read.tool_args == {"amount": 12.5, "to": "ACME"} and read.created_at.tzinfo is not None
    assert (agent.name, team.name, channel.name) == ("purchasing-bot", orm.agent.team.name, "web")
    assert read._state.adding is False and read._state.db == "default"


def test_the_read_is_planned_once_per_connection_and_a_missing_row_is_none():
    made = a_pending_request()
    with transaction.atomic():
        for _ in range(3):
            assert _LOCKED_READ.first(made.pk).pk == made.pk
        assert _LOCKED_READ.first(uuid.uuid4()) is None
        with connection.cursor() as cursor:
            cursor.execute("SELECT statement FROM pg_prepared_statements")
            # (this read's own: other statements are prepared too, after GATEWAY_DB_PREPARE_AFTER uses)
            prepared = [row[0] for row in cursor.fetchall() if row[0].replace("$1", "%s") == _LOCKED_READ._plan["sql"]]
    assert len(prepared) == 1 and "FOR NO KEY UPDATE" in prepared[0]


def test_the_read_is_recorded_where_django_records_its_statements():
    made = a_pending_request()
    with transaction.atomic(), CaptureQueriesContext(connection) as captured:
        _LOCKED_READ.first(made.pk)
    assert len(captured) == 1 and str(made.pk) in captured[0]["sql"] and "FOR NO KEY UPDATE" in captured[0]["sql"]


def test_a_database_error_in_the_read_is_djangos_own():
    """The read's errors are Django's (what the 503-while-the-database-is-down answer catches): here its
    row lock waits past `lock_timeout` behind another transaction."""
    import threading

    from django.db import DatabaseError, connections

    made = a_pending_request()
    with pytest.raises(DatabaseError), transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SET LOCAL lock_timeout = 1")
        locked, release = threading.Event(), threading.Event()

        def hold() -> None:
            other = connections.create_connection("default")
            try:
                with other.cursor() as cursor:
                    cursor.execute("BEGIN")
                    cursor.execute("SELECT 1 FROM approvals_confirmationrequest WHERE id = %s FOR UPDATE", [made.pk])
                    locked.set()
                    release.wait(10)
                    cursor.execute("ROLLBACK")
            finally:
                other.close()

        holder = threading.Thread(target=hold)
        holder.start()
        try:
            assert locked.wait(10)
            _LOCKED_READ.first(made.pk)
        finally:
            release.set()
            holder.join(10)


def test_a_read_with_annotations_sets_them_as_the_orm_does_and_sends_their_constants():
    """The signed-in user's read (`selectors.user_by_id`) annotates who they are with constants of its
    own (`'web:'`, `'admin:'`): the primary key is the one parameter that varies, and each annotation
    is on the instance as the ORM puts it there — what `_django_user_rows` reads for each identity."""
    from django.contrib.auth import get_user_model

    from approvals.models import Person, PersonIdentity
    from approvals.selectors import people

    users = get_user_model().objects
    alice, bob, carol = (users.create_user(name, password="pw") for name in ("alice", "bob", "carol"))
    alices = Person.objects.create(display_name="Alice", user=alice)
    bobs = Person.objects.create(display_name="Bob", user=bob)
    PersonIdentity.objects.create(person=bobs, identity="web:alice")  # alice's page identity: bob's person
    PersonIdentity.objects.create(person=alices, identity="admin:carol")

    names = ("gateway_person", "gateway_web_link", "gateway_admin_link")
    for user in (alice, bob, carol):
        read = people.user_by_id(user.pk)
        orm = people._user_with_people(user.pk).get()
        assert {n: getattr(read, n) for n in names} == {n: getattr(orm, n) for n in names}
        assert read.username == user.username and read._state.adding is False
        rows = people._django_user_rows([f"web:{user.username}", f"admin:{user.username}"])
        assert rows == {
            f"web:{user.username}": (user.pk, read.gateway_person, read.gateway_web_link),
            f"admin:{user.username}": (user.pk, read.gateway_person, read.gateway_admin_link),
        }
    assert (people.user_by_id(alice.pk).gateway_web_link, people.user_by_id(carol.pk).gateway_admin_link) == (
        bobs.pk, alices.pk,
    )  # fmt: skip
    assert people.user_by_id(carol.pk).gateway_person is None and people.user_by_id(10**9) is None


def test_a_read_by_several_values_is_the_orms_first_row_with_its_related_row():
    """The call a post-tool-use reports on (`selectors.tool_calls._FOR_COMPLETION`): prepared with its
    agent, session and call id as placeholders — the newest matching call, its request attached, as the
    ORM's `.first()` gives it; nothing for a call that is not there."""
    from approvals import services
    from approvals.models import Agent, ToolCall
    from approvals.selectors.tool_calls import _FOR_COMPLETION

    gated = a_pending_request()  # (made with tool_call_id None: a call id of its own)
    agent = Agent.objects.get(name="purchasing-bot")
    for args in ({"n": 1}, {"n": 2}):  # the same call id twice in one session: the newer one is meant
        services.tool_call_pre(agent=agent, session_id="s", tool_name="ls", tool_args=args, tool_call_id="twice")
    pay = ToolCall.objects.get(confirmation=gated)

    def orm(agent_id, session_id, tool_call_id):
        return (
            ToolCall.objects.select_related("confirmation")
            .filter(agent_id=agent_id, session_id=session_id, tool_call_id=tool_call_id)
            .order_by("-created_at")
            .first()
        )

    fields = [f.attname for f in ToolCall._meta.concrete_fields]
    for key in ((agent.pk, "s", "twice"), (agent.pk, "s", pay.tool_call_id)):
        read, expected = _FOR_COMPLETION.first(*key), orm(*key)
        assert {f: getattr(read, f) for f in fields} == {f: getattr(expected, f) for f in fields}
        with CaptureQueriesContext(connection) as later:
            attached = read.confirmation
        assert len(later) == 0 and (attached.pk if attached else None) == (expected.confirmation_id)
    assert _FOR_COMPLETION.first(agent.pk, "s", "twice").tool_args == {"n": 2}
    assert _FOR_COMPLETION.first(agent.pk, "other-session", "twice") is None
    assert _FOR_COMPLETION.first(agent.pk + 1, "s", "twice") is None
    with pytest.raises(TypeError):
        _FOR_COMPLETION.first(agent.pk, "s")
