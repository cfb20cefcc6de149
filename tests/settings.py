"""Settings for the test run: the real PostgreSQL and Redis of this machine.

`make test` sets these variables too; they are defaults here so a bare
`pytest` does the same. Point DATABASE_URL / REDIS_URL / CELERY_BROKER_URL
elsewhere to run beside another test run.
"""

import os

import re

os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/gateway")
os.environ.setdefault("REDIS_URL", "redis://127.0.0.1:6379/0")
os.environ.setdefault("CELERY_BROKER_URL", "redis://127.0.0.1:6379/5")
os.environ.setdefault("GATEWAY_VAR_DIR", os.path.join(os.path.dirname(os.path.dirname(__file__)), "var", "test"))
# The workers and beats the tests start (in processes of their own) at the test processes' priority: `make
# test` runs more test processes than the machine has cores, and a worker at the default lower priority
# (GATEWAY_WORKER_NICE, gateway/celery.py) would wait behind them. tests/gateway/test_worker_priority.py
# checks the default.
os.environ.setdefault("GATEWAY_WORKER_NICE", "0")

# Under pytest-xdist (`make test` runs `-n`), worker gwN gets its own test database (pytest-django
# suffixes the name), its own pair of Redis databases, channel-layer prefix and var directory, so
# workers never see each other's cache entries, wake-ups, Celery queue or files.
# Applied once: a process the tests start (`manage.py channel_connections`) inherits the worker's
# environment already set, and must land on the same var dir (its secret key signs the buttons).
_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")
if _WORKER.startswith("gw") and os.environ.get("GATEWAY_TEST_WORKER") != _WORKER:
    os.environ["GATEWAY_TEST_WORKER"] = _WORKER
    _n = int(_WORKER[2:])

    def _redis_db(url: str, db: int) -> str:
        return re.sub(r"/\d+$", "", url.rstrip("/")) + f"/{db}"

    os.environ["REDIS_URL"] = _redis_db(os.environ["REDIS_URL"], 6 + 2 * _n)
    if os.environ["CELERY_BROKER_URL"].startswith("redis"):
        os.environ["CELERY_BROKER_URL"] = _redis_db(os.environ["CELERY_BROKER_URL"], 7 + 2 * _n)
    os.environ["GATEWAY_CHANNEL_PREFIX"] = f"gateway-{_WORKER}"
    os.environ["GATEWAY_VAR_DIR"] = os.path.join(os.environ["GATEWAY_VAR_DIR"], _WORKER)
os.environ.setdefault("GATEWAY_PUBLIC_URL", "http://testserver.invalid")
# The audit is signed with a test key (what production must set; tests/audit/test_keys.py tries others).
os.environ.setdefault("GATEWAY_AUDIT_KEY", "test-2026:a test audit key, at least thirty-two characters long")
# The tests' fakes (webhook receivers, MCP servers, policy services) listen on loopback.
os.environ.setdefault("GATEWAY_OUTBOUND_ALLOW", "127.0.0.0/8,::1")
# Beat's tick never rests in tests (a rest key left by one test would hold the ticks of a beat another test
# starts, in this worker's broker database); tests/approvals/test_tick_rest.py turns it on where it is tested.
os.environ.setdefault("GATEWAY_TICK_REST_SECONDS", "0")
# slack-sdk reads proxy variables and ignores NO_PROXY: never proxy our loopback fakes.
for _name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY", "all_proxy"):
    os.environ.pop(_name, None)

from gateway.settings import *  # noqa: E402,F401,F403
from gateway.settings import DATABASES, POSTGRES_ENGINE  # noqa: E402

# The tests' in-process worker (the `celery_worker` fixture) stops only once its BRPOP returns: with the
# production's idle poll of 5 s (gateway/settings.py) every test with a worker would wait 5 s at teardown.
if "polling_interval" in CELERY_BROKER_TRANSPORT_OPTIONS:  # noqa: F405
    CELERY_BROKER_TRANSPORT_OPTIONS["polling_interval"] = 0.5  # noqa: F405

# Tables emptied after a transactional test by DELETE, not TRUNCATE (tests/postgresql/base.py says why).
if DATABASES["default"]["ENGINE"] == POSTGRES_ENGINE:
    DATABASES["default"]["ENGINE"] = "tests.postgresql"

# Signing in is not what these tests measure: a fast hasher instead of PBKDF2 (Django testing docs).
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
