"""`turn_limit`: at most `max_turns` turns per session (docs/reference/config.md)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from hooks import state
from hooks.base import Hook, HookContext, HookResult
from hooks.config import HookConfigBase


class TurnLimitConfig(HookConfigBase):
    """Deny further turns once a session has had `max_turns`."""

    kind: Literal["turn_limit"]
    event: Literal["pre_turn"] = "pre_turn"
    max_turns: int = Field(ge=1)


class TurnLimit(Hook):
    """Invariant: a session gets no more than `max_turns` allowed pre-turns, even when they arrive at once.

    Each pre-turn that reaches this hook counts, with one conditional UPDATE on
    a HookState counter (scope `session:<id>`); a pre-turn repeated with the same
    `turn_id` (an agent retrying its request) is not counted twice. The turn
    after the last allowed one is denied, and so is every one after it: the
    count is kept when the session ends, so ending a session does not reset it.
    """

    kind = "turn_limit"
    events = TurnLimitConfig.EVENTS
    config_model = TurnLimitConfig
    config: TurnLimitConfig

    def run(self, ctx: HookContext) -> HookResult:
        limit = self.config.max_turns
        counted, turns = state.count(
            agent=ctx.agent,
            scope=state.session_scope(ctx.session_id),
            key=f"turn_limit:{self.name}",
            limit=limit,
            once_per=ctx.turn_id,
        )
        if not counted:
            return HookResult.deny(f"this session has used all {limit} of its turns ({self.name})")
        return HookResult.no_opinion(reason=f"turn {turns} of {limit}")
