"""The hooks' own durable state (read and written only through `hooks.state`)."""

from __future__ import annotations

from django.db import models


class HookState(models.Model):
    """Small per-agent state that hooks keep between calls: counters (rate limits,
    turn limits), what was injected in a session, cached tool results, and what
    outer levels said about a session.

    Keyed by the agent's name: hooks know an agent by name (`HookContext.agent`)
    and nothing of the gateway's own records. Counters change with one
    conditional statement (`counter < limit`), so they are exact under concurrency.
    """

    agent = models.CharField(max_length=64)
    scope = models.CharField(max_length=200)  # e.g. "rate_limit:<hook>", "session:<id>"
    key = models.CharField(max_length=200)
    counter = models.IntegerField(default=0)
    value = models.JSONField(null=True, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name = "hook state"
        constraints = [models.UniqueConstraint(fields=["agent", "scope", "key"], name="uniq_hooks_state")]
        # the purge of expired state (`hooks.state.purge_expired`)
        indexes = [models.Index(fields=["expires_at"], name="hooks_state_expiry")]

    def __str__(self) -> str:
        return f"{self.agent} {self.scope} {self.key}"
