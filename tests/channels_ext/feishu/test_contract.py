"""The channel contract (tests/channels_ext/contract.py) on Feishu: the card is the message FakeFeishu holds
(patched as the request changes), a click is an encrypted and signed `card.action.trigger` callback, what
the clicker is told is the toast in the callback's answer."""

from __future__ import annotations

import dataclasses
import json
import uuid
from typing import Any

import httpx
import pytest

from approvals.models import Outbox
from gateway_contract import unsign_confirmation_id
from tests.channels_ext.contract import EditContract, PeopleContract, Person, Told, gate_keys, more_hooks
from tests.channels_ext.feishu.test_cards import interactive_elements, markdown_of
from tests.channels_ext.feishu.test_end_to_end import (
    APP_SECRET,
    APPROVER,
    CHANNEL,
    CHANNELS_YAML,
    ENCRYPT_KEY,
    OTHER_APPROVER,
    OUTSIDER,
    VERIFICATION_TOKEN,
    agents_yaml,
    button_values,
    click_payload,
    toast_and_card,
)
from tests.conftest import AgentClient, apply_config, make_agent_client
from tests.fakes.feishu_api import (
    MESSAGES_PATH,
    FakeFeishu,
    FakeMessage,
    encrypted_body,
    signed_feishu_headers,
    unique_app_id,
)
from tests.support import wait_until

pytestmark = pytest.mark.django_db(transaction=True)

_TITLES = {"approved": "Approved", "rejected": "Rejected", "expired": "Expired", "cancelled": "Cancelled"}
_ICONS = {"approved": "✅", "rejected": "❌", "expired": "⌛", "cancelled": "🚫"}
_TEMPLATES = {"approved": "green", "rejected": "red", "expired": "grey", "cancelled": "grey"}


@dataclasses.dataclass(frozen=True)
class FeishuCard:
    """The message in the chat, and its buttons as first sent (what a late clicker still has on screen),
    by name: `approve`, `reject`, `approve_grant_<n>`, `approve_edited`; `inputs` by name too."""

    message: FakeMessage
    buttons: dict[str, dict[str, Any]]  # name -> the button
    inputs: dict[str, dict[str, Any]]

    def value(self, name: str) -> dict[str, Any]:
        (behavior,) = self.buttons[name]["behaviors"]
        return behavior["value"]


def by_name(card: dict[str, Any], tag: str) -> dict[str, dict[str, Any]]:
    """Every `tag` element anywhere in the card, by its name, in card order."""
    found: dict[str, dict[str, Any]] = {}

    def walk(elements: list[dict[str, Any]]) -> None:
        for element in elements:
            if element.get("tag") == tag:
                found[element["name"]] = element
            walk(element.get("elements", []))

    walk(card["body"]["elements"])
    return found


class FeishuDriver:
    approvers = (
        # Feishu callbacks carry no display name: the open_id is the name too.
        Person(APPROVER, APPROVER, f"feishu:{APPROVER}"),
        Person(OTHER_APPROVER, OTHER_APPROVER, f"feishu:{OTHER_APPROVER}"),
    )
    outsider = Person(OUTSIDER, OUTSIDER, f"feishu:{OUTSIDER}")
    duplicate_told = "This click was already handled."  # a redelivery carries the same header.event_id

    def __init__(self, live_gateway, fake_feishu: FakeFeishu, monkeypatch: pytest.MonkeyPatch):
        self.live_gateway = live_gateway
        self.fake = fake_feishu
        self.monkeypatch = monkeypatch
        self.callback_url = f"{live_gateway.url}/channels/{CHANNEL}/callback"

    def deploy(
        self, *, timeout_seconds: int = 1800, gate: dict[str, Any] | None = None, hooks: list[dict[str, Any]] | None = None
    ) -> AgentClient:
        self.monkeypatch.setenv("FEISHU_APP_ID", unique_app_id())  # lark-oapi caches tokens per app_id
        self.monkeypatch.setenv("FEISHU_APP_SECRET", APP_SECRET)
        self.monkeypatch.setenv("FEISHU_VERIFICATION_TOKEN", VERIFICATION_TOKEN)
        self.monkeypatch.setenv("FEISHU_ENCRYPT_KEY", ENCRYPT_KEY)
        self.monkeypatch.setenv("FEISHU_API_BASE_URL", self.fake.domain)
        apply_config(CHANNELS_YAML + agents_yaml(timeout_seconds, gate_keys(gate or {}) + more_hooks(hooks or [])))
        return make_agent_client(self.live_gateway, "purchasing-bot")

    def card(self, confirmation_id: str) -> FeishuCard:
        wait_until(lambda: Outbox.objects.filter(kind="card", status="sent").exists(), what="the card to be sent")
        [message] = self.fake.sent_messages()
        # (its buttons as sent: the card may have been redrawn already, a request that expired at once)
        card = FeishuCard(message, by_name(message.sent_card, "button"), by_name(message.sent_card, "input"))
        assert unsign_confirmation_id(card.value("approve")["confirmation_id"]) == confirmation_id
        return card

    def _body(
        self,
        card: FeishuCard,
        person: Person,
        button: str,
        reason: str,
        event_id: str | None = None,
        value: dict[str, Any] | None = None,
        form_value: dict[str, Any] | None = None,
    ) -> bytes:
        payload = click_payload(
            value or card.value(button), open_id=person.id, reason=reason or None, event_id=event_id
        )
        if form_value is not None:
            payload["event"]["action"]["form_value"] = form_value
        return encrypted_body(ENCRYPT_KEY, payload)

    def _post(self, body: bytes, headers: dict[str, str] | None = None) -> httpx.Response:
        headers = headers if headers is not None else signed_feishu_headers(ENCRYPT_KEY, body)
        return httpx.post(self.callback_url, content=body, headers={"Content-Type": "application/json", **headers}, timeout=10)

    def _told(self, response: httpx.Response) -> Told:
        toast, card = toast_and_card(response)  # always a toast and the card as it is now: never a bare {}
        if toast["content"].startswith(("Approved", "Rejected")):
            assert toast["type"] == "success"
            assert interactive_elements(card) == []
            assert card["header"]["template"] == _TEMPLATES[toast["content"].split()[0].rstrip(".").lower()]
        elif toast["content"] == self.duplicate_told:
            assert toast["type"] == "info"
        else:  # not an approver, already decided, expired: nothing changed
            assert toast["type"] == "warning"
            if toast["content"].startswith(("Already", "This request expired")):
                assert interactive_elements(card) == []
        return Told(taken=True, text=toast["content"])

    def click(self, card: FeishuCard, person: Person, decision: str, *, reason: str = "") -> Told:
        return self._told(self._post(self._body(card, person, decision, reason)))

    def click_twice(self, card: FeishuCard, person: Person, decision: str) -> tuple[Told, Told]:
        body = self._body(card, person, decision, "", event_id=uuid.uuid4().hex)
        return self._told(self._post(body)), self._told(self._post(body))

    def edit(self, card: FeishuCard, person: Person, typed: dict[str, str]) -> Told:
        # "Approve with these values" submits the edit form: every input (arg_<n>, as typed) in form_value.
        value = dict(card.value("approve_edited"))
        # A path the form does not offer can only come from a tampered click: send it anyway.
        value["edit"] = value["edit"] + [p for p in typed if p not in value["edit"]]
        form_value = {
            f"arg_{n}": typed[path] if path in typed else card.inputs[f"arg_{n}"]["default_value"]
            for n, path in enumerate(value["edit"])
        }
        return self._told(self._post(self._body(card, person, "approve_edited", "", value=value, form_value=form_value)))

    def scope_buttons(self, card: FeishuCard) -> list[str]:
        return [b["text"]["content"] for name, b in card.buttons.items() if name.startswith("approve_grant_")]

    def approve_for(self, card: FeishuCard, person: Person, scope: int) -> Told:
        return self._told(self._post(self._body(card, person, f"approve_grant_{scope}", "")))

    def forged_click(self, card: FeishuCard, person: Person, decision: str) -> int:
        body = self._body(card, person, decision, "")
        return self._post(body, headers=signed_feishu_headers("another-apps-encrypt-key", body)).status_code

    def expect_decided(
        self, card: FeishuCard, *, status: str, by: Person | None, reason: str = "", edited: bool = False
    ) -> None:
        path = f"{MESSAGES_PATH}/{card.message.message_id}"

        def patched() -> dict[str, Any] | None:
            calls = self.fake.calls("PATCH", path)
            shown = json.loads(calls[-1].json()["content"]) if calls else None
            return shown if shown and shown["header"]["title"]["content"] == _TITLES[status] else None

        shown = wait_until(patched, what=f"a PATCH of {path} showing {status}")
        assert interactive_elements(shown) == []  # no buttons left
        assert shown["config"]["update_multi"] is True
        assert shown["header"]["template"] == _TEMPLATES[status]
        line = f"{_ICONS[status]} **{_TITLES[status]}**" + (" (edited)" if edited else "")
        if by is not None:
            line += f" by <at id={by.id}></at>"
        assert line in markdown_of(shown)
        if reason:
            assert f"— {reason}" in markdown_of(shown)
        assert ("**Approved arguments** (edited by the approver):" in markdown_of(shown)) is edited

    def expect_open(self, card: FeishuCard) -> None:
        assert set(button_values(card.message.card)) == {"approve", "reject"}
        assert not self.fake.calls("PATCH", f"{MESSAGES_PATH}/{card.message.message_id}")


class TestFeishuChannel(EditContract, PeopleContract):
    @pytest.fixture
    def driver(self, live_gateway, fake_feishu, celery_worker, monkeypatch):
        yield FeishuDriver(live_gateway, fake_feishu, monkeypatch)
        # The worker finishes this test's redraws while FakeFeishu still answers.
        wait_until(lambda: not Outbox.objects.filter(status="pending").exists(), what="the outbox to drain")
