"""A grant stays in its scope, and the person a call is made for is part of it (docs/approving.md):
approved "for this session" for one `user_id`, it never lets another user's identical call through
— over HTTP against the live gateway, the approval given through the service every channel calls."""

from __future__ import annotations

import importlib

import pytest
from django.apps import apps

from approvals.models import Agent, Channel, ConfirmationRequest, Grant
from tests.approvals.test_turns_grants_and_batches import CONFIG, click
from tests.conftest import AgentClient, apply_config, make_agent_client

pytestmark = pytest.mark.django_db(transaction=True)

migration = importlib.import_module("approvals.migrations.0009_grant_user_scope")


@pytest.fixture
def bot(live_gateway, transactional_db):
    apply_config(CONFIG)
    client = make_agent_client(live_gateway, "bot")
    yield client
    client.http.close()


def decision(agent: AgentClient, session: str = "s-1", **fields) -> str:
    body = {"session_id": session, "tool_name": "oa__pay", "tool_args": {"amount": 7}, **fields}
    response = agent.http.post("/api/v1/hooks/pre-tool-use", json=body)
    assert response.status_code == 200, response.text
    return response.json()["decision"]


def approve_for_the_session(agent: AgentClient, **fields) -> Grant:
    body = {"session_id": "s-1", "tool_name": "oa__pay", "tool_args": {"amount": 7}, **fields}
    pending = agent.http.post("/api/v1/hooks/pre-tool-use", json=body).json()
    assert click(pending["confirmation_id"], grant=0).message == "Approved for this session (any arguments)."
    return Grant.objects.get(confirmation_id=pending["confirmation_id"])


def test_a_grant_for_one_user_never_lets_another_users_identical_call_through(bot):
    grant = approve_for_the_session(bot, user_id="u-alice")

    assert decision(bot, user_id="u-alice") == "allow"
    assert decision(bot, user_id="u-mallory") == "pending"  # another user: asked
    assert decision(bot) == "pending"  # nobody named: not the grant's user either
    assert grant.user_id == "u-alice"
    assert Grant.objects.get(pk=grant.pk).uses == 1
    assert sorted(ConfirmationRequest.objects.filter(status="pending").values_list("user_id", flat=True)) == [
        "", "u-mallory"
    ]  # fmt: skip


def test_the_sessions_user_counts_as_the_calls_and_a_grant_without_a_user_covers_only_calls_without_one(bot):
    grant = approve_for_the_session(bot)
    bot.http.post("/api/v1/hooks/session-start", json={"session_id": "s-1", "user_id": "u-bob"})

    assert decision(bot) == "pending"  # the session now says it is bob's: the grant without a user does not cover it
    assert decision(bot, session="s-1", user_id="u-bob") == "pending"
    assert decision(bot, session="s-1", user_id="u-alice") == "pending"
    assert (grant.user_id, Grant.objects.get(pk=grant.pk).uses) == ("", 0)


def test_the_allowed_answer_says_whom_the_grant_is_for(bot):
    grant = approve_for_the_session(bot, user_id="u-alice")
    body = {"session_id": "s-1", "tool_name": "oa__pay", "tool_args": {"amount": 7}, "user_id": "u-alice"}

    answer = bot.http.post("/api/v1/hooks/pre-tool-use", json=body).json()

    assert answer["reason"].startswith(
        f"allowed by grant {str(grant.pk)[:8]}: approved for this session (any arguments) for user u-alice by "
    )


def test_the_migration_scopes_existing_grants_to_the_user_of_their_request(transactional_db):
    agent = Agent.objects.create(name="bot")
    channel = Channel.objects.create(name="web", kind="web")

    def grant_from(user_id: str) -> Grant:
        request = ConfirmationRequest.objects.create(agent=agent, channel=channel, tool_name="pay", user_id=user_id)
        return Grant.objects.create(
            agent=agent, session_id="s", tool_name="pay", gate="g", scope="session", granted_by="web:a",
            confirmation=request,
        )  # fmt: skip

    for_alice, for_nobody = grant_from("u-alice"), grant_from("")

    migration.scope_existing_grants(apps, None)

    assert Grant.objects.get(pk=for_alice.pk).user_id == "u-alice"
    assert Grant.objects.get(pk=for_nobody.pk).user_id == ""
