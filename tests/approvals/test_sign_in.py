"""Who someone signing in through the identity provider is (`services.user_from_identity_provider`,
docs/approving.md §6), on the real database: the claims as the verified ID token and userinfo give them."""

from __future__ import annotations

import threading

import pytest
from django.contrib.auth.models import User
from django.db import connection

from approvals import services
from approvals.errors import InvalidInput
from approvals.models import IdentityProviderLink, PeopleGroup, Person

pytestmark = pytest.mark.django_db(transaction=True)

ISSUER = "https://login.example.com"


def claims(sub: str = "a1b2", **more) -> dict:
    return {"sub": sub, "email": "ines@example.com", "email_verified": True, "preferred_username": "ines", **more}


def test_group_names_become_the_directorys_slugs():
    user = services.user_from_identity_provider(
        issuer=ISSUER, claims=claims(groups=["Payments Approvers", "research", " ", "Research"]), groups_claim="groups"
    )
    assert sorted(user.person.groups.values_list("name", flat=True)) == ["payments-approvers", "research"]


def test_a_groups_claim_that_is_not_a_list_of_names_signs_nobody_in_and_changes_nothing():
    for bad in ({"admins": True}, [1, 2], 7):
        with pytest.raises(InvalidInput, match="'groups' claim is not a list of group names"):
            services.user_from_identity_provider(issuer=ISSUER, claims=claims(groups=bad), groups_claim="groups")
    assert not User.objects.exists() and not PeopleGroup.objects.exists() and not IdentityProviderLink.objects.exists()


def test_no_subject_is_refused():
    with pytest.raises(InvalidInput, match="no subject"):
        services.user_from_identity_provider(issuer=ISSUER, claims=claims(sub=""))
    assert not User.objects.exists()


def test_an_unverified_email_never_takes_over_a_local_account_or_a_directory_person():
    local = User.objects.create_user("ines", email="ines@example.com")
    known = Person.objects.create(display_name="Ines", email="ines@example.com")

    user = services.user_from_identity_provider(issuer=ISSUER, claims=claims(email_verified=False))

    assert user != local and user.username == "ines@example.com"  # "ines" is taken: the email names the new user
    known.refresh_from_db()
    assert known.user is None and user.person != known


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
                        issuer=ISSUER, claims=claims(sub=f"s-{round_}", email=f"p{round_}@example.com"), groups_claim="groups"
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
