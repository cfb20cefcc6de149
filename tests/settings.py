"""Settings for the test run: the real PostgreSQL and Redis of this machine.

`make test` sets these variables too; they are defaults here so a bare
`pytest` does the same. Point DATABASE_URL / REDIS_URL / CELERY_BROKER_URL
elsewhere to run beside another test run.
"""

import os

os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/gateway")
os.environ.setdefault("REDIS_URL", "redis://127.0.0.1:6379/0")
os.environ.setdefault("CELERY_BROKER_URL", "redis://127.0.0.1:6379/5")
os.environ.setdefault("GATEWAY_VAR_DIR", os.path.join(os.path.dirname(os.path.dirname(__file__)), "var", "test"))
os.environ.setdefault("GATEWAY_PUBLIC_URL", "http://testserver.invalid")
# The tests' fakes (webhook receivers, MCP servers, policy services) listen on loopback.
os.environ.setdefault("GATEWAY_OUTBOUND_ALLOW", "127.0.0.0/8,::1")
# slack-sdk reads proxy variables and ignores NO_PROXY: never proxy our loopback fakes.
for _name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY", "all_proxy"):
    os.environ.pop(_name, None)

from gateway.settings import *  # noqa: E402,F401,F403

# Signing in is not what these tests measure: a fast hasher instead of PBKDF2 (Django testing docs).
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
