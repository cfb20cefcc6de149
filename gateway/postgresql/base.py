"""Django's PostgreSQL backend, lending from its psycopg pool only connections the server has not closed.

When PostgreSQL restarts, fails over or terminates backends (`pg_terminate_backend`), every connection
idle in a process's pool is dead, and each would fail the next request it is lent to — an approver's
click among them. A server closing a connection says so on it (its FATAL message, then the end of the
stream), so a dead idle connection has something to read, and a sound one has nothing. Each connection
the pool lends is looked at that way (one `poll()` of its socket, no round trip); one with something to
read is tried with psycopg_pool's own check (one empty query), and one that fails it is handed back —
closed, so the pool drops it and opens another in its place — and the next is taken, until a sound one
comes: every connection the drop killed is dropped by the first request that meets it, and no request
fails on one.

Why not psycopg_pool's `check` (Django's CONN_HEALTH_CHECKS with a pool): it costs every request a
round trip to the server, and after a failed check the pool waits before trying the next connection
(1 s, then 2 s, 4 s…: psycopg_pool's `AttemptWithBackoff`), so with a dozen dead connections in the pool
the first request after a restart waited out its 10 s pool timeout and failed all the same.

A connection that dies while it is lent (the server goes away in the middle of a request) fails that
request: the agent API answers `503 database_unavailable` (nothing was decided; clients send it again)
and a click's transaction that failed before its COMMIT is served again (`approvals.services.replay`).
"""

from __future__ import annotations

import datetime as dt
import functools
import select
from typing import Any

import psycopg
from django.conf import settings
from django.db.backends.postgresql import base
from django.db.backends.postgresql.psycopg_any import get_adapters_template
from psycopg import _queries, adapt, postgres
from psycopg.pq import Format
from psycopg_pool import ConnectionPool

# psycopg parses a statement's placeholders (`%(name)s` → `$n`) on every execute, and keeps what it
# parsed only for statements of at most 4 KB and 50 parameters (`_queries.MAX_CACHED_STATEMENT_*`: an
# ORM's `INSERT … VALUES (…), (…)` of varying length would fill its cache with statements never sent
# again). The statements the gateway writes out itself are longer and sent on every request — a request's
# creation, its event and its card are one statement of some 80 parameters (`approvals.services.records`)
# — and parsing one took more of the server's CPU than composing it. Those up to these bounds are kept
# too, in a cache of their own, so the ORM's one-off statements cannot push psycopg's out.
PARSED_MAX_BYTES = 16_384
PARSED_MAX_PARAMS = 256
_parsed = functools.lru_cache(maxsize=64)(_queries._query2pg_nocache)


class _KeptQuery(_queries.PostgresQuery):
    """psycopg's server-side query, whose parsing of a statement over psycopg's own caching bounds (and
    within ours) is done once per process."""

    def convert(self, query: Any, vars: Any) -> None:
        if (
            vars is None
            or not isinstance(query, str)
            or len(vars) > PARSED_MAX_PARAMS
            or len(query) > PARSED_MAX_BYTES
            or (len(query) <= _queries.MAX_CACHED_STATEMENT_LENGTH and len(vars) <= _queries.MAX_CACHED_STATEMENT_PARAMS)
        ):
            return super().convert(query, vars)
        self.query, self._want_formats, self._order, self._parts = _parsed(
            query.encode(self._tx.encoding), self._tx.encoding
        )
        self.dump(vars)


class ServerBindingCursor(base.ServerBindingCursor):
    """Django's cursor for server-side binding, keeping the parsing of the gateway's long statements."""

    _query_cls = _KeptQuery


def closed_by_server(connection: psycopg.Connection) -> bool:
    """Whether the server has closed this idle connection. Nothing to read on its socket (the usual case: one
    system call) means it has not; something to read is most likely the server's goodbye, but may be a
    notice or a changed parameter, so then one empty query decides."""
    if connection.closed:
        return True
    poller = select.poll()
    poller.register(connection.fileno(), select.POLLIN)
    if not poller.poll(0):
        return False
    try:
        ConnectionPool.check_connection(connection)
    except psycopg.Error:
        return True
    return False


# A moment read from PostgreSQL. Django reads every `timestamptz` with a loader of its own (to give it
# the connection's time zone as `tzinfo`) that subclasses psycopg's pure-Python one, so none is read by
# psycopg's C loader: ~8 µs a value, a tenth of an approver's click (a request's row holds nine
# moments, a user's two, a session's one). This one parses with the C loader psycopg would have used
# and gives the same value Django's does, in UTC with `datetime.timezone.utc` — converted, not relabelled
# as Django's is, so it is the right moment even on a connection whose TimeZone someone changed (Django
# sets UTC: `ensure_timezone`). Only for UTC: otherwise Django's own loader stays.
_C_TIMESTAMPTZ = adapt.AdaptersMap(psycopg.adapters).get_loader(postgres.types["timestamptz"].oid, Format.TEXT)


class UtcTimestamptzLoader(adapt.Loader):
    """`timestamptz` as an aware datetime in UTC (`datetime.timezone.utc`, as Django's loader gives it)."""

    timezone = dt.timezone.utc  # (Django's `create_cursor` compares this with the connection's zone)

    def __init__(self, oid: int, context: Any = None) -> None:
        super().__init__(oid, context)
        self._parse = _C_TIMESTAMPTZ(oid, context).load

    def load(self, data: Any) -> dt.datetime:
        return self._parse(data).astimezone(dt.timezone.utc)


@functools.cache
def _adapters(use_tz: bool, timezone: Any) -> adapt.AdaptersMap:
    """Django's adapters (`get_adapters_template`), `timestamptz` read by `UtcTimestamptzLoader` in UTC."""
    template = get_adapters_template(use_tz, timezone)
    if not (use_tz and timezone == dt.timezone.utc and _C_TIMESTAMPTZ is not None):
        return template
    adapters = adapt.AdaptersMap(template)
    adapters.register_loader("timestamptz", UtcTimestamptzLoader)
    return adapters


class DatabaseWrapper(base.DatabaseWrapper):
    def get_connection_params(self) -> dict[str, Any]:
        params = super().get_connection_params()
        if "context" in params:
            params["context"] = _adapters(settings.USE_TZ, self.timezone)
        if params.get("cursor_factory") is base.ServerBindingCursor:  # (server-side binding: GATEWAY_DB_PREPARE_AFTER)
            params["cursor_factory"] = ServerBindingCursor
        return params

    def get_new_connection(self, conn_params: dict[str, Any]) -> Any:
        connection = super().get_new_connection(conn_params)
        pool = self.pool
        if pool is None:
            return connection
        # Every connection in the pool may be dead (a restart): at most that many are handed back, then
        # the pool lends a new one (it opens one for each dropped, in the background).
        for _ in range(pool.max_size):
            if not closed_by_server(connection):
                return connection
            connection.close()
            pool.putconn(connection)  # closed: dropped, and another opened in its place
            connection = super().get_new_connection(conn_params)
        return connection
