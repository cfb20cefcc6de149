"""People and teams (docs/approving.md, "People", "Teams", "Sign-in"): who sees and decides what, the
people who approve under whichever identities, their groups and stand-ins, and the links that tie a
chat identity or an identity provider's subject to them."""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models
from django.db.models import F, Q
from django.db.models.functions import Lower

# The team every agent and channel belongs to unless the config file names another: a single-team
# install needs no configuration (docs/approving.md, "Teams").
DEFAULT_TEAM = "default"


class Team(models.Model):
    """Who sees and decides what: agents, channels and groups belong to one team, and a person sees and
    decides only the requests of their teams' agents, on the page, in the inbox and in the admin
    (superusers: all). A user is a member directly, through a group of the team (`PeopleGroup.team`:
    the identity provider's groups claim fills the groups), or — on a team open to everyone, as the
    default team starts — by signing in."""

    name = models.SlugField(max_length=64, unique=True)
    everyone = models.BooleanField(
        default=False,
        help_text="Every signed-in user is a member (the default team of a single-team install starts so).",
    )
    members = models.ManyToManyField(settings.AUTH_USER_MODEL, blank=True, related_name="gateway_teams")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class IdentityProviderLink(models.Model):
    """A user signed in through the organisation's identity provider (OpenID Connect): the IdP's
    subject, which never changes, not the email, which may (docs/approving.md, "Sign-in")."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="idp_links")
    issuer = models.CharField(max_length=500)
    subject = models.CharField(max_length=255)
    email = models.EmailField(blank=True, help_text="As the identity provider last said.")
    created_at = models.DateTimeField(auto_now_add=True)
    last_signed_in_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name = "identity provider link"
        constraints = [models.UniqueConstraint(fields=["issuer", "subject"], name="uniq_idp_subject")]

    def __str__(self) -> str:
        return f"{self.subject} @ {self.issuer}"


def default_team_id() -> int:
    """The default team's id (made on first use, open to everyone): what a new agent or channel gets."""
    team, _ = Team.objects.get_or_create(name=DEFAULT_TEAM, defaults={"everyone": True})
    return team.pk


# --------------------------------------------------------------------------- people (docs/approving.md, "People")


class Person(models.Model):
    """Someone who approves, whichever identities they answer under: a Django user, chat ids, an e-mail.

    Its key everywhere a quorum counts people is `person:<id>` (`selectors.person_of`).
    """

    display_name = models.CharField(max_length=200)
    email = models.EmailField(blank=True, help_text="Used to find the person's chat accounts and for `person:EMAIL`.")
    active = models.BooleanField(default=True, help_text="An inactive person is not routed requests and names no one.")
    user = models.OneToOneField(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="person",
        help_text="Their Django user: the approval page and the admin.",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["display_name"]
        verbose_name_plural = "people"
        constraints = [
            # one person per address, whatever its case (`person:EMAIL` names exactly one)
            models.UniqueConstraint(Lower("email"), condition=~Q(email=""), name="uniq_person_email")
        ]

    def __str__(self) -> str:
        return f"{self.display_name} <{self.email}>" if self.email else self.display_name

    @property
    def key(self) -> str:
        return f"person:{self.pk}"


class IdentitySource(models.TextChoices):
    ADMIN = "admin"  # typed in the Django admin
    EMAIL_LOOKUP = "email_lookup"  # found by the person's e-mail through a vendor's API
    SELF_LINK = "self_link"  # the person opened a one-time link posted to them in the chat


class PersonIdentity(models.Model):
    """A chat identity of a person, channel-qualified as clicks are recorded: `slack:U0ALICE`,
    `feishu:ou_…`, `teams:…`, `dingtalk:…`, `telegram:…`, `email:alice@example.com`. Belongs to one person."""

    person = models.ForeignKey(Person, on_delete=models.CASCADE, related_name="identities")
    identity = models.CharField(max_length=200, unique=True)
    source = models.CharField(max_length=16, choices=IdentitySource.choices, default=IdentitySource.ADMIN)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["identity"]
        verbose_name_plural = "person identities"

    def __str__(self) -> str:
        return self.identity


class PeopleGroup(models.Model):
    """A named set of people: `group:NAME` in a gate's `approvers`."""

    name = models.SlugField(max_length=64, unique=True)
    description = models.CharField(max_length=200, blank=True)
    members = models.ManyToManyField(Person, related_name="groups", blank=True)
    team = models.ForeignKey(
        Team,
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="groups",
        help_text="Its members are members of this team (docs/approving.md, \"Teams\"); empty: of none.",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]
        verbose_name = "group"

    def __str__(self) -> str:
        return self.name


class StandIn(models.Model):
    """`delegate` stands in for `person` from `starts_at` to `ends_at` (out of office): requests routed
    to `person` while the window is open reach the delegate too, and their answer is recorded as
    given on `person`'s behalf."""

    person = models.ForeignKey(Person, on_delete=models.CASCADE, related_name="stand_ins")
    delegate = models.ForeignKey(Person, on_delete=models.CASCADE, related_name="standing_in_for")
    starts_at = models.DateTimeField()
    ends_at = models.DateTimeField()
    note = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-starts_at"]
        indexes = [models.Index(fields=["person", "ends_at"], name="standin_person_ends")]
        constraints = [
            models.CheckConstraint(condition=Q(ends_at__gt=F("starts_at")), name="standin_window"),
            models.CheckConstraint(condition=~Q(delegate=F("person")), name="standin_not_self"),
        ]

    def __str__(self) -> str:
        return f"{self.delegate} for {self.person}"


class LinkToken(models.Model):
    """A one-time link that ties a chat identity to a person: posted to that identity in the chat,
    opened by the person signed in on the web (`services.person_link_redeem`). Used once, then dead."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    person = models.ForeignKey(Person, on_delete=models.CASCADE, related_name="link_tokens")
    identity = models.CharField(max_length=200)
    expires_at = models.DateTimeField()
    used_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
