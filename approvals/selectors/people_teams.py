"""Which teams a person or a group of the people directory belongs to, so that a team's staff administer
only their own (docs/approving.md, "Teams": "People and groups"). Reads only.

A person's teams are every team whose approvals they take part in or could change:

- the team of each group they are in (a group of no team is everyone's: its people are *shared*);
- the teams their Django user is a member of directly (*Teams → members*);
- the team of every agent whose approval gates route to them: `person:EMAIL`, a `group:` they are in,
  a channel id linked to them (their identity on that channel's kind, their username on a web channel,
  their address on an e-mail channel);
- for a stand-in whose window has not ended, the teams of the person they stand in for.

A group's teams are its own team and the teams of the agents whose gates name it (`group:NAME`).
Staff administer a person or a group only when it has a team and every one of its teams is theirs;
superusers administer all. A person or group with no team, or shared, is the superusers'.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from django.contrib.auth import get_user_model
from django.db.models import Q, QuerySet
from django.utils import timezone

from approvals.models import Agent, Channel, PeopleGroup, Person, PersonIdentity, StandIn, Team
from approvals.selectors.agents import agent_hooks
from approvals.selectors.teams import in_teams, team_ids_of

# A person's or a group's teams: a set of team ids, or None when shared (a group of no team).
Teams = frozenset[int] | None


@dataclasses.dataclass
class GateRoutes:
    """Whom the approval gates of each team's agents name: `group:` names, `person:` addresses, and
    channel ids as the identity they would be linked as (`slack:U0…`, `web:<username>`, `email:<address>`)."""

    groups: dict[str, set[int]] = dataclasses.field(default_factory=lambda: defaultdict(set))
    emails: dict[str, set[int]] = dataclasses.field(default_factory=lambda: defaultdict(set))
    identities: dict[str, set[int]] = dataclasses.field(default_factory=lambda: defaultdict(set))

    def add(self, team_id: int, kind: str, entry: str) -> None:
        prefix, _, name = entry.partition(":")
        if prefix == "group":
            self.groups[name].add(team_id)
        elif prefix == "person":
            self.emails[name.lower()].add(team_id)
        elif kind:
            self.identities[_identity_key(f"{kind}:{entry}")].add(team_id)

    def of_identity(self, identity: str) -> set[int]:
        return self.identities.get(_identity_key(identity), set())


def _identity_key(identity: str) -> str:
    return identity.lower() if identity.startswith("email:") else identity  # an address is found in any case


def gate_routes() -> GateRoutes:
    """What every agent's current approval gates name, by the agent's team (their escalation lists too)."""
    kinds = dict(Channel.objects.values_list("name", "kind"))
    routes = GateRoutes()
    for agent in Agent.objects.all():
        _, hooks = agent_hooks(agent=agent)
        for hook in hooks:
            spec = hook.ask_spec("") if hook.can_ask else None
            if spec is None:
                continue
            for channel, entries in ((spec.channel, spec.approvers), (spec.escalate_channel, spec.escalate_approvers)):
                for entry in entries:
                    routes.add(agent.team_id, kinds.get(channel or "", ""), entry)
    return routes


@dataclasses.dataclass(frozen=True)
class PersonState:
    """What a person's teams follow from: as stored, or as a form is about to save it."""

    person_id: int | None
    email: str
    user_id: int | None
    identities: tuple[str, ...]
    group_ids: tuple[int, ...]


def _own_teams(state: PersonState, routes: GateRoutes, *, groups: list[tuple[int | None, str]],
               user_teams: set[int], username: str) -> set[int] | None:  # fmt: skip
    """The teams of a person from their own rows (not as a stand-in); None: shared."""
    teams: set[int] = set()
    for team_id, name in groups:
        if team_id is None:
            return None
        teams |= {team_id, *routes.groups.get(name, ())}
    teams |= user_teams
    if username:
        teams |= routes.of_identity(f"web:{username}")
    if state.email:
        teams |= routes.emails.get(state.email.lower(), set()) | routes.of_identity(f"email:{state.email}")
    for identity in state.identities:
        teams |= routes.of_identity(identity)
    return teams


def people_teams(*, changed: PersonState | None = None) -> dict[int | None, Teams]:
    """Every person's teams (`changed`: one person as a form would leave them; id None for a new one).
    An empty set is a person of no team."""
    routes = gate_routes()
    people = {pk: (email, user_id, username) for pk, email, user_id, username in
              Person.objects.values_list("pk", "email", "user_id", "user__username")}  # fmt: skip
    groups: dict[int, list[tuple[int | None, str]]] = defaultdict(list)
    for person_id, team_id, name in PeopleGroup.members.through.objects.values_list("person_id", "peoplegroup__team_id", "peoplegroup__name"):
        groups[person_id].append((team_id, name))
    identities: dict[int, list[str]] = defaultdict(list)
    for person_id, identity in PersonIdentity.objects.values_list("person_id", "identity"):
        identities[person_id].append(identity)
    user_teams: dict[int, set[int]] = defaultdict(set)
    for user_id, team_id in Team.members.through.objects.values_list("user_id", "team_id"):
        user_teams[user_id].add(team_id)
    states = {pk: PersonState(pk, email, user_id, tuple(identities[pk]), ()) for pk, (email, user_id, _) in people.items()}
    usernames = {pk: username or "" for pk, (_, _, username) in people.items()}
    if changed is not None:
        states[changed.person_id] = changed  # type: ignore[index]
        groups[changed.person_id] = list(PeopleGroup.objects.filter(pk__in=changed.group_ids).values_list("team_id", "name"))  # type: ignore[index]
        usernames[changed.person_id] = (  # type: ignore[index]
            get_user_model().objects.filter(pk=changed.user_id).values_list("username", flat=True).first() or ""
        )
    own = {
        pk: _own_teams(state, routes, groups=groups[pk], user_teams=user_teams[state.user_id] if state.user_id else set(),  # type: ignore[index]
                       username=usernames[pk])  # fmt: skip
        for pk, state in states.items()
    }
    teams: dict[int | None, Teams] = {pk: None if t is None else frozenset(t) for pk, t in own.items()}
    for person_id, delegate_id in StandIn.objects.filter(ends_at__gt=timezone.now()).values_list("person_id", "delegate_id"):
        of_person, of_delegate = own.get(person_id), teams.get(delegate_id, frozenset())
        teams[delegate_id] = None if of_person is None or of_delegate is None else of_delegate | of_person
    return teams


def group_teams(*, team_id: int | None, name: str, routes: GateRoutes | None = None) -> Teams:
    """A group's teams (None: a group of no team, shared)."""
    if team_id is None:
        return None
    return frozenset({team_id, *(routes or gate_routes()).groups.get(name, ())})


def administers(user: Any, teams: Teams) -> bool:
    """Whether `user` administers a row of these teams: a superuser any; staff one of their teams only."""
    mine = team_ids_of(user)
    return mine is None or (teams is not None and bool(teams) and teams <= mine)


def foreign_teams(user: Any, teams: Teams) -> frozenset[int] | None:
    """The teams a change would bring a row into that `user` does not administer (empty: none;
    None: it would be shared, the superusers')."""
    mine = team_ids_of(user)
    if mine is None:
        return frozenset()
    return None if teams is None else teams - mine


def people_administered(user: Any, queryset: QuerySet[Person] | None = None) -> QuerySet[Person]:
    """The people `user` administers (`queryset` narrowed to them)."""
    queryset = Person.objects.all() if queryset is None else queryset
    if team_ids_of(user) is None:
        return queryset
    return queryset.filter(pk__in=[pk for pk, teams in people_teams().items() if administers(user, teams)])


def groups_administered(user: Any, queryset: QuerySet[PeopleGroup] | None = None) -> QuerySet[PeopleGroup]:
    """The groups `user` administers (`queryset` narrowed to them)."""
    queryset = PeopleGroup.objects.all() if queryset is None else queryset
    mine = team_ids_of(user)
    if mine is None:
        return queryset
    routes = gate_routes()
    candidates = PeopleGroup.objects.filter(team__in=mine).values_list("pk", "team_id", "name")
    return queryset.filter(pk__in=[pk for pk, team, name in candidates if administers(user, group_teams(team_id=team, name=name, routes=routes))])


def stand_ins_administered(user: Any, queryset: QuerySet[StandIn]) -> QuerySet[StandIn]:
    """The stand-ins whose person and delegate `user` both administers."""
    if team_ids_of(user) is None:
        return queryset
    people = [pk for pk, teams in people_teams().items() if administers(user, teams)]
    return queryset.filter(person__in=people, delegate__in=people)


def users_linkable(user: Any, *, person_id: int | None) -> QuerySet:
    """The Django users `user` may make a person's user: for staff, no superuser, nobody with another
    person, nobody a direct member of a team not theirs, nobody another team's gates name by username."""
    users = get_user_model().objects.all()
    mine = team_ids_of(user)
    if mine is None:
        return users
    named_elsewhere = [
        identity.removeprefix("web:") for identity, teams in gate_routes().identities.items()
        if identity.startswith("web:") and not teams <= mine
    ]  # fmt: skip
    return (
        users.filter(is_superuser=False)
        .filter(Q(person__isnull=True) | Q(person__pk=person_id))
        .exclude(gateway_teams__in=Team.objects.exclude(pk__in=mine))
        .exclude(username__in=named_elsewhere)
    )


def identity_teams(identity: str) -> frozenset[int]:
    """The teams whose gates name this chat identity as a channel id."""
    return frozenset(gate_routes().of_identity(identity))


def person_state(person: Person | None, **changes: Any) -> PersonState:
    """A person's state as stored (none for a new one), with `changes` (email, user_id, identities, group_ids)."""
    stored = PersonState(None, "", None, (), ())
    if person is not None and person.pk is not None:
        stored = PersonState(
            person.pk,
            person.email,
            person.user_id,
            tuple(PersonIdentity.objects.filter(person_id=person.pk).values_list("identity", flat=True)),
            tuple(PeopleGroup.objects.filter(members=person.pk).values_list("pk", flat=True)),
        )
    fields = {k: tuple(v) if isinstance(v, Iterable) and not isinstance(v, str) else v for k, v in changes.items()}
    return dataclasses.replace(stored, **fields)


def _of_team(person: Person, team: Team) -> bool:
    """Whether `person` is one of `team`'s people: in a group of it, or their user a member of it."""
    if person.groups.filter(team=team).exists():
        return True
    return person.user is not None and in_teams(person.user, team.pk)


def _linked_person(kind: str, native: str) -> Person | None:
    """The person a channel id of `kind` is linked to (a username on the web, an address by e-mail)."""
    if kind == "web":
        return Person.objects.filter(user__username=native).select_related("user").first()
    linked = Person.objects.filter(identities__identity=_identity_key(f"{kind}:{native}")).select_related("user").first()
    if linked is None and kind == "email":
        linked = Person.objects.filter(email__iexact=native).select_related("user").first()
    return linked


def strangers(team: Team, *, kind: str, entries: Iterable[str]) -> list[str]:
    """The approver entries, on a channel of `kind`, that name someone who is not of `team`: a group of
    another team or of none, a `person:` who is not of it (or nobody), a channel id linked to a person —
    or on the web a user — who is not of it. A chat id linked to nobody is whoever is in that team's
    chat. A team open to everyone has everyone: [] (docs/asking.md, "Who is asked")."""
    if team.everyone:
        return []
    found = []
    for entry in entries:
        prefix, _, name = entry.partition(":")
        if prefix == "group":
            mine = PeopleGroup.objects.filter(name=name, team=team).exists()
        elif prefix == "person":
            person = Person.objects.filter(email__iexact=name).select_related("user").first()
            mine = person is not None and _of_team(person, team)
        else:
            person = _linked_person(kind, entry)
            user = get_user_model().objects.filter(username=entry).first() if kind == "web" and person is None else None
            mine = (person is None or _of_team(person, team)) and (user is None or in_teams(user, team.pk))
        if not mine:
            found.append(entry)
    return found
