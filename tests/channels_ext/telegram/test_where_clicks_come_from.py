"""A Telegram tap or reply counts only from the channel's chat (docs/telegram.md §4): a bot gets the taps of
every chat it is in, and a card forwarded to another chat, or seen in a group the bot was added to later,
keeps its buttons. A redelivered Reject… or Edit… tap asks its question once.

python-telegram-bot talks to the fake Bot API (tests/fakes/telegram_api.py); updates are webhook POSTs to
the live gateway, or are fetched by the gateway's own getUpdates."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from approvals.models import ConfirmationEvent, ConfirmationRequest
from tests.channels_ext.connections_support import running_connections
from tests.channels_ext.contract import TOOL, request_state
from tests.channels_ext.telegram.support import (
    ALICE,
    REASON_ASKED,
    VALUES_ASKED,
    Card,
    Telegram,
    configure,
    posted_card,
)
from tests.conftest import make_agent_client
from tests.fakes.telegram_api import FakeTelegram, reply, tap
from tests.hooks.policy_support import deliver_outbox
from tests.support import wait_until

pytestmark = pytest.mark.django_db(transaction=True)

NOT_THE_CHAT = "These buttons work only in the chat the gateway posted the request to."
OTHER_GROUP = {"id": -1005550001111, "type": "supergroup", "title": "Mallory's group"}


def pending(live_gateway, fake: FakeTelegram, **configure_keys: Any) -> tuple[str, Card]:
    configure(fake, **configure_keys)
    agent = make_agent_client(live_gateway, "purchasing-bot")
    answer = agent.pre_tool_use(TOOL, {"amount": 80000}, user_id="u-42").json()
    agent.http.close()
    assert answer["decision"] == "pending", answer
    deliver_outbox()
    return answer["confirmation_id"], posted_card(fake, answer["confirmation_id"])


def elsewhere(message: dict[str, Any], chat: dict[str, Any] = OTHER_GROUP) -> dict[str, Any]:
    """The card as another chat shows it (forwarded there, or posted by a bot that was added later)."""
    moved = copy.deepcopy(message)
    moved["chat"] = dict(chat)
    return moved


def questions(fake: FakeTelegram) -> list[dict[str, Any]]:
    return [m for m in fake.sent() if m.get("force_reply")]


@pytest.mark.parametrize("label", ["✅ Approve", "❌ Reject…"])
def test_a_tap_on_the_card_in_another_chat_is_answered_and_changes_nothing(live_gateway, fake_telegram, label):
    confirmation_id, card = pending(live_gateway, fake_telegram)
    telegram = Telegram(fake_telegram, live_gateway)
    before, sent = request_state(confirmation_id), len(fake_telegram.sent())

    update = tap(fake_telegram, elsewhere(card.now(fake_telegram)), card.buttons[label], ALICE)
    # 200: Telegram redelivers an update the webhook refuses with an error status.
    assert telegram.deliver(update) == 200

    assert telegram.answer_to(update["callback_query"]["id"]) == NOT_THE_CHAT
    assert request_state(confirmation_id) == before
    assert len(fake_telegram.sent()) == sent  # no question asked, nothing said in the other chat
    assert not ConfirmationEvent.objects.filter(confirmation_id=confirmation_id, kind="refused_click").exists()


def test_a_tap_without_its_message_cannot_show_its_chat_and_changes_nothing(live_gateway, fake_telegram):
    confirmation_id, card = pending(live_gateway, fake_telegram)
    telegram = Telegram(fake_telegram, live_gateway)
    before = request_state(confirmation_id)
    update = tap(fake_telegram, card.now(fake_telegram), card.buttons["✅ Approve"], ALICE)
    # An inline-mode message has no `message`, only an inline_message_id: where it is shown is unknown.
    del update["callback_query"]["message"]
    update["callback_query"]["inline_message_id"] = "AgAAAAAAAAA"

    assert telegram.deliver(update) == 200

    assert telegram.answer_to(update["callback_query"]["id"]) == NOT_THE_CHAT
    assert request_state(confirmation_id) == before


def test_a_reply_to_the_question_from_another_chat_decides_nothing_and_is_not_answered(live_gateway, fake_telegram):
    confirmation_id, card = pending(live_gateway, fake_telegram)
    telegram = Telegram(fake_telegram, live_gateway)
    status, query_id = telegram.tap(card, ALICE, "❌ Reject…")
    assert (status, telegram.answer_to(query_id)) == (200, REASON_ASKED)
    [question] = questions(fake_telegram)
    before, sent = request_state(confirmation_id), len(fake_telegram.sent())

    # The question, and Alice's reply to it, as a chat other than the channel's shows them.
    answer = reply(fake_telegram, elsewhere(question), "rejected from elsewhere", ALICE)
    assert telegram.deliver(answer) == 200

    assert request_state(confirmation_id) == before
    assert len(fake_telegram.sent()) == sent  # the bot says nothing there
    # The same reply in the channel's chat decides.
    assert telegram.deliver(reply(fake_telegram, question, "over budget", ALICE)) == 200
    wait_until(lambda: ConfirmationRequest.objects.get(pk=confirmation_id).status == "rejected", what="the rejection")


def test_a_channel_named_by_its_username_takes_taps_from_that_chat_only(live_gateway, fake_telegram):
    confirmation_id, card = pending(live_gateway, fake_telegram, channel_keys={"chat_id": "'@ops_approvals'"})
    telegram = Telegram(fake_telegram, live_gateway)
    assert card.now(fake_telegram)["chat"]["username"] == "ops_approvals"
    before = request_state(confirmation_id)

    namesake = {"id": -1005550002222, "type": "supergroup", "username": "ops_approvals_2"}
    refused = tap(fake_telegram, elsewhere(card.now(fake_telegram), namesake), card.buttons["✅ Approve"], ALICE)
    assert telegram.deliver(refused) == 200
    assert telegram.answer_to(refused["callback_query"]["id"]) == NOT_THE_CHAT
    assert request_state(confirmation_id) == before

    status, query_id = telegram.tap(card, ALICE, "✅ Approve")
    assert (status, telegram.answer_to(query_id)) == (200, "Approved.")
    assert ConfirmationRequest.objects.get(pk=confirmation_id).status == "approved"


@pytest.mark.parametrize(
    ("label", "asked", "answer", "decided"),
    [
        ("❌ Reject…", REASON_ASKED, "over budget", ("rejected", "over budget", None)),
        ("✏️ Edit, then approve…", VALUES_ASKED, '{"amount": 8000}', ("approved", "", {"amount": 8000})),
    ],
)
def test_a_redelivered_tap_that_asks_a_question_asks_it_once(live_gateway, fake_telegram, label, asked, answer, decided):
    confirmation_id, card = pending(live_gateway, fake_telegram, gate_keys="        allow_edit: [amount]\n")
    telegram = Telegram(fake_telegram, live_gateway)
    update = tap(fake_telegram, card.now(fake_telegram), card.buttons[label], ALICE)

    assert telegram.deliver(update) == 200
    assert telegram.answer_to(update["callback_query"]["id"]) == asked
    # Telegram sends the same update again (our 200 was lost), then the same tap in a later update.
    assert telegram.deliver(update) == 200
    assert telegram.deliver({**update, "update_id": fake_telegram.new_update_id()}) == 200

    assert len(fake_telegram.calls("answerCallbackQuery")) == 3  # each delivery answered, one question asked
    [question] = questions(fake_telegram)
    # The one question still takes the answer.
    assert telegram.deliver(reply(fake_telegram, question, answer, ALICE)) == 200
    request = ConfirmationRequest.objects.get(pk=confirmation_id)
    assert (request.status, request.decision_reason, request.approved_args) == decided


def test_a_reject_tap_fetched_again_by_getupdates_asks_for_a_reason_once(live_gateway, fake_telegram):
    confirmation_id, card = pending(live_gateway, fake_telegram, mode="polling", channel_keys={"poll_timeout_seconds": 1})
    fake_telegram.push(tap(fake_telegram, card.now(fake_telegram), card.buttons["❌ Reject…"], ALICE))
    # The connection is lost after the tap was handled, before getUpdates confirmed it: it is fetched again.
    fake_telegram.lose_next_confirmation()

    with running_connections():
        wait_until(
            lambda: fake_telegram.pending_updates() == 0 and len(fake_telegram.calls("answerCallbackQuery")) == 2,
            what="the tap fetched twice, each time answered, then confirmed",
        )

    assert len(questions(fake_telegram)) == 1
    assert ConfirmationRequest.objects.get(pk=confirmation_id).status == "pending"
