"""The channel contract (tests/channels_ext/contract.py) on Telegram, through python-telegram-bot and a
fake Bot API: the card is the message the fake holds (edited as the request changes), a tap is a
`callback_query` update, Reject… and Edit… ask a question answered by a reply, and what the clicker
is told is the tap's answerCallbackQuery text (or the bot's reply to their answer).

Run twice: with updates as webhook POSTs (`mode: http`), and by long polling (`mode: polling`), where
`channel_connections`' runner holds getUpdates and the updates are queued on the fake."""

from __future__ import annotations

import json
from typing import Any

import pytest

from approvals.models import Outbox
from tests.channels_ext.connections_support import connection_state, running_connections
from tests.channels_ext.contract import EditContract, PeopleContract, Person, Told, gate_keys, more_hooks
from tests.channels_ext.telegram.support import (
    ALICE,
    BOB,
    CHANNEL,
    MALLORY,
    VALUES_ASKED,
    WEBHOOK_SECRET,
    Card,
    Telegram,
    configure,
    keyboard_of,
    mention,
    person,
    posted_card,
)
from tests.conftest import AgentClient, make_agent_client
from tests.fakes.telegram_api import FakeTelegram, tap
from tests.support import wait_until

pytestmark = pytest.mark.django_db(transaction=True)

_HEADS = {"approved": "✅ <b>Approved</b>", "rejected": "❌ <b>Rejected</b>", "expired": "⌛ <b>Expired</b>",
          "cancelled": "🚫 <b>Cancelled</b>"}  # fmt: skip
_LABELS = {"approve": "✅ Approve", "reject": "❌ Reject…"}


class TelegramDriver:
    approvers = (person(ALICE), person(BOB))
    outsider = person(MALLORY)
    duplicate_told = "This click was already handled."  # a redelivered update carries the same query id
    mode = "http"

    def __init__(self, live_gateway, fake: FakeTelegram):
        self.live_gateway = live_gateway
        self.fake = fake
        self.telegram = Telegram(fake, live_gateway)

    def user(self, who: Person) -> dict[str, Any]:
        return {p.id: u for p, u in zip((*self.approvers, self.outsider), (ALICE, BOB, MALLORY), strict=True)}[who.id]

    def deploy(
        self, *, timeout_seconds: int = 1800, gate: dict[str, Any] | None = None, hooks: list[dict[str, Any]] | None = None
    ) -> AgentClient:
        configure(
            self.fake, mode=self.mode, timeout_seconds=timeout_seconds, gate_keys=gate_keys(gate or {}) + more_hooks(hooks or [])
        )
        return make_agent_client(self.live_gateway, "purchasing-bot")

    def card(self, confirmation_id: str) -> Card:
        return posted_card(self.fake, confirmation_id)

    def click(self, card: Card, person: Person, decision: str, *, reason: str = "") -> Told:
        if decision == "reject":
            return self.telegram.tap_and_answer(
                card, self.user(person), _LABELS[decision], reason or "rejected in Telegram"
            )
        status, query_id = self.telegram.tap(card, self.user(person), _LABELS[decision])
        return Told(taken=status == 200, text=self.telegram.answer_to(query_id) if status == 200 else None)

    def click_twice(self, card: Card, person: Person, decision: str) -> tuple[Told, Told]:
        query_id = self.fake.new_query_id()
        told = []
        for nth in (1, 2):
            status, _ = self.telegram.tap(card, self.user(person), _LABELS[decision], query_id=query_id)
            told.append(Told(taken=status == 200, text=self.telegram.answer_to(query_id, nth)))
        return told[0], told[1]

    def forged_click(self, card: Card, person: Person, decision: str) -> int:
        update = tap(self.fake, card.now(self.fake), card.buttons[_LABELS[decision]], self.user(person))
        return self.telegram.post(update, {"X-Telegram-Bot-Api-Secret-Token": "not-the-webhook-secret"})

    def edit(self, card: Card, person: Person, typed: dict[str, str]) -> Told:
        # The approver replies with the values as text in a JSON object: {"amount": "8000"}.
        told = self.telegram.tap_and_answer(card, self.user(person), "✏️ Edit, then approve…", json.dumps(typed))
        assert told.text != VALUES_ASKED
        return told

    def scope_buttons(self, card: Card) -> list[str]:
        return [label for label in card.buttons if label.startswith("Approve for")]

    def approve_for(self, card: Card, person: Person, scope: int) -> Told:
        status, query_id = self.telegram.tap(card, self.user(person), self.scope_buttons(card)[scope])
        return Told(taken=status == 200, text=self.telegram.answer_to(query_id) if status == 200 else None)

    def expect_decided(
        self, card: Card, *, status: str, by: Person | None, reason: str = "", edited: bool = False
    ) -> None:
        head = _HEADS[status] + (" (edited)" if edited else "") + (f" by {mention(by)}" if by is not None else "")

        def edited_to_show_it() -> dict[str, Any] | None:
            message = card.now(self.fake)
            return message if "edit_date" in message and message["text"].startswith(head) else None

        message = wait_until(edited_to_show_it, what=f"the message to start with {head!r}")
        assert "reply_markup" not in message  # no buttons left
        assert " at " in message["text"].splitlines()[0]
        if reason:
            assert f"— {reason}" in message["text"].splitlines()[0]
        assert ("<b>Approved arguments</b> (edited by the approver)" in message["text"]) is edited

    def expect_open(self, card: Card) -> None:
        labels = list(keyboard_of(card.now(self.fake)))
        assert labels[:2] == ["✅ Approve", "❌ Reject…"]


class TestTelegramChannelByWebhook(EditContract, PeopleContract):
    @pytest.fixture
    def driver(self, live_gateway, fake_telegram, celery_worker):
        yield TelegramDriver(live_gateway, fake_telegram)
        # The worker finishes this test's edits while the fake still answers.
        wait_until(lambda: not Outbox.objects.filter(status="pending").exists(), what="the outbox to drain")


class PollingTelegram(Telegram):
    """Updates queued on the fake, fetched by the gateway's getUpdates; 200 once the gateway has taken them."""

    def deliver(self, update: dict[str, Any]) -> int:
        self.fake.push({k: v for k, v in update.items() if k != "update_id"})
        wait_until(lambda: self.fake.pending_updates() == 0 or None, what="the gateway to fetch the update")
        return 200


class PollingTelegramDriver(TelegramDriver):
    mode = "polling"

    def __init__(self, live_gateway, fake: FakeTelegram):
        super().__init__(live_gateway, fake)
        self.telegram = PollingTelegram(fake, live_gateway)

    def deploy(
        self, *, timeout_seconds: int = 1800, gate: dict[str, Any] | None = None, hooks: list[dict[str, Any]] | None = None
    ) -> AgentClient:
        agent = super().deploy(timeout_seconds=timeout_seconds, gate=gate, hooks=hooks)
        wait_until(lambda: connection_state(CHANNEL) == "connected", what="the getUpdates long polling")
        return agent

    def forged_click(self, card: Card, person: Person, decision: str) -> int:
        # By long polling nothing is accepted over HTTP: even a webhook POST with the right secret token.
        update = tap(self.fake, card.now(self.fake), card.buttons[_LABELS[decision]], self.user(person))
        return self.telegram.post(update, {"X-Telegram-Bot-Api-Secret-Token": WEBHOOK_SECRET})


class TestTelegramChannelByLongPolling(EditContract):
    @pytest.fixture
    def driver(self, live_gateway, fake_telegram, celery_worker):
        with running_connections():
            yield PollingTelegramDriver(live_gateway, fake_telegram)
            wait_until(lambda: not Outbox.objects.filter(status="pending").exists(), what="the outbox to drain")
