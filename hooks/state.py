"""The hooks' own store: small durable state kept between calls, per agent.

Every read and write of `hooks.models.HookState` goes through these functions.
Each is one statement (or one short transaction), exact under concurrency, so
several server processes and workers share counters and markers safely.

- values: `get` / `put` / `swap` (with an optional expiry, e.g. a cache TTL);
- markers: `claim` / `release` (the one caller that inserted it wins);
- counters: `count` (under a limit, once per turn) and `take_in_window` (a fixed window; `window_full`
  looks without counting);
- the session context: what outer levels (session start, the current turn)
  said about a session, which every inner level's hooks see (`session_values`);
- `purge_expired`: beat drops state whose expiry passed long ago;
- `replaying`: a replay of recorded calls (docs/policies.md, "Trying a config on the past") keeps
  the counted windows in memory, at each call's own time, and may write nothing.
"""

from __future__ import annotations

import contextlib
import contextvars
import copy
import datetime as dt
import hashlib
import json
from collections.abc import Iterator
from typing import Any

from django.db import IntegrityError, connection, transaction
from django.db.models import F
from django.utils import timezone

from gateway_utils import realtime
from hooks.models import HookState

SESSION_CONTEXT_KEY = "context"
SESSION_CHANGED_PREFIX = "session:"
_UNREAD = object()
_MAX_FIELD = 200  # HookState.scope and .key
# Expired state is kept this long before beat deletes it (a new call simply starts anew).
PURGE_GRACE = dt.timedelta(hours=1)


# --------------------------------------------------------------------------- replaying


class ReplayWrite(RuntimeError):
    """A hook tried to write the hooks' store while recorded calls are replayed: a replay writes nothing."""


# While recorded calls are replayed: the counted windows, {(agent, scope, key): [counter, window end]}.
_replay_windows: contextvars.ContextVar[dict[tuple[str, str, str], list[Any]] | None] = contextvars.ContextVar(
    "hooks_state_replay", default=None
)


@contextlib.contextmanager
def replaying() -> Iterator[None]:
    """Within the block the store is the replay's own: `take_in_window` and `window_full` count in
    memory (a rate limit replays over the calls in the order they are given, each at its `now`), and
    every other write refuses (`ReplayWrite`, which the chain treats as the hook's error). Reads of
    values and of the session context read the database as it is."""
    token = _replay_windows.set({})
    try:
        yield
    finally:
        _replay_windows.reset(token)


def _refuse_in_replay(what: str) -> None:
    if _replay_windows.get() is not None:
        raise ReplayWrite(f"{what} would write the hooks' store; a replay writes nothing")


def field(*parts: str) -> str:
    """Join parts into a scope or key, hashing the tail if it would not fit."""
    text = ":".join(parts)
    if len(text) <= _MAX_FIELD:
        return text
    digest = hashlib.sha256(text.encode()).hexdigest()
    return f"{text[: _MAX_FIELD - len(digest) - 1]}~{digest}"


# --------------------------------------------------------------------------- values


def get(*, agent: str, scope: str, key: str, now: dt.datetime | None = None) -> Any:
    """A stored value, or None if there is none or it expired by `now`."""
    row = HookState.objects.filter(agent=agent, scope=scope, key=key).values_list("value", "expires_at").first()
    if row is None:
        return None
    value, expires_at = row
    if expires_at is not None and expires_at <= (now or timezone.now()):
        return None
    return value


def put(*, agent: str, scope: str, key: str, value: Any, expires_at: dt.datetime | None = None) -> None:
    """Store a value (replacing any), optionally until `expires_at`."""
    _refuse_in_replay("put")
    HookState.objects.update_or_create(
        agent=agent, scope=scope, key=key, defaults={"value": value, "expires_at": expires_at}
    )


def swap(*, agent: str, scope: str, key: str, value: Any) -> bool:
    """Store `value` unless it is what is stored already. True if it changed."""
    _refuse_in_replay("swap")
    with transaction.atomic():
        state, created = HookState.objects.select_for_update().get_or_create(
            agent=agent, scope=scope, key=key, defaults={"value": value}
        )
        if created:
            return True
        if state.value == value:
            return False
        HookState.objects.filter(pk=state.pk).update(value=value)
        return True


# --------------------------------------------------------------------------- markers


def claim(*, agent: str, scope: str, key: str) -> bool:
    """Insert a marker if there is none. True for the one caller that inserted it."""
    _refuse_in_replay("claim")
    try:
        with transaction.atomic():
            HookState.objects.create(agent=agent, scope=scope, key=key)
    except IntegrityError:
        return False
    return True


def release(*, agent: str, scope: str, key: str) -> None:
    """Remove a marker (a claim whose work failed)."""
    _refuse_in_replay("release")
    HookState.objects.filter(agent=agent, scope=scope, key=key).delete()


# --------------------------------------------------------------------------- counters


class _Refused(Exception):
    pass


def count(*, agent: str, scope: str, key: str, limit: int, once_per: str = "") -> tuple[bool, int]:
    """Count one more under `limit`: (counted, count now). Exact under concurrency:
    the increment is one conditional UPDATE (`counter < limit`).

    `once_per` (e.g. a turn id) makes a repeat harmless: a second count for the
    same value is answered as counted without counting again.
    """
    _refuse_in_replay("count")
    rows = HookState.objects.filter(agent=agent, scope=scope, key=key)
    try:
        with transaction.atomic():
            if once_per:
                try:
                    with transaction.atomic():
                        HookState.objects.create(agent=agent, scope=scope, key=field(key, "seen", once_per))
                except IntegrityError:
                    return True, rows.values_list("counter", flat=True).first() or 0
            HookState.objects.get_or_create(agent=agent, scope=scope, key=key)
            counted = rows.filter(counter__lt=limit).update(counter=F("counter") + 1)
            if not counted:
                raise _Refused  # rolls back the `once_per` marker: a refused count is not remembered
    except _Refused:
        return False, rows.values_list("counter", flat=True).first() or 0
    return True, rows.values_list("counter", flat=True).first() or 0


def take_in_window(
    *, agent: str, scope: str, key: str, limit: int, window_seconds: int, now: dt.datetime
) -> dt.datetime | None:
    """Count one call in a fixed window; None if counted, else when the full window ends.

    One `INSERT … ON CONFLICT DO UPDATE … WHERE counter < limit` (PostgreSQL,
    and SQLite >= 3.35): the row lock it takes makes concurrent calls count one
    at a time, so exactly `limit` calls per window get through. A window that
    has ended restarts at 1 in the same statement; its row's `expires_at` is
    the window's end.
    """
    windows = _replay_windows.get()
    if windows is not None:
        return _take_in_memory(windows, (agent, scope, key), limit=limit, window_seconds=window_seconds, now=now)
    q = connection.ops.quote_name
    table = q(HookState._meta.db_table)
    adapt = connection.ops.adapt_datetimefield_value
    window_end = now + dt.timedelta(seconds=window_seconds)
    expired = f"({table}.{q('expires_at')} IS NULL OR {table}.{q('expires_at')} <= %s)"
    sql = (
        f"INSERT INTO {table} ({q('agent')}, {q('scope')}, {q('key')}, {q('counter')}, {q('expires_at')}, {q('updated_at')}) "
        f"VALUES (%s, %s, %s, 1, %s, %s) "
        f"ON CONFLICT ({q('agent')}, {q('scope')}, {q('key')}) DO UPDATE SET "
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
    ends = HookState.objects.filter(agent=agent, scope=scope, key=key).values_list("expires_at", flat=True).first()
    return ends or window_end


def window_full(*, agent: str, scope: str, key: str, limit: int, now: dt.datetime) -> dt.datetime | None:
    """Whether a call would be refused by `take_in_window` now, without counting one: when the full
    window ends, or None if it has room (or has ended). One read."""
    windows = _replay_windows.get()
    if windows is not None:
        row = windows.get((agent, scope, key))
    else:
        row = HookState.objects.filter(agent=agent, scope=scope, key=key).values_list("counter", "expires_at").first()
    if row is None:
        return None
    counter, ends = row
    if ends is None or ends <= now or counter < limit:
        return None
    return ends


def _take_in_memory(
    windows: dict[tuple[str, str, str], list[Any]],
    where: tuple[str, str, str],
    *,
    limit: int,
    window_seconds: int,
    now: dt.datetime,
) -> dt.datetime | None:
    """`take_in_window` over the replay's own windows: the same fixed windows, counted in memory."""
    window = windows.get(where)
    if window is None or window[1] <= now:
        windows[where] = [1, now + dt.timedelta(seconds=window_seconds)]
        return None
    if window[0] < limit:
        window[0] += 1
        return None
    return window[1]


# --------------------------------------------------------------------------- the session context


def session_scope(session_id: str) -> str:
    return field("session", session_id)


def session_stored(*, agent: str, session_id: str) -> Any:
    """The session's context as stored (a dict), or None if nothing was ever said about the session."""
    return (
        HookState.objects.filter(agent=agent, scope=session_scope(session_id), key=SESSION_CONTEXT_KEY)
        .values_list("value", flat=True)
        .first()
    )


def session_values(*, agent: str, session_id: str, stored: Any = _UNREAD) -> dict[str, Any]:
    """What outer levels set for this session: `user_id`, `metadata` (session-start),
    `turn_id` (the current turn), `started_at`, `ended_at`. {} if nothing was said.
    `stored`: the context as already read (`session_stored`), e.g. from a cache."""
    if stored is _UNREAD:
        stored = session_stored(agent=agent, session_id=session_id)
    return copy.deepcopy(stored) if isinstance(stored, dict) else {}


def session_unchanged(*, agent: str, session_id: str, stored: Any) -> tuple[str, dict[str, Any]]:
    """A SQL condition (named parameters) true while the session's stored context is still `stored`:
    a write made with a context read earlier (or cached) carries it, so it cannot land on a newer one."""
    table = connection.ops.quote_name(HookState._meta.db_table)
    sql = (
        f"COALESCE((SELECT value FROM {table} WHERE agent = %(session_agent)s AND scope = %(session_scope)s "
        f"AND key = %(session_key)s), 'null'::jsonb) = %(session_stored)s::jsonb"
    )
    return sql, {
        "session_agent": agent,
        "session_scope": session_scope(session_id),
        "session_key": SESSION_CONTEXT_KEY,
        "session_stored": json.dumps(stored),
    }


def session_remember(*, agent: str, session_id: str, values: dict[str, Any]) -> dict[str, Any]:
    """Merge `values` into the session's context; returns the context now stored. A change is
    announced (`gateway_utils.realtime`) so that server processes caching the context drop it."""
    _refuse_in_replay("session_remember")
    with transaction.atomic():
        state, created = HookState.objects.select_for_update().get_or_create(
            agent=agent, scope=session_scope(session_id), key=SESSION_CONTEXT_KEY, defaults={"value": {}}
        )
        merged = {**(state.value or {}), **values}
        if merged != state.value:
            HookState.objects.filter(pk=state.pk).update(value=merged)
        if created or merged != state.value:
            realtime.notify_config_changed(session_changed(agent, session_id))
    return merged


def session_changed(agent: str, session_id: str) -> str:
    """The change notification's payload for one session's context."""
    return SESSION_CHANGED_PREFIX + json.dumps([agent, session_id])


# --------------------------------------------------------------------------- housekeeping


def purge_expired(*, now: dt.datetime, limit: int = 1000) -> int:
    """Delete state whose expiry passed over PURGE_GRACE ago (ended rate-limit windows,
    stale cached results); returns how many. A later call simply starts anew."""
    cutoff = now - PURGE_GRACE
    pks = list(HookState.objects.filter(expires_at__lt=cutoff).values_list("pk", flat=True)[:limit])
    if not pks:
        return 0
    return HookState.objects.filter(pk__in=pks, expires_at__lt=cutoff).delete()[0]
