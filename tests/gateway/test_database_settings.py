"""How the gateway talks to PostgreSQL (docs/operating.md, "Scaling each"): statements sent again and
again on a connection are prepared there (psycopg's own counting, Django's server-side binding);
GATEWAY_DB_PREPARE_AFTER=0 turns that off; connections made outside Django's pool (the LISTEN
connection) are given libpq's parameters only."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from django.conf import settings
from django.db import connection, transaction

from gateway_utils.realtime import conninfo

ROOT = Path(__file__).resolve().parents[2]


def prepared_statements() -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement FROM pg_prepared_statements")
        return [row[0] for row in cursor.fetchall()]


@pytest.mark.django_db(transaction=True)
def test_a_statement_sent_again_and_again_is_prepared_on_its_connection():
    after = settings.DATABASES["default"]["OPTIONS"]["prepare_threshold"]
    assert after == 5  # the default
    probe = f"probe_{uuid.uuid4().hex}"  # a statement no connection was sent before
    statement = f'SELECT "approvals_agent"."id" AS {probe} FROM "approvals_agent" WHERE "approvals_agent"."name" = %s'

    with transaction.atomic(), connection.cursor() as cursor:  # (one connection throughout)
        for _ in range(after - 1):
            cursor.execute(statement, ["nobody"])
        assert not [s for s in prepared_statements() if probe in s]  # not yet: sent fewer times
        cursor.execute(statement, ["nobody"])
        cursor.execute(statement, ["nobody at all"])  # the same statement, another value
        prepared = [s for s in prepared_statements() if probe in s]

    assert len(prepared) == 1, prepared
    assert '"approvals_agent"."name" = $1' in prepared[0]  # the values travel apart from the text


PROBE = """
import django
django.setup()
from django.conf import settings
from django.db import connection
options = settings.DATABASES["default"]["OPTIONS"]
print(options.get("server_side_binding"), options.get("prepare_threshold"))
with connection.cursor() as cursor:
    for _ in range(10):
        cursor.execute("SELECT %s::int", [1])
    cursor.execute("SELECT count(*) FROM pg_prepared_statements")
    print(cursor.fetchone()[0])
"""


def run_with(**env: str) -> subprocess.CompletedProcess[str]:
    """The probe in a process of its own, with `env`, on this test's database."""
    db = connection.settings_dict
    base = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "DJANGO_"))}
    base["DATABASE_URL"] = f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}"
    return subprocess.run(
        [sys.executable, "-c", PROBE], cwd=ROOT, env={**base, "DJANGO_SETTINGS_MODULE": "gateway.settings", **env},
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


@pytest.mark.django_db
def test_gateway_db_prepare_after_sets_the_count_and_zero_turns_preparing_off():
    three, off = run_with(GATEWAY_DB_PREPARE_AFTER="3"), run_with(GATEWAY_DB_PREPARE_AFTER="0")

    assert three.returncode == 0, three.stderr
    assert three.stdout.split() == ["True", "3", "1"]
    assert off.returncode == 0, off.stderr
    assert off.stdout.split() == ["None", "None", "0"]  # Django's default: bound on the client, never prepared


@pytest.mark.django_db
def test_a_negative_gateway_db_prepare_after_is_refused_with_its_name():
    done = run_with(GATEWAY_DB_PREPARE_AFTER="-1")

    assert done.returncode != 0
    assert "GATEWAY_DB_PREPARE_AFTER must be 0 or more, got -1" in done.stderr


def test_the_listen_connection_is_given_libpqs_parameters_only():
    info = conninfo()

    assert "prepare_threshold" not in info  # psycopg's, not libpq's: the connection would be refused
    assert "dbname=" in info and "keepalives=1" in info


@pytest.mark.django_db(transaction=True)
def test_a_long_statement_is_parsed_once_per_process_and_runs_with_each_call_s_values():
    """psycopg keeps its parsing of a statement only up to 4 KB and 50 parameters; the gateway's own long
    statements (a request's creation: ~80 parameters) are kept by its backend (gateway/postgresql/base.py)."""
    statement = "SELECT " + ", ".join(f"%(p{i})s::int" for i in range(80))

    with connection.cursor() as cursor:
        cursor.execute(statement, {f"p{i}": i for i in range(80)})
        assert cursor.fetchone() == tuple(range(80))
        cursor.execute(statement, {f"p{i}": 2 * i for i in range(80)})
        assert cursor.fetchone() == tuple(2 * i for i in range(80))
        first = cursor.cursor._convert_query(statement, {f"p{i}": i for i in range(80)})
        again = cursor.cursor._convert_query(statement, {f"p{i}": -i for i in range(80)})

    assert first._parts is again._parts  # parsed once
    assert first.query == again.query and first.query.startswith(b"SELECT $1::int, $2::int")
    assert first.params != again.params


@pytest.mark.django_db
def test_moments_are_read_by_psycopgs_c_loader_and_come_back_as_djangos_loader_gives_them():
    """Django reads `timestamptz` with its own pure-Python loader; the gateway's backend parses with the C
    one psycopg would have used and sets the same tzinfo (gateway/postgresql/base.py)."""
    import datetime as dt

    from django.db.backends.postgresql.psycopg_any import register_tzloader

    from gateway.postgresql.base import UtcTimestamptzLoader

    values = [
        "2026-11-29 15:53:13.123456+00", "2026-01-02 03:04:05.5+05:30", "1999-12-31 23:59:59-08",
        "2026-03-29 02:30:00 Europe/Berlin", "0001-01-01 00:00:00+00", "9999-12-31 23:59:59.999999+00",
        "2000-02-29 12:00:00+14", "1970-01-01 00:00:00.000001-12",
    ]  # fmt: skip
    statement = "SELECT " + ", ".join(f"%s::timestamptz" for _ in values) + ", NULL::timestamptz"
    with connection.cursor() as cursor:
        assert cursor.cursor.adapters.get_loader(1184, 0) is UtcTimestamptzLoader
        cursor.execute(statement, values)
        ours = cursor.fetchone()
        register_tzloader(dt.timezone.utc, cursor.cursor)  # Django's own, on this cursor only
        cursor.execute(statement, values)
        djangos = cursor.fetchone()

    assert ours == djangos and ours[-1] is None
    assert [v.isoformat() for v in ours[:-1]] == [v.isoformat() for v in djangos[:-1]]
    assert all(v.tzinfo is dt.timezone.utc for v in ours[:-1])


@pytest.mark.django_db
def test_a_moment_read_on_a_connection_whose_time_zone_was_changed_is_still_the_right_moment():
    """Django's loader relabels what psycopg made in the connection's zone as UTC: on a connection someone
    set to another zone, every moment would be off by the zone's offset. The gateway's converts."""
    import datetime as dt

    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL TIME ZONE 'Asia/Kolkata'")
        cursor.execute("SELECT '2026-11-29 12:00:00+00'::timestamptz, '2026-06-01 00:00:00-07'::timestamptz")
        noon, june = cursor.fetchone()

    assert noon == dt.datetime(2026, 11, 29, 12, 0, tzinfo=dt.timezone.utc) and noon.tzinfo is dt.timezone.utc
    assert (noon.hour, june.hour) == (12, 7)
