"""The people directory's admin scoped by team (docs/approving.md, "Teams"): a team's staff list, reach,
are offered and may save only the people, groups and stand-ins all of whose teams are theirs; a change
that would bring a person or a group into another team's approvals is refused; a superuser does all.
Through Django's test client over the real admin views, PostgreSQL, and FakeSlack for the e-mail lookup."""

from __future__ import annotations

import datetime as dt
import json

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client
from django.utils import timezone

from approvals.models import PeopleGroup, Person, PersonIdentity, StandIn, Team
from tests.conftest import apply_config
from tests.fakes.slack_api import FakeSlack

pytestmark = pytest.mark.django_db(transaction=True)

PEOPLE, GROUPS, STAND_INS = "/admin/approvals/person/", "/admin/approvals/peoplegroup/", "/admin/approvals/standin/"
DOES_NOT_EXIST = "doesn’t exist"  # Django's answer for a row the admin does not find


def config(slack_base_url: str = "http://127.0.0.1:9") -> str:
    """Two closed teams. payments' gate names its group and Pia; research's gates name theirs, an address
    nobody has yet, a web username and a Slack id."""
    return f"""
channels:
  - {{name: pay-web, kind: web, team: payments}}
  - {{name: lab-web, kind: web, team: research}}
  - name: lab-slack
    kind: slack
    team: research
    bot_token: xoxb-1-2-lab
    signing_secret: lab-signing-secret
    channel_id: C0LAB
    api_base_url: {slack_base_url}
agents:
  - name: pay-bot
    team: payments
    hooks:
      - {{kind: approval_gate, name: pay-gate, tools: ["pay"], channel: pay-web, approvers: ["group:payers", "person:pia@example.com"]}}
  - name: lab-bot
    team: research
    hooks:
      - kind: approval_gate
        name: lab-gate
        tools: ["order"]
        channel: lab-web
        approvers: ["group:lab", "group:lab-approvers", "person:shared@example.com", "person:lab-lead@example.com", "rex"]
      - {{kind: approval_gate, name: lab-chat, tools: ["ship"], channel: lab-slack, approvers: ["U0LAB"]}}
"""


@pytest.fixture
def directory(transactional_db) -> dict[str, object]:
    apply_config(config())
    Team.objects.filter(name="default").update(everyone=False)
    payments, research = Team.objects.get(name="payments"), Team.objects.get(name="research")
    rita = User.objects.create_user("rita", password="x", is_staff=True)  # payments' staff
    rita.user_permissions.add(*Permission.objects.filter(content_type__app_label="approvals", content_type__model__in=[
        "person", "peoplegroup", "standin", "personidentity"]))  # fmt: skip
    payments.members.add(rita)
    root = User.objects.create_superuser("root", "root@example.com", "x")
    rex = User.objects.create_user("rex", password="x")  # research's web approver by username
    ursula = User.objects.create_user("ursula", password="x")  # nobody's yet
    people = {
        name: Person.objects.create(display_name=name.title(), email=f"{name}@example.com")
        for name in ("pia", "paul", "lars", "both", "loner", "sharon", "shared")
    }
    payers = PeopleGroup.objects.create(name="payers", team=payments)
    lab = PeopleGroup.objects.create(name="lab", team=research)
    everyone = PeopleGroup.objects.create(name="all-hands")  # of no team
    payers.members.add(people["pia"], people["paul"], people["both"], people["shared"])
    lab.members.add(people["lars"], people["both"])
    everyone.members.add(people["sharon"])
    return {"rita": rita, "root": root, "rex": rex, "ursula": ursula, "payers": payers, "lab": lab,
            "all-hands": everyone, "payments": payments, "research": research, **people}  # fmt: skip


def signed_in(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def listed(client: Client, path: str) -> list[str]:
    """The rows of an admin list, as their names."""
    answer = client.get(path)
    assert answer.status_code == 200
    return [str(row) for row in answer.context["cl"].result_list]


def filter_choices(client: Client, path: str) -> list[str]:
    """Every choice the list's filters offer."""
    answer = client.get(path)
    return [str(choice["display"]) for spec in answer.context["cl"].filter_specs for choice in spec.choices(answer.context["cl"])]


def errors(answer) -> list[str]:
    """The form's errors on a page sent back (a 200 with `errors`), as Django's admin renders them."""
    assert answer.status_code == 200, answer.status_code
    form = answer.context["adminform"].form
    found = [str(e) for field in form.errors.values() for e in field]
    for formset in answer.context["inline_admin_formsets"]:
        found += [str(e) for e in formset.formset.non_form_errors()]
        found += [str(e) for form_errors in formset.formset.errors for field in form_errors.values() for e in field]
    return found


def person_form(person: Person | None, **changes) -> dict[str, object]:
    """The person's change form as the admin posts it (no inline row changed unless given)."""
    identities = list(person.identities.all()) if person is not None else []
    data: dict[str, object] = {
        "display_name": person.display_name if person else "New Person",
        "email": person.email if person else "",
        "active": "on",
        "user": (person.user_id or "") if person else "",
        "groups": [g.pk for g in person.groups.all()] if person else [],
        "identities-TOTAL_FORMS": str(len(identities) + 1),
        "identities-INITIAL_FORMS": str(len(identities)),
        "identities-MIN_NUM_FORMS": "0",
        "identities-MAX_NUM_FORMS": "1000",
        "stand_ins-TOTAL_FORMS": "0",
        "stand_ins-INITIAL_FORMS": "0",
        "stand_ins-MIN_NUM_FORMS": "0",
        "stand_ins-MAX_NUM_FORMS": "1000",
        "_save": "Save",
    }
    for n, identity in enumerate(identities):
        data.update({f"identities-{n}-id": identity.pk, f"identities-{n}-person": person.pk,
                     f"identities-{n}-identity": identity.identity, f"identities-{n}-source": identity.source})  # fmt: skip
    new = len(identities)
    data.update({f"identities-{new}-identity": changes.pop("new_identity", ""), f"identities-{new}-source": "admin"})
    if person is not None:
        data[f"identities-{new}-person"] = person.pk
    data.update(changes)
    return data


def test_a_teams_staff_list_only_the_people_and_groups_all_of_whose_teams_are_theirs(directory):
    """Pia and Paul are only in payments' group. Lars is research's; Both is in a group of each team;
    Sharon is in a group of no team; Loner is in no group; Shared is in payers but research's gate names
    her by `person:` — each routed for a team not Rita's, or for none."""
    rita = signed_in(directory["rita"])

    people = listed(rita, PEOPLE)
    groups = listed(rita, GROUPS)

    assert people == ["Paul <paul@example.com>", "Pia <pia@example.com>"]
    assert groups == ["payers"]
    # The filters offer no other team's group or team name either.
    assert "lab" not in filter_choices(rita, PEOPLE) and "all-hands" not in filter_choices(rita, PEOPLE)
    assert "research" not in filter_choices(rita, GROUPS) and "payments" in filter_choices(rita, GROUPS)
    assert len(listed(signed_in(directory["root"]), PEOPLE)) == 7
    assert listed(signed_in(directory["root"]), GROUPS) == ["all-hands", "lab", "payers"]


@pytest.mark.parametrize("name", ["lars", "both", "sharon", "loner", "shared"])
def test_a_person_of_another_team_or_of_none_is_not_found_by_id_and_a_posted_change_changes_nothing(directory, name):
    rita = signed_in(directory["rita"])
    person = directory[name]
    change = f"{PEOPLE}{person.pk}/change/"

    shown = rita.get(change, follow=True)
    posted = rita.post(change, person_form(person, display_name="Hijacked", new_identity="slack:U0RITA"), follow=True)
    deleted = rita.post(f"{PEOPLE}{person.pk}/delete/", {"post": "yes"}, follow=True)

    for answer in (shown, posted, deleted):
        assert DOES_NOT_EXIST in answer.content.decode()
    person.refresh_from_db()
    assert person.display_name == name.title() and not PersonIdentity.objects.filter(identity="slack:U0RITA").exists()
    # The superuser reaches and changes them.
    root = signed_in(directory["root"])
    assert root.post(change, person_form(person, display_name="Renamed")).status_code == 302
    person.refresh_from_db()
    assert person.display_name == "Renamed"


def test_staff_change_their_teams_person_but_never_into_another_teams_approvals(directory):
    rita, pia = signed_in(directory["rita"]), directory["pia"]
    change = f"{PEOPLE}{pia.pk}/change/"

    refused = {
        "a Slack id research's gate names": rita.post(change, person_form(pia, new_identity="slack:U0LAB")),
        "an address research's gate names": rita.post(change, person_form(pia, email="lab-lead@example.com")),
        "research's web approver as her user": rita.post(change, person_form(pia, user=directory["rex"].pk)),
        "a superuser as her user": rita.post(change, person_form(pia, user=directory["root"].pk)),
        "research's group": rita.post(change, person_form(pia, groups=[directory["payers"].pk, directory["lab"].pk])),
        "a group of no team": rita.post(change, person_form(pia, groups=[directory["all-hands"].pk])),
    }

    for what, answer in refused.items():
        assert errors(answer), what
    assert "This would make this person part of the approvals of a team you do not administer" in " ".join(
        errors(refused["a Slack id research's gate names"]) + errors(refused["an address research's gate names"])
    )
    pia.refresh_from_db()
    assert (pia.email, pia.user, list(pia.identities.all())) == ("pia@example.com", None, [])
    assert list(pia.groups.values_list("name", flat=True)) == ["payers"]

    fine = rita.post(change, person_form(pia, new_identity="slack:U0PIA", user=directory["ursula"].pk, email="pia@corp.example"))

    assert fine.status_code == 302, errors(fine)
    pia.refresh_from_db()
    assert (pia.email, pia.user, [i.identity for i in pia.identities.all()]) == ("pia@corp.example", directory["ursula"], ["slack:U0PIA"])
    assert list(pia.groups.values_list("name", flat=True)) == ["payers"]


def test_staff_add_a_person_only_into_a_group_of_their_team(directory):
    rita = signed_in(directory["rita"])
    add = f"{PEOPLE}add/"

    no_group = rita.post(add, person_form(None, email="new@example.com"))
    research = rita.post(add, person_form(None, email="new@example.com", groups=[directory["lab"].pk]))
    assert errors(no_group) and errors(research)
    assert not Person.objects.filter(email="new@example.com").exists()

    made = rita.post(add, person_form(None, email="new@example.com", groups=[directory["payers"].pk]))

    assert made.status_code == 302, errors(made)
    assert list(Person.objects.get(email="new@example.com").groups.values_list("name", flat=True)) == ["payers"]
    offered = rita.get(add).context["adminform"].form.fields
    assert [str(g) for g in offered["groups"].queryset] == ["payers"]
    assert sorted(u.username for u in offered["user"].queryset) == ["rita", "ursula"]  # not rex (research's), not root


def test_staff_edit_only_their_teams_groups_and_never_name_one_as_another_teams_gates_do(directory):
    rita = signed_in(directory["rita"])
    for group in ("lab", "all-hands"):
        answer = rita.post(f"{GROUPS}{directory[group].pk}/change/", {"name": "mine", "team": directory["payments"].pk, "_save": "Save"}, follow=True)
        assert DOES_NOT_EXIST in answer.content.decode()
    payers = directory["payers"]
    members = [p.pk for p in payers.members.all()]

    refused = {
        "of no team": rita.post(f"{GROUPS}add/", {"name": "floating", "team": "", "_save": "Save"}),
        "of research": rita.post(f"{GROUPS}add/", {"name": "floating", "team": directory["research"].pk, "_save": "Save"}),
        "named by research's gate": rita.post(f"{GROUPS}add/", {"name": "lab-approvers", "team": directory["payments"].pk, "_save": "Save"}),
        "renamed to research's": rita.post(f"{GROUPS}{payers.pk}/change/", {"name": "lab-approvers", "team": directory["payments"].pk, "members": members, "_save": "Save"}),
        "with research's Lars": rita.post(f"{GROUPS}{payers.pk}/change/", {"name": "payers", "team": directory["payments"].pk, "members": [*members, directory["lars"].pk], "_save": "Save"}),
    }

    for what, answer in refused.items():
        assert errors(answer), what
    assert not PeopleGroup.objects.filter(name__in=["floating", "lab-approvers"]).exists()
    assert directory["lars"] not in payers.members.all()
    # Her own group keeps its members of other teams (Both, Shared) when she changes it.
    dropped_paul = rita.post(f"{GROUPS}{payers.pk}/change/", {"name": "payers", "team": directory["payments"].pk,
                                                             "members": [m for m in members if m != directory["paul"].pk], "_save": "Save"})  # fmt: skip
    assert dropped_paul.status_code == 302, errors(dropped_paul)
    assert sorted(payers.members.values_list("display_name", flat=True)) == ["Both", "Pia", "Shared"]
    made = rita.post(f"{GROUPS}add/", {"name": "payers-2", "team": directory["payments"].pk, "members": [directory["pia"].pk], "_save": "Save"})
    assert made.status_code == 302, errors(made)


def test_stand_ins_are_scoped_in_their_list_their_choices_and_the_autocomplete(directory):
    now = timezone.now()
    window = {"starts_at": now, "ends_at": now + dt.timedelta(days=3)}
    theirs = StandIn.objects.create(person=directory["lars"], delegate=directory["both"], **window)
    mine = StandIn.objects.create(person=directory["pia"], delegate=directory["paul"], **window)
    rita = signed_in(directory["rita"])

    assert listed(rita, STAND_INS) == [str(mine)]
    assert DOES_NOT_EXIST in rita.get(f"{STAND_INS}{theirs.pk}/change/", follow=True).content.decode()
    found = rita.get("/admin/autocomplete/", {"app_label": "approvals", "model_name": "standin", "field_name": "delegate", "term": ""})
    assert found.status_code == 200
    assert sorted(r["text"] for r in json.loads(found.content)["results"]) == ["Paul <paul@example.com>", "Pia <pia@example.com>"]
    form = {"starts_at_0": "2026-12-01", "starts_at_1": "08:00", "ends_at_0": "2026-12-15", "ends_at_1": "08:00", "note": "", "_save": "Save"}
    to_lars = rita.post(f"{STAND_INS}add/", {**form, "person": directory["pia"].pk, "delegate": directory["lars"].pk})
    for_lars = rita.post(f"{STAND_INS}add/", {**form, "person": directory["lars"].pk, "delegate": directory["pia"].pk})
    assert errors(to_lars) and errors(for_lars)
    assert StandIn.objects.count() == 2
    # On Pia's page, the stand-in inline offers only her team's people too.
    on_her_page = rita.post(f"{PEOPLE}{directory['pia'].pk}/change/", person_form(directory["pia"], **{
        "stand_ins-TOTAL_FORMS": "2", "stand_ins-INITIAL_FORMS": "1", "stand_ins-0-id": mine.pk, "stand_ins-0-person": directory["pia"].pk,
        "stand_ins-0-delegate": directory["paul"].pk, "stand_ins-0-starts_at_0": "2026-12-01", "stand_ins-0-starts_at_1": "08:00",
        "stand_ins-0-ends_at_0": "2026-12-15", "stand_ins-0-ends_at_1": "08:00", "stand_ins-1-person": directory["pia"].pk,
        "stand_ins-1-delegate": directory["lars"].pk, "stand_ins-1-starts_at_0": "2026-12-01", "stand_ins-1-starts_at_1": "08:00",
        "stand_ins-1-ends_at_0": "2026-12-15", "stand_ins-1-ends_at_1": "08:00"}))  # fmt: skip
    assert errors(on_her_page)
    assert not StandIn.objects.filter(delegate=directory["lars"]).exists()


def test_the_e_mail_lookup_links_no_account_another_teams_gate_names(fake_slack: FakeSlack, directory):
    apply_config(config(fake_slack.base_url))
    fake_slack.users_by_email.update({"pia@example.com": "U0LAB", "paul@example.com": "U0PAUL"})
    rita = signed_in(directory["rita"])

    answer = rita.post(PEOPLE, {"action": "find_chat_accounts", "_selected_action": [directory["pia"].pk, directory["paul"].pk], "index": "0"}, follow=True)

    told = [str(m) for m in answer.context["messages"]]
    assert "Pia <pia@example.com>: lab-slack: slack:U0LAB is an approver of a team you do not administer; a superuser can link it" in told
    assert "Paul <paul@example.com>: linked slack:U0PAUL." in told
    assert list(PersonIdentity.objects.values_list("identity", flat=True)) == ["slack:U0PAUL"]
