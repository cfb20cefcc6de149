"""The config file's validator (docs/reference/config.md): approvals.config_schema with the
hook kinds' models (hooks.registry) and the channel kinds' (channels_ext)."""

import io
import json
import textwrap
from typing import Any, get_args

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


def problems_of(text: str, environ: dict[str, str] | None = None) -> list[ConfigProblem]:
    with pytest.raises(ConfigError) as excinfo:
        parse_config_text(textwrap.dedent(text), environ=environ or {})
    return excinfo.value.problems


def hook_problems(*hooks: Any) -> list[ConfigProblem]:
    with pytest.raises(ConfigError) as excinfo:
        validate_agent_hooks(list(hooks), channel_names={"web"})
    return excinfo.value.problems


def gate(**keys: Any) -> dict[str, Any]:
    return {"kind": "approval_gate", "channel": "web", **keys}


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


# --- every hook ------------------------------------------------------------------------


def test_it_refuses_an_unknown_kind_with_one_problem_listing_the_known_ones():
    problems = problems_of("""
        agents:
          - name: a
            hooks: [{kind: turn_limit, max_turns: 1}, {kind: approval_gate, channel: w}, {kind: sandbox}]
    """)

    assert problems == [
        (
            "agents[0].hooks[2].kind",
            "unknown hook kind 'sandbox'; known kinds: approval_gate, policy, readonly_guard, rate_limit, redact,"
            " command, webhook, truncate_result, inject_tool_result, retry_on_error, turn_limit",
        ),
        ("agents[0].hooks[1].channel", "unknown channel 'w'; no channels are configured"),
    ]


def test_it_keeps_the_kind_out_of_nested_paths():
    problems = problems_of("agents: [{name: a, hooks: [{kind: policy, rules: [{effect: maybe}]}]}]")

    assert problems == [("agents[0].hooks[0].rules[0].effect", "must be 'allow', 'deny' or 'ask'")]


def test_it_refuses_a_hook_without_a_kind():
    assert hook_problems({"max_turns": 1}) == [("hooks[0].kind", f"is required; known kinds: {', '.join(KNOWN_KINDS)}")]


def test_it_refuses_a_hook_that_is_not_a_mapping():
    assert hook_problems("turn_limit") == [("hooks[0]", "must be a mapping with a `kind` key")]


def test_it_refuses_a_hook_list_that_is_not_a_list():
    with pytest.raises(ConfigError) as excinfo:
        validate_agent_hooks({"kind": "turn_limit"}, path_prefix="agents[3].hooks")  # type: ignore[arg-type]

    assert excinfo.value.problems == [("agents[3].hooks", "must be a list")]


def test_it_puts_problems_under_the_given_path_prefix():
    with pytest.raises(ConfigError) as excinfo:
        validate_agent_hooks([{"kind": "turn_limit"}], path_prefix="agents[3].hooks")

    assert excinfo.value.problems == [("agents[3].hooks[0].max_turns", "is required")]


def test_it_suggests_the_key_meant_by_a_typo():
    assert hook_problems(
        gate(timeout=60), {"kind": "webhook", "event": "post_turn", "url": "http://x", "timout_ms": 1}
    ) == [
        ("hooks[0].timeout", "unknown key; did you mean 'on_timeout' or 'timeout_seconds'?"),
        ("hooks[1].timout_ms", "unknown key; did you mean 'timeout_ms'?"),
    ]


def test_it_lists_the_allowed_keys_for_an_unknown_key_in_a_nested_mapping():
    assert hook_problems({"kind": "policy", "rules": [{"effect": "deny", "xyz": 1}]}) == [
        ("hooks[0].rules[0].xyz", "unknown key; allowed: effect, tools, when, reason")
    ]


def test_it_refuses_an_event_the_kind_cannot_run_at():
    assert hook_problems(
        gate(event="post_tool_use"), {"kind": "turn_limit", "max_turns": 1, "event": "pre_tool_use"}
    ) == [
        ("hooks[0].event", "must be 'pre_tool_use'"),
        ("hooks[1].event", "must be 'pre_turn'"),
    ]


@pytest.mark.parametrize(
    "hook",
    [{"kind": "command", "command": ["true"]}, {"kind": "webhook", "url": "https://example.com"}],
    ids=["command", "webhook"],
)
def test_it_requires_an_event_for_kinds_that_run_at_any(hook):
    assert hook_problems(hook) == [("hooks[0].event", "is required")]


def test_it_lets_command_and_webhook_run_at_every_event():
    hooks = validate_agent_hooks([{"kind": "command", "command": ["true"], "event": event} for event in EVENTS])

    assert [hook.event for hook in hooks] == list(EVENTS)


@pytest.mark.parametrize("pattern", ["Bash", "oa__purchase_pay", "mcp__github__*", "*"])
def test_it_accepts_exact_names_prefixes_and_star(pattern):
    assert validate_agent_hooks([gate(tools=[pattern])])[0].tools == [pattern]


@pytest.mark.parametrize("pattern", ["oa_*", "*__pay", "oa__pay?", "oa__[ab]*", "__*", "oa__*__*"])
def test_it_refuses_other_glob_shapes(pattern):
    assert hook_problems(gate(tools=["Bash", pattern])) == [
        ("hooks[0].tools[1]", "must be an exact tool name, 'prefix__*' or '*'")
    ]


def test_it_refuses_an_empty_tools_list():
    assert hook_problems(gate(tools=[])) == [("hooks[0].tools", "must not be empty")]


def test_it_refuses_a_when_expression_that_does_not_compile():
    assert hook_problems(gate(when="args.amount >")) == [
        ("hooks[0].when", "invalid CEL expression: column 14: mismatched input '<EOF>'")
    ]


def test_it_refuses_a_when_expression_with_an_unknown_identifier():
    assert hook_problems({"kind": "policy", "rules": [{"effect": "deny", "when": "amount > 5"}]}) == [
        (
            "hooks[0].rules[0].when",
            "unknown identifier 'amount'; a `when` expression may use tool, args, user, session, agent, metadata",
        )
    ]


def test_it_refuses_an_unknown_on_error():
    assert hook_problems(gate(on_error="ignore")) == [("hooks[0].on_error", "must be 'fail_closed' or 'fail_open'")]


def test_it_refuses_duplicate_hook_names_including_defaulted_ones():
    problems = hook_problems(gate(name="approval_gate-2"), gate(), gate(name="approval_gate-2"))

    assert problems == [
        ("hooks[1].name", "'approval_gate-2' is already used by hooks[0]"),
        ("hooks[2].name", "'approval_gate-2' is already used by hooks[0]"),
    ]


# approval_gate


def test_it_refuses_more_approvals_than_approvers():
    assert hook_problems(gate(approvers=["a", "b"], approvals_required=3)) == [
        ("hooks[0].approvals_required", "must be <= the number of approvers (2)")
    ]


def test_it_allows_a_quorum_of_any_members():
    assert validate_agent_hooks([gate(approvals_required=3)])[0].approvals_required == 3


def test_it_refuses_a_zero_quorum_and_an_unknown_on_timeout():
    assert hook_problems(gate(approvals_required=0, on_timeout="escalate")) == [
        ("hooks[0].approvals_required", "must be >= 1"),
        ("hooks[0].on_timeout", "must be 'deny' or 'allow'"),
    ]


def test_it_requires_escalate_to_with_escalate_after_seconds_and_the_reverse():
    assert hook_problems(gate(escalate_after_seconds=60), gate(escalate_to={"channel": "web"})) == [
        ("hooks[0].escalate_to", "is required when escalate_after_seconds is set"),
        ("hooks[1].escalate_to", "needs escalate_after_seconds"),
    ]


def test_it_refuses_non_positive_reminders():
    assert hook_problems(gate(remind_after_seconds=0)) == [("hooks[0].remind_after_seconds", "must be > 0")]


def test_a_gate_offers_no_edit_no_scope_and_no_warning_unless_it_says_so():
    (plain,) = validate_agent_hooks([gate()])
    assert (plain.allow_edit, plain.grants, plain.warn_before_seconds) == (False, [], None)

    (generous,) = validate_agent_hooks(
        [gate(allow_edit=["amount", "shipping.city"], warn_before_seconds=300,
              grants=[{"scope": "session"}, {"scope": "minutes", "minutes": 30, "args": "any"}])]
    )  # fmt: skip
    assert generous.allow_edit == ["amount", "shipping.city"]
    assert [g.model_dump() for g in generous.grants] == [
        {"scope": "session", "minutes": None, "args": "same"},
        {"scope": "minutes", "minutes": 30, "args": "any"},
    ]


def test_it_names_each_bad_edit_scope_and_warning_key():
    assert hook_problems(
        gate(allow_edit="amount"),
        gate(allow_edit=["a..b"]),
        gate(grants=[{"scope": "minutes"}, {"scope": "session", "minutes": 5}, {"scope": "forever"}]),
        gate(approvers=["a", "b"], approvals_required=2, allow_edit=True, grants=[{"scope": "session"}]),
        gate(timeout_seconds=600, warn_before_seconds=600),
        gate(timeout_seconds=None, warn_before_seconds=60),
    ) == [
        ("hooks[0].allow_edit", "must be true, false or a list of argument paths"),
        ("hooks[1].allow_edit", "item 0: 'a..b' is not an argument path (keys joined by dots: `shipping.city`)"),
        ("hooks[2].grants[0]", "scope: minutes needs minutes"),
        ("hooks[2].grants[1]", "minutes is only for scope: minutes"),
        ("hooks[2].grants[2].scope", "must be 'session' or 'minutes'"),
        ("hooks[3].allow_edit", "needs approvals_required: 1 (it is 2)"),
        ("hooks[3].grants", "needs approvals_required: 1 (it is 2)"),
        ("hooks[4].warn_before_seconds", "must be less than timeout_seconds (600)"),
        ("hooks[5].warn_before_seconds", "needs timeout_seconds (a request that never expires has no deadline to warn of)"),
    ]


def test_it_refuses_a_warning_finer_than_the_timers_that_send_it(settings):
    settings.GATEWAY_TIMERS_INTERVAL_SECONDS = 5
    assert hook_problems(gate(timeout_seconds=600, warn_before_seconds=9)) == [
        ("hooks[0].warn_before_seconds",
         "must be at least 10: the timers that send warnings run every 5 s (GATEWAY_TIMERS_INTERVAL_SECONDS), "
         "so a shorter warning could come after the deadline"),
    ]  # fmt: skip
    (fine,) = validate_agent_hooks([gate(timeout_seconds=600, warn_before_seconds=10)], channel_names={"web"})
    assert fine.warn_before_seconds == 10
    # A gate stored earlier still builds if the deployment's timers get coarser later.
    settings.GATEWAY_TIMERS_INTERVAL_SECONDS = 60
    (stored,) = validate_agent_hooks([gate(timeout_seconds=600, warn_before_seconds=10)], check_outbound=False)
    assert stored.warn_before_seconds == 10


def test_a_gate_declares_the_type_of_an_edited_value_only_for_its_editable_paths():
    (declared,) = validate_agent_hooks([gate(allow_edit=["amount", "memo"], edit_types={"amount": "number"})])
    assert declared.edit_types == {"amount": "number"}
    assert hook_problems(
        gate(allow_edit=["amount"], edit_types={"memo": "string"}),
        gate(allow_edit=True, edit_types={"shipping.city": "string"}),
        gate(edit_types={"amount": "number"}),
        gate(allow_edit=["amount"], edit_types={"amount": "float"}),
    ) == [
        ("hooks[0].edit_types", "memo is not in allow_edit (amount)"),
        ("hooks[1].edit_types", "shipping.city: allow_edit: true makes only top-level arguments editable"),
        ("hooks[2].edit_types", "needs allow_edit (a type for an argument nobody may edit means nothing)"),
        ("hooks[3].edit_types.amount", "must be 'string', 'integer', 'number', 'boolean', 'object', 'array' or 'any'"),
    ]


def test_the_json_schema_describes_the_edit_scope_and_warning_keys():
    gate_schema = hooks_json_schema()["$defs"]["ApprovalGateConfig"]["properties"]
    assert {"allow_edit", "edit_types", "grants", "warn_before_seconds"} <= set(gate_schema)
    assert "editable argument paths" in gate_schema["allow_edit"]["description"]


def test_it_refuses_an_unknown_channel_from_the_known_ones():
    assert hook_problems(gate(channel="slack")) == [
        ("hooks[0].channel", "unknown channel 'slack'; known channels: web")
    ]


# policy


def test_it_requires_ask_via_when_a_rule_can_ask():
    assert hook_problems({"kind": "policy", "rules": [{"effect": "ask"}]}, {"kind": "policy", "default": "ask"}) == [
        ("hooks[0].ask_via", "is required when a rule or the default can ask: name an approval_gate of this agent"),
        ("hooks[1].ask_via", "is required when a rule or the default can ask: name an approval_gate of this agent"),
    ]


def test_it_refuses_an_ask_via_naming_no_approval_gate_of_the_agent():
    problems = hook_problems(
        gate(name="pay"),
        {"kind": "turn_limit", "name": "turns", "max_turns": 5},
        {"kind": "policy", "default": "ask", "ask_via": "turns"},
    )

    assert problems == [("hooks[2].ask_via", "no approval_gate named 'turns' in this agent; its approval gates: pay")]


def test_it_says_when_the_agent_has_no_approval_gate_at_all():
    assert hook_problems({"kind": "policy", "default": "ask", "ask_via": "gate"}) == [
        ("hooks[0].ask_via", "no approval_gate named 'gate' in this agent; it has none")
    ]


# the other kinds


def test_it_requires_a_rate_limits_limit_and_window():
    assert hook_problems({"kind": "rate_limit", "per": "team"}) == [
        ("hooks[0].limit", "is required"),
        ("hooks[0].window_seconds", "is required"),
        ("hooks[0].per", "must be 'user', 'session' or 'agent'"),
    ]


def test_it_names_the_bad_regex_of_a_redact_hook():
    (problem,) = hook_problems({"kind": "redact", "patterns": [r"\d+", "(unclosed"]})

    assert problem.path == "hooks[0].patterns[1]"
    assert problem.message.startswith("is not a valid regular expression: missing ), unterminated subpattern")


def test_it_refuses_a_redact_hook_with_nothing_to_redact():
    assert hook_problems({"kind": "redact"}) == [("hooks[0]", "needs keys or patterns (or both)")]


def test_it_refuses_an_empty_command_and_a_bad_timeout():
    assert hook_problems({"kind": "command", "event": "pre_tool_use", "command": [], "timeout_ms": 0}) == [
        ("hooks[0].command", "must not be empty"),
        ("hooks[0].timeout_ms", "must be > 0"),
    ]


@pytest.mark.parametrize("url", ["ftp://example.com/x", "example.com/hook", "https://"])
def test_it_refuses_a_webhook_url_that_is_not_http(url):
    assert hook_problems({"kind": "webhook", "event": "post_turn", "url": url}) == [
        ("hooks[0].url", "must be an http or https URL")
    ]


def test_it_refuses_a_truncation_to_nothing():
    assert hook_problems({"kind": "truncate_result", "max_chars": 0}) == [("hooks[0].max_chars", "must be >= 1")]


def test_it_requires_exactly_one_inject_source():
    both = {"url": "https://example.com", "mcp": {"url": "https://mcp.example.com"}}
    problems = hook_problems(
        {"kind": "inject_tool_result", "tool_name": "t", "source": both},
        {"kind": "inject_tool_result", "tool_name": "t", "source": {}},
        {"kind": "inject_tool_result", "tool_name": "t"},
    )

    assert problems == [
        ("hooks[0].source", "needs exactly one of url or mcp"),
        ("hooks[1].source", "needs exactly one of url or mcp"),
        ("hooks[2].source", "is required"),
    ]


def test_it_refuses_a_malformed_mcp_source():
    problems = hook_problems(
        {"kind": "inject_tool_result", "tool_name": "t", "source": {"mcp": {"command": ["x"], "url": "https://m"}}},
        {"kind": "inject_tool_result", "tool_name": "t", "source": {"mcp": {"command": ["x"]}, "method": "POST"}},
        {"kind": "inject_tool_result", "tool_name": "t", "source": {"url": "https://x", "method": "PUT"}},
    )

    assert problems == [
        ("hooks[0].source.mcp", "needs exactly one of command or url"),
        ("hooks[1].source", "method and headers apply only to a url source"),
        ("hooks[2].source.method", "must be 'GET' or 'POST'"),
    ]


def test_it_refuses_an_inject_hook_at_another_event_or_with_a_zero_ttl():
    hook = {"kind": "inject_tool_result", "tool_name": "t", "source": {"url": "https://x"}}

    assert hook_problems({**hook, "event": "post_turn", "refresh": {"ttl_minutes": 0}, "frequency": "daily"}) == [
        ("hooks[0].event", "must be 'session_start' or 'pre_turn'"),
        ("hooks[0].frequency", "must be 'always', 'once' or 'append_if_changed'"),
        ("hooks[0].refresh.ttl_minutes", "must be >= 1"),
    ]


def test_it_validates_retry_settings():
    problems = hook_problems(
        {"kind": "retry_on_error", "max_attempts": 0, "backoff_seconds": -1, "max_total_seconds": 0, "errors": ["["]}
    )

    assert [path for path, _ in problems] == [
        "hooks[0].max_attempts",
        "hooks[0].backoff_seconds",
        "hooks[0].max_total_seconds",
        "hooks[0].errors[0]",
    ]
    assert [message for _, message in problems][:3] == ["must be >= 1", "must be >= 0", "must be > 0"]


def test_it_requires_a_turn_limits_max_turns():
    assert hook_problems({"kind": "turn_limit"}) == [("hooks[0].max_turns", "is required")]


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
