"""The people directory as it is now, for the moment of a decision (docs/approving.md, "People, groups,
stand-ins").

A request keeps who it was routed to (`approver_people`); whether each of them still decides it is read
here, at the click, inside its transaction: a person deactivated or taken out of the group that named
them, a stand-in removed, ended, moved or no longer of the team of the person they stand in for, no
longer decides. One statement per question, whatever the size of the group; `approvals.selectors.people`
asks, and remembers the answers for a click or a page (`people_memo`). Models only: below the other selectors.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Callable
from typing import Any

from django.db import connection
from django.db.models import BooleanField, Exists, OuterRef, Q, QuerySet, Value
from django.db.models.expressions import RawSQL
from django.utils import timezone

from approvals.models import PeopleGroup, Person, StandIn, Team

OWN_STAND_IN = "You stand in for {}, for whom this call was made: a stand-in cannot approve it either."
DEACTIVATED = "You were deactivated in the people directory, so requests routed to you are no longer yours to decide."
# Approver entries that name people rather than a channel-native id (docs/approving.md, "People").
PEOPLE_PREFIXES = ("group:", "person:")


@dataclasses.dataclass(frozen=True)
class Named:
    """A person a request was routed to by name, as the directory says now."""

    active: bool
    in_groups: bool  # a member of one of the groups that routed the request
    email: str


@dataclasses.dataclass(frozen=True)
class Standing:
    """A stand-in of one person, as the directory says now: their windows (none: removed), whether the
    stand-in and the person are active, whether the person is still in the groups that routed the
    request, and whether the two share a closed team (True when the person is in none)."""

    windows: tuple[tuple[dt.datetime, dt.datetime], ...]
    delegate_active: bool
    person: Named
    same_team: bool


def _in_groups(person: OuterRef | int, groups: tuple[str, ...]) -> Exists | Value:
    if not groups:
        return Value(False)
    return Exists(PeopleGroup.objects.filter(members=person, name__in=groups))


def closed_teams_of(person_id: int) -> QuerySet[Team]:
    """The teams not open to everyone that a person is a member of: by their Django user, or as an active
    member of one of the team's groups (as `selectors.team_ids_of` counts a user's teams)."""
    by_user = Team.members.through.objects.filter(user__person=person_id).values("team_id")
    by_group = PeopleGroup.objects.filter(members=person_id, members__active=True).values("team_id")
    return Team.objects.filter(everyone=False).filter(Q(pk__in=by_user) | Q(pk__in=by_group))


def _closed_teams_sql(column: str, alias: str) -> str:
    """`closed_teams_of` for the person in `column` of the outer query, as SQL: semi-joins the planner
    plans in no time (the ORM's OR over two many-to-many joins took milliseconds to plan)."""
    table = {m: connection.ops.quote_name(m._meta.db_table) for m in (Team, Team.members.through, Person, PeopleGroup)}
    members = connection.ops.quote_name(PeopleGroup.members.through._meta.db_table)
    return (
        f"SELECT {alias}.id FROM {table[Team]} {alias} WHERE NOT {alias}.everyone AND ("
        f"{alias}.id IN (SELECT m.team_id FROM {table[Team.members.through]} m "
        f"JOIN {table[Person]} x ON x.user_id = m.user_id WHERE x.id = {column})"
        f" OR {alias}.id IN (SELECT g.team_id FROM {table[PeopleGroup]} g JOIN {members} gm ON gm.peoplegroup_id = g.id "
        f"JOIN {table[Person]} x ON x.id = gm.person_id WHERE gm.person_id = {column} AND x.active))"
    )


def named(person_id: int, *, groups: tuple[str, ...]) -> Named | None:
    """The person `person_id` now; None if they are gone from the directory."""
    row = (
        Person.objects.filter(pk=person_id)
        .annotate(in_groups=_in_groups(OuterRef("pk"), groups))
        .values_list("active", "in_groups", "email")
        .first()
    )
    return None if row is None else Named(active=row[0], in_groups=bool(row[1]), email=row[2])


def standing(person_id: int, delegate_id: int, *, groups: tuple[str, ...]) -> Standing | None:
    """`delegate_id`'s stand-ins for `person_id` now, with what else decides whether they hold; None if
    there is none (removed). One statement."""
    stand_ins = connection.ops.quote_name(StandIn._meta.db_table)
    person, delegate = f"{stand_ins}.person_id", f"{stand_ins}.delegate_id"
    rows = list(
        StandIn.objects.filter(person_id=person_id, delegate_id=delegate_id)
        .annotate(
            in_groups=_in_groups(OuterRef("person_id"), groups),
            person_teamed=RawSQL(f"EXISTS ({_closed_teams_sql(person, 'pt')})", (), output_field=BooleanField()),
            shared=RawSQL(
                f"EXISTS ({_closed_teams_sql(person, 'st')} AND st.id IN ({_closed_teams_sql(delegate, 'dt')}))",
                (),
                output_field=BooleanField(),
            ),
        )
        .values_list(
            "starts_at", "ends_at", "delegate__active", "person__active", "in_groups", "person__email",
            "person_teamed", "shared",
        )  # fmt: skip
        .order_by("starts_at")
    )
    if not rows:
        return None
    first = rows[0]
    return Standing(
        windows=tuple((row[0], row[1]) for row in rows),
        delegate_active=first[2],
        person=Named(active=first[3], in_groups=bool(first[4]), email=first[5]),
        same_team=not first[6] or bool(first[7]),
    )


def team_names(teams: QuerySet[Team]) -> list[str]:
    return list(teams.order_by("name").values_list("name", flat=True).distinct())


def routing_refusal(
    routed: dict[str, Any],
    *,
    person: str,
    standing_in: dict[str, str] | None,
    remembered: Callable[[str, str, Callable[[], Any]], Any],
) -> tuple[str, str] | None:
    """(code, sentence) if `person` — routed the request by the directory (`routed`: its snapshot,
    `selectors.routed_people`), in their own right or as the stand-in `standing_in` — no longer decides it,
    as the directory says now; None if they still do. One read, kept by `remembered` (the selectors'
    `people_memo`). A request routed before the gate's entries were kept is checked without its groups."""
    entries = [e for e in routed["entries"] or () if e.startswith(PEOPLE_PREFIXES)]
    groups = tuple(sorted({e.partition(":")[2] for e in entries if e.startswith("group:")}))
    emails = {e.partition(":")[2].casefold() for e in entries if e.startswith("person:")}
    named_by = " or ".join(entries)

    def still_named(now: Named) -> bool:
        return routed["entries"] is None or now.in_groups or now.email.casefold() in emails

    if standing_in is None:
        now = remembered("named", f"{person}|{groups}", lambda: named(_pk(person), groups=groups))
        if now is None or not now.active:
            return "not_approver", DEACTIVATED
        if not still_named(now):
            return "not_approver", f"You are no longer in {named_by}, which routed this request to you: it is no longer yours to decide."
        return None
    away, name = standing_in["for"], standing_in["name"]
    held = remembered("standing", f"{away}|{person}|{groups}", lambda: standing(_pk(away), _pk(person), groups=groups))
    if held is None:
        return "not_approver", f"{name} no longer has you as a stand-in, so this request is no longer yours to decide."
    if not held.delegate_active:
        return "not_approver", DEACTIVATED
    moment = timezone.now()
    if not any(starts <= moment < ends for starts, ends in held.windows):
        later = [starts for starts, _ in held.windows if starts > moment]
        if later:
            return "not_approver", f"Your time standing in for {name} starts {min(later).astimezone(dt.UTC):%Y-%m-%d %H:%M} UTC."
        return "not_approver", f"Your time standing in for {name} has ended."
    if not held.person.active:
        return "not_approver", f"{name} was deactivated in the people directory, so nobody stands in for them."
    if away in routed["people"] and not still_named(held.person):
        return "not_approver", f"{name} is no longer in {named_by}, so nobody stands in for them on this request."
    if not held.same_team:
        teams = ", ".join(team_names(closed_teams_of(_pk(away))))
        return "not_approver", f"You are in none of the teams of {name} ({teams}), so you do not stand in for them."
    return None


def _pk(person: str) -> int:
    """The id of a directory person's key (`person:<id>`)."""
    return int(person.partition(":")[2])
