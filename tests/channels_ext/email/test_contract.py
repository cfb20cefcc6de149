"""The channel contract (tests/channels_ext/contract.py) on e-mail: the card is the message each approver
receives from a real SMTP server (aiosmtpd), a click is opening one of its links (a GET: a page that decides
nothing) and confirming on that page (its form's POST), what the clicker is told is the page POSTed to.
Once decided, each recipient gets a follow-up in the message's thread."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from approvals.models import Outbox
from channels_ext.email.links import Link, link_token, read_link
from tests.channels_ext.contract import EditContract, PeopleContract, Person, Told, gate_keys, more_hooks, request_state
from tests.channels_ext.email.support import (
    ALICE,
    BOB,
    CHANNEL,
    MALLORY,
    Page,
    anchors,
    card_mails,
    configure,
    on_gateway,
    open_link,
    post_link,
    token_of,
)
from tests.conftest import AgentClient, make_agent_client
from tests.fakes.smtp_server import ReceivedMail, SmtpServer
from tests.support import wait_until

pytestmark = pytest.mark.django_db(transaction=True)

_HEADS = {"approved": "✅ Approved", "rejected": "❌ Rejected", "expired": "⌛ Expired", "cancelled": "🚫 Cancelled"}
_LABELS = {"approve": "Approve", "reject": "Reject", "edit": "Edit, then approve"}


@dataclasses.dataclass(frozen=True)
class MailedCard:
    """The request's message as each approver received it."""

    confirmation_id: str
    mails: dict[str, ReceivedMail]  # recipient -> their message

    def link(self, recipient: str, label: str) -> str:
        return anchors(self.mails[recipient])[label]


class EmailDriver:
    approvers = (Person(ALICE, ALICE, f"email:{ALICE}"), Person(BOB, BOB, f"email:{BOB}"))
    outsider = Person(MALLORY, MALLORY, f"email:{MALLORY}")
    # A link POSTed again finds the answer it gave: the recipient's links are used up.
    duplicate_told = "Already approved by {by}."

    def __init__(self, live_gateway, smtp: SmtpServer):
        self.live_gateway = live_gateway
        self.smtp = smtp

    def deploy(
        self, *, timeout_seconds: int = 1800, gate: dict[str, Any] | None = None, hooks: list[dict[str, Any]] | None = None
    ) -> AgentClient:
        configure(self.smtp, timeout_seconds=timeout_seconds, gate_keys=gate_keys(gate or {}) + more_hooks(hooks or []))
        return make_agent_client(self.live_gateway, "purchasing-bot")

    def card(self, confirmation_id: str) -> MailedCard:
        mails = card_mails(self.smtp, (ALICE, BOB))
        # The mail is out a moment before the worker records the delivery (and its event).
        sent = Outbox.objects.filter(confirmation_id=confirmation_id, kind="card", status="sent")
        wait_until(sent.exists, what="the card's delivery to be recorded")
        card = MailedCard(confirmation_id, mails)
        for recipient in (ALICE, BOB):
            link = read_link(CHANNEL, token_of(card.link(recipient, "Approve")))
            assert (link.confirmation_id, link.recipient) == (confirmation_id, recipient)
        return card

    def _url(self, card: MailedCard, person: Person, label: str) -> str:
        if person is self.outsider:
            # Nobody mails mallory; her link is one signed for her by this gateway (as if the gate's
            # approvers had listed her when it was sent): the approver list is checked on the server.
            alices = read_link(CHANNEL, token_of(card.link(ALICE, label)))
            link = Link(alices.confirmation_id, MALLORY, alices.action, alices.expires_at)
            return f"{self.live_gateway.url}/channels/{CHANNEL}/callback?link={link_token(CHANNEL, link)}"
        return on_gateway(self.live_gateway, card.link(person.id, label))

    def _told(self, page: Page) -> Told:
        return Told(taken=page.status == 200, text=page.told or page.problem)

    def _open_then_confirm(self, url: str, **fields: str) -> Told:
        link = read_link(CHANNEL, token_of(url))
        before = request_state(link.confirmation_id)
        opened = open_link(url)
        assert opened.status == 200, opened.body
        after = request_state(link.confirmation_id)
        # Opening decides nothing: the request is as it was, unless another approver decided it meanwhile (a
        # test of two at once) — and then nothing of it is this recipient's.
        if after != before:
            assert after["responses"] and all(who != f"email:{link.recipient}" for who, *_ in after["responses"])
            assert after["decision"][1] != f"email:{link.recipient}"
        # Confirm, as from a page opened earlier when it offered the form still.
        return self._told(post_link(self.live_gateway, token_of(url), **fields))

    def click(self, card: MailedCard, person: Person, decision: str, *, reason: str = "") -> Told:
        if decision == "reject" and not reason:
            reason = "rejected by mail"
        fields = {"reason": reason} if decision == "reject" else {}
        return self._open_then_confirm(self._url(card, person, _LABELS[decision]), **fields)

    def click_twice(self, card: MailedCard, person: Person, decision: str) -> tuple[Told, Told]:
        url = self._url(card, person, _LABELS[decision])
        return self._open_then_confirm(url), self._open_then_confirm(url)

    def forged_click(self, card: MailedCard, person: Person, decision: str) -> int:
        # The approver's own link, with the recipient inside it changed: the signature no longer holds.
        token = token_of(self._url(card, person, _LABELS[decision]))
        payload, _, signature = token.partition(":")
        forged = f"{payload[:-2]}{'A' if payload[-2] != 'A' else 'B'}{payload[-1]}:{signature}"
        return post_link(self.live_gateway, forged).status

    def edit(self, card: MailedCard, person: Person, typed: dict[str, str]) -> Told:
        url = self._url(card, person, _LABELS["edit"])
        opened = open_link(url)
        assert opened.has_form, opened.body
        fields = opened.edit_fields()  # edit.<path>: the current value, as JSON
        fields.update({f"edit.{path}": text for path, text in typed.items()})
        return self._told(post_link(self.live_gateway, opened.token, **fields))

    def scope_buttons(self, card: MailedCard) -> list[str]:
        return [label for label in anchors(card.mails[ALICE]) if label.startswith("Approve for")]

    def approve_for(self, card: MailedCard, person: Person, scope: int) -> Told:
        label = [label for label in anchors(card.mails[person.id]) if label.startswith("Approve for")][scope]
        return self._open_then_confirm(self._url(card, person, label))

    def expect_decided(
        self, card: MailedCard, *, status: str, by: Person | None, reason: str = "", edited: bool = False
    ) -> None:
        head = _HEADS[status] + (" (edited)" if edited else "") + (f" by {by.label}" if by is not None else "")
        for recipient, first in card.mails.items():

            def followed_up() -> ReceivedMail | None:
                replies = [
                    m for m in self.smtp.mails(recipient) if m.header("In-Reply-To") == first.header("Message-ID")
                ]
                return replies[-1] if replies and replies[-1].text.startswith(head) else None

            reply = wait_until(followed_up, what=f"a follow-up to {recipient} saying {head!r}")
            assert reply.subject == f"Re: {first.subject}"
            assert reply.header("References") == first.header("Message-ID")
            assert anchors(reply).keys() == {"The request"}  # no action links left
            if reason:
                assert f"— {reason}" in reply.text.splitlines()[0]
            assert ("Approved arguments (edited by the approver):" in reply.text) is edited
        page = open_link(on_gateway(self.live_gateway, card.link(ALICE, "Approve")))
        assert not page.has_form
        assert f'data-status="{status}"' in page.body

    def expect_open(self, card: MailedCard) -> None:
        for recipient, first in card.mails.items():
            assert not [m for m in self.smtp.mails(recipient) if m.header("In-Reply-To") == first.header("Message-ID")]
        assert open_link(on_gateway(self.live_gateway, card.link(ALICE, "Approve"))).has_form


class TestEmailChannel(EditContract, PeopleContract):
    @pytest.fixture
    def driver(self, live_gateway, smtp_server, celery_worker):
        yield EmailDriver(live_gateway, smtp_server)
        # The worker finishes this test's follow-ups while the SMTP server still answers.
        wait_until(lambda: not Outbox.objects.filter(status="pending").exists(), what="the outbox to drain")
