"""Every card shows the risk of its call (docs/policies.md, "Risk"; issue 35's done-when: "a CEL risk on a
Slack, Feishu and web card").

The end-to-end tests configure a gate with `risk: 'args.amount > 10000 ? "high" : "low"'`, make the calls
over HTTP, and read the cards where people see them: the Slack message FakeSlack received through slack-sdk,
the Feishu card FakeFeishu received through lark-oapi, the approval page served to a signed-in approver —
as posted, and as redrawn once decided. The outbox is delivered as the worker delivers it. The pure part
draws one `CardView` with every kind's renderer, as tests/channels_ext/test_people_cards.py does.
"""

from __future__ import annotations

import dataclasses
import html
import json
import re
from typing import Any

import pytest

from tests.channels_ext.test_people_cards import DRAWN, PENDING
from tests.conftest import apply_config, decide, make_agent_client
from tests.fakes.feishu_api import MESSAGES_PATH, FakeFeishu, unique_app_id
from tests.fakes.slack_api import FakeSlack
from tests.hooks.policy_support import deliver_outbox

pytestmark = pytest.mark.django_db(transaction=True)

RISK = """'args.amount > 10000 ? "high" : "low"'"""
TOOL = "pay_invoice"


def gate_on(channel: str, approvers: str = "[]") -> str:
    return f"""
agents:
  - name: payments-bot
    hooks:
      - kind: approval_gate
        name: pay-gate
        tools: ["{TOOL}"]
        channel: {channel}
        approvers: {approvers}
        risk: {RISK}
"""


def pay(agent, amount: int) -> str:
    answer = agent.pre_tool_use(TOOL, {"amount": amount, "to": "acme"}).json()
    assert answer["decision"] == "pending", answer
    return answer["confirmation_id"]


# --------------------------------------------------------------------------- every kind, drawn


@pytest.mark.parametrize("kind", sorted(DRAWN), ids=sorted(DRAWN))
def test_every_kinds_card_says_the_risk_in_words_with_its_marker(kind):
    for risk, marker in (("low", "🟢"), ("medium", "🟡"), ("high", "🔴")):
        drawn = DRAWN[kind](dataclasses.replace(PENDING, risk=risk))
        assert marker in drawn
        assert re.search(rf"Risk:(\*\*|\*|</b>)? {risk}|Risk: {risk}", drawn), (kind, risk)
        assert not any(other in drawn for other in {"🟢", "🟡", "🔴"} - {marker}), (kind, risk)


@pytest.mark.parametrize("kind", sorted(DRAWN), ids=sorted(DRAWN))
def test_a_decided_card_still_shows_its_risk(kind):
    decided = dataclasses.replace(
        PENDING, risk="high", status="rejected", approvals_required=1, approved_by=(), waiting_for=(),
        decided_by="slack:U0SAM", decided_by_name="sam", decision_reason="too much",
    )  # fmt: skip
    assert "Risk: high" in DRAWN[kind](decided).replace("**", "").replace("<b>", "").replace("</b>", "").replace("*", "")


@pytest.mark.parametrize("kind", sorted(DRAWN), ids=sorted(DRAWN))
def test_a_risk_the_gateway_never_stores_is_shown_as_high_never_as_safer(kind):
    drawn = DRAWN[kind](dataclasses.replace(PENDING, risk="<b>trivial</b>"))
    assert "🔴" in drawn and "trivial" not in drawn


# --------------------------------------------------------------------------- Slack, through slack-sdk


def slack_texts(blocks: list[dict[str, Any]]) -> list[str]:
    return [block["text"]["text"] for block in blocks if block["type"] == "section" and "text" in block]


def test_a_cel_risk_on_the_slack_card_as_posted_and_as_redrawn(live_gateway, fake_slack: FakeSlack):
    apply_config(
        f"""
channels:
  - name: ops-slack
    kind: slack
    bot_token: xoxb-1111-2222-riskTokenValue
    signing_secret: 0f9d8c7b6a5f4e3d2c1b0a9f8e7d6e5f
    channel_id: C0APPROVALS
    api_base_url: {fake_slack.base_url}
"""
        + gate_on("ops-slack")
    )
    agent = make_agent_client(live_gateway, "payments-bot")
    high, _low = pay(agent, 20000), pay(agent, 5)
    deliver_outbox()

    posted = [call.json for call in fake_slack.calls("chat.postMessage")]
    assert len(posted) == 2
    assert "🔴 *Risk: high* — read the arguments before approving" in slack_texts(posted[0]["blocks"])
    assert posted[0]["text"].startswith("🔴 High risk. Approval needed: payments-bot wants to run pay_invoice")
    assert "🟢 Risk: low" in slack_texts(posted[1]["blocks"])
    assert posted[1]["text"].startswith("Approval needed:")
    assert not any("Risk: high" in text for text in slack_texts(posted[1]["blocks"]))

    assert decide(high, "reject", actor="U0ALICE", channel="ops-slack", reason="too much").code == "decided"
    deliver_outbox()

    (redrawn,) = [call.json for call in fake_slack.calls("chat.update")]  # the decided card's; the low one is pending
    texts = slack_texts(redrawn["blocks"])
    assert texts[0].startswith("❌ Rejected by <@U0ALICE>")
    assert "🔴 *Risk: high*" in texts  # the warning to read first is gone with the buttons
    assert [b for b in redrawn["blocks"] if b["type"] == "actions"] == []
    agent.http.close()


# --------------------------------------------------------------------------- Feishu, through lark-oapi


def test_a_cel_risk_on_the_feishu_card_as_sent_and_as_patched(live_gateway, fake_feishu: FakeFeishu):
    apply_config(
        f"""
channels:
  - name: finance-feishu
    kind: feishu
    app_id: {unique_app_id()}
    app_secret: app-secret-risk
    verification_token: v-verification-token-risk
    encrypt_key: encrypt-key-risk
    chat_id: oc_5ad11d72b830411d72b836c20
    api_base_url: {fake_feishu.domain}
"""
        + gate_on("finance-feishu")
    )
    agent = make_agent_client(live_gateway, "payments-bot")
    high, _low = pay(agent, 20000), pay(agent, 5)
    deliver_outbox()

    # The two cards are posted by the worker in either order: told apart by their amount.
    cards = sorted((message.sent_card for message in fake_feishu.sent_messages()), key=lambda c: "20000" not in markdown(c))
    first, second = cards
    assert "20000" in markdown(first) and "20000" not in markdown(second)
    assert first["header"]["text_tag_list"] == [
        {"tag": "text_tag", "text": {"tag": "plain_text", "content": "Risk: high"}, "color": "red"}
    ]
    assert markdown(first).startswith("🔴 <font color='red'>**Risk: high**</font>\n**Agent:** payments-bot")
    assert first["config"]["summary"]["content"].startswith("🔴 High risk · Approval needed")
    assert second["header"]["text_tag_list"][0]["text"]["content"] == "Risk: low"
    assert second["header"]["text_tag_list"][0]["color"] == "green"
    assert markdown(second).startswith("🟢 **Risk:** low\n")

    approver = "ou_3c14f3a59eaf2825dbe25359f15211a2"
    assert decide(high, "approve", actor=approver, channel="finance-feishu").code == "decided"
    deliver_outbox()

    (patch,) = fake_feishu.calls("PATCH", MESSAGES_PATH)
    patched = json.loads(patch.json()["content"])
    assert patched["header"]["title"]["content"] == "Approved"
    assert patched["header"]["text_tag_list"][0]["text"]["content"] == "Risk: high"
    assert markdown(patched).startswith("🔴 <font color='red'>**Risk: high**</font>")
    agent.http.close()


def markdown(card: dict[str, Any]) -> str:
    return next(element["content"] for element in card["body"]["elements"] if element["tag"] == "markdown")


# --------------------------------------------------------------------------- the web page


def page_risk(session, confirmation_id: str) -> tuple[str, str, bool]:
    """The page's risk badge: its class, its text, and whether the high-risk warning is shown."""
    page = session.get(f"/approvals/{confirmation_id}/")
    assert page.status_code == 200, page.text
    found = re.search(r'<span class="risk (risk-\w+)" id="risk">([^<]*)</span>', page.text)
    assert found is not None, page.text
    return found.group(1), html.unescape(found.group(2)), 'id="risk-warning"' in page.text


def test_a_cel_risk_on_the_web_page_before_and_after_the_decision(live_gateway):
    from django.contrib.auth.models import User

    from tests.channels_ext.web.conftest import PASSWORD
    from tests.channels_ext.web.test_turn_page import signed_in

    User.objects.create_user("alice", password=PASSWORD)
    apply_config("\nchannels:\n  - {name: web, kind: web}\n" + gate_on("web", '["alice"]'))
    agent = make_agent_client(live_gateway, "payments-bot")
    high, low = pay(agent, 20000), pay(agent, 5)
    alice = signed_in(live_gateway, "alice")

    assert page_risk(alice, high) == ("risk-high", "🔴 Risk: high", True)
    assert page_risk(alice, low) == ("risk-low", "🟢 Risk: low", False)

    assert decide(high, "approve", actor="alice").code == "decided"
    assert page_risk(alice, high) == ("risk-high", "🔴 Risk: high", False)  # shown, no longer a warning
    alice.close()
    agent.http.close()
