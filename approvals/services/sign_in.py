"""Sign-in with the organisation's identity provider: the IdP's word about someone turned into a user.

The web views (mozilla-django-oidc under `channels_ext.web.sign_in`) verify the ID token and read the
userinfo; this module decides who that is (docs/approving.md §7, "Sign-in with your identity provider"):

1. the user already linked to the IdP's subject at that issuer (`sub` never changes; an email may);
2. else, if the IdP says the email is verified, the one local user with that very address — linked now,
   once — but only a user sign-in may stand for: active, not staff, not a superuser, no usable password,
   not linked to any subject yet. Anyone else with the address (or an address that merely compares equal
   to it in the database's case-insensitive comparison) is refused: `SignInNeedsAdmin`, an admin links;
3. else a new user, named after `preferred_username` (or the verified email) when that name is free.

That user's person in the people directory is theirs already, or (at the subject's first sign-in) the
person the directory has for the verified email (their chat identities with it: one person across Slack,
Feishu and the web), or a new one (`services.people.person_for_user`). With the groups claim mapped (the
IdP's group ids the operator lists, to the directory's group names), the person is a member of exactly
the listed groups the claim names; other groups are the admin's. Never staff, never superuser.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser
from django.db import IntegrityError, transaction
from django.utils import timezone

from approvals.errors import Conflict, InvalidInput, SignInNeedsAdmin
from approvals.models import IdentityProviderLink, PeopleGroup, Person
from approvals.services.people import person_for_user

logger = logging.getLogger(__name__)

_USERNAME = re.compile(r"^[\w.@+-]{1,150}$")  # Django's own username validator's alphabet
_NOT_USERNAME = re.compile(r"[^\w.@+-]")
MAX_GROUPS = 200  # a groups claim longer than this is refused rather than read


def _claim_text(claims: Mapping[str, Any], name: str, limit: int) -> str:
    value = claims.get(name)
    return value.strip()[:limit] if isinstance(value, str) else ""


def same_address(a: str, b: str) -> bool:
    """Whether two e-mail addresses are one: ASCII ones ignoring case (`Ines@Example.com`), any other only
    exactly. Not the database's case-insensitive match, which upper-cases `ı` and `ſ` into `I` and `S`:
    `mıa@example.com` is someone else's address than `mia@example.com`."""
    if a.isascii() and b.isascii():
        return a.lower() == b.lower()
    return a == b


def _free_username(claims: Mapping[str, Any], subject: str, *, email: str) -> str:
    User = get_user_model()
    for candidate in (_claim_text(claims, "preferred_username", 150), email[:150]):
        if candidate and _USERNAME.match(candidate) and not User.objects.filter(username__iexact=candidate).exists():
            return candidate
    return "idp-" + _NOT_USERNAME.sub("-", subject)[:140]


def groups_from_claim(claims: Mapping[str, Any], claim: str, group_ids: Mapping[str, str]) -> list[str]:
    """The directory's names of the groups whose ids (as the operator listed them in `group_ids`) the
    claim carries; values not listed are ignored — a group's name at the IdP is no id, as anyone there may
    make a group called `payments`. InvalidInput if the claim is not a list of strings (or one string)."""
    value = claims.get(claim, [])
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise InvalidInput(f"the identity provider's {claim!r} claim is not a list of group ids")
    if len(value) > MAX_GROUPS:
        raise InvalidInput(f"the identity provider's {claim!r} claim names more than {MAX_GROUPS} groups")
    return sorted({group_ids[item] for item in value if item in group_ids})


def person_groups_set(*, person: Person, names: list[str], managed: set[str]) -> None:
    """Make `person`'s membership of the `managed` groups exactly `names` (groups made if missing, in no
    team until an admin says); their other groups are left as they are."""
    person.groups.remove(*PeopleGroup.objects.filter(name__in=managed - set(names)))
    person.groups.add(*(PeopleGroup.objects.get_or_create(name=name)[0] for name in names))


def person_for_signed_in_user(*, user: AbstractBaseUser, email: str, email_verified: bool, first: bool) -> Person:
    """The user's person: theirs already, else (at the subject's `first` sign-in) the directory's person
    for their verified email if no user has it yet (one conditional UPDATE: never another user's
    person), else a new one."""
    person = Person.objects.filter(user=user).first()
    if person is None and first and email and email_verified:
        same = list(Person.objects.filter(email__iexact=email, user__isnull=True)[:2])
        if len(same) == 1 and same_address(same[0].email, email):
            Person.objects.filter(pk=same[0].pk, user__isnull=True).update(user=user)
            person = Person.objects.filter(user=user).first()
    return person if person is not None else person_for_user(user=user)


def user_from_identity_provider(
    *, issuer: str, claims: Mapping[str, Any], groups_claim: str = "", group_ids: Mapping[str, str] | None = None
) -> AbstractBaseUser:
    """The user the IdP's verified claims (`sub` required) are, linked to the subject, with their person
    and, when `groups_claim` and `group_ids` are given, their membership of the listed groups. Two first
    sign-ins of one subject at once make one user; of two subjects with one address, one is linked.
    SignInNeedsAdmin if the address is a user's whom only an admin may link (nothing is changed then)."""
    subject = _claim_text(claims, "sub", 255)
    if not subject:
        raise InvalidInput("the identity provider's answer has no subject (sub)")
    group_names = groups_from_claim(claims, groups_claim, group_ids) if groups_claim and group_ids else None
    email = _claim_text(claims, "email", 254)
    verified = claims.get("email_verified") is True
    try:
        with transaction.atomic():
            user, first = _linked_user(issuer=issuer, subject=subject, email=email, verified=verified, claims=claims)
    except IntegrityError:  # the same subject's first sign-in in another request won: use its user
        with transaction.atomic():
            user, first = _linked_user(issuer=issuer, subject=subject, email=email, verified=verified, claims=claims)
    person = person_for_signed_in_user(user=user, email=email, email_verified=verified, first=first)
    if group_names is not None and group_ids:
        person_groups_set(person=person, names=group_names, managed=set(group_ids.values()))
    return user


def _linked_user(
    *, issuer: str, subject: str, email: str, verified: bool, claims: Mapping[str, Any]
) -> tuple[AbstractBaseUser, bool]:
    """The subject's user, and whether it was linked just now."""
    User = get_user_model()
    now = timezone.now()

    def by_subject() -> AbstractBaseUser | None:
        link = IdentityProviderLink.objects.select_related("user").filter(issuer=issuer, subject=subject).first()
        if link is None:
            return None
        IdentityProviderLink.objects.filter(pk=link.pk).update(email=email, last_signed_in_at=now)
        return link.user

    user = by_subject()
    if user is not None:
        return user, False
    # Everyone the database's case-insensitive match says has the address, locked: a second subject
    # with the same address waits here, then finds the user linked.
    same_email = list(User.objects.select_for_update().filter(email__iexact=email).order_by("pk")[:2]) if email else []
    if same_email:
        user = by_subject()  # linked by the same subject's sign-in we waited for
        if user is not None:
            return user, False
        user = same_email[0]
        if not (verified and len(same_email) == 1 and same_address(user.email, email) and _linkable(user)):
            logger.warning(
                "sign-in refused: subject %r at %s has the e-mail of user #%s, whom only an admin may link",
                subject,
                issuer,
                user.pk,
            )
            raise SignInNeedsAdmin(
                f"Your account at the identity provider (subject {subject}) has the e-mail address of an "
                "account here that an administrator must link to it."
            )
    else:
        user = User.objects.create_user(
            username=_free_username(claims, subject, email=email if verified else ""),
            email=email if verified else "",  # an address the IdP did not check is nobody's
            first_name=_claim_text(claims, "given_name", 150) or _claim_text(claims, "name", 150),
            last_name=_claim_text(claims, "family_name", 150),
        )  # no usable password: this user signs in through the IdP only
    IdentityProviderLink.objects.create(user=user, issuer=issuer, subject=subject, email=email, last_signed_in_at=now)
    return user, True


def _linkable(user: AbstractBaseUser) -> bool:
    """A user sign-in may link by e-mail: one an admin made for the directory, never one who can do more
    than approve (staff, superuser), holds a password, or is someone's already."""
    return (
        user.is_active
        and not user.is_staff
        and not user.is_superuser
        and not user.has_usable_password()
        and not IdentityProviderLink.objects.filter(user=user).exists()
    )


def identity_provider_link_create(*, user: AbstractBaseUser, issuer: str, subject: str) -> IdentityProviderLink:
    """An admin's link: `subject` at `issuer` signs in as `user` from now on, whoever `user` is.
    Conflict if the subject is linked already."""
    try:
        with transaction.atomic():
            link = IdentityProviderLink.objects.create(user=user, issuer=issuer.strip(), subject=subject.strip())
    except IntegrityError:
        raise Conflict(f"subject {subject!r} at {issuer} is linked already") from None
    logger.info("subject %r at %s linked to user #%s by an admin", link.subject, link.issuer, user.pk)
    return link
