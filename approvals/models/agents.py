"""Agents (their hook versions and API keys) and the channels their requests are sent to."""

from __future__ import annotations

import base64
import hashlib
import secrets

from django.db import models

from approvals.models.people import Team, default_team_id
from gateway_contract import CHANNEL_KINDS


def new_webhook_secret() -> str:
    """A Standard Webhooks secret (`whsec_` + base64 of 24 random bytes)."""
    return "whsec_" + base64.b64encode(secrets.token_bytes(24)).decode()


class Agent(models.Model):
    name = models.SlugField(max_length=64, unique=True)
    team = models.ForeignKey(Team, on_delete=models.PROTECT, default=default_team_id, related_name="agents")
    read_only = models.BooleanField(
        default=False, help_text="While on, readonly_guard hooks block this agent's write tools."
    )
    webhook_secret = models.CharField(
        max_length=64,
        default=new_webhook_secret,
        help_text="Signs decision webhooks sent to this agent's callback_url.",
    )
    # Bumped by every change to what a tool call reads of the agent (its keys, its read-only
    # switch, its hooks): a call served from a per-process cache is recorded only if it is still
    # current (approvals.caches).
    generation = models.PositiveBigIntegerField(default=0, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    @property
    def current_config(self) -> AgentConfigVersion | None:
        return self.config_versions.order_by("-version").first()


class AgentConfigVersion(models.Model):
    """One applied version of an agent's hook list. Never edited; a change is a new row."""

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="config_versions")
    version = models.PositiveIntegerField()
    hooks = models.JSONField(default=list)
    source = models.CharField(max_length=200, blank=True)  # "apply_config examples/gateway.yaml", "admin:alice"
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["agent", "-version"]
        constraints = [models.UniqueConstraint(fields=["agent", "version"], name="uniq_agent_config_version")]

    def __str__(self) -> str:
        return f"{self.agent.name} v{self.version}"


class ApiKey(models.Model):
    """An agent's API key. Only a SHA-256 of the secret is stored; the key is shown once."""

    PREFIX = "gw_"

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="api_keys")
    name = models.CharField(max_length=100, blank=True)
    key_prefix = models.CharField(max_length=16, db_index=True)  # shown in the admin to tell keys apart
    key_hash = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name = "API key"

    def __str__(self) -> str:
        return f"{self.key_prefix}… ({self.agent.name})"

    @staticmethod
    def hash_key(raw_key: str) -> str:
        return hashlib.sha256(raw_key.encode()).hexdigest()


class Channel(models.Model):
    name = models.SlugField(max_length=64, unique=True)
    kind = models.CharField(max_length=20, choices=[(k, k) for k in CHANNEL_KINDS])
    team = models.ForeignKey(Team, on_delete=models.PROTECT, default=default_team_id, related_name="channels")
    config = models.JSONField(default=dict, help_text="The channel's keys from the config file (secrets included).")
    last_error = models.TextField(blank=True)
    last_error_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return f"{self.name} ({self.kind})"
