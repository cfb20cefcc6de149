"""The Telegram channel on the live gateway: configuring it, reading its messages, tapping and replying
as Telegram delivers it (a webhook POST, or an update queued for the gateway's getUpdates)."""

from __future__ import annotations

import dataclasses
import html
from typing import Any

import httpx

from approvals.models import Outbox
from channels_ext.telegram import buttons
from tests.channels_ext.contract import Person, Told, purchasing_gate
from tests.conftest import apply_config
from tests.fakes.telegram_api import BOT_TOKEN, FakeTelegram, reply, tap, user
from tests.support import wait_until

CHANNEL = "ops-telegram"
CHAT_ID = "-1001234567890"
WEBHOOK_SECRET = "webhook_Secret-0123456789"
ALICE = user(111111111, "Alice", "alice")
BOB = user(222222222, "Bob", "bob")
MALLORY = user(333333333, "Mallory")  # in the group, not an approver
REASON_ASKED = "Reply to my message below with your reason."
VALUES_ASKED = "Reply to my message below with the new values."


def person(tg_user: dict[str, Any]) -> Person:
    return Person(str(tg_user["id"]), tg_user["first_name"], f"telegram:{tg_user['id']}")


def channel_yaml(fake: FakeTelegram, *, mode: str = "http", **more: Any) -> str:
    keys = {"mode": mode, "bot_token": BOT_TOKEN, "chat_id": f'"{CHAT_ID}"', "api_base_url": fake.base_url, **more}
    if mode == "http":
        keys.setdefault("webhook_secret", WEBHOOK_SECRET)
    lines = "".join(f"    {key}: {value}\n" for key, value in keys.items())
    return f"\n  - name: {CHANNEL}\n    kind: telegram\n{lines}"


def configure(
    fake: FakeTelegram,
    *,
    mode: str = "http",
    timeout_seconds: int = 1800,
    approvers: tuple[dict[str, Any], ...] = (ALICE, BOB),
    gate_keys: str = "",
    channel_keys: dict[str, Any] | None = None,
) -> None:
    channels = "channels:" + channel_yaml(fake, mode=mode, **(channel_keys or {}))
    ids = [str(a["id"]) for a in approvers]
    apply_config(channels + purchasing_gate(CHANNEL, ids, timeout_seconds=timeout_seconds, more=gate_keys))


@dataclasses.dataclass(frozen=True)
class Card:
    """The approval message, and its buttons as first sent (what a late tapper still has on screen)."""

    chat_id: str
    message_id: int
    buttons: dict[str, str]  # label -> callback_data

    def now(self, fake: FakeTelegram) -> dict[str, Any]:
        return fake.messages[(self.chat_id, self.message_id)]


def keyboard_of(message: dict[str, Any]) -> dict[str, str]:
    rows = (message.get("reply_markup") or {}).get("inline_keyboard", [])
    return {button["text"]: button["callback_data"] for row in rows for button in row}


def posted_card(fake: FakeTelegram, confirmation_id: str | None = None) -> Card:
    """Wait until the card is sent (and recorded as sent); the card."""
    wait_until(lambda: Outbox.objects.filter(kind="card", status="sent").exists(), what="the card to be sent")
    cards = [m for m in fake.sent() if "force_reply" not in m and "reply_parameters" not in m]
    message = cards[-1]
    card = Card(str(message["chat"]["id"]), message["message_id"], keyboard_of(message))
    if confirmation_id is not None:
        assert buttons.read_button(CHANNEL, card.buttons["✅ Approve"]).confirmation_id == confirmation_id
    return card


def mention(who: Person) -> str:
    return f'<a href="tg://user?id={who.id}">{html.escape(who.label, quote=False)}</a>'


class Telegram:
    """Taps and replies as Telegram delivers them to the gateway: `deliver` is the transport."""

    def __init__(self, fake: FakeTelegram, live_gateway: Any) -> None:
        self.fake = fake
        self.live_gateway = live_gateway

    def deliver(self, update: dict[str, Any]) -> int:
        """A webhook POST signed with the channel's secret token; the HTTP status."""
        return self.post(update, {"X-Telegram-Bot-Api-Secret-Token": WEBHOOK_SECRET})

    def post(self, update: dict[str, Any], headers: dict[str, str]) -> int:
        url = f"{self.live_gateway.url}/channels/{CHANNEL}/callback"
        return httpx.post(url, json=update, headers=headers, timeout=20).status_code

    def answer_to(self, query_id: str, nth: int = 1) -> str:
        """The text the gateway answered a tap with (its `nth` answer to that query)."""

        def answered() -> list[Any]:
            found = [c for c in self.fake.calls("answerCallbackQuery") if c.params["callback_query_id"] == query_id]
            return found if len(found) >= nth else []

        return wait_until(answered, what=f"answer {nth} to tap {query_id}")[nth - 1].params.get("text", "")

    def bot_reply_to(self, message_id: int) -> str:
        def found() -> str | None:
            for message in self.fake.sent():
                if (message.get("reply_parameters") or {}).get("message_id") == message_id:
                    return message["text"]
            return None

        return wait_until(found, what=f"the bot's reply to message {message_id}")

    def question_for(self, card: Card, who: dict[str, Any], after: int) -> dict[str, Any]:
        """The question (ForceReply) the gateway sent `who` under the card, after message id `after`."""

        def asked() -> dict[str, Any] | None:
            for message in self.fake.sent():
                if (
                    message["message_id"] > after
                    and message.get("force_reply")
                    and any(e.get("user", {}).get("id") == who["id"] for e in message.get("entities", []))
                ):
                    return message
            return None

        return wait_until(asked, what=f"a question to {who['first_name']}")

    def tap(self, card: Card, who: dict[str, Any], label: str, *, query_id: str | None = None) -> tuple[int, str]:
        """`who` taps the card's button `label`: (HTTP status of the delivery, the tap's query id)."""
        update = tap(self.fake, card.now(self.fake), card.buttons[label], who, query_id=query_id)
        return self.deliver(update), update["callback_query"]["id"]

    def answer_question(self, card: Card, who: dict[str, Any], query_id: str, text: str, asked_after: int) -> Told:
        question = self.question_for(card, who, asked_after)
        answer = reply(self.fake, question, text, who)
        assert self.deliver(answer) == 200
        return Told(taken=True, text=self.bot_reply_to(answer["message"]["message_id"]))

    def tap_and_answer(self, card: Card, who: dict[str, Any], label: str, text: str) -> Told:
        """Tap a button that asks a question (Reject…, Edit…); answer it with `text` if it is asked."""
        asked_after = max((m["message_id"] for m in self.fake.sent()), default=0)
        status, query_id = self.tap(card, who, label)
        if status != 200:
            return Told(taken=False, text=None)
        said = self.answer_to(query_id)
        if said not in (REASON_ASKED, VALUES_ASKED):
            return Told(taken=True, text=said)
        return self.answer_question(card, who, query_id, text, asked_after)
