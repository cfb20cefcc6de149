"""Slack: the gated calls of one agent turn on one card (docs/approving.md), decided one by one
or all at once, through the real worker, FakeSlack and signed interactivity requests."""

from __future__ import annotations

import time
from typing import Any

import httpx
import pytest

from approvals.models import ApproverResponse, ConfirmationRequest, Outbox
from gateway_contract import sign_confirmation_id, unsign_shown_ids
from tests.channels_ext.slack.test_end_to_end import (  # noqa: F401 - fixtures: background, slack_agent
    ALICE,
    BOB,
    SIGNING_SECRET,
    TOOL,
    WAIT,
    PostedCard,
    background,
    block_text,
    notes_to,
    post_interaction,
    posted_card,
    slack_agent,
)
from tests.conftest import ask_in_turn, decisions
from tests.fakes.slack_api import (
    FakeSlack,
    block_actions_payload,
    form_body,
    signed_slack_request,
    view_submission_payload,
)
from tests.support import wait_until

pytestmark = pytest.mark.django_db(transaction=True)


def click_on(
    fake_slack, card, message: dict[str, Any], user, block_id: str, action_id: str, note_to: str
) -> dict[str, Any]:
    """The payload Slack sends when `user` presses the button `action_id` in block `block_id` of
    `message` (the card as Slack showed it to them, which may be older than the card now)."""
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
    return payload


def press(live_gateway, fake_slack, card, user, block_id: str, action_id: str, note_to: str):
    """`user` presses the button `action_id` in block `block_id` of the card as Slack shows it now."""
    return post_interaction(
        live_gateway, click_on(fake_slack, card, card.message(fake_slack), user, block_id, action_id, note_to)
    )


def showing(fake_slack: FakeSlack, card: PostedCard, title: str) -> dict[str, Any]:
    """The card as Slack shows it, once its header says `title`."""

    def shown() -> dict[str, Any] | None:
        message = card.message(fake_slack)
        return message if message["blocks"][0]["text"]["text"] == title else None

    return wait_until(shown, what=f"the card to show {title!r}")


def turn_button_value(message: dict[str, Any], action_id: str = "approve_all") -> str:
    (block,) = [b for b in message["blocks"] if b.get("block_id") == "turn_actions"]
    (button,) = [e for e in block["elements"] if e["action_id"] == action_id]
    return button["value"]


def seen_then_joined(slack_agent, fake_slack: FakeSlack) -> tuple[str, str, str, PostedCard, dict[str, Any]]:
    """Two calls of a turn on one card, the card as the approver sees it then, and a third call that
    joins the card after that: (first, second, third, the card, the message as it was seen)."""
    first = ask_in_turn(slack_agent, 1)
    card = posted_card(fake_slack)
    second = ask_in_turn(slack_agent, 2)
    seen = showing(fake_slack, card, "Approval needed: 2 of 2 calls of one turn")
    later = ask_in_turn(slack_agent, 3)  # the agent adds a call; the card is redrawn with it
    showing(fake_slack, card, "Approval needed: 3 of 3 calls of one turn")
    return first, second, later, card, seen


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
    assert "*1.* 🟡 `oa__purchase_pay` amount = 1 _(medium risk)_" in text
    assert "*3.* 🟡 `oa__purchase_pay` amount = 3 _(medium risk)_" in text
    assert "🟡 Risk: medium" in text
    (turn_actions,) = [b for b in message["blocks"] if b.get("block_id") == "turn_actions"]
    assert [e["text"]["text"] for e in turn_actions["elements"]] == ["Approve all 3", "Reject all 3"]
    lead, shown_ids = unsign_shown_ids(turn_actions["elements"][0]["value"])  # the calls it decides, signed
    assert (lead, len(shown_ids), shown_ids[0]) == (first["confirmation_id"], 3, first["confirmation_id"])

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


def test_approve_all_on_a_card_drawn_before_a_call_joined_decides_only_the_calls_it_showed(
    slack_agent, fake_slack, live_gateway
):
    first, second, later, card, seen = seen_then_joined(slack_agent, fake_slack)

    # Alice presses Approve all 2 on the card as she saw it.
    payload = click_on(fake_slack, card, seen, ALICE, "turn_actions", "approve_all", "alice-all")
    body, stamp = form_body(payload), int(time.time())
    assert post_signed(live_gateway, body, stamp).status_code == 200

    assert [row[0] for row in decisions(first, second, later)] == ["approved", "approved", "pending"]
    (note,) = wait_until(lambda: notes_to(fake_slack, "alice-all"), what="alice's note")
    assert note["text"] == (
        "Approved 2 call(s) of this turn. 1 other call(s) of this turn, not shown on this card when it was drawn, "
        "are left pending."
    )
    assert {f"{first}:update:approved", f"{second}:update:approved"} <= set(
        Outbox.objects.filter(kind="update").values_list("dedupe_key", flat=True)
    )  # the redraws, written with the decisions
    redrawn = showing(fake_slack, card, "Approval needed: 1 of 3 calls of one turn")
    assert [b["block_id"] for b in redrawn["blocks"] if b["type"] == "actions"] == ["item_3"]  # Approve 3 / Reject 3
    assert "*3.* 🟡 `oa__purchase_pay` amount = 3" in block_text(redrawn["blocks"])

    # Slack retries the same click (the same signed body, within the signature window): nothing more.
    before = decisions(first, second, later)
    retried = post_signed(live_gateway, body, stamp, {"X-Slack-Retry-Num": "1", "X-Slack-Retry-Reason": "http_timeout"})
    assert retried.status_code == 200
    assert decisions(first, second, later) == before

    # A button value edited to name the new call fails the signature: refused, nothing changes.
    forged = click_on(fake_slack, card, seen, ALICE, "turn_actions", "approve_all", "alice-forged")
    text, signature = forged["actions"][0]["value"].rsplit(":", 1)
    forged["actions"][0]["value"] = f"{text.replace(second, later)}:{signature}"
    refused = post_interaction(live_gateway, forged)
    assert (refused.status_code, refused.json()["error"]["code"]) == (400, "callback_refused")
    assert decisions(first, second, later) == before
    assert ApproverResponse.objects.filter(confirmation_id=later).count() == 0


def test_an_approve_all_from_a_card_drawn_before_buttons_named_their_calls_decides_nothing_and_redraws_it(
    slack_agent, fake_slack, live_gateway
):
    first = ask_in_turn(slack_agent, 1)
    card = posted_card(fake_slack)
    second = ask_in_turn(slack_agent, 2)
    seen = showing(fake_slack, card, "Approval needed: 2 of 2 calls of one turn")
    wait_until(lambda: not Outbox.objects.filter(status="pending").exists(), what="the redraws to be done")
    old = click_on(fake_slack, card, seen, ALICE, "turn_actions", "approve_all", "alice-old")
    old["actions"][0]["value"] = sign_confirmation_id(first)  # the value such buttons carried
    updates = len(fake_slack.calls("chat.update"))

    assert post_interaction(live_gateway, old).status_code == 200

    (note,) = wait_until(lambda: notes_to(fake_slack, "alice-old"), what="alice's note")
    assert note["text"].startswith("This card is out of date, so nothing was changed")
    assert decisions(first, second) == [("pending", None, 0)] * 2
    (redraw,) = Outbox.objects.filter(dedupe_key__startswith=f"{first}:update:current-")
    wait_until(lambda: len(fake_slack.calls("chat.update")) > updates, what="the card to be redrawn")
    assert unsign_shown_ids(turn_button_value(card.message(fake_slack))) == (first, (first, second))


def test_reject_all_on_a_card_drawn_before_a_call_joined_rejects_only_the_calls_it_showed(
    slack_agent, fake_slack, live_gateway
):
    first, second, later, card, seen = seen_then_joined(slack_agent, fake_slack)

    pressed = post_interaction(live_gateway, click_on(fake_slack, card, seen, BOB, "turn_actions", "reject_all", "bob"))
    assert pressed.status_code == 200
    (opened,) = fake_slack.calls("views.open")  # the reason modal carries the calls of the card bob saw
    submission = view_submission_payload(
        private_metadata=opened.json["view"]["private_metadata"], reason="not now", user_id=BOB.id, user_name=BOB.name
    )
    assert post_interaction(live_gateway, submission).json() == {"response_action": "clear"}

    assert [row[0] for row in decisions(first, second, later)] == ["rejected", "rejected", "pending"]
    showing(fake_slack, card, "Approval needed: 1 of 3 calls of one turn")


def post_signed(
    live_gateway, body: bytes, stamp: int, more_headers: dict[str, str] | None = None
) -> httpx.Response:
    """POST an interactivity body signed at `stamp` (the same bytes and headers twice: a retry or a replay)."""
    headers = {
        "Content-Type": "application/x-www-form-urlencoded",
        **signed_slack_request(SIGNING_SECRET, body, timestamp=stamp),
        **(more_headers or {}),
    }
    return httpx.post(f"{live_gateway.url}/channels/ops-slack/callback", content=body, headers=headers, timeout=WAIT)


def test_a_redraw_of_an_older_state_landing_last_is_corrected_so_the_card_shows_the_turn_decided(
    slack_agent, fake_slack, live_gateway
):
    """Two workers redraw one card: the first drew the turn with call 2 still pending, and its
    chat.update is slow; the second drew the turn decided and lands first. When the slow one lands,
    its delivery draws the card again, finds the request moved on, and sends the card as it is now."""
    first = slack_agent.pre_tool_use(TOOL, {"amount": 1}, turn_id="t-1", user_id="u-42").json()
    card = posted_card(fake_slack)
    slack_agent.pre_tool_use(TOOL, {"amount": 2}, turn_id="t-1", user_id="u-42")
    showing(fake_slack, card, "Approval needed: 2 of 2 calls of one turn")
    wait_until(lambda: not Outbox.objects.filter(status="pending").exists(), what="the redraw to be delivered")
    updates = len(fake_slack.calls("chat.update"))
    slow = fake_slack.hold_next("chat.update")

    assert press(live_gateway, fake_slack, card, ALICE, "item_1", "approve", "alice-1").status_code == 200
    wait_until(lambda: len(fake_slack.calls("chat.update")) == updates + 1, what="the first redraw to be sent")
    assert ConfirmationRequest.objects.get(pk=first["confirmation_id"]).status == "approved"
    # Slack still shows the card with both calls pending: call 2 is approved from it.
    assert press(live_gateway, fake_slack, card, ALICE, "item_2", "approve", "alice-2").status_code == 200
    showing(fake_slack, card, "Calls of one turn")  # the second redraw landed first
    slow.set()  # the first lands now, showing call 2 still pending

    wait_until(lambda: len(fake_slack.calls("chat.update")) >= updates + 3, what="the card to be sent again")
    final = showing(fake_slack, card, "Calls of one turn")
    assert [b for b in final["blocks"] if b["type"] == "actions"] == []
    assert "Approve all" not in str(final["blocks"])
