"""An installation made by an earlier release upgrades with `manage.py migrate`.

The suite's own database is created at the newest migration; this test makes one at an earlier
state, with a configured channel in it (as a running gateway has), and migrates it forward in a
fresh process — which runs the system checks first, against tables that lack the newer columns.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import psycopg
import pytest
from django.db import connection

ROOT = Path(__file__).resolve().parents[2]
EARLIER = "0010_channel_kinds"  # the migration state of the release before people, teams and the keyed audit


@pytest.fixture
def scratch_database():
    settings = connection.settings_dict
    name = f"gw_upgrade_{uuid.uuid4().hex[:12]}"
    admin = f"host={settings['HOST']} port={settings['PORT']} user={settings['USER']} dbname=postgres"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield f"postgres://{settings['USER']}@{settings['HOST']}:{settings['PORT']}/{name}"
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def manage(database_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings", "DATABASE_URL": database_url}
    return subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )


def test_a_database_of_the_earlier_release_with_a_channel_migrates_to_the_newest(scratch_database):
    earlier = manage(scratch_database, "migrate", "approvals", EARLIER, "--noinput")
    assert earlier.returncode == 0, earlier.stderr
    with psycopg.connect(scratch_database.replace("postgres://", "postgresql://"), autocommit=True) as conn:
        conn.execute(
            "INSERT INTO approvals_channel (name, kind, config, last_error, created_at) VALUES ('web', 'web', '{}', '', now())"
        )

    upgraded = manage(scratch_database, "migrate", "--noinput")

    assert upgraded.returncode == 0, upgraded.stderr
    plan = manage(scratch_database, "migrate", "--check")
    assert plan.returncode == 0, plan.stdout + plan.stderr  # nothing left to apply
