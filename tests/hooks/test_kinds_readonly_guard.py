"""The `readonly_guard` kind over the agent API: the agent's switch and the call's metadata flag."""

from __future__ import annotations

import io

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.test import Client

from approvals.models import ToolCall
from tests.conftest import apply_config, make_agent_client
from tests.hooks.policy_support import apply_example

pytestmark = pytest.mark.django_db(transaction=True)

WRITES = ("db__insert", "db__delete", "fs__write", "fs__rm")


@pytest.fixture
def ops_bot(live_gateway, transactional_db):
    apply_example("readonly_guard")
    return make_agent_client(live_gateway, "ops-bot")


def set_read_only(agent: str, state: str) -> str:
    out = io.StringIO()
    call_command("set_read_only", agent, state, stdout=out)
    return out.getvalue()


def test_the_example_lets_writes_run_while_the_switch_is_off(ops_bot):
    for tool in WRITES:
        assert ops_bot.pre_tool_use(tool, {}).json()["decision"] == "allow"


def test_the_example_blocks_every_write_tool_once_set_read_only_is_on_and_not_after_it_is_off(ops_bot):
    assert set_read_only("ops-bot", "on").strip() == "ops-bot: read-only on"

    for tool in WRITES:
        body = ops_bot.pre_tool_use(tool, {"id": 1}).json()
        assert body["decision"] == "deny"
        assert body["reason"] == f"agent ops-bot is read-only: {tool} is a write tool (writes-off)"
    assert ops_bot.pre_tool_use("db__query", {"sql": "select 1"}).json()["decision"] == "allow"
    assert set(ToolCall.objects.filter(decision="deny").values_list("decided_by_hook", flat=True)) == {"writes-off"}

    set_read_only("ops-bot", "off")
    assert ops_bot.pre_tool_use("db__delete", {"id": 1}).json()["decision"] == "allow"


def test_the_example_blocks_writes_of_a_call_flagged_by_its_metadata(ops_bot):
    body = ops_bot.pre_tool_use("db__insert", {}, metadata={"maintenance": True}).json()

    assert (body["decision"], body["reason"]) == ("deny", "metadata.maintenance is on: db__insert is a write tool (writes-off)")
    assert ops_bot.pre_tool_use("db__query", {}, metadata={"maintenance": True}).json()["decision"] == "allow"


@pytest.mark.parametrize("value", [True, "true", "on", "1"])
def test_a_flag_given_as_true_or_a_string_that_says_so_blocks(ops_bot, value):
    assert ops_bot.pre_tool_use("fs__rm", {}, metadata={"maintenance": value}).json()["decision"] == "deny"


@pytest.mark.parametrize("metadata", [{"maintenance": False}, {"maintenance": "off"}, {"read_only": True}, {}])
def test_a_flag_that_is_off_absent_or_under_another_name_does_not_block(ops_bot, metadata):
    assert ops_bot.pre_tool_use("fs__rm", {}, metadata=metadata).json()["decision"] == "allow"


def test_read_only_in_the_config_file_turns_the_switch_on(live_gateway, transactional_db):
    apply_config(
        """
channels: []
agents:
  - name: frozen
    read_only: true
    hooks: [{kind: readonly_guard, tools: ["fs__*"]}]
"""
    )
    agent = make_agent_client(live_gateway, "frozen")

    body = agent.pre_tool_use("fs__write", {}).json()

    assert (body["decision"], body["reason"]) == ("deny", "agent frozen is read-only: fs__write is a write tool (readonly_guard-1)")


def test_the_example_blocks_writes_once_the_admins_read_only_action_runs(ops_bot):
    client = Client()
    client.force_login(User.objects.create_superuser("olga", "olga@example.com", "pw"))

    response = client.post(
        "/admin/approvals/agent/", {"action": "read_only_on", "_selected_action": [ops_bot.agent.pk]}
    )

    assert response.status_code == 302
    assert ops_bot.pre_tool_use("db__delete", {}).json()["decision"] == "deny"
    assert ops_bot.pre_tool_use("db__query", {}).json()["decision"] == "allow"
