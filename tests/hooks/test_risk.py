"""Risk on every request (docs/policies.md, "Risk"): a gate or a policy rule rates a call low, medium or high,
as a word or a CEL expression over the call; the request carries it, signed, in its JSON and in the metrics;
a gate may escalate the requests of a risk sooner (`escalate_after_seconds_by_risk`). Timers run as beat runs
them (`run_timers`), with the requests' escalation moved closer by an UPDATE rather than by sleeping."""

from __future__ import annotations

import datetime as dt

import pytest
import yaml
from django.db import connection
from django.utils import timezone

from approvals.config_schema import ConfigError
from approvals.models import ConfirmationRequest
from approvals.tasks import run_timers
from tests.conftest import apply_config, decide, make_agent_client
from tests.gateway.test_metrics import TOKEN, scrape
from tests.support import rewrite_request

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


# --- high risk escalates sooner (escalate_after_seconds_by_risk) --------------------------------------

ESCALATING = """
channels:
  - {name: web, kind: web}
  - {name: web-oncall, kind: web}
agents:
  - name: payments-bot
    hooks:
      - kind: policy
        name: wires
        ask_via: rated-low
        rules:
          - {effect: ask, tools: ["wire"], risk: high}
      - kind: approval_gate
        name: rated-low
        channel: web
        risk: low
        escalate_after_seconds: 1800
        escalate_after_seconds_by_risk: {high: 30}
        escalate_to: {channel: web-oncall, approvers: [dave]}
      - kind: approval_gate
        name: pay-gate
        tools: ["pay"]
        channel: web
        risk: 'args.amount > 10000 ? "high" : "low"'
        escalate_after_seconds: 1800
        escalate_after_seconds_by_risk: {high: 30}
        escalate_to: {channel: web-oncall, approvers: [dave]}
"""


@pytest.fixture
def payments_bot(live_gateway, transactional_db):
    apply_config(ESCALATING)
    return make_agent_client(live_gateway, "payments-bot")


def elapse(seconds: int, *confirmation_ids: str) -> None:
    """As if `seconds` went by for these requests: their escalation that much closer (no sleeping)."""
    for pk in confirmation_ids:
        due = ConfirmationRequest.objects.get(pk=pk).escalate_at
        rewrite_request(pk, escalate_at=due - dt.timedelta(seconds=seconds))


def escalated(*confirmation_ids: str) -> list[bool]:
    rows = {str(r.pk): r.escalated_at is not None for r in ConfirmationRequest.objects.filter(pk__in=confirmation_ids)}
    return [rows[pk] for pk in confirmation_ids]


def test_a_high_risk_call_escalates_after_its_shorter_time_and_a_low_one_after_the_normal_time(payments_bot):
    before = timezone.now()
    high, low = asked(payments_bot, "pay", {"amount": 20_000}), asked(payments_bot, "pay", {"amount": 5})
    after = timezone.now()
    assert (high["risk"], low["risk"]) == ("high", "low")
    for record, seconds in ((high, 30), (low, 1800)):
        due = ConfirmationRequest.objects.get(pk=record["id"]).escalate_at
        assert before + dt.timedelta(seconds=seconds) <= due <= after + dt.timedelta(seconds=seconds)
    ids = (high["id"], low["id"])

    elapse(29, *ids)
    assert run_timers.apply().get()["escalated"] == 0  # not yet: 29 of the high call's 30 seconds
    elapse(2, *ids)
    assert run_timers.apply().get()["escalated"] == 1
    assert escalated(*ids) == [True, False]
    assert decide(high["id"], "approve", actor="dave", channel="web-oncall").code == "decided"  # on call decides it

    elapse(1800 - 31 - 1, low["id"])
    assert run_timers.apply().get()["escalated"] == 0  # the low call keeps the gate's 1800 seconds
    elapse(2, low["id"])
    assert run_timers.apply().get()["escalated"] == 1
    assert escalated(*ids) == [True, True]


def test_the_escalation_follows_the_risk_the_request_carries_a_policy_rules_or_an_unratable_calls(payments_bot):
    wire = asked(payments_bot, "wire", {"amount": 1})  # the policy rates it high; its gate says low
    unrated = asked(payments_bot, "pay", {"currency": "EUR"})  # no amount: unratable, so high
    assert (wire["risk"], unrated["risk"]) == ("high", "high")

    elapse(31, wire["id"], unrated["id"])
    assert run_timers.apply().get()["escalated"] == 2
    assert escalated(wire["id"], unrated["id"]) == [True, True]


def test_a_risk_the_mapping_does_not_name_escalates_after_escalate_after_seconds_or_never_without_it(
    live_gateway, transactional_db
):
    config = yaml.safe_load(ESCALATING)
    gate = config["agents"][0]["hooks"][2]
    del gate["escalate_after_seconds"]
    apply_config(yaml.safe_dump(config))
    bot = make_agent_client(live_gateway, "payments-bot")

    high, low = asked(bot, "pay", {"amount": 20_000}), asked(bot, "pay", {"amount": 5})
    assert ConfirmationRequest.objects.get(pk=high["id"]).escalate_at is not None
    assert ConfirmationRequest.objects.get(pk=low["id"]).escalate_at is None  # only the risks it names escalate
    elapse(31, high["id"])
    assert run_timers.apply().get()["escalated"] == 1


def test_escalate_after_seconds_by_risk_without_escalate_to_is_a_config_error_with_its_path():
    config = yaml.safe_load(ESCALATING)
    del config["agents"][0]["hooks"][2]["escalate_to"]
    with pytest.raises(ConfigError) as refused:
        apply_config(yaml.safe_dump(config))
    assert "agents[0].hooks[2].escalate_to: is required when escalate_after_seconds is set" in str(refused.value)
    del config["agents"][0]["hooks"][2]["escalate_after_seconds"]
    with pytest.raises(ConfigError) as refused:
        apply_config(yaml.safe_dump(config))
    assert "agents[0].hooks[2].escalate_to: is required when escalate_after_seconds_by_risk is set" in str(refused.value)
