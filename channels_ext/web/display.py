"""How the approval page shows a request: arguments an approver can read, long values folded, its risk."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser

from approvals import selectors
from channels_ext.cardkit import RISK_ICONS, risk_word

FOLD_AFTER_CHARS = 160
FOLD_AFTER_LINES = 4
SUMMARY_CHARS = 80

# Recorded as the channel when staff decide, on the page, a request that has no web channel.
WEB_PAGE_CHANNEL = "web page"


@dataclasses.dataclass(frozen=True)
class ArgumentRow:
    """One top-level argument: its name, its full text, and a one-line summary when folded."""

    name: str
    text: str
    folded: bool
    summary: str


def _as_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, indent=2, ensure_ascii=False, default=str)


def argument_rows(tool_args: Any) -> list[ArgumentRow]:
    """Top-level arguments by name (PostgreSQL's jsonb keeps no call order); a value longer than
    a few lines is folded behind a one-line summary."""
    items = sorted(tool_args.items()) if isinstance(tool_args, dict) else [("(arguments)", tool_args)]
    rows = []
    for name, value in items:
        text = _as_text(value)
        folded = len(text) > FOLD_AFTER_CHARS or text.count("\n") >= FOLD_AFTER_LINES
        one_line = " ".join(text.split())
        summary = one_line if len(one_line) <= SUMMARY_CHARS else one_line[:SUMMARY_CHARS].rstrip() + "…"
        rows.append(ArgumentRow(name=str(name), text=text, folded=folded, summary=f"{summary} ({len(text)} characters)"))
    return rows


@dataclasses.dataclass(frozen=True)
class RiskShown:
    """A request's risk as the page shows it: "🔴 Risk: high" in a badge coloured by `word` (docs/policies.md, "Risk")."""

    word: str  # low | medium | high; also the badge's class (`risk-high`)
    icon: str

    @property
    def is_high(self) -> bool:
        return self.word == "high"


def risk_shown(risk: str) -> RiskShown:
    word = risk_word(risk)
    return RiskShown(word=word, icon=RISK_ICONS[word])


PREVIEW_CHARS = 80


def argument_preview(tool_args: Any) -> str:
    """The arguments on one line for the inbox's row (`name=value, …`, values as JSON, by name), cut at
    `PREVIEW_CHARS` with an ellipsis. Drawn from the arguments as stored (redacted), escaped by the template."""
    if isinstance(tool_args, dict):
        parts = [f"{name}={json.dumps(value, ensure_ascii=False, default=str)}" for name, value in sorted(tool_args.items())]
        text = ", ".join(parts)
    else:
        text = json.dumps(tool_args, ensure_ascii=False, default=str)
    one_line = " ".join(text.split())
    return one_line if len(one_line) <= PREVIEW_CHARS else one_line[: PREVIEW_CHARS - 1].rstrip() + "…"


def web_channel_names(confirmation: Any) -> list[str]:
    """The web channels through which this request can be decided on its page: its own
    channel, and its escalation channel once it has escalated."""
    names = []
    if confirmation.channel.kind == "web":
        names.append(confirmation.channel.name)
    escalated_to = confirmation.escalate_channel
    if escalated_to is not None and escalated_to.kind == "web" and confirmation.escalated_at:
        names.append(escalated_to.name)
    return names


# `routed_refusal`'s code for a user the request was not routed to by name on that channel.
NOT_ROUTED = "not_routed"


def chat_channel_names(confirmation: Any) -> list[str]:
    """The request's channels that are not web channels (its own, and its escalation channel once it has
    escalated): a person routed the request there by name or as a stand-in decides it on its page too."""
    names = []
    if confirmation.channel.kind != "web":
        names.append(confirmation.channel.name)
    escalated_to = confirmation.escalate_channel
    if escalated_to is not None and escalated_to.kind != "web" and confirmation.escalated_at:
        names.append(escalated_to.name)
    return names


def routed_refusal(confirmation: Any, *, channel_name: str, username: str) -> tuple[str, str] | None:
    """For a chat channel of the request (`chat_channel_names`): None if the signed-in user's person was
    routed the request there — named by `group:` / `person:`, or standing in for someone routed it —
    and may decide it; else why not (docs/approving.md, "People").

    Only the people routed by name count: the channel's list holds chat ids, never usernames, so the
    user is judged by their person alone (the empty actor matches no id), and a list with nobody routed
    by name (raw ids, or `[]`: anyone in that chat) lets no one in from the web (`NOT_ROUTED`)."""
    allowed = selectors.approvers_for_channel(confirmation, channel_name=channel_name)
    routed = selectors.routed_people(confirmation, channel_name=channel_name)
    if not allowed or not (routed["people"] or routed["stand_ins"]):
        return NOT_ROUTED, f"This request is decided in the {channel_name} channel, not on this page."
    return selectors.approver_refusal(confirmation, channel_name=channel_name, actor="", identity=f"web:{username}")


@dataclasses.dataclass(frozen=True)
class Viewer:
    """What the signed-in user may do with one request on the web page."""

    can_decide: bool
    as_admin: bool  # deciding as staff, outside the request's approver list
    channel_name: str  # recorded with the decision
    why_read_only: str = ""
    can_view: bool = True  # may read the request (its page, its arguments, its state) at all


def may_view(user: AbstractBaseUser | AnonymousUser, confirmation: Any) -> bool:
    """Who may read a request's page and arguments: staff, the approvers of its web channels (listed by
    username, or anyone signed in where the list is empty), and the people it was routed to on its chat
    channels (`routed_refusal`). Everyone else is told the request does not exist — its arguments are
    what an approver is trusted with."""
    if not user.is_authenticated or not selectors.team_sees(user, confirmation):
        return False  # another team's request does not exist for them (docs/approving.md, "Teams")
    if user.is_staff or user.has_perm("approvals.view_confirmationrequest"):
        return True
    username = user.get_username()
    for channel_name in web_channel_names(confirmation):
        allowed = selectors.approvers_for_channel(confirmation, channel_name=channel_name)
        if allowed is not None and (not allowed or username in allowed):
            return True
        # a person the gate named, linked since the request was made, or a stand-in (docs/approving.md, "People")
        refusal = selectors.approver_refusal(
            confirmation, channel_name=channel_name, actor=username, identity=f"web:{username}"
        )
        if refusal is None or refusal[0] == "self_approval":
            return True
    for channel_name in chat_channel_names(confirmation):
        refusal = routed_refusal(confirmation, channel_name=channel_name, username=username)
        if refusal is None or refusal[0] == "self_approval":
            return True
    return False


def viewer_for(user: AbstractBaseUser | AnonymousUser, confirmation: Any) -> Viewer:
    """Web approvers (usernames in `approvers`, [] = anyone) decide web requests, people routed a request
    by name or as a stand-in decide it whatever its channel (`routed_refusal`); staff with
    `approvals.change_confirmationrequest` may decide any request (except one made on their own
    behalf); everyone else only looks. Nobody decides or sees another team's request."""
    channel_names = web_channel_names(confirmation)
    if not selectors.team_sees(user, confirmation):
        return Viewer(
            can_decide=False,
            as_admin=False,
            channel_name=channel_names[0] if channel_names else WEB_PAGE_CHANNEL,
            why_read_only="This request belongs to another team.",
            can_view=False,
        )
    refusal: tuple[str, str] | None = (
        "not_approver",
        f"This request is decided in the {confirmation.channel.name} channel, not on this page.",
    )
    for channel_name in channel_names:
        refusal = selectors.approver_refusal(
            confirmation, channel_name=channel_name, actor=user.get_username(), identity=f"web:{user.get_username()}"
        )
        if refusal is None:
            return Viewer(can_decide=True, as_admin=False, channel_name=channel_name)
    routed_on = ""
    for chat_channel in chat_channel_names(confirmation):  # routed there by name: decides here as an approver
        routed = routed_refusal(confirmation, channel_name=chat_channel, username=user.get_username())
        if routed is None:
            return Viewer(can_decide=True, as_admin=False, channel_name=chat_channel)
        if routed[0] == "self_approval" and not channel_names:
            # Routed it, but it is their own call: a forged click is refused as such on that channel. (Never
            # a chat channel for anyone else: its list holds chat ids, which a username might spell.)
            refusal, routed_on = routed, chat_channel
    channel_name = channel_names[0] if channel_names else WEB_PAGE_CHANNEL
    # Staff may step in for the approvers, but never on a call made on their own behalf.
    own_call = selectors.self_approval_refusal(
        confirmation, actor=user.get_username(), identity=f"web:{user.get_username()}"
    )
    if own_call is not None:
        refusal = own_call
    elif user.has_perm("approvals.change_confirmationrequest"):
        return Viewer(can_decide=True, as_admin=True, channel_name=channel_name)
    return Viewer(
        can_decide=False,
        as_admin=False,
        channel_name=routed_on or channel_name,
        why_read_only=refusal[1],
        can_view=may_view(user, confirmation),
    )


def live_grants_for(user: AbstractBaseUser | AnonymousUser) -> list[Any]:
    """The live grants this user may see and revoke: those they granted here, and those of requests
    they could have decided (an approver of that gate, or staff). Revoking only takes permission away."""
    grants = selectors.grants_live_for(user=user)
    mine = f"web:{user.get_username()}"
    with selectors.people_memo():  # who is whom (and the directory's standing) read once for the whole list
        return [g for g in grants if g.granted_by == mine or viewer_for(user, g.confirmation).can_decide]
