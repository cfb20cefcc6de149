"""Agents' API keys: created (shown once, stored hashed), revoked, and marked as used."""

from __future__ import annotations

import datetime as dt
import secrets

from django.utils import timezone

from approvals.models import Agent, ApiKey


def api_key_create(*, agent: Agent, name: str = "") -> tuple[ApiKey, str]:
    """Create a key; the raw key is returned once and only its hash is kept."""
    raw = ApiKey.PREFIX + secrets.token_urlsafe(32)
    key = ApiKey.objects.create(agent=agent, name=name, key_prefix=raw[:10], key_hash=ApiKey.hash_key(raw))
    return key, raw


def api_key_revoke(*, api_key: ApiKey) -> None:
    ApiKey.objects.filter(pk=api_key.pk, revoked_at__isnull=True).update(revoked_at=timezone.now())


def api_key_touch(*, api_key: ApiKey) -> None:
    """Record use, at most once a minute per key (keeps writes off the hot path)."""
    now = timezone.now()
    if api_key.last_used_at is None or now - api_key.last_used_at > dt.timedelta(minutes=1):
        ApiKey.objects.filter(pk=api_key.pk).update(last_used_at=now)
        api_key.last_used_at = now
