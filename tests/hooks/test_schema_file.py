"""The config file's validator (docs/reference/config.md) on a whole file: a valid one, the problems it
collects, the file's own shape; the models and the JSON schema. approvals.config_schema with the hook
kinds' models (hooks.registry) and the channel kinds' (channels_ext)."""

import io
import json
import textwrap
from typing import get_args

import pytest
from django.core.management import call_command

from approvals.config_schema import config_json_schema as hooks_json_schema
from approvals.config_schema import load_config_file, parse_config_text
from channels_ext.feishu.config import FeishuChannelConfig
from channels_ext.slack.config import SlackChannelConfig
from channels_ext.web.config import WebChannelConfig
from gateway_utils.configfile import ConfigError, ConfigProblem
from hooks.base import EVENTS
from hooks.builtin.approval_gate import ApprovalGateConfig
from hooks.builtin.inject_tool_result import InjectToolResultConfig
from hooks.builtin.policy import PolicyConfig
from hooks.config import Event
from hooks.registry import HOOK_CONFIG_MODELS, KNOWN_KINDS, validate_agent_hooks

from tests.hooks.schema_support import gate, problems_of

FULL_CONFIG = """
channels:
  - name: ops-slack
    kind: slack
    bot_token: ${SLACK_BOT_TOKEN}
    signing_secret: ${SLACK_SIGNING_SECRET}
    channel_id: C0123456789
  - name: finance-feishu
    kind: feishu
    app_id: cli_a
    app_secret: s
    verification_token: v
    chat_id: oc_0123456789abcdef
  - name: web
    kind: web
agents:
  - name: purchasing-bot
    read_only: false
    hooks:
      - kind: approval_gate
        name: pay-gate
        tools: ["oa__purchase_pay"]
        channel: finance-feishu
        approvers: ["ou_abc", "ou_def"]
        approvals_required: 2
        timeout_seconds: 1800
        on_timeout: deny
        remind_after_seconds: 600
        escalate_after_seconds: 1200
        escalate_to: {channel: ops-slack, approvers: ["U1"]}
        allow_self_approval: false
      - kind: policy
        priority: 10
        rules:
          - {effect: deny, tools: ["oa__*"], when: "args.amount > 100000", reason: too much}
          - {effect: ask, tools: ["oa__purchase_pay"]}
        default: allow
        ask_via: pay-gate
      - kind: readonly_guard
        tools: ["oa__*"]
      - kind: rate_limit
        limit: 10
        window_seconds: 60
        per: session
      - kind: redact
        keys: [password, token]
        patterns: ['\\d{16}']
      - kind: command
        event: pre_tool_use
        command: ["./check.sh", "--strict"]
        on_error: fail_open
      - kind: webhook
        event: post_turn
        url: https://hooks.example.com/gateway
        secret: ${WEBHOOK_SECRET}
      - kind: truncate_result
        max_chars: 20000
      - kind: inject_tool_result
        tool_name: get_policies
        source: {url: "https://intranet.example.com/policies", headers: {Accept: application/json}}
        frequency: append_if_changed
        refresh: {ttl_minutes: 30}
      - kind: inject_tool_result
        event: pre_turn
        toolset_name: crm
        tool_name: crm_summary
        arguments: {limit: 5}
        source: {mcp: {command: ["crm-mcp", "--stdio"]}}
      - kind: retry_on_error
        errors: ["timed out", "^5\\\\d\\\\d"]
      - kind: turn_limit
        max_turns: 50
        when: "agent == 'purchasing-bot'"
"""
ENVIRON = {"SLACK_BOT_TOKEN": "xoxb-1", "SLACK_SIGNING_SECRET": "sig", "WEBHOOK_SECRET": "whsec"}


# --- a valid file -----------------------------------------------------------------


def test_it_parses_a_full_config_covering_every_kind():
    config = parse_config_text(FULL_CONFIG, environ=ENVIRON)

    assert [type(channel) for channel in config.channels] == [SlackChannelConfig, FeishuChannelConfig, WebChannelConfig]
    (agent,) = config.agents
    assert {hook.kind for hook in agent.hooks} == set(KNOWN_KINDS)
    assert [hook.name for hook in agent.hooks] == [
        "pay-gate", "policy-2", "readonly_guard-3", "rate_limit-4", "redact-5", "command-6", "webhook-7",
        "truncate_result-8", "inject_tool_result-9", "inject_tool_result-10", "retry_on_error-11", "turn_limit-12",
    ]  # fmt: skip
    assert [hook.event for hook in agent.hooks] == [
        "pre_tool_use", "pre_tool_use", "pre_tool_use", "pre_tool_use", "pre_tool_use", "pre_tool_use",
        "post_turn", "post_tool_use", "session_start", "pre_turn", "tool_error", "pre_turn",
    ]  # fmt: skip


def test_it_fills_in_the_documented_defaults():
    config = parse_config_text(FULL_CONFIG, environ=ENVIRON)
    hooks = {hook.name: hook for hook in config.agents[0].hooks}

    policy = hooks["policy-2"]
    assert (policy.rules[1].tools, policy.rules[1].when, policy.rules[1].reason) == (["oa__purchase_pay"], None, "")
    assert (hooks["readonly_guard-3"].flag, hooks["readonly_guard-3"].priority) == ("read_only", 100)
    assert hooks["redact-5"].replacement == "[redacted]"
    assert (hooks["command-6"].timeout_ms, hooks["command-6"].on_error) == (5000, "fail_open")
    assert hooks["webhook-7"].timeout_ms == 3000
    assert hooks["inject_tool_result-9"].source.method == "GET"
    retry = hooks["retry_on_error-11"]
    assert (retry.max_attempts, retry.backoff_seconds, retry.max_total_seconds) == (3, 1, 60)
    assert (hooks["turn_limit-12"].tools, hooks["turn_limit-12"].on_error) == (["*"], "fail_closed")


def test_it_substitutes_environment_variables_into_string_values():
    config = parse_config_text(FULL_CONFIG, environ=ENVIRON)

    assert (config.channels[0].bot_token, config.channels[0].signing_secret) == ("xoxb-1", "sig")
    assert config.agents[0].hooks[6].secret == "whsec"


def test_it_substitutes_inside_a_longer_string_and_before_type_checks():
    config = parse_config_text(
        "agents: [{name: a, hooks: [{kind: turn_limit, max_turns: '${TURNS}', name: 'limit-${ENV}'}]}]",
        environ={"TURNS": "7", "ENV": "prod"},
    )

    assert (config.agents[0].hooks[0].max_turns, config.agents[0].hooks[0].name) == (7, "limit-prod")


def test_it_uses_a_fallback_when_the_variable_is_unset():
    config = parse_config_text(
        "channels: [{name: f, kind: feishu, app_id: a, app_secret: s, verification_token: v, chat_id: c,"
        " encrypt_key: '${FEISHU_ENCRYPT_KEY:-}'}]",
        environ={},
    )

    assert config.channels[0].encrypt_key == ""


def test_it_accepts_a_null_timeout_as_never_expiring():
    (never, default) = validate_agent_hooks([gate(timeout_seconds=None), gate()])

    assert (never.timeout_seconds, default.timeout_seconds) == (None, 1800)


def test_it_loads_a_file(tmp_path):
    path = tmp_path / "gateway.yaml"
    path.write_text(FULL_CONFIG)

    assert load_config_file(path, environ=ENVIRON).agents[0].name == "purchasing-bot"


def test_it_validates_one_agents_hooks_alone():
    hooks = validate_agent_hooks(
        [{"kind": "policy", "default": "ask", "ask_via": "approval_gate-2"}, gate()], channel_names={"web"}
    )

    assert [(type(hook), hook.name) for hook in hooks] == [
        (PolicyConfig, "policy-1"),
        (ApprovalGateConfig, "approval_gate-2"),
    ]


def test_it_skips_the_channel_check_without_known_channels():
    assert validate_agent_hooks([gate(channel="anywhere")])[0].channel == "anywhere"


# --- the contract's example and collecting problems --------------------------------


def test_it_names_the_path_of_a_bad_timeout():
    problems = problems_of("""
        channels: [{name: web, kind: web}]
        agents:
          - name: bot
            hooks:
              - {kind: turn_limit, max_turns: 3}
              - {kind: approval_gate, channel: web, timeout_seconds: 0}
    """)

    assert [f"{path}: {message}" for path, message in problems] == ["agents[0].hooks[1].timeout_seconds: must be > 0"]


def test_it_collects_every_problem_in_the_file_at_once():
    problems = problems_of("""
        channels:
          - {name: web, kind: web}
          - {name: ops, kind: slack, bot_token: x, signing_secret: y}
          - {name: web, kind: web}
        agents:
          - name: bot
            hooks:
              - {kind: approval_gate, channel: web, timeout_seconds: -5}
              - {kind: rate_limit, limit: 0, window_seconds: 60}
          - name: Bad Name
          - name: bot
    """)

    assert problems == [
        ("channels[1].channel_id", "is required"),
        ("channels[2].name", "'web' is already used by channels[0]"),
        ("agents[0].hooks[0].timeout_seconds", "must be > 0"),
        ("agents[0].hooks[1].limit", "must be >= 1"),
        ("agents[1].name", "must be a slug: lowercase letters, digits, '-' and '_', starting with a letter or digit"),
        ("agents[2].name", "'bot' is already used by agents[0]"),
    ]


def test_its_error_prints_one_problem_per_line():
    error = ConfigError([ConfigProblem("agents[0].name", "is required"), ConfigProblem("channels", "must be a list")])

    assert str(error) == "agents[0].name: is required\nchannels: must be a list"


# --- the file as a whole -------------------------------------------------------------


def test_it_reports_a_missing_environment_variable_at_its_path():
    problems = problems_of(FULL_CONFIG, environ={"SLACK_SIGNING_SECRET": "sig", "WEBHOOK_SECRET": "w"})

    assert problems == [("channels[0].bot_token", "environment variable SLACK_BOT_TOKEN is not set")]


def test_it_reports_a_yaml_syntax_error_with_its_line_and_column():
    problems = problems_of("agents:\n  - name: a\n    hooks: [\n")

    assert problems == [
        ("<file>", "invalid YAML at line 4, column 1: expected the node content, but found '<stream end>'")
    ]


def test_it_refuses_a_key_given_twice():
    assert problems_of("agents:\n  - name: a\n    hooks: []\n    hooks: []\n") == [
        ("<file>", "invalid YAML at line 4, column 5: duplicate key 'hooks'")
    ]


def test_it_accepts_an_overridden_merge_key():
    text = """
        agents:
          - name: a
            hooks:
              - &limit {kind: turn_limit, max_turns: 1}
              - {<<: *limit, max_turns: 2, name: second}
    """
    hooks = parse_config_text(textwrap.dedent(text), environ={}).agents[0].hooks

    assert [hook.max_turns for hook in hooks] == [1, 2]


def test_it_refuses_an_empty_file():
    assert problems_of("# nothing yet\n") == [("<file>", "must be a mapping with `channels` and `agents` keys")]


def test_it_refuses_an_unknown_top_level_key():
    assert problems_of("agent: []") == [("agent", "unknown key; did you mean 'agents'?")]


def test_it_refuses_a_list_that_is_not_a_list():
    assert problems_of("channels: {name: web}\nagents: [{name: a, hooks: 3}]") == [
        ("channels", "must be a list"),
        ("agents[0].hooks", "must be a list"),
    ]


def test_it_names_a_bad_channel_key_by_its_path():
    problems = problems_of(
        "channels: [{name: a, kind: web}, {name: b, kind: web}, {name: ops, kind: slack, bot_token: ''}]"
    )

    assert problems == [
        ("channels[2].bot_token", "must not be empty"),
        ("channels[2].signing_secret", "is required"),
        ("channels[2].channel_id", "is required"),
    ]


def test_it_refuses_an_unknown_channel_kind():
    from gateway_contract import CHANNEL_KINDS

    assert problems_of("channels: [{name: t, kind: pager}]") == [
        ("channels[0].kind", f"unknown channel kind 'pager'; known kinds: {', '.join(CHANNEL_KINDS)}")
    ]


def test_it_refuses_an_unreadable_file(tmp_path):
    with pytest.raises(ConfigError) as excinfo:
        load_config_file(tmp_path / "missing.yaml")

    assert excinfo.value.problems == [("<file>", f"cannot read {tmp_path / 'missing.yaml'}: No such file or directory")]


def test_it_checks_approval_gate_channels_against_the_files_channels():
    problems = problems_of("""
        channels: [{name: web, kind: web}]
        agents:
          - name: a
            hooks:
              - kind: approval_gate
                channel: slack
                escalate_after_seconds: 60
                escalate_to: {channel: pager}
    """)

    assert problems == [
        ("agents[0].hooks[0].channel", "unknown channel 'slack'; known channels: web"),
        ("agents[0].hooks[0].escalate_to.channel", "unknown channel 'pager'; known channels: web"),
    ]


# --- models and schema -------------------------------------------------------------------


def test_every_kind_defaults_to_the_first_event_it_supports_unless_it_runs_at_any():
    assert get_args(Event) == EVENTS
    for kind, model in HOOK_CONFIG_MODELS.items():
        event = model.model_fields["event"]
        if kind in ("command", "webhook"):
            assert (event.is_required(), model.EVENTS) == (True, EVENTS)
        else:
            assert event.default == model.EVENTS[0], kind
    assert InjectToolResultConfig.EVENTS == ("session_start", "pre_turn")


def test_it_produces_a_json_schema_naming_every_kind():
    schema = hooks_json_schema()

    hook_union = schema["$defs"]["AgentConfig"]["properties"]["hooks"]["items"]
    assert set(hook_union["discriminator"]["mapping"]) == set(KNOWN_KINDS)
    assert schema["title"] == "Gateway config"
    assert set(schema["properties"]) == {"channels", "agents"}


def test_its_command_prints_the_json_schema():
    out = io.StringIO()

    call_command("hooks_schema", stdout=out)

    assert json.loads(out.getvalue()) == hooks_json_schema()
