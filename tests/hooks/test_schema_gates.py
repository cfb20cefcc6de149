"""The config file's validator (docs/reference/config.md) on the approval_gate and policy hook kinds:
quorums, timers, edit scopes and warnings, and a policy's ask_via naming a gate of its agent."""

from approvals.config_schema import config_json_schema as hooks_json_schema
from hooks.registry import validate_agent_hooks

from tests.hooks.schema_support import gate, hook_problems


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
        ("hooks[1].escalate_to", "needs escalate_after_seconds or escalate_after_seconds_by_risk"),
    ]


def test_escalate_after_seconds_by_risk_names_risks_with_positive_seconds_and_needs_escalate_to():
    to = {"escalate_to": {"channel": "web"}}
    assert hook_problems(
        gate(escalate_after_seconds_by_risk={"high": 30}),
        gate(escalate_after_seconds_by_risk={"extreme": 30}, **to),
        gate(escalate_after_seconds_by_risk={"high": 0}, **to),
        gate(escalate_after_seconds_by_risk={}, **to),
        gate(escalate_after_seconds_by_risk=[30], **to),
    ) == [
        ("hooks[0].escalate_to", "is required when escalate_after_seconds_by_risk is set"),
        ("hooks[1].escalate_after_seconds_by_risk.extreme.[key]", "must be 'low', 'medium' or 'high'"),
        ("hooks[2].escalate_after_seconds_by_risk.high", "must be > 0"),
        ("hooks[3].escalate_after_seconds_by_risk", "names no risk: give seconds per risk, e.g. {high: 30}, or leave it out"),
        ("hooks[4].escalate_after_seconds_by_risk", "must be a mapping"),
    ]
    # With it, escalate_to no longer needs escalate_after_seconds: only the risks it names escalate.
    (only_high,) = validate_agent_hooks([gate(escalate_after_seconds_by_risk={"high": 30}, **to)])
    assert (only_high.escalate_after_seconds, only_high.escalate_after_seconds_by_risk) == (None, {"high": 30})


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
