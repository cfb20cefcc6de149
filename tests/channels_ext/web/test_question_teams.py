"""An agent's question goes only to its own team's channels and people (docs/asking.md, "Who is asked"):
a channel, approvers or an escalation of another team — or of none — is refused with a 400 in the
contract's error shape and nothing is asked. Over real HTTP against the live gateway."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User

from approvals.models import ConfirmationRequest, PeopleGroup, Person, Team
from tests.conftest import apply_config, make_agent_client

pytestmark = pytest.mark.django_db(transaction=True)

CHOICE = {"type": "string", "enum": ["Acme", "Globex"]}
CONFIG = """
channels:
  - {name: pay-web, kind: web, team: payments}
  - {name: lab-web, kind: web, team: research}
agents:
  - name: pay-bot
    team: payments
    hooks:
      - {kind: approval_gate, name: pay-gate, tools: ["pay"], channel: pay-web, approvers: ["group:payers"]}
"""


@pytest.fixture
def pay_bot(live_gateway, transactional_db):
    """payments' agent. Pia is payments' (its group); Lars research's (its group); Rex a member of
    research directly; Sharon is in a group of no team; Norma is in no group."""
    apply_config(CONFIG)
    Team.objects.filter(name="default").update(everyone=False)
    payments, research = Team.objects.get(name="payments"), Team.objects.get(name="research")
    users = {name: User.objects.create_user(name) for name in ("pia", "lars", "rex", "norma")}
    research.members.add(users["rex"])
    people = {name: Person.objects.create(display_name=name.title(), email=f"{name}@example.com", user=users.get(name))
              for name in ("pia", "lars", "sharon", "norma")}  # fmt: skip
    PeopleGroup.objects.create(name="payers", team=payments).members.add(people["pia"])
    PeopleGroup.objects.create(name="lab", team=research).members.add(people["lars"])
    PeopleGroup.objects.create(name="all-hands").members.add(people["sharon"])
    agent = make_agent_client(live_gateway, "pay-bot")
    yield agent
    agent.http.close()


def ask(agent, **body):
    return agent.http.post("/api/v1/questions", json={"question": "Which vendor?", "answer_schema": CHOICE, **body})


@pytest.mark.parametrize(
    "body, key, says",
    [
        ({"channel": "lab-web"}, "channel", "no channel named 'lab-web' in the agent's team"),
        ({"channel": "pay-web", "approvers": ["group:lab"]}, "approvers", "group:lab"),
        ({"channel": "pay-web", "approvers": ["pia", "group:all-hands"]}, "approvers", "group:all-hands"),
        ({"channel": "pay-web", "approvers": ["group:no-such-group"]}, "approvers", "group:no-such-group"),
        ({"channel": "pay-web", "approvers": ["person:lars@example.com"]}, "approvers", "person:lars@example.com"),
        ({"channel": "pay-web", "approvers": ["person:norma@example.com"]}, "approvers", "person:norma@example.com"),
        ({"channel": "pay-web", "approvers": ["lars"]}, "approvers", "lars"),
        ({"channel": "pay-web", "approvers": ["rex"]}, "approvers", "rex"),
        ({"gate": "pay-gate", "approvers": ["group:lab"]}, "approvers", "group:lab"),
        ({"channel": "pay-web", "escalate_to": {"channel": "lab-web", "approvers": []}, "escalate_after_seconds": 60},
         "escalate_to", "no channel named 'lab-web' in the agent's team"),
        ({"channel": "pay-web", "escalate_to": {"channel": "pay-web", "approvers": ["group:lab"]}, "escalate_after_seconds": 60},
         "escalate_to", "group:lab"),
    ],
    ids=["channel", "group", "group-of-no-team", "unknown-group", "person", "person-of-no-team", "username",
         "username-of-a-direct-member", "with-a-gate", "escalation-channel", "escalation-approvers"],  # fmt: skip
)
def test_a_question_to_another_teams_channel_or_people_is_refused_and_asks_nothing(pay_bot, body, key, says):
    response = ask(pay_bot, **body)

    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["code"] == "invalid" and says in error["message"]
    assert says in " ".join(error["details"][key])
    assert not ConfirmationRequest.objects.exists()


def test_a_question_to_its_own_teams_channel_and_people_is_asked(pay_bot):
    response = ask(pay_bot, channel="pay-web", approvers=["group:payers", "person:pia@example.com", "pia", "somebody-new"])
    through_the_gate = ask(pay_bot)

    assert response.status_code == 201, response.text
    assert through_the_gate.status_code == 201, through_the_gate.text
    assert ConfirmationRequest.objects.get(pk=response.json()["id"]).approvers == ["pia", "somebody-new"]


def test_in_a_team_open_to_everyone_everyone_is_its_people(pay_bot):
    """A single-team install: the default team is open to everyone, so any group or person may be asked."""
    Team.objects.filter(name="payments").update(everyone=True)

    response = ask(pay_bot, channel="pay-web", approvers=["group:all-hands", "person:norma@example.com"])

    assert response.status_code == 201, response.text
