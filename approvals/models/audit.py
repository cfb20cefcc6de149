"""The tamper-evident audit's own rows (docs/audit.md): each agent's chain of entries, its head, and
the checkpoints `purge` cut it at."""

from __future__ import annotations

from django.db import models
from django.db.models import Q
from django.utils import timezone

from approvals.models.agents import Agent
from approvals.models.confirmations import ApproverResponse, ConfirmationEvent, ConfirmationRequest
from approvals.models.tool_calls import Grant, ToolCall


class AuditAction(models.TextChoices):
    ASKED = "asked"  # a ToolCall created (pre-tool-use decided)
    COMPLETED = "completed"  # a ToolCall completed (post-tool-use, or a tool-error that ended it)
    NOTED = "noted"  # a tool-error's hook decisions appended to a ToolCall that stays open
    EVENT = "event"  # a ConfirmationEvent written
    RETAINED = "retained"  # a kept row re-linked by `purge` when its older entries were cut
    RECORDED = "recorded"  # a decision row (request, response, grant) written: created, decided, revoked


class AuditEntry(models.Model):
    """One link of an agent's chain: what one write of a chained row (a tool call, an event, or a
    decision row: request, response, grant) said, hashed.

    `content_hash` is the SHA-256 of the row's canonical content just after the
    write; `entry_hash` is an HMAC-SHA256, under the audit key named `key_id`
    (never stored in the database), of the agent, `seq`, the action, the row,
    `content_hash` and `prev_hash` (the entry before it, or the checkpoint the
    chain was cut at). Append-only: `approvals.services.audit` writes entries,
    `approvals.audit.audit_verify` walks them. The row references carry no
    database constraint on purpose: a row deleted behind the gateway's back must
    leave its entry dangling, for `verify_audit` to name.
    """

    id = models.BigAutoField(primary_key=True)
    agent = models.ForeignKey(Agent, on_delete=models.DO_NOTHING, db_constraint=False, related_name="+")
    seq = models.PositiveBigIntegerField()
    action = models.CharField(max_length=12, choices=AuditAction.choices)
    tool_call = models.ForeignKey(
        ToolCall, on_delete=models.DO_NOTHING, db_constraint=False, db_index=False, null=True, related_name="+"
    )
    event = models.ForeignKey(
        ConfirmationEvent, on_delete=models.DO_NOTHING, db_constraint=False, db_index=False, null=True, related_name="+"
    )
    # the decision rows (their signed fields: `approvals.audit.SIGNED`)
    confirmation = models.ForeignKey(
        ConfirmationRequest, on_delete=models.DO_NOTHING, db_constraint=False, db_index=False, null=True, related_name="+"
    )
    response = models.ForeignKey(
        ApproverResponse, on_delete=models.DO_NOTHING, db_constraint=False, db_index=False, null=True, related_name="+"
    )
    grant = models.ForeignKey(
        Grant, on_delete=models.DO_NOTHING, db_constraint=False, db_index=False, null=True, related_name="+"
    )
    content_hash = models.CharField(max_length=64)
    prev_hash = models.CharField(max_length=64)
    entry_hash = models.CharField(max_length=64)  # HMAC-SHA256 under the audit key `key_id` (docs/audit.md)
    key_id = models.CharField(max_length=32)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        verbose_name_plural = "audit entries"
        constraints = [models.UniqueConstraint(fields=["agent", "seq"], name="uniq_audit_entry_seq")]
        indexes = [
            # verify_audit and purge: the latest entry about each row
            models.Index(fields=["tool_call", "seq"], condition=Q(tool_call__isnull=False), name="audit_entry_tool_call"),
            models.Index(fields=["event", "seq"], condition=Q(event__isnull=False), name="audit_entry_event"),
            models.Index(
                fields=["confirmation", "seq"], condition=Q(confirmation__isnull=False), name="audit_entry_request"
            ),
            models.Index(fields=["response", "seq"], condition=Q(response__isnull=False), name="audit_entry_response"),
            models.Index(fields=["grant", "seq"], condition=Q(grant__isnull=False), name="audit_entry_grant"),
        ]

    def __str__(self) -> str:
        return f"audit {self.agent_id}#{self.seq} {self.action}"


class AuditHead(models.Model):
    """The end of one agent's chain. Every append advances it in the same statement
    (PostgreSQL: `INSERT … ON CONFLICT DO UPDATE`, which locks the row), so two writers
    never fork the chain."""

    agent = models.OneToOneField(
        Agent, on_delete=models.DO_NOTHING, db_constraint=False, primary_key=True, related_name="+"
    )
    seq = models.PositiveBigIntegerField()
    hash = models.CharField(max_length=64)
    prev_hash = models.CharField(max_length=64)

    def __str__(self) -> str:
        return f"audit head {self.agent_id}#{self.seq}"


class AuditCheckpoint(models.Model):
    """Where `purge` cut an agent's chain: entries up to `seq` were removed, `hash` was
    the entry hash at `seq`; `verify_audit` starts the chain from the latest one."""

    agent = models.ForeignKey(Agent, on_delete=models.DO_NOTHING, db_constraint=False, related_name="+")
    seq = models.PositiveBigIntegerField()
    hash = models.CharField(max_length=64)
    cutoff = models.DateTimeField()
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["agent", "seq"], name="uniq_audit_checkpoint_seq")]

    def __str__(self) -> str:
        return f"audit checkpoint {self.agent_id}#{self.seq}"
