"""`rate_limit`: at most `limit` calls per `window_seconds`, per user, session or agent
(docs/reference/config.md)."""

from __future__ import annotations

import hashlib
import math
from typing import Literal

from django.utils import timezone
from pydantic import Field

from hooks import state
from hooks.base import Hook, HookContext, HookResult
from hooks.config import HookConfigBase

SCOPE_PREFIX = "rate_limit:"
_MAX_KEY = 200  # HookState.key


class RateLimitConfig(HookConfigBase):
    """Deny beyond `limit` calls per `window_seconds`, counted per user, session or agent."""

    kind: Literal["rate_limit"]
    event: Literal["pre_tool_use"] = "pre_tool_use"
    limit: int = Field(ge=1)
    window_seconds: int = Field(ge=1)
    per: Literal["user", "session", "agent"] = "user"


def counter_key(per: str, ctx: HookContext) -> str:
    """Whose calls share a counter. Calls without a user_id (or session id) share one counter."""
    identity = {"user": ctx.user_id, "session": ctx.session_id, "agent": ctx.agent}[per]
    key = f"{per}:{identity}"
    if len(key) > _MAX_KEY:
        key = f"{per}:sha256:{hashlib.sha256(identity.encode()).hexdigest()}"
    return key


class RateLimit(Hook):
    """Invariant: no more than `limit` matching calls per `window_seconds` get past this hook,
    for each user (`per: user`), session or agent — even when they arrive at once.

    Fixed windows: a counter starts with the first call and allows `limit` calls
    until `window_seconds` later, when it starts again. A call over the limit is
    denied with how many seconds remain. Counters live in the database
    (`hooks.state`, scope `rate_limit:<hook name>`), so every server process and
    every worker shares them; beat drops those whose window ended long ago. Every call that reaches this hook counts, whatever
    later hooks decide; put it after the hooks that should not count.

    Check only (`HookContext.check_only`: an approver's edit judged again): a full window refuses,
    and nothing is counted — the call was counted when it was asked, if this hook applied to it then.
    """

    kind = "rate_limit"
    events = RateLimitConfig.EVENTS
    config_model = RateLimitConfig
    config: RateLimitConfig

    def run(self, ctx: HookContext) -> HookResult:
        c = self.config
        now = ctx.now or timezone.now()
        scope, key = f"{SCOPE_PREFIX}{self.name}", counter_key(c.per, ctx)
        if ctx.check_only:  # an edited call judged again: refused if the window is full, never counted
            window_end = state.window_full(agent=ctx.agent, scope=scope, key=key, limit=c.limit, now=now)
        else:
            window_end = state.take_in_window(
                agent=ctx.agent, scope=scope, key=key, limit=c.limit, window_seconds=c.window_seconds, now=now
            )
        if window_end is None:
            return HookResult.no_opinion()
        wait = max(1, math.ceil((window_end - now).total_seconds()))
        return HookResult.deny(
            f"rate limit of {c.limit} calls per {c.window_seconds} s per {c.per} reached ({self.name}); "
            f"retry in {wait} seconds"
        )
