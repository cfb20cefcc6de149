"""People, not channel ids (docs/approving.md, "People"): a gate's `group:` and `person:` approvers
routed to every member's linked identity on the channel, a quorum counting people once across
Slack and the web page, self-approval refused by person in the admin, stand-ins, and an old config
of raw channel ids behaving exactly as before. Over real HTTP, with a real Celery worker, FakeSlack
and PostgreSQL; the per-channel scenarios are in tests/channels_ext/contract.py (`PeopleContract`)."""

from __future__ import annotations

import datetime as dt

import pytest
from django.contrib.auth.models import Permission, User
from django.utils import timezone

from approvals import selectors
from approvals.config_schema import parse_config_text
from approvals.models import (
    ApproverResponse,
    ConfirmationEvent,
    ConfirmationRequest,
    PeopleGroup,
    Person,
    PersonIdentity,
    StandIn,
)
from gateway_utils.configfile import ConfigError
from tests.channels_ext.slack.test_end_to_end import (
    ALICE,
    BOB,
    BOT_TOKEN,
    MALLORY,
    SIGNING_SECRET,
    SLACK_CHANNEL_ID,
    block_text,
    card_updates,
    click,
    notes_to,
    posted_card,
)
from tests.conftest import apply_config, make_agent_client
from tests.fakes.slack_api import FakeSlack
from tests.support import SignedIn, rewrite_request, wait_until

pytestmark = pytest.mark.django_db(transaction=True)

PASSWORD = "correct horse battery staple"
TOOL = "oa__purchase_pay"
CHANGELIST = "/admin/approvals/confirmationrequest/"


def slack_config(fake_slack: FakeSlack, approvers: list[str], *, more: str = "") -> str:
    return f"""
channels:
  - name: ops-slack
    kind: slack
    bot_token: {BOT_TOKEN}
    signing_secret: {SIGNING_SECRET}
    channel_id: {SLACK_CHANNEL_ID}
    api_base_url: {fake_slack.base_url}
  - {{name: web, kind: web}}
agents:
  - name: purchasing-bot
    hooks:
      - kind: approval_gate
        name: finance-gate
        tools: ["{TOOL}"]
        channel: ops-slack
        approvers: {approvers!r}
        timeout_seconds: 1800
{more}"""


def staff(username: str) -> User:
    """Staff who may decide any request on the page and in the admin (never one made for them)."""
    user = User.objects.create_user(username, password=PASSWORD, is_staff=True)
    user.user_permissions.add(
        Permission.objects.get(codename="change_confirmationrequest"),
        Permission.objects.get(codename="view_confirmationrequest"),
    )
    return user


@pytest.fixture
def finance(transactional_db) -> dict[str, Person]:
    """The group `finance`: Alice (on Slack, and the Django user alice) and Bob (on Slack). Mallory is no member."""
    alice = Person.objects.create(display_name="Alice Adams", email="alice@example.com", user=staff("alice"))
    bob = Person.objects.create(display_name="Bob Brown", email="bob@example.com")
    mallory = Person.objects.create(display_name="Mallory M", email="mallory@example.com")
    PersonIdentity.objects.create(person=alice, identity=f"slack:{ALICE.id}")
    PersonIdentity.objects.create(person=bob, identity=f"slack:{BOB.id}")
    PersonIdentity.objects.create(person=mallory, identity=f"slack:{MALLORY.id}")
    group = PeopleGroup.objects.create(name="finance")
    group.members.add(alice, bob)
    return {"alice": alice, "bob": bob, "mallory": mallory}


@pytest.fixture
def signed_in(live_gateway):
    sessions: list[SignedIn] = []

    def sign_in(username: str) -> SignedIn:
        sessions.append(SignedIn(live_gateway.url, username, PASSWORD))
        return sessions[-1]

    yield sign_in
    for session in sessions:
        session.close()


def test_a_group_routes_to_every_members_slack_identity_and_a_person_on_slack_and_the_web_counts_once(
    fake_slack, live_gateway, celery_worker, finance, signed_in
):
    apply_config(slack_config(fake_slack, ["group:finance"], more="        approvals_required: 2\n"))
    agent = make_agent_client(live_gateway, "purchasing-bot")
    confirmation_id = agent.pre_tool_use(TOOL, {"amount": 80000}, user_id="u-42").json()["confirmation_id"]

    card = posted_card(fake_slack)

    text = block_text(card.request.json["blocks"])
    assert "*Approvers:* <@U0ALICE>, <@U0BOB>" in text  # the members, each by their linked Slack id
    assert "*Waiting for:* Alice Adams, Bob Brown" in text
    request = ConfirmationRequest.objects.get(pk=confirmation_id)
    assert request.approvers == [ALICE.id, BOB.id]
    assert request.approver_people["people"] == {finance["alice"].key: "Alice Adams", finance["bob"].key: "Bob Brown"}

    # Mallory is in the channel and in the directory, but not in the group.
    click(live_gateway, fake_slack, card, MALLORY, "approve", note_to="mallory")
    assert wait_until(lambda: notes_to(fake_slack, "mallory"))[-1]["text"] == "You are not one of the approvers of this request."

    assert click(live_gateway, fake_slack, card, ALICE, "approve", note_to="alice").status_code == 200
    assert ApproverResponse.objects.get().approver == f"slack:{ALICE.id}"  # 1 of 2: the card is redrawn
    redrawn = wait_until(lambda: [u for u in card_updates(fake_slack, card) if "Waiting for:* Bob Brown" in block_text(u["blocks"])])
    assert "Alice Adams" not in block_text(redrawn[-1]["blocks"]).split("*Waiting for:*")[1].splitlines()[0]

    # Alice again, now on the approval page (staff, her Django user): one person counts once.
    assert '<span id="waiting-for">waiting for Bob Brown</span>' in signed_in("alice").get(f"/approvals/{confirmation_id}/").text
    on_the_page = signed_in("alice").post(f"/approvals/{confirmation_id}/", {"decision": "approve", "reason": ""})
    assert SignedIn.messages(on_the_page) == [
        f"You have already answered this request, as slack:{ALICE.id}; one person counts once."
    ]
    assert agent.wait(confirmation_id, timeout=0).json()["status"] == "pending"
    assert list(ApproverResponse.objects.values_list("approver", "person")) == [(f"slack:{ALICE.id}", finance["alice"].key)]

    click(live_gateway, fake_slack, card, BOB, "approve", note_to="bob")

    state = agent.wait(confirmation_id, timeout=10).json()
    assert (state["status"], state["decided_by"]) == ("approved", f"slack:{BOB.id}")
    assert sorted(ApproverResponse.objects.values_list("person", flat=True)) == sorted(
        [finance["alice"].key, finance["bob"].key]
    )


def test_a_person_approver_is_reached_on_the_web_page_by_their_django_user(live_gateway, signed_in):
    dora = Person.objects.create(display_name="Dora D", email="dora@example.com", user=staff("dora"))
    User.objects.create_user("eve", password=PASSWORD)  # signed in, no approver
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
        approvers: ["person:DORA@example.com"]
"""
    )
    agent = make_agent_client(live_gateway, "purchasing-bot")
    confirmation_id = agent.pre_tool_use(TOOL, {"amount": 5}).json()["confirmation_id"]
    assert ConfirmationRequest.objects.get(pk=confirmation_id).approvers == ["dora"]

    refused = signed_in("eve").post(f"/approvals/{confirmation_id}/", {"decision": "approve", "reason": ""})
    assert SignedIn.messages(refused) == ["You are not one of the approvers of this request."]
    approved = signed_in("dora").post(f"/approvals/{confirmation_id}/", {"decision": "approve", "reason": ""})

    assert SignedIn.messages(approved) == ["Approved."]
    assert ApproverResponse.objects.get().person == dora.key


def test_the_admin_refuses_a_call_made_for_the_staff_member_by_their_e_mail(live_gateway, finance, signed_in):
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
        forbid_self_approval: true
"""
    )
    agent = make_agent_client(live_gateway, "purchasing-bot")
    # The agent acts for Alice, named by her e-mail; she is staff and may decide anything else.
    confirmation_id = agent.pre_tool_use(TOOL, {"amount": 5}, user_id="Alice@Example.com").json()["confirmation_id"]
    alice = signed_in("alice")

    in_the_admin = alice.post(CHANGELIST, {"action": "approve_selected", "_selected_action": [confirmation_id], "index": "0"})

    assert SignedIn.messages(in_the_admin) == [
        f"Left unchanged — {confirmation_id[:8]}: You cannot approve a call made on your own behalf."
    ]
    assert not ApproverResponse.objects.exists()
    assert ConfirmationEvent.objects.filter(confirmation_id=confirmation_id, kind="refused_click").exists()
    assert 'id="readonly"' in alice.get(f"/approvals/{confirmation_id}/").text  # no buttons on the page either


def test_a_gate_that_allows_self_approval_lets_the_person_approve_their_own_call(live_gateway, finance, signed_in):
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
        forbid_self_approval: false
"""
    )
    agent = make_agent_client(live_gateway, "purchasing-bot")
    confirmation_id = agent.pre_tool_use(TOOL, {"amount": 5}, user_id="alice@example.com").json()["confirmation_id"]

    approved = signed_in("alice").post(f"/approvals/{confirmation_id}/", {"decision": "approve", "reason": ""})

    assert SignedIn.messages(approved) == ["Approved."]


def test_an_old_config_of_raw_channel_ids_routes_and_decides_exactly_as_before(fake_slack, live_gateway, celery_worker):
    # People exist, but none is linked to these ids: nothing about the request changes.
    Person.objects.create(display_name="Unlinked", email="unlinked@example.com")
    apply_config(slack_config(fake_slack, [ALICE.id, BOB.id]))
    agent = make_agent_client(live_gateway, "purchasing-bot")
    confirmation_id = agent.pre_tool_use(TOOL, {"amount": 80000}, user_id=BOB.id).json()["confirmation_id"]
    card = posted_card(fake_slack)

    request = ConfirmationRequest.objects.get(pk=confirmation_id)
    assert (request.approvers, request.approver_people) == ([ALICE.id, BOB.id], {})
    assert "Waiting for" not in block_text(card.request.json["blocks"])
    click(live_gateway, fake_slack, card, BOB, "approve", note_to="bob")  # the call's own user: refused by id, as before
    assert wait_until(lambda: notes_to(fake_slack, "bob"))[-1]["text"] == "You cannot approve a call made on your own behalf."
    click(live_gateway, fake_slack, card, ALICE, "approve", note_to="alice")

    assert agent.wait(confirmation_id, timeout=10).json()["decided_by"] == f"slack:{ALICE.id}"
    assert list(ApproverResponse.objects.values_list("person", "on_behalf_of")) == [(f"slack:{ALICE.id}", "")]


def test_a_stand_in_reaches_the_card_only_while_their_window_is_open(finance):
    now = timezone.now()
    alice, mallory = finance["alice"], finance["mallory"]
    StandIn.objects.create(person=alice, delegate=mallory, starts_at=now + dt.timedelta(days=1), ends_at=now + dt.timedelta(days=2))
    assert selectors.approver_routing(["group:finance"], kind="slack", now=now)[0] == [ALICE.id, BOB.id]

    routed, people = selectors.approver_routing(["group:finance"], kind="slack", now=now + dt.timedelta(days=1, hours=1))

    assert routed == [ALICE.id, BOB.id, MALLORY.id]
    assert people["stand_ins"][mallory.key]["for"] == alice.key
    # Once the window has closed, a stand-in's click no longer counts.
    later = now + dt.timedelta(days=3)
    assert selectors.stand_in_for(people, person=mallory.key, now=later) is None
    assert selectors.stand_in_for(people, person=mallory.key, now=now + dt.timedelta(days=1, hours=2)) == {
        "for": alice.key,
        "name": "Alice Adams",
    }


def test_a_group_reaches_each_member_on_every_kind_of_channel_they_are_linked_on(finance):
    alice, bob = finance["alice"], finance["bob"]
    PersonIdentity.objects.create(person=alice, identity="feishu:ou_alice")
    PersonIdentity.objects.create(person=bob, identity="teams:29:bob-aad")
    now = timezone.now()

    assert selectors.approver_routing(["group:finance"], kind="feishu", now=now)[0] == ["ou_alice"]
    assert selectors.approver_routing(["group:finance"], kind="teams", now=now)[0] == ["29:bob-aad"]
    assert selectors.approver_routing(["group:finance"], kind="web", now=now)[0] == ["alice"]
    assert selectors.approver_routing(["group:finance"], kind="email", now=now)[0] == ["alice@example.com", "bob@example.com"]
    # Nobody of the group on Telegram: the list stays closed (never [] = "any member").
    assert selectors.approver_routing(["group:finance"], kind="telegram", now=now)[0] == ["group:finance"]
    # An inactive member is routed nothing.
    Person.objects.filter(pk=bob.pk).update(active=False)
    assert selectors.approver_routing(["group:finance"], kind="slack", now=now)[0] == [ALICE.id]


@pytest.mark.parametrize(
    ("approvers", "more", "problem"),
    [
        (["group:"], "", "neither group:NAME nor person:EMAIL"),
        (["person:bob"], "", "neither group:NAME nor person:EMAIL"),
        (["U0ALICE"], "        forbid_self_approval: true\n        allow_self_approval: true\n", "contradict"),
    ],
    ids=["empty-group", "person-without-email", "both-self-approval-keys"],
)
def test_a_config_with_a_malformed_people_entry_is_refused_with_its_path(fake_slack, approvers, more, problem):
    with pytest.raises(ConfigError) as refused:
        parse_config_text(slack_config(fake_slack, approvers, more=more))
    assert problem in str(refused.value)
    assert "agents[0].hooks[0]" in str(refused.value)


def test_a_group_may_ask_for_more_approvals_than_the_config_lists_entries(fake_slack):
    parse_config_text(slack_config(fake_slack, ["group:finance"], more="        approvals_required: 3\n"))


def test_on_slack_a_stand_in_answers_once_for_the_person_they_stand_in_for(
    fake_slack, live_gateway, celery_worker, finance
):
    alice, mallory = finance["alice"], finance["mallory"]
    now = timezone.now()
    StandIn.objects.create(person=alice, delegate=mallory, starts_at=now - dt.timedelta(hours=1), ends_at=now + dt.timedelta(days=1))
    apply_config(slack_config(fake_slack, ["group:finance"], more="        approvals_required: 2\n"))
    agent = make_agent_client(live_gateway, "purchasing-bot")
    confirmation_id = agent.pre_tool_use(TOOL, {"amount": 80000}, user_id="u-42").json()["confirmation_id"]
    card = posted_card(fake_slack)
    assert "*Approvers:* <@U0ALICE>, <@U0BOB>, <@U0MALLORY>" in block_text(card.request.json["blocks"])

    click(live_gateway, fake_slack, card, MALLORY, "approve", note_to="mallory")  # for Alice: 1 of 2
    click(live_gateway, fake_slack, card, ALICE, "approve", note_to="alice")  # Alice herself: already counted

    assert wait_until(lambda: notes_to(fake_slack, "alice"))[-1]["text"] == (
        "Mallory M has already answered this request on your behalf; one person counts once."
    )
    assert list(ApproverResponse.objects.values_list("approver", "on_behalf_of_name")) == [(f"slack:{MALLORY.id}", "Alice Adams")]
    assert ConfirmationEvent.objects.get(confirmation_id=confirmation_id, kind="response").data["on_behalf_of_name"] == "Alice Adams"

    click(live_gateway, fake_slack, card, BOB, "reject", note_to="bob")  # opens the reason modal: nothing decided yet
    assert agent.wait(confirmation_id, timeout=0).json()["status"] == "pending"


def test_on_slack_a_stand_ins_decision_reads_on_behalf_of_on_the_card(fake_slack, live_gateway, celery_worker, finance):
    alice, mallory = finance["alice"], finance["mallory"]
    now = timezone.now()
    StandIn.objects.create(person=alice, delegate=mallory, starts_at=now - dt.timedelta(hours=1), ends_at=now + dt.timedelta(days=1))
    apply_config(slack_config(fake_slack, [f"person:{alice.email}"]))
    agent = make_agent_client(live_gateway, "purchasing-bot")
    confirmation_id = agent.pre_tool_use(TOOL, {"amount": 80000}, user_id="u-42").json()["confirmation_id"]
    card = posted_card(fake_slack)

    click(live_gateway, fake_slack, card, MALLORY, "approve", note_to="mallory")

    decided = wait_until(lambda: [u for u in card_updates(fake_slack, card) if u["text"].startswith("✅ Approved")])
    assert decided[-1]["text"].startswith(f"✅ Approved by <@{MALLORY.id}> on behalf of Alice Adams at ")
    state = agent.wait(confirmation_id, timeout=5).json()
    assert (state["decided_by"], state["decided_by_name"]) == (f"slack:{MALLORY.id}", "Mallory M on behalf of Alice Adams")


def test_a_stand_in_whose_window_has_closed_is_refused(fake_slack, live_gateway, celery_worker, finance):
    alice, mallory = finance["alice"], finance["mallory"]
    now = timezone.now()
    StandIn.objects.create(person=alice, delegate=mallory, starts_at=now - dt.timedelta(hours=1), ends_at=now + dt.timedelta(days=1))
    apply_config(slack_config(fake_slack, [f"person:{alice.email}"]))
    agent = make_agent_client(live_gateway, "purchasing-bot")
    confirmation_id = agent.pre_tool_use(TOOL, {"amount": 80000}, user_id="u-42").json()["confirmation_id"]
    card = posted_card(fake_slack)
    # The window closes while the request waits (as the request recorded it when it was routed).
    request = ConfirmationRequest.objects.get(pk=confirmation_id)
    snapshot = request.approver_people
    snapshot["stand_ins"][mallory.key]["until"] = (now - dt.timedelta(minutes=1)).isoformat()
    rewrite_request(confirmation_id, approver_people=snapshot)  # signed anew, as the gateway would

    click(live_gateway, fake_slack, card, MALLORY, "approve", note_to="mallory")

    assert wait_until(lambda: notes_to(fake_slack, "mallory"))[-1]["text"] == "Your time standing in for Alice Adams has ended."
    assert not ApproverResponse.objects.exists()
    assert agent.wait(confirmation_id, timeout=0).json()["status"] == "pending"


def test_a_person_names_their_own_stand_in_on_the_web_and_the_stand_in_approves_on_their_behalf(live_gateway, signed_in):
    ada = Person.objects.create(display_name="Ada Away", email="ada@example.com", user=User.objects.create_user("ada", password=PASSWORD))
    Person.objects.create(display_name="Sam Standin", email="sam@example.com", user=User.objects.create_user("sam", password=PASSWORD))
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
        approvers: ["person:ada@example.com"]
"""
    )
    page = signed_in("ada")
    now = timezone.now()
    window = {"starts_at": (now - dt.timedelta(hours=1)).strftime("%Y-%m-%d %H:%M"), "ends_at": (now + dt.timedelta(days=7)).strftime("%Y-%m-%d %H:%M")}

    for wrong, why in [
        ({"delegate_email": "ada@example.com", **window}, "You cannot stand in for yourself."),
        ({"delegate_email": "nobody@example.com", **window}, "Nobody active in the directory has the e-mail 'nobody@example.com'."),
        ({"delegate_email": "sam@example.com", "starts_at": window["ends_at"], "ends_at": window["starts_at"]}, "The window must end after it starts."),
    ]:
        refused = page.post("/people/stand-in/", wrong)
        assert (refused.status_code, SignedIn.messages(refused)) == (400, [why])
    assert not StandIn.objects.exists()

    named = page.post("/people/stand-in/", {"delegate_email": "SAM@example.com", **window, "note": "holiday"})

    assert SignedIn.messages(named)[0].startswith("Sam Standin stands in for you until ")
    assert list(StandIn.objects.values_list("person_id", "note")) == [(ada.pk, "holiday")]
    agent = make_agent_client(live_gateway, "purchasing-bot")
    confirmation_id = agent.pre_tool_use(TOOL, {"amount": 5}).json()["confirmation_id"]
    assert ConfirmationRequest.objects.get(pk=confirmation_id).approvers == ["ada", "sam"]  # routed to the stand-in too

    approved = signed_in("sam").post(f"/approvals/{confirmation_id}/", {"decision": "approve", "reason": ""})

    assert SignedIn.messages(approved) == ["Approved."]
    state = agent.wait(confirmation_id, timeout=5).json()
    assert (state["status"], state["decided_by"], state["decided_by_name"]) == ("approved", "web:sam", "Sam Standin on behalf of Ada Away")
    assert "Sam Standin on behalf of Ada Away (web:sam)" in page.get(f"/approvals/{confirmation_id}/").text


def test_an_escalation_to_a_group_routes_to_its_members_on_the_on_call_channel(live_gateway):
    from approvals.tasks import run_timers
    from tests.conftest import decide

    dave = Person.objects.create(display_name="Dave Duty", email="dave@example.com", user=User.objects.create_user("dave"))
    PeopleGroup.objects.create(name="on-call").members.add(dave)
    apply_config(
        f"""
channels: [{{name: web, kind: web}}, {{name: web-oncall, kind: web}}]
agents:
  - name: purchasing-bot
    hooks:
      - kind: approval_gate
        name: finance-gate
        tools: ["{TOOL}"]
        channel: web
        approvers: [alice]
        escalate_after_seconds: 1800
        escalate_to: {{channel: web-oncall, approvers: ["group:on-call"]}}
"""
    )
    agent = make_agent_client(live_gateway, "purchasing-bot")
    confirmation_id = agent.pre_tool_use(TOOL, {"amount": 5}).json()["confirmation_id"]
    request = ConfirmationRequest.objects.get(pk=confirmation_id)
    assert (request.escalate_approvers, request.escalate_approver_people["people"]) == (["dave"], {dave.key: "Dave Duty"})
    assert decide(confirmation_id, "approve", actor="dave", channel="web-oncall").code == "not_approver"  # not yet

    ConfirmationRequest.objects.filter(pk=confirmation_id).update(escalate_at=timezone.now() - dt.timedelta(seconds=1))
    assert run_timers.apply().get()["escalated"] == 1

    assert decide(confirmation_id, "approve", actor="dave", channel="web-oncall").code == "decided"
    state = agent.wait(confirmation_id, timeout=5).json()
    assert (state["decided_by"], state["decided_by_name"]) == ("web:dave", "Dave Duty")
