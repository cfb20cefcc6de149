"""The `command` kind over the agent API: Claude Code's hook protocol, its time budget and on_error."""

from __future__ import annotations

import json
import sys

import pytest

from tests.conftest import apply_config, make_agent_client
from tests.hooks.policy_support import apply_example

pytestmark = pytest.mark.django_db(transaction=True)



@pytest.fixture
def shell_bot(live_gateway, transactional_db):
    apply_example("command")
    return make_agent_client(live_gateway, "shell-bot")


def test_the_example_denies_rm_rf_with_the_scripts_stderr(shell_bot):
    body = shell_bot.pre_tool_use("shell__run", {"command": "rm -rf /tmp/x"}).json()

    assert (body["decision"], body["reason"]) == ("deny", "refusing rm -rf")
    assert body["hook_decisions"][0]["hook"] == "no-rm-rf"


def test_the_example_allows_other_commands_and_other_tools(shell_bot):
    assert shell_bot.pre_tool_use("shell__run", {"command": "ls -la"}).json()["decision"] == "allow"
    body = shell_bot.pre_tool_use("web__search", {"command": "rm -rf"}).json()  # not in the hook's tools
    assert (body["decision"], body["hook_decisions"]) == ("allow", [])


def scripted(live_gateway, script: str, **keys) -> object:
    extra = "".join(f", {key}: {json.dumps(value)}" for key, value in keys.items())
    apply_config(
        f"""
channels: []
agents:
  - name: scripted
    hooks: [{{kind: command, name: script, event: pre_tool_use, command: {json.dumps([sys.executable, "-c", script])}{extra}}}]
"""
    )
    return make_agent_client(live_gateway, "scripted")


def test_the_script_reads_the_event_as_claude_code_sends_it(live_gateway, transactional_db):
    echo = "import json,sys; e=json.load(sys.stdin); print(json.dumps({'decision': 'deny', 'reason': json.dumps(e, sort_keys=True)}))"
    agent = scripted(live_gateway, echo)

    body = agent.pre_tool_use("pay", {"amount": 5}, user_id="u-1", tool_call_id="c-1", metadata={"org": "acme"}).json()

    event = json.loads(body["reason"])
    assert event["hook_event_name"] == "PreToolUse"
    assert (event["tool_name"], event["tool_input"], event["tool_use_id"]) == ("pay", {"amount": 5}, "c-1")
    assert (event["session_id"], event["user_id"], event["metadata"]) == ("s-1", "u-1", {"org": "acme"})


def test_a_claude_code_answer_can_rewrite_the_args(live_gateway, transactional_db):
    answer = {"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "allow", "updatedInput": {"amount": 1}}}
    agent = scripted(live_gateway, f"print({json.dumps(json.dumps(answer))})")

    body = agent.pre_tool_use("pay", {"amount": 5}).json()

    assert (body["decision"], body["tool_args"]) == ("allow", {"amount": 1})


def test_a_script_past_its_time_budget_denies_naming_the_hook(live_gateway, transactional_db):
    agent = scripted(live_gateway, "import time; time.sleep(5)", timeout_ms=300)

    body = agent.pre_tool_use("pay", {}).json()

    assert (body["decision"], body["reason"]) == ("deny", "hook script failed: timed out after 300 ms")


def test_a_crashing_script_denies_naming_the_hook_or_is_ignored_with_fail_open(live_gateway, transactional_db):
    agent = scripted(live_gateway, "import sys; sys.stderr.write('boom'); sys.exit(1)")
    body = agent.pre_tool_use("pay", {}).json()
    assert (body["decision"], body["reason"]) == ("deny", "hook script failed: exited 1: boom")

    agent = scripted(live_gateway, "import sys; sys.exit(1)", on_error="fail_open")
    body = agent.pre_tool_use("pay", {}).json()
    assert (body["decision"], body["side_effects"]) == ("allow", ["hook_error:script"])
