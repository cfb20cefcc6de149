"""The `policy` kind over the agent API: §3b's precedence, `when` on rules, reasons, and asks routed to a gate."""

from __future__ import annotations


import pytest

from approvals.models import ConfirmationRequest, ToolCall
from tests.conftest import apply_config, decide, make_agent_client
from tests.hooks.policy_support import apply_example

pytestmark = pytest.mark.django_db(transaction=True)



@pytest.fixture
def crm_bot(live_gateway, transactional_db):
    """The agent of examples/policies/policy.yaml, applied as apply_config would."""
    apply_example("policy")
    return make_agent_client(live_gateway, "crm-bot")


# --- the example behaves as its comments say -------------------------------------------


def test_the_example_allows_crm_tools_by_the_prefix_rule_over_the_global_deny(crm_bot):
    for tool in ("crm__search", "crm__get_contact"):
        body = crm_bot.pre_tool_use(tool, {"q": "acme"}).json()
        assert (body["decision"], body["reason"]) == ("allow", "routine CRM work")


def test_the_example_denies_a_crm_tool_for_the_eu_region_as_deny_beats_allow_at_one_specificity(crm_bot):
    body = crm_bot.pre_tool_use("crm__search", {"q": "acme"}, metadata={"region": "eu"}).json()

    assert (body["decision"], body["reason"]) == ("deny", "EU customer data stays in the EU deployment")
    assert crm_bot.pre_tool_use("crm__search", {}, metadata={"region": "us"}).json()["decision"] == "allow"


def test_the_example_asks_the_named_gate_before_deleting_a_contact(crm_bot):
    body = crm_bot.pre_tool_use("crm__delete_contact", {"id": 7}, user_id="u-1").json()

    assert body["decision"] == "pending"
    assert body["reason"] == "deleting a contact needs a human"
    assert body["hook_decisions"] == [
        {"hook": "crm-policy", "kind": "policy", "decision": "ask", "reason": "deleting a contact needs a human"}
    ]
    confirmation = ConfirmationRequest.objects.get(pk=body["confirmation_id"])
    assert (confirmation.hook_name, confirmation.approvers) == ("crm-approval", ["alice", "bob"])
    assert confirmation.reason == "deleting a contact needs a human"  # what the card says

    decide(confirmation.pk, "approve", actor="bob")
    assert crm_bot.wait(body["confirmation_id"]).json()["status"] == "approved"


def test_the_example_asks_for_an_exact_rule_even_where_a_prefix_rule_would_deny(crm_bot):
    body = crm_bot.pre_tool_use("crm__delete_contact", {"id": 7}, metadata={"region": "eu"}).json()

    assert (body["decision"], body["reason"]) == ("pending", "deleting a contact needs a human")


def test_the_example_denies_bulk_exports_by_their_exact_rule(crm_bot):
    body = crm_bot.pre_tool_use("crm__export_all", {}).json()

    assert (body["decision"], body["reason"]) == ("deny", "bulk exports are never allowed")
    call = ToolCall.objects.get()
    assert (call.decision, call.decided_by_hook, call.reason) == ("deny", "crm-policy", "bulk exports are never allowed")


def test_the_example_asks_only_when_an_update_changes_the_owner(crm_bot):
    owner = crm_bot.pre_tool_use("crm__update_contact", {"id": 7, "fields": {"owner": "bob"}}).json()
    phone = crm_bot.pre_tool_use("crm__update_contact", {"id": 7, "fields": {"phone": "555"}}).json()

    assert (owner["decision"], owner["reason"]) == ("pending", "changing a contact's owner needs a human")
    assert (phone["decision"], phone["reason"]) == ("allow", "routine CRM work")


def test_the_example_denies_every_other_tool_and_its_gate_never_asks_on_its_own(crm_bot):
    body = crm_bot.pre_tool_use("web__search", {"q": "x"}).json()

    assert (body["decision"], body["reason"]) == ("deny", "not a CRM tool")
    assert [d["hook"] for d in body["hook_decisions"]] == ["crm-policy"]  # crm-approval (tools: *) did not run
    assert ConfirmationRequest.objects.count() == 0


# --- the nine buckets ------------------------------------------------------------------

# Rules in file order weakest first, so order cannot be what decides. Each rule
# applies only when the call's args carry its flag.
NINE_BUCKETS = """
channels: [{name: web, kind: web}]
agents:
  - name: buckets
    hooks:
      - {kind: approval_gate, name: gate, channel: web}
      - kind: policy
        name: p
        ask_via: gate
        rules:
          - {effect: allow, tools: ["*"], when: "has(args.global_allow)", reason: global allow}
          - {effect: ask, tools: ["*"], when: "has(args.global_ask)", reason: global ask}
          - {effect: deny, tools: ["*"], when: "has(args.global_deny)", reason: global deny}
          - {effect: allow, tools: ["srv__*"], when: "has(args.prefix_allow)", reason: prefix allow}
          - {effect: ask, tools: ["srv__*"], when: "has(args.prefix_ask)", reason: prefix ask}
          - {effect: deny, tools: ["srv__*"], when: "has(args.prefix_deny)", reason: prefix deny}
          - {effect: allow, tools: ["srv__tool"], when: "has(args.exact_allow)", reason: exact allow}
          - {effect: ask, tools: ["srv__tool"], when: "has(args.exact_ask)", reason: exact ask}
          - {effect: deny, tools: ["srv__tool"], when: "has(args.exact_deny)", reason: exact deny}
"""


@pytest.mark.parametrize(
    ("flags", "decision", "reason"),
    [
        # at one specificity: deny > ask > allow
        (["exact_allow", "exact_ask", "exact_deny"], "deny", "exact deny"),
        (["exact_allow", "exact_ask"], "pending", "exact ask"),
        (["exact_allow"], "allow", "exact allow"),
        (["prefix_allow", "prefix_ask", "prefix_deny"], "deny", "prefix deny"),
        (["prefix_allow", "prefix_ask"], "pending", "prefix ask"),
        (["global_allow", "global_ask", "global_deny"], "deny", "global deny"),
        (["global_allow", "global_ask"], "pending", "global ask"),
        # across specificities: exact > prefix > global, whatever the effects
        (["exact_allow", "prefix_deny", "global_deny"], "allow", "exact allow"),
        (["exact_ask", "prefix_deny"], "pending", "exact ask"),
        (["prefix_allow", "global_deny"], "allow", "prefix allow"),
        (["prefix_ask", "global_deny"], "pending", "prefix ask"),
        # nothing matches: the default
        ([], "allow", "no rule of p matched; default: allow"),
    ],
)
def test_the_strongest_of_the_nine_buckets_decides(live_gateway, transactional_db, flags, decision, reason):
    apply_config(NINE_BUCKETS)
    agent = make_agent_client(live_gateway, "buckets")

    body = agent.pre_tool_use("srv__tool", {flag: True for flag in flags}).json()

    assert (body["decision"], body["reason"]) == (decision, reason)


def test_a_prefix_rule_does_not_name_a_tool_outside_its_prefix(live_gateway, transactional_db):
    apply_config(NINE_BUCKETS)
    agent = make_agent_client(live_gateway, "buckets")

    body = agent.pre_tool_use("other__tool", {"prefix_deny": True, "exact_deny": True, "global_allow": True}).json()

    assert (body["decision"], body["reason"]) == ("allow", "global allow")


def test_a_rule_without_a_reason_is_named_in_the_reason(live_gateway, transactional_db):
    apply_config(
        """
channels: []
agents:
  - name: terse
    hooks:
      - {kind: policy, name: terse-policy, rules: [{effect: allow, tools: ["a"]}, {effect: deny, tools: ["b"]}]}
"""
    )
    agent = make_agent_client(live_gateway, "terse")

    assert agent.pre_tool_use("b").json()["reason"] == "deny by terse-policy rules[1]"


def test_a_default_deny_applies_when_no_rule_names_the_tool(live_gateway, transactional_db):
    apply_config(
        """
channels: []
agents:
  - name: strict
    hooks: [{kind: policy, name: allow-list, default: deny, rules: [{effect: allow, tools: ["web__search"]}]}]
"""
    )
    agent = make_agent_client(live_gateway, "strict")

    assert agent.pre_tool_use("web__search").json()["decision"] == "allow"
    body = agent.pre_tool_use("fs__delete").json()
    assert (body["decision"], body["reason"]) == ("deny", "no rule of allow-list matched; default: deny")


def test_a_when_that_cannot_be_evaluated_denies_naming_the_hook(live_gateway, transactional_db):
    apply_config(
        """
channels: []
agents:
  - name: amounts
    hooks:
      - kind: policy
        name: big-payments
        rules: [{effect: deny, tools: ["pay"], when: "args.amount > 1000", reason: too big}]
"""
    )
    agent = make_agent_client(live_gateway, "amounts")

    assert agent.pre_tool_use("pay", {"amount": 5000}).json()["reason"] == "too big"
    assert agent.pre_tool_use("pay", {"amount": 5}).json()["decision"] == "allow"
    body = agent.pre_tool_use("pay", {}).json()  # no amount: fail_closed
    assert body["decision"] == "deny"
    assert body["reason"].startswith("hook big-payments failed: evaluating 'args.amount > 1000': no such key")


def test_a_policy_with_its_own_when_applies_only_where_it_holds(live_gateway, transactional_db):
    apply_config(
        """
channels: []
agents:
  - name: scoped
    hooks:
      - {kind: policy, name: prod-only, when: "metadata.env == 'prod'", default: deny}
"""
    )
    agent = make_agent_client(live_gateway, "scoped")

    assert agent.pre_tool_use("fs__delete", metadata={"env": "prod"}).json()["decision"] == "deny"
    body = agent.pre_tool_use("fs__delete", metadata={"env": "dev"}).json()
    assert (body["decision"], body["hook_decisions"]) == ("allow", [])
