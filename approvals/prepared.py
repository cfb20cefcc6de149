"""The hottest read of a decision — the request under its row lock, with its agent, the agent's team and
its channel — as a PostgreSQL prepared statement.

Composed by the ORM on every click, that read is compiled in Python each time (about 1 ms of the
server's CPU), and without preparing PostgreSQL plans it each time too (0.7 ms, for a statement that
takes 0.1 ms to run). Here the ORM composes it once per process, psycopg prepares it at its first use
on each database connection (`prepare=True`: the server keeps the plan; other statements are prepared
after GATEWAY_DB_PREPARE_AFTER uses, or never when that is 0), and each click only sends the id. The
rows become model instances exactly as the ORM makes them (the compiler's converters, `from_db`, the
related populators), and the statement is recorded where Django records its own
(`connection.queries_log`, for `CaptureQueriesContext` and DEBUG).

The same holds for the other reads every request of a kind makes: the session and the signed-in user
(every page), and the call a post-tool-use reports on, found by several values rather than one key
(`placeholders`).

Elsewhere than PostgreSQL (SQLite for `make run`) the queryset runs as it is.
"""

from __future__ import annotations

import functools
import time
import uuid
from collections.abc import Callable
from typing import Any

import psycopg
from django.db import connection
from django.db.models import QuerySet
from django.db.models.query import get_related_populators

_PLACEHOLDER = uuid.UUID(int=0)
NEVER_BY_COUNT = 2**31  # (psycopg prepares a statement run this many times; explicit `prepare=True` at once)


class PreparedRead:
    """`build(pk)` — a queryset selecting one row by primary key — run as a prepared statement.

    With `placeholders` (values as the database takes them: ints, text), `build(*placeholders)` is a
    queryset whose first row is wanted, and `first(*values)` sends `values` in their places (each
    placeholder must appear once among the statement's parameters)."""

    def __init__(self, build: Callable[..., QuerySet], placeholders: tuple[Any, ...] | None = None) -> None:
        self._build = build
        self._placeholders = placeholders

    @functools.cached_property
    def _plan(self) -> dict[str, Any]:
        by_pk = self._placeholders is None
        queryset = self._build(_PLACEHOLDER) if by_pk else self._build(*self._placeholders)
        compiler = queryset.query.get_compiler(using=queryset.db)
        sql, params = compiler.as_sql()
        pk = queryset.model._meta.pk
        # The placeholders' values are the parameters that vary; any other (a constant of an annotation)
        # is sent as it is.
        wanted = [pk.get_db_prep_value(_PLACEHOLDER, connection)] if by_pk else list(self._placeholders)
        at = []
        for placeholder in wanted:
            found = [position for position, param in enumerate(params) if type(param) is type(placeholder) and param == placeholder]
            if len(found) != 1:
                raise ValueError(f"a prepared read takes each of its values once among its parameters, not {params!r}")
            at.append(found[0])
        klass_info, select = compiler.klass_info, compiler.select
        fields = klass_info["select_fields"]
        start, end = fields[0], fields[-1] + 1
        return {
            "sql": sql,
            # {column: (converters, expression)}: the ORM's own conversion of what the database returns
            "converters": list(compiler.get_converters([column[0] for column in select[: compiler.col_count]]).items()),
            "model": klass_info["model"],
            "start": start,
            "end": end,
            "init_list": [column[0].target.attname for column in select[start:end]],
            "populators": get_related_populators(klass_info, select, queryset.db),
            # {name: column}: annotations, set on the instance as the ORM sets them
            "annotations": list(compiler.annotation_col_map.items()),
            "pk": pk,
            "params": list(params),
            "at": at,
            "width": len(select),  # the statement's columns
        }

    def first(self, *values: Any) -> Any:
        """The row as a model instance (its related rows attached), or None. `values`: the primary key,
        or one value per placeholder."""
        if connection.vendor != "postgresql":
            return self._build(*values).first()
        rows = _run(self._plan["sql"], self._params(values))
        return self._instance(list(rows[0])) if rows else None

    def _params(self, values: tuple[Any, ...]) -> list[Any]:
        """The statement's parameters with `values` in their places."""
        plan = self._plan
        if self._placeholders is None:
            (pk,) = values
            values = (plan["pk"].get_db_prep_value(plan["pk"].to_python(pk), connection),)
        elif len(values) != len(self._placeholders):
            raise TypeError(f"this read takes {len(self._placeholders)} values, not {len(values)}")
        params = plan["params"].copy()
        for position, value in zip(plan["at"], values):
            params[position] = value
        return params

    def _instance(self, row: list[Any]) -> Any:
        """A row of the statement as the ORM makes it a model instance."""
        plan = self._plan
        for position, (converters, expression) in plan["converters"]:
            value = row[position]
            for converter in converters:
                value = converter(value, expression, connection)
            row[position] = value
        instance = plan["model"].from_db(connection.alias, plan["init_list"], row[plan["start"] : plan["end"]])
        for populator in plan["populators"]:
            populator.populate(row, instance)
        for name, position in plan["annotations"]:
            setattr(instance, name, row[position])
        return instance


class PreparedPair:
    """Two prepared reads in ONE statement: `outer`'s row and, beside it, `inner`'s row (by values of its
    own, whatever the outer row holds: `LEFT JOIN LATERAL … ON true`). Both are read in one snapshot, as
    fresh as two statements would read them. `first(outer_values, inner_values)`: (outer instance or
    None, inner instance or None) — the inner one only when the outer row exists."""

    def __init__(self, outer: PreparedRead, inner: PreparedRead) -> None:
        self.outer = outer
        self.inner = inner

    @functools.cached_property
    def _sql(self) -> str:
        return f"SELECT * FROM ({self.outer._plan['sql']}) AS o LEFT JOIN LATERAL ({self.inner._plan['sql']}) AS i ON true"

    def first(self, outer_values: tuple[Any, ...], inner_values: tuple[Any, ...]) -> tuple[Any, Any]:
        if connection.vendor != "postgresql":
            return self.outer.first(*outer_values), self.inner.first(*inner_values)
        rows = _run(self._sql, [*self.outer._params(outer_values), *self.inner._params(inner_values)])
        if not rows:
            return None, None
        row, width = list(rows[0]), self.outer._plan["width"]
        inner = row[width:]
        found = self.inner._instance(inner) if any(value is not None for value in inner) else None
        return self.outer._instance(row[:width]), found


def _run(sql: str, params: list[Any]) -> list[tuple[Any, ...]]:
    """`sql` as a prepared statement on the request's connection; its rows. Recorded where Django records
    its own statements."""
    connection.ensure_connection()
    raw = connection.connection
    if raw.prepare_threshold is None:
        # Django turns psycopg's preparing off (its own cursors bind on the client and never
        # prepare): on, but never by count — only what is asked for with `prepare=True`.
        raw.prepare_threshold = NEVER_BY_COUNT
    started = time.monotonic()
    # (errors as Django raises them: django.db.OperationalError for a database gone away, and so on)
    with connection.wrap_database_errors, psycopg.Cursor(raw) as cursor:
        cursor.execute(sql, params, prepare=True)
        rows = cursor.fetchall()
    if connection.queries_logged:
        connection.queries_log.append(
            {"sql": sql % tuple(f"'{param}'" for param in params), "time": f"{time.monotonic() - started:.3f}"}
        )
    return rows
