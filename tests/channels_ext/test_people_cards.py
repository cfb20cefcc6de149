"""Every kind's card says who still has to answer a request that needs several approvals, and on whose
behalf a stand-in decided (docs/approving.md, "People"): the renderers are pure, so each is drawn here
from one `CardView` the gateway would hand it."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json

import pytest

from gateway_contract import CardView
from channels_ext.dingtalk.cards import card_markdown as dingtalk_markdown
from channels_ext.email.cards import Links, card_mail, decided_mail
from channels_ext.feishu.cards import render_card as feishu_card
from channels_ext.slack.cards import card_blocks
from channels_ext.teams.cards import render_card as teams_card
from channels_ext.telegram.cards import card_text

NOW = dt.datetime(2026, 11, 26, 9, 0, tzinfo=dt.UTC)
PENDING = CardView(
    confirmation_id="8f7c2a4e-0000-4000-8000-000000000001",
    agent="purchasing-bot",
    tool_name="oa__purchase_pay",
    tool_args={"amount": 80000},
    user_id="u-42",
    session_id="s-1",
    reason="payments need approval",
    hook="finance-gate",
    status="pending",
    url="https://gateway.example/approvals/8f7c2a4e/",
    expires_at=NOW + dt.timedelta(minutes=30),
    approvers=("U0ALICE", "U0BOB"),
    approvals_required=2,
    approved_by=("slack:U0CAROL",),
    waiting_for=("Alice Adams", "Bob Brown"),
)
DECIDED = dataclasses.replace(
    PENDING,
    status="approved",
    approvals_required=1,
    approved_by=(),
    waiting_for=(),
    decided_by="slack:U0SAM",
    decided_by_name="sam on behalf of Ada Away",
    decided_at=NOW,
    on_behalf_of="Ada Away",
)


def email_text(card: CardView) -> str:
    if not card.is_pending:
        mail = decided_mail(card)  # the follow-up in the thread
    else:
        mail = card_mail(card, Links(recipient="alice@example.com", actions=(("Approve", "https://g/a", "approve"),)), now=NOW)
    return mail.text + mail.html


DRAWN = {
    "slack": lambda card: json.dumps(card_blocks(card), ensure_ascii=False),
    "feishu": lambda card: json.dumps(feishu_card(card), ensure_ascii=False),
    "teams": lambda card: json.dumps(teams_card(card), ensure_ascii=False),
    "dingtalk": dingtalk_markdown,
    "telegram": lambda card: card_text(card, now=NOW),
    "email": email_text,
}


@pytest.mark.parametrize("kind", sorted(DRAWN), ids=sorted(DRAWN))
def test_a_card_needing_more_approvals_says_who_still_has_to_answer(kind):
    drawn = DRAWN[kind](PENDING)

    assert "Waiting for" in drawn
    assert "Alice Adams, Bob Brown" in drawn
    assert "Waiting for" not in DRAWN[kind](dataclasses.replace(PENDING, waiting_for=()))


@pytest.mark.parametrize("kind", sorted(DRAWN), ids=sorted(DRAWN))
def test_a_stand_ins_decision_says_on_whose_behalf(kind):
    assert "on behalf of Ada Away" in DRAWN[kind](DECIDED)
