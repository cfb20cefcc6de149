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
from approvals.caches import config_changed
from approvals.config_schema import GatewayConfig, stored_hooks
from approvals.models import Agent, AgentConfigVersion, Channel
from approvals.types import ApplySummary
from hooks.registry import validate_agent_hooks


def agent_create(*, name: str, read_only: bool = False) -> Agent:
    """A new agent with no hooks (every call allowed) until some are applied."""
    return Agent.objects.create(name=name, read_only=read_only)


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
    """Apply a validated config file (`approvals.config_schema`) in one transaction (idempotent)."""
    summary = ApplySummary()
    for channel_cfg in config.channels:
        data = channel_cfg.model_dump(exclude={"name", "kind"})
        channel, created = Channel.objects.get_or_create(
            name=channel_cfg.name, defaults={"kind": channel_cfg.kind, "config": data}
        )
        if created:
            summary.channels_created.append(channel.name)
        elif channel.kind != channel_cfg.kind or channel.config != data:
            Channel.objects.filter(pk=channel.pk).update(kind=channel_cfg.kind, config=data)
            summary.channels_updated.append(channel.name)
        else:
            summary.unchanged.append(f"channel {channel.name}")
    for agent_cfg in config.agents:
        agent, created = Agent.objects.get_or_create(name=agent_cfg.name)
        if created:
            summary.agents_created.append(agent.name)
        if agent.read_only != agent_cfg.read_only:
            agent_set_read_only(agent=agent, read_only=agent_cfg.read_only)
        hooks = stored_hooks(agent_cfg.hooks)  # type: ignore[arg-type]
        if agent_hooks_apply(agent=agent, hooks=hooks, source=source) is not None:
            summary.agents_new_version.append(agent.name)
        elif not created:
            summary.unchanged.append(f"agent {agent.name}")
    return summary
