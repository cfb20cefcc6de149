"""Risk on every request (docs/policies.md, "Risk"): a gate or a policy rule rates a call low, medium or high,
as a word or a CEL expression over the call; the request carries it, signed, in its JSON and in the metrics."""

from __future__ import annotations

import pytest
import yaml
from django.db import connection

from approvals.config_schema import ConfigError
from approvals.models import ConfirmationRequest
from tests.conftest import apply_config, make_agent_client
from tests.gateway.test_metrics import TOKEN, scrape

pytestmark = pytest.mark.django_db(transaction=True)

CONFIG = """
channels:
  - {name: web, kind: web}
agents:
  - name: risky-bot
    hooks:
      - kind: policy
        name: money
        ask_via: pay-gate
        rules:
          - {effect: ask, tools: ["pay"], risk: 'args.amount > 10000 ? "high" : "low"'}
          - {effect: ask, tools: ["refund"]}
          - {effect: ask, tools: ["wire"], risk: "high"}
      - kind: approval_gate
        name: pay-gate
        channel: web
        risk: medium
      - kind: approval_gate
        name: delete-gate
        tools: ["delete"]
        channel: web
        risk: 'has(args.all) && args.all ? "high" : "medium"'
"""


@pytest.fixture
def bot(live_gateway, transactional_db):
    apply_config(CONFIG)
    return make_agent_client(live_gateway, "risky-bot")


def asked(bot, tool: str, args: dict) -> dict:
    answer = bot.pre_tool_use(tool, args).json()
    assert answer["decision"] == "pending", answer
    return bot.get(answer["confirmation_id"]).json()


def test_a_policy_rules_expression_rates_each_call_over_its_arguments(bot):
    assert asked(bot, "pay", {"amount": 50_000})["risk"] == "high"
    assert asked(bot, "pay", {"amount": 20})["risk"] == "low"
    assert asked(bot, "wire", {"amount": 1})["risk"] == "high"  # a word
    assert asked(bot, "refund", {"amount": 1})["risk"] == "medium"  # no rule risk: the gate's


def test_a_gates_own_expression_rates_the_calls_it_asks_about(bot):
    assert asked(bot, "delete", {"all": True})["risk"] == "high"
    assert asked(bot, "delete", {"path": "/tmp/x"})["risk"] == "medium"


def test_an_expression_that_cannot_rate_a_call_rates_it_high_never_low(bot):
    # `args.amount` is missing: the expression fails, and the call is shown as the riskiest.
    assert asked(bot, "pay", {"currency": "EUR"})["risk"] == "high"


def test_the_risk_is_signed_with_the_request_so_lowering_it_in_sql_is_tampering(bot):
    record = asked(bot, "pay", {"amount": 50_000})
    with connection.cursor() as cursor:
        cursor.execute("UPDATE approvals_confirmationrequest SET risk = 'low' WHERE id = %s", [record["id"]])

    # A request that does not verify is answered as the gateway's rejection, never served as pending-and-low.
    seen = bot.get(record["id"]).json()
    assert seen["status"] == "rejected" and seen["decided_by"] == "gateway"
    assert ConfirmationRequest.objects.get(pk=record["id"]).risk == "low"


def test_requests_are_counted_by_risk_in_the_metrics(bot, live_gateway, settings):
    settings.GATEWAY_METRICS_TOKEN = TOKEN
    before = scrape(live_gateway)
    asked(bot, "pay", {"amount": 50_000})
    asked(bot, "pay", {"amount": 5})
    asked(bot, "pay", {"amount": 6})
    after = scrape(live_gateway)

    def delta(risk: str) -> float:
        labels = {"channel": "web", "kind": "confirmation", "risk": risk}
        return after.value("gateway_requests_total", **labels) - before.value("gateway_requests_total", **labels)

    assert (delta("high"), delta("low"), delta("medium")) == (1, 2, 0)


@pytest.mark.parametrize(
    "risk, problem",
    [
        ("extreme", "must be low, medium, high or a CEL expression"),
        ("args.amount >", "must be low, medium, high or a CEL expression"),
        ("amount > 5 ? 'high' : 'low'", "unknown identifier 'amount'"),
    ],
)
def test_a_risk_that_is_neither_a_level_nor_an_expression_is_refused_with_its_path(risk, problem):
    config = yaml.safe_load(CONFIG)
    config["agents"][0]["hooks"][1]["risk"] = risk
    with pytest.raises(ConfigError) as refused:
        apply_config(yaml.safe_dump(config))
    assert "agents[0].hooks[1].risk" in str(refused.value) and problem in str(refused.value)
