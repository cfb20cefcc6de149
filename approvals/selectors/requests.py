"""One request as its agent sees it: found by id, its page's URL, its view in the API (a confirmation's, a
question's), the answer its state implies — only from a record that verifies (`verified`)."""

from __future__ import annotations

import dataclasses
import functools
import logging
import uuid
from typing import Any

from django.conf import settings
from django.urls import get_script_prefix, reverse

from approvals.arguments import dotted, with_edits
from approvals.audit import decision_verifies, told_decision_verifies
from approvals.errors import NotFound
from approvals.models import Agent, ConfirmationRequest, RequestKind, Status, ToolCall
from approvals.types import SYSTEM_ACTOR, ConfirmationState, PreToolUseAnswer
from gateway_contract import actor_label


logger = logging.getLogger("approvals.audit")


def confirmation_for_agent(*, agent: Agent, confirmation_id: Any) -> ConfirmationRequest:
    """One of this agent's requests. Another agent's id, or junk, is a 404."""
    try:
        pk = uuid.UUID(str(confirmation_id))
    except ValueError:
        raise NotFound(f"no confirmation request {confirmation_id!r}") from None
    confirmation = (
        ConfirmationRequest.objects.select_related("agent", "channel")
        .filter(pk=pk, agent=agent, kind=RequestKind.CONFIRMATION)  # a question is served under /questions/
        .first()
    )
    if confirmation is None:
        raise NotFound(f"no confirmation request {confirmation_id}")
    return confirmation


def confirmation_url(confirmation: ConfirmationRequest | ConfirmationState | str) -> str:
    """The request's approval page. Every answer to an agent carries it (10,000 woken at once are 10,000
    of them), so the page's path is reversed once per script prefix and the id put in its place."""
    pk = str(getattr(confirmation, "pk", confirmation))
    return settings.GATEWAY_PUBLIC_URL + _page_path(get_script_prefix()).replace(_PAGE_ID, pk)


_PAGE_ID = "00000000-0000-0000-0000-000000000000"


@functools.lru_cache(maxsize=16)
def _page_path(prefix: str) -> str:  # (`prefix` keys the cache: `reverse` reads the current script prefix)
    return reverse("approval-page", args=[_PAGE_ID])


# What an agent is told of a request whose record does not verify (docs/audit.md, "Answered from facts that verify").
UNVERIFIED_REASON = (
    "the gateway's record of this decision does not verify (it was changed outside the gateway); "
    "the call is denied — an operator can see why with `manage.py verify_audit`"
)
# What an agent is told of a question whose record does not verify (docs/asking.md): it is cancelled.
UNVERIFIED_QUESTION_REASON = (
    "the gateway's record of this question does not verify (it was changed outside the gateway); "
    "there is no answer — an operator can see why with `manage.py verify_audit`"
)


def verified(confirmation: ConfirmationRequest | ConfirmationState) -> ConfirmationRequest | ConfirmationState:
    """The request as an agent may be told it: as it is if its `decision_mac` signs what it says, else
    rejected by the gateway (a decision changed behind the gateway's back never turns into `allow`) — a
    question cancelled by the gateway, with no answer and no default (an answer changed behind the
    gateway's back never reaches the agent)."""
    ok = confirmation.verified if isinstance(confirmation, ConfirmationState) else decision_verifies(
        ConfirmationRequest, confirmation
    )
    if ok:
        return confirmation
    state = (
        confirmation if isinstance(confirmation, ConfirmationState) else ConfirmationState.from_row(confirmation, verified=False)
    )
    if state.kind == RequestKind.QUESTION:
        logger.error("question %s does not verify against its decision_mac: answered as cancelled", state.id)
        status, reason = Status.CANCELLED, UNVERIFIED_QUESTION_REASON
    else:
        logger.error("confirmation request %s does not verify against its decision_mac: answered as rejected", state.id)
        status, reason = Status.REJECTED, UNVERIFIED_REASON
    return dataclasses.replace(
        state, status=status, decided_by=SYSTEM_ACTOR, decided_by_name=SYSTEM_ACTOR, decision_reason=reason,
        arg_edits={}, approved_args=None, answer=None, default_answer=None,
    )  # fmt: skip


def confirmation_state(*, row: ConfirmationRequest, approved_by: list[str] | None = None) -> ConfirmationState:
    """A request's state as its waiting agent sees it, from its row: whether the row's `decision_mac` signs
    it read here (`ConfirmationState.verified`); with who approved so far if given."""
    return ConfirmationState.from_row(row, verified=decision_verifies(ConfirmationRequest, row), approved_by=approved_by)


def confirmation_state_told(*, data: dict[str, Any]) -> ConfirmationState:
    """A request's state from the JSON a notification carries (`services.records.changes_notify`), checked
    against the MAC it carries (anyone who can NOTIFY can send one)."""
    return ConfirmationState.from_payload(data, verified=_payload_verifies(data))


def _payload_verifies(data: dict[str, Any]) -> bool:
    """A notification's state checked against the MAC it carries (anyone who can NOTIFY can send one)."""
    signed = data.get("signed")
    return isinstance(signed, dict) and told_decision_verifies(ConfirmationRequest, signed)


def confirmation_as_dict(confirmation: ConfirmationRequest | ConfirmationState, *, url: str = "") -> dict[str, Any]:
    """The API's view of one request (docs/reference/api.md), from its row or a waiter's state of it —
    `verified`: a request whose record does not verify is shown rejected by the gateway. `url`: its
    `confirmation_url` if the caller has it already (a long-poll makes it before it waits).

    `tool_args` are the arguments the agent proposed (as stored: redacted); `approved_args`
    what the approver approved instead, when they edited them (`edited: true`).
    """
    confirmation = verified(confirmation)
    return {
        "id": str(confirmation.pk),
        "status": confirmation.status,
        "tool_name": confirmation.tool_name,
        "tool_args": confirmation.tool_args,
        "reason": confirmation.decision_reason if confirmation.is_final else confirmation.reason,
        "decided_by": confirmation.decided_by or None,
        "decided_by_name": confirmation.decided_by_name or None,
        "decided_at": confirmation.decided_at.isoformat() if confirmation.decided_at else None,
        "expires_at": confirmation.expires_at.isoformat() if confirmation.expires_at else None,
        "edited": confirmation.edited,
        "approved_args": confirmation.approved_args,
        "risk": confirmation.risk,
        "url": url or confirmation_url(confirmation),
    }


def question_as_dict(question: ConfirmationRequest | ConfirmationState, *, url: str = "") -> dict[str, Any]:
    """The API's view of one question (docs/asking.md), from its row or a waiter's state of it.

    `answer` is the answer given (`answered`), or the question's `default_answer` once it expired
    unanswered (`defaulted: true`); null while pending or once cancelled. `verified`: a question whose
    record does not verify is shown cancelled by the gateway, with no answer.
    """
    question = verified(question)
    status = question.status
    defaulted = status == Status.EXPIRED
    answered = status == Status.ANSWERED
    return {
        "id": str(question.pk),
        "status": status,
        "question": question.reason,
        "answer": question.answer if answered else (question.default_answer if defaulted else None),
        "defaulted": defaulted,
        "answered_by": question.decided_by if answered else None,
        "answered_by_name": question.decided_by_name if answered else None,
        "answered_at": question.decided_at.isoformat() if answered and question.decided_at else None,
        "reason": question.decision_reason if question.is_final else "",
        "expires_at": question.expires_at.isoformat() if question.expires_at else None,
        "url": url or confirmation_url(question),
    }


def request_as_dict(request: ConfirmationRequest | ConfirmationState) -> dict[str, Any]:
    """A request in its own shape: a question's (`question_as_dict`) or a confirmation's."""
    return question_as_dict(request) if request.kind == RequestKind.QUESTION else confirmation_as_dict(request)


def question_for_agent(*, agent: Agent, question_id: Any) -> ConfirmationRequest:
    """One of this agent's questions. Another agent's id, a confirmation's, or junk, is a 404."""
    try:
        pk = uuid.UUID(str(question_id))
    except ValueError:
        raise NotFound(f"no question {question_id!r}") from None
    question = (
        ConfirmationRequest.objects.select_related("agent", "channel")
        .filter(pk=pk, agent=agent, kind=RequestKind.QUESTION)
        .first()
    )
    if question is None:
        raise NotFound(f"no question {question_id}")
    return question


def decider(confirmation: ConfirmationRequest | ConfirmationState) -> str:
    """Who decided, for people: "alice (slack:U0ALICE)" — the name to read, the id to be sure."""
    return actor_label(confirmation.decided_by, confirmation.decided_by_name) or "someone"


def final_state_sentence(confirmation: ConfirmationRequest) -> str:
    """One sentence a late clicker or a waiting agent can read."""
    who = decider(confirmation)
    if confirmation.status == Status.APPROVED:
        return f"Already approved by {who}."
    if confirmation.status == Status.ANSWERED:
        return f"Already answered by {who}."
    if confirmation.status == Status.REJECTED:
        why = f": {confirmation.decision_reason}" if confirmation.decision_reason else "."
        return f"Already rejected by {who}{why}"
    if confirmation.status == Status.EXPIRED:
        return "This request expired without a decision."
    if confirmation.status == Status.CANCELLED:
        return "This request was cancelled."
    return "This request is still pending."


def answer_for_confirmation(
    confirmation: ConfirmationRequest | ConfirmationState, *, tool_args: dict[str, Any]
) -> PreToolUseAnswer:
    """The pre-tool-use answer a request's current state implies (from its row or a waiter's state of it).

    `tool_args` are the agent's own arguments; an approval with edits answers them with the edits applied.
    A request whose record does not verify is answered `deny` (`verified`).
    """
    confirmation = verified(confirmation)
    status = confirmation.status
    who = decider(confirmation)
    if status == Status.PENDING:
        decision, reason = "pending", confirmation.reason or "waiting for a human decision"
    elif status == Status.APPROVED:
        decision, reason = "allow", f"approved by {who}"
        if confirmation.arg_edits:
            tool_args = with_edits(tool_args, confirmation.arg_edits)
            reason += " with edited arguments: " + ", ".join(sorted(confirmation.arg_edits))
    elif status == Status.REJECTED:
        decision = "deny"
        if who == SYSTEM_ACTOR:
            reason = confirmation.decision_reason
        else:
            reason = f"rejected by {who}" + (f": {confirmation.decision_reason}" if confirmation.decision_reason else "")
    elif status == Status.EXPIRED:
        decision = "allow" if confirmation.on_timeout == "allow" else "deny"
        reason = f"no decision before the deadline (on_timeout: {confirmation.on_timeout})"
    else:
        decision, reason = "deny", "the request was cancelled"
    return PreToolUseAnswer(
        decision=decision, tool_args=tool_args, reason=reason, confirmation_id=str(confirmation.pk)
    )


def decided_call(
    confirmation: ConfirmationRequest, call: ToolCall | None
) -> tuple[PreToolUseAnswer, list[str]]:
    """For whoever learns a decision without asking again (the decision webhook): the answer a repeat
    ask would give, with the arguments as the gateway holds them — the hooks' rewrites and the approver's
    edits applied, masked values still masks — and the dotted paths of those masks (the agent's own
    values, to be filled from its call)."""
    masks = ((call.response or {}).get("masked") if call is not None else None) or {}
    answer = answer_for_confirmation(confirmation, tool_args=confirmation.tool_args)
    lost = sorted(dotted(tuple(path)) for path in masks.get("hook", []))
    return unless_unrestorable(answer, lost), sorted(dotted(tuple(path)) for path in masks.get("agent", []))


def unless_unrestorable(answer: PreToolUseAnswer, lost: list[str]) -> PreToolUseAnswer:
    """`answer`, unless it allows a call whose arguments hold masked values a hook rewrote or added
    (`lost`): the gateway kept no copy of those, so it cannot say what to run — it denies instead,
    saying why (docs/approving.md, "What the agent gets")."""
    if answer.decision != "allow" or not lost:
        return answer
    answer.decision = "deny"
    answer.reason = (
        f"{answer.reason}, but the arguments to run hold redacted values a hook rewrote ({', '.join(lost)}), "
        "which the gateway does not keep, so a repeat ask cannot give them back: wait for the decision on "
        "the first ask (wait_seconds), or ask again with a new idempotency key"
    )
    return answer
