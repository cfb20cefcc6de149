"""The channel contract (tests/channels_ext/contract.py) on the web channel: the approval page is the card,
a click is the page's form POSTed by a signed-in approver, what they are told is the page's flash message."""

from __future__ import annotations

import html
import re
from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.urls import reverse

from approvals.models import ConfirmationRequest
from tests.channels_ext.contract import EditContract, PeopleContract, TOOL, Person, Told, gate_keys, more_hooks
from tests.channels_ext.web.conftest import PASSWORD
from tests.conftest import AgentClient, apply_config, make_agent_client

pytestmark = pytest.mark.django_db(transaction=True)

_FLASH = re.compile(r'<li class="[^"]*" role="status">(.*?)</li>', re.S)
_FORM_ERROR = re.compile(r'<ul class="errorlist nonfield"><li>(.*?)</li></ul>', re.S)
_SCOPE_BUTTON = re.compile(r'<button class="approve scope" type="submit" name="grant" value="\d+">(.*?)</button>', re.S)


class WebDriver:
    approvers = (Person("alice", "alice", "web:alice"), Person("bob", "bob", "web:bob"))
    outsider = Person("carol", "carol", "web:carol")  # signed in, but not an approver
    duplicate_told = "Already approved by {by}."

    def __init__(self, live_gateway):
        self.live_gateway = live_gateway

    def deploy(
        self, *, timeout_seconds: int = 1800, gate: dict[str, Any] | None = None, hooks: list[dict[str, Any]] | None = None
    ) -> AgentClient:
        apply_config(
            f"""
channels: [{{name: web, kind: web}}]
agents:
  - name: purchasing-bot
    hooks:
      - kind: approval_gate
        name: finance-gate
        tools: ["{TOOL}"]
        channel: web
        approvers: [alice, bob]
        timeout_seconds: {timeout_seconds}
{gate_keys(gate or {})}{more_hooks(hooks or [])}"""
        )
        return make_agent_client(self.live_gateway, "purchasing-bot")

    def card(self, confirmation_id: str) -> str:
        return reverse("approval-page", args=[confirmation_id])  # the page shows the row as it is now

    def _signed_in(self, person: Person, **kwargs) -> Client:
        client = Client(**kwargs)
        assert client.login(username=person.id, password=PASSWORD)
        return client

    def _post(self, client: Client, page: str, decision: str, reason: str, **more: Any) -> Told:
        try:
            response = client.post(page, {"decision": decision, "reason": reason, **more}, follow=True)
            content = response.content.decode()
            if response.status_code == 400 and 'name="decision"' in content:
                # A refused edit: the page again, what was typed kept, why above the form.
                (why,) = _FORM_ERROR.findall(content)
                return Told(taken=True, text=html.unescape(why).strip())
            flashes = [html.unescape(m).strip() for m in _FLASH.findall(content)]
            return Told(taken=response.status_code == 200, text=flashes[0] if flashes else None)
        finally:
            connection.close()  # clicks may come from other threads

    def click(self, card: str, person: Person, decision: str, *, reason: str = "") -> Told:
        if decision == "reject" and not reason:
            reason = "rejected from the page"  # the page asks for one
        return self._post(self._signed_in(person), card, decision, reason)

    def click_twice(self, card: str, person: Person, decision: str) -> tuple[Told, Told]:
        client = self._signed_in(person)
        return self._post(client, card, decision, ""), self._post(client, card, decision, "")

    def forged_click(self, card: str, person: Person, decision: str) -> int:
        # A cross-site form: the approver's session, but no CSRF token.
        client = self._signed_in(person, enforce_csrf_checks=True)
        return client.post(card, {"decision": decision, "reason": ""}).status_code

    def edit(self, card: str, person: Person, typed: dict[str, str]) -> Told:
        # The page's form: one field per editable argument, named edit.<path>, as typed.
        fields = {f"edit.{path}": text for path, text in typed.items()}
        return self._post(self._signed_in(person), card, "approve", "", **fields)

    def scope_buttons(self, card: str) -> list[str]:
        return [html.unescape(text).strip() for text in _SCOPE_BUTTON.findall(self._page(card))]

    def approve_for(self, card: str, person: Person, scope: int) -> Told:
        return self._post(self._signed_in(person), card, "", "", grant=scope)

    def _page(self, card: str) -> str:
        return self._signed_in(self.approvers[0]).get(card).content.decode()

    def expect_decided(
        self, card: str, *, status: str, by: Person | None, reason: str = "", edited: bool = False
    ) -> None:
        page = self._page(card)
        assert ('id="edited-badge"' in page) is edited
        assert ('id="approved-arguments"' in page) is edited
        verb = {"approved": "Approved", "rejected": "Rejected", "expired": "Expired", "cancelled": "Cancelled"}[status]
        said = f"<strong>{verb}</strong>" + (' <span class="edited" id="edited-badge">edited</span>' if edited else "")
        if by is not None:
            said += f" by {html.escape(by.label)}"
        assert said in page
        assert f'id="request" data-status="{status}"' in page
        assert 'name="decision"' not in page  # no buttons once decided
        if reason:
            assert html.escape(reason) in page
        assert ConfirmationRequest.objects.get(pk=card.rstrip("/").rsplit("/", 1)[1]).status == status

    def expect_open(self, card: str) -> None:
        page = self._page(card)
        assert 'name="decision" value="approve"' in page and 'name="decision" value="reject"' in page


class TestWebChannel(EditContract, PeopleContract):
    @pytest.fixture
    def driver(self, live_gateway, people):
        return WebDriver(live_gateway)
