"""The config file's validator (docs/reference/config.md) on each agent's hooks: what every hook kind
checks, then the kinds other than approval_gate and policy (test_schema_gates.py)."""

import pytest

from gateway_utils.configfile import ConfigError
from hooks.base import EVENTS
from hooks.registry import KNOWN_KINDS, validate_agent_hooks

from tests.hooks.schema_support import gate, hook_problems, problems_of


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
        ("hooks[0].rules[0].xyz", "unknown key; allowed: effect, tools, when, reason, risk")
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
