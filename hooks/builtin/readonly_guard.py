"""`readonly_guard`: block write tools while an agent, or a call, is read-only (docs/reference/config.md)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from hooks.base import Hook, HookContext, HookResult
from hooks.config import HookConfigBase


class ReadonlyGuardConfig(HookConfigBase):
    """Block the write tools (`tools`) while the agent is read-only or `metadata[flag]` is true."""

    kind: Literal["readonly_guard"]
    event: Literal["pre_tool_use"] = "pre_tool_use"
    flag: str = Field(default="read_only", min_length=1)

_ON_STRINGS = frozenset({"true", "1", "yes", "on"})


def flag_is_on(value: Any) -> bool:
    """JSON `true`, or a string such as "true" / "on" that a caller's metadata may carry instead."""
    if isinstance(value, bool):
        return value
    return isinstance(value, str) and value.strip().lower() in _ON_STRINGS


class ReadonlyGuard(Hook):
    """Invariant: while the agent's read-only switch is on, or the call's `metadata[flag]` is true,
    none of this hook's `tools` (the write tools) runs.

    The switch is `Agent.read_only` (the admin, `manage.py set_read_only AGENT
    on|off`, or `read_only:` in the config file); it is read on every call, so
    turning it on takes effect at the next call. Otherwise: no opinion.
    """

    kind = "readonly_guard"
    events = ReadonlyGuardConfig.EVENTS
    config_model = ReadonlyGuardConfig
    config: ReadonlyGuardConfig

    def run(self, ctx: HookContext) -> HookResult:
        flag = self.config.flag
        if ctx.agent_read_only:
            return HookResult.deny(f"agent {ctx.agent} is read-only: {ctx.tool_name} is a write tool ({self.name})")
        if flag_is_on(ctx.metadata.get(flag)):
            return HookResult.deny(f"metadata.{flag} is on: {ctx.tool_name} is a write tool ({self.name})")
        return HookResult.no_opinion()
