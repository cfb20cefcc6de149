"""The gateway's own settings, plus the benchmark's URLs (a minimal view to compare with).

`BENCH_LEND_CHECK` (bench/lend_check.py) puts the server on Django's own PostgreSQL backend instead of the
gateway's, to measure what looking at a pooled connection as it is lent costs: `none` (nothing looked at)
or `round_trip` (psycopg_pool's check, CONN_HEALTH_CHECKS). `poll`, or unset: the gateway as it is."""

import os

from gateway.settings import *  # noqa: F401,F403
from gateway.settings import DATABASES, IS_POSTGRES

ROOT_URLCONF = "bench.urls"

_LEND_CHECK = os.environ.get("BENCH_LEND_CHECK", "poll")
if IS_POSTGRES and _LEND_CHECK in ("none", "round_trip"):
    DATABASES["default"]["ENGINE"] = "django.db.backends.postgresql"
    DATABASES["default"]["CONN_HEALTH_CHECKS"] = _LEND_CHECK == "round_trip"
