"""Sign-in with the organisation's identity provider, and teams (docs/approving.md), from the outside:
a real OpenID Connect provider (tests/oidc) run locally under node, the live gateway over real HTTP."""

from __future__ import annotations

import httpx
import pytest
from django.contrib.auth.models import Permission, User

from approvals.models import Agent, ConfirmationRequest, IdentityProviderLink, PeopleGroup, Person, PersonIdentity
from tests.channels_ext.web.conftest import INVOICE, PASSWORD
from tests.channels_ext.web.test_who_may_see import browser, csrf_of
from tests.oidc.provider import SUBJECTS, sign_in_through_the_provider

pytestmark = pytest.mark.django_db(transaction=True)

def idp_browser(live_gateway) -> httpx.Client:
    return httpx.Client(base_url=live_gateway.url, follow_redirects=True, timeout=30)


def test_oidc_sign_in_lands_on_the_inbox_with_the_right_person_and_groups(live_gateway, idp, teams):
    client = idp_browser(live_gateway)
    login_page = client.get("/login/")
    assert "Sign in with Example Corp SSO" in login_page.text

    inbox = sign_in_through_the_provider(client, "dana")

    assert inbox.status_code == 200 and inbox.url.path == "/approvals/"
    dana = User.objects.get(idp_links__subject=SUBJECTS["dana"])
    assert (dana.username, dana.email, dana.first_name) == ("dana", "dana@example.com", "Dana Payments")
    assert dana.person.display_name == "Dana Payments" and dana.person.email == "dana@example.com"
    assert [g.name for g in dana.person.groups.all()] == ["payments"]
    assert not dana.is_staff and not dana.has_usable_password()
    link = IdentityProviderLink.objects.get(user=dana)
    assert link.issuer == idp.issuer and link.last_signed_in_at is not None
    assert '<span class="who">dana</span>' in inbox.text
    # Her team's request is in her inbox; the other team's is not.
    assert teams["paying"] in inbox.text and teams["sampling"] not in inbox.text

    # Signing in again is the same user (found by the subject), not a second one.
    again = idp_browser(live_gateway)
    sign_in_through_the_provider(again, "dana")
    assert User.objects.filter(email="dana@example.com").count() == 1
    assert IdentityProviderLink.objects.filter(subject=SUBJECTS["dana"]).count() == 1
    assert Person.objects.filter(email="dana@example.com").count() == 1


def test_the_directory_person_with_the_verified_email_becomes_the_signed_in_users(live_gateway, idp, teams):
    """Dana is in the directory already, with her Slack account: signing in makes that person hers, so
    she is one person on Slack and on the web page."""
    known = Person.objects.create(display_name="Dana P.", email="DANA@example.com")
    PersonIdentity.objects.create(person=known, identity="slack:U0DANA")

    sign_in_through_the_provider(idp_browser(live_gateway), "dana")

    known.refresh_from_db()
    assert known.user is not None and known.user.idp_links.get().subject == SUBJECTS["dana"]
    assert Person.objects.count() == 1
    assert [g.name for g in known.groups.all()] == ["payments"]


def test_a_user_of_another_team_gets_404_and_cannot_decide_nor_see_the_request(live_gateway, idp, teams):
    erik = idp_browser(live_gateway)
    inbox = sign_in_through_the_provider(erik, "erik")
    assert teams["sampling"] in inbox.text and teams["paying"] not in inbox.text and "oa__purchase_pay" not in inbox.text

    page = f"/approvals/{teams['paying']}/"
    for path in (page, f"{page}state"):
        assert erik.get(path).status_code == 404
    token = csrf_of(erik, "/approvals/")
    assert erik.post(page, data={"decision": "approve", "csrfmiddlewaretoken": token}).status_code == 404
    batch = erik.post(
        "/approvals/decide", data={"ids": teams["paying"], "decision": "approve", "csrfmiddlewaretoken": token}
    )
    assert "no such request" in batch.text
    paying = ConfirmationRequest.objects.get(pk=teams["paying"])
    assert paying.status == "pending" and not paying.responses.exists()
    assert not paying.events.filter(kind="refused_click").exists()  # nothing about it recorded for him

    # A member of its team decides it on the same page.
    dana = idp_browser(live_gateway)
    sign_in_through_the_provider(dana, "dana")
    decided = dana.post(page, data={"decision": "approve", "csrfmiddlewaretoken": csrf_of(dana, page)})
    assert decided.status_code == 200
    assert ConfirmationRequest.objects.get(pk=teams["paying"]).status == "approved"


def test_a_local_user_with_the_verified_email_is_linked_not_duplicated(live_gateway, idp, teams):
    """An admin made Dana's user for the directory (no password, not staff): her first sign-in links it.
    A user who is staff, a superuser or has a password is linked by an admin (test_sign_in_takeover)."""
    local = User.objects.create_user("dana.k", email="Dana@example.com")

    inbox = sign_in_through_the_provider(idp_browser(live_gateway), "dana")

    assert '<span class="who">dana.k</span>' in inbox.text
    assert IdentityProviderLink.objects.get(subject=SUBJECTS["dana"]).user == local
    assert User.objects.filter(email__iexact="dana@example.com").count() == 1


def test_the_groups_claim_replaces_the_groups_at_each_sign_in(live_gateway, idp, teams):
    fay = idp_browser(live_gateway)
    sign_in_through_the_provider(fay, "fay")
    person = User.objects.get(idp_links__subject=SUBJECTS["fay"]).person
    person.groups.add(PeopleGroup.objects.get(name="payments"))  # given by hand; the IdP says she has none

    inbox = sign_in_through_the_provider(idp_browser(live_gateway), "fay")

    assert list(person.groups.all()) == []
    assert teams["paying"] not in inbox.text and teams["sampling"] not in inbox.text


def test_staff_sign_in_to_the_admin_through_the_provider_and_see_only_their_team(live_gateway, idp, teams):
    sign_in_through_the_provider(idp_browser(live_gateway), "erik")  # his user exists from now on
    erik = User.objects.get(username="erik")
    erik.is_staff = True
    erik.save(update_fields=["is_staff"])
    erik.user_permissions.add(*Permission.objects.filter(codename__in=[
        "view_confirmationrequest", "change_confirmationrequest", "view_agent", "view_channel", "view_apikey",
        "view_toolcall", "view_team",
    ]))  # fmt: skip
    client = idp_browser(live_gateway)
    assert "Sign in with Example Corp SSO" in client.get("/admin/login/?next=/admin/").text

    landed = sign_in_through_the_provider(client, "erik", start="/oidc/authenticate/?next=/admin/approvals/confirmationrequest/")

    assert landed.url.path == "/admin/approvals/confirmationrequest/"
    assert teams["sampling"][:8] in landed.text and teams["paying"][:8] not in landed.text
    other = client.get(f"/admin/approvals/confirmationrequest/{teams['paying']}/change/")
    assert other.url.path == "/admin/" and "doesn’t exist" in other.text  # Django's answer for a row it cannot find
    agents = client.get("/admin/approvals/agent/").text
    assert "lab-bot" in agents and "purchasing-bot" not in agents
    channels = client.get("/admin/approvals/channel/").text
    assert "research-web" in channels and "payments-web" not in channels
    assert "purchasing-bot" not in client.get("/admin/approvals/apikey/").text
    # The admin's approve action reaches only his team's rows: the other team's id is ignored.
    token = csrf_of(client, "/admin/approvals/confirmationrequest/")
    client.post("/admin/approvals/confirmationrequest/", data={
        "action": "approve_selected", "_selected_action": [teams["paying"], teams["sampling"]],
        "csrfmiddlewaretoken": token,
    })  # fmt: skip
    assert ConfirmationRequest.objects.get(pk=teams["paying"]).status == "pending"
    assert ConfirmationRequest.objects.get(pk=teams["sampling"]).status == "approved"


def test_without_configuration_there_is_no_sign_in_with_a_provider(live_gateway, transactional_db):
    client = idp_browser(live_gateway)
    assert client.get("/oidc/authenticate/").status_code == 404
    assert client.get("/oidc/callback/?code=x&state=y").status_code == 404
    assert "idp-sign-in" not in client.get("/login/").text
    assert "idp-sign-in" not in client.get("/admin/login/").text


def test_a_single_team_install_needs_no_configuration(live_gateway, agent, people):
    """The config names no team: everything is in the default team, open to everyone, as before teams."""
    assert set(Agent.objects.values_list("team__name", flat=True)) == {"default"}
    asked = agent.pre_tool_use("oa__purchase_pay", INVOICE).json()["confirmation_id"]
    alice = browser(live_gateway, "alice")
    assert asked in alice.get("/approvals/").text
    assert alice.get(f"/approvals/{asked}/").status_code == 200


def test_a_deactivated_user_is_sent_back_to_the_sign_in_page_saying_it_did_not_work(live_gateway, idp, teams):
    sign_in_through_the_provider(idp_browser(live_gateway), "erik")
    User.objects.filter(idp_links__subject=SUBJECTS["erik"]).update(is_active=False)

    client = idp_browser(live_gateway)
    landed = sign_in_through_the_provider(client, "erik")

    assert landed.url.path == "/login/" and "Signing in with Example Corp SSO did not work" in landed.text
    assert client.get("/approvals/").url.path == "/login/"  # not signed in
