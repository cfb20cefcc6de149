"""The gateway's config file (docs/reference/config.md): channels and agents with their hooks.

`manage.py apply_config`, `GATEWAY_CONFIG`, `POST /api/v1/config/validate` and
`manage.py hooks_schema` all read it through here. Every problem found is
reported at once, each as a `ConfigProblem(path, message)` such as
`agents[0].hooks[1].timeout_seconds: must be > 0`.

The file is assembled from the parts that own its pieces: each channel kind's
config model (`gateway_contract.CHANNEL_KINDS`), each hook kind's
(`hooks.registry`), and the reading and phrasing of `gateway_utils.configfile`.
Build configs through these functions, not `GatewayConfig.model_validate`:
they also fill in each hook's default name and check the references between
hooks and channels.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Annotated, Any, Union

from pydantic import BaseModel, ConfigDict, Field

from gateway_contract import CHANNEL_KINDS, ChannelConfigBase, get_config_model
from gateway_utils.configfile import (
    FILE,
    SLUG,
    ConfigError,
    ConfigProblem,
    check_unique_names,
    list_at,
    load_yaml,
    raw_names,
    substitute_environment,
    validate_model,
    validate_tagged,
)
from hooks.config import HookConfigBase
from hooks.registry import HookConfig, collect_hooks

CHANNEL_CONFIG_MODELS: dict[str, type[ChannelConfigBase]] = {kind: get_config_model(kind) for kind in CHANNEL_KINDS}
# One channel of any kind, told apart by `kind` (for the JSON Schema).
ChannelConfig = Annotated[Union[tuple(CHANNEL_CONFIG_MODELS.values())], Field(discriminator="kind")]  # type: ignore[misc]


class AgentConfig(BaseModel):
    """One agent and its ordered hooks."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=SLUG, max_length=64)
    # The team the agent belongs to (docs/approving.md, "Teams"); left out: the default team.
    team: str = Field(default="default", pattern=SLUG, max_length=64)
    hooks: list[HookConfig] = []
    read_only: bool = False


class GatewayConfig(BaseModel):
    """The gateway's config file (`manage.py apply_config FILE`)."""

    model_config = ConfigDict(extra="forbid", title="Gateway config")

    channels: list[ChannelConfig] = []
    agents: list[AgentConfig] = []


def load_config_file(path: str | os.PathLike[str], *, environ: Mapping[str, str] | None = None) -> GatewayConfig:
    """Read and validate a config file; raise ConfigError if it is unreadable or invalid."""
    try:
        with open(path, encoding="utf-8") as file:
            text = file.read()
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ConfigError([ConfigProblem(FILE, f"cannot read {os.fspath(path)}: {reason}")]) from None
    return parse_config_text(text, environ=environ)


def parse_config_text(text: str, *, environ: Mapping[str, str] | None = None) -> GatewayConfig:
    """Parse YAML, substitute `${NAME}` from `environ` (default os.environ) and validate it all.

    Raises ConfigError listing every problem found.
    """
    data = load_yaml(text)
    env_problems: list[ConfigProblem] = []
    data = substitute_environment(data, os.environ if environ is None else environ, env_problems)
    try:
        config = validate_config(data)
    except ConfigError as exc:
        # A value whose variable is missing is reported once, for the variable.
        missing = {problem.path for problem in env_problems}
        raise ConfigError(env_problems + [p for p in exc.problems if p.path not in missing]) from None
    if env_problems:
        raise ConfigError(env_problems)
    return config


def validate_config(data: Any) -> GatewayConfig:
    """Validate a parsed config file (after `${NAME}` substitution); raise ConfigError listing every problem."""
    if not isinstance(data, Mapping):
        raise ConfigError([ConfigProblem(FILE, "must be a mapping with `channels` and `agents` keys")])
    problems: list[ConfigProblem] = []
    raw_channels = list_at(data, "channels", "channels", problems)
    raw_agents = list_at(data, "agents", "agents", problems)
    validate_model(GatewayConfig, {**data, "channels": [], "agents": []}, "", problems)

    channels: list[Any] = []
    for index, raw in enumerate(raw_channels):
        channel = validate_tagged(raw, f"channels[{index}]", CHANNEL_CONFIG_MODELS, "channel", problems)
        if channel is not None:
            channels.append(channel)
    check_unique_names(raw_names(raw_channels, "channels"), problems)
    # Hooks may name any channel the file defines, even one with problems of its own.
    channel_names = {name for _, name in raw_names(raw_channels, "channels")}

    agents: list[AgentConfig] = []
    for index, raw in enumerate(raw_agents):
        path = f"agents[{index}]"
        if not isinstance(raw, Mapping):
            problems.append(ConfigProblem(path, "must be a mapping with a `name` key"))
            continue
        raw_hooks = list_at(raw, "hooks", f"{path}.hooks", problems)
        agent = validate_model(AgentConfig, {**raw, "hooks": []}, path, problems)
        hooks = collect_hooks(raw_hooks, f"{path}.hooks", channel_names, problems)
        if agent is not None:
            agent.hooks = hooks  # type: ignore[assignment]
            agents.append(agent)
    check_unique_names(raw_names(raw_agents, "agents"), problems)

    if problems:
        raise ConfigError(problems)
    return GatewayConfig(channels=channels, agents=agents)


def stored_hooks(hooks: list[HookConfigBase]) -> list[dict[str, Any]]:
    """Validated hooks as they are stored in an AgentConfigVersion: normalised, defaults filled in."""
    return [hook.model_dump(mode="json", exclude_none=False) for hook in hooks]


def config_json_schema() -> dict[str, Any]:
    """The JSON Schema of the whole config file, for editors (`manage.py hooks_schema`)."""
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", **GatewayConfig.model_json_schema()}
