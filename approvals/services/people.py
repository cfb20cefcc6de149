"""The people directory (docs/approving.md, "People"): chat identities linked to people — found by
e-mail through the vendors' own APIs, or linked by the person themselves through a one-time link
posted to them in the chat.

Who is whom is read by `approvals.selectors.person_of`; this module only writes links.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import math

from django.conf import settings
from django.contrib.auth.base_user import AbstractBaseUser
from django.core import signing
from django.db import IntegrityError, transaction
from django.urls import reverse
from django.utils import timezone

from approvals import selectors
from approvals.selectors import people_teams, standing
from approvals.errors import Conflict, InvalidInput, NotFound, RateLimited
from approvals.models import Channel, IdentitySource, LinkToken, Person, PersonIdentity, StandIn
from gateway_contract import CHANNEL_KINDS, ChannelError
from hooks import state as hook_state

# A self-link lives this long: long enough to switch to the chat and back, short enough to be useless later.
LINK_TOKEN_MINUTES = 15
_LINK_SALT = "approvals.people.link"
# Each one-time link is a message the gateway posts to an account the user names: a signed-in user may ask
# for this many per window. Counted in the durable counters the `rate_limit` hook uses (`hooks.state`: one
# statement, exact under concurrency, shared by every server process, purged by beat), under no agent.
LINK_OFFERS_PER_WINDOW = 5
LINK_OFFER_WINDOW_SECONDS = 600
_LINK_OFFER_SCOPE = "people:link_offer"
# Identities that are a Django user (`Person.user`), never a linked chat identity.
_USER_KINDS = frozenset({"web", "admin"})


@dataclasses.dataclass
class LinkResult:
    """What `person_link_by_email` did: the identities it linked, and why others were not."""

    linked: list[str] = dataclasses.field(default_factory=list)
    problems: list[str] = dataclasses.field(default_factory=list)


def identity_problem(identity: str) -> str | None:
    """Why `identity` cannot be a person's linked chat identity; None if it can."""
    kind, sep, native = identity.partition(":")
    if not sep or not native.strip():
        return "An identity is channel-qualified: kind:id, e.g. slack:U0ALICE or feishu:ou_…"
    if kind in _USER_KINDS:
        return f"{kind}: identities are the person's Django user (set it on the person), not a chat identity"
    if kind not in CHANNEL_KINDS:
        known = ", ".join(sorted(set(CHANNEL_KINDS) - _USER_KINDS))
        return f"Unknown channel kind {kind!r}; one of: {known}"
    if len(identity) > 200 or any(ch.isspace() for ch in identity):
        return "An identity has no spaces and at most 200 characters"
    return None


def identity_conflict(*, person_id: int | None, identity: str) -> str | None:
    """Why `identity` cannot be linked to the person `person_id`: an `email:` identity whose address is
    another person's own e-mail would make the address two people (`selectors.person_of` reads the link,
    `owner_of` the address), and a click from it could approve that person's call. None if it can."""
    kind, _, address = identity.partition(":")
    if kind != "email":
        return None
    other = Person.objects.filter(email__iexact=address).exclude(pk=person_id).first()
    return None if other is None else f"{identity} is the e-mail of {other}: an address names one person."


def email_conflict(*, person_id: int | None, email: str) -> str | None:
    """Why the person `person_id` cannot have the e-mail `email`: it is linked to another person as an
    `email:` identity (`identity_conflict`, the other way round). None if they can."""
    if not email:
        return None
    link = PersonIdentity.objects.filter(identity__iexact=f"email:{email}").exclude(person_id=person_id).select_related("person").first()
    return None if link is None else f"{email} is linked to {link.person} as {link.identity}: an address names one person."


def person_identity_link(*, person_id: int, identity: str, source: str = IdentitySource.ADMIN) -> bool:
    """Link `identity` to the person: True if linked now, False if it already was theirs;
    `Conflict` if it is another person's (or, for an `email:` identity, another person's address),
    `InvalidInput` if it is not a chat identity."""
    if (problem := identity_problem(identity)) is not None:
        raise InvalidInput(problem)
    if (conflict := identity_conflict(person_id=person_id, identity=identity)) is not None:
        raise Conflict(conflict)
    try:
        with transaction.atomic():
            PersonIdentity.objects.create(person_id=person_id, identity=identity, source=source)
        return True
    except IntegrityError:  # unique identity: someone's already (a concurrent link of the same one loses here)
        owner = PersonIdentity.objects.select_related("person").get(identity=identity).person
        if owner.pk == person_id:
            return False
        raise Conflict(f"{identity} is already linked to {owner}") from None


def person_link_by_email(*, person_id: int, within_teams: frozenset[int] | None = None) -> LinkResult:
    """Ask every configured channel whose vendor can find an account by e-mail (Slack's
    `users.lookupByEmail`, Feishu's `contact.v3.user.batch_get_id`) for the person's account, and link
    what is found. A vendor's failure is reported, never half-applied. `within_teams` (a team's staff
    asking): an account another team's gates name as a channel id is reported, not linked."""
    person = Person.objects.filter(pk=person_id).first()
    if person is None:
        raise NotFound("no such person")
    result = LinkResult()
    if not person.email:
        result.problems.append("has no e-mail to look up")
        return result
    for channel in Channel.objects.order_by("name"):
        adapter = selectors.channel_adapter(channel)
        if not adapter.finds_people_by_email:
            continue
        try:
            native = adapter.find_user_by_email(person.email)
        except ChannelError as exc:
            result.problems.append(f"{channel.name}: {exc}")
            continue
        if not native:
            continue
        identity = f"{channel.kind}:{native}"
        if within_teams is not None and people_teams.identity_teams(identity) - within_teams:
            result.problems.append(f"{channel.name}: {identity} is an approver of a team you do not administer; a superuser can link it")
            continue
        try:
            if person_identity_link(person_id=person.pk, identity=identity, source=IdentitySource.EMAIL_LOOKUP):
                result.linked.append(identity)
        except (Conflict, InvalidInput) as exc:
            result.problems.append(f"{channel.name}: {exc.message}")
    return result


def person_for_user(*, user: AbstractBaseUser) -> Person:
    """The signed-in user's person, made for them if they have none (named after them; their e-mail
    only if no other person has it: an address names one person)."""
    existing = Person.objects.filter(user=user).first()
    if existing is not None:
        return existing
    email = getattr(user, "email", "") or ""
    if email and Person.objects.filter(email__iexact=email).exists():
        email = ""
    name = (getattr(user, "get_full_name", lambda: "")() or user.get_username()).strip()
    try:
        with transaction.atomic():
            return Person.objects.create(display_name=name, email=email, user=user)
    except IntegrityError:  # made by a concurrent request of the same user a moment ago
        return Person.objects.get(user=user)


def person_link_offer(*, user: AbstractBaseUser, channel_name: str, account: str) -> str:
    """Post a one-time link to `account` on `channel_name` that, opened by `user` signed in, links that
    account to `user`'s person. Returns the identity it will link. Nothing is linked yet: only someone
    who can read that account's messages and is signed in as `user` can finish it.

    RateLimited past LINK_OFFERS_PER_WINDOW asks in LINK_OFFER_WINDOW_SECONDS by the same user (every ask
    counts, refused ones too: an ask that learns an account is someone else's is an ask)."""
    now = timezone.now()
    window_end = hook_state.take_in_window(
        agent="", scope=_LINK_OFFER_SCOPE, key=f"user:{user.pk}", limit=LINK_OFFERS_PER_WINDOW,
        window_seconds=LINK_OFFER_WINDOW_SECONDS, now=now,
    )  # fmt: skip
    if window_end is not None:
        wait = max(1, math.ceil((window_end - now).total_seconds()))
        raise RateLimited(
            f"Too many links asked for: at most {LINK_OFFERS_PER_WINDOW} every {LINK_OFFER_WINDOW_SECONDS // 60} "
            f"minutes. Try again in {math.ceil(wait / 60)} minute{'s' if wait > 60 else ''}.",
            retry_after=wait,
        )
    channel = Channel.objects.filter(name=channel_name).first()
    if channel is None:
        raise InvalidInput(f"no channel named {channel_name!r}")
    account = account.strip()
    identity = f"{channel.kind}:{account}"
    if (problem := identity_problem(identity)) is not None:
        raise InvalidInput(problem)
    adapter = selectors.channel_adapter(channel)
    if not adapter.sends_direct_messages:
        raise InvalidInput(f"{channel.kind} channels cannot send a person a link; ask an admin to link {identity}")
    person = person_for_user(user=user)
    linked = PersonIdentity.objects.filter(identity=identity).values_list("person_id", flat=True).first()
    if linked is not None and linked != person.pk:
        raise Conflict(f"{identity} is already linked to someone else; ask an admin")
    token = LinkToken.objects.create(
        person=person, identity=identity, expires_at=timezone.now() + dt.timedelta(minutes=LINK_TOKEN_MINUTES)
    )
    url = settings.GATEWAY_PUBLIC_URL + reverse("people-link-finish", args=[signing.dumps(str(token.pk), salt=_LINK_SALT)])
    text = (
        f"Someone signed in to the approval gateway as {user.get_username()} asked to link this account to them. "
        f"If that is you, open {url} while signed in (valid {LINK_TOKEN_MINUTES} minutes, once). If not, ignore this."
    )
    adapter.send_direct(account, text)  # ChannelError: the caller says it could not be sent
    return identity


def person_link_redeem(*, user: AbstractBaseUser, signed: str) -> str:
    """Finish a self-link: the token must be one this gateway signed, unused, unexpired, and made for
    `user`'s person. Used once (a conditional UPDATE), then dead. Returns the identity linked."""
    try:
        token_id = signing.loads(signed, salt=_LINK_SALT, max_age=dt.timedelta(minutes=LINK_TOKEN_MINUTES))
    except signing.BadSignature:
        raise InvalidInput("This link is not one this gateway made, or it has expired.") from None
    now = timezone.now()
    with transaction.atomic():
        token = LinkToken.objects.select_related("person").filter(pk=token_id, person__user=user).first()
        if token is None:
            raise InvalidInput("This link was made for someone else: open it signed in as the person who asked for it.")
        used = LinkToken.objects.filter(pk=token.pk, used_at__isnull=True, expires_at__gt=now).update(used_at=now)
        if not used:
            raise InvalidInput("This link was used already or has expired; ask for a new one.")
        person_identity_link(person_id=token.person_id, identity=token.identity, source=IdentitySource.SELF_LINK)
    return token.identity


def stand_in_team_problem(*, person: Person, delegate: Person) -> str | None:
    """Why `delegate` may not stand in for `person`: a stand-in is in one of the closed teams of the person
    they stand in for (a person in none — a single-team install — may name anyone). None if they may."""
    teams = standing.closed_teams_of(person.pk)
    if not teams.exists() or teams.filter(pk__in=standing.closed_teams_of(delegate.pk).values("pk")).exists():
        return None
    return (
        f"{delegate.display_name} is in none of the teams of {person.display_name} ({', '.join(standing.team_names(teams))}): "
        "a stand-in must be in the same team as the person they stand in for."
    )


def stand_in_name(
    *, user: AbstractBaseUser, delegate_email: str, starts_at: dt.datetime, ends_at: dt.datetime, note: str = ""
) -> StandIn:
    """The signed-in user names a stand-in for a window (out of office): requests routed to them while it
    is open reach the delegate too (docs/approving.md, "Stand-ins"). `InvalidInput` says why not."""
    person = person_for_user(user=user)
    delegate = Person.objects.filter(email__iexact=delegate_email.strip(), active=True).first()
    if delegate is None:
        raise InvalidInput(f"Nobody active in the directory has the e-mail {delegate_email.strip()!r}.")
    if delegate.pk == person.pk:
        raise InvalidInput("You cannot stand in for yourself.")
    if ends_at <= starts_at:
        raise InvalidInput("The window must end after it starts.")
    if ends_at <= timezone.now():
        raise InvalidInput("The window has already ended.")
    if (problem := stand_in_team_problem(person=person, delegate=delegate)) is not None:
        raise InvalidInput(problem)
    return StandIn.objects.create(person=person, delegate=delegate, starts_at=starts_at, ends_at=ends_at, note=note[:200])


def stand_in_end(*, user: AbstractBaseUser, stand_in_id: int) -> tuple[StandIn, bool]:
    """The signed-in user ends a stand-in they named, now: (it, whether this ended it — False if it had
    ended already). A window that has not started is removed. Takes effect on requests routed to the
    stand-in already (`approvals.selectors.standing`). `NotFound` unless it is theirs."""
    row = StandIn.objects.select_related("delegate").filter(pk=stand_in_id, person__user=user).first()
    if row is None:
        raise NotFound("no stand-in of yours with that id")
    now = timezone.now()
    # Each a conditional statement: a concurrent end, or an end racing the window's start, ends it once.
    if StandIn.objects.filter(pk=row.pk, starts_at__gte=now).delete()[0]:
        return row, True
    ended = StandIn.objects.filter(pk=row.pk, starts_at__lt=now, ends_at__gt=now).update(ends_at=now)
    return row, bool(ended)
