"""A person a Slack request is routed to — by `group:`, by `person:`, or as a stand-in — opens the card's
"Open in browser" link and decides there, like a listed web approver (docs/web-and-admin.md, "Who may
decide"); anyone else who is not staff still gets a 404. Over real HTTP against the live gateway, the
card posted by a real Celery worker to FakeSlack through slack-sdk."""

from __future__ import annotations

import datetime as dt
import re

import pytest
from django.contrib.auth.models import User
from django.utils import timezone

from approvals.models import ApproverResponse, ConfirmationEvent, ConfirmationRequest, PeopleGroup, Person, PersonIdentity, StandIn
from tests.channels_ext.slack.test_end_to_end import BOB, BOT_TOKEN, SIGNING_SECRET, SLACK_CHANNEL_ID, posted_card
from tests.channels_ext.web.conftest import PASSWORD
from tests.conftest import apply_config, make_agent_client
from tests.fakes.slack_api import FakeSlack
from tests.support import SignedIn

pytestmark = pytest.mark.django_db(transaction=True)

TOOL = "oa__purchase_pay"
SECRET_ARGUMENT = "IBAN DE44 5001 0517 5407 3249 31"
_CARD_LINK = re.compile(r"<([^|>]+)\|Open in browser>")


def config(fake_slack: FakeSlack) -> str:
    return f"""
channels:
  - name: ops-slack
    kind: slack
    bot_token: {BOT_TOKEN}
    signing_secret: {SIGNING_SECRET}
    channel_id: {SLACK_CHANNEL_ID}
    api_base_url: {fake_slack.base_url}
agents:
  - name: purchasing-bot
    hooks:
      - kind: approval_gate
        name: finance-gate
        tools: ["{TOOL}"]
        channel: ops-slack
        approvers: ["group:finance", "person:dora@example.com", "U0AUDITOR"]
        timeout_seconds: 1800
"""


@pytest.fixture
def directory(transactional_db) -> dict[str, Person]:
    """None of them staff. Alice is in the group `finance`; Dora is named by `person:`; Bob (finance,
    on Slack only) is away and Sam stands in for him; Carol is in the directory but routed nothing;
    `U0AUDITOR` is a user whose username is the raw Slack id the gate lists, linked to nobody."""
    users = {name: User.objects.create_user(name, password=PASSWORD) for name in ("alice", "dora", "sam", "carol", "U0AUDITOR")}
    people = {
        name: Person.objects.create(display_name=name.title(), email=f"{name}@example.com", user=users.get(name))
        for name in ("alice", "dora", "sam", "carol", "bob")
    }
    PersonIdentity.objects.create(person=people["bob"], identity=f"slack:{BOB.id}")
    PeopleGroup.objects.create(name="finance").members.add(people["alice"], people["bob"])
    now = timezone.now()
    StandIn.objects.create(
        person=people["bob"], delegate=people["sam"], starts_at=now - dt.timedelta(hours=1), ends_at=now + dt.timedelta(days=1)
    )
    return people


@pytest.fixture
def card_link(fake_slack, live_gateway, celery_worker, public_url, directory):
    """The "Open in browser" link of the card posted to Slack for a pending payment, and its request."""

    def ask(*, user_id: str = "u-42") -> tuple[str, ConfirmationRequest]:
        apply_config(config(fake_slack))
        agent = make_agent_client(live_gateway, "purchasing-bot")
        answer = agent.pre_tool_use(TOOL, {"amount": 80000, "account": SECRET_ARGUMENT}, user_id=user_id).json()
        agent.http.close()
        card = posted_card(fake_slack)
        texts = [e["text"] for b in card.request.json["blocks"] if b["type"] == "context" for e in b["elements"]]
        (link,) = [m.group(1) for t in texts for m in [_CARD_LINK.search(t)] if m]
        return link.removeprefix(live_gateway.url), ConfirmationRequest.objects.get(pk=answer["confirmation_id"])

    return ask


@pytest.fixture
def signed_in(live_gateway):
    sessions: list[SignedIn] = []

    def sign_in(username: str) -> SignedIn:
        sessions.append(SignedIn(live_gateway.url, username, PASSWORD))
        return sessions[-1]

    yield sign_in
    for session in sessions:
        session.close()


@pytest.mark.parametrize("who, how", [("alice", "group:finance"), ("dora", "person:"), ("sam", "stand-in for Bob")])
def test_a_person_the_request_is_routed_to_opens_the_cards_link_and_approves_there(card_link, signed_in, directory, who, how):
    link, request = card_link()
    assert link == f"/approvals/{request.pk}/"
    session = signed_in(who)

    page = session.get(link)
    state = session.get(f"{link}state")

    assert page.status_code == 200, how
    assert SECRET_ARGUMENT in page.text and 'value="approve"' in page.text
    assert state.status_code == 200 and state.json()["status"] == "pending"
    approved = session.post(link, {"decision": "approve", "reason": ""})
    request.refresh_from_db()
    assert (request.status, request.decided_by) == ("approved", f"web:{who}"), SignedIn.messages(approved)
    response = ApproverResponse.objects.get(confirmation=request)
    assert (response.approver, response.person, response.channel) == (f"web:{who}", directory[who].key, "ops-slack")
    assert response.on_behalf_of == (directory["bob"].key if who == "sam" else "")
    # It is theirs to decide, so it is in their inbox (and decided now, among their decisions).
    assert str(request.pk) in session.get("/approvals/").text


def test_a_routed_person_sees_the_requests_they_may_decide_in_their_inbox(card_link, signed_in):
    link, request = card_link()

    inbox = signed_in("alice").get("/approvals/").text

    assert link in inbox and TOOL in inbox
    assert link not in signed_in("carol").get("/approvals/").text


@pytest.mark.parametrize("who", ["carol", "U0AUDITOR"])
def test_someone_not_routed_who_is_not_staff_gets_404_and_a_forged_post_changes_nothing(card_link, signed_in, who):
    """Carol is in the directory but not routed it; the user named `U0AUDITOR` has the username of a raw
    Slack id the gate lists — a chat id is not a username, and the page never takes one for the other."""
    link, request = card_link()
    session = signed_in(who)

    for path in (link, f"{link}state"):
        answer = session.get(path)
        assert answer.status_code == 404
        assert SECRET_ARGUMENT not in answer.text and TOOL not in answer.text
    forged = session.http.post(
        link, data={"decision": "approve", "csrfmiddlewaretoken": session.http.cookies["csrftoken"]}, follow_redirects=False
    )

    assert (forged.status_code, forged.headers["location"]) == (302, "/approvals/")
    request.refresh_from_db()
    assert request.status == "pending" and not ApproverResponse.objects.exists()
    assert ConfirmationEvent.objects.filter(confirmation=request, kind="refused_click", actor=f"web:{who}").exists()


def test_the_person_the_call_is_made_for_reads_it_but_cannot_approve_it(card_link, signed_in):
    link, request = card_link(user_id="alice@example.com")
    alice = signed_in("alice")

    page = alice.get(link)
    refused = alice.post(link, {"decision": "approve", "reason": ""})

    assert page.status_code == 200 and SECRET_ARGUMENT in page.text and 'value="approve"' not in page.text
    assert "You cannot approve a call made on your own behalf." in SignedIn.messages(refused)
    request.refresh_from_db()
    assert request.status == "pending"

