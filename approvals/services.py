"""Every write the gateway makes.

Transitions of a ConfirmationRequest are one conditional UPDATE each
(`_transition`); the loser of any race gets 0 rows and is told the winner.
Side effects (card delivery, card redraws, webhooks) are Outbox rows written
in the same transaction and queued after commit.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import json
import logging
import secrets
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import F, Q
from django.utils import timezone

from approvals import selectors
from approvals.errors import AlreadyDecided, IdempotencyMismatch, InvalidInput
from approvals.models import (
    Agent,
    AgentConfigVersion,
    ApiKey,
    ApproverResponse,
    CallbackReceipt,
    Channel,
    ConfirmationEvent,
    ConfirmationRequest,
    EventKind,
    Outbox,
    OutboxKind,
    OutboxStatus,
    Status,
    ToolCall,
)
from channels_ext.base import Callback, ChannelError, DecisionOutcome
from gateway import realtime

logger = logging.getLogger("approvals.services")

SYSTEM_ACTOR = "gateway"


# --------------------------------------------------------------------------- API keys


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


# --------------------------------------------------------------------------- config


def agent_set_read_only(*, agent: Agent, read_only: bool) -> None:
    Agent.objects.filter(pk=agent.pk).update(read_only=read_only)
    agent.read_only = read_only


@transaction.atomic
def agent_hooks_apply(*, agent: Agent, hooks: list[dict[str, Any]], source: str) -> AgentConfigVersion | None:
    """Store a new version of an agent's hooks if they changed; returns it (None if unchanged).

    `hooks` must already be validated (hooks.schema); they are stored normalised.
    The agent row is locked so concurrent saves (admin, API, apply_config) number versions in turn.
    """
    Agent.objects.select_for_update().filter(pk=agent.pk).first()
    current = agent.current_config
    if current is not None and current.hooks == hooks:
        return None
    version = (current.version if current else 0) + 1
    return AgentConfigVersion.objects.create(agent=agent, version=version, hooks=hooks, source=source[:200])


@dataclasses.dataclass
class ApplySummary:
    channels_created: list[str] = dataclasses.field(default_factory=list)
    channels_updated: list[str] = dataclasses.field(default_factory=list)
    agents_created: list[str] = dataclasses.field(default_factory=list)
    agents_new_version: list[str] = dataclasses.field(default_factory=list)
    unchanged: list[str] = dataclasses.field(default_factory=list)

    def lines(self) -> list[str]:
        out = []
        for label, names in (
            ("channels created", self.channels_created),
            ("channels updated", self.channels_updated),
            ("agents created", self.agents_created),
            ("agents with a new hook version", self.agents_new_version),
            ("unchanged", self.unchanged),
        ):
            if names:
                out.append(f"{label}: {', '.join(names)}")
        return out or ["nothing to apply"]


@transaction.atomic
def config_apply(*, config: Any, source: str) -> ApplySummary:
    """Apply a validated `hooks.schema.GatewayConfig` in one transaction (idempotent)."""
    summary = ApplySummary()
    for channel_cfg in config.channels:
        data = channel_cfg.model_dump(exclude={"name", "kind"})
        channel, created = Channel.objects.get_or_create(
            name=channel_cfg.name, defaults={"kind": channel_cfg.kind, "config": data}
        )
        if created:
            summary.channels_created.append(channel.name)
        elif channel.kind != channel_cfg.kind or channel.config != data:
            Channel.objects.filter(pk=channel.pk).update(kind=channel_cfg.kind, config=data)
            summary.channels_updated.append(channel.name)
        else:
            summary.unchanged.append(f"channel {channel.name}")
    for agent_cfg in config.agents:
        agent, created = Agent.objects.get_or_create(name=agent_cfg.name)
        if created:
            summary.agents_created.append(agent.name)
        if agent.read_only != agent_cfg.read_only:
            agent_set_read_only(agent=agent, read_only=agent_cfg.read_only)
        hooks = [h.model_dump(mode="json", exclude_none=False) for h in agent_cfg.hooks]
        if agent_hooks_apply(agent=agent, hooks=hooks, source=source) is not None:
            summary.agents_new_version.append(agent.name)
        elif not created:
            summary.unchanged.append(f"agent {agent.name}")
    return summary


# --------------------------------------------------------------------------- pre-tool-use


@dataclasses.dataclass
class PreToolUseAnswer:
    decision: str  # allow | deny | pending | skip
    tool_args: dict[str, Any]
    reason: str = ""
    confirmation_id: str | None = None
    side_effects: list[str] = dataclasses.field(default_factory=list)
    hook_decisions: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    result: Any = None

    def as_dict(self) -> dict[str, Any]:
        data = {
            "decision": self.decision,
            "tool_args": self.tool_args,
            "reason": self.reason,
            "confirmation_id": self.confirmation_id,
            "side_effects": self.side_effects,
            "hook_decisions": self.hook_decisions,
        }
        if self.decision == "skip":
            data["result"] = self.result
        return data


def request_fingerprint(payload: dict[str, Any]) -> str:
    """SHA-256 of the canonical request body, minus fields that steer waiting or name one attempt.

    `tool_call_id` is left out: a retried call usually gets a new call id from its runtime.
    """
    body = {k: v for k, v in payload.items() if k not in {"wait_seconds", "idempotency_key", "tool_call_id"}}
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":"), default=str).encode()).hexdigest()


def tool_call_pre(
    *,
    agent: Agent,
    session_id: str,
    tool_name: str,
    tool_args: dict[str, Any],
    tool_call_id: str = "",
    user_id: str = "",
    metadata: dict[str, Any] | None = None,
    idempotency_key: str | None = None,
    callback_url: str = "",
    fingerprint: str = "",
    now: dt.datetime | None = None,
) -> PreToolUseAnswer:
    """Run the agent's pre-tool-use chain and record the call; ask a human if a gate says so."""
    from hooks.base import HookContext
    from hooks.registry import run_chain

    metadata = metadata or {}
    if idempotency_key:
        existing = ToolCall.objects.filter(agent=agent, idempotency_key=idempotency_key).first()
        if existing is not None:
            return _replay(existing, fingerprint=fingerprint, tool_args=tool_args)

    from approvals.lifecycle import session_values

    # What outer levels (session-start, the current turn) said about this session.
    session = session_values(agent=agent, session_id=session_id)
    user_id = user_id or session.get("user_id", "")
    metadata = {**session.get("metadata", {}), **metadata}
    turn_id = session.get("turn_id", "")
    version, hooks = selectors.agent_hooks(agent=agent)
    ctx = HookContext(
        event="pre_tool_use",
        agent=agent.name,
        session_id=session_id,
        user_id=user_id,
        metadata=metadata,
        tool_name=tool_name,
        tool_args=dict(tool_args),
        tool_call_id=tool_call_id,
        turn_id=turn_id,
        agent_read_only=agent.read_only,
        config_version=version,
        now=now,
        session={"user_id": "", "metadata": {}, "turn_id": "", **session},
    )
    outcome = run_chain(hooks, ctx)
    stored_args = outcome.stored_args if outcome.stored_args is not None else outcome.tool_args
    answer = PreToolUseAnswer(
        decision={"ask": "pending"}.get(outcome.decision, outcome.decision),
        tool_args=outcome.tool_args,
        reason=outcome.reason,
        side_effects=outcome.side_effects,
        hook_decisions=outcome.hook_decisions,
    )
    try:
        with transaction.atomic():
            confirmation = None
            if outcome.ask is not None:
                confirmation = _confirmation_create(
                    agent=agent,
                    spec=outcome.ask,
                    session_id=session_id,
                    tool_name=tool_name,
                    stored_args=stored_args,
                    tool_call_id=tool_call_id,
                    user_id=user_id,
                    metadata=metadata,
                    config_version=version,
                    callback_url=callback_url,
                    now=now,
                )
                answer.confirmation_id = str(confirmation.id)
            redacted = outcome.stored_args is not None
            ToolCall.objects.create(
                agent=agent,
                session_id=session_id,
                turn_id=turn_id,
                tool_call_id=tool_call_id,
                tool_name=tool_name,
                tool_args=stored_args,
                user_id=user_id,
                metadata=metadata,
                decision=answer.decision,
                reason=answer.reason,
                decided_by_hook=outcome.decided_by,
                hook_decisions=outcome.hook_decisions,
                config_version=version,
                confirmation=confirmation,
                idempotency_key=idempotency_key or None,
                request_fingerprint=fingerprint,
                # Never keep unredacted args: a replay of a redacted call re-sends the request's own args.
                response={**answer.as_dict(), "tool_args": None if redacted else answer.tool_args},
            )
    except IntegrityError:
        # A concurrent request with the same idempotency key won the insert.
        existing = ToolCall.objects.filter(agent=agent, idempotency_key=idempotency_key).first()
        if existing is None:
            raise
        return _replay(existing, fingerprint=fingerprint, tool_args=tool_args)
    return answer


def _replay(call: ToolCall, *, fingerprint: str, tool_args: dict[str, Any]) -> PreToolUseAnswer:
    """The answer for a request whose idempotency key was seen before."""
    if fingerprint and call.request_fingerprint and call.request_fingerprint != fingerprint:
        raise IdempotencyMismatch(
            "this idempotency_key was used with a different request body",
            details={"tool_call": str(call.id)},
        )
    stored = call.response or {}
    args = stored.get("tool_args") if stored.get("tool_args") is not None else tool_args
    window = dt.timedelta(seconds=settings.GATEWAY_IDEMPOTENT_SKIP_WINDOW_SECONDS)
    if call.outcome == "success" and call.completed_at and timezone.now() - call.completed_at <= window:
        return PreToolUseAnswer(
            decision="skip",
            tool_args=args,
            reason="this call already completed; returning its stored result",
            side_effects=["idempotent_replay"],
            hook_decisions=stored.get("hook_decisions", []),
            result=call.result,
        )
    if call.confirmation_id is not None:
        confirmation = ConfirmationRequest.objects.get(pk=call.confirmation_id)
        answer = selectors.answer_for_confirmation(confirmation, tool_args=args)
        answer.hook_decisions = stored.get("hook_decisions", [])
        answer.side_effects = [*stored.get("side_effects", []), "idempotent_replay"]
        return answer
    return PreToolUseAnswer(
        decision=stored.get("decision", call.decision),
        tool_args=args,
        reason=stored.get("reason", call.reason),
        side_effects=[*stored.get("side_effects", []), "idempotent_replay"],
        hook_decisions=stored.get("hook_decisions", []),
    )


def _confirmation_create(
    *,
    agent: Agent,
    spec: Any,
    session_id: str,
    tool_name: str,
    stored_args: dict[str, Any],
    tool_call_id: str,
    user_id: str,
    metadata: dict[str, Any],
    config_version: int,
    callback_url: str,
    now: dt.datetime | None,
) -> ConfirmationRequest:
    """Insert the request, its `created` event and its card outbox row (caller holds the transaction)."""
    now = now or timezone.now()
    try:
        channel = Channel.objects.get(name=spec.channel)
    except Channel.DoesNotExist:
        raise InvalidInput(f"approval gate {spec.gate!r} names channel {spec.channel!r}, which does not exist") from None
    escalate_channel = None
    if spec.escalate_channel:
        escalate_channel = Channel.objects.filter(name=spec.escalate_channel).first()
    confirmation = ConfirmationRequest.objects.create(
        agent=agent,
        session_id=session_id,
        tool_name=tool_name,
        tool_args=stored_args,
        tool_call_id=tool_call_id,
        user_id=user_id,
        metadata=metadata,
        channel=channel,
        approvers=list(spec.approvers),
        approvals_required=spec.approvals_required,
        allow_self_approval=spec.allow_self_approval,
        reason=spec.reason,
        hook_name=spec.gate,
        config_version=config_version,
        expires_at=now + dt.timedelta(seconds=spec.timeout_seconds) if spec.timeout_seconds else None,
        on_timeout=spec.on_timeout,
        remind_at=now + dt.timedelta(seconds=spec.remind_after_seconds) if spec.remind_after_seconds else None,
        escalate_at=(
            now + dt.timedelta(seconds=spec.escalate_after_seconds)
            if spec.escalate_after_seconds and escalate_channel
            else None
        ),
        escalate_channel=escalate_channel,
        escalate_approvers=list(spec.escalate_approvers),
        callback_url=callback_url,
    )
    _event(confirmation, EventKind.CREATED, actor=f"agent:{agent.name}", message=spec.reason)
    _outbox(confirmation, OutboxKind.CARD, channel=channel, dedupe_key=f"{confirmation.id}:card:{channel.name}")
    return confirmation


# --------------------------------------------------------------------------- decisions


def _event(
    confirmation: ConfirmationRequest | str,
    kind: str,
    *,
    actor: str = "",
    channel: str = "",
    message: str = "",
    data: dict[str, Any] | None = None,
) -> None:
    confirmation_id = confirmation.pk if isinstance(confirmation, ConfirmationRequest) else confirmation
    ConfirmationEvent.objects.create(
        confirmation_id=confirmation_id, kind=kind, actor=actor, channel=channel, message=message, data=data or {}
    )


def _outbox(
    confirmation: ConfirmationRequest | str,
    kind: str,
    *,
    dedupe_key: str,
    channel: Channel | None = None,
    payload: dict[str, Any] | None = None,
) -> None:
    """Write an outbox row (idempotent on dedupe_key) and queue its delivery after commit."""
    confirmation_id = confirmation.pk if isinstance(confirmation, ConfirmationRequest) else confirmation
    row, created = Outbox.objects.get_or_create(
        dedupe_key=dedupe_key,
        defaults={"confirmation_id": confirmation_id, "kind": kind, "channel": channel, "payload": payload or {}},
    )
    if not created:
        return
    from approvals.tasks import deliver_outbox

    transaction.on_commit(lambda: _enqueue(deliver_outbox, row.pk), robust=True)


def _enqueue(task: Any, *args: Any, **kwargs: Any) -> None:
    """Queue a task; if the broker is down the beat relay picks the row up later."""
    try:
        task.apply_async(args=args, kwargs=kwargs, retry=False)
    except Exception as exc:
        logger.warning("could not queue %s%s (%s); the outbox relay will retry", task.name, args, exc)


_TERMINAL_EVENT = {
    Status.APPROVED: EventKind.APPROVED,
    Status.REJECTED: EventKind.REJECTED,
    Status.EXPIRED: EventKind.EXPIRED,
    Status.CANCELLED: EventKind.CANCELLED,
}


def _transition(
    confirmation_id: Any,
    to_status: str,
    *,
    decided_by: str,
    reason: str = "",
    channel: str = "",
    extra_filter: Q | None = None,
) -> bool:
    """pending -> `to_status` as ONE conditional UPDATE. True if this call won.

    Must run inside a transaction: the event, the NOTIFY (delivered at commit)
    and the card-redraw / webhook outbox rows commit with the change or not at all.
    """
    now = timezone.now()
    qs = ConfirmationRequest.objects.filter(pk=confirmation_id, status=Status.PENDING)
    if extra_filter is not None:
        qs = qs.filter(extra_filter)
    changed = qs.update(status=to_status, decided_by=decided_by, decided_at=now, decision_reason=reason)
    if not changed:
        return False
    confirmation = ConfirmationRequest.objects.select_related("channel", "escalate_channel").get(pk=confirmation_id)
    _event(confirmation, _TERMINAL_EVENT[to_status], actor=decided_by, channel=channel, message=reason)
    realtime.notify_changed(str(confirmation.pk))
    # One redraw row per state, so an in-flight redraw of an older state cannot swallow this one.
    _outbox(confirmation, OutboxKind.UPDATE, dedupe_key=f"{confirmation.pk}:update:{to_status}")
    if confirmation.callback_url:
        _outbox(confirmation, OutboxKind.WEBHOOK, dedupe_key=f"{confirmation.pk}:webhook")
    return True


def confirmation_respond(*, channel_name: str, callback: Callback, as_admin: bool = False) -> DecisionOutcome:
    """An approver's click (any channel), applied exactly once.

    Checks who may decide, records one response per approver, and decides the
    request when a reject arrives or the approvals reach the quorum.
    `as_admin` (Django admin / staff on the web page) skips the approver list.
    """
    try:
        with transaction.atomic():
            verdict = _respond(channel_name=channel_name, callback=callback, as_admin=as_admin)
    except _Duplicate as dup:
        verdict = dup.outcome
    if verdict.code == "not_found":
        return verdict
    # The card is drawn after commit: the row lock, the NOTIFY and the waiting agent don't wait for it.
    confirmation = ConfirmationRequest.objects.select_related("agent", "channel", "escalate_channel").get(
        pk=callback.confirmation_id
    )
    return dataclasses.replace(verdict, card=selectors.card_view(confirmation, channel_name=channel_name))


class _Duplicate(Exception):
    def __init__(self, outcome: DecisionOutcome):
        self.outcome = outcome


def _respond(*, channel_name: str, callback: Callback, as_admin: bool) -> DecisionOutcome:
    # Row lock: responses to one request are counted one at a time (quorum), and
    # a click and the expiry sweep cannot interleave.
    confirmation = (
        ConfirmationRequest.objects.select_for_update(of=("self",))
        .select_related("agent", "channel", "escalate_channel")
        .filter(pk=callback.confirmation_id)
        .first()
    )
    if confirmation is None:
        return DecisionOutcome(applied=False, code="not_found", message="This approval request no longer exists.", card=None)

    def outcome(applied: bool, code: str, message: str) -> DecisionOutcome:
        return DecisionOutcome(applied=applied, code=code, message=message, card=None)  # card: after commit

    if callback.dedupe_key and not callback.dry_run:
        try:
            with transaction.atomic():
                CallbackReceipt.objects.create(channel=channel_name, key=callback.dedupe_key[:200])
        except IntegrityError:
            raise _Duplicate(outcome(False, "duplicate", "This click was already handled.")) from None

    if confirmation.is_final:
        message = selectors.final_state_sentence(confirmation)
        # recorded for dry runs too: a refused Reject never gets as far as its modal
        _event(confirmation, EventKind.LATE_CLICK, actor=callback.actor, channel=channel_name, message=message)
        return outcome(False, "already_decided", message)

    if confirmation.expires_at is not None and confirmation.expires_at <= timezone.now():
        # Past its deadline but not yet swept: expire it now rather than accept a late decision.
        if not callback.dry_run:
            confirmation_expire(confirmation_id=confirmation.pk)
            _event(confirmation, EventKind.LATE_CLICK, actor=callback.actor, channel=channel_name)
        return outcome(False, "already_decided", "This request expired before you answered.")

    # Staff skip the approver list, never the self-approval rule.
    if as_admin:
        refusal = selectors.self_approval_refusal(confirmation, actor=callback.actor)
    else:
        refusal = selectors.approver_refusal(confirmation, channel_name=channel_name, actor=callback.actor)
    if refusal is not None:
        code, message = refusal
        _event(confirmation, EventKind.REFUSED_CLICK, actor=callback.actor, channel=channel_name, message=message)
        return outcome(False, code, message)

    if callback.dry_run:
        return outcome(True, "would_apply", "")

    try:
        with transaction.atomic():
            ApproverResponse.objects.create(
                confirmation=confirmation,
                approver=callback.actor,
                decision=callback.decision,
                reason=callback.reason,
                channel=channel_name,
            )
    except IntegrityError:
        return outcome(False, "duplicate", "You have already answered this request.")

    actor = callback.actor_name or callback.actor
    if callback.decision == "reject":
        _transition(confirmation.pk, Status.REJECTED, decided_by=actor, reason=callback.reason, channel=channel_name)
        return outcome(True, "decided", "Rejected.")
    approvals = confirmation.responses.filter(decision="approve").count()
    if approvals >= confirmation.approvals_required:
        _transition(confirmation.pk, Status.APPROVED, decided_by=actor, reason=callback.reason, channel=channel_name)
        return outcome(True, "decided", "Approved.")
    _event(
        confirmation,
        EventKind.RESPONSE,
        actor=actor,
        channel=channel_name,
        message=f"approval {approvals} of {confirmation.approvals_required}",
    )
    realtime.notify_changed(str(confirmation.pk))  # WebSocket watchers see the count move
    _outbox(confirmation, OutboxKind.UPDATE, dedupe_key=f"{confirmation.pk}:update:approvals-{approvals}")
    return outcome(True, "recorded", f"Approval recorded ({approvals} of {confirmation.approvals_required}).")


@transaction.atomic
def confirmation_cancel(*, agent: Agent, confirmation_id: Any) -> ConfirmationRequest:
    """The agent withdraws its request. 409 if it was already decided."""
    confirmation = selectors.confirmation_for_agent(agent=agent, confirmation_id=confirmation_id)
    if not _transition(confirmation.pk, Status.CANCELLED, decided_by=f"agent:{agent.name}", reason="cancelled by the agent"):
        confirmation.refresh_from_db()
        raise AlreadyDecided(
            selectors.final_state_sentence(confirmation), details={"status": confirmation.status}
        )
    confirmation.refresh_from_db()
    return confirmation


@transaction.atomic
def confirmation_cancel_by_staff(*, confirmation_id: Any, actor: str, reason: str = "") -> bool:
    """An operator withdraws a pending request (Django admin). False if it was already final."""
    return _transition(
        confirmation_id, Status.CANCELLED, decided_by=actor, reason=reason or f"cancelled by {actor}"
    )


def confirmation_expire(*, confirmation_id: Any) -> bool:
    """Expire one request whose deadline has passed (database clock). True if this call did it."""
    with transaction.atomic():
        return _transition(
            confirmation_id,
            Status.EXPIRED,
            decided_by=SYSTEM_ACTOR,
            reason="no decision before the deadline",
            extra_filter=Q(expires_at__lte=timezone.now()),
        )


def confirmation_expire_due(*, limit: int = 500) -> int:
    """The beat sweep: expire every pending request past its deadline. Returns how many."""
    with transaction.atomic():
        due = list(
            ConfirmationRequest.objects.select_for_update(skip_locked=True)
            .filter(status=Status.PENDING, expires_at__lte=timezone.now())
            .order_by("expires_at")
            .values_list("pk", flat=True)[:limit]
        )
        expired = 0
        for pk in due:
            expired += _transition(
                pk, Status.EXPIRED, decided_by=SYSTEM_ACTOR, reason="no decision before the deadline"
            )
    return expired


# --------------------------------------------------------------------------- outbox delivery


def outbox_claim(*, outbox_id: int, lease_seconds: int = 60) -> Outbox | None:
    """Take a lease on a due outbox row (one conditional UPDATE); None if someone else has it."""
    now = timezone.now()
    claimed = (
        Outbox.objects.filter(pk=outbox_id, status=OutboxStatus.PENDING)
        .filter(Q(locked_until__isnull=True) | Q(locked_until__lt=now))
        .filter(Q(next_attempt_at__isnull=True) | Q(next_attempt_at__lte=now))
        .update(locked_until=now + dt.timedelta(seconds=lease_seconds), attempts=F("attempts") + 1)
    )
    if not claimed:
        return None
    return Outbox.objects.select_related("channel", "confirmation", "confirmation__agent").get(pk=outbox_id)


@dataclasses.dataclass
class DeliveryResult:
    sent: bool
    retry_in: float | None = None  # seconds, for a transient failure


def outbox_deliver(*, outbox_id: int) -> DeliveryResult:
    """Do one outbox row's work. Transient failures are rescheduled; permanent ones recorded."""
    row = outbox_claim(outbox_id=outbox_id)
    if row is None:
        return DeliveryResult(sent=False)
    try:
        message_ref, drawn = _perform(row)
    except ChannelError as exc:
        return _delivery_failed(row, exc)
    with transaction.atomic():
        Outbox.objects.filter(pk=row.pk).update(
            status=OutboxStatus.SENT, sent_at=timezone.now(), locked_until=None, last_error="", message_ref=message_ref
        )
        if row.kind == OutboxKind.CARD:
            _event(row.confirmation, EventKind.CARD_POSTED, channel=row.channel.name, data={"ref": message_ref})
            _redraw_if_changed_in_flight(row, drawn)
        elif row.kind == OutboxKind.WEBHOOK:
            _event(row.confirmation, EventKind.WEBHOOK_SENT, message=row.confirmation.callback_url, data={"attempt": row.attempts})
    return DeliveryResult(sent=True)


def _redraw_if_changed_in_flight(row: Outbox, drawn: Any) -> None:
    """A change committed while this card was being posted queued a redraw that ran
    before the card row was SENT, so it could not see this card: redraw it now.

    Locks the request row: every transition updates it, so this serialises with them.
    """
    confirmation = (
        ConfirmationRequest.objects.select_for_update(of=("self",))
        .select_related("agent", "channel", "escalate_channel")
        .get(pk=row.confirmation_id)
    )
    if selectors.card_view(confirmation, channel_name=row.channel.name) != drawn:
        _outbox(confirmation, OutboxKind.UPDATE, dedupe_key=f"{confirmation.pk}:update:after-card-{row.pk}")


def _perform(row: Outbox) -> tuple[dict[str, Any] | None, Any]:
    """Do the outside work of one row: (message reference to store, card drawn if any)."""
    from channels_ext.base import MessageRef

    confirmation = row.confirmation
    if row.kind == OutboxKind.CARD:
        adapter = selectors.channel_adapter(row.channel)
        card = selectors.card_view(confirmation, channel_name=row.channel.name)
        return adapter.post_card(card, idempotency_key=row.dedupe_key).data, card
    if row.kind in (OutboxKind.UPDATE, OutboxKind.REMIND):
        for card_row in selectors.posted_cards(confirmation):
            adapter = selectors.channel_adapter(card_row.channel)
            card = selectors.card_view(confirmation, channel_name=card_row.channel.name)
            ref = MessageRef(card_row.message_ref or {})
            if row.kind == OutboxKind.REMIND:
                adapter.notify_approvers(card, ref, row.payload.get("text", "Reminder: this request is waiting for you."))
            else:
                adapter.update_card(card, ref)
        return None, None
    if row.kind == OutboxKind.WEBHOOK:
        from approvals.webhooks import send_decision_webhook

        send_decision_webhook(confirmation)
        return None, None
    raise ValueError(f"unknown outbox kind {row.kind!r}")


def _delivery_failed(row: Outbox, exc: ChannelError) -> DeliveryResult:
    now = timezone.now()
    exhausted = row.attempts >= settings.GATEWAY_OUTBOX_MAX_ATTEMPTS
    if exc.permanent or exhausted:
        with transaction.atomic():
            Outbox.objects.filter(pk=row.pk).update(status=OutboxStatus.FAILED, locked_until=None, last_error=exc.message)
            if row.channel_id:
                Channel.objects.filter(pk=row.channel_id).update(last_error=exc.message, last_error_at=now)
            if row.kind == OutboxKind.CARD:
                _event(row.confirmation, EventKind.CARD_FAILED, channel=row.channel.name, message=exc.message)
                _fail_closed_if_undelivered(row, exc)
            elif row.kind == OutboxKind.WEBHOOK:
                _event(row.confirmation, EventKind.WEBHOOK_FAILED, message=exc.message, data={"attempt": row.attempts})
        logger.warning("outbox %s failed for good: %s", row.pk, exc.message)
        return DeliveryResult(sent=False)
    delay = exc.retry_after if exc.retry_after is not None else min(2 ** (row.attempts - 1), 300)
    with transaction.atomic():
        Outbox.objects.filter(pk=row.pk).update(
            locked_until=None, last_error=exc.message, next_attempt_at=now + dt.timedelta(seconds=delay)
        )
        if row.kind == OutboxKind.WEBHOOK:
            _event(row.confirmation, EventKind.WEBHOOK_FAILED, message=exc.message, data={"attempt": row.attempts})
    logger.info("outbox %s attempt %s failed (%s); retrying in %.1fs", row.pk, row.attempts, exc.message, delay)
    return DeliveryResult(sent=False, retry_in=delay)


def _fail_closed_if_undelivered(row: Outbox, exc: ChannelError) -> None:
    """No card can reach anyone: deny rather than leave the agent waiting on nothing."""
    others = Outbox.objects.filter(confirmation_id=row.confirmation_id, kind=OutboxKind.CARD).exclude(pk=row.pk)
    if others.filter(status__in=[OutboxStatus.SENT, OutboxStatus.PENDING]).exists():
        return
    _transition(
        row.confirmation_id,
        Status.REJECTED,
        decided_by=SYSTEM_ACTOR,
        reason=f"the approval card could not be delivered to channel {row.channel.name}: {exc.message}",
        channel=row.channel.name,
    )


def outbox_due_ids(*, limit: int = 200) -> list[int]:
    """Rows the relay should (re)send: never picked up after a grace period, or due for a retry."""
    now = timezone.now()
    grace = now - dt.timedelta(seconds=settings.GATEWAY_OUTBOX_RELAY_AFTER_SECONDS)
    return list(
        Outbox.objects.filter(status=OutboxStatus.PENDING)
        .filter(Q(locked_until__isnull=True) | Q(locked_until__lt=now))
        .filter(Q(next_attempt_at__lte=now) | Q(next_attempt_at__isnull=True, created_at__lte=grace))
        .order_by("created_at")
        .values_list("pk", flat=True)[:limit]
    )

