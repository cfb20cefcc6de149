"""Agents' API keys: created (shown once, stored hashed), revoked, and marked as used."""

from __future__ import annotations

import datetime as dt
import secrets

from django.db import transaction
from django.utils import timezone

from approvals.caches import cache, config_changed
from approvals.models import Agent, ApiKey

TOUCH_EVERY = dt.timedelta(minutes=1)


def api_key_create(*, agent: Agent, name: str = "") -> tuple[ApiKey, str]:
    """Create a key; the raw key is returned once and only its hash is kept."""
    raw = ApiKey.PREFIX + secrets.token_urlsafe(32)
    key = ApiKey.objects.create(agent=agent, name=name, key_prefix=raw[:10], key_hash=ApiKey.hash_key(raw))
    return key, raw


@transaction.atomic
def api_key_revoke(*, api_key: ApiKey) -> None:
    """Revoke a key; every server process refuses it from the commit on."""
    ApiKey.objects.filter(pk=api_key.pk, revoked_at__isnull=True).update(revoked_at=timezone.now())
    config_changed(api_key.agent_id)


def api_key_touch(*, api_key: ApiKey) -> None:
    """Record use, at most once a minute per key (keeps writes off the hot path)."""
    now = timezone.now()
    if api_key.last_used_at is None or now - api_key.last_used_at > TOUCH_EVERY:
        ApiKey.objects.filter(pk=api_key.pk).update(last_used_at=now)
        api_key.last_used_at = now


def api_key_touch_by_id(*, key_id: int) -> None:
    """Record use of a key known only by id, at most once a minute per key and process."""
    now = timezone.now()
    last = cache.last_used.get(key_id)
    if last is None or now - last > TOUCH_EVERY:
        cache.last_used[key_id] = now
        ApiKey.objects.filter(pk=key_id).update(last_used_at=now)
