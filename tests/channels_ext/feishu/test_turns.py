"""Feishu: the gated calls of one agent turn on one card (docs/approving.md), decided all at once
with Approve all, through the real worker, FakeFeishu and encrypted, signed card callbacks."""

from __future__ import annotations

import json

import pytest

from approvals.models import ConfirmationRequest
from tests.channels_ext.contract import TOOL
from tests.channels_ext.feishu.test_cards import interactive_elements, markdown_of
from tests.channels_ext.feishu.test_end_to_end import deploy, toast_and_card  # noqa: F401 - fixture: deploy
from tests.fakes.feishu_api import MESSAGES_PATH
from tests.support import wait_until

pytestmark = pytest.mark.django_db(transaction=True)


def buttons(card: dict) -> dict[str, dict]:
    """The card's buttons by name, with the value each sends."""
    return {e["name"]: e["behaviors"][0]["value"] for e in interactive_elements(card) if e["tag"] == "button"}


def shown(feishu, message, title: str) -> dict | None:
    """The card as the chat shows it now (as sent, or as last patched), if its header says `title`."""
    patches = feishu.fake.calls("PATCH", f"{MESSAGES_PATH}/{message.message_id}")
    card = json.loads(patches[-1].json()["content"]) if patches else message.card
    return card if card["header"]["title"]["content"] == title else None


def test_the_calls_of_one_turn_share_one_card_and_approve_all_decides_each_once(deploy):
    feishu = deploy()
    for amount in (1, 2):
        answer = feishu.agent.pre_tool_use(TOOL, {"amount": amount}, turn_id="t-1", user_id="u-42").json()
        assert answer["decision"] == "pending"
    message = feishu.posted_message()
    card = wait_until(lambda: shown(feishu, message, "Approval needed: 2 of 2 calls"), what="the card to list both")
    assert len(feishu.fake.sent_messages()) == 1  # one card for the turn
    markdown = markdown_of(card)
    assert "**1.** oa\\_\\_purchase\\_pay — amount: 1" in markdown and "**2.** oa\\_\\_purchase\\_pay — amount: 2" in markdown
    assert {"approve_1", "approve_2", "approve_all", "reject_1", "reject_2", "reject_all"} <= set(buttons(card))

    toast, answered = toast_and_card(feishu.click(buttons(card)["approve_all"]))

    assert (toast["type"], toast["content"]) == ("success", "Approved 2 call(s) of this turn.")
    assert [e for e in interactive_elements(answered) if e["tag"] == "button"] == []  # nothing left to decide
    assert set(ConfirmationRequest.objects.values_list("status", "decided_by")) == {
        ("approved", "feishu:ou_3c14f3a59eaf2825dbe25359f15211a2")
    }
    again, _ = toast_and_card(feishu.click(buttons(card)["approve_all"]))  # a late second click
    assert again["content"].startswith("Nothing was changed.")
    wait_until(lambda: shown(feishu, message, "Calls of one turn"), what="the card to show the turn decided")
