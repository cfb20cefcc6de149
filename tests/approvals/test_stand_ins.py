"""Stand-ins keep separation of duties (docs/approving.md, "Stand-ins"): the stand-in of the person a call
is made for is refused like that person, on the page, on Slack and in a quorum; a stand-in is of the
same team as the person they stand in for; and what the directory says at the moment of a click —
not the snapshot taken when the request was routed — decides: a stand-in removed, ended, cut short
or moved, a person deactivated or taken out of the group that named them, no longer decides.
Over real HTTP (the approval page, the admin, FakeSlack with a real Celery worker) and PostgreSQL;
the same refusal on every channel is in tests/channels_ext/contract.py (`PeopleContract`)."""

from __future__ import annotations

import datetime as dt
import html

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from approvals import services
from approvals.errors import InvalidInput
from approvals.models import (
    ApproverResponse,
    ConfirmationEvent,
    ConfirmationRequest,
    PeopleGroup,
    Person,
    StandIn,
    Team,
)
from tests.approvals.test_people import PASSWORD, TOOL, finance, signed_in, slack_config  # noqa: F401 (fixtures)
from tests.channels_ext.slack.test_end_to_end import ALICE, BOB, MALLORY, click, notes_to, posted_card
from tests.conftest import apply_config, decide, make_agent_client
from tests.support import SignedIn, wait_until

pytestmark = pytest.mark.django_db(transaction=True)

OWN_STAND_IN = "You stand in for {}, for whom this call was made: a stand-in cannot approve it either."


def web_config(approvers: list[str], *, more: str = "") -> str:
    return f"""
channels: [{{name: web, kind: web}}]
agents:
  - name: purchasing-bot
    hooks:
      - kind: approval_gate
        name: finance-gate
        tools: ["{TOOL}"]
        channel: web
        approvers: {approvers!r}
        timeout_seconds: 1800
{more}"""


def person(name: str, username: str, *, active: bool = True) -> Person:
    """A person of the directory with a Django user who is no staff: they decide only what is routed to them."""
    user = User.objects.create_user(username, password=PASSWORD)
    return Person.objects.create(display_name=name, email=f"{username}@example.com", user=user, active=active)


def stand_in(away: Person, delegate: Person, *, hours_left: float = 24.0) -> StandIn:
    now = timezone.now()
    return StandIn.objects.create(
        person=away, delegate=delegate, starts_at=now - dt.timedelta(hours=1), ends_at=now + dt.timedelta(hours=hours_left)
    )


def approve_on_the_page(page: SignedIn, confirmation_id: str) -> list[str]:
    return SignedIn.messages(page.post(f"/approvals/{confirmation_id}/", {"decision": "approve", "reason": ""}))


def refusals(confirmation_id: str) -> list[tuple[str, str]]:
    events = ConfirmationEvent.objects.filter(confirmation_id=confirmation_id, kind="refused_click").order_by("created_at")
    return list(events.values_list("actor", "message"))


@pytest.fixture
def web_team(transactional_db) -> dict[str, Person]:
    """Ada (away), Bob and Sam (her stand-in), none of them staff; the group `finance` is Ada and Bob."""
    people = {"ada": person("Ada Away", "ada"), "bob": person("Bob Brown", "bob"), "sam": person("Sam Standin", "sam")}
    PeopleGroup.objects.create(name="finance").members.add(people["ada"], people["bob"])
    return people


# --------------------------------------------------------------------------- (a) the owner's stand-in


def test_on_the_page_the_stand_in_of_the_person_a_call_is_made_for_is_refused_like_them(live_gateway, web_team, signed_in):
    stand_in(web_team["ada"], web_team["sam"])
    apply_config(web_config(["group:finance"]))
    agent = make_agent_client(live_gateway, "purchasing-bot")
    confirmation_id = agent.pre_tool_use(TOOL, {"amount": 5}, user_id="ada@example.com").json()["confirmation_id"]
    sam = signed_in("sam")
    assert 'id="readonly"' in sam.get(f"/approvals/{confirmation_id}/").text  # no buttons, and why

    assert approve_on_the_page(sam, confirmation_id) == [OWN_STAND_IN.format("Ada Away")]
    assert approve_on_the_page(signed_in("ada"), confirmation_id) == ["You cannot approve a call made on your own behalf."]
    assert not ApproverResponse.objects.exists()
    assert refusals(confirmation_id) == [
        ("web:sam", OWN_STAND_IN.format("Ada Away")),
        ("web:ada", "You cannot approve a call made on your own behalf."),
    ]
    assert approve_on_the_page(signed_in("bob"), confirmation_id) == ["Approved."]  # anyone else of the group may


def test_a_gate_that_allows_self_approval_lets_the_owners_stand_in_approve_for_them(live_gateway, web_team, signed_in):
    stand_in(web_team["ada"], web_team["sam"])
    apply_config(web_config(["group:finance"], more="        forbid_self_approval: false\n"))
    agent = make_agent_client(live_gateway, "purchasing-bot")
    confirmation_id = agent.pre_tool_use(TOOL, {"amount": 5}, user_id="ada").json()["confirmation_id"]

    assert approve_on_the_page(signed_in("sam"), confirmation_id) == ["Approved."]
    assert agent.wait(confirmation_id, timeout=5).json()["decided_by_name"] == "Sam Standin on behalf of Ada Away"


def test_on_slack_the_owners_stand_in_is_refused_and_counts_for_nothing_in_a_quorum(
    fake_slack, live_gateway, celery_worker, finance
):
    stand_in(finance["alice"], finance["mallory"])
    apply_config(slack_config(fake_slack, ["group:finance"], more="        approvals_required: 2\n"))
    agent = make_agent_client(live_gateway, "purchasing-bot")
    confirmation_id = agent.pre_tool_use(TOOL, {"amount": 80000}, user_id="alice@example.com").json()["confirmation_id"]
    card = posted_card(fake_slack)

    click(live_gateway, fake_slack, card, MALLORY, "approve", note_to="mallory")  # for Alice, whose call it is
    assert click(live_gateway, fake_slack, card, BOB, "approve", note_to="bob").status_code == 200

    assert wait_until(lambda: notes_to(fake_slack, "mallory"))[-1]["text"] == OWN_STAND_IN.format("Alice Adams")
    assert list(ApproverResponse.objects.values_list("approver", "on_behalf_of")) == [(f"slack:{BOB.id}", "")]
    assert agent.wait(confirmation_id, timeout=0).json()["status"] == "pending"  # Bob's is the only approval


def test_a_call_made_for_a_bare_slack_id_is_its_persons_on_the_page_and_for_their_stand_in(
    fake_slack, live_gateway, celery_worker, finance, signed_in
):
    """The agent names its user by their Slack id, unqualified (`U0ALICE`): it is Alice's call on every
    channel, so neither her stand-in on Slack nor Alice herself on the page (she is staff) may approve it."""
    stand_in(finance["alice"], finance["mallory"])
    apply_config(slack_config(fake_slack, ["group:finance"]))
    agent = make_agent_client(live_gateway, "purchasing-bot")
    confirmation_id = agent.pre_tool_use(TOOL, {"amount": 80000}, user_id=ALICE.id).json()["confirmation_id"]
    card = posted_card(fake_slack)

    click(live_gateway, fake_slack, card, MALLORY, "approve", note_to="mallory")
    alice = signed_in("alice")
    approve_on_the_page(alice, confirmation_id)

    assert wait_until(lambda: notes_to(fake_slack, "mallory"))[-1]["text"] == OWN_STAND_IN.format("Alice Adams")
    assert "You cannot approve a call made on your own behalf. You can see this request" in alice.get(f"/approvals/{confirmation_id}/").text
    assert not ApproverResponse.objects.exists()
    assert agent.wait(confirmation_id, timeout=0).json()["status"] == "pending"
    click(live_gateway, fake_slack, card, BOB, "approve", note_to="bob")
    assert agent.wait(confirmation_id, timeout=10).json()["decided_by"] == f"slack:{BOB.id}"


def test_a_chain_of_stand_ins_reaches_nobody_beyond_the_first_and_the_owners_is_refused(live_gateway, web_team, signed_in):
    """Ada names Sam, Sam names Cy: a request routed to Ada reaches Sam, never Cy through Sam; the call is
    Ada's, so Sam is refused. Bob and Ada name each other: each is an approver in their own right."""
    ada, bob, sam = web_team["ada"], web_team["bob"], web_team["sam"]
    cy = person("Cy Chain", "cy")
    stand_in(ada, sam)
    stand_in(sam, cy)
    stand_in(bob, ada)
    stand_in(ada, bob)
    apply_config(web_config(["group:finance"]))
    agent = make_agent_client(live_gateway, "purchasing-bot")
    confirmation_id = agent.pre_tool_use(TOOL, {"amount": 5}, user_id="ada").json()["confirmation_id"]
    assert ConfirmationRequest.objects.get(pk=confirmation_id).approvers == ["ada", "bob", "sam"]

    assert approve_on_the_page(signed_in("cy"), confirmation_id) == ["You are not one of the approvers of this request."]
    assert approve_on_the_page(signed_in("sam"), confirmation_id) == [OWN_STAND_IN.format("Ada Away")]
    assert approve_on_the_page(signed_in("ada"), confirmation_id) == ["You cannot approve a call made on your own behalf."]
    assert approve_on_the_page(signed_in("bob"), confirmation_id) == ["Approved."]
    assert list(ApproverResponse.objects.values_list("person", "on_behalf_of")) == [(bob.key, "")]  # in his own right


# --------------------------------------------------------------------------- (b) a stand-in of the same team


@pytest.fixture
def two_teams(transactional_db) -> dict[str, Person]:
    """Closed teams `payments` (its group `payments-staff`: Ada, Fay) and `research` (`lab`: Sam)."""
    people = {k: person(n, k) for k, n in [("ada", "Ada Away"), ("fay", "Fay Finance"), ("sam", "Sam Standin")]}
    payments, research = Team.objects.create(name="payments"), Team.objects.create(name="research")
    PeopleGroup.objects.create(name="payments-staff", team=payments).members.add(people["ada"], people["fay"])
    PeopleGroup.objects.create(name="lab", team=research).members.add(people["sam"])
    return people


def stand_in_form(delegate: str) -> dict[str, str]:
    now = timezone.now()
    return {
        "delegate_email": delegate,
        "starts_at": (now - dt.timedelta(hours=1)).strftime("%Y-%m-%d %H:%M"),
        "ends_at": (now + dt.timedelta(days=7)).strftime("%Y-%m-%d %H:%M"),
    }


OTHER_TEAM = "Sam Standin is in none of the teams of Ada Away (payments): a stand-in must be in the same team as the person they stand in for."


def test_a_stand_in_of_another_team_is_refused_on_the_page_in_the_admin_and_by_the_service(live_gateway, two_teams, signed_in):
    User.objects.create_superuser("root", password=PASSWORD)
    ada, fay, sam = two_teams["ada"], two_teams["fay"], two_teams["sam"]
    page = signed_in("ada")

    refused = page.post("/people/stand-in/", stand_in_form("sam@example.com"))
    assert (refused.status_code, SignedIn.messages(refused)) == (400, [OTHER_TEAM])
    window = {"starts_at_0": "2026-12-01", "starts_at_1": "08:00", "ends_at_0": "2026-12-15", "ends_at_1": "08:00", "note": ""}
    in_the_admin = signed_in("root").post("/admin/approvals/standin/add/", {"person": ada.pk, "delegate": sam.pk, **window, "_save": "Save"})
    assert OTHER_TEAM in SignedIn.messages(in_the_admin)
    on_the_persons_page = signed_in("root").post(
        f"/admin/approvals/person/{ada.pk}/change/",
        {
            "display_name": ada.display_name, "email": ada.email, "active": "on", "user": ada.user_id,
            "identities-TOTAL_FORMS": "0", "identities-INITIAL_FORMS": "0",
            "stand_ins-TOTAL_FORMS": "1", "stand_ins-INITIAL_FORMS": "0",
            "stand_ins-0-delegate": sam.pk, **{f"stand_ins-0-{k}": v for k, v in window.items()}, "_save": "Save",
        },
    )  # fmt: skip
    assert OTHER_TEAM in SignedIn.messages(on_the_persons_page)
    with pytest.raises(InvalidInput) as by_the_service:
        services.stand_in_name(user=ada.user, delegate_email="sam@example.com", starts_at=timezone.now(), ends_at=timezone.now() + dt.timedelta(days=1))
    assert by_the_service.value.message == OTHER_TEAM
    assert not StandIn.objects.exists()

    named = page.post("/people/stand-in/", stand_in_form("fay@example.com"))  # of her team: fine

    assert SignedIn.messages(named)[0].startswith("Fay Finance stands in for you until ")
    assert list(StandIn.objects.values_list("delegate_id", flat=True)) == [fay.pk]


def test_a_stand_in_of_another_team_named_before_the_rule_decides_nothing(live_gateway, two_teams, signed_in):
    ada, sam = two_teams["ada"], two_teams["sam"]
    stand_in(ada, sam)  # in the directory from before the rule (or typed in SQL)
    apply_config(web_config(["person:ada@example.com"]))  # the agent is of the default team, open to all
    agent = make_agent_client(live_gateway, "purchasing-bot")
    confirmation_id = agent.pre_tool_use(TOOL, {"amount": 5}).json()["confirmation_id"]

    assert approve_on_the_page(signed_in("sam"), confirmation_id) == [
        "You are in none of the teams of Ada Away (payments), so you do not stand in for them."
    ]
    assert not ApproverResponse.objects.exists()


# --------------------------------------------------------------------------- (c) the directory now, not the snapshot


def _shortened(s: StandIn) -> None:
    StandIn.objects.filter(pk=s.pk).update(ends_at=timezone.now() - dt.timedelta(minutes=1))


def _moved_later(s: StandIn) -> None:
    StandIn.objects.filter(pk=s.pk).update(starts_at=dt.datetime(2099, 1, 1, 9, tzinfo=dt.UTC), ends_at=dt.datetime(2099, 1, 2, tzinfo=dt.UTC))


@pytest.mark.parametrize(
    ("change", "told"),
    [
        (lambda s: s.delete(), "Ada Away no longer has you as a stand-in, so this request is no longer yours to decide."),
        (_shortened, "Your time standing in for Ada Away has ended."),
        (_moved_later, "Your time standing in for Ada Away starts 2099-01-01 09:00 UTC."),
        (
            lambda s: Person.objects.filter(pk=s.delegate_id).update(active=False),
            "You were deactivated in the people directory, so requests routed to you are no longer yours to decide.",
        ),
        (
            lambda s: Person.objects.filter(pk=s.person_id).update(active=False),
            "Ada Away was deactivated in the people directory, so nobody stands in for them.",
        ),
        (
            lambda s: s.person.groups.get(name="finance").members.remove(s.person),
            "Ada Away is no longer in group:finance, so nobody stands in for them on this request.",
        ),
    ],
    ids=["removed", "shortened", "moved-later", "stand-in-deactivated", "person-deactivated", "person-out-of-the-group"],
)
def test_a_stand_in_changed_after_the_request_was_routed_decides_as_the_directory_says_now(
    live_gateway, web_team, signed_in, change, told
):
    standing = stand_in(web_team["ada"], web_team["sam"])
    apply_config(web_config(["group:finance"]))
    agent = make_agent_client(live_gateway, "purchasing-bot")
    confirmation_id = agent.pre_tool_use(TOOL, {"amount": 5}).json()["confirmation_id"]
    assert "sam" in ConfirmationRequest.objects.get(pk=confirmation_id).approvers  # routed to Sam

    change(standing)

    assert approve_on_the_page(signed_in("sam"), confirmation_id) == [told]
    assert not ApproverResponse.objects.exists()
    assert refusals(confirmation_id) == [("web:sam", told)]
    assert agent.wait(confirmation_id, timeout=0).json()["status"] == "pending"


@pytest.mark.parametrize(
    ("change", "told"),
    [
        (
            lambda bob: Person.objects.filter(pk=bob.pk).update(active=False),
            "You were deactivated in the people directory, so requests routed to you are no longer yours to decide.",
        ),
        (
            lambda bob: PeopleGroup.objects.get(name="finance").members.remove(bob),
            "You are no longer in group:finance, which routed this request to you: it is no longer yours to decide.",
        ),
    ],
    ids=["deactivated", "out-of-the-group"],
)
def test_a_person_deactivated_or_taken_out_of_the_group_after_routing_decides_nothing(
    live_gateway, web_team, signed_in, change, told
):
    apply_config(web_config(["group:finance"]))
    agent = make_agent_client(live_gateway, "purchasing-bot")
    confirmation_id = agent.pre_tool_use(TOOL, {"amount": 5}).json()["confirmation_id"]

    change(web_team["bob"])

    assert approve_on_the_page(signed_in("bob"), confirmation_id) == [told]
    assert approve_on_the_page(signed_in("ada"), confirmation_id) == ["Approved."]  # the others still decide


def test_on_slack_a_stand_in_removed_and_a_member_taken_out_of_the_group_are_told_why(
    fake_slack, live_gateway, celery_worker, finance
):
    standing = stand_in(finance["alice"], finance["mallory"])
    apply_config(slack_config(fake_slack, ["group:finance"]))
    agent = make_agent_client(live_gateway, "purchasing-bot")
    confirmation_id = agent.pre_tool_use(TOOL, {"amount": 80000}, user_id="u-42").json()["confirmation_id"]
    card = posted_card(fake_slack)

    standing.delete()
    PeopleGroup.objects.get(name="finance").members.remove(finance["bob"])
    click(live_gateway, fake_slack, card, MALLORY, "approve", note_to="mallory")
    click(live_gateway, fake_slack, card, BOB, "approve", note_to="bob")

    assert wait_until(lambda: notes_to(fake_slack, "mallory"))[-1]["text"] == (
        "Alice Adams no longer has you as a stand-in, so this request is no longer yours to decide."
    )
    assert wait_until(lambda: notes_to(fake_slack, "bob"))[-1]["text"] == (
        "You are no longer in group:finance, which routed this request to you: it is no longer yours to decide."
    )
    assert agent.wait(confirmation_id, timeout=0).json()["status"] == "pending"
    click(live_gateway, fake_slack, card, ALICE, "approve", note_to="alice")
    assert agent.wait(confirmation_id, timeout=10).json()["decided_by"] == f"slack:{ALICE.id}"


def test_a_person_ends_their_stand_in_on_the_page_and_it_stops_deciding_at_once(live_gateway, web_team, signed_in):
    standing = stand_in(web_team["ada"], web_team["sam"])
    apply_config(web_config(["group:finance"]))
    agent = make_agent_client(live_gateway, "purchasing-bot")
    confirmation_id = agent.pre_tool_use(TOOL, {"amount": 5}).json()["confirmation_id"]
    ada = signed_in("ada")
    assert signed_in("bob").post(f"/people/stand-in/{standing.pk}/end", {}).status_code == 404  # not Bob's to end

    ended = ada.post(f"/people/stand-in/{standing.pk}/end", {})

    assert SignedIn.messages(ended) == ["Sam Standin no longer stands in for you."]
    assert approve_on_the_page(signed_in("sam"), confirmation_id) == ["Your time standing in for Ada Away has ended."]
    assert SignedIn.messages(ada.post(f"/people/stand-in/{standing.pk}/end", {})) == ["That stand-in had already ended."]


def test_a_click_by_a_person_of_the_group_reads_the_directory_once_more_and_no_more(live_gateway, web_team):
    """The checks of the directory as it is now cost a click on a request routed to people one read (and a
    click on a request of channel ids none)."""
    apply_config(web_config(["group:finance"], more="        approvals_required: 2\n"))
    agent = make_agent_client(live_gateway, "purchasing-bot")
    confirmation_id = agent.pre_tool_use(TOOL, {"amount": 5}, user_id="u-42").json()["confirmation_id"]
    with CaptureQueriesContext(connection) as reads:
        assert decide(confirmation_id, "approve", actor="bob").code == "recorded"
    directory = [q["sql"] for q in reads.captured_queries if "approvals_peoplegroup" in q["sql"] or "approvals_standin" in q["sql"]]
    assert len(directory) == 1, directory


# --------------------------------------------------------------------------- one identity, one person


def test_an_e_mail_address_names_one_person_whether_linked_or_their_own(live_gateway, signed_in):
    """`email:ada@…` linked to Sam while Ada's own address is ada@…: a call made for ada@… would be Ada's
    (`owner_of`) while the click from that address was Sam's (`person_of`). Neither half is accepted."""
    from approvals.errors import Conflict

    User.objects.create_superuser("root", password=PASSWORD)
    ada = Person.objects.create(display_name="Ada Away", email="ada@example.com")
    sam = Person.objects.create(display_name="Sam Standin", email="sam@example.com")
    admin = signed_in("root")
    told = "email:Ada@Example.com is the e-mail of Ada Away <ada@example.com>: an address names one person."

    def save(who: Person, email: str, identity: str = ""):
        form = {
            "display_name": who.display_name, "email": email, "active": "on",
            "identities-TOTAL_FORMS": "1" if identity else "0", "identities-INITIAL_FORMS": "0",
            "identities-0-identity": identity, "identities-0-source": "admin",
            "stand_ins-TOTAL_FORMS": "0", "stand_ins-INITIAL_FORMS": "0", "_save": "Save",
        }  # fmt: skip
        return html.unescape(admin.post(f"/admin/approvals/person/{who.pk}/change/", form).text)  # (a field's error)

    assert told in save(sam, sam.email, identity="email:Ada@Example.com")
    with pytest.raises(Conflict) as by_the_service:
        services.person_identity_link(person_id=sam.pk, identity="email:Ada@Example.com")
    assert by_the_service.value.message == told
    services.person_identity_link(person_id=ada.pk, identity="email:ada.private@example.com")  # her own: fine
    taken = "ada.private@example.com is linked to Ada Away <ada@example.com> as email:ada.private@example.com: an address names one person."
    assert taken in save(sam, "ada.private@example.com")
    assert Person.objects.get(pk=sam.pk).email == "sam@example.com"
    assert list(sam.identities.values_list("identity", flat=True)) == []
