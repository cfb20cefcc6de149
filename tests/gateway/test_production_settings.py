"""The production settings (docs/operating.md, "Production settings"): `manage.py check --deploy` is
clean when the gateway is configured as the docs say for production (an https public URL, PostgreSQL,
a secret key of its own), and what that turns on does what the docs say behind a TLS proxy."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import django
django.setup()
from django.test import Client
plain, proxied = Client(), Client(headers={"X-Forwarded-Proto": "https"})
login = plain.get("/login/")
print("plain /login/", login.status_code, login.headers.get("Location"))
print("plain /healthz", plain.get("/healthz").status_code)
answer = proxied.get("/login/")
print("proxied /login/", answer.status_code, answer.headers.get("Strict-Transport-Security"))
print("cookie secure", bool(answer.cookies["csrftoken"]["secure"]))
"""


def production_env(tmp_path: Path, **more: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GATEWAY_", "PYTEST_", "DJANGO_"))}
    env.update(
        DJANGO_SETTINGS_MODULE="gateway.settings",
        DATABASE_URL=os.environ["DATABASE_URL"],
        REDIS_URL=os.environ["REDIS_URL"],
        GATEWAY_SECRET_KEY=secrets.token_urlsafe(50),
        GATEWAY_AUDIT_KEY="prod-1:" + secrets.token_urlsafe(48),  # required in production (approvals.E001)
        GATEWAY_PUBLIC_URL="https://gateway.example.com",
        GATEWAY_VAR_DIR=str(tmp_path),
    )
    env.update(more)
    return env


def run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args], check=False, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )


def test_check_deploy_is_clean_with_the_production_settings(tmp_path):
    done = run(production_env(tmp_path), "manage.py", "check", "--deploy", "--fail-level", "WARNING")

    assert done.returncode == 0, done.stdout + done.stderr
    assert "System check identified no issues (0 silenced)." in done.stdout


def test_without_an_https_public_url_check_deploy_says_what_is_missing(tmp_path):
    done = run(
        production_env(tmp_path, GATEWAY_PUBLIC_URL="http://gateway.example.com"),
        "manage.py", "check", "--deploy", "--fail-level", "WARNING",
    )  # fmt: skip

    assert done.returncode != 0
    for check in ("security.W004", "security.W008", "security.W012", "security.W016"):
        assert check in done.stderr


def test_behind_the_tls_proxy_pages_are_https_only_and_the_health_probes_stay_plain(tmp_path):
    done = run(production_env(tmp_path), "-c", PROBE)

    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "plain /login/ 301 https://testserver/login/",
        "plain /healthz 200",
        "proxied /login/ 200 max-age=31536000; includeSubDomains; preload",
        "cookie secure True",
    ]
