"""What a request's card shows (`card_view`): a turn's calls, the quorum so far, who is still to answer, and
the cards posted for it."""

from __future__ import annotations

from approvals.models import ApproverResponse, Channel, ConfirmationRequest, Outbox, OutboxKind, OutboxStatus, Status
from approvals.selectors.people import PEOPLE_PREFIXES, approvers_for_channel, person_of, routed_people
from approvals.selectors.requests import confirmation_url
from approvals.types import ConfirmationState
from gateway_contract import CardItem, CardView
from hooks.base import grant_label


# Most calls a turn's card lists (the rest are on the web page).
TURN_CARD_ITEMS = 20


def still_to_answer(confirmation: ConfirmationRequest, *, channel_name: str = "") -> tuple[str, ...]:
    """Who has yet to answer a request that needs more than one approval (the card's "Waiting for"):
    the people routed it by name, else the channel-native approvers, minus those who answered."""
    if confirmation.status != Status.PENDING or confirmation.approvals_required <= 1:
        return ()
    answered = set(confirmation.responses.values_list("person", flat=True)) | set(
        confirmation.responses.exclude(on_behalf_of="").values_list("on_behalf_of", flat=True)
    )
    routed = routed_people(confirmation, channel_name=channel_name or confirmation.channel.name)
    if routed["people"]:
        return tuple(name for key, name in routed["people"].items() if key not in answered)
    approvers = approvers_for_channel(confirmation, channel_name=channel_name or confirmation.channel.name) or []
    kind = confirmation.channel.kind
    return tuple(a for a in approvers if person_of(f"{kind}:{a}") not in answered and not a.startswith(PEOPLE_PREFIXES))


def approvals_so_far(confirmation: ConfirmationRequest) -> list[str]:
    """Who has approved a request so far (channel-qualified ids), first first (quorum progress)."""
    if confirmation.status == Status.PENDING and confirmation.approvals_required <= 1:
        return []  # one approval decides such a request (in the transaction that records it): none yet
    return list(
        confirmation.responses.filter(decision="approve").order_by("created_at").values_list("approver", flat=True)
    )


def actor_kind(confirmation: ConfirmationRequest, *, channel_name: str) -> str:
    """The kind of the channel a click on this request came through: the prefix of the clicker's id."""
    if channel_name == confirmation.channel.name:
        return confirmation.channel.kind
    if confirmation.escalate_channel_id and channel_name == confirmation.escalate_channel.name:
        return confirmation.escalate_channel.kind
    return Channel.objects.filter(name=channel_name).values_list("kind", flat=True).first() or channel_name


def batch_of(confirmation: ConfirmationRequest) -> list[ConfirmationRequest]:
    """The calls of a turn shown on `confirmation`'s card, itself first, when it is a turn's lead
    (the first call of the turn, whose card the later ones joined); [] for any other request."""
    if confirmation.batch_lead_id is not None:
        return []  # a call that joined another's card: its own views (an escalation's card) list only itself
    if not confirmation.turn_id:
        return []  # only calls of the same turn join a card
    members = list(
        ConfirmationRequest.objects.filter(batch_lead_id=confirmation.pk).order_by("created_at", "id")[: TURN_CARD_ITEMS * 5]
    )
    return [confirmation, *members] if members else []


def card_owner(confirmation: ConfirmationRequest) -> ConfirmationRequest:
    """The request whose card shows this one: its turn's lead, or itself."""
    if confirmation.batch_lead_id is None:
        return confirmation
    return ConfirmationRequest.objects.select_related("agent", "channel", "escalate_channel").get(
        pk=confirmation.batch_lead_id
    )


def card_view(confirmation: ConfirmationRequest, *, channel_name: str = "") -> CardView:
    """What the card of `confirmation` shows (a turn's lead: the turn's calls too)."""
    approved_by = tuple(approvals_so_far(confirmation))
    items = tuple(
        CardItem(
            confirmation_id=str(c.pk),
            tool_name=c.tool_name,
            tool_args=c.approved_args if c.approved_args is not None else c.tool_args,
            status=c.status,
            decided_by=c.decided_by,
            decided_by_name=c.decided_by_name,
            decision_reason=c.decision_reason,
            edited=c.edited,
            risk=c.risk,
        )
        for c in batch_of(confirmation)
    )
    escalated = bool(
        confirmation.escalated_at and channel_name and channel_name == confirmation.channel.name
    )
    approvers = confirmation.approvers
    if confirmation.escalate_channel_id and channel_name == getattr(confirmation.escalate_channel, "name", None):
        approvers = confirmation.escalate_approvers
    return CardView(
        confirmation_id=str(confirmation.pk),
        agent=confirmation.agent.name,
        tool_name=confirmation.tool_name,
        tool_args=confirmation.tool_args,
        user_id=confirmation.user_id,
        session_id=confirmation.session_id,
        reason=confirmation.reason,
        hook=confirmation.hook_name,
        status=confirmation.status,
        url=confirmation_url(confirmation),
        expires_at=confirmation.expires_at,
        approvers=tuple(approvers),
        approvals_required=confirmation.approvals_required,
        approved_by=approved_by,
        decided_by=confirmation.decided_by,
        decided_at=confirmation.decided_at,
        decision_reason=confirmation.decision_reason,
        escalated=escalated,
        decided_by_name=confirmation.decided_by_name,
        approved_args=confirmation.approved_args,
        editable_paths=tuple(confirmation.editable_paths or ()),
        grant_options=tuple(grant_label(option) for option in confirmation.grant_options or ()),
        items=items,
        kind=confirmation.kind,
        answer_schema=confirmation.answer_schema,
        answer=confirmation.answer,
        waiting_for=still_to_answer(confirmation, channel_name=channel_name),
        on_behalf_of=on_behalf_of(confirmation),
        risk=confirmation.risk,
    )


def on_behalf_of(confirmation: ConfirmationRequest | ConfirmationState) -> str:
    """The name of the person a stand-in decided for, if the deciding answer was a stand-in's; else ""."""
    if not confirmation.decided_by or confirmation.status not in (Status.APPROVED, Status.REJECTED):
        return ""
    if " on behalf of " not in confirmation.decided_by_name:
        return ""  # the one mark a stand-in's decision carries on the row: no query for any other
    return (
        ApproverResponse.objects.filter(confirmation_id=confirmation.pk, approver=confirmation.decided_by)
        .exclude(on_behalf_of="")
        .values_list("on_behalf_of_name", flat=True)
        .first()
        or ""
    )


def posted_cards(confirmation: ConfirmationRequest) -> list[Outbox]:
    """Every card that shows this request (to redraw them all at each state change), in the order they
    were posted: its own, and for a call of a turn, its turn's card (`Outbox.confirmation` is the request
    whose card it is)."""
    owners = {confirmation.pk, confirmation.batch_lead_id} - {None}
    return list(
        Outbox.objects.select_related(
            "channel", "confirmation", "confirmation__agent", "confirmation__channel", "confirmation__escalate_channel"
        )
        .filter(confirmation_id__in=owners, kind=OutboxKind.CARD, status=OutboxStatus.SENT)
        .order_by("created_at", "pk")  # as they were posted: a table's physical order is no order
    )
