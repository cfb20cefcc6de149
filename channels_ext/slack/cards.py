"""Block Kit for the Slack approval card and the reject-reason modal.

Pure functions from a `CardView` to Slack JSON: no I/O, no settings. Every
string that comes from an agent or a user is escaped, so a tool argument
cannot ping `<!channel>` or dress up a link; every text is cut to Slack's
limits (https://docs.slack.dev/reference/block-kit/blocks).
"""

from __future__ import annotations

import datetime as dt
import json
import re
from typing import Any

from channels_ext.base import CardView, sign_confirmation_id

ACTIONS_BLOCK_ID = "approval_actions"
APPROVE_ACTION_ID = "approve"
REJECT_ACTION_ID = "reject"

REJECT_MODAL_CALLBACK_ID = "reject_reason"
REASON_BLOCK_ID = "reason"
REASON_ACTION_ID = "reason_input"
REASON_MAX_LENGTH = 1000

# Slack's limits: section text 3000, section field 2000, header 150, fallback text 40000.
SECTION_TEXT_LIMIT = 3000
FIELD_TEXT_LIMIT = 2000
HEADER_TEXT_LIMIT = 150
FALLBACK_TEXT_LIMIT = 3000

ARG_VALUE_LIMIT = 300  # one argument's value, before the whole list is cut
SHORT_LIMIT = 200  # agent, tool, user and session names

_SLACK_USER_ID = re.compile(r"[UW][A-Z0-9]{2,}")
_ENTITY_TAIL = re.compile(r"&[a-z]{0,3}$")

_OUTCOME_ICONS = {"approved": "✅", "rejected": "❌", "expired": "⌛", "cancelled": "🚫"}


def escape(text: str) -> str:
    """Escape the three characters Slack's mrkdwn treats as control characters.

    https://docs.slack.dev/messaging/formatting-message-text#escaping
    """
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def cut(text: str, limit: int) -> str:
    """Shorten `text` to at most `limit` characters, ending with "…" when cut.

    Never leaves half of an `&amp;`-style entity behind.
    """
    if len(text) <= limit:
        return text
    head = text[: max(limit - 1, 0)]
    head = _ENTITY_TAIL.sub("", head)
    return head + "…"


def is_slack_user_id(user: str) -> bool:
    """True for ids Slack can mention (U… or W…), false for web usernames and "system"."""
    return _SLACK_USER_ID.fullmatch(user) is not None


def user_label(user: str) -> str:
    """A mention for a Slack user id; any other id (web user, system) as plain text."""
    if is_slack_user_id(user):
        return f"<@{user}>"
    return escape(cut(user, SHORT_LIMIT))


def slack_date(moment: dt.datetime) -> str:
    """A timestamp Slack shows in each reader's own time zone, with an ISO fallback."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.UTC)
    utc = moment.astimezone(dt.UTC)
    fallback = utc.strftime("%Y-%m-%d %H:%M UTC")
    return f"<!date^{int(utc.timestamp())}^{{date_short_pretty}} at {{time}}|{fallback}>"


def _format_value(value: Any) -> str:
    if isinstance(value, str) and "\n" not in value:
        return value
    return json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)


def format_args(tool_args: dict[str, Any], *, limit: int) -> tuple[str, bool]:
    """Arguments as escaped `key = value` lines within `limit` characters.

    Returns the text and whether anything had to be shortened.
    """
    if not tool_args:
        return "(no arguments)", False
    shortened = False
    lines = []
    for key, value in tool_args.items():
        rendered = _format_value(value)
        if len(rendered) > ARG_VALUE_LIMIT:
            rendered = cut(rendered, ARG_VALUE_LIMIT)
            shortened = True
        lines.append(escape(f"{key} = {rendered}"))
    text = "\n".join(lines)
    if len(text) > limit:
        text = cut(text, limit)
        shortened = True
    return text, shortened


def _plain(text: str, *, emoji: bool = True) -> dict[str, Any]:
    return {"type": "plain_text", "text": text, "emoji": emoji}


def _mrkdwn_section(text: str) -> dict[str, Any]:
    return {"type": "section", "text": {"type": "mrkdwn", "text": cut(text, SECTION_TEXT_LIMIT)}}


def _args_section(card: CardView) -> dict[str, Any]:
    title = "*Arguments*\n"
    more = f"\n_Arguments shortened — <{card.url}|see them all>_"
    fence = "``````"  # opening and closing ``` around the lines
    budget = SECTION_TEXT_LIMIT - len(title) - len(fence) - len(more)
    text, shortened = format_args(card.tool_args, limit=budget)
    # A ``` inside a value would close the code block early.
    text = text.replace("```", "`\u200b`\u200b`")
    if len(text) > budget:
        text, shortened = cut(text, budget), True
    return _mrkdwn_section(f"{title}```{text}```{more if shortened else ''}")


def outcome_line(card: CardView) -> str:
    """One line saying how a decided request ended, e.g. "✅ Approved by <@U1> at …"."""
    icon = _OUTCOME_ICONS.get(card.status, "•")
    line = f"{icon} {escape(card.status.capitalize())}"
    if card.decided_by and card.status != "expired":
        line += f" by {user_label(card.decided_by)}"
    if card.decided_at is not None:
        line += f" at {slack_date(card.decided_at)}"
    if card.decision_reason:
        line += f" — {escape(cut(card.decision_reason, 1000))}"
    return line


def fallback_text(card: CardView) -> str:
    """The plain `text` shown in notifications and by clients that cannot draw blocks."""
    subject = f"{escape(cut(card.agent, SHORT_LIMIT))} wants to run {escape(cut(card.tool_name, SHORT_LIMIT))}"
    if card.is_pending:
        return cut(f"Approval needed: {subject}", FALLBACK_TEXT_LIMIT)
    return cut(f"{outcome_line(card)}: {subject}", FALLBACK_TEXT_LIMIT)


def _details_lines(card: CardView) -> list[str]:
    lines = []
    why = f"*Why:* {escape(cut(card.reason, 1000))}" if card.reason else "*Why:* (no reason given)"
    if card.hook:
        why += f" _(hook `{escape(cut(card.hook, SHORT_LIMIT))}`)_"
    lines.append(why)
    if card.expires_at is not None:
        lines.append(f"*Expires:* {slack_date(card.expires_at)}")
    if card.approvals_required > 1:
        progress = f"*Approvals:* {len(card.approved_by)} of {card.approvals_required} approvals"
        if card.approved_by:
            progress += " (" + ", ".join(user_label(u) for u in card.approved_by[:20]) + ")"
        lines.append(progress)
    if card.approvers:
        shown = ", ".join(user_label(u) for u in card.approvers[:20])
        extra = f" and {len(card.approvers) - 20} more" if len(card.approvers) > 20 else ""
        lines.append(f"*Approvers:* {shown}{extra}")
    return lines


def card_blocks(card: CardView) -> list[dict[str, Any]]:
    """The message blocks for `card`: buttons while pending, an outcome line after."""
    title = "Approval needed" if card.is_pending else "Approval request"
    blocks: list[dict[str, Any]] = [{"type": "header", "text": _plain(cut(title, HEADER_TEXT_LIMIT))}]
    if not card.is_pending:
        blocks.append(_mrkdwn_section(outcome_line(card)))
    if card.escalated:
        blocks.append(_mrkdwn_section("⏫ *Escalated:* more approvers have been asked to decide."))
    if card.note:
        blocks.append(_mrkdwn_section(f"🔔 {escape(card.note)}"))

    fields = [
        f"*Agent*\n{escape(cut(card.agent, SHORT_LIMIT))}",
        f"*Tool*\n`{escape(cut(card.tool_name, SHORT_LIMIT))}`",
        f"*End user*\n{escape(cut(card.user_id, SHORT_LIMIT)) or '—'}",
    ]
    if card.session_id:
        fields.append(f"*Session*\n{escape(cut(card.session_id, SHORT_LIMIT))}")
    blocks.append({"type": "section", "fields": [{"type": "mrkdwn", "text": cut(f, FIELD_TEXT_LIMIT)} for f in fields]})
    blocks.append(_args_section(card))
    blocks.append(_mrkdwn_section("\n".join(_details_lines(card))))
    blocks.append({"type": "context", "elements": [{"type": "mrkdwn", "text": f"<{card.url}|Open in browser>"}]})
    if card.is_pending:
        blocks.append(actions_block(card))
    return blocks


def actions_block(card: CardView) -> dict[str, Any]:
    """Approve and Reject buttons; each carries the signed confirmation id and nothing else."""
    value = sign_confirmation_id(card.confirmation_id)
    tool = escape(cut(card.tool_name, 100))
    return {
        "type": "actions",
        "block_id": ACTIONS_BLOCK_ID,
        "elements": [
            {
                "type": "button",
                "action_id": APPROVE_ACTION_ID,
                "style": "primary",
                "text": _plain("Approve"),
                "value": value,
            },
            {
                "type": "button",
                "action_id": REJECT_ACTION_ID,
                "style": "danger",
                "text": _plain("Reject"),
                "value": value,
                "confirm": {
                    "title": _plain("Reject this call?"),
                    "text": {"type": "mrkdwn", "text": f"The agent will not run `{tool}`."},
                    "confirm": _plain("Reject"),
                    "deny": _plain("Cancel"),
                    "style": "danger",
                },
            },
        ],
    }


def reject_modal(card: CardView | None, *, private_metadata: str) -> dict[str, Any]:
    """The modal asking a rejecter for a reason (submitted as `view_submission`)."""
    blocks: list[dict[str, Any]] = []
    if card is not None:
        subject = f"*{escape(cut(card.agent, SHORT_LIMIT))}* wants to run `{escape(cut(card.tool_name, SHORT_LIMIT))}`."
        blocks.append(_mrkdwn_section(subject))
    blocks.append(
        {
            "type": "input",
            "block_id": REASON_BLOCK_ID,
            "label": _plain("Why are you rejecting it?"),
            "element": {
                "type": "plain_text_input",
                "action_id": REASON_ACTION_ID,
                "multiline": True,
                "max_length": REASON_MAX_LENGTH,
                "placeholder": _plain("The agent is told this reason"),
            },
        }
    )
    return {
        "type": "modal",
        "callback_id": REJECT_MODAL_CALLBACK_ID,
        "title": _plain("Reject tool call"),
        "submit": _plain("Reject"),
        "close": _plain("Cancel"),
        "private_metadata": private_metadata,
        "blocks": blocks,
    }
