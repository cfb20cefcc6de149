"""`turn_limit`: at most `max_turns` turns per session (CONTRACT §3b)."""

from __future__ import annotations

from hooks.base import Hook, HookContext, HookResult
from hooks.registry import register
from hooks.schema import HOOK_CONFIG_MODELS


@register
class TurnLimit(Hook):
    """Invariant: a session gets no more than `max_turns` allowed pre-turns, even when they arrive at once.

    Each pre-turn that reaches this hook counts, with one conditional UPDATE on
    a HookState counter (scope `session:<id>`); a pre-turn repeated with the same
    `turn_id` (an agent retrying its request) is not counted twice. The turn
    after the last allowed one is denied, and so is every one after it: the
    count is kept when the session ends, so ending a session does not reset it.
    """

    kind = "turn_limit"
    events = HOOK_CONFIG_MODELS["turn_limit"].EVENTS
    config_model = HOOK_CONFIG_MODELS["turn_limit"]

    def run(self, ctx: HookContext) -> HookResult:
        from approvals import lifecycle

        limit = self.config.max_turns
        counted, turns = lifecycle.hook_state_count(
            agent_name=ctx.agent,
            scope=lifecycle.session_scope(ctx.session_id),
            key=f"turn_limit:{self.name}",
            limit=limit,
            once_per=ctx.turn_id,
        )
        if not counted:
            return HookResult.deny(f"this session has used all {limit} of its turns ({self.name})")
        return HookResult.no_opinion(reason=f"turn {turns} of {limit}")
