"""Agents and their keys: whose key a presented secret is, and an agent's current hooks (both cached per
process while it hears changes: `approvals.caches`)."""

from __future__ import annotations

import functools
import json

from approvals.caches import KeyHolder, cache
from approvals.models import Agent, ApiKey
from hooks.base import Hook
from hooks.registry import build, validate_agent_hooks


def api_key_lookup(*, raw_key: str) -> ApiKey | None:
    """The live key matching a presented secret, with its agent; None if unknown or revoked."""
    if not raw_key:
        return None
    return (
        ApiKey.objects.select_related("agent")
        .filter(key_hash=ApiKey.hash_key(raw_key), revoked_at__isnull=True)
        .first()
    )


def key_holder(*, raw_key: str) -> KeyHolder | None:
    """Whose live key this is (cached per process while it hears changes); None if unknown or revoked."""
    if not raw_key:
        return None

    def read() -> KeyHolder | None:
        key = api_key_lookup(raw_key=raw_key)
        if key is None:
            return None
        return KeyHolder(key.pk, key.agent_id, key.agent.name, key.agent.read_only, key.agent.generation, key.agent.team_id)

    return cache.key_holder(ApiKey.hash_key(raw_key), read)


def agent_hooks(*, agent: Agent) -> tuple[int, list[Hook]]:
    """The agent's current hook version and its built hooks, as of `agent.generation` (cached per
    process while it hears changes, and built once per content)."""

    def current() -> tuple[int, tuple[Hook, ...]]:
        found = agent.config_versions.order_by("-version").values_list("version", "hooks").first()
        if found is None:
            return 0, ()
        version, hooks = found
        return version, _built_hooks(json.dumps(hooks, sort_keys=True))

    def read() -> tuple[int, int, tuple[Hook, ...]]:
        generation = Agent.objects.filter(pk=agent.pk).values_list("generation", flat=True).first()
        return (generation, *current())

    if not cache.active():
        version, hooks = current()
        return version, list(hooks)
    entry = cache.agent_hooks(agent.pk, read)
    if entry[0] != agent.generation:  # cached under another generation than the caller's agent
        cache.forget(f"agent:{agent.pk}")
        entry = read()
    _generation, version, hooks = entry
    return version, list(hooks)


@functools.lru_cache(maxsize=512)
def _built_hooks(hooks_json: str) -> tuple[Hook, ...]:
    """Hooks built from a stored hook list; cached by content, so a new version builds anew."""
    # Stored lists were checked when applied; the outbound guard checks each call they make.
    return tuple(build(validate_agent_hooks(json.loads(hooks_json), check_outbound=False)))
