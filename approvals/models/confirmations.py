"""Requests for a human (a call to approve, a question to answer), their states and allowed moves,
the answers approvers gave, the append-only trail of events, vendor callbacks already handled, and the
outbox of work to do outside the database."""

from __future__ import annotations

import uuid

from django.db import models
from django.db.models import Q

from approvals.models.agents import Agent, Channel
from approvals.types import RequestKind, RiskLevel, Status

FINAL_STATUSES = frozenset({Status.APPROVED, Status.REJECTED, Status.EXPIRED, Status.CANCELLED, Status.ANSWERED})
# The only moves a confirmation request can make; each is one conditional UPDATE.
TRANSITIONS: dict[str, frozenset[str]] = {
    Status.PENDING: frozenset(FINAL_STATUSES),
    Status.APPROVED: frozenset(),
    Status.REJECTED: frozenset(),
    Status.EXPIRED: frozenset(),
    Status.CANCELLED: frozenset(),
    Status.ANSWERED: frozenset(),
}


class ConfirmationRequest(models.Model):
    """A request for a human: a tool call to approve or reject, or a question to answer (`kind`).

    Both share one lifecycle (cards, reminders, escalation, expiry, waiting, audit); a question's
    text is in `reason`, the answer's JSON Schema in `answer_schema`, the answer given in `answer`,
    and what the agent gets if nobody answers in time in `default_answer`.
    """

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    kind = models.CharField(max_length=12, choices=RequestKind.choices, default=RequestKind.CONFIRMATION)
    agent = models.ForeignKey(Agent, on_delete=models.PROTECT, related_name="confirmations")
    session_id = models.CharField(max_length=200, blank=True)
    tool_name = models.CharField(max_length=200)
    tool_args = models.JSONField(default=dict, help_text="As stored: redacted where a redact hook says so.")
    tool_call_id = models.CharField(max_length=200, blank=True)
    user_id = models.CharField(max_length=200, blank=True)
    metadata = models.JSONField(default=dict, blank=True)
    channel = models.ForeignKey(Channel, on_delete=models.PROTECT, related_name="confirmations")
    approvers = models.JSONField(default=list, blank=True)  # channel-native ids; [] = any member
    approvals_required = models.PositiveSmallIntegerField(default=1)
    allow_self_approval = models.BooleanField(default=False)
    status = models.CharField(max_length=12, choices=Status.choices, default=Status.PENDING)
    reason = models.TextField(blank=True, help_text="Why the call was gated.")
    hook_name = models.CharField(max_length=100, blank=True)
    config_version = models.PositiveIntegerField(default=0)
    # Channel-qualified: `slack:U…`, `feishu:ou_…`, `web:<username>`, `admin:<username>`,
    # `gateway` (expiry, undeliverable card), `agent:<name>` (the agent's cancel).
    decided_by = models.CharField(max_length=200, blank=True)
    decided_by_name = models.CharField(max_length=200, blank=True, help_text="The decider's display name.")
    decided_at = models.DateTimeField(null=True, blank=True)
    decision_reason = models.TextField(blank=True)
    # Edit, then approve (docs/approving.md): the argument paths an approver may change (fixed
    # when the request is made: the gate's `allow_edit`, minus masked values), and what they set.
    editable_paths = models.JSONField(default=list, blank=True)
    # {path: JSON type} the gate declares for an edited value (`edit_types`); any other editable
    # path keeps the JSON type of the value it replaces (`approvals.arguments.edit_value`).
    edit_types = models.JSONField(default=dict, blank=True)
    arg_edits = models.JSONField(
        default=dict, blank=True, help_text="{path: new value}: applied over the agent's own arguments."
    )
    approved_args = models.JSONField(
        null=True, blank=True, help_text="The arguments approved, as stored (redacted); null if not edited."
    )
    # Approve for a scope: the grants the gate offers on this request's card (`grants:`).
    grant_options = models.JSONField(default=list, blank=True)
    # A keyed hash of the arguments the call would run with (a grant for "the same arguments").
    args_fingerprint = models.CharField(max_length=64, blank=True)
    # Calls of one turn: the request whose card lists this one (null: it has its own card).
    turn_id = models.CharField(max_length=200, blank=True)
    batch_lead = models.ForeignKey(
        "self", on_delete=models.SET_NULL, null=True, blank=True, related_name="batch_members"
    )
    expires_at = models.DateTimeField(null=True, blank=True)
    on_timeout = models.CharField(max_length=5, choices=[("deny", "deny"), ("allow", "allow")], default="deny")
    remind_at = models.DateTimeField(null=True, blank=True)
    warn_at = models.DateTimeField(null=True, blank=True, help_text="When to warn the approvers of the deadline.")
    escalate_at = models.DateTimeField(null=True, blank=True)
    escalate_channel = models.ForeignKey(
        Channel, on_delete=models.PROTECT, null=True, blank=True, related_name="escalated_confirmations"
    )
    escalate_approvers = models.JSONField(default=list, blank=True)
    # The people a gate's `group:` / `person:` approvers named, and the stand-ins of everyone named,
    # as they were when the request was made (`selectors.approver_routing`):
    # {"people": {person key: name}, "stand_ins": {delegate key: {"for": key, "name": name, "until": iso}},
    #  "entries": the gate's approvers as given}. Who of them still decides is read at the click (`approvals.selectors.standing`).
    approver_people = models.JSONField(default=dict, blank=True)
    escalate_approver_people = models.JSONField(default=dict, blank=True)
    escalated_at = models.DateTimeField(null=True, blank=True)
    callback_url = models.URLField(max_length=2000, blank=True)
    # How risky the call is, as its gate or policy rated it (docs/policies.md, "Risk"): shown, routed, signed.
    risk = models.CharField(max_length=6, choices=RiskLevel.choices, default=RiskLevel.MEDIUM)
    # Questions (kind=question): the answer's schema (gateway_contract.answers), the answer, the default on expiry.
    answer_schema = models.JSONField(null=True, blank=True)
    answer = models.JSONField(null=True, blank=True)
    default_answer = models.JSONField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    # HMAC-SHA256 under the audit key of the fields that decide (`approvals.audit.SIGNED`), written with
    # them by the service that changes them; an agent is answered only from a row whose MAC verifies.
    decision_mac = models.CharField(max_length=100, blank=True, editable=False)

    class Meta:
        ordering = ["-created_at"]
        # Every index is paid for on each request created and each decision (a decision changes
        # `status`, so no update is HOT): these are the ones a query needs (docs/architecture.md).
        indexes = [
            # the expiry sweep: pending rows by deadline
            models.Index(fields=["expires_at"], condition=Q(status="pending"), name="cr_pending_expiry"),
            # the inbox (pending, oldest first) and the timers' scans of what is pending
            models.Index(fields=["created_at"], condition=Q(status="pending"), name="cr_pending_created"),
            # the timers, and whether beat's tick may rest (selectors.nothing_due_before): only rows that have
            # the timer are in each, so a request without one pays nothing for them
            models.Index(
                fields=["remind_at"], condition=Q(status="pending", remind_at__isnull=False), name="cr_pending_remind"
            ),
            models.Index(fields=["warn_at"], condition=Q(status="pending", warn_at__isnull=False), name="cr_pending_warn"),
            models.Index(
                fields=["escalate_at"],
                condition=Q(status="pending", escalate_at__isnull=False, escalated_at__isnull=True),
                name="cr_pending_escalate",
            ),
            # the admin's filters and lookups (plain b-trees: no `_like` twins, nothing uses LIKE)
            models.Index(fields=["session_id"], name="cr_session"),
            models.Index(fields=["tool_name"], name="cr_tool_name"),
            models.Index(fields=["user_id"], name="cr_user"),
            # a call of a turn that already has a pending request joins it (grants wait)
            models.Index(
                fields=["agent", "session_id", "turn_id"], condition=Q(status="pending"), name="cr_pending_turn"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.tool_name} [{self.status}] {self.id}"

    @property
    def is_final(self) -> bool:
        return self.status in FINAL_STATUSES

    @property
    def edited(self) -> bool:
        return bool(self.arg_edits)


class ApproverResponse(models.Model):
    """One person's answer. Unique per person (`selectors.person_of`): a second click changes nothing,
    from the same identity or from another identity of the same person (`web:carol`, `admin:carol`)."""

    confirmation = models.ForeignKey(ConfirmationRequest, on_delete=models.CASCADE, related_name="responses")
    approver = models.CharField(max_length=200)  # channel-qualified, like `decided_by`
    # The person behind `approver`: what a quorum counts once (`user:<id>` for a Django user, else the id).
    person = models.CharField(max_length=200)
    approver_name = models.CharField(max_length=200, blank=True)
    # A stand-in's answer (docs/approving.md, "Stand-ins"): the person key and name of whom it was given for.
    on_behalf_of = models.CharField(max_length=200, blank=True)
    on_behalf_of_name = models.CharField(max_length=200, blank=True)
    decision = models.CharField(
        max_length=8, choices=[("approve", "approve"), ("reject", "reject"), ("answer", "answer")]
    )
    reason = models.TextField(blank=True)
    channel = models.CharField(max_length=64, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    # HMAC-SHA256 under the audit key of the fields that decide (`approvals.audit.SIGNED`), written with
    # them by the service that changes them; an agent is answered only from a row whose MAC verifies.
    decision_mac = models.CharField(max_length=100, blank=True, editable=False)

    class Meta:
        ordering = ["created_at"]
        constraints = [
            models.UniqueConstraint(fields=["confirmation", "person"], name="uniq_response_per_person")
        ]


class EventKind(models.TextChoices):
    CREATED = "created"
    CARD_POSTED = "card_posted"
    CARD_FAILED = "card_failed"
    CARD_UPDATED = "card_updated"
    RESPONSE = "response"
    APPROVED = "approved"
    REJECTED = "rejected"
    EXPIRED = "expired"
    CANCELLED = "cancelled"
    ANSWERED = "answered"
    REFUSED_CLICK = "refused_click"
    LATE_CLICK = "late_click"
    REMINDED = "reminded"
    ESCALATED = "escalated"
    WEBHOOK_SENT = "webhook_sent"
    WEBHOOK_FAILED = "webhook_failed"
    WARNED = "warned"
    GRANTED = "granted"
    JOINED_TURN = "joined_turn"


class ConfirmationEvent(models.Model):
    """The append-only trail of one request."""

    confirmation = models.ForeignKey(ConfirmationRequest, on_delete=models.CASCADE, related_name="events")
    kind = models.CharField(max_length=20, choices=EventKind.choices)
    actor = models.CharField(max_length=200, blank=True)
    channel = models.CharField(max_length=64, blank=True)
    message = models.TextField(blank=True)
    data = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["created_at", "id"]

    def __str__(self) -> str:
        return f"{self.kind} {self.actor}".strip()


class CallbackReceipt(models.Model):
    """Vendor event ids already handled, so a redelivered callback changes nothing."""

    channel = models.CharField(max_length=64)
    key = models.CharField(max_length=200)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["channel", "key"], name="uniq_callback_receipt")]


class OutboxKind(models.TextChoices):
    CARD = "card"  # post a card
    UPDATE = "update"  # redraw every posted card of the request
    REMIND = "remind"  # re-ping approvers
    WEBHOOK = "webhook"  # POST the final decision to the agent's callback_url
    DIGEST = "digest"  # post a digest message (`Outbox.digest`)
    DIGEST_UPDATE = "digest_update"  # redraw a posted digest message


class OutboxStatus(models.TextChoices):
    PENDING = "pending"
    SENT = "sent"
    FAILED = "failed"
    # A card kept for its channel's digest (docs/policies.md, "Risk"), never delivered on its own; once
    # gathered, DIGESTED (its `digest` says which message shows it; none: decided before any did).
    HELD = "held"
    DIGESTED = "digested"


class Digest(models.Model):
    """One digest message: the calls of a channel gathered together (docs/policies.md, "Risk"), in the order
    it lists them. Its "Approve these N" decides only calls of `shown_ids` — what the message showed."""

    channel = models.ForeignKey(Channel, on_delete=models.PROTECT, related_name="digests")
    shown_ids = models.JSONField(default=list, help_text="The requests this digest lists, in order (uuid text).")
    message_ref = models.JSONField(null=True, blank=True)  # where the message is, once posted
    created_at = models.DateTimeField(auto_now_add=True)
    posted_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        count = len(self.shown_ids)
        return f"digest {self.pk} → {self.channel.name} ({count} call{'' if count == 1 else 's'})"


class Outbox(models.Model):
    """Work to do outside the database, written in the same transaction as the change that needs it."""

    confirmation = models.ForeignKey(ConfirmationRequest, on_delete=models.CASCADE, related_name="outbox")
    channel = models.ForeignKey(Channel, on_delete=models.PROTECT, null=True, blank=True)
    kind = models.CharField(max_length=16, choices=OutboxKind.choices)
    dedupe_key = models.CharField(max_length=200, unique=True)
    status = models.CharField(max_length=8, choices=OutboxStatus.choices, default=OutboxStatus.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    next_attempt_at = models.DateTimeField(null=True, blank=True)
    locked_until = models.DateTimeField(null=True, blank=True)
    # The PostgreSQL backend (pid) of the session that holds the lease: a worker that dies loses its session,
    # and with it the lease, before `locked_until` (approvals.services.delivery).
    locked_by = models.IntegerField(null=True, blank=True)
    last_error = models.TextField(blank=True)
    message_ref = models.JSONField(null=True, blank=True)  # Slack channel+ts, Feishu message_id…
    payload = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    sent_at = models.DateTimeField(null=True, blank=True)
    # A card gathered into a digest (status DIGESTED), or the digest a DIGEST / DIGEST_UPDATE row posts or
    # redraws (its `confirmation`: the first call the digest shows, for the row's history).
    digest = models.ForeignKey(Digest, on_delete=models.CASCADE, null=True, blank=True, related_name="outbox")

    class Meta:
        verbose_name_plural = "outbox"
        indexes = [
            models.Index(fields=["status", "next_attempt_at"], name="outbox_due"),
            # the digest tick: a channel's held cards, oldest first
            models.Index(fields=["channel", "created_at"], condition=Q(status="held"), name="outbox_held"),
        ]

    def __str__(self) -> str:
        return f"{self.kind} → {self.channel or 'webhook'} [{self.status}]"
