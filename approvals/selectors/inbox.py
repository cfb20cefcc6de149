"""Requests as the people who decide them find them: one by id (its page, a link in a message), several by id
(the inbox's batch), the inbox's lists of a user's teams, and the values an approver may edit on the page."""

from __future__ import annotations

import datetime
import json
import uuid
from typing import Any

from django.core.exceptions import ValidationError
from django.db.models import QuerySet
from django.utils import timezone
from django.utils.crypto import salted_hmac

from approvals.arguments import get_path
from approvals.models import ConfirmationRequest, Status
from approvals.selectors.teams import of_teams


def confirmation_lookup(*, confirmation_id: Any) -> ConfirmationRequest | None:
    """One request by id, with its agent and the agent's team (whether a user sees it: `team_sees`), its
    channel and its escalation channel; None if there is none, or the id is not one."""
    try:
        return (
            ConfirmationRequest.objects.select_related("agent__team", "channel", "escalate_channel")
            .filter(pk=confirmation_id)
            .first()
        )
    except (ValueError, ValidationError):  # not a UUID
        return None


def confirmations_by_ids(*, ids: list[str]) -> dict[uuid.UUID, ConfirmationRequest]:
    """The requests of these ids that exist, by id, with their agent and channels (one statement)."""
    return ConfirmationRequest.objects.select_related("agent", "channel", "escalate_channel").in_bulk(ids)


INBOX_LIMIT = 500


def confirmations_pending_for(
    *,
    user: Any,
    agent: str = "",
    tool: str = "",
    risk: str = "",
    older_than: int | None = None,
) -> QuerySet[ConfirmationRequest]:
    """The pending requests of `user`'s teams, oldest first, at most `INBOX_LIMIT` (the inbox sorts out which
    of them the user decides, and which they may only see), narrowed by the inbox's filters: the agent's
    name, the tool's name, the risk, and asked more than `older_than` minutes ago. Filtered here, in the
    database, so a filter finds what the limit would have cut off."""
    pending = ConfirmationRequest.objects.select_related("agent__team", "channel", "escalate_channel").filter(
        status=Status.PENDING
    )
    if agent:
        pending = pending.filter(agent__name=agent)
    if tool:
        pending = pending.filter(tool_name=tool)
    if risk:
        pending = pending.filter(risk=risk)
    if older_than:
        pending = pending.filter(created_at__lte=timezone.now() - datetime.timedelta(minutes=older_than))
    # only the user's teams' requests (docs/approving.md, "Teams")
    return of_teams(pending.order_by("created_at"), user, path="agent__team")[:INBOX_LIMIT]


def confirmation_shown_digest(confirmation: ConfirmationRequest) -> str:
    """A keyed digest of what an approver is shown of a request and decides on — its kind, agent, tool,
    arguments (as stored), risk, session, turn, end user and approvers. The inbox draws it beside each
    row and a batch decides a request only if its digest is the same under the row's lock: a request
    whose content changed since the page was drawn (in the database, by hand) is left unchanged
    (docs/approving.md, "The inbox"). Keyed with the `SECRET_KEY`, so it says nothing about redacted
    values to anyone who reads the page."""
    shown = [
        confirmation.kind,
        confirmation.agent_id,
        confirmation.tool_name,
        confirmation.tool_args,
        confirmation.risk,
        confirmation.session_id,
        confirmation.turn_id,
        confirmation.user_id,
        confirmation.approvers,
        confirmation.approvals_required,
        confirmation.editable_paths,
        confirmation.grant_options,
    ]
    text = json.dumps(shown, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return salted_hmac("approvals.inbox.shown", text, algorithm="sha256").hexdigest()[:32]


def confirmations_decided_by(*, user: Any) -> QuerySet[ConfirmationRequest]:
    """The 20 requests of `user`'s teams they decided last on the page or in the admin, latest first."""
    username = user.get_username()
    return of_teams(
        ConfirmationRequest.objects.select_related("agent")
        .filter(decided_by__in=[f"web:{username}", f"admin:{username}"])
        .order_by("-decided_at"),
        user,
        path="agent__team",
    )[:20]


def confirmation_editable_values(*, confirmation: ConfirmationRequest) -> list[tuple[str, Any]]:
    """(path, value in the agent's arguments) of each argument the gate lets an approver edit, in its order."""
    return [(path, get_path(confirmation.tool_args, path)) for path in confirmation.editable_paths or []]
