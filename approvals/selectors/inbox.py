"""Requests as the people who decide them find them: one by id (its page, a link in a message), several by id
(the inbox's batch), the inbox's lists of a user's teams, and the values an approver may edit on the page."""

from __future__ import annotations

import uuid
from typing import Any

from django.core.exceptions import ValidationError
from django.db.models import QuerySet

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


def confirmations_pending_for(*, user: Any) -> QuerySet[ConfirmationRequest]:
    """The pending requests of `user`'s teams, oldest first, at most 500 (the inbox sorts out which of them the
    user decides, and which they may only see)."""
    return of_teams(  # only the user's teams' requests (docs/approving.md, "Teams")
        ConfirmationRequest.objects.select_related("agent", "channel", "escalate_channel")
        .filter(status=Status.PENDING)
        .order_by("created_at"),
        user,
        path="agent__team",
    )[:500]


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
