"""Confirmation requests: created, decided, cancelled, expired, reminded and escalated.

Every move out of `pending` is ONE conditional UPDATE (`confirmation_transition`);
the loser of any race (a double click, a vendor retry, the sweep against a
click, a cancel against an approval) updates 0 rows and is told the winner.
The event, the NOTIFY that wakes waiting agents (delivered at commit) and the
card-redraw / webhook outbox rows are written in the same transaction.

Reminders and escalations move with their own conditional UPDATE
(`remind_at` cleared, `escalated_at` set), so two beat processes — or beat
racing a decision — remind and escalate a request exactly once, and never one
that is no longer pending.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import logging
from collections.abc import Callable
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone

from approvals import selectors
from approvals.prepared import PreparedRead
from approvals.audit import REQUEST_SIGNED, RESPONSE_SIGNED, decision_mac, decision_verifies
from approvals.arguments import checked_edit_value, edit_from_text, get_path, json_type, with_edits
from approvals.errors import AlreadyDecided, InvalidInput
from approvals.models import (
    Agent,
    ApproverResponse,
    AuditAction,
    CallbackReceipt,
    Channel,
    ConfirmationEvent,
    ConfirmationRequest,
    EventKind,
    Outbox,
    OutboxKind,
    OutboxStatus,
    RequestKind,
    Status,
)
from approvals.services.records import (
    Insert,
    changes_notify,
    event_record,
    ids_in,
    needing_redraw,
    outbox_add,
    outbox_add_many,
    outbox_queued,
    redraw_add,
    response_add,
    rows_insert,
    rows_update,
    rows_update_each,
)
from approvals.services.audit import audit_append, audit_append_many, audit_transaction
from approvals.services.grants import grant_create
from approvals.services.replay import in_a_transaction_served_again_if_dropped
from approvals.types import SYSTEM_ACTOR, TimersRun
from gateway_contract.answers import answer_from_inputs, answer_problem, answer_text
from gateway_contract import Callback, DecisionOutcome, draws_itself, has_turn_cards
from gateway_utils import metrics
from hooks import state as hook_state
from hooks.base import AskSpec, grant_label, pre_tool_use_context
from hooks.chain import mask_args, run_chain

logger = logging.getLogger("approvals.confirmations")

REMINDER_TEXT = "Reminder: this request is still waiting for your decision."
EXPIRED_REASON = "no decision before the deadline"
EDIT_NOT_ALLOWED = "This request's gate does not allow editing its arguments."
UNVERIFIED_CLICK = (
    "This request's record does not verify (it was changed outside the gateway), so nothing was changed; "
    "its call is denied. Tell the gateway's operator (manage.py verify_audit)."
)

_TERMINAL_EVENT = {
    Status.APPROVED: EventKind.APPROVED,
    Status.REJECTED: EventKind.REJECTED,
    Status.EXPIRED: EventKind.EXPIRED,
    Status.CANCELLED: EventKind.CANCELLED,
    Status.ANSWERED: EventKind.ANSWERED,
}


# --------------------------------------------------------------------------- creating


def confirmation_create(
    *,
    agent: Agent,
    spec: AskSpec,
    session_id: str,
    tool_name: str,
    stored_args: dict[str, Any],
    tool_call_id: str,
    user_id: str,
    metadata: dict[str, Any],
    config_version: int,
    callback_url: str,
    now: dt.datetime | None,
    turn_id: str = "",
    editable_paths: list[str] | None = None,
    edit_types: dict[str, str] | None = None,
    args_fingerprint: str = "",
    kind: str = RequestKind.CONFIRMATION,
    answer_schema: dict[str, Any] | None = None,
    default_answer: Any = None,
) -> ConfirmationRequest:
    """Insert the request, its `created` event and its card outbox row (the caller holds the transaction).

    A call of a turn that already has a pending request in the same channel joins that request's
    card (`batch_lead`) instead of getting its own, when the channel's cards can list a turn.
    """
    now = now or timezone.now()
    try:
        channel = Channel.objects.get(name=spec.channel)
    except Channel.DoesNotExist:
        raise InvalidInput(f"approval gate {spec.gate!r} names channel {spec.channel!r}, which does not exist") from None
    escalate_channel = None
    if spec.escalate_channel:
        escalate_channel = Channel.objects.filter(name=spec.escalate_channel).first()
    lead_id = None
    if turn_id and has_turn_cards(channel.kind):
        first = (
            ConfirmationRequest.objects.filter(
                agent=agent, session_id=session_id, turn_id=turn_id, status=Status.PENDING, channel=channel
            )
            .order_by("created_at")
            .values_list("pk", "batch_lead_id")
            .first()
        )
        if first is not None:
            lead_id = first[1] or first[0]
    # `group:` / `person:` approvers and stand-ins routed now, to the channel's own ids (docs/approving.md, "People").
    approvers, approver_people = selectors.approver_routing(list(spec.approvers), kind=channel.kind, now=now)
    escalate_approvers, escalate_people = list(spec.escalate_approvers), {}
    if escalate_channel is not None:
        escalate_approvers, escalate_people = selectors.approver_routing(
            escalate_approvers, kind=escalate_channel.kind, now=now
        )
    expires_at = now + dt.timedelta(seconds=spec.timeout_seconds) if spec.timeout_seconds else None
    warn_at = None
    if expires_at is not None and spec.warn_before_seconds:
        warn_at = expires_at - dt.timedelta(seconds=spec.warn_before_seconds)
    confirmation = ConfirmationRequest(
        agent=agent,
        session_id=session_id,
        tool_name=tool_name,
        tool_args=stored_args,
        tool_call_id=tool_call_id,
        user_id=user_id,
        metadata=metadata,
        channel=channel,
        approvers=approvers,
        approver_people=approver_people,
        approvals_required=spec.approvals_required,
        allow_self_approval=spec.allow_self_approval,
        reason=spec.reason,
        hook_name=spec.gate,
        config_version=config_version,
        expires_at=expires_at,
        warn_at=warn_at,
        turn_id=turn_id,
        batch_lead_id=lead_id,
        editable_paths=editable_paths or [],
        edit_types=edit_types or {},
        grant_options=list(spec.grants),
        args_fingerprint=args_fingerprint,
        on_timeout=spec.on_timeout,
        remind_at=now + dt.timedelta(seconds=spec.remind_after_seconds) if spec.remind_after_seconds else None,
        escalate_at=(
            now + dt.timedelta(seconds=spec.escalate_after_seconds)
            if spec.escalate_after_seconds and escalate_channel
            else None
        ),
        escalate_channel=escalate_channel,
        escalate_approvers=escalate_approvers,
        escalate_approver_people=escalate_people,
        callback_url=callback_url,
        kind=kind,
        answer_schema=answer_schema,
        default_answer=default_answer,
    )
    confirmation.decision_mac = decision_mac(ConfirmationRequest, confirmation)
    created = ConfirmationEvent(
        confirmation_id=confirmation.pk, kind=EventKind.CREATED, actor=f"agent:{agent.name}", channel="", message=spec.reason,
        data={},
    )
    if lead_id is None:
        # The request, its `created` event, its card (and, on the web page, the card's `card_posted`
        # event): one statement. (The ORM's save machinery costs more than an INSERT, on every request.)
        card, posted = _card_rows(confirmation, channel, dedupe_key=f"{confirmation.id}:card:{channel.name}")
        inserts = [Insert(confirmation), Insert(created), Insert(card, unless_conflict="dedupe_key")]
        written = rows_insert([*inserts, *([Insert(posted, after=2)] if posted is not None else [])])
        audit_append(agent_id=agent.pk, action=AuditAction.RECORDED, row=confirmation)
        audit_append(agent_id=agent.pk, action=AuditAction.EVENT, row=created)
        _card_written(card, posted, written=written[2], agent_id=agent.pk)
        return confirmation
    # A call joining its turn's card: the lead's card is redrawn with it.
    rows_insert([Insert(confirmation), Insert(created)])
    audit_append(agent_id=agent.pk, action=AuditAction.RECORDED, row=confirmation)
    audit_append(agent_id=agent.pk, action=AuditAction.EVENT, row=created)
    event_record(
        confirmation,
        EventKind.JOINED_TURN,
        actor=f"agent:{agent.name}",
        message=f"shown with the other calls of turn {turn_id} on the card of request {lead_id}",
        data={"lead": str(lead_id), "turn_id": turn_id},
    )
    redraw_add(lead_id, OutboxKind.UPDATE, dedupe_key=f"{lead_id}:update:joined-{confirmation.pk}")
    return confirmation


def card_add(confirmation: ConfirmationRequest, channel: Channel, *, dedupe_key: str) -> None:
    """The request's card on `channel`: an outbox row a worker delivers — or, for a channel whose card
    is the gateway's own page (`draws_itself`: the web channel), a row written as sent, with its
    `card_posted` event, in this transaction: the page is up the moment the request commits, and no
    worker is involved. Idempotent on `dedupe_key`. One statement."""
    card, posted = _card_rows(confirmation, channel, dedupe_key=dedupe_key)
    written = rows_insert([Insert(card, unless_conflict="dedupe_key"), *([Insert(posted, after=0)] if posted else [])])
    _card_written(card, posted, written=written[0], agent_id=confirmation.agent_id)


def _card_rows(
    confirmation: ConfirmationRequest, channel: Channel, *, dedupe_key: str
) -> tuple[Outbox, ConfirmationEvent | None]:
    """`card_add`'s rows, unsaved: the outbox row, and the `card_posted` event if the page is the card."""
    if not draws_itself(channel.kind):
        return Outbox(confirmation_id=confirmation.pk, kind=OutboxKind.CARD, channel=channel, payload={}, dedupe_key=dedupe_key), None
    ref = {"url": selectors.confirmation_url(confirmation)}
    card = Outbox(
        confirmation_id=confirmation.pk, kind=OutboxKind.CARD, channel=channel, payload={}, dedupe_key=dedupe_key,
        status=OutboxStatus.SENT, sent_at=timezone.now(), message_ref=ref,
    )  # fmt: skip
    posted = ConfirmationEvent(
        confirmation_id=confirmation.pk, kind=EventKind.CARD_POSTED, actor="", channel=channel.name, message="",
        data={"ref": ref},
    )  # fmt: skip
    return card, posted


def _card_written(card: Outbox, posted: ConfirmationEvent | None, *, written: bool, agent_id: int) -> None:
    """After `_card_rows` were inserted: the card queued for a worker, or its posted event chained."""
    if not written:
        return  # (that card was there already)
    outbox_queued(card)
    if posted is not None:
        audit_append(agent_id=agent_id, action=AuditAction.EVENT, row=posted)


# --------------------------------------------------------------------------- deciding


def confirmation_transition(
    confirmation_id: Any,
    to_status: str,
    *,
    decided_by: str,
    decided_by_name: str = "",
    reason: str = "",
    channel: str = "",
    extra_filter: Q | None = None,
    arg_edits: dict[str, Any] | None = None,
    approved_args: dict[str, Any] | None = None,
    event_message: str = "",
    event_data: dict[str, Any] | None = None,
    locked: ConfirmationRequest | None = None,
    answer: Any = None,
) -> bool:
    """pending -> `to_status` as ONE conditional UPDATE. True if this call won.

    `locked`: the request's row as the caller read it under its row lock in this transaction
    (it is not read again: what the rest needs — its id, agent, callback URL — cannot have changed).

    `decided_by` is channel-qualified (`slack:U…`, `web:alice`, `gateway`…), `decided_by_name`
    its display name; an approval with edits sets `arg_edits` and `approved_args` in the same UPDATE.
    Must run inside a transaction: the event, the NOTIFY (delivered at commit)
    and the card-redraw / webhook outbox rows commit with the change or not at all.
    """
    now = timezone.now()
    fields: dict[str, Any] = {}
    if arg_edits:
        fields = {"arg_edits": arg_edits, "approved_args": approved_args}
    if to_status == Status.ANSWERED:
        fields["answer"] = answer  # a question's answer, in the same UPDATE as the move
    decided = {"status": to_status, "decided_by": decided_by, "decided_at": now, "decision_reason": reason, **fields}
    mac, values = _signed_anew(locked if locked is not None else confirmation_id, decided)
    if extra_filter is None:  # (a click's, an expiry's: one statement written out)
        changed = rows_update(
            ConfirmationRequest,
            pk=confirmation_id,
            values={"decided_by_name": decided_by_name, "decision_mac": mac, **decided},
            only_if={"status": Status.PENDING},
        )
    else:
        changed = (
            ConfirmationRequest.objects.filter(pk=confirmation_id, status=Status.PENDING)
            .filter(extra_filter)
            .update(decided_by_name=decided_by_name, decision_mac=mac, **decided)
        )
    if not changed:
        return False
    audit_append(agent_id=values["agent_id"], action=AuditAction.RECORDED, row={**values, **decided}, source="request")
    # An expiry decided here was asked for by a click on a request past its deadline (`_respond`).
    _count_decided(
        [confirmation_id],
        to_status,
        now=now,
        expired_by="click" if to_status == Status.EXPIRED else "",
        known=[(locked.pk, locked.channel.name, locked.created_at)] if locked is not None else None,
    )
    confirmation = locked or ConfirmationRequest.objects.only("pk", "agent_id", "callback_url").get(pk=confirmation_id)
    event_record(
        confirmation,
        _TERMINAL_EVENT[to_status],
        actor=decided_by,
        channel=channel,
        message=event_message or reason,
        data={**({"name": decided_by_name} if decided_by_name else {}), **(event_data or {})},
        notify=True,  # the waiting agents hear of it at commit
    )
    # One redraw row per state, so an in-flight redraw of an older state cannot swallow this one.
    redraw_add(confirmation.pk, OutboxKind.UPDATE, dedupe_key=f"{confirmation.pk}:update:{to_status}", locked=locked)
    if confirmation.callback_url:
        outbox_add(confirmation, OutboxKind.WEBHOOK, dedupe_key=f"{confirmation.pk}:webhook")
    return True


def _approvals_counted(confirmation: ConfirmationRequest) -> int:
    """The approvals a quorum counts: responses whose `decision_mac` verifies (one inserted or changed
    behind the gateway's back counts for nothing)."""
    rows = confirmation.responses.filter(decision="approve").values(*RESPONSE_SIGNED, "decision_mac")
    return sum(1 for row in rows if decision_verifies(ApproverResponse, row))


def _signed_anew(row: ConfirmationRequest | Any, changes: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The `decision_mac` of a request (its row, or its id: read) after `changes`, and its signed fields as
    they are: signed anew if its record verifies now, else left as it is — a request changed behind the
    gateway's back stays unverifiable whatever happens to it next, so no decision of the gateway
    launders it."""
    if not isinstance(row, ConfirmationRequest):
        read = ConfirmationRequest.objects.filter(pk=row).values(*REQUEST_SIGNED, "decision_mac").first()
        values = dict(read) if read else {field: None for field in (*REQUEST_SIGNED, "decision_mac")}
    else:
        values = {field: getattr(row, field) for field in (*REQUEST_SIGNED, "decision_mac")}
    if values["id"] is None:  # no such request: the conditional UPDATE will change nothing
        return "", values
    if not decision_verifies(ConfirmationRequest, values):
        return values["decision_mac"], values
    return decision_mac(ConfirmationRequest, {**values, **changes}), values


def _count_decided(
    confirmation_ids: list[Any],
    outcome: str,
    *,
    now: dt.datetime,
    expired_by: str = "",
    known: list[tuple[Any, str, dt.datetime]] | None = None,
) -> None:
    """At commit (a rolled-back decision is no decision): how long each request waited for it, by channel
    (`gateway_decision_seconds`), and the expiries. `known`: (id, channel name, created at) of each, as
    the caller read them; else one read per decision, off the allowed path."""
    waited = known
    if waited is None:
        waited = list(
            ConfirmationRequest.objects.filter(pk__in=confirmation_ids).values_list("pk", "channel__name", "created_at")
        )

    def count() -> None:
        for pk, channel, created_at in waited:
            seconds = (now - created_at).total_seconds()
            metrics.decided(channel=channel or "", outcome=outcome, seconds=seconds)
            logger.info(
                "confirmation %s after %.1f s%s",
                outcome,
                seconds,
                f" ({expired_by})" if expired_by else "",
                extra={"confirmation_id": str(pk), "channel": channel or "", "outcome": outcome},
            )
        if expired_by:
            metrics.EXPIRIES.labels(expired_by).inc(len(waited))

    transaction.on_commit(count)


# (channel name, as staff) of a clicker, judged from the request's row (`confirmation_respond`).
OnBehalf = Callable[[ConfirmationRequest], tuple[str, bool]]


def confirmation_respond(
    *,
    channel_name: str = "",
    callback: Callback,
    as_admin: bool = False,
    actor_kind: str = "",
    with_card: bool = True,
    on_behalf: OnBehalf | None = None,
) -> DecisionOutcome:
    """An approver's click (any channel), applied exactly once.

    Checks who may decide, records one response per approver, and decides the
    request when a reject arrives or the approvals reach the quorum. An approval
    may carry edited arguments (`callback.edits`) or a scope to approve for
    (`callback.grant`), each checked against what the gate allows.
    `callback.whole_turn` decides the pending calls of the request's turn card that the clicked card
    showed (`callback.shown_ids`), each one exactly once with every check applied (`_respond_whole_turn`).

    `as_admin` (Django admin / staff on the web page) skips the approver list.
    The clicker is recorded channel-qualified: `actor_kind` (`web`, `admin`), or
    the kind of the channel the click came through (`slack:U…`, `feishu:ou_…`).
    `with_card=False`: the caller draws nothing (the web page, the admin, a batch), so the
    outcome's `card` is None and the request is not read again after commit.
    `on_behalf`: for a caller that knows who clicked but not yet through which channel (the web
    page: that depends on the request's approvers), `(channel_name, as_admin)` from the request's
    row as read under its lock — so the request is read once. Draws no card.
    """
    if on_behalf is not None and with_card:
        raise ValueError("on_behalf draws no card: pass with_card=False")
    if callback.whole_turn:
        return _respond_whole_turn(
            channel_name=channel_name, callback=callback, as_admin=as_admin, actor_kind=actor_kind, on_behalf=on_behalf
        )
    try:
        # Who is whom is read once per click (the clicker's person, the call's owner: judged by the page's
        # standing and again under the lock); the chain's entries are appended together, at the end.
        # A connection that breaks before the COMMIT (a failover, a restart) costs the click nothing: it is
        # served again on a fresh one (approvals.services.replay).
        with selectors.people_memo():
            verdict = in_a_transaction_served_again_if_dropped(
                lambda: _respond(
                    channel_name=channel_name,
                    callback=callback,
                    as_admin=as_admin,
                    actor_kind=actor_kind,
                    on_behalf=on_behalf,
                )
            )
    except _Duplicate as dup:
        verdict = dup.outcome
    if verdict.code == "not_found" or not with_card:
        return verdict
    # The card is drawn after commit: the row lock, the NOTIFY and the waiting agent don't wait for it.
    confirmation = ConfirmationRequest.objects.select_related("agent", "channel", "escalate_channel").get(
        pk=callback.confirmation_id
    )
    owner = selectors.card_owner(confirmation)  # a call of a turn is shown on its turn's card
    return dataclasses.replace(verdict, card=selectors.card_view(owner, channel_name=channel_name))


def confirmations_respond(
    *, channel_name: str, callback: Callback, confirmation_ids: list[Any], as_admin: bool = False, actor_kind: str = ""
) -> list[tuple[str, DecisionOutcome]]:
    """The same click on several requests (the inbox's batch, a turn card's "all"): each request is
    decided by `confirmation_respond` on its own — its own transaction, row lock, approver checks and
    conditional UPDATE — so each is decided exactly once whatever else happens to the others."""
    outcomes = []
    for pk in confirmation_ids:
        one = dataclasses.replace(
            callback,
            confirmation_id=str(pk),
            whole_turn=False,
            # A vendor's redelivery of the whole click is a duplicate for each request.
            dedupe_key=f"{callback.dedupe_key}:{pk}" if callback.dedupe_key else "",
        )
        decided = confirmation_respond(
            channel_name=channel_name, callback=one, as_admin=as_admin, actor_kind=actor_kind, with_card=False
        )
        outcomes.append((str(pk), decided))
    return outcomes


def _respond_whole_turn(
    *, channel_name: str, callback: Callback, as_admin: bool, actor_kind: str, on_behalf: OnBehalf | None = None
) -> DecisionOutcome:
    """A turn card's "Approve all" / "Reject all": decides the pending calls among those the clicked
    card showed (`callback.shown_ids`), each on its own (`confirmations_respond`).

    A call that joined the turn after the card was drawn is not among them: it stays pending and is
    shown on the redrawn card. A click naming no calls (a card drawn before clicks carried them) decides
    nothing and has the card redrawn; one naming a call this turn's card does not show (another
    request, turn or agent) decides nothing. A repeat of the click (a vendor's retry, a replay, a double
    submit) names the same calls, each decided once already: it changes nothing more.
    """
    confirmation = (
        ConfirmationRequest.objects.select_related("agent", "channel", "escalate_channel")
        .filter(pk=callback.confirmation_id)
        .first()
    )
    if confirmation is None:
        return DecisionOutcome(applied=False, code="not_found", message="This approval request no longer exists.", card=None)
    if on_behalf is not None:  # (each call is still checked under its own lock below)
        channel_name, as_admin = on_behalf(confirmation)
    owner = selectors.card_owner(confirmation)
    members = selectors.batch_of(owner) or [owner]
    refusal = _shown_refusal(owner, members, callback, channel_name=channel_name, actor_kind=actor_kind)
    if refusal is not None:
        return refusal
    shown = set(callback.shown_ids or ())
    pending = [c.pk for c in members if c.status == Status.PENDING and str(c.pk) in shown]
    unseen = sum(1 for c in members if c.status == Status.PENDING and str(c.pk) not in shown)
    # All of a turn is approved as proposed: an edit or a scope belongs to one call.
    callback = dataclasses.replace(callback, edits=None, typed_edits=None, grant=None)
    results = confirmations_respond(
        channel_name=channel_name, callback=callback, confirmation_ids=pending, as_admin=as_admin, actor_kind=actor_kind
    )
    applied = [pk for pk, o in results if o.applied]
    refused = [o for _, o in results if not o.applied]
    if not pending:
        message, code = "Nothing was changed. The calls this card showed are decided already.", "already_decided"
    elif callback.dry_run:
        message = "" if applied else refused[0].message
        code = "would_apply" if applied else refused[0].code
    else:
        verb = "Approved" if callback.decision == "approve" else "Rejected"
        message = f"{verb} {len(applied)} call(s) of this turn." if applied else "Nothing was changed."
        if refused:
            message += f" {len(refused)} left unchanged: {refused[0].message}"
        code = "decided" if applied else (refused[0].code if refused else "already_decided")
    if unseen and not (callback.dry_run and applied):
        message += f" {unseen} {NOT_SHOWN_LEFT_PENDING}"
    owner.refresh_from_db()
    card = selectors.card_view(owner, channel_name=channel_name)
    return DecisionOutcome(applied=bool(applied), code=code, message=message.strip(), card=card)


# (a call that joined the turn after the card was drawn, or one beyond the calls a chat card lists)
NOT_SHOWN_LEFT_PENDING = "other call(s) of this turn, not shown on this card when it was drawn, are left pending."
STALE_CARD = (
    "This card is out of date, so nothing was changed: it has been redrawn with the calls pending now; decide again."
)
NOT_ON_CARD = "This click names calls that this turn's card does not show, so nothing was changed."


def _shown_refusal(
    owner: ConfirmationRequest,
    members: list[ConfirmationRequest],
    callback: Callback,
    *,
    channel_name: str,
    actor_kind: str,
) -> DecisionOutcome | None:
    """Why a whole-turn click may decide nothing at all, recorded on the turn's lead; None if it may go on.

    A click without `shown_ids` comes from a card drawn before buttons carried them (or a forged one):
    the cards are redrawn (one row per set of pending calls, so repeats add nothing) for the approver
    to decide what is pending now. Ids outside the card's calls cannot come from our signed buttons.
    """
    on_card = {str(c.pk) for c in members}
    if callback.shown_ids and set(callback.shown_ids) <= on_card:
        return None
    actor = f"{actor_kind or selectors.actor_kind(owner, channel_name=channel_name)}:{callback.actor}"
    who = {"name": callback.actor_name or callback.actor}
    with transaction.atomic():
        if callback.shown_ids:
            code, message = "not_on_card", NOT_ON_CARD
            who["shown_ids"] = sorted(set(callback.shown_ids) - on_card)[:20]
        else:
            code, message = "stale_card", STALE_CARD
            pending = sorted(str(c.pk) for c in members if c.status == Status.PENDING)
            digest = hashlib.sha256(",".join(pending).encode()).hexdigest()[:16]
            redraw_add(owner.pk, OutboxKind.UPDATE, dedupe_key=f"{owner.pk}:update:current-{digest}")
        event_record(owner, EventKind.REFUSED_CLICK, actor=actor, channel=channel_name, message=message, data=who)
    return DecisionOutcome(
        applied=False, code=code, message=message, card=selectors.card_view(owner, channel_name=channel_name)
    )


class _Duplicate(Exception):
    def __init__(self, outcome: DecisionOutcome):
        self.outcome = outcome


class _Refused(Exception):
    def __init__(self, code: str, message: str, data: dict[str, Any] | None = None):
        self.code = code
        self.message = message
        self.data = data or {}  # more for the `refused_click` event


# A click's read of its request under the row lock, with the agent, its team (who may see it: `on_behalf`)
# and the channel (the escalation channel is read only for an escalated request): prepared once per
# connection (approvals.prepared).
_LOCKED_READ = PreparedRead(
    lambda pk: ConfirmationRequest.objects.select_for_update(of=("self",), no_key=True)
    .select_related("agent__team", "channel")
    .filter(pk=pk)
)


def _respond(
    *, channel_name: str, callback: Callback, as_admin: bool, actor_kind: str, on_behalf: OnBehalf | None = None
) -> DecisionOutcome:
    # Row lock: responses to one request are counted one at a time (quorum), and
    # a click and the expiry sweep cannot interleave.
    confirmation = _LOCKED_READ.first(callback.confirmation_id)
    if confirmation is None:
        return DecisionOutcome(applied=False, code="not_found", message="This approval request no longer exists.", card=None)
    if on_behalf is not None:
        channel_name, as_admin = on_behalf(confirmation)

    def outcome(applied: bool, code: str, message: str) -> DecisionOutcome:
        return DecisionOutcome(applied=applied, code=code, message=message, card=None)  # card: after commit

    # Who, as recorded everywhere: the channel-qualified id, the display name beside it.
    actor = f"{actor_kind or selectors.actor_kind(confirmation, channel_name=channel_name)}:{callback.actor}"
    name = callback.actor_name or callback.actor
    who = {"name": name}

    # A dry run that carries the vendor's id claims it too (a tap that asks a question: `Callback.dedupe_key`).
    if callback.dedupe_key:
        try:
            with transaction.atomic():
                CallbackReceipt.objects.create(channel=channel_name, key=callback.dedupe_key[:200])
        except IntegrityError:
            raise _Duplicate(outcome(False, "duplicate", "This click was already handled.")) from None

    if confirmation.is_final:
        message = selectors.final_state_sentence(confirmation)
        # recorded for dry runs too: a refused Reject never gets as far as its modal
        event_record(
            confirmation, EventKind.LATE_CLICK, actor=actor, channel=channel_name, message=message, data=who
        )
        return outcome(False, "already_decided", message)

    def past_deadline() -> DecisionOutcome | None:
        if confirmation.expires_at is None or confirmation.expires_at > timezone.now():
            return None
        # Past its deadline but not yet swept: expire it now rather than accept a late decision.
        if not callback.dry_run:
            confirmation_expire(confirmation_id=confirmation.pk)
            event_record(confirmation, EventKind.LATE_CLICK, actor=actor, channel=channel_name, data=who)
        return outcome(False, "already_decided", "This request expired before you answered.")

    if (late := past_deadline()) is not None:
        return late

    # Staff skip the approver list, never the self-approval rule.
    if as_admin:
        refusal = selectors.self_approval_refusal(confirmation, actor=callback.actor, identity=actor)
    else:
        refusal = selectors.approver_refusal(
            confirmation, channel_name=channel_name, actor=callback.actor, identity=actor
        )
    if refusal is None and not decision_verifies(ConfirmationRequest, confirmation):
        refusal = ("unverified", UNVERIFIED_CLICK)
    refused_data: dict[str, Any] = {}
    if refusal is None:
        refusal = _kind_refusal(confirmation, callback)
    edits, approved_args, option, judged = {}, None, None, None
    if callback.answer_inputs is not None and confirmation.kind == RequestKind.QUESTION:
        # A form's inputs, read with the question's own schema (the click carries none).
        callback = dataclasses.replace(
            callback, answer=answer_from_inputs(confirmation.answer_schema or {}, callback.answer_inputs)
        )
    if refusal is None and callback.decision == "answer" and not callback.dry_run:
        problem = answer_problem(confirmation.answer_schema or {}, callback.answer)
        if problem:
            refusal = ("answer_refused", f"This answer does not fit the question ({problem}); nothing was recorded.")
            refused_data = {"answer": callback.answer}
    if refusal is None and callback.decision == "approve":
        try:
            edits, approved_args = _checked_edits(confirmation, callback)
            option = _checked_grant(confirmation, callback, edited=bool(edits))
            if edits:
                judged = _judged_again(confirmation, approved_args)
        except _Refused as refused:
            refusal, refused_data = (refused.code, refused.message), refused.data
    if refusal is not None:
        code, message = refusal
        event_record(
            confirmation, EventKind.REFUSED_CLICK, actor=actor, channel=channel_name, message=message,
            data={**who, **refused_data},
        )  # fmt: skip
        return outcome(False, code, message)
    if judged is not None and (late := past_deadline()) is not None:
        return late  # the deadline passed while the agent's hooks judged the edit

    if callback.dry_run:
        return outcome(True, "would_apply", "")

    person = selectors.person_of(actor)
    # A person of the directory is named as the directory names them, whichever identity answered.
    name = selectors.person_name(person) or name
    who = {**who, "name": name}
    # A stand-in answers for the person they stand in for (docs/approving.md, "Stand-ins").
    behalf = None if as_admin else selectors.stand_in_for(selectors.routed_people(confirmation, channel_name=channel_name), person=person)
    if (answered := _answered_for(confirmation, person=person, behalf=behalf)) is not None:
        return outcome(False, "duplicate", answered)
    response = ApproverResponse(
        confirmation=confirmation,
        approver=actor,
        person=person,
        approver_name=name,
        on_behalf_of=behalf["for"] if behalf else "",
        on_behalf_of_name=behalf["name"] if behalf else "",
        decision=callback.decision,
        reason=callback.reason,
        channel=channel_name,
    )
    response.decision_mac = decision_mac(ApproverResponse, response)
    if not response_add(response):  # one per person (a unique constraint): this one answered already
        return outcome(False, "duplicate", _already_answered(confirmation, person=person, actor=actor))
    audit_append(agent_id=confirmation.agent_id, action=AuditAction.RECORDED, row=response)
    if behalf:
        who = {**who, "on_behalf_of": behalf["for"], "on_behalf_of_name": behalf["name"]}
        name_on_behalf = f"{name} on behalf of {behalf['name']}"
    else:
        name_on_behalf = name

    if callback.decision == "answer":  # the first valid answer wins: the conditional UPDATE under the row lock
        shown = answer_text(callback.answer, confirmation.answer_schema)
        confirmation_transition(
            confirmation.pk,
            Status.ANSWERED,
            decided_by=actor,
            decided_by_name=name_on_behalf,
            channel=channel_name,
            answer=callback.answer,
            event_message=f"answered: {shown}",
            event_data={"answer": callback.answer},
            locked=confirmation,
        )
        return outcome(True, "decided", f"Answered: {shown}")

    if callback.decision == "reject":
        confirmation_transition(
            confirmation.pk,
            Status.REJECTED,
            decided_by=actor,
            decided_by_name=name_on_behalf,
            reason=callback.reason,
            channel=channel_name,
            event_data=_behalf_data(behalf),
            locked=confirmation,
        )
        return outcome(True, "decided", "Rejected.")
    # (No count needed when one approval is the quorum: this is it.)
    approvals = 1 if confirmation.approvals_required <= 1 else _approvals_counted(confirmation)
    if approvals >= confirmation.approvals_required:
        message, data = callback.reason, {}
        if edits:
            message = f"approved with edited arguments ({', '.join(sorted(edits))})" + (
                f": {callback.reason}" if callback.reason else ""
            )
            data = {"edited": True, "edited_paths": sorted(edits), "proposed_args": confirmation.tool_args,
                    "approved_args": approved_args, "judged_again": judged}  # fmt: skip
        if option is not None:
            message = f"approved {grant_label(option)}" + (f": {callback.reason}" if callback.reason else "")
        won = confirmation_transition(
            confirmation.pk,
            Status.APPROVED,
            decided_by=actor,
            decided_by_name=name_on_behalf,
            reason=callback.reason,
            channel=channel_name,
            arg_edits=edits,
            approved_args=approved_args,
            event_message=message,
            event_data={**data, **_behalf_data(behalf)},
            locked=confirmation,
        )
        if not won:  # cannot happen under the row lock; never grant for an approval that did not take
            raise AlreadyDecided(selectors.final_state_sentence(confirmation))
        if option is not None:
            grant_create(
                confirmation=confirmation, option=option, granted_by=actor, granted_by_name=name, channel=channel_name
            )
            return outcome(True, "decided", f"Approved {grant_label(option)}.")
        return outcome(True, "decided", "Approved with your edits." if edits else "Approved.")
    event_record(
        confirmation,
        EventKind.RESPONSE,
        actor=actor,
        channel=channel_name,
        message=f"approval {approvals} of {confirmation.approvals_required}",
        data=who,
    )
    changes_notify([confirmation.pk])  # WebSocket watchers see the count move
    redraw_add(
        confirmation.pk,
        OutboxKind.UPDATE,
        dedupe_key=f"{confirmation.pk}:update:approvals-{approvals}",
        locked=confirmation,
    )
    return outcome(True, "recorded", f"Approval recorded ({approvals} of {confirmation.approvals_required}).")


def _kind_refusal(confirmation: ConfirmationRequest, callback: Callback) -> tuple[str, str] | None:
    """A question takes answers only, a confirmation approvals and rejections only."""
    question = confirmation.kind == RequestKind.QUESTION
    if question and callback.decision != "answer":
        return "is_a_question", "This is a question: it takes an answer, not an approval or a rejection."
    if not question and callback.decision == "answer":
        return "not_a_question", "This request is not a question: approve or reject it."
    return None


def _behalf_data(behalf: dict[str, str] | None) -> dict[str, str]:
    """What a decision event records of a stand-in's answer (`on_behalf_of`: the person key)."""
    return {"on_behalf_of": behalf["for"], "on_behalf_of_name": behalf["name"]} if behalf else {}


def _answered_for(confirmation: ConfirmationRequest, *, person: str, behalf: dict[str, str] | None) -> str | None:
    """A sentence if this answer would count someone twice: a stand-in for a person who answered (or
    for whom another stand-in answered), or a person whose stand-in answered for them; else None."""
    if confirmation.approvals_required <= 1:
        return None  # the first answer decides: nobody can have answered before
    if behalf is not None:
        if confirmation.responses.filter(Q(person=behalf["for"]) | Q(on_behalf_of=behalf["for"])).exists():
            return f"{behalf['name']} has already answered this request (in person or through a stand-in)."
        return None
    earlier = confirmation.responses.filter(on_behalf_of=person).values_list("approver_name", flat=True).first()
    if earlier is not None:
        return f"{earlier} has already answered this request on your behalf; one person counts once."
    return None


def _already_answered(confirmation: ConfirmationRequest, *, person: str, actor: str) -> str:
    """What a person who answered already is told, naming the identity they answered under if it
    was another (`web:carol` on the page, then `admin:carol` in the admin)."""
    earlier = confirmation.responses.filter(person=person).values_list("approver", flat=True).first()
    if earlier and earlier != actor:
        return f"You have already answered this request, as {earlier}; one person counts once."
    return "You have already answered this request."


def _edited_values(confirmation: ConfirmationRequest, callback: Callback) -> dict[str, Any]:
    """The click's edits as JSON values: typed texts read, values checked, each as the JSON type of
    the value it replaces or the type the gate declares (`edit_types`); refuses one that is not."""
    declared = confirmation.edit_types or {}
    values: dict[str, Any] = {}
    try:
        for path, text in (callback.typed_edits or {}).items():
            if text.strip():  # left empty: unchanged
                expected = declared.get(path) or json_type(get_path(confirmation.tool_args, path))
                values[path] = edit_from_text(path, text, expected=expected)
        for path, value in (callback.edits or {}).items():
            expected = declared.get(path) or json_type(get_path(confirmation.tool_args, path))
            values[path] = checked_edit_value(path, value, expected=expected)
    except ValueError as exc:
        raise _Refused("edit_refused", str(exc)) from None
    return values


def _checked_edits(confirmation: ConfirmationRequest, callback: Callback) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """The edits that change something, and the approved arguments as stored; refuses what the gate does not allow.

    Only the paths fixed when the request was made (`editable_paths`: the gate's `allow_edit`
    minus masked values) may be given at all, each keeping its JSON type (`_edited_values`). A new value
    that the agent's masks (redact) would hide is refused too: the gateway never stores secrets,
    and an edit is stored to be shown and audited.
    """
    given = {path for path, text in (callback.typed_edits or {}).items() if text.strip()} | set(callback.edits or {})
    allowed = list(confirmation.editable_paths or [])
    # An input for any other path is refused, before its value is read and even if it holds the proposed
    # value: no form the gateway draws has one, so the click was crafted, and it decides nothing.
    outside = sorted(given - set(allowed))
    if outside and not allowed:
        raise _Refused("edit_refused", EDIT_NOT_ALLOWED)
    if outside:
        raise _Refused(
            "edit_refused",
            f"You may not change {', '.join(outside)}; the editable arguments are {', '.join(allowed)}.",
        )
    proposed = _edited_values(confirmation, callback)
    if not proposed:
        return {}, None
    changed = {path: value for path, value in proposed.items() if get_path(confirmation.tool_args, path) != value}
    if not changed:
        return {}, None  # nothing differs: a plain approval
    approved = with_edits(confirmation.tool_args, changed)
    _, hooks = selectors.agent_hooks(agent=confirmation.agent)
    masked = mask_args(hooks, approved)
    hidden = sorted(path for path in changed if get_path(masked, path) != get_path(approved, path))
    if hidden:
        raise _Refused(
            "edit_refused",
            f"The new value of {', '.join(hidden)} would be redacted; a secret cannot be set by an edit "
            "(the gateway never stores one).",
        )
    return changed, approved


def _judged_again(confirmation: ConfirmationRequest, approved_args: dict[str, Any]) -> list[dict[str, Any]]:
    """Run the agent's current pre-tool-use chain on the edited call, as the call itself was judged
    (same agent, session, user, metadata, turn; the session's context as it is now); every hook's
    answer, or `_Refused` with why the approval cannot take (docs/approving.md, "Judged again").

    Check only (`HookContext.check_only`): a rate limit looks without counting, `command` and
    `webhook` hooks are told. The hooks see the arguments as stored — a masked value as its mask.
    Refused: a deny from any hook; an `ask` routed to another gate than this request's (its
    approvers, not these, must approve such a call); hooks that would rewrite the edited
    arguments (the agent would not run what the approver approved). This request's own gate
    asking again is the approval being given.

    Run under the request's row lock (the caller's): the verdict and the decision cannot be split
    by another click, a cancel or the sweep, so nothing but the deadline (the caller's) needs
    checking again afterwards. The price:
    a slow `command` or `webhook` hook holds that one row (never longer than its timeout), so
    other clicks on the same request wait for it; the sweep skips a locked row and waiting
    agents read without locks.
    """
    agent = confirmation.agent
    version, hooks = selectors.agent_hooks(agent=agent)
    ctx = pre_tool_use_context(
        agent=agent.name,
        session_id=confirmation.session_id,
        user_id=confirmation.user_id,
        metadata=confirmation.metadata,
        tool_name=confirmation.tool_name,
        tool_args=approved_args,
        tool_call_id=confirmation.tool_call_id,
        turn_id=confirmation.turn_id,
        agent_read_only=agent.read_only,  # as of the row lock's read: a switch flipped since the ask counts
        config_version=version,
        session=hook_state.session_values(agent=agent.name, session_id=confirmation.session_id),
        check_only=True,
    )
    verdict = run_chain(hooks, ctx)
    data = {"judged_again": verdict.hook_decisions}
    if verdict.decision == "deny":
        why = verdict.reason.rstrip(". ") or "no reason given"
        refused = f"The edited call is refused by {verdict.decided_by}: {why}. Nothing was decided."
        raise _Refused("edit_refused", refused, data)
    if verdict.ask is not None and verdict.ask.gate != confirmation.hook_name:
        raise _Refused(
            "edit_refused",
            f"The edited call needs approval through {verdict.ask.gate} ({verdict.reason.rstrip('. ')}), "
            f"not this request's {confirmation.hook_name}. Nothing was decided: approve it as proposed, "
            "or reject it so the agent can ask again.",
            data,
        )
    if verdict.tool_args != approved_args:
        keys = {*verdict.tool_args, *approved_args}
        rewritten = sorted(key for key in keys if verdict.tool_args.get(key) != approved_args.get(key))
        raise _Refused(
            "edit_refused",
            f"The agent's hooks would change the edited arguments ({', '.join(rewritten)}), so the agent would not "
            "run what you approve. Nothing was decided: edit them to values the hooks leave as they are.",
            data,
        )
    return verdict.hook_decisions


def _checked_grant(confirmation: ConfirmationRequest, callback: Callback, *, edited: bool) -> dict[str, Any] | None:
    """The grant option an approval asks for, if any; refuses one the request does not offer."""
    if callback.grant is None:
        return None
    options = confirmation.grant_options or []
    if not 0 <= callback.grant < len(options):
        raise _Refused("grant_refused", "This request offers no such scope to approve for.")
    if edited:
        raise _Refused(
            "grant_refused", "A scope approves the arguments as proposed; to change them, edit and approve once."
        )
    return options[callback.grant]


@transaction.atomic
def confirmation_cancel(*, agent: Agent, confirmation_id: Any, kind: str = RequestKind.CONFIRMATION) -> ConfirmationRequest:
    """The agent withdraws its request (a question: `kind="question"`). 409 if it was already decided."""
    if kind == RequestKind.QUESTION:
        confirmation = selectors.question_for_agent(agent=agent, question_id=confirmation_id)
    else:
        confirmation = selectors.confirmation_for_agent(agent=agent, confirmation_id=confirmation_id)
    cancelled = confirmation_transition(
        confirmation.pk,
        Status.CANCELLED,
        decided_by=f"agent:{agent.name}",
        decided_by_name=agent.name,
        reason="cancelled by the agent",
    )
    confirmation.refresh_from_db()
    if not cancelled:
        raise AlreadyDecided(selectors.final_state_sentence(confirmation), details={"status": confirmation.status})
    return confirmation


@transaction.atomic
def confirmation_cancel_by_staff(*, confirmation_id: Any, actor: str, reason: str = "") -> bool:
    """An operator (`actor`: the staff user's name) withdraws a pending request in the Django admin,
    recorded as `admin:<name>`. False if it was already final."""
    return confirmation_transition(
        confirmation_id,
        Status.CANCELLED,
        decided_by=f"admin:{actor}",
        decided_by_name=actor,
        reason=reason or f"cancelled by {actor}",
    )


def confirmation_expire(*, confirmation_id: Any) -> bool:
    """Expire one request whose deadline has passed (database clock). True if this call did it."""
    with transaction.atomic():
        return confirmation_transition(
            confirmation_id,
            Status.EXPIRED,
            decided_by=SYSTEM_ACTOR,
            decided_by_name=SYSTEM_ACTOR,
            reason=EXPIRED_REASON,
            extra_filter=Q(expires_at__lte=timezone.now()),
        )


def confirmation_expire_due(*, limit: int = 500) -> int:
    """The beat sweep: expire every pending request past its deadline. Returns how many."""
    return len(confirmations_expire(limit=limit))


def confirmations_expire(*, confirmation_ids: list[Any] | None = None, limit: int = 500) -> list[str]:
    """Expire pending requests past their deadline, each exactly once, in ONE transaction; the ids this call expired.

    The given requests (a server process's waiters whose deadlines passed), or with None
    any that are due (the sweep). Rows another transaction holds (a click being decided)
    are skipped, not waited for. Each expired request gets what `confirmation_transition`
    gives one: its event, its redraw and webhook outbox rows, the notification — in bulk.
    """
    now = timezone.now()
    with transaction.atomic():
        due = ConfirmationRequest.objects.select_for_update(skip_locked=True, no_key=True, of=("self",)).filter(
            status=Status.PENDING, expires_at__lte=now
        )
        if confirmation_ids is not None:
            due = due.filter(ids_in(ConfirmationRequest, confirmation_ids))
        signed = list(
            due.order_by("expires_at").values(
                *REQUEST_SIGNED, "decision_mac", "callback_url", "batch_lead_id", "created_at", "channel__name"
            )[:limit]
        )
        if not signed:
            return []
        rows = [(r["id"], r["agent_id"], r["callback_url"], r["batch_lead_id"]) for r in signed]
        ids = [pk for pk, _, _, _ in rows]
        callbacks = {pk: url for pk, _, url, _ in rows}
        expired = {"status": Status.EXPIRED, "decided_by": SYSTEM_ACTOR, "decided_at": now, "decision_reason": EXPIRED_REASON}
        macs = {
            r["id"]: decision_mac(ConfirmationRequest, {**r, **expired})
            if decision_verifies(ConfirmationRequest, r)
            else r["decision_mac"]  # (as `_signed_anew`: what does not verify stays so)
            for r in signed
        }
        rows_update_each(ConfirmationRequest, values={**expired, "decided_by_name": SYSTEM_ACTOR}, each="decision_mac", per_row=macs)
        moved = [
            (r["agent_id"], AuditAction.RECORDED, ConfirmationRequest(**{**{f: r[f] for f in REQUEST_SIGNED}, **expired}))
            for r in signed
        ]  # fmt: skip
        _count_decided(
            ids, Status.EXPIRED, now=now, expired_by="sweep" if confirmation_ids is None else "waiter",
            known=[(r["id"], r["channel__name"], r["created_at"]) for r in signed],
        )  # fmt: skip
        expired = [
            ConfirmationEvent(confirmation_id=pk, kind=EventKind.EXPIRED, actor=SYSTEM_ACTOR, message=EXPIRED_REASON)
            for pk in ids
        ]
        # Each request's move and its event, chained in ONE append (per agent) after the events are written.
        events = ConfirmationEvent.objects.bulk_create(expired)
        audit_append_many([*moved, *((agent_id, AuditAction.EVENT, event) for (_, agent_id, _, _), event in zip(rows, events))])
        redrawn = needing_redraw({pk: lead for pk, _, _, lead in rows})
        outbox = [
            Outbox(confirmation_id=pk, kind=OutboxKind.UPDATE, dedupe_key=f"{pk}:update:expired")
            for pk in ids
            if pk in redrawn
        ]
        outbox += [
            Outbox(confirmation_id=pk, kind=OutboxKind.WEBHOOK, dedupe_key=f"{pk}:webhook")
            for pk in ids
            if callbacks.get(pk)
        ]
        outbox_add_many(outbox)
        changes_notify(ids)
    return [str(pk) for pk in ids]


# --------------------------------------------------------------------------- timers (beat)


def confirmation_timers_due(*, limit: int = 200) -> TimersRun:
    """Send the reminders and escalations that are due, and drop expired hook state; how many of each."""
    now = timezone.now()
    run = TimersRun()
    due = ConfirmationRequest.objects.filter(status=Status.PENDING)
    for pk in due.filter(remind_at__lte=now).order_by("remind_at").values_list("pk", flat=True)[:limit]:
        run.reminded += confirmation_remind(confirmation_id=pk, now=now)
    for pk in due.filter(warn_at__lte=now, expires_at__gt=now).order_by("warn_at").values_list("pk", flat=True)[:limit]:
        run.warned += confirmation_warn(confirmation_id=pk, now=now)
    escalations = due.filter(escalate_at__lte=now, escalated_at__isnull=True, escalate_channel__isnull=False)
    for pk in escalations.order_by("escalate_at").values_list("pk", flat=True)[:limit]:
        run.escalated += confirmation_escalate(confirmation_id=pk, now=now)
    run.counters_purged = hook_state.purge_expired(now=now)
    return run


@transaction.atomic
def confirmation_remind(*, confirmation_id: Any, now: dt.datetime) -> bool:
    """Re-ping the approvers of a pending request once. True if this call did it."""
    changed = ConfirmationRequest.objects.filter(
        pk=confirmation_id, status=Status.PENDING, remind_at__lte=now
    ).update(remind_at=None)
    if not changed:
        return False
    confirmation = ConfirmationRequest.objects.get(pk=confirmation_id)
    text = REMINDER_TEXT
    if confirmation.approvals_required > 1:
        approvals = confirmation.responses.filter(decision="approve").count()
        text += f" ({approvals} of {confirmation.approvals_required} approvals so far)"
    event_record(confirmation, EventKind.REMINDED, actor=SYSTEM_ACTOR, message=text)
    transaction.on_commit(metrics.REMINDERS.inc)
    logger.info("reminder queued", extra={"confirmation_id": str(confirmation.pk)})
    redraw_add(confirmation.pk, OutboxKind.REMIND, dedupe_key=f"{confirmation.pk}:remind", payload={"text": text})
    return True


def warning_text(confirmation: ConfirmationRequest, *, now: dt.datetime) -> str:
    """The warning before the deadline: how long is left and what the agent is told then."""
    left = max(0, int((confirmation.expires_at - now).total_seconds())) if confirmation.expires_at else 0
    span = f"{left // 60} min {left % 60} s" if left >= 60 else f"{left} s"
    then = "allow" if confirmation.on_timeout == "allow" else "deny"
    told = f"the agent is told {then}"
    if confirmation.kind == RequestKind.QUESTION:
        told = "the agent gets the default answer" if confirmation.default_answer is not None else "the agent gets no answer"
    return f"Deadline soon: {span} left (until {confirmation.expires_at:%Y-%m-%d %H:%M:%S} UTC); then {told}."


@transaction.atomic
def confirmation_warn(*, confirmation_id: Any, now: dt.datetime) -> bool:
    """Warn the approvers of a pending request that its deadline is near, once (`warn_before_seconds`).
    True if this call did it.

    Never after the deadline: a timer that runs late finds nothing to do (the warning is dropped,
    not sent late), and a worker that reaches its outbox row after the deadline sends nothing
    either (`delivery`)."""
    changed = ConfirmationRequest.objects.filter(
        pk=confirmation_id, status=Status.PENDING, warn_at__lte=now, expires_at__gt=now
    ).update(warn_at=None)
    if not changed:
        return False
    confirmation = ConfirmationRequest.objects.get(pk=confirmation_id)
    text = warning_text(confirmation, now=now)
    event_record(confirmation, EventKind.WARNED, actor=SYSTEM_ACTOR, message=text)
    transaction.on_commit(metrics.WARNINGS.inc)
    logger.info("deadline warning queued", extra={"confirmation_id": str(confirmation.pk)})
    redraw_add(confirmation.pk, OutboxKind.REMIND, dedupe_key=f"{confirmation.pk}:warn", payload={"text": text})
    return True


@transaction.atomic
def confirmation_escalate(*, confirmation_id: Any, now: dt.datetime) -> bool:
    """Post a card to the escalation channel and mark the first card escalated. True if this call did it."""
    changed = ConfirmationRequest.objects.filter(
        pk=confirmation_id,
        status=Status.PENDING,
        escalate_at__lte=now,
        escalated_at__isnull=True,
        escalate_channel__isnull=False,
    ).update(escalated_at=now)
    if not changed:
        return False
    confirmation = ConfirmationRequest.objects.select_related("channel", "escalate_channel").get(pk=confirmation_id)
    target = confirmation.escalate_channel
    who = ", ".join(confirmation.escalate_approvers) or "any member"
    event_record(
        confirmation,
        EventKind.ESCALATED,
        actor=SYSTEM_ACTOR,
        channel=target.name,
        message=f"escalated to {target.name} ({who}); approvers on {confirmation.channel.name} may still decide",
    )
    # Its own dedupe key: an escalation to the request's own channel still posts a second card.
    card_add(confirmation, target, dedupe_key=f"{confirmation.pk}:card:{target.name}:escalation")
    transaction.on_commit(metrics.ESCALATIONS.inc)
    logger.info("escalated to %s", target.name, extra={"confirmation_id": str(confirmation.pk), "channel": target.name})
    redraw_add(confirmation.pk, OutboxKind.UPDATE, dedupe_key=f"{confirmation.pk}:update:escalated")
    return True
