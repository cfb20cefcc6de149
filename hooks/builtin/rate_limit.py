"""`rate_limit`: at most `limit` calls per `window_seconds`, per user, session or agent (CONTRACT §3b)."""

from __future__ import annotations

import datetime as dt
import hashlib
import math

from django.db import connection
from django.utils import timezone

from hooks.base import Hook, HookContext, HookResult
from hooks.registry import register
from hooks.schema import HOOK_CONFIG_MODELS

SCOPE_PREFIX = "rate_limit:"
_MAX_KEY = 200  # HookState.key


def counter_key(per: str, ctx: HookContext) -> str:
    """Whose calls share a counter. Calls without a user_id (or session id) share one counter."""
    identity = {"user": ctx.user_id, "session": ctx.session_id, "agent": ctx.agent}[per]
    key = f"{per}:{identity}"
    if len(key) > _MAX_KEY:
        key = f"{per}:sha256:{hashlib.sha256(identity.encode()).hexdigest()}"
    return key


def hook_counter_take(
    *, agent: str, scope: str, key: str, limit: int, window_seconds: int, now: dt.datetime
) -> dt.datetime | None:
    """Count one call of agent `agent` (its name) in a fixed window; None if counted, else when the window ends.

    One `INSERT … ON CONFLICT DO UPDATE … WHERE counter < limit` (PostgreSQL,
    and SQLite >= 3.35): the row lock it takes makes concurrent calls count one
    at a time, so exactly `limit` calls per window get through. A window that
    has ended restarts at 1 in the same statement.
    """
    from approvals.models import Agent, HookState

    q = connection.ops.quote_name
    table = q(HookState._meta.db_table)
    agent_id = f"(SELECT {q('id')} FROM {q(Agent._meta.db_table)} WHERE {q('name')} = %s)"
    adapt = connection.ops.adapt_datetimefield_value
    window_end = now + dt.timedelta(seconds=window_seconds)
    expired = f"({table}.{q('expires_at')} IS NULL OR {table}.{q('expires_at')} <= %s)"
    sql = (
        f"INSERT INTO {table} ({q('agent_id')}, {q('scope')}, {q('key')}, {q('counter')}, {q('expires_at')}, {q('updated_at')}) "
        f"VALUES ({agent_id}, %s, %s, 1, %s, %s) "
        f"ON CONFLICT ({q('agent_id')}, {q('scope')}, {q('key')}) DO UPDATE SET "
        f"{q('counter')} = CASE WHEN {expired} THEN 1 ELSE {table}.{q('counter')} + 1 END, "
        f"{q('expires_at')} = CASE WHEN {expired} THEN excluded.{q('expires_at')} ELSE {table}.{q('expires_at')} END, "
        f"{q('updated_at')} = excluded.{q('updated_at')} "
        f"WHERE {expired} OR {table}.{q('counter')} < %s "
        f"RETURNING {q('counter')}"
    )
    now_value = adapt(now)
    params = [agent, scope, key, adapt(window_end), now_value, now_value, now_value, now_value, limit]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        counted = cursor.fetchone() is not None
    if counted:
        return None
    ends = HookState.objects.filter(agent__name=agent, scope=scope, key=key).values_list("expires_at", flat=True).first()
    return ends or window_end


@register
class RateLimit(Hook):
    """Invariant: no more than `limit` matching calls per `window_seconds` get past this hook,
    for each user (`per: user`), session or agent — even when they arrive at once.

    Fixed windows: a counter starts with the first call and allows `limit` calls
    until `window_seconds` later, when it starts again. A call over the limit is
    denied with how many seconds remain. Counters live in the database
    (HookState, scope `rate_limit:<hook name>`), so every server process and
    every worker shares them. Every call that reaches this hook counts, whatever
    later hooks decide; put it after the hooks that should not count.
    """

    kind = "rate_limit"
    events = HOOK_CONFIG_MODELS["rate_limit"].EVENTS
    config_model = HOOK_CONFIG_MODELS["rate_limit"]

    def run(self, ctx: HookContext) -> HookResult:
        c = self.config
        now = ctx.now or timezone.now()
        window_end = hook_counter_take(
            agent=ctx.agent,
            scope=f"{SCOPE_PREFIX}{self.name}",
            key=counter_key(c.per, ctx),
            limit=c.limit,
            window_seconds=c.window_seconds,
            now=now,
        )
        if window_end is None:
            return HookResult.no_opinion()
        wait = max(1, math.ceil((window_end - now).total_seconds()))
        return HookResult.deny(
            f"rate limit of {c.limit} calls per {c.window_seconds} s per {c.per} reached ({self.name}); "
            f"retry in {wait} seconds"
        )
