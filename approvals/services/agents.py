"""Agents and their configuration: the config file applied, an agent's hooks versioned, the read-only switch.

`agent_hooks_apply` is the one way an agent's hooks change — from the config
file, the admin's editor and the staff API alike: it locks the agent, validates
the list with the one validator (`hooks.registry`), and stores it as a new
`AgentConfigVersion` only if it changed. Tool calls and confirmation requests
record the version that decided them.
"""

from __future__ import annotations

from typing import Any

from django.db import transaction

from approvals import selectors
from approvals.caches import channels_changed, config_changed
from approvals.config_schema import GatewayConfig, stored_hooks
from approvals.models import DEFAULT_TEAM, Agent, AgentConfigVersion, Channel, Team
from approvals.types import ApplySummary
from hooks.registry import validate_agent_hooks


def agent_create(*, name: str, read_only: bool = False, team: Team | None = None) -> Agent:
    """A new agent with no hooks (every call allowed) until some are applied, in `team` (default: the default team)."""
    if team is None:
        return Agent.objects.create(name=name, read_only=read_only)
    return Agent.objects.create(name=name, read_only=read_only, team=team)


@transaction.atomic
def agent_set_read_only(*, agent: Agent, read_only: bool) -> None:
    """The switch readonly_guard hooks obey; every server process sees it from the commit on."""
    Agent.objects.filter(pk=agent.pk).update(read_only=read_only)
    agent.read_only = read_only
    config_changed(agent.pk)


@transaction.atomic
def agent_hooks_apply(*, agent: Agent, hooks: list[Any], source: str) -> AgentConfigVersion | None:
    """Validate `hooks` (an agent's hook list, as in the config file) and store them as a new
    version if they changed; returns it (None if unchanged). Raises ConfigError, changing nothing.

    The agent row is locked first, so concurrent saves (admin, API, apply_config)
    number their versions in turn.
    """
    Agent.objects.select_for_update(no_key=True).filter(pk=agent.pk).first()
    normalised = stored_hooks(validate_agent_hooks(hooks, channel_names=selectors.channel_names()))
    current = agent.current_config
    if current is not None and current.hooks == normalised:
        return None
    version = (current.version if current else 0) + 1
    created = AgentConfigVersion.objects.create(agent=agent, version=version, hooks=normalised, source=source[:200])
    config_changed(agent.pk)
    return created


@transaction.atomic
def config_apply(*, config: GatewayConfig, source: str) -> ApplySummary:
    """Apply a validated config file (`approvals.config_schema`) in one transaction (idempotent).

    A team the file names is made if missing (a new one is open to nobody until it has members);
    an agent or a channel that names none is in the default team."""
    summary = ApplySummary()
    teams: dict[str, Team] = {}

    def team_named(name: str) -> Team:
        if name not in teams:
            teams[name] = Team.objects.get_or_create(name=name, defaults={"everyone": name == DEFAULT_TEAM})[0]
        return teams[name]

    for channel_cfg in config.channels:
        data = channel_cfg.model_dump(exclude={"name", "kind", "team"})
        team = team_named(channel_cfg.team)
        channel, created = Channel.objects.get_or_create(
            name=channel_cfg.name, defaults={"kind": channel_cfg.kind, "config": data, "team": team}
        )
        if created:
            summary.channels_created.append(channel.name)
        elif channel.kind != channel_cfg.kind or channel.config != data or channel.team_id != team.pk:
            Channel.objects.filter(pk=channel.pk).update(kind=channel_cfg.kind, config=data, team=team)
            summary.channels_updated.append(channel.name)
        else:
            summary.unchanged.append(f"channel {channel.name}")
    if summary.channels_updated:  # (a channel just created is in no cache: a name not found is not kept)
        channels_changed()
    for agent_cfg in config.agents:
        team = team_named(agent_cfg.team)
        agent, created = Agent.objects.get_or_create(name=agent_cfg.name, defaults={"team": team})
        if created:
            summary.agents_created.append(agent.name)
        moved = agent.team_id != team.pk
        if moved:
            Agent.objects.filter(pk=agent.pk).update(team=team)
            agent.team = team
            summary.agents_moved.append(agent.name)
        if agent.read_only != agent_cfg.read_only:
            agent_set_read_only(agent=agent, read_only=agent_cfg.read_only)
        hooks = stored_hooks(agent_cfg.hooks)  # type: ignore[arg-type]
        if agent_hooks_apply(agent=agent, hooks=hooks, source=source) is not None:
            summary.agents_new_version.append(agent.name)
        elif not created and not moved:
            summary.unchanged.append(f"agent {agent.name}")
    return summary
