"""One person counts once (docs/approving.md): a quorum of N needs N different people, whichever
identities they answer under — the same Django user on the approval page (`web:carol`) and in the
admin (`admin:carol`) is one person, over real HTTP, under concurrency, and for self-approval; and
the migration that gives existing responses their person."""

from __future__ import annotations

import importlib
import threading

import pytest
from django.apps import apps
from django.contrib.auth.models import Permission, User
from django.db import connection

from approvals import selectors, services
from approvals.models import Agent, ApproverResponse, Channel, ConfirmationRequest
from gateway_contract import Callback
from tests.conftest import apply_config, make_agent_client
from tests.support import SignedIn

pytestmark = pytest.mark.django_db(transaction=True)

PASSWORD = "correct horse battery staple"
TOOL = "oa__purchase_pay"
CHANGELIST = "/admin/approvals/confirmationrequest/"

TWO_PEOPLE = f"""
channels: [{{name: web, kind: web}}]
agents:
  - name: purchasing-bot
    hooks:
      - kind: approval_gate
        name: two-people
        tools: ["{TOOL}"]
        channel: web
        approvals_required: 2
        timeout_seconds: 1800
"""


@pytest.fixture
def people(transactional_db) -> dict[str, User]:
    """carol is staff who may decide any request (the page and the admin's actions); bob approves on the page."""
    carol = User.objects.create_user("carol", password=PASSWORD, is_staff=True)
    carol.user_permissions.add(
        Permission.objects.get(codename="change_confirmationrequest"),
        Permission.objects.get(codename="view_confirmationrequest"),
    )
    return {"carol": carol, "bob": User.objects.create_user("bob", password=PASSWORD)}


@pytest.fixture
def agent(live_gateway, people):
    apply_config(TWO_PEOPLE)
    client = make_agent_client(live_gateway, "purchasing-bot")
    yield client
    client.http.close()


@pytest.fixture
def signed_in(live_gateway, people):
    sessions: list[SignedIn] = []

    def sign_in(username: str) -> SignedIn:
        sessions.append(SignedIn(live_gateway.url, username, PASSWORD))
        return sessions[-1]

    yield sign_in
    for session in sessions:
        session.close()


def ask(agent, **extra) -> str:
    answer = agent.pre_tool_use(TOOL, {"amount": 1000}, **extra).json()
    assert answer["decision"] == "pending", answer
    return answer["confirmation_id"]


def page(confirmation_id: str) -> str:
    return f"/approvals/{confirmation_id}/"


def test_a_staff_user_approving_on_the_page_and_in_the_admin_counts_once(agent, signed_in):
    confirmation_id = ask(agent)
    carol = signed_in("carol")

    on_the_page = carol.post(page(confirmation_id), {"decision": "approve", "reason": ""})
    in_the_admin = carol.post(
        CHANGELIST, {"action": "approve_selected", "_selected_action": [confirmation_id], "index": "0"}
    )

    assert SignedIn.messages(on_the_page) == ["Approval recorded (1 of 2)."]
    assert in_the_admin.status_code == 200
    assert SignedIn.messages(in_the_admin) == [
        f"Left unchanged — {confirmation_id[:8]}: You have already answered this request, as web:carol; "
        "one person counts once."
    ]
    assert ConfirmationRequest.objects.get(pk=confirmation_id).status == "pending"
    assert list(ApproverResponse.objects.values_list("approver", "person")) == [
        ("web:carol", f"user:{User.objects.get(username='carol').pk}")
    ]
    assert agent.wait(confirmation_id, timeout=0).json()["status"] == "pending"  # the agent is not let through

    approved = signed_in("bob").post(page(confirmation_id), {"decision": "approve", "reason": ""})

    assert SignedIn.messages(approved) == ["Approved."]
    state = agent.wait(confirmation_id, timeout=5).json()
    assert (state["status"], state["decided_by"]) == ("approved", "web:bob")
    assert list(ApproverResponse.objects.order_by("created_at").values_list("approver", flat=True)) == [
        "web:carol",
        "web:bob",
    ]


def test_the_same_person_approving_from_two_places_at_once_is_recorded_once(agent, people):
    """Real threads against PostgreSQL: carol's click on the page and her admin action, together, 15 times."""
    for _ in range(15):
        confirmation_id = ask(agent)
        start = threading.Barrier(2)
        outcomes: dict[str, str] = {}

        def approve(kind: str, channel: str, as_admin: bool) -> None:
            try:
                start.wait(timeout=10)
                outcome = services.confirmation_respond(
                    channel_name=channel,
                    callback=Callback(confirmation_id=confirmation_id, decision="approve", actor="carol"),
                    as_admin=as_admin,
                    actor_kind=kind,
                    with_card=False,
                )
                outcomes[kind] = outcome.code
            finally:
                connection.close()

        threads = [
            threading.Thread(target=approve, args=("web", "web", False)),
            threading.Thread(target=approve, args=("admin", "admin", True)),
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=20)

        assert sorted(outcomes.values()) == ["duplicate", "recorded"], outcomes
        assert ApproverResponse.objects.filter(confirmation_id=confirmation_id).count() == 1
        assert ConfirmationRequest.objects.get(pk=confirmation_id).status == "pending"


def test_a_call_made_for_one_identity_of_a_person_cannot_be_approved_by_them_under_another(agent, signed_in):
    confirmation_id = ask(agent, user_id="web:carol")  # the agent acts for carol, known by her page identity
    carol = signed_in("carol")

    in_the_admin = carol.post(
        CHANGELIST, {"action": "approve_selected", "_selected_action": [confirmation_id], "index": "0"}
    )

    assert SignedIn.messages(in_the_admin) == [
        f"Left unchanged — {confirmation_id[:8]}: You cannot approve a call made on your own behalf."
    ]
    assert not ApproverResponse.objects.exists()
    assert 'id="readonly"' in carol.get(page(confirmation_id)).text  # the page offers her no buttons either


def test_every_identity_other_than_a_django_users_is_a_person_of_its_own(people):
    carol = people["carol"].pk
    assert selectors.person_of("web:carol") == selectors.person_of("admin:carol") == f"user:{carol}"
    assert selectors.person_of("web:nobody") == "web:nobody"  # no such user: only itself
    assert selectors.person_of("slack:U0CAROL") == "slack:U0CAROL"
    assert selectors.person_of("feishu:ou_carol") == "feishu:ou_carol"


def test_the_migration_gives_each_response_its_person_and_keeps_an_earlier_double_count_apart(people):
    migration = importlib.import_module("approvals.migrations.0008_one_person_and_judged_edits")
    bot = Agent.objects.create(name="bot")
    web = Channel.objects.create(name="web", kind="web")
    request = ConfirmationRequest.objects.create(agent=bot, channel=web, tool_name="pay", approvals_required=3)
    other = ConfirmationRequest.objects.create(agent=bot, channel=web, tool_name="pay")
    # As the gateway stored them before: carol counted twice on `request`.
    for n, (confirmation, approver) in enumerate(
        [(request, "web:carol"), (request, "admin:carol"), (request, "slack:U0BOB"), (other, "admin:carol"),
         (other, "web:ghost")]  # fmt: skip
    ):
        ApproverResponse.objects.create(confirmation=confirmation, approver=approver, person=f"old-{n}", decision="approve")

    migration.forwards(apps, None)
    migration.forwards(apps, None)  # twice changes nothing more

    carol = f"user:{people['carol'].pk}"
    persons = ApproverResponse.objects.order_by("created_at", "id").values_list("confirmation_id", "approver", "person")
    assert list(persons) == [
        (request.pk, "web:carol", carol),
        (request.pk, "admin:carol", "admin:carol"),  # carol's second answer: kept, as its own identity
        (request.pk, "slack:U0BOB", "slack:U0BOB"),
        (other.pk, "admin:carol", carol),
        (other.pk, "web:ghost", "web:ghost"),  # no such user: itself
    ]
