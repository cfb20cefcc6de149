"""An approver's click, from any channel: on one request, on several (the inbox's batch), on a turn
card's "all", on a digest's "Approve these N" — each request decided on its own, exactly once (`responses.click_apply`, under its row lock),
and the card drawn after commit."""

from __future__ import annotations

import dataclasses
import hashlib
from typing import Any

from django.db import transaction

from approvals import selectors
from approvals.models import ConfirmationRequest, EventKind, OutboxKind, Status
from approvals.services.records import event_record, redraw_add
from approvals.services.replay import in_a_transaction_served_again_if_dropped
from approvals.services.responses import DuplicateClick, OnBehalf, click_apply
from approvals.types import RiskLevel
from gateway_contract import Callback, DecisionOutcome


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
    if callback.digest_id:
        return _respond_digest(channel_name=channel_name, callback=callback, as_admin=as_admin, actor_kind=actor_kind)
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
                lambda: click_apply(
                    channel_name=channel_name,
                    callback=callback,
                    as_admin=as_admin,
                    actor_kind=actor_kind,
                    on_behalf=on_behalf,
                )
            )
    except DuplicateClick as dup:
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


NOT_IN_DIGEST = "This click names calls that this digest does not show, so nothing was changed."


def _respond_digest(*, channel_name: str, callback: Callback, as_admin: bool, actor_kind: str) -> DecisionOutcome:
    """A digest's "Approve these N" (docs/policies.md, "Risk"): decides the still-pending calls among those
    the clicked message showed (`callback.shown_ids`, signed into the button), each on its own
    (`confirmations_respond`: its own lock, approver checks and conditional UPDATE, so exactly once).

    A click naming no calls, a call the digest's record does not list, or coming through another channel
    than the digest's decides nothing at all (recorded as a refused click on the digest's first call). A
    call gathered into a later digest is not among the shown ones: it stays pending. A repeat of the click
    names calls decided already: it changes nothing more.
    """
    digest = selectors.digest_lookup(callback.digest_id)
    if digest is None or not digest.shown_ids:
        return DecisionOutcome(applied=False, code="not_found", message="This digest no longer exists.", card=None)
    shown = tuple(callback.shown_ids or ())
    listed = set(digest.shown_ids)
    if not shown or not set(shown) <= listed or channel_name != digest.channel.name:
        actor = f"{actor_kind or digest.channel.kind}:{callback.actor}"
        data = {"name": callback.actor_name or callback.actor, "digest": digest.pk, "not_shown": sorted(set(shown) - listed)[:20]}
        with transaction.atomic():
            event_record(
                digest.shown_ids[0], EventKind.REFUSED_CLICK, actor=actor, channel=channel_name, message=NOT_IN_DIGEST,
                data=data,
            )  # fmt: skip
        return DecisionOutcome(applied=False, code="not_on_card", message=NOT_IN_DIGEST, card=None)
    # High-risk calls are never digested; one listed anyway (a digest row edited in the database: its ids are
    # not signed, a request's risk is) is not approved from here.
    rows = ConfirmationRequest.objects.filter(pk__in=shown, status=Status.PENDING)
    pending = list(rows.exclude(risk=RiskLevel.HIGH).values_list("pk", flat=True))
    high = rows.filter(risk=RiskLevel.HIGH).count()
    order = {pk: n for n, pk in enumerate(shown)}
    pending.sort(key=lambda pk: order[str(pk)])
    # Approved as proposed: an edit or a scope belongs to one call.
    one = dataclasses.replace(callback, edits=None, typed_edits=None, grant=None, digest_id="", shown_ids=None)
    results = confirmations_respond(
        channel_name=channel_name, callback=one, confirmation_ids=pending, as_admin=as_admin, actor_kind=actor_kind
    )
    applied = [pk for pk, o in results if o.applied]
    refused = [o for _, o in results if not o.applied]
    left_high = f" {high} high-risk call(s) left pending: decide each on its own." if high else ""
    if not pending:
        message = "Nothing was changed." + (left_high or " The calls this digest showed are decided already.")
        return DecisionOutcome(applied=False, code="already_decided", message=message, card=None)
    verb = "Approved" if callback.decision == "approve" else "Rejected"
    message = f"{verb} {len(applied)} call(s) of this digest." if applied else "Nothing was changed."
    if refused:
        message += f" {len(refused)} left unchanged: {refused[0].message}"
    message += left_high
    code = "decided" if applied else refused[0].code
    return DecisionOutcome(applied=bool(applied), code=code, message=message, card=None)
