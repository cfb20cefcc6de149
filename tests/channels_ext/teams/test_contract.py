"""The channel contract (tests/channels_ext/contract.py) on Microsoft Teams: the card is the activity FakeTeams'
Bot Connector holds (updated as the request changes), a click is an `adaptiveCard/action` invoke signed as Bot
Framework signs it, what the clicker is told is in the invoke's answer (the refreshed card, shown to them)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from approvals.models import Outbox
from gateway_contract import unsign_confirmation_id
from tests.channels_ext.contract import EditContract, PeopleContract, Person, Told, gate_keys, more_hooks
from tests.channels_ext.teams.support import (
    ALICE,
    BOB,
    MALLORY,
    agents_yaml,
    card_text,
    channel_yaml,
    element,
    executes,
    inputs,
    invoke_activity,
    post_activity,
    text_of,
)
from tests.conftest import AgentClient, apply_config, make_agent_client
from tests.fakes.teams_api import FakeActivity, FakeTeams
from tests.support import wait_until

pytestmark = pytest.mark.django_db(transaction=True)

_TITLES = {"approved": "Approved", "rejected": "Rejected", "expired": "Expired", "cancelled": "Cancelled"}
_ICONS = {"approved": "✅", "rejected": "❌", "expired": "⌛", "cancelled": "🚫"}


@dataclasses.dataclass(frozen=True)
class TeamsCard:
    """The posted activity, and its buttons as first posted (what a late clicker still has on screen), by verb."""

    activity: FakeActivity
    buttons: dict[str, dict[str, Any]]
    inputs: dict[str, dict[str, Any]]


class TeamsDriver:
    approvers = (Person(ALICE[0], ALICE[1], f"teams:{ALICE[0]}"), Person(BOB[0], BOB[1], f"teams:{BOB[0]}"))
    outsider = Person(MALLORY[0], MALLORY[1], f"teams:{MALLORY[0]}")
    duplicate_told = "This click was already handled."  # a redelivery carries the same activity id

    def __init__(self, live_gateway, fake: FakeTeams):
        self.live_gateway = live_gateway
        self.fake = fake

    def deploy(
        self, *, timeout_seconds: int = 1800, gate: dict[str, Any] | None = None, hooks: list[dict[str, Any]] | None = None
    ) -> AgentClient:
        apply_config(channel_yaml(self.fake) + agents_yaml(timeout_seconds, gate_keys(gate or {}) + more_hooks(hooks or [])))
        return make_agent_client(self.live_gateway, "purchasing-bot")

    def card(self, confirmation_id: str) -> TeamsCard:
        wait_until(lambda: Outbox.objects.filter(kind="card", status="sent").exists(), what="the card to be posted")
        [activity] = self.fake.posted()
        # (its buttons as posted: the card may have been redrawn already, a request that expired at once)
        buttons = {button["verb"]: button for button in executes(activity.posted_card)}
        assert unsign_confirmation_id(buttons["approve"]["data"]["confirmation_id"]) == confirmation_id
        return TeamsCard(activity, buttons, inputs(activity.posted_card))

    def _press(self, card: TeamsCard, person: Person, verb: str, data: dict[str, Any], activity_id: str | None = None):
        activity = invoke_activity(
            self.fake, verb, data, who=(person.id, person.name), activity_id=activity_id, reply_to=card.activity.activity_id
        )
        return post_activity(self.live_gateway, activity, self.fake.activity_token())

    def _told(self, response) -> Told:
        assert response.status_code == 200, response.text
        answer = response.json()
        assert answer["statusCode"] == 200
        if answer["type"] == "application/vnd.microsoft.activity.message":
            return Told(taken=True, text=answer["value"])
        assert answer["type"] == "application/vnd.microsoft.card.adaptive"
        told = element(answer["value"], "told")
        assert told is not None, answer
        text = text_of(told).removeprefix("ℹ️ ")
        if text.startswith(("Already", "This request expired")):
            assert executes(answer["value"]) == []  # the clicker sees the decided card at once
        return Told(taken=True, text=text)

    def click(self, card: TeamsCard, person: Person, decision: str, *, reason: str = "") -> Told:
        data = dict(card.buttons[decision]["data"])
        if reason:
            data["reason"] = reason  # Teams merges the card's inputs into the action's data
        return self._told(self._press(card, person, decision, data))

    def click_twice(self, card: TeamsCard, person: Person, decision: str) -> tuple[Told, Told]:
        data = card.buttons[decision]["data"]
        activity_id = "f:redelivered-1"
        first = self._told(self._press(card, person, decision, data, activity_id))
        return first, self._told(self._press(card, person, decision, data, activity_id))

    def edit(self, card: TeamsCard, person: Person, typed: dict[str, str]) -> Told:
        data = dict(card.buttons["approve_edited"]["data"])
        # A path the form does not offer can only come from a tampered click: send it anyway.
        data["edit"] = data["edit"] + [p for p in typed if p not in data["edit"]]
        for number, path in enumerate(data["edit"]):
            offered = card.inputs.get(f"arg_{number}", {}).get("value", "")
            data[f"arg_{number}"] = typed[path] if path in typed else offered
        return self._told(self._press(card, person, "approve_edited", data))

    def scope_buttons(self, card: TeamsCard) -> list[str]:
        return [b["title"] for verb, b in card.buttons.items() if verb.startswith("approve_grant_")]

    def approve_for(self, card: TeamsCard, person: Person, scope: int) -> Told:
        verb = f"approve_grant_{scope}"
        return self._told(self._press(card, person, verb, card.buttons[verb]["data"]))

    def forged_click(self, card: TeamsCard, person: Person, decision: str) -> int:
        activity = invoke_activity(self.fake, decision, card.buttons[decision]["data"], who=(person.id, person.name))
        forged = self.fake.activity_token(key=FakeTeams(app_id="x", app_password="x", tenant_id="x").signing_key)
        return post_activity(self.live_gateway, activity, forged).status_code

    def expect_decided(
        self, card: TeamsCard, *, status: str, by: Person | None, reason: str = "", edited: bool = False
    ) -> None:
        def updated() -> dict[str, Any] | None:
            shown = card.activity.card if card.activity.updates else None
            return shown if shown and shown["body"][0]["text"] == _TITLES[status] else None

        shown = wait_until(updated, what=f"an update of activity {card.activity.activity_id} showing {status}")
        assert executes(shown) == []  # no buttons left, for everyone
        outcome = text_of(element(shown, "outcome"))
        assert outcome.startswith(f"{_ICONS[status]} {_TITLES[status]}" + (" (edited)" if edited else ""))
        if by is not None:
            assert f" by {by.label} at " in outcome
        if reason:
            assert outcome.endswith(f"— {reason}")
        assert (element(shown, "approved_args") is not None) is edited

    def expect_open(self, card: TeamsCard) -> None:
        assert {"approve", "reject"} <= {b["verb"] for b in executes(card.activity.card)}
        assert card.activity.updates == 0
        assert "Approval needed" in card_text(card.activity.card)


class TestTeamsChannel(EditContract, PeopleContract):
    @pytest.fixture
    def driver(self, live_gateway, fake_teams, celery_worker):
        yield TeamsDriver(live_gateway, fake_teams)
        # The worker finishes this test's redraws while FakeTeams still answers.
        wait_until(lambda: not Outbox.objects.filter(status="pending").exists(), what="the outbox to drain")
