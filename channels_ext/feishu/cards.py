"""Feishu/Lark card JSON 2.0 for one confirmation request.

Pure functions from a `CardView` to card JSON: no I/O. Every string that
comes from an agent or a user is escaped before it reaches the markdown
element, so a tool argument cannot mention everyone (`<at id=all></at>`),
recolour text or dress up a link. Card structure:
https://open.feishu.cn/document/feishu-cards/card-json-v2-structure
"""

from __future__ import annotations

import datetime as dt
import json
import re
from typing import Any

from channels_ext.base import CardView, sign_confirmation_id

APPROVE_BUTTON_NAME = "approve"
REJECT_BUTTON_NAME = "reject"
REJECT_FORM_NAME = "reject_form"
# The reject form's input; Feishu returns what was typed in `event.action.form_value.reason`.
REASON_INPUT_NAME = "reason"
REASON_MAX_LENGTH = 1000

ARG_VALUE_LIMIT = 300  # one argument's rendered value
SHORT_LIMIT = 200  # agent, tool, user, hook names
REASON_LIMIT = 1000  # why gated, decision reason, note
DETAILS_LIMIT = 4000  # the agent/tool/arguments/user/why part of the markdown

_TITLES = {
    "pending": "Approval needed",
    "approved": "Approved",
    "rejected": "Rejected",
    "expired": "Expired",
    "cancelled": "Cancelled",
}
# Header colours: https://open.feishu.cn/document/feishu-cards/card-json-v2-components/content-components/title
_TEMPLATES = {"pending": "orange", "approved": "green", "rejected": "red", "expired": "grey", "cancelled": "grey"}
_OUTCOME_ICONS = {"approved": "✅", "rejected": "❌", "expired": "⌛", "cancelled": "🚫"}

_OPEN_ID = re.compile(r"^ou_[0-9A-Za-z]+$")
# Markdown punctuation that could open emphasis, a link or inline code in a value.
_MARKDOWN_PUNCTUATION = re.compile(r"([\\`*_~\[\]])")


def escape(text: str) -> str:
    """Make agent- or user-supplied text inert inside a Feishu markdown element.

    `<`, `>` and `&` become entities so no `<at>`, `<font>` or `<a>` tag can be
    injected; markdown punctuation gets a backslash so a value cannot open
    emphasis or a `[link](…)`.
    """
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return _MARKDOWN_PUNCTUATION.sub(r"\\\1", text)


def cut(text: str, limit: int) -> str:
    """Shorten `text` to at most `limit` characters, ending with "…" when cut."""
    if len(text) <= limit:
        return text
    head = text[: max(limit - 1, 0)]
    return head + "…"


def _safe(text: str, limit: int) -> str:
    """Cut, then escape: the limit counts what the reader sees, not the escapes."""
    return escape(cut(" ".join(text.split()), limit))


def mention(user_id: str) -> str:
    """An `<at>` mention for a Feishu open_id; any other id (web user, system) as text."""
    if _OPEN_ID.match(user_id):
        return f"<at id={user_id}></at>"
    return _safe(user_id, SHORT_LIMIT)


def format_time(moment: dt.datetime) -> str:
    """A timestamp as UTC text (card markdown has no per-reader time zone tag)."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.UTC)
    return moment.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")


def _format_value(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)


def _argument_lines(tool_args: dict[str, Any]) -> list[str]:
    if not tool_args:
        return ["(no arguments)"]
    return [
        f"- {_safe(str(key), SHORT_LIMIT)}: {_safe(_format_value(value), ARG_VALUE_LIMIT)}"
        for key, value in tool_args.items()
    ]


def _details(card: CardView) -> str:
    """Agent, tool, arguments, end user and why — cut at a line boundary to `DETAILS_LIMIT`."""
    hook = f" (hook: {_safe(card.hook, SHORT_LIMIT)})" if card.hook else ""
    why = _safe(card.reason, REASON_LIMIT) if card.reason else "(no reason given)"
    lines = [
        f"**Agent:** {_safe(card.agent, SHORT_LIMIT)}",
        f"**Tool:** {_safe(card.tool_name, SHORT_LIMIT)}",
        "**Arguments:**",
        *_argument_lines(card.tool_args),
        f"**End user:** {mention(card.user_id) if card.user_id else '(unknown)'}",
        f"**Why:** {why}{hook}",
    ]
    kept: list[str] = []
    used = 0
    for number, line in enumerate(lines):
        if used + len(line) + 1 > DETAILS_LIMIT:
            kept.append(f"… {len(lines) - number} more line(s) on the approval page")
            break
        kept.append(line)
        used += len(line) + 1
    return "\n".join(kept)


def outcome_line(card: CardView) -> str:
    """How a decided request ended, e.g. "✅ **Approved** by <at id=ou_…></at> at …"."""
    icon = _OUTCOME_ICONS.get(card.status, "ℹ️")
    line = f"{icon} **{_safe(card.status.capitalize(), SHORT_LIMIT)}**"
    deciders = card.approved_by if card.status == "approved" and card.approved_by else ()
    if not deciders and card.decided_by and card.status in ("approved", "rejected", "cancelled"):
        deciders = (card.decided_by,)
    if deciders:
        line += " by " + ", ".join(mention(who) for who in deciders)
    if card.decided_at is not None:
        line += f" at {format_time(card.decided_at)}"
    if card.decision_reason:
        line += f" — {_safe(card.decision_reason, REASON_LIMIT)}"
    return line


def _status_lines(card: CardView) -> list[str]:
    lines = []
    if card.is_pending:
        if card.expires_at is not None:
            lines.append(f"**Expires:** {format_time(card.expires_at)}")
        if card.approvers:
            lines.append("**Approvers:** " + " ".join(mention(who) for who in card.approvers))
        if card.approvals_required > 1:
            progress = f"**Approvals:** {len(card.approved_by)} of {card.approvals_required}"
            if card.approved_by:
                progress += " — " + ", ".join(mention(who) for who in card.approved_by)
            lines.append(progress)
    if card.escalated:
        lines.append("⏫ **Escalated:** this request was passed on to further approvers.")
    if card.note:
        lines.append(f"🔔 {_safe(card.note, REASON_LIMIT)}")
    if not card.is_pending:
        lines.append(outcome_line(card))
    return lines


def card_markdown(card: CardView) -> str:
    """The card's one markdown element: details, status lines and a link to the web page."""
    parts = [_details(card), *_status_lines(card), f"[Open the approval page]({card.url})"]
    return "\n".join(parts)


def _plain(text: str) -> dict[str, str]:
    return {"tag": "plain_text", "content": text}


def _callback(decision: str, confirmation_id: str) -> list[dict[str, Any]]:
    # Buttons carry the decision and a signed id, nothing else (CONVENTIONS: channel adapters).
    value = {"decision": decision, "confirmation_id": sign_confirmation_id(confirmation_id)}
    return [{"type": "callback", "value": value}]


def action_elements(confirmation_id: str) -> list[dict[str, Any]]:
    """Approve button and reject form (input + submit button) for a pending request.

    JSON 2.0 interactive components need a `name`, or Feishu answers clicks
    with error 200340; a form's submit button sends every input of the form in
    `action.form_value`, keyed by input name.
    https://open.feishu.cn/document/feishu-cards/card-json-v2-components/containers/form-container
    """
    approve = {
        "tag": "button",
        "name": APPROVE_BUTTON_NAME,
        "type": "primary",
        "text": _plain("Approve"),
        "behaviors": _callback("approve", confirmation_id),
    }
    reject_form = {
        "tag": "form",
        "name": REJECT_FORM_NAME,
        "elements": [
            {
                "tag": "input",
                "name": REASON_INPUT_NAME,
                "placeholder": _plain("Reason for rejecting"),
                "max_length": REASON_MAX_LENGTH,
                "width": "fill",
            },
            {
                "tag": "button",
                "name": REJECT_BUTTON_NAME,
                "type": "danger",
                "text": _plain("Reject"),
                "form_action_type": "submit",
                "behaviors": _callback("reject", confirmation_id),
            },
        ],
    }
    return [approve, reject_form]


def render_card(card: CardView) -> dict[str, Any]:
    """The whole card JSON 2.0 for `card`: buttons while pending, an outcome line after."""
    title = _TITLES.get(card.status, card.status.capitalize() or "Approval")
    subject = cut(f"{card.agent} · {card.tool_name}", SHORT_LIMIT)
    elements: list[dict[str, Any]] = [{"tag": "markdown", "content": card_markdown(card)}]
    if card.is_pending:
        elements.extend(action_elements(card.confirmation_id))
    return {
        "schema": "2.0",
        # update_multi: one shared card that every reader sees redrawn when it is patched.
        "config": {"update_multi": True, "summary": {"content": cut(f"{title}: {card.tool_name}", SHORT_LIMIT)}},
        "header": {
            "title": _plain(title),
            "subtitle": _plain(subject),
            "template": _TEMPLATES.get(card.status, "grey"),
        },
        "body": {"elements": elements},
    }
