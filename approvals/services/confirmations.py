"""Confirmation requests: created (with their cards), moved out of `pending`, cancelled.

Every move out of `pending` is ONE conditional UPDATE (`confirmation_transition`);
the loser of any race (a double click, a vendor retry, the sweep against a
click, a cancel against an approval) updates 0 rows and is told the winner.
The event, the NOTIFY that wakes waiting agents (delivered at commit) and the
card-redraw / webhook outbox rows are written in the same transaction.

The rest of a request's life has a module each: an approver's click (`clicks`, `responses`; what an
approval may carry: `edits`), its deadline (`expiry`), its reminders, warnings and escalations
(`timers`). Each decision among them is a `confirmation_transition`.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from approvals import selectors
from approvals.audit import REQUEST_SIGNED, decision_mac, decision_verifies
from approvals.errors import AlreadyDecided, InvalidInput
from approvals.models import (
    Agent,
    ApproverResponse,
    AuditAction,
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
from approvals.services.audit import audit_append
from approvals.services.records import (
    Insert,
    event_record,
    moved_with_event,
    outbox_add,
    outbox_queued,
    redraw_add,
    rows_insert,
)
from gateway_contract import draws_itself, has_turn_cards
from gateway_utils import metrics, tick_rest
from hooks.base import AskSpec

logger = logging.getLogger("approvals.confirmations")

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
    also: Callable[[ConfirmationRequest], list[Insert]] | None = None,
) -> ConfirmationRequest:
    """Insert the request, its `created` event and its card outbox row (the caller holds the transaction).

    A call of a turn that already has a pending request in the same channel joins that request's
    card (`batch_lead`) instead of getting its own, when the channel's cards can list a turn.
    `also(request)`: the caller's rows about the request (built, not yet written), written in the same
    statement after the request's own (the tool call that asked: `services.tool_calls`); the caller
    links them into the chain.
    """
    now = now or timezone.now()
    channel = selectors.channel_of_agent(agent=agent, name=spec.channel)
    if channel is None:
        raise InvalidInput(f"approval gate {spec.gate!r} names channel {spec.channel!r}, which does not exist")
    escalate_channel = None
    if spec.escalate_channel:
        escalate_channel = selectors.channel_of_agent(agent=agent, name=spec.escalate_channel)
    lead_id = None
    # A card its channel's digest gathers is kept back (docs/policies.md, "Risk"); such a call neither
    # joins a turn's card nor is joined: it is listed, and decided, on its own line of a digest.
    # (Never a question: a digest has no room for its inputs.)
    gathered = selectors.digested_risks(channel)
    held = kind == RequestKind.CONFIRMATION and spec.risk in gathered
    if turn_id and has_turn_cards(channel.kind) and not held:
        turn = ConfirmationRequest.objects.filter(
            agent=agent, session_id=session_id, turn_id=turn_id, status=Status.PENDING, channel=channel
        )
        if gathered:
            turn = turn.exclude(risk__in=gathered)
        first = turn.order_by("created_at").values_list("pk", "batch_lead_id").first()
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
    escalate_after = spec.escalation_seconds()  # the gate's time for the request's risk (docs/policies.md, "Risk")
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
        escalate_at=now + dt.timedelta(seconds=escalate_after) if escalate_after and escalate_channel else None,
        escalate_channel=escalate_channel,
        escalate_approvers=escalate_approvers,
        escalate_approver_people=escalate_people,
        callback_url=callback_url,
        risk=spec.risk,
        kind=kind,
        answer_schema=answer_schema,
        default_answer=default_answer,
    )
    confirmation.decision_mac = decision_mac(ConfirmationRequest, confirmation)
    transaction.on_commit(lambda: metrics.request_created(channel=channel.name, kind=kind, risk=spec.risk))
    _timers_soon(confirmation, now=now)
    created = ConfirmationEvent(
        confirmation_id=confirmation.pk, kind=EventKind.CREATED, actor=f"agent:{agent.name}", channel="", message=spec.reason,
        data={},
    )
    extra = also(confirmation) if also is not None else []
    if lead_id is None:
        # The request, its `created` event, its card (and, on the web page, the card's `card_posted`
        # event): one statement. (The ORM's save machinery costs more than an INSERT, on every request.)
        card, posted = _card_rows(confirmation, channel, dedupe_key=f"{confirmation.id}:card:{channel.name}")
        if held:
            card.status = OutboxStatus.HELD  # posted with its channel's next digest (approvals.services.digests)
        inserts = [Insert(confirmation), Insert(created), Insert(card, unless_conflict="dedupe_key")]
        written = rows_insert([*inserts, *([Insert(posted, after=2)] if posted is not None else []), *extra])
        audit_append(agent_id=agent.pk, action=AuditAction.RECORDED, row=confirmation)
        audit_append(agent_id=agent.pk, action=AuditAction.EVENT, row=created)
        _card_written(card, posted, written=written[2], agent_id=agent.pk)
        return confirmation
    # A call joining its turn's card: the lead's card is redrawn with it.
    rows_insert([Insert(confirmation), Insert(created), *extra])
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


def _timers_soon(confirmation: ConfirmationRequest, *, now: dt.datetime) -> None:
    """A deadline or timer due before beat's resting tick would look again (gateway_utils.tick_rest) ends the
    rest at commit: the sweep and the timers see this request on time even when it queues no delivery (a web
    card, a card kept for a digest). Only such short timers pay the broker's round trip; a request due later
    is seen in time by the first tick after the rest (`selectors.nothing_due_before`)."""
    rest = settings.GATEWAY_TICK_REST_SECONDS
    if rest <= 0:
        return
    soon = now + dt.timedelta(seconds=rest + settings.GATEWAY_TICK_SECONDS)
    timers = (confirmation.expires_at, confirmation.warn_at, confirmation.remind_at, confirmation.escalate_at)
    if any(at is not None and at < soon for at in timers):
        transaction.on_commit(tick_rest.wake)


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
    locked_verifies: bool = False,
    answer: Any = None,
    response: ApproverResponse | None = None,
) -> bool:
    """pending -> `to_status` as ONE conditional UPDATE. True if this call won.

    `locked`: the request's row as the caller read it under its row lock in this transaction
    (it is not read again: what the rest needs — its id, agent, callback URL — cannot have changed).
    `locked_verifies`: the caller checked that row's `decision_mac` (a click refuses a record that does
    not verify) and changed nothing of it since: it is signed anew without being checked twice.

    `decided_by` is channel-qualified (`slack:U…`, `web:alice`, `gateway`…), `decided_by_name`
    its display name; an approval with edits sets `arg_edits` and `approved_args` in the same UPDATE.
    `response`: the approver's answer that decides it (unsaved), written in the same statement — unless
    that person answered already: then nothing is written, False, and the response stays unsaved
    (`response.pk` None). Its chain entry comes first, then the request's, then the event's.
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
    mac, values = _signed_anew(locked if locked is not None else confirmation_id, decided, verified=locked_verifies)
    event = ConfirmationEvent(
        confirmation_id=confirmation_id,
        kind=_TERMINAL_EVENT[to_status],
        actor=decided_by,
        channel=channel,
        message=event_message or reason,
        data={**({"name": decided_by_name} if decided_by_name else {}), **(event_data or {})},
    )
    values_set = {"decided_by_name": decided_by_name, "decision_mac": mac, **decided}
    if extra_filter is None:  # (a click's, a cancel's: the move, its event and its NOTIFY in one statement)
        changed, moved = moved_with_event(
            confirmation_id, values=values_set, only_if={"status": Status.PENDING}, event=event, response=response
        )
        callback_url = moved.get("callback_url")
    else:  # (an expiry's: the ORM's UPDATE, then the event)
        if response is not None:
            raise TypeError("a response is written with a move by its id alone (no extra filter)")
        changed = (
            ConfirmationRequest.objects.filter(pk=confirmation_id, status=Status.PENDING)
            .filter(extra_filter)
            .update(**values_set)
        )
        callback_url = None
    if not changed:
        return False
    # In the chain: the response, the request's new record, then its event.
    if response is not None:
        audit_append(agent_id=values["agent_id"], action=AuditAction.RECORDED, row=response)
    audit_append(agent_id=values["agent_id"], action=AuditAction.RECORDED, row={**values, **decided}, source="request")
    if extra_filter is None:
        audit_append(agent_id=values["agent_id"], action=AuditAction.EVENT, row=event)
    # An expiry decided here was asked for by a click on a request past its deadline (`responses.click_apply`).
    count_decided(
        [confirmation_id],
        to_status,
        now=now,
        expired_by="click" if to_status == Status.EXPIRED else "",
        known=[(locked.pk, locked.channel.name, locked.created_at, locked.tool_name)] if locked is not None else None,
    )
    if extra_filter is not None:
        moved_row = locked or ConfirmationRequest.objects.only("pk", "agent_id", "callback_url").get(pk=confirmation_id)
        callback_url = moved_row.callback_url
        event_record(
            moved_row, event.kind, actor=event.actor, channel=channel, message=event.message, data=event.data,
            notify=True,  # the waiting agents hear of it at commit
        )  # fmt: skip
    # One redraw row per state, so an in-flight redraw of an older state cannot swallow this one.
    pk = ConfirmationRequest._meta.pk.to_python(confirmation_id)  # (the keys name it as its row does)
    redraw_add(pk, OutboxKind.UPDATE, dedupe_key=f"{pk}:update:{to_status}", locked=locked)
    if callback_url:
        outbox_add(pk, OutboxKind.WEBHOOK, dedupe_key=f"{pk}:webhook")
    return True


def _signed_anew(
    row: ConfirmationRequest | Any, changes: dict[str, Any], *, verified: bool = False
) -> tuple[str, dict[str, Any]]:
    """The `decision_mac` of a request (its row, or its id: read) after `changes`, and its signed fields as
    they are: signed anew if its record verifies now (`verified`: the caller checked this very row), else
    left as it is — a request changed behind the gateway's back stays unverifiable whatever happens to it
    next, so no decision of the gateway launders it."""
    if not isinstance(row, ConfirmationRequest):
        read = ConfirmationRequest.objects.filter(pk=row).values(*REQUEST_SIGNED, "decision_mac").first()
        values = dict(read) if read else {field: None for field in (*REQUEST_SIGNED, "decision_mac")}
    else:
        values = {field: getattr(row, field) for field in (*REQUEST_SIGNED, "decision_mac")}
    if values["id"] is None:  # no such request: the conditional UPDATE will change nothing
        return "", values
    if not (verified and isinstance(row, ConfirmationRequest)) and not decision_verifies(ConfirmationRequest, values):
        return values["decision_mac"], values
    return decision_mac(ConfirmationRequest, {**values, **changes}), values


def count_decided(
    confirmation_ids: list[Any],
    outcome: str,
    *,
    now: dt.datetime,
    expired_by: str = "",
    known: list[tuple[Any, str, dt.datetime, str]] | None = None,
) -> None:
    """At commit (a rolled-back decision is no decision): how long each request waited for it, by channel
    (`gateway_decision_seconds`), and the expiries, by tool too (`gateway_expired_unanswered`:
    docs/web-and-admin.md, "Oversight"). `known`: (id, channel name, created at, tool) of each, as the
    caller read them; else one read per decision, off the allowed path."""
    waited = known
    if waited is None:
        waited = list(
            ConfirmationRequest.objects.filter(pk__in=confirmation_ids).values_list(
                "pk", "channel__name", "created_at", "tool_name"
            )
        )

    def count() -> None:
        for pk, channel, created_at, tool in waited:
            if outcome == Status.EXPIRED:
                metrics.expired_unanswered(tool=tool, channel=channel or "")
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


# --------------------------------------------------------------------------- cancelling


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
