"""GATEWAY_OIDC_* (docs/reference/environment.md): sign-in with an identity provider is off unless
configured, and a half-made configuration stops the process naming what is missing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SHOW = (
    "import django, json; django.setup(); from django.conf import settings as s; "
    "print(json.dumps({'on': s.GATEWAY_OIDC_ENABLED, 'backends': s.AUTHENTICATION_BACKENDS, "
    "'token': getattr(s, 'OIDC_OP_TOKEN_ENDPOINT', None), 'groups': s.GATEWAY_OIDC_GROUPS_CLAIM, "
    "'group_ids': s.GATEWAY_OIDC_GROUPS, "
    "'scopes': s.OIDC_RP_SCOPES, 'pkce': s.OIDC_USE_PKCE}))"
)
FULL = {
    "GATEWAY_OIDC_CLIENT_ID": "approval-gateway",
    "GATEWAY_OIDC_CLIENT_SECRET": "s3cret",
    "GATEWAY_OIDC_ISSUER": "https://login.example.com",
    "GATEWAY_OIDC_AUTHORIZATION_ENDPOINT": "https://login.example.com/auth",
    "GATEWAY_OIDC_TOKEN_ENDPOINT": "https://login.example.com/token",
    "GATEWAY_OIDC_USERINFO_ENDPOINT": "https://login.example.com/me",
    "GATEWAY_OIDC_JWKS_ENDPOINT": "https://login.example.com/jwks",
}


def settings_with(tmp_path: Path, **variables: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GATEWAY_OIDC_")}
    env.update(DJANGO_SETTINGS_MODULE="gateway.settings", GATEWAY_VAR_DIR=str(tmp_path), **variables)
    return subprocess.run([sys.executable, "-c", SHOW], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)


def test_it_is_off_unless_configured(tmp_path):
    shown = json.loads(settings_with(tmp_path).stdout)
    assert shown["on"] is False and shown["token"] is None
    assert shown["groups"] == "" and shown["group_ids"] == {}  # the groups claim is not mapped
    assert shown["backends"] == ["gateway.auth_backends.PasswordBackend", "django.contrib.auth.backends.ModelBackend"]


def test_configured_it_is_on_beside_local_passwords(tmp_path):
    shown = json.loads(settings_with(tmp_path, **FULL).stdout)
    assert shown["on"] is True and shown["token"] == "https://login.example.com/token"
    assert shown["backends"] == [
        "channels_ext.web.sign_in.IdentityProviderBackend",
        "gateway.auth_backends.PasswordBackend",
        "django.contrib.auth.backends.ModelBackend",
    ]
    assert shown["groups"] == "" and shown["group_ids"] == {}
    assert shown["scopes"] == "openid email profile" and shown["pkce"] is True


GROUP_IDS = '{"5f2d1c9a-7b3e-4e8a-9c61-2a4f0e7d3b15": "payments", "CN=Research,OU=Groups,DC=corp": "research"}'


def test_listed_group_ids_turn_the_groups_claim_on(tmp_path):
    shown = json.loads(settings_with(tmp_path, **FULL, GATEWAY_OIDC_GROUPS=GROUP_IDS).stdout)
    assert shown["groups"] == "groups"  # the claim's usual name, unless GATEWAY_OIDC_GROUPS_CLAIM says another
    assert shown["group_ids"] == {"5f2d1c9a-7b3e-4e8a-9c61-2a4f0e7d3b15": "payments", "CN=Research,OU=Groups,DC=corp": "research"}
    shown = json.loads(settings_with(tmp_path, **FULL, GATEWAY_OIDC_GROUPS=GROUP_IDS, GATEWAY_OIDC_GROUPS_CLAIM="roles").stdout)
    assert shown["groups"] == "roles"


def test_a_groups_claim_without_the_ids_it_may_name_stops_the_process(tmp_path):
    """The claim's names were taken as group names before: any IdP user who can make a group could make
    one called `payments`. Now the operator lists the ids; a configuration that does not, stops."""
    result = settings_with(tmp_path, **FULL, GATEWAY_OIDC_GROUPS_CLAIM="groups")
    assert result.returncode != 0 and "ImproperlyConfigured" in result.stderr
    assert "GATEWAY_OIDC_GROUPS_CLAIM is set but GATEWAY_OIDC_GROUPS" in result.stderr


def test_a_bad_group_list_stops_the_process_naming_it(tmp_path):
    for bad in ("payments", "[\"a\"]", '{"a": "Payments Approvers"}', '{"": "payments"}', '{"a": 7}'):
        result = settings_with(tmp_path, **FULL, GATEWAY_OIDC_GROUPS=bad)
        assert result.returncode != 0 and "ImproperlyConfigured: GATEWAY_OIDC_GROUPS" in result.stderr, (bad, result.stderr)


def test_a_half_made_configuration_stops_the_process_naming_what_is_missing(tmp_path):
    partial = {k: v for k, v in FULL.items() if k not in ("GATEWAY_OIDC_JWKS_ENDPOINT", "GATEWAY_OIDC_CLIENT_SECRET")}
    result = settings_with(tmp_path, **partial)
    assert result.returncode != 0
    assert "ImproperlyConfigured" in result.stderr
    assert "GATEWAY_OIDC_CLIENT_SECRET, GATEWAY_OIDC_JWKS_ENDPOINT" in result.stderr
