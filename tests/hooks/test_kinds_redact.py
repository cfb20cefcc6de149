"""The `redact` kind over the agent API: what is stored and shown is masked, what the agent gets is not."""

from __future__ import annotations

import logging

import pytest

from approvals import selectors
from approvals.models import ConfirmationRequest, ToolCall
from tests.conftest import apply_config, decide, make_agent_client
from tests.hooks.policy_support import apply_example

pytestmark = pytest.mark.django_db(transaction=True)

R = "[redacted]"

SECRET_ARGS = {
    "login": {"user": "ann", "Password": "hunter2", "tokens": [{"API_KEY": "sk-123"}, {"scope": "read"}]},
    "card_number": {"nested": "anything under the key goes"},
    "note": "customer paid with 4111 1111 1111 1111 yesterday",
    "card": 4111111111111111,
    "amount": 25,
}
MASKED_ARGS = {
    "login": {"user": "ann", "Password": R, "tokens": [{"API_KEY": R}, {"scope": "read"}]},
    "card_number": R,
    "note": f"customer paid with {R} yesterday",
    "card": R,
    "amount": 25,
}


@pytest.fixture
def support_bot(live_gateway, transactional_db):
    apply_example("redact")
    return make_agent_client(live_gateway, "support-bot")


def test_the_example_returns_the_agents_own_args_and_stores_them_masked(support_bot):
    body = support_bot.pre_tool_use("crm__lookup", SECRET_ARGS).json()

    assert body["decision"] == "allow"
    assert body["tool_args"] == SECRET_ARGS
    call = ToolCall.objects.get()
    assert call.tool_args == MASKED_ARGS
    assert call.response["tool_args"] is None  # the stored answer keeps no unmasked copy
    assert "hunter2" not in str(call.response) and "sk-123" not in str(call.response)
    assert body["hook_decisions"] == [
        {"hook": "secrets", "kind": "redact", "decision": "none", "reason": "stored arguments masked"}
    ]


def test_the_example_shows_the_approver_masked_args_on_the_request_and_its_card(support_bot):
    body = support_bot.pre_tool_use("billing__refund", SECRET_ARGS).json()

    assert body["decision"] == "pending"
    assert body["tool_args"] == SECRET_ARGS
    confirmation = ConfirmationRequest.objects.get(pk=body["confirmation_id"])
    assert confirmation.tool_args == MASKED_ARGS
    assert selectors.card_view(confirmation, channel_name="web").tool_args == MASKED_ARGS
    assert support_bot.http.get(f"/api/v1/confirmations/{confirmation.pk}").json()["tool_args"] == MASKED_ARGS

    decide(confirmation.pk, "approve")
    assert support_bot.wait(body["confirmation_id"]).json()["status"] == "approved"


def test_the_example_leaves_args_without_secrets_alone(support_bot):
    body = support_bot.pre_tool_use("crm__lookup", {"q": "acme", "n": 3}).json()

    assert body["hook_decisions"][0]["reason"] == ""
    assert body["tool_args"] == {"q": "acme", "n": 3}
    assert ToolCall.objects.get().tool_args == {"q": "acme", "n": 3}


def test_a_redact_hook_the_chain_never_reached_still_masks_what_a_deny_stores(live_gateway, transactional_db):
    apply_config(
        """
channels: []
agents:
  - name: late-redact
    hooks:
      - {kind: policy, name: no-logins, priority: 10, rules: [{effect: deny, tools: ["login"], reason: logins are off}]}
      - {kind: redact, name: secrets, priority: 100, keys: [password]}
"""
    )
    agent = make_agent_client(live_gateway, "late-redact")

    body = agent.pre_tool_use("login", {"user": "ann", "password": "hunter2"}).json()

    assert body["decision"] == "deny"
    assert [d["hook"] for d in body["hook_decisions"]] == ["no-logins"]
    assert ToolCall.objects.get().tool_args == {"user": "ann", "password": R}


def test_a_redact_hook_whose_when_is_false_masks_nothing(live_gateway, transactional_db):
    apply_config(
        """
channels: []
agents:
  - name: scoped-redact
    hooks:
      - {kind: redact, keys: [password], when: "tool == 'login'", replacement: "***"}
"""
    )
    agent = make_agent_client(live_gateway, "scoped-redact")

    agent.pre_tool_use("login", {"password": "a"})
    agent.pre_tool_use("debug__echo", {"password": "b"})

    assert sorted(str(call.tool_args) for call in ToolCall.objects.all()) == [
        str({"password": "***"}),
        str({"password": "b"}),
    ]


def test_masking_applies_to_args_an_earlier_hook_rewrote(live_gateway, transactional_db):
    import sys

    rewrite = "import json,sys; e=json.load(sys.stdin); a=e['tool_input']; a['token']='tok-42'; print(json.dumps({'tool_args': a}))"
    apply_config(
        f"""
channels: []
agents:
  - name: rewrite-then-redact
    hooks:
      - {{kind: command, name: add-token, event: pre_tool_use, priority: 10, command: ["{sys.executable}", "-c", "{rewrite}"]}}
      - {{kind: redact, name: secrets, priority: 20, keys: [token]}}
"""
    )
    agent = make_agent_client(live_gateway, "rewrite-then-redact")

    body = agent.pre_tool_use("api__call", {"path": "/x"}).json()

    assert body["tool_args"] == {"path": "/x", "token": "tok-42"}
    assert ToolCall.objects.get().tool_args == {"path": "/x", "token": R}


def test_nothing_unmasked_reaches_the_gateway_logs(support_bot, caplog):
    with caplog.at_level(logging.DEBUG):
        support_bot.pre_tool_use("billing__refund", SECRET_ARGS)

    logged = "\n".join(record.getMessage() for record in caplog.records)
    assert "hunter2" not in logged and "sk-123" not in logged and "4111" not in logged
