"""The gateway's PostgreSQL backend for the test run, emptying the tables after a transactional test with
DELETE instead of TRUNCATE (tests/settings.py).

pytest-django empties the database after each test that commits (`transactional_db`, `live_server`) with
Django's `flush`, which on PostgreSQL is one TRUNCATE of every table. TRUNCATE gives each table new files and
syncs them to disk: 0.3–1.1 s for the gateway's 35 tables on this machine while other work runs, after every
such test — more than the test itself for most of them. A DELETE of the few rows a test leaves takes ~10 ms
for them all (the rest of a flush, ~40 ms, is Django re-creating content types and permissions).
Django declares its foreign keys DEFERRABLE INITIALLY DEFERRED, and `flush` runs its statements in one
transaction, so the order of the DELETEs does not matter. Asked to reset sequences, it truncates as Django does.
"""

from __future__ import annotations

from gateway.postgresql import base


class DatabaseOperations(base.DatabaseWrapper.ops_class):
    def sql_flush(self, style, tables, *, reset_sequences=False, allow_cascade=False):
        if reset_sequences or not tables:
            return super().sql_flush(style, tables, reset_sequences=reset_sequences, allow_cascade=allow_cascade)
        return [f"{style.SQL_KEYWORD('DELETE FROM')} {style.SQL_FIELD(self.quote_name(table))};" for table in tables]


class DatabaseWrapper(base.DatabaseWrapper):
    ops_class = DatabaseOperations
