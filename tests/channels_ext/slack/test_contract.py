"""The channel contract (tests/channels_ext/contract.py) on Slack: the card is the message FakeSlack holds,
a click is a signed interactivity request (Reject opens the reason modal, whose submission decides),
what the clicker is told is the ephemeral note posted to the click's response_url."""

from __future__ import annotations

import itertools
import json
from typing import Any

import httpx
import pytest

from approvals.models import ApproverResponse
from gateway_contract import unsign_confirmation_id
from tests.channels_ext.contract import EditContract, PeopleContract, Person, Told, gate_keys, more_hooks
from tests.channels_ext.slack.test_end_to_end import (
    ALICE,
    BOB,
    MALLORY,
    PostedCard,
    block_text,
    card_updates,
    configure,
    notes_to,
    post_interaction,
    posted_card,
)
from tests.conftest import AgentClient, make_agent_client
from tests.fakes.slack_api import FakeSlack, block_actions_payload, form_body, view_submission_payload
from tests.support import wait_until

pytestmark = pytest.mark.django_db(transaction=True)

_HEADS = {"approved": "✅ Approved", "rejected": "❌ Rejected", "expired": "⌛ Expired", "cancelled": "🚫 Cancelled"}


class SlackDriver:
    approvers = (
        Person(ALICE.id, ALICE.name, f"slack:{ALICE.id}"),  # recorded under the user id, the name beside it
        Person(BOB.id, BOB.name, f"slack:{BOB.id}"),
    )
    outsider = Person(MALLORY.id, MALLORY.name, f"slack:{MALLORY.id}")  # in the channel, not an approver
    duplicate_told = "Already approved by {by}."  # Slack has no event id for clicks: the second one is late

    def __init__(self, live_gateway, fake_slack: FakeSlack):
        self.live_gateway = live_gateway
        self.fake = fake_slack
        self._names = itertools.count(1)

    def deploy(
        self, *, timeout_seconds: int = 1800, gate: dict[str, Any] | None = None, hooks: list[dict[str, Any]] | None = None
    ) -> AgentClient:
        configure(self.fake, timeout_seconds=timeout_seconds, gate_keys=gate_keys(gate or {}) + more_hooks(hooks or []))
        return make_agent_client(self.live_gateway, "purchasing-bot")

    def card(self, confirmation_id: str) -> PostedCard:
        card = posted_card(self.fake)
        assert unsign_confirmation_id(card.button("approve")["value"]) == confirmation_id
        return card

    def _payload(self, card: PostedCard, person: Person, decision: str, note_to: str) -> dict[str, Any]:
        """A click on the card's button `decision` (its action_id: approve, reject, edit, approve_grant_<n>)."""
        payload = block_actions_payload(
            action_id=decision,
            value=card.button(decision)["value"],
            user_id=person.id,
            user_name=person.name,
            trigger_id=f"trigger.{note_to}",
            response_url=self.fake.response_url(note_to),
            channel_id=card.channel,
            message_ts=card.ts,
        )
        payload["message"] = card.message(self.fake)
        return payload

    def _deliver(self, card: PostedCard, person: Person, decision: str, payload: dict[str, Any], note_to: str, reason: str) -> Told:
        confirmation_id = unsign_confirmation_id(card.button(decision)["value"])
        answered = ApproverResponse.objects.filter(confirmation_id=confirmation_id, approver=person.decided_by)
        had_answered = answered.exists()
        response = post_interaction(self.live_gateway, payload)
        if response.status_code != 200:
            return Told(taken=False, text=None)
        assert response.content == b""  # Slack shows nothing; the card and notes say it
        if decision == "approve":
            if answered.exists() and not had_answered:
                assert notes_to(self.fake, note_to) == []  # no note for a counted click
                return Told(taken=True, text=None)
            return Told(taken=True, text=self._note(note_to))

        # Reject: a reason modal opens, unless the click could not count (then a note says why).
        def modal_or_note() -> tuple[str, Any] | None:
            opened = [c for c in self.fake.calls("views.open") if c.json["trigger_id"] == f"trigger.{note_to}"]
            if opened:
                return "modal", opened[0]
            notes = notes_to(self.fake, note_to)
            return ("note", notes[0]) if notes else None

        kind, found = wait_until(modal_or_note, what="a reason modal or a note to the clicker")
        if kind == "note":
            return Told(taken=True, text=found["text"])
        view = found.json["view"]
        submission = view_submission_payload(
            private_metadata=view["private_metadata"], reason=reason, user_id=person.id, user_name=person.name
        )
        submitted = post_interaction(self.live_gateway, submission)
        assert submitted.status_code == 200
        answer = submitted.json()
        if answer == {"response_action": "clear"}:
            return Told(taken=True, text=None)
        return Told(taken=True, text=answer["errors"]["reason"])

    def _note(self, note_to: str) -> str:
        (note,) = wait_until(lambda: notes_to(self.fake, note_to), what=f"a note to {note_to}")
        assert (note["response_type"], note["replace_original"]) == ("ephemeral", False)
        return note["text"]

    def click(self, card: PostedCard, person: Person, decision: str, *, reason: str = "") -> Told:
        note_to = f"{person.name}-{next(self._names)}"
        payload = self._payload(card, person, decision, note_to)
        return self._deliver(card, person, decision, payload, note_to, reason or "rejected in Slack")

    def click_twice(self, card: PostedCard, person: Person, decision: str) -> tuple[Told, Told]:
        note_to = f"{person.name}-{next(self._names)}"
        payload = self._payload(card, person, decision, note_to)
        first = self._deliver(card, person, decision, payload, note_to, "")
        again = self._deliver(card, person, decision, payload, note_to, "")
        return first, again

    def edit(self, card: PostedCard, person: Person, typed: dict[str, str]) -> Told:
        """Edit…: the modal opens (views.open) with one input per editable argument; the approver
        types the new values and submits (view_submission), which approves."""
        note_to = f"{person.name}-{next(self._names)}"
        response = post_interaction(self.live_gateway, self._payload(card, person, "edit", note_to))
        assert (response.status_code, response.content) == (200, b"")

        def opened() -> Any:
            calls = [c for c in self.fake.calls("views.open") if c.json["trigger_id"] == f"trigger.{note_to}"]
            return calls[0].json["view"] if calls else None

        view = wait_until(opened, what="the edit modal")
        metadata = json.loads(view["private_metadata"])
        inputs = {b["label"]["text"]: b for b in view["blocks"] if b["type"] == "input"}
        # A path the modal does not offer can only come from a tampered submission: send it anyway.
        metadata["paths"] += [p for p in typed if p not in metadata["paths"]]
        values = {}
        for number, path in enumerate(metadata["paths"]):
            text = typed[path] if path in typed else inputs[path]["element"].get("initial_value")
            values[f"edit_{number}"] = {"value": {"type": "plain_text_input", "value": text}}
        submission = view_submission_payload(
            private_metadata=json.dumps(metadata), reason=None, user_id=person.id, user_name=person.name,
            callback_id="edit_arguments",
        )  # fmt: skip
        submission["view"]["state"]["values"] = values
        answer = post_interaction(self.live_gateway, submission)
        assert answer.status_code == 200
        if answer.json() == {"response_action": "clear"}:
            return Told(taken=True, text=None)
        (error,) = answer.json()["errors"].values()
        return Told(taken=True, text=error)

    def scope_buttons(self, card: PostedCard) -> list[str]:
        (actions,) = [b for b in card.request.json["blocks"] if b["type"] == "actions"]
        return [e["text"]["text"] for e in actions["elements"] if e["action_id"].startswith("approve_grant_")]

    def approve_for(self, card: PostedCard, person: Person, scope: int) -> Told:
        note_to = f"{person.name}-{next(self._names)}"
        response = post_interaction(self.live_gateway, self._payload(card, person, f"approve_grant_{scope}", note_to))
        if response.status_code != 200:
            return Told(taken=False, text=None)
        counted = ApproverResponse.objects.filter(approver=person.decided_by).exists()
        return Told(taken=True, text=None if counted else self._note(note_to))

    def forged_click(self, card: PostedCard, person: Person, decision: str) -> int:
        body = form_body(self._payload(card, person, decision, "forged"))
        url = f"{self.live_gateway.url}/channels/ops-slack/callback"
        return httpx.post(url, content=body, headers={"Content-Type": "application/x-www-form-urlencoded"}).status_code

    def expect_decided(
        self, card: PostedCard, *, status: str, by: Person | None, reason: str = "", edited: bool = False
    ) -> None:
        head = _HEADS[status] + (" (edited)" if edited else "") + (f" by <@{by.id}>" if by is not None else "")

        def redrawn() -> dict[str, Any] | None:
            message = card.message(self.fake)
            decided = "edited" in message and message["text"].startswith(head)
            return message if decided else None

        message = wait_until(redrawn, what=f"the card to show {head!r}")
        assert [b for b in message["blocks"] if b["type"] == "actions"] == []  # no buttons left
        assert " at <!date^" in message["text"]
        assert block_text(message["blocks"]).splitlines()[1].startswith(head)
        if reason:
            assert f"— {reason}" in block_text(message["blocks"])
        assert ("*Approved arguments* _(edited by the approver)_" in block_text(message["blocks"])) is edited
        assert card_updates(self.fake, card)

    def expect_open(self, card: PostedCard) -> None:
        message = card.message(self.fake)
        (actions,) = [b for b in message["blocks"] if b["type"] == "actions"]
        action_ids = [e["action_id"] for e in actions["elements"]]
        assert (action_ids[0], action_ids[-1]) == ("approve", "reject")  # scopes and Edit… sit between


class TestSlackChannel(EditContract, PeopleContract):
    @pytest.fixture
    def driver(self, live_gateway, fake_slack, celery_worker):
        return SlackDriver(live_gateway, fake_slack)
