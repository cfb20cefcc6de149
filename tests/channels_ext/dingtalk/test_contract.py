"""The channel contract (tests/channels_ext/contract.py) on DingTalk: the card is the card instance FakeDingTalk
holds (updated as the request changes), a click is a card callback on the Stream that `channel_connections`' runner
holds, what the clicker is told is in the callback's ack. DingTalk's general card template has no input fields, so
DingTalk keeps the contract without its edit scenarios (`EditContract`): its card sends the approver to the
approval page to edit (docs/dingtalk.md), which the last test here shows."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import httpx
import pytest

from approvals import selectors
from approvals.models import Outbox
from channels_ext.dingtalk.cards import parse_button_id
from tests.channels_ext.connections_support import running_connections
from tests.channels_ext.contract import ChannelContract, PeopleContract, Person, Told, gate_keys, more_hooks, pending
from tests.channels_ext.dingtalk.support import CHANNEL, DIRECTOR, INTERN, MANAGER, agents_yaml, channel_yaml
from tests.conftest import AgentClient, apply_config, make_agent_client
from tests.fakes.dingtalk_api import FakeCard, FakeDingTalk
from tests.support import wait_until

pytestmark = pytest.mark.django_db(transaction=True)

_TITLES = {"approved": "Approved", "rejected": "Rejected", "expired": "Expired", "cancelled": "Cancelled"}
_ICONS = {"approved": "✅", "rejected": "❌", "expired": "⌛", "cancelled": "🚫"}


@dataclasses.dataclass(frozen=True)
class DingTalkCard:
    """The card instance, and its buttons as first drawn (what a late clicker still has on screen), by action."""

    card: FakeCard
    buttons: dict[str, dict[str, Any]]


class DingTalkDriver:
    # DingTalk callbacks carry the userId and no display name: the id is the name too.
    approvers = (Person(MANAGER, MANAGER, f"dingtalk:{MANAGER}"), Person(DIRECTOR, DIRECTOR, f"dingtalk:{DIRECTOR}"))
    outsider = Person(INTERN, INTERN, f"dingtalk:{INTERN}")
    duplicate_told = "This click was already handled."  # a redelivery carries the same messageId

    def __init__(self, live_gateway, fake: FakeDingTalk):
        self.live_gateway = live_gateway
        self.fake = fake

    def deploy(
        self, *, timeout_seconds: int = 1800, gate: dict[str, Any] | None = None, hooks: list[dict[str, Any]] | None = None
    ) -> AgentClient:
        apply_config(channel_yaml(self.fake) + agents_yaml(timeout_seconds, gate_keys(gate or {}) + more_hooks(hooks or [])))
        return make_agent_client(self.live_gateway, "purchasing-bot")

    def card(self, confirmation_id: str) -> DingTalkCard:
        wait_until(lambda: Outbox.objects.filter(kind="card", status="sent").exists(), what="the card to be sent")
        wait_until(lambda: self.fake.connections, what="the Stream connection")
        [card] = self.fake.posted()
        buttons = {parse_button_id(b["id"])[0]: b for b in card.buttons}
        assert parse_button_id(buttons["approve"]["id"])[1] == confirmation_id
        return DingTalkCard(card, buttons)

    def _click(
        self, card: DingTalkCard, person: Person, action: str, message_id: str | None = None, reason: str = ""
    ) -> Told:
        ack = self.fake.deliver_card_callback(
            out_track_id=card.card.out_track_id,
            button_id=card.buttons[action]["id"],
            user_id=person.id,
            params={"reason": reason} if reason else None,
            message_id=message_id,
        )
        assert ack is not None, "no ack within DingTalk's time"
        assert ack.response is not None
        return Told(taken=ack.code == 200, text=ack.response["message"])

    def click(self, card: DingTalkCard, person: Person, decision: str, *, reason: str = "") -> Told:
        # A template with an input named `reason` sends what was typed (the general template has none).
        return self._click(card, person, decision, reason=reason)

    def click_twice(self, card: DingTalkCard, person: Person, decision: str) -> tuple[Told, Told]:
        return self._click(card, person, decision, "redelivered-1"), self._click(card, person, decision, "redelivered-1")

    def scope_buttons(self, card: DingTalkCard) -> list[str]:
        return [b["text"] for action, b in card.buttons.items() if action.startswith("approve_grant_")]

    def approve_for(self, card: DingTalkCard, person: Person, scope: int) -> Told:
        return self._click(card, person, f"approve_grant_{scope}")

    def forged_click(self, card: DingTalkCard, person: Person, decision: str) -> int:
        # Clicks come only over the Stream, which DingTalk authenticates; the one way in that is not
        # the Stream — a POST to the channel's callback URL — is refused.
        body = {"outTrackId": card.card.out_track_id, "userId": person.id, "content": json.dumps({"cardPrivateData": {"actionIds": [card.buttons[decision]["id"]]}})}
        return httpx.post(f"{self.live_gateway.url}/channels/{CHANNEL}/callback", json=body, timeout=10).status_code

    def expect_decided(
        self, card: DingTalkCard, *, status: str, by: Person | None, reason: str = "", edited: bool = False
    ) -> None:
        def updated() -> dict[str, str] | None:
            params = card.card.params if card.card.updates else None
            return params if params and params["msgTitle"].startswith(f"{_TITLES[status]}:") else None

        params = wait_until(updated, what=f"an update of card {card.card.out_track_id} showing {status}")
        assert json.loads(params["sys_full_json_obj"])["msgButtons"] == []  # no buttons left, for everyone
        line = f"{_ICONS[status]} **{_TITLES[status]}**" + (" (edited)" if edited else "")
        if by is not None:
            line += f" by {by.label}"
        assert line in params["msgContent"]
        if reason:
            assert f"— {reason}" in params["msgContent"]

    def expect_open(self, card: DingTalkCard) -> None:
        assert {"approve", "reject"} <= set(card.buttons)
        assert card.card.updates == 0


class TestDingTalkChannel(ChannelContract, PeopleContract):
    @pytest.fixture
    def driver(self, live_gateway, fake_dingtalk, celery_worker):
        with running_connections():
            yield DingTalkDriver(live_gateway, fake_dingtalk)
            # The worker finishes this test's redraws while FakeDingTalk still answers.
            wait_until(lambda: not Outbox.objects.filter(status="pending").exists(), what="the outbox to drain")

    def test_a_gate_that_allows_edits_sends_the_approver_to_the_approval_page_to_edit(self, driver):
        agent = driver.deploy(gate={"allow_edit": ["amount"]})
        confirmation_id = pending(agent, {"amount": 80000, "vendor": "ACME"})

        card = driver.card(confirmation_id)

        assert set(card.buttons) == {"approve", "reject"}  # no input, so no edit button
        page = selectors.confirmation_url(confirmation_id)
        assert f"[Open the approval page]({page})" in card.card.params["msgContent"]
