"""The Telegram channel beyond the contract: the compact signed button data, a turn's card, the questions
Reject… and Edit… ask, the webhook's secret token, flood control and refusals from the Bot API, what is
kept out of the logs and the admin, and reminders.

python-telegram-bot talks to the fake Bot API (tests/fakes/telegram_api.py); updates are webhook POSTs
to the live gateway."""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import re
import uuid

import pytest
from django.utils import timezone

from approvals.models import Channel, ConfirmationEvent, ConfirmationRequest, Outbox
from approvals.tasks import run_timers
from gateway_contract import CardItem, CardView
from channels_ext.telegram import buttons, cards
from tests.channels_ext.contract import TOOL, request_state
from tests.channels_ext.telegram.support import (
    ALICE,
    BOB,
    CHANNEL,
    CHAT_ID,
    MALLORY,
    REASON_ASKED,
    WEBHOOK_SECRET,
    Telegram,
    configure,
    keyboard_of,
    posted_card,
)
from tests.conftest import make_agent_client
from tests.fakes.telegram_api import BOT_TOKEN, reply, tap
from tests.hooks.policy_support import deliver_outbox
from tests.support import wait_until

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def agent(live_gateway, fake_telegram):
    configure(fake_telegram)
    client = make_agent_client(live_gateway, "purchasing-bot")
    yield client
    client.http.close()


@pytest.fixture
def telegram(live_gateway, fake_telegram) -> Telegram:
    return Telegram(fake_telegram, live_gateway)


def ask(agent, args=None, **extra) -> str:
    answer = agent.pre_tool_use(TOOL, args or {"amount": 80000}, user_id="u-42", **extra).json()
    assert answer["decision"] == "pending", answer
    return answer["confirmation_id"]


def test_the_card_is_html_with_buttons_whose_data_fits_telegrams_64_bytes(agent, fake_telegram):
    confirmation_id = ask(agent, {"amount": 80000, "memo": "<b>pay now</b> & fast"}, session_id="s-9")
    deliver_outbox()

    (sent,) = fake_telegram.calls("sendMessage")
    params = sent.params
    assert (params["chat_id"], params["parse_mode"]) == (CHAT_ID, "HTML")
    assert params["link_preview_options"] == {"is_disabled": True}
    text = params["text"]
    assert text.startswith(
        "<b>Approval needed</b>\n🟡 <b>Risk:</b> medium\n<b>purchasing-bot</b> wants to run <code>oa__purchase_pay</code>"
    )
    assert "&lt;b&gt;pay now&lt;/b&gt; &amp; fast" in text  # an argument cannot open a tag
    assert "<b>End user:</b> u-42 · <b>Session:</b> s-9" in text
    assert '<b>Approvers:</b> <a href="tg://user?id=111111111">111111111</a>' in text
    keyboard = keyboard_of(fake_telegram.sent()[0])
    assert list(keyboard) == ["✅ Approve", "❌ Reject…"]
    for data in keyboard.values():
        assert len(data.encode()) == 39 <= 64
        assert buttons.read_button(CHANNEL, data).confirmation_id == confirmation_id
    row = Outbox.objects.get(kind="card")
    assert row.message_ref == {"chat_id": int(CHAT_ID), "message_id": fake_telegram.sent()[0]["message_id"]}


def _card(**more) -> CardView:
    defaults = dict(
        confirmation_id=str(uuid.uuid4()), agent="a" * 300, tool_name="t" * 300, tool_args={"memo": "&<" * 3000},
        user_id="u" * 300, session_id="s" * 300, reason="r" * 2000, hook="h" * 300, status="pending",
        url="https://gateway.example/approvals/1/", approvers=tuple(str(10**8 + n) for n in range(40)),
    )  # fmt: skip
    return CardView(**{**defaults, **more})


@pytest.mark.parametrize(
    "card",
    [
        _card(),
        _card(
            status="approved",
            decided_by="telegram:111",
            decided_by_name="n" * 500,
            decision_reason="&" * 3000,
            approved_args={"memo": "<>" * 3000},
            note="note " * 500,
            escalated=True,
            approvals_required=3,
            approved_by=tuple(f"telegram:{n}" for n in range(3)),
        ),  # fmt: skip
        _card(
            items=tuple(
                CardItem(
                    str(uuid.uuid4()), "t" * 300, {"k": "&" * 1000}, "rejected", "telegram:1", "n" * 300, "&" * 1000,
                    risk="medium",  # the longest risk word each call's line shows
                )
                for _ in range(15)
            )
        ),  # fmt: skip
    ],
    ids=["pending", "decided-and-edited", "turn"],
)
def test_any_card_stays_within_telegrams_4096_characters_and_its_html_stays_whole(card):
    text = cards.card_text(card)

    assert cards.visible_length(text) <= cards.TEXT_LIMIT
    # Cut before escaping: no entity or tag is left half-written.
    assert re.fullmatch(r"(?:[^&<>]|&(?:amp|lt|gt|quot);|<[^<>]+>)*", text, re.S)
    assert text.count("<pre>") == text.count("</pre>") and text.count("<a ") == text.count("</a>")


def test_the_card_shows_its_risk_high_in_bold_before_the_call_and_still_once_decided():
    high = _card(agent="purchasing-bot", tool_name="pay", reason="", approvers=(), risk="high")
    pending = cards.card_text(high)
    assert pending.startswith("<b>Approval needed</b>\n🔴 <b>Risk: high</b>\n<b>purchasing-bot</b> wants to run")

    decided = cards.card_text(dataclasses.replace(high, status="rejected", decided_by="telegram:111"))
    assert decided.splitlines()[1] == "🔴 <b>Risk: high</b>"
    assert cards.card_text(dataclasses.replace(high, risk="low")).splitlines()[1] == "🟢 <b>Risk:</b> low"


def test_a_turns_card_shows_each_calls_risk_and_its_riskiest_at_the_top():
    items = (
        CardItem(str(uuid.uuid4()), "pay", {"amount": 5}, "pending", risk="low"),
        CardItem(str(uuid.uuid4()), "pay", {"amount": 20000}, "pending", risk="high"),
    )
    lines = cards.card_text(_card(reason="", approvers=(), risk="low", items=items)).splitlines()

    assert lines[1] == "🔴 <b>Risk: high</b>"
    assert [line.split(" <code>")[0] for line in lines if line[:3] in ("1. ", "2. ")] == ["1. 🟢", "2. 🔴"]
    assert "(low risk)" in lines[3] and "(high risk)" in lines[4]


def test_a_button_whose_data_was_changed_or_made_for_another_channel_is_refused(agent, fake_telegram, telegram):
    confirmation_id = ask(agent)
    deliver_outbox()
    card = posted_card(fake_telegram, confirmation_id)
    before = request_state(confirmation_id)
    approve = card.buttons["✅ Approve"]
    flipped = approve[:-1] + ("A" if approve[-1] != "A" else "B")  # one character of the MAC
    as_reject = "r" + approve[1:]  # the same MAC on another action
    elsewhere = buttons.button_data("other-telegram", buttons.APPROVE, confirmation_id)

    for data in (flipped, as_reject, elsewhere, "approve"):
        update = tap(fake_telegram, card.now(fake_telegram), data, ALICE)
        assert telegram.deliver(update) == 200  # answered, so Telegram does not redeliver it
        assert telegram.answer_to(update["callback_query"]["id"]) == "This button is not one this gateway made."

    assert request_state(confirmation_id) == before
    assert not ConfirmationEvent.objects.filter(kind__in=["refused_click", "late_click"]).exists()


def test_the_webhook_refuses_a_missing_or_wrong_secret_token_and_a_body_that_is_not_an_update(
    agent, fake_telegram, telegram
):
    confirmation_id = ask(agent)
    deliver_outbox()
    card = posted_card(fake_telegram, confirmation_id)
    update = tap(fake_telegram, card.now(fake_telegram), card.buttons["✅ Approve"], ALICE)
    before = request_state(confirmation_id)

    assert telegram.post(update, {}) == 401
    assert telegram.post(update, {"X-Telegram-Bot-Api-Secret-Token": WEBHOOK_SECRET + "x"}) == 401
    assert (
        telegram.post({"update_id": "one", "callback_query": {}}, {"X-Telegram-Bot-Api-Secret-Token": WEBHOOK_SECRET})
        == 400
    )
    assert request_state(confirmation_id) == before
    assert telegram.deliver({"update_id": 5, "edited_message": {"message_id": 1}}) == 200  # not ours: taken, ignored
    assert telegram.deliver(update) == 200
    assert ConfirmationRequest.objects.get(pk=confirmation_id).status == "approved"


def test_a_question_answered_by_someone_else_or_with_bad_json_changes_nothing(live_gateway, fake_telegram, telegram):
    configure(fake_telegram, gate_keys="        allow_edit: [amount]\n")
    agent = make_agent_client(live_gateway, "purchasing-bot")
    confirmation_id = ask(agent)
    deliver_outbox()
    card = posted_card(fake_telegram, confirmation_id)
    before = request_state(confirmation_id)

    status, query_id = telegram.tap(card, ALICE, "❌ Reject…")
    assert (status, telegram.answer_to(query_id)) == (200, REASON_ASKED)
    question = telegram.question_for(card, ALICE, after=card.message_id)
    assert question["force_reply"] == {"force_reply": True, "selective": True, "input_field_placeholder": "Your reason"}
    assert question["text"].startswith("Alice, why are you rejecting oa__purchase_pay?")
    from_bob = reply(fake_telegram, question, "I reject it for her", BOB)
    assert telegram.deliver(from_bob) == 200
    assert telegram.bot_reply_to(from_bob["message"]["message_id"]).startswith("This question was for someone else")

    status, query_id = telegram.tap(card, ALICE, "✏️ Edit, then approve…")
    edit_question = telegram.question_for(card, ALICE, after=question["message_id"])
    assert 'Editable: amount. Now: {"amount": 80000}' in edit_question["text"]
    not_json = reply(fake_telegram, edit_question, "make it 100", ALICE)
    assert telegram.deliver(not_json) == 200
    assert telegram.bot_reply_to(not_json["message"]["message_id"]).startswith("That is not valid JSON")
    assert request_state(confirmation_id) == before

    agreed = reply(fake_telegram, edit_question, '{"amount": 100}', ALICE)
    assert telegram.deliver(agreed) == 200
    assert telegram.bot_reply_to(agreed["message"]["message_id"]) == "Approved with your edits."
    assert ConfirmationRequest.objects.get(pk=confirmation_id).approved_args == {"amount": 100}
    agent.http.close()


def test_approve_all_on_a_turns_card_is_bound_to_the_calls_its_card_showed(
    live_gateway, fake_telegram, telegram, celery_worker
):
    configure(fake_telegram)
    agent = make_agent_client(live_gateway, "purchasing-bot")
    turn = {"turn_id": "t-1"}
    first = ask(agent, {"amount": 1}, **turn)
    card = posted_card(fake_telegram, first)
    second = ask(agent, {"amount": 2}, **turn)  # joins the turn's card, which is redrawn with both
    message = wait_until(
        lambda: "Approve all 2" in str(card.now(fake_telegram).get("reply_markup")) and card.now(fake_telegram)
    )
    assert message["text"].startswith("<b>Approval needed: 2 of 2 calls of one turn</b>")
    keyboard = keyboard_of(message)
    assert list(keyboard) == [
        "Approve 1",
        "Reject 1…",
        "Approve 2",
        "Reject 2…",
        "✅ Approve all 2",
        "❌ Reject all 2…",
    ]
    approve_all = keyboard["✅ Approve all 2"]
    assert len(approve_all.encode()) == 39

    # The same button on a keyboard that shows another set of calls does not verify.
    tampered = {**message, "reply_markup": {"inline_keyboard": message["reply_markup"]["inline_keyboard"][:1] +
                                            message["reply_markup"]["inline_keyboard"][4:]}}  # fmt: skip
    refused = tap(fake_telegram, tampered, approve_all, ALICE)
    assert telegram.deliver(refused) == 200
    assert telegram.answer_to(refused["callback_query"]["id"]) == "This button is not one this gateway made."
    assert set(ConfirmationRequest.objects.values_list("status", flat=True)) == {"pending"}

    update = tap(fake_telegram, message, approve_all, ALICE)
    assert telegram.deliver(update) == 200

    assert telegram.answer_to(update["callback_query"]["id"]) == "Approved 2 call(s) of this turn."
    assert set(ConfirmationRequest.objects.filter(pk__in=[first, second]).values_list("status", flat=True)) == {
        "approved"
    }
    wait_until(lambda: "reply_markup" not in card.now(fake_telegram), what="the turn's card to lose its buttons")
    agent.http.close()


def test_reject_all_asks_one_reason_and_rejects_the_turns_calls_with_it(
    live_gateway, fake_telegram, telegram, celery_worker
):
    configure(fake_telegram)
    agent = make_agent_client(live_gateway, "purchasing-bot")
    first = ask(agent, {"amount": 1}, turn_id="t-1")
    card = posted_card(fake_telegram, first)
    second = ask(agent, {"amount": 2}, turn_id="t-1")
    wait_until(lambda: "Reject all 2" in str(card.now(fake_telegram).get("reply_markup")), what="the turn's card")
    redrawn = dataclasses.replace(card, buttons=keyboard_of(card.now(fake_telegram)))

    told = telegram.tap_and_answer(redrawn, BOB, "❌ Reject all 2…", "Not this turn")

    assert told.text == "Rejected 2 call(s) of this turn."
    question = telegram.question_for(card, BOB, after=card.message_id)
    assert question["text"].startswith("Bob, why are you rejecting the 2 pending calls of this turn?")
    rejected = ConfirmationRequest.objects.filter(pk__in=[first, second])
    assert set(rejected.values_list("status", "decided_by", "decision_reason")) == {
        ("rejected", f"telegram:{BOB['id']}", "Not this turn")
    }
    agent.http.close()


def test_flood_control_reschedules_the_card_after_retry_after(agent, fake_telegram):
    fake_telegram.fail_next("sendMessage", status=429, description="Too Many Requests: retry after 7", retry_after=7)
    confirmation_id = ask(agent)
    before = timezone.now()

    deliver_outbox()

    row = Outbox.objects.get(kind="card")
    assert (row.status, row.attempts) == ("pending", 1)
    assert row.last_error == "telegram sendMessage failed: flood control (retry after 7 s)"
    assert dt.timedelta(seconds=6) <= row.next_attempt_at - before <= dt.timedelta(seconds=9)
    Outbox.objects.filter(pk=row.pk).update(next_attempt_at=timezone.now())
    deliver_outbox()
    row.refresh_from_db()
    assert (row.status, row.attempts) == ("sent", 2)
    assert ConfirmationRequest.objects.get(pk=confirmation_id).status == "pending"


@pytest.mark.parametrize(
    ("status", "description", "said"),
    [
        (
            403,
            "Forbidden: bot was kicked from the supergroup chat",
            "telegram sendMessage failed: Forbidden: bot was kicked from the supergroup chat",
        ),
        (400, "Bad Request: chat not found", "telegram sendMessage failed: Chat not found"),
        (401, "Unauthorized", "telegram sendMessage failed: the bot token was refused (check bot_token)"),
    ],
)
def test_a_chat_the_bot_cannot_post_to_fails_the_request_closed(agent, fake_telegram, status, description, said):
    fake_telegram.fail_next("sendMessage", status=status, description=description)
    confirmation_id = ask(agent)

    deliver_outbox()

    confirmation = ConfirmationRequest.objects.get(pk=confirmation_id)
    assert confirmation.status == "rejected"
    assert confirmation.decision_reason == f"the approval card could not be delivered to channel {CHANNEL}: {said}"
    assert Channel.objects.get(name=CHANNEL).last_error == said


def test_a_network_failure_is_retried(agent, fake_telegram):
    fake_telegram.fail_next("sendMessage", drop=True)
    ask(agent)

    deliver_outbox()

    row = Outbox.objects.get(kind="card")
    assert (row.status, row.attempts) == ("pending", 1)
    assert row.last_error.startswith("telegram sendMessage failed: ")


def test_the_bot_token_and_webhook_secret_are_kept_out_of_the_logs_and_the_admin(
    agent, fake_telegram, admin_client, caplog
):
    caplog.set_level(logging.DEBUG)
    ask(agent)
    deliver_outbox()  # a card sent: httpx logs the request's URL, which holds the token
    fake_telegram.tokens.clear()
    ask(agent, {"amount": 1})
    deliver_outbox()  # refused: the SDK's InvalidToken message names the token

    assert Outbox.objects.filter(status="failed").count() == 1
    logged = "\n".join(record.getMessage() for record in caplog.records)
    assert "HTTP Request: POST http://127.0.0.1" in logged and "/bot<bot token>/sendMessage" in logged
    assert BOT_TOKEN not in logged and BOT_TOKEN.split(":")[1] not in logged
    channel = Channel.objects.get(name=CHANNEL)
    page = admin_client.get(f"/admin/approvals/channel/{channel.pk}/change/").content.decode()
    assert BOT_TOKEN.split(":")[1] not in page and WEBHOOK_SECRET not in page and "••••••" in page


def test_a_reminder_edits_the_card_and_mentions_the_approvers_still_to_answer(live_gateway, fake_telegram, telegram):
    configure(
        fake_telegram,
        timeout_seconds=600,
        gate_keys="        approvals_required: 2\n        remind_after_seconds: 60\n",
    )
    agent = make_agent_client(live_gateway, "purchasing-bot")
    confirmation_id = ask(agent)
    deliver_outbox()
    card = posted_card(fake_telegram, confirmation_id)
    status, query_id = telegram.tap(card, ALICE, "✅ Approve")
    assert telegram.answer_to(query_id) == "Approval recorded (1 of 2)."
    deliver_outbox()
    ConfirmationRequest.objects.filter(pk=confirmation_id).update(remind_at=timezone.now() - dt.timedelta(seconds=1))

    assert run_timers.apply().get()["reminded"] == 1
    deliver_outbox()

    assert "🔔 Reminder" in card.now(fake_telegram)["text"]
    (note,) = [
        m for m in fake_telegram.sent() if (m.get("reply_parameters") or {}).get("message_id") == card.message_id
    ]
    assert note["text"].startswith("🔔 Reminder")
    assert '<a href="tg://user?id=222222222">222222222</a>' in note["text"]  # bob: still to answer
    assert "111111111" not in note["text"]  # alice answered
    assert MALLORY["first_name"] not in note["text"]
    agent.http.close()
