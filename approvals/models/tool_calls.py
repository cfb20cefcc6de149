"""Every call an agent asked about (`ToolCall`), and the grants ("approve for a scope") that allow
later calls without asking."""

from __future__ import annotations

import uuid

from django.db import models
from django.db.models import Q

from approvals.models.agents import Agent
from approvals.models.confirmations import ConfirmationRequest
from hooks.base import grant_label


class ToolCall(models.Model):
    """Every pre-tool-use call, with each hook's decision, and its completion."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    agent = models.ForeignKey(Agent, on_delete=models.PROTECT, related_name="tool_calls")
    session_id = models.CharField(max_length=200, blank=True)
    turn_id = models.CharField(max_length=200, blank=True)
    tool_call_id = models.CharField(max_length=200, blank=True)
    tool_name = models.CharField(max_length=200)
    tool_args = models.JSONField(default=dict, help_text="As stored: redacted where a redact hook says so.")
    user_id = models.CharField(max_length=200, blank=True)
    metadata = models.JSONField(default=dict, blank=True)
    decision = models.CharField(max_length=8)  # allow | deny | pending | skip
    reason = models.TextField(blank=True)
    decided_by_hook = models.CharField(max_length=100, blank=True)
    hook_decisions = models.JSONField(default=list)
    config_version = models.PositiveIntegerField(default=0)
    confirmation = models.OneToOneField(
        ConfirmationRequest, on_delete=models.SET_NULL, null=True, blank=True, related_name="tool_call"
    )
    grant = models.ForeignKey(
        "Grant", on_delete=models.PROTECT, null=True, blank=True, related_name="tool_calls",
        help_text="The grant that allowed this call without asking.",
    )
    idempotency_key = models.CharField(max_length=255, null=True, blank=True)
    request_fingerprint = models.CharField(max_length=64, blank=True)
    response = models.JSONField(default=dict, blank=True)  # the answer first given (args as the agent got them)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    # completion (post-tool-use)
    outcome = models.CharField(max_length=16, blank=True)  # success | error
    result = models.JSONField(null=True, blank=True)
    ran_args = models.JSONField(
        null=True, blank=True, help_text="The arguments post-tool-use reported it ran with (redacted); null if not said."
    )
    result_size = models.PositiveIntegerField(null=True, blank=True)
    duration_ms = models.PositiveIntegerField(null=True, blank=True)
    completed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["agent", "idempotency_key"],
                condition=Q(idempotency_key__isnull=False),
                name="uniq_toolcall_idempotency_key",
            )
        ]
        # Each is paid for on every allowed call: the admin's filters and post-tool-use's lookup by
        # the agent's own call id (plain b-trees: no `_like` twins, nothing uses LIKE).
        indexes = [
            models.Index(fields=["session_id"], name="tc_session"),
            models.Index(fields=["tool_call_id"], name="tc_tool_call_id"),
            models.Index(fields=["tool_name"], name="tc_tool_name"),
        ]

    def __str__(self) -> str:
        return f"{self.tool_name} → {self.decision}"


class GrantScope(models.TextChoices):
    SESSION = "session"  # the rest of the agent's session
    MINUTES = "minutes"  # a number of minutes from the approval


class Grant(models.Model):
    """An approver's "approve for a scope": later calls inside it are allowed without asking.

    The scope is the agent and session, the person the approved call was made for
    (`user_id`: a grant for one user never covers another's call, and one made
    without a user covers only calls without one), the tool and the gate that
    asked, and either the same arguments (`args_fingerprint`) or any (`""`); it
    lasts for the session or until `expires_at`. Using one is a conditional
    UPDATE (`uses`), revoking one too (`revoked_at`): a revoked or expired grant
    allows nothing more.
    """

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    agent = models.ForeignKey(Agent, on_delete=models.PROTECT, related_name="grants")
    session_id = models.CharField(max_length=200)
    user_id = models.CharField(
        max_length=200, blank=True, help_text="Whom the approved call was made for: the grant covers their calls only."
    )
    tool_name = models.CharField(max_length=200)
    gate = models.CharField(max_length=100, help_text="The approval gate whose asks this grant answers.")
    args_fingerprint = models.CharField(max_length=64, blank=True, help_text="Empty: any arguments.")
    scope = models.CharField(max_length=8, choices=GrantScope.choices)
    minutes = models.PositiveIntegerField(null=True, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    granted_by = models.CharField(max_length=200)  # channel-qualified, like `decided_by`
    granted_by_name = models.CharField(max_length=200, blank=True)
    channel = models.CharField(max_length=64, blank=True)
    confirmation = models.ForeignKey(ConfirmationRequest, on_delete=models.PROTECT, related_name="grants")
    created_at = models.DateTimeField(auto_now_add=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    revoked_by = models.CharField(max_length=200, blank=True)
    uses = models.PositiveIntegerField(default=0)
    last_used_at = models.DateTimeField(null=True, blank=True)
    # HMAC-SHA256 under the audit key of the fields that decide (`approvals.audit.SIGNED`), written with
    # them by the service that changes them; an agent is answered only from a row whose MAC verifies.
    decision_mac = models.CharField(max_length=100, blank=True, editable=False)

    class Meta:
        ordering = ["-created_at"]
        indexes = [
            # the lookup on the ask path: live grants of one session's tool
            models.Index(
                fields=["agent", "session_id", "tool_name"], condition=Q(revoked_at__isnull=True), name="grant_live"
            )
        ]

    def __str__(self) -> str:
        return f"{self.tool_name} · {self.scope_label}"

    @property
    def scope_label(self) -> str:
        return grant_label({"scope": self.scope, "minutes": self.minutes, "args": "same" if self.args_fingerprint else "any"})
