"""Slack: the gated calls of one agent turn on one card (docs/approving.md), decided one by one
or all at once, through the real worker, FakeSlack and signed interactivity requests."""

from __future__ import annotations

from typing import Any

import pytest

from approvals.models import ApproverResponse, ConfirmationRequest
from channels_ext.base import sign_confirmation_id
from tests.channels_ext.slack.test_end_to_end import (  # noqa: F401 - fixtures: background, slack_agent
    ALICE,
    BOB,
    TOOL,
    background,
    block_text,
    notes_to,
    post_interaction,
    posted_card,
    slack_agent,
)
from tests.fakes.slack_api import block_actions_payload, view_submission_payload
from tests.support import wait_until

pytestmark = pytest.mark.django_db(transaction=True)


def press(live_gateway, fake_slack, card, user, block_id: str, action_id: str, note_to: str):
    """`user` presses the button `action_id` in block `block_id` of the card as Slack shows it now."""
    message = card.message(fake_slack)
    (block,) = [b for b in message["blocks"] if b.get("block_id") == block_id]
    (button,) = [e for e in block["elements"] if e["action_id"] == action_id]
    payload = block_actions_payload(
        action_id=action_id,
        value=button["value"],
        user_id=user.id,
        user_name=user.name,
        trigger_id=f"trigger.{note_to}",
        response_url=fake_slack.response_url(note_to),
        channel_id=card.channel,
        message_ts=card.ts,
    )
    payload["message"] = message
    return post_interaction(live_gateway, payload)


def test_the_calls_of_one_turn_share_one_card_decided_one_by_one_or_all_at_once(
    slack_agent, fake_slack, live_gateway, background
):
    first = slack_agent.pre_tool_use(TOOL, {"amount": 1}, turn_id="t-1", user_id="u-42").json()
    card = posted_card(fake_slack)
    waiting = []
    for n in (2, 3):  # in order: the card lists a turn's calls as they came
        waiting.append(
            background(slack_agent.pre_tool_use, TOOL, {"amount": n}, turn_id="t-1", user_id="u-42", wait_seconds=30)
        )
        wait_until(lambda n=n: ConfirmationRequest.objects.count() == n, what=f"call {n} to be asked")

    def listing_three() -> dict[str, Any] | None:
        message = card.message(fake_slack)
        return message if message["blocks"][0]["text"]["text"] == "Approval needed: 3 of 3 calls of one turn" else None

    message = wait_until(listing_three, what="the card to list the turn's three calls")
    assert len(fake_slack.calls("chat.postMessage")) == 1  # one card for the turn
    text = block_text(message["blocks"])
    assert "*1.* `oa__purchase_pay` amount = 1" in text and "*3.* `oa__purchase_pay` amount = 3" in text
    (turn_actions,) = [b for b in message["blocks"] if b.get("block_id") == "turn_actions"]
    assert [e["text"]["text"] for e in turn_actions["elements"]] == ["Approve all 3", "Reject all 3"]
    assert turn_actions["elements"][0]["value"] == sign_confirmation_id(first["confirmation_id"])

    # One by one: the second call rejected on its own, with a reason in the modal.
    assert press(live_gateway, fake_slack, card, BOB, "item_2", "reject", "bob-2").status_code == 200
    (opened,) = fake_slack.calls("views.open")
    submission = view_submission_payload(
        private_metadata=opened.json["view"]["private_metadata"], reason="not this one", user_id=BOB.id, user_name=BOB.name
    )
    assert post_interaction(live_gateway, submission).json() == {"response_action": "clear"}
    assert waiting[0].result(timeout=20).json()["reason"] == "rejected by bob (slack:U0BOB): not this one"

    # All at once: whatever is still pending.
    wait_until(lambda: "Approve all 2" in str(card.message(fake_slack)["blocks"]), what="the card to offer 2")
    assert press(live_gateway, fake_slack, card, ALICE, "turn_actions", "approve_all", "alice-all").status_code == 200

    assert waiting[1].result(timeout=20).json()["decision"] == "allow"
    statuses = dict(ConfirmationRequest.objects.values_list("tool_args__amount", "status"))
    assert statuses == {1: "approved", 2: "rejected", 3: "approved"}
    assert ApproverResponse.objects.filter(approver="slack:U0ALICE").count() == 2  # once each
    (note,) = wait_until(lambda: notes_to(fake_slack, "alice-all"), what="alice's note")
    assert note["text"] == "Approved 2 call(s) of this turn."

    def decided() -> dict[str, Any] | None:
        shown = card.message(fake_slack)
        return shown if shown["blocks"][0]["text"]["text"] == "Calls of one turn" else None

    final = wait_until(decided, what="the card to show the turn decided")
    assert [b for b in final["blocks"] if b["type"] == "actions"] == []
    text = block_text(final["blocks"])
    assert "✅ Approved by <@U0ALICE>" in text and "❌ Rejected by <@U0BOB> — not this one" in text
