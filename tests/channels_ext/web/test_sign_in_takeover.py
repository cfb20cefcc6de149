"""Sign-in never takes over an account (docs/approving.md §7), tried as someone with an account at the
identity provider would: a real OpenID Connect provider (tests/oidc) under node, the live gateway over
real HTTP, the accounts at the IdP changed as their owners could change them."""

from __future__ import annotations

import re
import socket

import httpx
import pytest
from django.contrib.auth.models import User

from approvals.models import IdentityProviderLink, PeopleGroup, Person
from tests.channels_ext.web.conftest import PASSWORD
from tests.channels_ext.web.test_who_may_see import csrf_of
from tests.oidc.provider import (
    GROUP_IDS,
    SUBJECTS,
    LocalProvider,
    callback_from_the_provider,
    sign_in_through_the_provider,
)

pytestmark = pytest.mark.django_db(transaction=True)

NEEDS_AN_ADMIN = "an administrator must link"
DID_NOT_WORK = "Signing in with Example Corp SSO did not work"


def idp_browser(live_gateway) -> httpx.Client:
    return httpx.Client(base_url=live_gateway.url, follow_redirects=True, timeout=30)


def signed_in_as(client: httpx.Client) -> str | None:
    """The username the gateway's session cookie is signed in as, or None (sent to the sign-in page)."""
    inbox = client.get("/approvals/")
    if inbox.url.path == "/login/":
        return None
    return inbox.text.split('<span class="who">', 1)[1].split("</span>", 1)[0]


def assert_refused(landed: httpx.Response, words: str) -> None:
    """Back on the sign-in page saying `words`, and no answer on the way was a server error."""
    statuses = [r.status_code for r in (*landed.history, landed)]
    said = re.findall(r'<(?:ul class="(?:errorlist|messages)"|li class="error")[^>]*>(.*?)</', landed.text, re.S)
    assert (landed.url.path, landed.status_code, max(statuses) < 500) == ("/login/", 200, True), (landed.url, statuses)
    assert words in landed.text, said


# --------------------------------------------------------------------------- linking by e-mail


@pytest.mark.parametrize(
    ("kind", "idp_email"),
    [
        ("staff", "root@example.com"),
        ("superuser", "ROOT@Example.com"),  # a case variant of the address is the same address
        ("password", "root@example.com"),
    ],
)
def test_an_idp_account_with_the_email_of_a_privileged_user_does_not_sign_in_as_them(
    live_gateway, idp, kind, idp_email
):
    root = User.objects.create_user(
        "root",
        email="root@example.com",
        password=PASSWORD if kind == "password" else None,
        is_staff=kind == "staff",
        is_superuser=kind == "superuser",
    )
    idp.put_account(f"mallory-{kind}", username="mallory", email=idp_email, name="Mallory")
    client = idp_browser(live_gateway)

    landed = sign_in_through_the_provider(client, f"mallory-{kind}")

    assert_refused(landed, NEEDS_AN_ADMIN)
    assert f"mallory-{kind}" in landed.text  # the subject the admin links, shown to its owner only
    assert signed_in_as(client) is None
    assert not IdentityProviderLink.objects.exists() and list(User.objects.all()) == [root]


def test_a_linkable_user_is_linked_once_and_afterwards_found_by_the_subject(live_gateway, idp):
    """Nadia (no password, not staff: made by an admin for the directory) is linked on her first
    sign-in. Then neither her new email at the IdP nor a second IdP account with her email reaches
    anyone else's account or hers."""
    nadia = User.objects.create_user("nadia", email="nadia@example.com")
    other = User.objects.create_user("otto", email="otto@example.com")
    idp.put_account("nadia-1", username="nadia", email="nadia@example.com", name="Nadia")

    first = idp_browser(live_gateway)
    sign_in_through_the_provider(first, "nadia-1")
    assert signed_in_as(first) == "nadia"
    assert IdentityProviderLink.objects.get(subject="nadia-1").user == nadia

    # Her email at the IdP becomes Otto's (an IdP that lets people edit it): she is still Nadia.
    idp.put_account("nadia-1", username="nadia", email="otto@example.com", name="Nadia")
    again = idp_browser(live_gateway)
    sign_in_through_the_provider(again, "nadia-1")
    assert signed_in_as(again) == "nadia"
    assert not other.idp_links.exists()

    # A second IdP account with Nadia's (verified) email: not Nadia — she is linked already.
    idp.put_account("nadia-2", username="nadia2", email="nadia@example.com", name="Nadia Two")
    second = idp_browser(live_gateway)
    landed = sign_in_through_the_provider(second, "nadia-2")
    assert_refused(landed, NEEDS_AN_ADMIN)
    assert signed_in_as(second) is None
    assert list(nadia.idp_links.values_list("subject", flat=True)) == ["nadia-1"]
    assert User.objects.count() == 2


def test_an_unverified_email_links_nobody_and_is_not_taken_as_the_new_users(live_gateway, idp):
    User.objects.create_user("uma", email="uma@example.com")
    idp.put_account("uma-fake", username="uma2", email="uma@example.com", email_verified=False)
    client = idp_browser(live_gateway)
    assert_refused(sign_in_through_the_provider(client, "uma-fake"), NEEDS_AN_ADMIN)
    assert signed_in_as(client) is None

    # An unverified address nobody has: a new user, but not with that address (nor its person).
    Person.objects.create(display_name="Victor", email="victor@example.com")
    idp.put_account("victor-fake", username="vic", email="victor@example.com", email_verified=False)
    newcomer = idp_browser(live_gateway)
    sign_in_through_the_provider(newcomer, "victor-fake")
    assert signed_in_as(newcomer) == "vic"
    vic = User.objects.get(username="vic")
    assert vic.email == "" and vic.person.email == "" and vic.person.display_name != "Victor"
    assert Person.objects.get(display_name="Victor").user is None


@pytest.mark.parametrize("look_alike", ["m\u0131a@example.com", "mia@\u0131dp.example.com", "\u017fam@example.com"])
def test_a_look_alike_email_does_not_reach_the_account_it_imitates(live_gateway, idp, look_alike):
    """PostgreSQL's case-insensitive comparison folds the dotless ı into I and the long ſ into S: an
    address that merely looks like (and upper-cases like) a user's is not theirs."""
    victim = look_alike.replace("\u0131", "i").replace("\u017f", "s")
    User.objects.create_user("victim", email=victim)
    idp.put_account("look-alike", username="lookalike", email=look_alike)
    client = idp_browser(live_gateway)

    landed = sign_in_through_the_provider(client, "look-alike")

    assert_refused(landed, NEEDS_AN_ADMIN)
    assert signed_in_as(client) is None and not IdentityProviderLink.objects.exists()


def test_the_same_subject_at_another_issuer_is_not_the_account_linked_at_the_first(live_gateway, idp, settings):
    sign_in_through_the_provider(idp_browser(live_gateway), "dana")
    dana = User.objects.get(idp_links__subject=SUBJECTS["dana"])

    other = LocalProvider(redirect_uri=f"{live_gateway.url}/oidc/callback/")  # the same people, another issuer
    try:
        for name, value in other.gateway_settings().items():
            setattr(settings, name, value)
        client = idp_browser(live_gateway)
        landed = sign_in_through_the_provider(client, "dana")
    finally:
        other.stop()

    assert_refused(landed, NEEDS_AN_ADMIN)
    assert signed_in_as(client) is None
    assert list(dana.idp_links.values_list("issuer", flat=True)) == [idp.issuer]


# --------------------------------------------------------------------------- an admin links the rest

LINKS = "/admin/approvals/identityproviderlink/"


def admin_browser(live_gateway, username: str) -> httpx.Client:
    client = idp_browser(live_gateway)
    token = csrf_of(client, "/admin/login/")
    client.post("/admin/login/", data={"username": username, "password": PASSWORD, "csrfmiddlewaretoken": token})
    return client


def link_in_the_admin(client: httpx.Client, *, user: User, issuer: str, subject: str) -> httpx.Response:
    token = csrf_of(client, "/admin/")
    fields = {"user": user.pk, "issuer": issuer, "subject": subject, "csrfmiddlewaretoken": token}
    return client.post(f"{LINKS}add/", data=fields)


def test_a_superuser_links_an_idp_subject_to_a_staff_user_in_the_admin(live_gateway, idp):
    User.objects.create_superuser("boss", password=PASSWORD)
    root = User.objects.create_user("root", email="root@example.com", password=PASSWORD, is_staff=True)
    idp.put_account("root-at-idp", username="root", email="root@example.com")
    assert_refused(sign_in_through_the_provider(idp_browser(live_gateway), "root-at-idp"), NEEDS_AN_ADMIN)

    admin = admin_browser(live_gateway, "boss")
    page = admin.get(f"{LINKS}add/")
    assert page.status_code == 200 and idp.issuer in page.text  # the configured issuer, filled in
    saved = link_in_the_admin(admin, user=root, issuer=idp.issuer, subject="root-at-idp")
    assert saved.url.path == LINKS, saved.text

    client = idp_browser(live_gateway)
    landed = sign_in_through_the_provider(client, "root-at-idp", start="/oidc/authenticate/?next=/admin/")
    assert landed.url.path == "/admin/" and signed_in_as(client) == "root"
    # The same subject cannot be linked twice.
    again = link_in_the_admin(admin, user=root, issuer=idp.issuer, subject="root-at-idp")
    assert "already exists" in again.text and IdentityProviderLink.objects.count() == 1


def test_only_a_superuser_links_or_unlinks(live_gateway, idp):
    from django.contrib.auth.models import Permission

    staff = User.objects.create_user("sam", password=PASSWORD, is_staff=True)
    staff.user_permissions.add(*Permission.objects.filter(codename__endswith="identityproviderlink"))
    target = User.objects.create_superuser("boss", password=PASSWORD)
    link = IdentityProviderLink.objects.create(user=target, issuer=idp.issuer, subject="boss-at-idp")
    client = admin_browser(live_gateway, "sam")

    assert client.get(f"{LINKS}add/").status_code == 403
    assert link_in_the_admin(client, user=target, issuer=idp.issuer, subject="sam-at-idp").status_code == 403
    token = csrf_of(client, "/admin/")
    deleted = client.post(f"{LINKS}{link.pk}/delete/", data={"post": "yes", "csrfmiddlewaretoken": token})
    assert deleted.status_code == 403
    assert list(IdentityProviderLink.objects.values_list("subject", flat=True)) == ["boss-at-idp"]


# --------------------------------------------------------------------------- the groups claim


def test_the_groups_claim_is_not_mapped_unless_configured(live_gateway, idp, settings):
    settings.GATEWAY_OIDC_GROUPS_CLAIM = ""
    settings.GATEWAY_OIDC_GROUPS = {}
    kept = PeopleGroup.objects.create(name="research")
    sign_in_through_the_provider(idp_browser(live_gateway), "dana")
    person = User.objects.get(idp_links__subject=SUBJECTS["dana"]).person
    person.groups.add(kept)  # given by an admin

    sign_in_through_the_provider(idp_browser(live_gateway), "dana")

    assert list(person.groups.all()) == [kept]
    assert list(PeopleGroup.objects.all()) == [kept]  # none made from the claim


def test_only_the_group_ids_the_operator_lists_are_mapped_never_a_group_name(live_gateway, idp):
    """Any IdP user may create a group called `payments` (or `Payments`); only the group whose id the
    operator listed in GATEWAY_OIDC_GROUPS makes someone a member of the gateway's `payments`."""
    payments = PeopleGroup.objects.create(name="payments")
    by_hand = PeopleGroup.objects.create(name="on-call")  # not in the mapping: the admin's to give
    made_up = ["payments", "Payments", "research", "on-call"]  # groups named like the gateway's
    idp.put_account("eve", username="eve", email="eve@example.com", groups=made_up)
    sign_in_through_the_provider(idp_browser(live_gateway), "eve")
    eve = User.objects.get(username="eve").person
    assert list(eve.groups.all()) == []
    assert set(PeopleGroup.objects.values_list("name", flat=True)) == {"payments", "on-call"}

    sign_in_through_the_provider(idp_browser(live_gateway), "dana")
    dana = User.objects.get(username="dana").person
    assert list(dana.groups.all()) == [payments]

    # A listed group the claim no longer carries is taken away; a group the mapping does not name stays.
    dana.groups.add(by_hand)
    account = {"username": "dana", "email": "dana@example.com", "name": "Dana Payments"}
    idp.put_account(SUBJECTS["dana"], **account, groups=[GROUP_IDS["research"]])
    try:
        sign_in_through_the_provider(idp_browser(live_gateway), "dana")
    finally:  # the provider outlives this test: Dana is back in payments at the IdP
        idp.put_account(SUBJECTS["dana"], **account, groups=[GROUP_IDS["payments"]])
    assert sorted(dana.groups.values_list("name", flat=True)) == ["on-call", "research"]


# --------------------------------------------------------------------------- the provider's errors at the callback


def test_a_replayed_authorization_code_sends_the_person_back_to_sign_in(live_gateway, idp):
    victim = idp_browser(live_gateway)
    used = httpx.URL(callback_from_the_provider(victim, "dana"))
    victim.get(str(used))  # the code is spent
    assert signed_in_as(victim) == "dana"

    # The same code, under a state of the attacker's own session (so it reaches the token endpoint).
    attacker = idp_browser(live_gateway)
    fresh = httpx.URL(attacker.get("/oidc/authenticate/?next=/approvals/", follow_redirects=False).headers["location"])
    replayed = attacker.get("/oidc/callback/", params={"code": used.params["code"], "state": fresh.params["state"]})
    assert_refused(replayed, DID_NOT_WORK)
    assert signed_in_as(attacker) is None

    # A made-up code, and the victim's whole callback URL (its state is not the attacker's session's).
    fresh = httpx.URL(attacker.get("/oidc/authenticate/", follow_redirects=False).headers["location"])
    made_up = attacker.get("/oidc/callback/", params={"code": "not-a-code", "state": fresh.params["state"]})
    assert_refused(made_up, DID_NOT_WORK)
    assert_refused(attacker.get(str(used)), DID_NOT_WORK)
    assert signed_in_as(attacker) is None and signed_in_as(victim) == "dana"


@pytest.mark.parametrize("endpoint", ["OIDC_OP_TOKEN_ENDPOINT", "OIDC_OP_USER_ENDPOINT", "OIDC_OP_JWKS_ENDPOINT"])
def test_an_unreachable_provider_at_the_callback_sends_the_person_back_to_sign_in(
    live_gateway, idp, settings, endpoint
):
    closed = socket.socket()  # bound, never listening: a connection to it is refused at once
    closed.bind(("127.0.0.1", 0))
    try:
        client = idp_browser(live_gateway)
        back = callback_from_the_provider(client, "erik")
        setattr(settings, endpoint, f"http://127.0.0.1:{closed.getsockname()[1]}/{endpoint.lower()}")

        landed = client.get(back)
    finally:
        closed.close()

    assert_refused(landed, DID_NOT_WORK)
    assert signed_in_as(client) is None and not User.objects.exists()
