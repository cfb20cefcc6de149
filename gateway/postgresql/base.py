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

import select
from typing import Any

import psycopg
from django.db.backends.postgresql import base
from psycopg_pool import ConnectionPool


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


class DatabaseWrapper(base.DatabaseWrapper):
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
