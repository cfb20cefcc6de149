"""Teams and their channels in the admin. Teams are made and staffed by superusers; channels come
from the config file and are shown here with their health, their secrets masked."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from approvals.admin.base import ReadOnlyAdmin, mask, pretty_json
from approvals.admin.scoping import TeamScoped, TeamsOnlyFilter
from approvals.models import Channel, Team
from gateway_contract import get_config_model, secret_keys


def masked_config(channel: Channel) -> dict[str, Any]:
    """The channel's config with the keys its kind marks as secret masked (every key, for an unknown kind)."""
    config = channel.config if isinstance(channel.config, dict) else {}
    try:
        secrets = secret_keys(get_config_model(channel.kind))
    except ValueError:
        secrets = frozenset(config)
    return {k: mask(v) if k in secrets and v not in (None, "") else v for k, v in config.items()}


@admin.register(Channel)
class ChannelAdmin(TeamScoped, ReadOnlyAdmin):
    """Channels come from the config file (`manage.py apply_config`); here they are shown with their health."""

    team_path = "team"
    list_display = ("name", "kind", "team", "last_delivery_error", "last_error_at", "settings_masked")
    list_filter = ("kind", ("team", TeamsOnlyFilter))
    search_fields = ("name",)
    fields = readonly_fields = ("name", "kind", "team", "config_masked", "last_error", "last_error_at", "created_at")

    @admin.display(description="last delivery error", ordering="last_error_at")
    def last_delivery_error(self, obj: Channel) -> str:
        return obj.last_error or "—"

    @admin.display(description="settings")
    def settings_masked(self, obj: Channel) -> str:
        items = masked_config(obj)
        return ", ".join(f"{k}={v}" for k, v in items.items() if v not in (None, "", [], {})) or "—"

    @admin.display(description="config (secrets masked)")
    def config_masked(self, obj: Channel) -> str:
        return pretty_json(masked_config(obj))


# --------------------------------------------------------------------------- teams


@admin.register(Team)
class TeamAdmin(TeamScoped, admin.ModelAdmin):
    """Teams are made and staffed by superusers; a team's staff see their team here."""

    team_path = "pk"
    list_display = ("name", "everyone", "agent_count", "channel_count", "group_list", "created_at")
    search_fields = ("name",)
    filter_horizontal = ("members",)
    fields = ("name", "everyone", "members", "group_list")
    readonly_fields = ("group_list",)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return request.user.is_superuser

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return request.user.is_superuser

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return request.user.is_superuser and (obj is None or not (obj.agents.exists() or obj.channels.exists()))

    @admin.display(description="agents")
    def agent_count(self, obj: Team) -> int:
        return obj.agents.count()

    @admin.display(description="channels")
    def channel_count(self, obj: Team) -> int:
        return obj.channels.count()

    @admin.display(description="groups (their members are members; a group's team is set on the group)")
    def group_list(self, obj: Team) -> str:
        return ", ".join(obj.groups.values_list("name", flat=True)) if obj.pk else "—"
