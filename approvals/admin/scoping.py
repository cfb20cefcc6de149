"""Team scoping of the admin (docs/approving.md, "Teams"): every list of a team-owned record is
`TeamScoped`, and its filters and choices offer only the user's teams (`TeamsOnlyFilter`)."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest

from approvals import selectors
from approvals.models import Agent, Channel, Team


# From a team-owned model to its team, for the choices the admin offers.
TEAM_PATHS: dict[type, str] = {Team: "pk", Agent: "team", Channel: "team"}


def of_users_teams(model: type, request: HttpRequest) -> QuerySet:
    return selectors.of_teams(model.objects.all(), request.user, path=TEAM_PATHS[model])


class TeamsOnlyFilter(admin.RelatedFieldListFilter):
    """A filter of agents, channels or teams that lists only the user's teams' (never another team's names)."""

    def field_choices(self, field: Any, request: HttpRequest, model_admin: Any) -> list:
        allowed = of_users_teams(field.related_model, request).values("pk")
        ordering = self.field_admin_ordering(field, request, model_admin)
        return field.get_choices(include_blank=False, limit_choices_to={"pk__in": allowed}, ordering=ordering)

    def has_output(self) -> bool:
        return True  # applied even with one choice: a filter by a team not offered lists nothing, not everything


class TeamScoped:
    """Staff of a team administer only it; superusers all (docs/approving.md, "Teams"). Rows of other
    teams are not listed, not found by id (Django's "does not exist"), not reached by an action, and
    not offered as a choice; `team_path` leads from a row to its team."""

    team_path = "agent__team"

    def get_queryset(self, request: HttpRequest) -> QuerySet:
        return selectors.of_teams(super().get_queryset(request), request.user, path=self.team_path)  # type: ignore[misc]

    def formfield_for_foreignkey(self, db_field: Any, request: HttpRequest, **kwargs: Any) -> Any:
        if db_field.related_model in TEAM_PATHS:
            kwargs["queryset"] = of_users_teams(db_field.related_model, request)
        return super().formfield_for_foreignkey(db_field, request, **kwargs)  # type: ignore[misc]
