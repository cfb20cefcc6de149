"""The gateway's records.

State changes never go through `save()`: every transition is one conditional
UPDATE in `approvals.services` (see `TRANSITIONS`). Audit rows (events,
responses, tool calls) are append-only, and every write of an event or a tool
call is a link of its agent's tamper-evident chain (`AuditEntry`, docs/audit.md).
The hooks keep their own small state in `hooks.models`.
"""

from __future__ import annotations

import base64
import hashlib
import secrets
import uuid

from django.conf import settings
from django.db import models
from django.db.models import F, Q
from django.db.models.functions import Lower
from django.utils import timezone

from approvals.types import RequestKind, Status
from gateway_contract import CHANNEL_KINDS
from hooks.base import grant_label


def new_webhook_secret() -> str:
    """A Standard Webhooks secret (`whsec_` + base64 of 24 random bytes)."""
    return "whsec_" + base64.b64encode(secrets.token_bytes(24)).decode()


# The team every agent and channel belongs to unless the config file names another: a single-team
# install needs no configuration (docs/approving.md, "Teams").
DEFAULT_TEAM = "default"


class Team(models.Model):
    """Who sees and decides what: agents, channels and groups belong to one team, and a person sees and
    decides only the requests of their teams' agents, on the page, in the inbox and in the admin
    (superusers: all). A user is a member directly, through a group of the team (`PeopleGroup.team`:
    the identity provider's groups claim fills the groups), or — on a team open to everyone, as the
    default team starts — by signing in."""

    name = models.SlugField(max_length=64, unique=True)
    everyone = models.BooleanField(
        default=False,
        help_text="Every signed-in user is a member (the default team of a single-team install starts so).",
    )
    members = models.ManyToManyField(settings.AUTH_USER_MODEL, blank=True, related_name="gateway_teams")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class IdentityProviderLink(models.Model):
    """A user signed in through the organisation's identity provider (OpenID Connect): the IdP's
    subject, which never changes, not the email, which may (docs/approving.md, "Sign-in")."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="idp_links")
    issuer = models.CharField(max_length=500)
    subject = models.CharField(max_length=255)
    email = models.EmailField(blank=True, help_text="As the identity provider last said.")
    created_at = models.DateTimeField(auto_now_add=True)
    last_signed_in_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name = "identity provider link"
        constraints = [models.UniqueConstraint(fields=["issuer", "subject"], name="uniq_idp_subject")]

    def __str__(self) -> str:
        return f"{self.subject} @ {self.issuer}"


def default_team_id() -> int:
    """The default team's id (made on first use, open to everyone): what a new agent or channel gets."""
    team, _ = Team.objects.get_or_create(name=DEFAULT_TEAM, defaults={"everyone": True})
    return team.pk


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
    # as they were when the request was made (`selectors.approver_people`):
    # {"people": {person key: name}, "stand_ins": {delegate key: {"for": key, "name": name, "until": iso}},
    #  "entries": the gate's approvers as given}. Who of them still decides is read at the click (`approvals.standing`).
    approver_people = models.JSONField(default=dict, blank=True)
    escalate_approver_people = models.JSONField(default=dict, blank=True)
    escalated_at = models.DateTimeField(null=True, blank=True)
    callback_url = models.URLField(max_length=2000, blank=True)
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


class OutboxKind(models.TextChoices):
    CARD = "card"  # post a card
    UPDATE = "update"  # redraw every posted card of the request
    REMIND = "remind"  # re-ping approvers
    WEBHOOK = "webhook"  # POST the final decision to the agent's callback_url


class OutboxStatus(models.TextChoices):
    PENDING = "pending"
    SENT = "sent"
    FAILED = "failed"


class Outbox(models.Model):
    """Work to do outside the database, written in the same transaction as the change that needs it."""

    confirmation = models.ForeignKey(ConfirmationRequest, on_delete=models.CASCADE, related_name="outbox")
    channel = models.ForeignKey(Channel, on_delete=models.PROTECT, null=True, blank=True)
    kind = models.CharField(max_length=8, choices=OutboxKind.choices)
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

    class Meta:
        verbose_name_plural = "outbox"
        indexes = [models.Index(fields=["status", "next_attempt_at"], name="outbox_due")]

    def __str__(self) -> str:
        return f"{self.kind} → {self.channel or 'webhook'} [{self.status}]"


# --------------------------------------------------------------------------- the tamper-evident audit (docs/audit.md)


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


# --------------------------------------------------------------------------- people (docs/approving.md, "People")


class Person(models.Model):
    """Someone who approves, whichever identities they answer under: a Django user, chat ids, an e-mail.

    Its key everywhere a quorum counts people is `person:<id>` (`selectors.person_of`).
    """

    display_name = models.CharField(max_length=200)
    email = models.EmailField(blank=True, help_text="Used to find the person's chat accounts and for `person:EMAIL`.")
    active = models.BooleanField(default=True, help_text="An inactive person is not routed requests and names no one.")
    user = models.OneToOneField(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="person",
        help_text="Their Django user: the approval page and the admin.",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["display_name"]
        verbose_name_plural = "people"
        constraints = [
            # one person per address, whatever its case (`person:EMAIL` names exactly one)
            models.UniqueConstraint(Lower("email"), condition=~Q(email=""), name="uniq_person_email")
        ]

    def __str__(self) -> str:
        return f"{self.display_name} <{self.email}>" if self.email else self.display_name

    @property
    def key(self) -> str:
        return f"person:{self.pk}"


class IdentitySource(models.TextChoices):
    ADMIN = "admin"  # typed in the Django admin
    EMAIL_LOOKUP = "email_lookup"  # found by the person's e-mail through a vendor's API
    SELF_LINK = "self_link"  # the person opened a one-time link posted to them in the chat


class PersonIdentity(models.Model):
    """A chat identity of a person, channel-qualified as clicks are recorded: `slack:U0ALICE`,
    `feishu:ou_…`, `teams:…`, `dingtalk:…`, `telegram:…`, `email:alice@example.com`. Belongs to one person."""

    person = models.ForeignKey(Person, on_delete=models.CASCADE, related_name="identities")
    identity = models.CharField(max_length=200, unique=True)
    source = models.CharField(max_length=16, choices=IdentitySource.choices, default=IdentitySource.ADMIN)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["identity"]
        verbose_name_plural = "person identities"

    def __str__(self) -> str:
        return self.identity


class PeopleGroup(models.Model):
    """A named set of people: `group:NAME` in a gate's `approvers`."""

    name = models.SlugField(max_length=64, unique=True)
    description = models.CharField(max_length=200, blank=True)
    members = models.ManyToManyField(Person, related_name="groups", blank=True)
    team = models.ForeignKey(
        Team,
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="groups",
        help_text="Its members are members of this team (docs/approving.md, \"Teams\"); empty: of none.",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]
        verbose_name = "group"

    def __str__(self) -> str:
        return self.name


class StandIn(models.Model):
    """`delegate` stands in for `person` from `starts_at` to `ends_at` (out of office): requests routed
    to `person` while the window is open reach the delegate too, and their answer is recorded as
    given on `person`'s behalf."""

    person = models.ForeignKey(Person, on_delete=models.CASCADE, related_name="stand_ins")
    delegate = models.ForeignKey(Person, on_delete=models.CASCADE, related_name="standing_in_for")
    starts_at = models.DateTimeField()
    ends_at = models.DateTimeField()
    note = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-starts_at"]
        indexes = [models.Index(fields=["person", "ends_at"], name="standin_person_ends")]
        constraints = [
            models.CheckConstraint(condition=Q(ends_at__gt=F("starts_at")), name="standin_window"),
            models.CheckConstraint(condition=~Q(delegate=F("person")), name="standin_not_self"),
        ]

    def __str__(self) -> str:
        return f"{self.delegate} for {self.person}"


class LinkToken(models.Model):
    """A one-time link that ties a chat identity to a person: posted to that identity in the chat,
    opened by the person signed in on the web (`services.person_link_redeem`). Used once, then dead."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    person = models.ForeignKey(Person, on_delete=models.CASCADE, related_name="link_tokens")
    identity = models.CharField(max_length=200)
    expires_at = models.DateTimeField()
    used_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
