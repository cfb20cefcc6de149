"""Who someone signing in through the identity provider is (`services.user_from_identity_provider`,
docs/approving.md §7), on the real database: the claims as the verified ID token and userinfo give them."""

from __future__ import annotations

import threading

import pytest
from django.contrib.auth.models import User
from django.db import connection

from approvals import services
from approvals.errors import InvalidInput, SignInNeedsAdmin
from approvals.models import IdentityProviderLink, PeopleGroup, Person
from approvals.services.sign_in import same_address

pytestmark = pytest.mark.django_db(transaction=True)

ISSUER = "https://login.example.com"


def claims(sub: str = "a1b2", **more) -> dict:
    return {"sub": sub, "email": "ines@example.com", "email_verified": True, "preferred_username": "ines", **more}


GROUP_IDS = {"5f2d1c9a": "payments-approvers", "9a8e2b41": "research"}


def test_only_listed_group_ids_become_the_directorys_groups():
    user = services.user_from_identity_provider(
        issuer=ISSUER,
        claims=claims(groups=["5f2d1c9a", "research", "Payments Approvers", " ", "5F2D1C9A"]),
        groups_claim="groups",
        group_ids=GROUP_IDS,
    )
    assert list(user.person.groups.values_list("name", flat=True)) == ["payments-approvers"]
    assert list(PeopleGroup.objects.values_list("name", flat=True)) == ["payments-approvers"]


def test_without_listed_group_ids_the_groups_claim_is_not_read():
    user = services.user_from_identity_provider(issuer=ISSUER, claims=claims(groups=["research"]), groups_claim="groups")
    assert not user.person.groups.exists() and not PeopleGroup.objects.exists()


def test_a_groups_claim_that_is_not_a_list_of_ids_signs_nobody_in_and_changes_nothing():
    for bad in ({"admins": True}, [1, 2], 7, ["x"] * 201):
        with pytest.raises(InvalidInput, match="'groups' claim"):
            services.user_from_identity_provider(
                issuer=ISSUER, claims=claims(groups=bad), groups_claim="groups", group_ids=GROUP_IDS
            )
    assert not User.objects.exists() and not PeopleGroup.objects.exists() and not IdentityProviderLink.objects.exists()


def test_no_subject_is_refused():
    with pytest.raises(InvalidInput, match="no subject"):
        services.user_from_identity_provider(issuer=ISSUER, claims=claims(sub=""))
    assert not User.objects.exists()


def test_an_unverified_email_never_takes_over_a_local_account_or_a_directory_person():
    local = User.objects.create_user("ines", email="ines@example.com")  # linkable, were the email verified
    known = Person.objects.create(display_name="Ines", email="ines@example.com")

    with pytest.raises(SignInNeedsAdmin, match="an administrator must link"):
        services.user_from_identity_provider(issuer=ISSUER, claims=claims(email_verified=False))
    assert list(User.objects.all()) == [local] and not IdentityProviderLink.objects.exists()

    local.delete()  # nobody has the address: a new user, who is not given it
    user = services.user_from_identity_provider(issuer=ISSUER, claims=claims(email_verified=False))
    assert user.username == "ines" and user.email == "" and user.person != known
    known.refresh_from_db()
    assert known.user is None and user.idp_links.get().email == "ines@example.com"  # as the IdP said, for the admin


@pytest.mark.parametrize(
    ("a", "b", "same"),
    [
        ("Ines@Example.COM", "ines@example.com", True),
        ("m\u0131a@example.com", "mia@example.com", False),  # dotless ı: upper-cases to I
        ("\u017fam@example.com", "sam@example.com", False),  # long ſ: upper-cases to S
        ("mia@example.com", "mia@exampIe.com", False),
        ("j\u00fcrgen@example.com", "j\u00fcrgen@example.com", True),
        ("J\u00dcRGEN@example.com", "j\u00fcrgen@example.com", False),  # only ASCII is compared ignoring case
    ],
)
def test_same_address_ignores_the_case_of_ascii_only(a, b, same):
    assert same_address(a, b) is same


def test_the_same_subject_at_another_issuer_is_someone_else():
    first = services.user_from_identity_provider(issuer=ISSUER, claims=claims(email_verified=False))
    other = services.user_from_identity_provider(issuer="https://other.example.com", claims=claims(email_verified=False))
    assert first != other and IdentityProviderLink.objects.count() == 2


def test_first_sign_ins_of_one_subject_at_once_make_one_user_and_one_person():
    for round_ in range(5):
        barrier = threading.Barrier(3)
        users: list = []
        errors: list = []

        def sign_in() -> None:
            try:
                barrier.wait(timeout=10)
                users.append(
                    services.user_from_identity_provider(
                        issuer=ISSUER,
                        claims=claims(sub=f"s-{round_}", email=f"p{round_}@example.com", groups=["5f2d1c9a"]),
                        groups_claim="groups",
                        group_ids=GROUP_IDS,
                    ).pk
                )
            except BaseException as exc:  # noqa: BLE001 — reported below
                errors.append(exc)
            finally:
                connection.close()

        threads = [threading.Thread(target=sign_in) for _ in range(3)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        assert not errors, errors
        assert len(set(users)) == 1
    assert User.objects.count() == 5 and IdentityProviderLink.objects.count() == 5 and Person.objects.count() == 5


def test_two_subjects_with_one_address_at_once_link_one_of_them():
    """A user an admin made for the directory, and two IdP accounts with her verified address signing in
    at the same moment: one is linked, the other is told an admin must link it — never both."""
    for round_ in range(5):
        nadia = User.objects.create_user(f"nadia{round_}", email=f"nadia{round_}@example.com")
        barrier = threading.Barrier(2)
        users: list = []
        refusals: list = []
        errors: list = []

        def sign_in(subject: str) -> None:
            try:
                barrier.wait(timeout=10)
                users.append(
                    services.user_from_identity_provider(
                        issuer=ISSUER, claims=claims(sub=subject, email=f"nadia{round_}@example.com")
                    ).pk
                )
            except SignInNeedsAdmin as exc:
                refusals.append(exc)
            except BaseException as exc:  # noqa: BLE001 — reported below
                errors.append(exc)
            finally:
                connection.close()

        threads = [threading.Thread(target=sign_in, args=(f"n{round_}-{i}",)) for i in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        assert not errors, errors
        assert users == [nadia.pk] and len(refusals) == 1
        assert nadia.idp_links.count() == 1
    assert User.objects.count() == 5


def test_first_sign_ins_of_one_subject_at_once_reach_the_linkable_user_they_link():
    nadia = User.objects.create_user("nadia", email="nadia@example.com")
    barrier = threading.Barrier(3)
    users: list = []
    errors: list = []

    def sign_in() -> None:
        try:
            barrier.wait(timeout=10)
            users.append(
                services.user_from_identity_provider(issuer=ISSUER, claims=claims(sub="n-1", email="nadia@example.com")).pk
            )
        except BaseException as exc:  # noqa: BLE001 — reported below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=sign_in) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert not errors, errors
    assert users == [nadia.pk] * 3 and IdentityProviderLink.objects.get().user == nadia
