"""The per-process caches of the hot path (approvals.caches): they save the reads, and never serve a
change late — not even in the moment between a change's commit and its notification being heard."""

from __future__ import annotations

import json
import time

import pytest
from django.conf import settings
from django.db import connection
from django.db.models import F
from django.test import Client

from approvals import services
from approvals.caches import cache
from approvals.audit import audit_verify
from approvals.models import (
    Agent,
    AgentConfigVersion,
    ApiKey,
    AuditEntry,
    ConfirmationEvent,
    ConfirmationRequest,
    Outbox,
    ToolCall,
)
from gateway_utils import realtime
from hooks import state as hook_state
from hooks.models import HookState
from tests.conftest import apply_config, make_agent_client
from tests.support import on_new_connections, wait_until

pytestmark = pytest.mark.django_db(transaction=True)

CONFIG = """
channels: [{name: web, kind: web}]
agents:
  - name: cached-bot
    hooks:
      - {kind: readonly_guard, tools: ["fs__write"]}
      - {kind: approval_gate, tools: ["pay"], channel: web, approvers: [alice]}
"""


@pytest.fixture
def agent(live_gateway):
    apply_config(CONFIG)
    client = make_agent_client(live_gateway, "cached-bot")
    # The first call starts the server's listener; from then on the caches serve.
    assert client.pre_tool_use("fs__write", {}).json()["decision"] == "allow"
    wait_until(realtime.listening, what="the server's listener to connect")

    def filled() -> bool:  # a fill is dropped if a notification (this config's, say) arrives during it
        assert client.pre_tool_use("fs__write", {}).json()["decision"] == "allow"
        return cache.peek_key_holder(ApiKey.hash_key(client.key)) is not None

    wait_until(filled, what="the caches to fill")
    yield client
    client.http.close()


def changed_unheard(agent: Agent, sql: str, params: list) -> None:
    """Change the database as a service would, but with no notification: the server has not heard it."""
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
    Agent.objects.filter(pk=agent.pk).update(generation=F("generation") + 1)


def test_an_allowed_call_is_served_from_the_caches_without_reading_the_key(agent):
    # Rename the key's hash behind the gateway's back (no service, no generation bump): a call that
    # read the key would now be refused; served from the cache, it is not.
    ApiKey.objects.filter(key_hash=ApiKey.hash_key(agent.key)).update(key_hash="0" * 64)

    assert agent.pre_tool_use("web__search", {}).json()["decision"] == "allow"


def test_a_key_revoked_but_not_yet_heard_of_is_refused_at_once(agent):
    changed_unheard(agent.agent, "UPDATE approvals_apikey SET revoked_at = now() WHERE key_hash = %s",
                    [ApiKey.hash_key(agent.key)])  # fmt: skip
    calls = ToolCall.objects.count()

    response = agent.pre_tool_use("web__search", {})

    assert response.status_code == 401 and response.json()["error"]["code"] == "unauthorized"
    assert ToolCall.objects.count() == calls  # nothing recorded for a revoked key


def test_an_ask_with_a_key_revoked_but_not_yet_heard_of_is_refused_and_writes_nothing(agent):
    """The call that asks is written with its request in one statement, under the cache's condition:
    a stale one writes neither (nor their events, card or chain entries)."""
    assert agent.pre_tool_use("pay", {"amount": 1}).json()["decision"] == "pending"  # (the ask's path, warm)
    changed_unheard(agent.agent, "UPDATE approvals_apikey SET revoked_at = now() WHERE key_hash = %s",
                    [ApiKey.hash_key(agent.key)])  # fmt: skip
    before = (ToolCall.objects.count(), ConfirmationRequest.objects.count(), ConfirmationEvent.objects.count(),
              Outbox.objects.count(), AuditEntry.objects.count())  # fmt: skip

    response = agent.pre_tool_use("pay", {"amount": 2})

    assert response.status_code == 401 and response.json()["error"]["code"] == "unauthorized"
    assert (ToolCall.objects.count(), ConfirmationRequest.objects.count(), ConfirmationEvent.objects.count(),
            Outbox.objects.count(), AuditEntry.objects.count()) == before  # fmt: skip
    assert audit_verify().ok


def test_read_only_switched_on_but_not_yet_heard_of_blocks_the_next_call(agent):
    changed_unheard(agent.agent, "UPDATE approvals_agent SET read_only = true WHERE id = %s", [agent.agent.pk])

    answer = agent.pre_tool_use("fs__write", {}).json()

    assert answer["decision"] == "deny"
    assert "is read-only" in answer["reason"]


def test_new_hooks_not_yet_heard_of_decide_the_next_call(agent):
    current = AgentConfigVersion.objects.filter(agent=agent.agent).order_by("-version").first()
    deny_all = [{**current.hooks[0], "name": "guard"}, {
        "kind": "policy", "name": "no-search", "event": "pre_tool_use", "priority": 100, "tools": ["*"],
        "when": None, "on_error": "fail_closed", "rules": [{"effect": "deny", "tools": ["web__search"],
        "when": None, "reason": "no searching today"}], "default": "allow", "ask_via": None,
    }]  # fmt: skip
    changed_unheard(agent.agent, "INSERT INTO approvals_agentconfigversion (agent_id, version, hooks, source, "
                    "created_at) VALUES (%s, %s, %s::jsonb, 'test', now())",
                    [agent.agent.pk, current.version + 1, json.dumps(deny_all)])  # fmt: skip

    answer = agent.pre_tool_use("web__search", {}).json()

    assert (answer["decision"], answer["reason"]) == ("deny", "no searching today")
    assert ToolCall.objects.order_by("-created_at").first().config_version == current.version + 1


def test_a_revocation_through_the_service_is_heard_and_the_key_forgotten(agent):
    services.api_key_revoke(api_key=ApiKey.objects.get(key_hash=ApiKey.hash_key(agent.key)))

    wait_until(lambda: cache.peek_key_holder(ApiKey.hash_key(agent.key)) is None, what="the key to be forgotten")
    assert agent.pre_tool_use("web__search", {}).status_code == 401


def cached_as(agent, context: dict) -> None:
    """Call until the server has heard of the session's context and cached it (its notification may
    arrive after the first call)."""
    def cached() -> bool:
        assert agent.pre_tool_use("web__search", {}).status_code == 200
        return cache.peek_session_context("cached-bot", "s-1") == (context,)

    wait_until(cached, what=f"the session's context {context} to be cached")


def test_a_new_turn_not_yet_heard_of_is_the_one_the_next_call_is_recorded_under(agent):
    hook_state.session_remember(agent="cached-bot", session_id="s-1", values={"turn_id": "t-1"})
    cached_as(agent, {"turn_id": "t-1"})
    assert ToolCall.objects.order_by("-created_at").first().turn_id == "t-1"
    # The next turn begins, written behind the server's back: it has not heard of it.
    HookState.objects.filter(agent="cached-bot", scope=hook_state.session_scope("s-1")).update(
        value={"turn_id": "t-2"}
    )

    assert agent.pre_tool_use("web__search", {}).status_code == 200

    assert ToolCall.objects.order_by("-created_at").first().turn_id == "t-2"
    cached_as(agent, {"turn_id": "t-2"})  # and the stale entry was dropped, not kept to fail every call


def test_a_session_context_written_through_the_service_is_heard_and_forgotten(agent):
    hook_state.session_remember(agent="cached-bot", session_id="s-1", values={"user_id": "ann"})
    cached_as(agent, {"user_id": "ann"})

    hook_state.session_remember(agent="cached-bot", session_id="s-1", values={"user_id": "bob"})

    wait_until(lambda: cache.peek_session_context("cached-bot", "s-1") is None, what="the context to be forgotten")
    agent.pre_tool_use("web__search", {})
    assert ToolCall.objects.order_by("-created_at").first().user_id == "bob"


# --------------------------------------------------------------------------- a change made behind the services' back

REVOKE_ONE_KEY = "UPDATE approvals_apikey SET revoked_at = now() WHERE key_prefix = %s AND revoked_at IS NULL"
# docs/reference/commands.md, "Turning a key or an agent off": every key of the agent at once.
REVOKE_THE_AGENT = ("UPDATE approvals_apikey SET revoked_at = now() WHERE revoked_at IS NULL "
                    "AND agent_id = (SELECT id FROM approvals_agent WHERE name = %s)")  # fmt: skip


@pytest.mark.parametrize("statement", ["one key", "the whole agent"])
def test_a_key_revoked_in_sql_stops_being_served_within_the_documented_bound(agent, statement):
    bound = settings.GATEWAY_CACHE_MAX_AGE_SECONDS
    with connection.cursor() as cursor:  # an incident runbook: no service, no notification, no generation
        if statement == "one key":
            cursor.execute(REVOKE_ONE_KEY, [agent.key[:10]])
        else:
            cursor.execute(REVOKE_THE_AGENT, ["cached-bot"])
    revoked = time.monotonic()
    answers: list[tuple[float, int]] = []  # (when the request started, after the revocation; its status)

    def refused() -> bool:
        started = time.monotonic() - revoked
        answers.append((started, agent.pre_tool_use("web__search", {}).status_code))
        return answers[-1][1] == 401

    wait_until(refused, timeout=bound + 15, what=f"the revoked key to be refused (bound: {bound} s)")
    served_late = [(round(started, 2), status) for started, status in answers if started > bound and status != 401]
    assert not served_late, f"served more than {bound} s after its revocation: {served_late}"
    assert {status for _, status in answers} <= {200, 401}


def test_a_repeat_ask_checks_the_key_like_a_first_ask(agent):
    first = agent.pre_tool_use("web__search", {"q": "x"}, idempotency_key="k-1")
    assert first.status_code == 200 and first.json()["decision"] == "allow"
    # Revoked and committed; this server has not heard of it yet (the moment before its notification arrives).
    changed_unheard(agent.agent, REVOKE_ONE_KEY, [agent.key[:10]])

    again = agent.pre_tool_use("web__search", {"q": "x"}, idempotency_key="k-1")

    assert again.status_code == 401 and again.json()["error"]["code"] == "unauthorized"


def test_a_repeat_ask_to_the_django_view_checks_the_key_like_a_first_ask(agent):
    """The same through Django and DRF's view alone (as served without the ASGI layer)."""
    client = Client(HTTP_AUTHORIZATION=f"Bearer {agent.key}")
    body = json.dumps({"session_id": "s-1", "tool_name": "web__search", "idempotency_key": "k-2"})
    assert client.post("/api/v1/hooks/pre-tool-use", body, content_type="application/json").status_code == 200
    with connection.cursor() as cursor:
        cursor.execute(REVOKE_ONE_KEY, [agent.key[:10]])

    again = client.post("/api/v1/hooks/pre-tool-use", body, content_type="application/json")

    assert again.status_code == 401 and again.json()["error"]["code"] == "unauthorized"
    unknown = Client(HTTP_AUTHORIZATION="Bearer gw_unknown")
    assert unknown.post("/api/v1/hooks/pre-tool-use", body, content_type="application/json").status_code == 401


def test_an_allowed_call_served_from_the_caches_is_one_statement(agent):
    """The hot path's whole cost to the database: the call and its chain entry, one INSERT. (The
    agent it is served for is built from the cached key holder — with its team, so that building it
    reads nothing either: a field's default would read the default team on every call.)"""
    sent: list[str] = []

    def count(execute, sql, params, many, context):
        sent.append(sql)
        return execute(sql, params, many, context)

    assert agent.pre_tool_use("web__search", {}).json()["decision"] == "allow"  # (the key's use noted: once a minute)
    with on_new_connections(count):
        assert agent.pre_tool_use("web__search", {"q": "x"}).json()["decision"] == "allow"
    assert not [sql for sql in sent if "approvals_team" in sql], sent
    assert len(sent) == 1 and "INSERT INTO" in sent[0] and "approvals_toolcall" in sent[0], sent


def test_an_ask_served_from_the_caches_reads_no_channel(agent):
    """The channel a gate names is cached with the agent's hooks: an ask reads it once per process."""
    sent: list[str] = []

    def count(execute, sql, params, many, context):
        sent.append(sql)
        return execute(sql, params, many, context)

    assert agent.pre_tool_use("pay", {"amount": 1}).json()["decision"] == "pending"
    with on_new_connections(count):
        assert agent.pre_tool_use("pay", {"amount": 2}).json()["decision"] == "pending"
    assert sent and not [sql for sql in sent if 'FROM "approvals_channel"' in sql], sent


CARDS_ON_SLACK = CONFIG.replace(
    "channels: [{name: web, kind: web}]",
    "channels: [{name: web, kind: slack, bot_token: xoxb-1-2-cached, signing_secret: cached-secret, "
    "channel_id: C0CACHED, api_base_url: 'http://127.0.0.1:9/api/'}]",
)


def test_a_channel_changed_through_the_config_is_the_one_the_next_ask_uses(agent):
    first = agent.pre_tool_use("pay", {"amount": 1}).json()
    assert Outbox.objects.get(confirmation_id=first["confirmation_id"], kind="card").status == "sent"  # the page

    apply_config(CARDS_ON_SLACK)  # committed; whether or not this server has heard of it yet
    then = agent.pre_tool_use("pay", {"amount": 2}).json()

    card = Outbox.objects.get(confirmation_id=then["confirmation_id"], kind="card")
    assert card.status == "pending"  # a card for a worker to post to Slack, not the web page
    assert audit_verify().ok
