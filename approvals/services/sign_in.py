"""Sign-in with the organisation's identity provider: the IdP's word about someone turned into a user.

The web views (mozilla-django-oidc under `channels_ext.web.sign_in`) verify the ID token and read the
userinfo; this module decides who that is (docs/approving.md, "Sign-in with your identity provider"):

1. the user already linked to the IdP's subject (`sub` never changes; an email may);
2. else the one local user with the same email, if the IdP says the email is verified — linked now;
3. else a new user, named after `preferred_username` (or the email) when that name is free.

That user's person in the people directory is theirs already, or the person the directory has for the
verified email (their chat identities with it: one person across Slack, Feishu and the web), or a new
one (`services.people.person_for_user`). With a groups claim configured, the person's groups become
exactly the groups the claim names (made if missing, names as slugs): the IdP is the truth about them;
`group:NAME` approvers and a group's team follow. Never staff, never superuser: the admin grants those.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser
from django.db import IntegrityError, transaction
from django.utils import timezone
from django.utils.text import slugify

from approvals.errors import InvalidInput
from approvals.models import IdentityProviderLink, PeopleGroup, Person
from approvals.services.people import person_for_user

_USERNAME = re.compile(r"^[\w.@+-]{1,150}$")  # Django's own username validator's alphabet
_NOT_USERNAME = re.compile(r"[^\w.@+-]")
MAX_GROUPS = 200  # a groups claim longer than this is refused rather than turned into 10,000 rows


def _claim_text(claims: Mapping[str, Any], name: str, limit: int) -> str:
    value = claims.get(name)
    return value.strip()[:limit] if isinstance(value, str) else ""


def _free_username(claims: Mapping[str, Any], subject: str) -> str:
    User = get_user_model()
    for candidate in (_claim_text(claims, "preferred_username", 150), _claim_text(claims, "email", 150)):
        if candidate and _USERNAME.match(candidate) and not User.objects.filter(username__iexact=candidate).exists():
            return candidate
    return "idp-" + _NOT_USERNAME.sub("-", subject)[:140]


def groups_from_claim(claims: Mapping[str, Any], claim: str) -> list[str]:
    """The group names a claim carries (a list of names, or one name), as the directory's slugs
    (`Payments Approvers` is `payments-approvers`); InvalidInput if it is not that."""
    value = claims.get(claim, [])
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(name, str) for name in value):
        raise InvalidInput(f"the identity provider's {claim!r} claim is not a list of group names")
    if len(value) > MAX_GROUPS:
        raise InvalidInput(f"the identity provider's {claim!r} claim names more than {MAX_GROUPS} groups")
    return sorted({slug for slug in (slugify(name)[:64] for name in value) if slug})


def person_groups_set(*, person: Person, names: list[str]) -> None:
    """Make `person`'s groups exactly `names` (groups made if missing, in no team until an admin says)."""
    groups = [PeopleGroup.objects.get_or_create(name=name)[0] for name in names]
    person.groups.set(groups)


def person_for_signed_in_user(*, user: AbstractBaseUser, email: str, email_verified: bool) -> Person:
    """The user's person: theirs already, else the directory's person for their verified email if no
    user has it yet (one conditional UPDATE: never another user's person), else a new one."""
    person = Person.objects.filter(user=user).first()
    if person is None and email and email_verified:
        Person.objects.filter(email__iexact=email, user__isnull=True).update(user=user)
        person = Person.objects.filter(user=user).first()
    return person if person is not None else person_for_user(user=user)


def user_from_identity_provider(
    *, issuer: str, claims: Mapping[str, Any], groups_claim: str = ""
) -> AbstractBaseUser:
    """The user the IdP's verified claims (`sub` required) are, linked to the subject, with their person
    and, when `groups_claim` is given, the person's groups. Two first sign-ins of one subject at once
    make one user."""
    subject = _claim_text(claims, "sub", 255)
    if not subject:
        raise InvalidInput("the identity provider's answer has no subject (sub)")
    group_names = groups_from_claim(claims, groups_claim) if groups_claim else None
    email = _claim_text(claims, "email", 254)
    try:
        with transaction.atomic():
            user = _linked_user(issuer=issuer, subject=subject, email=email, claims=claims)
    except IntegrityError:  # the same subject's first sign-in in another request won: use its user
        with transaction.atomic():
            user = _linked_user(issuer=issuer, subject=subject, email=email, claims=claims)
    person = person_for_signed_in_user(user=user, email=email, email_verified=claims.get("email_verified") is True)
    if group_names is not None:
        person_groups_set(person=person, names=group_names)
    return user


def _linked_user(*, issuer: str, subject: str, email: str, claims: Mapping[str, Any]) -> AbstractBaseUser:
    User = get_user_model()
    now = timezone.now()
    link = IdentityProviderLink.objects.select_related("user").filter(issuer=issuer, subject=subject).first()
    if link is not None:
        IdentityProviderLink.objects.filter(pk=link.pk).update(email=email, last_signed_in_at=now)
        return link.user
    user = None
    if email and claims.get("email_verified") is True:
        same_email = list(User.objects.filter(email__iexact=email)[:2])
        if len(same_email) == 1:
            user = same_email[0]
    if user is None:
        user = User.objects.create_user(
            username=_free_username(claims, subject),
            email=email,
            first_name=_claim_text(claims, "given_name", 150) or _claim_text(claims, "name", 150),
            last_name=_claim_text(claims, "family_name", 150),
        )  # no usable password: this user signs in through the IdP only
    IdentityProviderLink.objects.create(user=user, issuer=issuer, subject=subject, email=email, last_signed_in_at=now)
    return user
