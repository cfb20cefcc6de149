"""Linking chat identities to people (docs/approving.md, "People"): by e-mail through the vendors' own
SDKs (Slack's `users.lookupByEmail`, Feishu's `contact.v3.user.batch_get_id`, against FakeSlack and
FakeFeishu), by an admin in the Django admin, and by the person themselves through a one-time link
posted to them in the chat — signed, single-use, and only for the user who asked for it."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth.models import User

from approvals.models import IdentitySource, LinkToken, PeopleGroup, Person, PersonIdentity, StandIn
from tests.channels_ext.slack.test_end_to_end import (
    ALICE,
    BOT_TOKEN,
    SIGNING_SECRET,
    SLACK_CHANNEL_ID,
)
from tests.conftest import apply_config
from tests.fakes.feishu_api import FakeFeishu, unique_app_id
from tests.fakes.slack_api import FakeSlack
from tests.support import SignedIn

pytestmark = pytest.mark.django_db(transaction=True)

PASSWORD = "correct horse battery staple"
PEOPLE = "/admin/approvals/person/"
ALICE_OPEN_ID = "ou_3c14f3a59eaf2825dbe25359f15211a2"


def channels(fake_slack: FakeSlack, fake_feishu: FakeFeishu | None = None) -> None:
    feishu = (
        f"""
  - name: finance-feishu
    kind: feishu
    app_id: {unique_app_id()}
    app_secret: app-secret
    verification_token: v-token
    chat_id: oc_5ad11d72b830411d72b836c20
    api_base_url: {fake_feishu.domain}
"""
        if fake_feishu is not None
        else ""
    )
    apply_config(
        f"""
channels:
  - name: ops-slack
    kind: slack
    bot_token: {BOT_TOKEN}
    signing_secret: {SIGNING_SECRET}
    channel_id: {SLACK_CHANNEL_ID}
    api_base_url: {fake_slack.base_url}
  - {{name: web, kind: web}}
{feishu}agents: []
"""
    )


@pytest.fixture
def signed_in(live_gateway):
    sessions: list[SignedIn] = []

    def sign_in(username: str) -> SignedIn:
        sessions.append(SignedIn(live_gateway.url, username, PASSWORD))
        return sessions[-1]

    yield sign_in
    for session in sessions:
        session.close()


def find_accounts(admin: SignedIn, *people: Person) -> list[str]:
    answer = admin.post(
        PEOPLE, {"action": "find_chat_accounts", "_selected_action": [p.pk for p in people], "index": "0"}
    )
    assert answer.status_code == 200
    return SignedIn.messages(answer)


def test_an_admin_finds_a_persons_slack_and_feishu_accounts_by_their_e_mail(
    fake_slack, fake_feishu, live_gateway, signed_in
):
    channels(fake_slack, fake_feishu)
    fake_slack.users_by_email["alice@example.com"] = ALICE.id
    fake_feishu.users_by_email["alice@example.com"] = ALICE_OPEN_ID
    User.objects.create_superuser("root", password=PASSWORD)
    alice = Person.objects.create(display_name="Alice Adams", email="Alice@Example.com")
    nobody = Person.objects.create(display_name="Nobody Known", email="nobody@example.com")
    admin = signed_in("root")

    told = find_accounts(admin, alice, nobody)

    assert f"Alice Adams <Alice@Example.com>: linked feishu:{ALICE_OPEN_ID}, slack:{ALICE.id}." in told
    assert "Nobody Known <nobody@example.com>: no new account found." in told
    assert sorted(PersonIdentity.objects.values_list("person_id", "identity", "source")) == [
        (alice.pk, f"feishu:{ALICE_OPEN_ID}", IdentitySource.EMAIL_LOOKUP),
        (alice.pk, f"slack:{ALICE.id}", IdentitySource.EMAIL_LOOKUP),
    ]
    (lookup,) = [c for c in fake_slack.calls("users.lookupByEmail") if (c.form or {}).get("email") == "Alice@Example.com"]
    assert lookup.headers["Authorization"] == f"Bearer {BOT_TOKEN}"  # the SDK's own call, with the bot token
    (batch,) = [c for c in fake_feishu.calls("POST", "/open-apis/contact/v3/users/batch_get_id") if "Alice" in c.body.decode()]
    assert batch.query["user_id_type"] == "open_id"
    # Asked again: nothing new, nothing doubled.
    assert find_accounts(admin, alice) == ["Alice Adams <Alice@Example.com>: no new account found."]
    assert PersonIdentity.objects.count() == 2


def test_an_account_already_linked_to_someone_else_is_reported_not_moved(fake_slack, live_gateway, signed_in):
    channels(fake_slack)
    fake_slack.users_by_email["alice@example.com"] = ALICE.id
    User.objects.create_superuser("root", password=PASSWORD)
    alice = Person.objects.create(display_name="Alice Adams", email="alice@example.com")
    impostor = Person.objects.create(display_name="Ivy Impostor", email="ivy@example.com")
    PersonIdentity.objects.create(person=impostor, identity=f"slack:{ALICE.id}")

    told = find_accounts(signed_in("root"), alice)

    assert told == [f"Alice Adams <alice@example.com>: ops-slack: slack:{ALICE.id} is already linked to Ivy Impostor <ivy@example.com>"]
    assert list(PersonIdentity.objects.values_list("person_id", flat=True)) == [impostor.pk]


def test_a_vendor_failing_to_answer_is_reported_and_links_nothing(fake_slack, live_gateway, signed_in):
    channels(fake_slack)
    fake_slack.fail_next("users.lookupByEmail", body={"ok": False, "error": "missing_scope"})
    User.objects.create_superuser("root", password=PASSWORD)
    alice = Person.objects.create(display_name="Alice Adams", email="alice@example.com")

    told = find_accounts(signed_in("root"), alice)

    assert told == ["Alice Adams <alice@example.com>: ops-slack: slack users.lookupByEmail failed: missing_scope"]
    assert not PersonIdentity.objects.exists()


def test_an_admin_links_an_identity_by_hand_and_a_malformed_one_is_refused(live_gateway, signed_in):
    User.objects.create_superuser("root", password=PASSWORD)
    alice = Person.objects.create(display_name="Alice Adams", email="alice@example.com")
    admin = signed_in("root")
    change = f"{PEOPLE}{alice.pk}/change/"

    def save(identity: str):
        form = {
            "display_name": "Alice Adams", "email": "alice@example.com", "active": "on",
            "identities-TOTAL_FORMS": "1", "identities-INITIAL_FORMS": "0",
            "identities-0-identity": identity, "identities-0-source": "admin",
            "stand_ins-TOTAL_FORMS": "0", "stand_ins-INITIAL_FORMS": "0", "_save": "Save",
        }  # fmt: skip
        return admin.post(change, form)

    refused = save("web:alice")
    assert "web: identities are the person&#x27;s Django user" in refused.text or "web: identities are the person's Django user" in refused.text
    assert not PersonIdentity.objects.exists()
    assert "Unknown channel kind" in save("myspace:alice").text

    save("telegram:111222333")

    assert list(PersonIdentity.objects.values_list("identity", flat=True)) == ["telegram:111222333"]


def link_in(message: str) -> str:
    """The path of the one-time link in a direct message (the public URL's host is not this test server)."""
    (url,) = re.findall(r"https?://\S+?/people/link/\S+?/", message)
    return url.split("testserver.invalid", 1)[1]


def test_a_person_links_their_own_slack_account_with_a_one_time_link_sent_to_it(fake_slack, live_gateway, signed_in):
    channels(fake_slack)
    User.objects.create_user("alice", password=PASSWORD, email="alice@example.com")
    User.objects.create_user("mallory", password=PASSWORD)
    alice = signed_in("alice")

    asked = alice.post("/people/link/", {"channel": "ops-slack", "account": ALICE.id})

    assert SignedIn.messages(asked) == [f"A one-time link was sent to slack:{ALICE.id}. Open it there while signed in here."]
    assert not PersonIdentity.objects.exists()  # nothing linked until it is opened
    (direct,) = [c.json for c in fake_slack.calls("chat.postMessage") if c.json.get("channel") == ALICE.id]
    link = link_in(direct["text"])

    # Someone else who gets hold of the link cannot use it; a GET (a link preview) changes nothing.
    assert "Link it to me" in signed_in("mallory").get(link).text
    assert "made for someone else" in SignedIn.messages(signed_in("mallory").post(link, {}))[0]
    assert "Link it to me" in alice.get(link).text
    assert not PersonIdentity.objects.exists()

    finished = alice.post(link, {})

    assert SignedIn.messages(finished) == [f"slack:{ALICE.id} is now linked to you."]
    person = Person.objects.get(user__username="alice")
    assert (person.display_name, person.email) == ("alice", "alice@example.com")
    assert list(PersonIdentity.objects.values_list("person_id", "identity", "source")) == [
        (person.pk, f"slack:{ALICE.id}", IdentitySource.SELF_LINK)
    ]
    assert f"slack:{ALICE.id}" in alice.get("/people/link/").text
    # Single use: the same link again does nothing.
    assert SignedIn.messages(alice.post(link, {})) == ["This link was used already or has expired; ask for a new one."]
    assert LinkToken.objects.get().used_at is not None


def test_a_forged_or_tampered_link_is_refused(fake_slack, live_gateway, signed_in):
    channels(fake_slack)
    User.objects.create_user("alice", password=PASSWORD)
    alice = signed_in("alice")
    alice.post("/people/link/", {"channel": "ops-slack", "account": ALICE.id})
    (direct,) = [c.json for c in fake_slack.calls("chat.postMessage") if c.json.get("channel") == ALICE.id]
    link = link_in(direct["text"])

    tampered = alice.post(link[:-3] + "xx/", {})

    assert tampered.status_code == 400
    assert SignedIn.messages(tampered) == ["This link is not one this gateway made, or it has expired."]
    assert not PersonIdentity.objects.exists()


def test_a_link_cannot_be_asked_for_on_a_channel_that_cannot_message_one_person(fake_slack, live_gateway, signed_in):
    channels(fake_slack)
    User.objects.create_user("alice", password=PASSWORD)

    refused = signed_in("alice").post("/people/link/", {"channel": "web", "account": "alice"})

    assert refused.status_code == 400
    assert not LinkToken.objects.exists()


def test_the_same_link_opened_twice_at_once_links_once(fake_slack, live_gateway):
    """Real threads against PostgreSQL: two redemptions of one link race, 10 times; one wins each time."""
    import threading

    from django.db import connection

    from approvals import services
    from approvals.errors import InvalidInput

    channels(fake_slack)
    for attempt in range(10):
        # A user of their own each time: a user may ask for only so many links (LINK_OFFERS_PER_WINDOW).
        alice = User.objects.create_user(f"alice{attempt:02d}", password=PASSWORD)
        account = f"U0RACE{attempt:02d}"
        services.person_link_offer(user=alice, channel_name="ops-slack", account=account)
        (direct,) = [c.json for c in fake_slack.calls("chat.postMessage") if c.json.get("channel") == account]
        signed = link_in(direct["text"]).rstrip("/").rsplit("/", 1)[1]
        start = threading.Barrier(2)
        outcomes: list[str] = []

        def redeem(
            start: threading.Barrier = start, outcomes: list[str] = outcomes, signed: str = signed, alice: User = alice
        ) -> None:
            try:
                start.wait(timeout=10)
                outcomes.append(services.person_link_redeem(user=alice, signed=signed))
            except InvalidInput as refused:
                outcomes.append(refused.message)
            finally:
                connection.close()

        threads = [threading.Thread(target=redeem) for _ in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=20)

        assert sorted(outcomes) == sorted([f"slack:{account}", "This link was used already or has expired; ask for a new one."])
        assert PersonIdentity.objects.filter(identity=f"slack:{account}").count() == 1


def test_an_admin_makes_a_group_and_names_a_stand_in_whose_window_must_make_sense(live_gateway, signed_in):
    User.objects.create_superuser("root", password=PASSWORD)
    ada = Person.objects.create(display_name="Ada Away", email="ada@example.com")
    sam = Person.objects.create(display_name="Sam Standin", email="sam@example.com")
    admin = signed_in("root")

    made = admin.post("/admin/approvals/peoplegroup/add/", {"name": "finance", "description": "pays", "members": [ada.pk, sam.pk], "_save": "Save"})

    assert made.status_code == 200
    assert sorted(PeopleGroup.objects.get(name="finance").members.values_list("display_name", flat=True)) == ["Ada Away", "Sam Standin"]
    add = "/admin/approvals/standin/add/"
    window = {"person": ada.pk, "delegate": sam.pk, "starts_at_0": "2026-12-01", "starts_at_1": "08:00", "note": "", "_save": "Save"}
    backwards = admin.post(add, {**window, "ends_at_0": "2026-11-30", "ends_at_1": "08:00"})
    for_oneself = admin.post(add, {**window, "delegate": ada.pk, "ends_at_0": "2026-12-15", "ends_at_1": "08:00"})
    assert "Constraint “standin_window” is violated." in SignedIn.messages(backwards)
    assert "Constraint “standin_not_self” is violated." in SignedIn.messages(for_oneself)
    assert not StandIn.objects.exists()

    admin.post(add, {**window, "ends_at_0": "2026-12-15", "ends_at_1": "08:00"})

    assert list(StandIn.objects.values_list("person_id", "delegate_id")) == [(ada.pk, sam.pk)]
