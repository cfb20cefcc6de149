"""Which teams a user belongs to, and the rows of those teams (docs/approving.md, "Teams")."""

from __future__ import annotations

from typing import Any

from django.db.models import Q

from approvals.models import Agent, ConfirmationRequest, Team


_TEAMS_ATTRIBUTE = "_gateway_team_ids"  # the user's teams, read once per request (request.user lives as long)


def team_ids_of(user: Any) -> frozenset[int] | None:
    """The teams whose requests `user` sees and decides; None: every team (a superuser). A user is a
    member of a team directly, through one of its groups (their active person a member of it), or by
    signing in where the team is open to everyone; someone not signed in is a member of none."""
    if not getattr(user, "is_authenticated", False):
        return frozenset()
    if user.is_superuser:
        return None
    cached = getattr(user, _TEAMS_ATTRIBUTE, None)
    if cached is None:
        cached = frozenset(
            Team.objects.filter(
                Q(everyone=True) | Q(members=user) | Q(groups__members__user=user, groups__members__active=True)
            )
            .values_list("pk", flat=True)
            .distinct()
        )
        setattr(user, _TEAMS_ATTRIBUTE, cached)
    return cached


def team_names_of(user: Any) -> list[str]:
    """The names of `user`'s teams, for the inbox to say whose requests it lists ([] for a superuser: all)."""
    teams = team_ids_of(user)
    return [] if teams is None else list(Team.objects.filter(pk__in=teams).order_by("name").values_list("name", flat=True))


def in_teams(user: Any, team_id: int) -> bool:
    """Whether `user` is a member of the team `team_id` (a superuser is of every team)."""
    teams = team_ids_of(user)
    return teams is None or team_id in teams


def of_teams(queryset: Any, user: Any, *, path: str) -> Any:
    """`queryset` narrowed to the rows of `user`'s teams; `path` leads from a row to its team
    (`agent__team` for a request, `team` for an agent or a channel)."""
    teams = team_ids_of(user)
    return queryset if teams is None else queryset.filter(**{f"{path}__in": teams})


def team_sees(user: Any, confirmation: ConfirmationRequest) -> bool:
    """Whether `confirmation` belongs to one of `user`'s teams (its agent's team). Outside them a request
    does not exist for the user: its page is a 404 and no click of theirs on the web reaches it.
    A team everyone signed in belongs to (`everyone`, the default team's setting) needs no read of the
    user's teams when the request was read with its agent's team."""
    agent = confirmation.agent
    if Agent.team.is_cached(agent) and agent.team.everyone:
        return True
    return in_teams(user, agent.team_id)
