"""One click applied, in the caller's transaction, under the request's row lock (`click_apply`): who may
decide, what the click may carry, one response per person (a stand-in's on behalf of whom they stand in
for), and the decision when a reject or an answer arrives or the approvals reach the quorum."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone

from approvals import selectors
from approvals.audit import RESPONSE_SIGNED, decision_mac, decision_verifies
from approvals.errors import AlreadyDecided
from approvals.models import (
    ApproverResponse,
    AuditAction,
    CallbackReceipt,
    ConfirmationRequest,
    EventKind,
    OutboxKind,
    RequestKind,
    Status,
)
from approvals.prepared import PreparedRead
from approvals.services.audit import audit_append
from approvals.services.confirmations import confirmation_transition
from approvals.services.edits import Refused, checked_edits, checked_grant, judged_again
from approvals.services.expiry import confirmation_expire
from approvals.services.grants import grant_create
from approvals.services.records import changes_notify, event_record, redraw_add, response_add
from gateway_contract import Callback, DecisionOutcome, draws_itself
from gateway_contract.answers import answer_from_inputs, answer_problem, answer_text
from gateway_utils import metrics
from hooks.base import grant_label

UNVERIFIED_CLICK = (
    "This request's record does not verify (it was changed outside the gateway), so nothing was changed; "
    "its call is denied. Tell the gateway's operator (manage.py verify_audit)."
)


# (channel name, as staff) of a clicker, judged from the request's row (`confirmation_respond`).
OnBehalf = Callable[[ConfirmationRequest], tuple[str, bool]]


class DuplicateClick(Exception):
    """A click whose vendor event id was handled already: its outcome, raised out of the click's transaction."""

    def __init__(self, outcome: DecisionOutcome):
        self.outcome = outcome


# A click's read of its request under the row lock, with the agent, its team (who may see it: `on_behalf`)
# and the channel (the escalation channel is read only for an escalated request): prepared once per
# connection (approvals.prepared).
_LOCKED_READ = PreparedRead(
    lambda pk: ConfirmationRequest.objects.select_for_update(of=("self",), no_key=True)
    .select_related("agent__team", "channel")
    .filter(pk=pk)
)


def click_apply(
    *, channel_name: str, callback: Callback, as_admin: bool, actor_kind: str, on_behalf: OnBehalf | None = None
) -> DecisionOutcome:
    """One approver's click on one request (`clicks.confirmation_respond` calls it in a transaction of its
    own); the outcome's card is drawn by the caller, after commit."""
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
            raise DuplicateClick(outcome(False, "duplicate", "This click was already handled.")) from None

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
            edits, approved_args = checked_edits(confirmation, callback)
            option = checked_grant(confirmation, callback, edited=bool(edits))
            if edits:
                judged = judged_again(confirmation, approved_args)
        except Refused as refused:
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
    # An answer that decides — a question's, a rejection, the approval a quorum of one needs — is written in
    # the move's own statement (`confirmation_transition(response=…)`); an approval toward a larger quorum
    # is written first, then counted.
    decides = callback.decision in ("answer", "reject") or confirmation.approvals_required <= 1
    if not decides:
        if not response_add(response):  # one per person (a unique constraint): this one answered already
            return outcome(False, "duplicate", _already_answered(confirmation, person=person, actor=actor))
        audit_append(agent_id=confirmation.agent_id, action=AuditAction.RECORDED, row=response)
        _count_answer(confirmation, response)

    def answered_already() -> DecisionOutcome | None:
        """After a move that carried the response: the duplicate outcome if that person had answered (then
        nothing was written), else None (the response counted)."""
        if response.pk is None:
            return outcome(False, "duplicate", _already_answered(confirmation, person=person, actor=actor))
        _count_answer(confirmation, response)
        return None

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
            locked_verifies=True,  # (checked above: `decision_verifies`)
            response=response,
        )
        return answered_already() or outcome(True, "decided", f"Answered: {shown}")

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
            locked_verifies=True,  # (checked above: `decision_verifies`)
            response=response,
        )
        return answered_already() or outcome(True, "decided", "Rejected.")
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
            locked_verifies=True,  # (checked above: `decision_verifies`)
            response=response if decides else None,
        )
        if decides and (duplicate := answered_already()) is not None:
            return duplicate
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


def _count_answer(confirmation: ConfirmationRequest, response: ApproverResponse) -> None:
    """At commit, the answer's time from its card to it, by tool (`gateway_time_to_decide_seconds`,
    `gateway_fast_decisions`): the start the oversight page takes (docs/web-and-admin.md, "Oversight").
    A card the gateway draws itself (the web page) was shown as the request was made, in its transaction:
    no read on the click's path. A chat's card was posted later by a worker: read after the commit."""
    answered = response.created_at or timezone.now()
    tool, channel, decision = confirmation.tool_name, response.channel, response.decision
    read_card = confirmation.escalate_channel_id is not None or not draws_itself(confirmation.channel.kind)
    created_at, fast = confirmation.created_at, settings.GATEWAY_OVERSIGHT_FAST_SECONDS

    def count() -> None:
        shown = (
            selectors.card_shown_at(confirmation_id=confirmation.pk, created_at=created_at, before=answered)
            if read_card
            else created_at
        )
        seconds = (answered - shown).total_seconds()
        metrics.approver_answered(tool=tool, channel=channel, decision=decision, seconds=seconds, fast_seconds=fast)

    transaction.on_commit(count, robust=True)  # a failed count never fails the click that committed


def _approvals_counted(confirmation: ConfirmationRequest) -> int:
    """The approvals a quorum counts: responses whose `decision_mac` verifies (one inserted or changed
    behind the gateway's back counts for nothing)."""
    rows = confirmation.responses.filter(decision="approve").values(*RESPONSE_SIGNED, "decision_mac")
    return sum(1 for row in rows if decision_verifies(ApproverResponse, row))


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
