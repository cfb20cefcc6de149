"""Feishu: the gated calls of one agent turn on one card (docs/approving.md), decided all at once
with Approve all, through the real worker, FakeFeishu and encrypted, signed card callbacks."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest

from approvals.models import ApproverResponse, ConfirmationRequest, Outbox
from gateway_contract import sign_shown_ids, unsign_shown_ids
from tests.channels_ext.contract import TOOL
from tests.channels_ext.feishu.test_cards import interactive_elements, markdown_of
from tests.channels_ext.feishu.test_end_to_end import (  # noqa: F401 - fixture: deploy
    ENCRYPT_KEY,
    click_payload,
    deploy,
    toast_and_card,
)
from tests.conftest import ask_in_turn, decisions
from tests.fakes.feishu_api import MESSAGES_PATH, encrypted_body
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
    assert "**1.** 🟡 oa\\_\\_purchase\\_pay (medium risk) — amount: 1" in markdown
    assert "**2.** 🟡 oa\\_\\_purchase\\_pay (medium risk) — amount: 2" in markdown
    assert markdown.startswith("🟡 **Risk:** medium\n")
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


def seen_then_joined(feishu) -> tuple[str, str, str, Any, dict[str, Any]]:
    """Two calls of a turn on one card, the card as the approver sees it then, and a third call that
    joins the card after that: (first, second, third, the message, the card as it was seen)."""
    first = ask_in_turn(feishu.agent, 1)
    message = feishu.posted_message()
    second = ask_in_turn(feishu.agent, 2)
    seen = wait_until(lambda: shown(feishu, message, "Approval needed: 2 of 2 calls"), what="the card to list both")
    later = ask_in_turn(feishu.agent, 3)
    wait_until(lambda: shown(feishu, message, "Approval needed: 3 of 3 calls"), what="the card to list the third")
    return first, second, later, message, seen


def test_approve_all_on_a_card_drawn_before_a_call_joined_decides_only_the_calls_it_showed(deploy):
    feishu = deploy()
    first, second, later, message, seen = seen_then_joined(feishu)
    old_value = buttons(seen)["approve_all"]  # the button as the approver saw it

    body = encrypted_body(ENCRYPT_KEY, click_payload(old_value, event_id=uuid.uuid4().hex))
    toast, answered = toast_and_card(feishu.post(body))

    assert (toast["type"], toast["content"]) == (
        "success",
        "Approved 2 call(s) of this turn. 1 other call(s) of this turn, not shown on this card when it was drawn, "
        "are left pending.",
    )
    assert [row[0] for row in decisions(first, second, later)] == ["approved", "approved", "pending"]
    assert answered["header"]["title"]["content"] == "Approval needed: 1 of 3 calls"  # the card redrawn at once
    assert set(buttons(answered)) == {"approve_3", "reject_3"}
    feishu.settled()
    assert shown(feishu, message, "Approval needed: 1 of 3 calls") is not None  # and on the chat
    before = decisions(first, second, later)

    redelivered = feishu.post(body)  # Feishu redelivers the event: same body, same event_id
    replayed = feishu.click(old_value)  # the same click as a new event

    assert toast_and_card(redelivered)[0]["content"].startswith("Nothing was changed")
    assert toast_and_card(replayed)[0]["content"].startswith("Nothing was changed")
    assert decisions(first, second, later) == before

    # The value's list edited to name the new call, or taken from another card: refused, nothing changes.
    text, signature = old_value["shown"].rsplit(":", 1)
    another_card = sign_shown_ids(str(uuid.uuid4()), [first, later])
    for shown_value in (f"{text.replace(second, later)}:{signature}", another_card):
        forged = feishu.click({**old_value, "shown": shown_value})
        assert (forged.status_code, forged.json()["error"]["code"]) == (400, "callback_refused")
    assert decisions(first, second, later) == before
    assert not ApproverResponse.objects.filter(confirmation_id=later).exists()


def test_approve_all_from_a_card_drawn_before_buttons_named_their_calls_decides_nothing_and_shows_the_card_now(
    deploy,
):
    feishu = deploy()
    first = ask_in_turn(feishu.agent, 1)
    message = feishu.posted_message()
    second = ask_in_turn(feishu.agent, 2)
    seen = wait_until(lambda: shown(feishu, message, "Approval needed: 2 of 2 calls"), what="the card to list both")
    old_value = {k: v for k, v in buttons(seen)["approve_all"].items() if k != "shown"}  # as such buttons were

    toast, answered = toast_and_card(feishu.click(old_value))

    assert toast["type"] == "warning"
    assert toast["content"].startswith("This card is out of date, so nothing was changed")
    assert decisions(first, second) == [("pending", None, 0)] * 2
    assert unsign_shown_ids(buttons(answered)["approve_all"]["shown"]) == (first, (first, second))
    assert Outbox.objects.filter(dedupe_key__startswith=f"{first}:update:current-").count() == 1
    feishu.settled()
