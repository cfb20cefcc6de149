"""DingTalk card data for one confirmation request, on DingTalk's general card template.

Pure functions from a `CardView` to the template's `cardParamMap`: no I/O. The
template (`channels_ext.dingtalk.config.GENERAL_CARD_TEMPLATE`, the one
dingtalk-stream's own card classes use) shows `msgTitle`, the markdown of
`msgContent`, and the buttons listed in `sys_full_json_obj.msgButtons`; a
button with `"request": true` calls back over the app's Stream connection, and
the callback names the button's `id`. Every value of the map is a string.

A button's id is `<action>|<signed confirmation id>`: the decision (or scope)
and the request, nothing else. The general template has no input fields, so a
rejection carries a typed reason only on a template of one's own with an input
named `reason`, and arguments are edited on the approval page, which every card
links to (docs/dingtalk.md).

Every string from an agent or a user is escaped before it reaches the markdown,
so a tool argument cannot add a link, a `<font>` tag or emphasis.
"""

from __future__ import annotations

import json
import re
from typing import Any

from gateway_contract import CallbackError, CardView, actor_label, sign_confirmation_id, unsign_confirmation_id
from channels_ext.cardkit import STATUS_TITLES as _TITLES
from channels_ext.cardkit import RISK_ICONS, card_risk, cut, is_high, outcome_sentence, risk_word, utc_text, value_text
from channels_ext.cardkit import waiting_line

APPROVE_ACTION = "approve"
REJECT_ACTION = "reject"
GRANT_ACTION_PREFIX = "approve_grant_"  # + the index of the offered scope
BUTTON_ID_SEPARATOR = "|"
# The input a card template of one's own may add for a rejection's reason; the general template has none.
REASON_PARAM = "reason"
# AICardStatus.FINISHED in dingtalk-stream: the template shows its content, not a "thinking" state.
FLOW_FINISHED = "3"

ARG_VALUE_LIMIT = 300
SHORT_LIMIT = 200
REASON_LIMIT = 1000
CONTENT_LIMIT = 6000

_MARKDOWN_PUNCTUATION = re.compile(r"([\\`*_~\[\]#|>])")


def escape(text: str) -> str:
    """Make agent- or user-supplied text inert in DingTalk markdown: no tags, links or emphasis."""
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return _MARKDOWN_PUNCTUATION.sub(r"\\\1", text)


def _safe(text: str, limit: int) -> str:
    return escape(cut(" ".join(text.split()), limit))


def _argument_lines(tool_args: dict[str, Any]) -> list[str]:
    if not tool_args:
        return ["- (no arguments)"]
    return [f"- {_safe(str(key), SHORT_LIMIT)}: {_safe(value_text(value), ARG_VALUE_LIMIT)}" for key, value in tool_args.items()]


def outcome_line(card: CardView) -> str:
    """How a decided request ended: "✅ **Approved** by dingtalk:manager01 at … — reason"."""
    return outcome_sentence(
        card,
        person=lambda who, name: _safe(actor_label(who, name), SHORT_LIMIT),
        text=lambda text: _safe(text, REASON_LIMIT),
        strong=lambda text: f"**{text}**",
    )


def risk_line(risk: str) -> str:
    """ "🔴 **Risk: high**" (the whole label bold when high), "🟢 **Risk:** low"."""
    word = risk_word(risk)
    return f"{RISK_ICONS[word]} **Risk: high**" if is_high(word) else f"{RISK_ICONS[word]} **Risk:** {word}"


def card_markdown(card: CardView) -> str:
    """The card's text: its risk, the call, why it was gated, who may decide until when, and how it ended."""
    why = _safe(card.reason, REASON_LIMIT) if card.reason else "(no reason given)"
    if card.hook:
        why += f" (hook: {_safe(card.hook, SHORT_LIMIT)})"
    lines = [
        risk_line(card_risk(card)),
        f"**Agent:** {_safe(card.agent, SHORT_LIMIT)}",
        f"**Tool:** {_safe(card.tool_name, SHORT_LIMIT)}",
        f"**End user:** {_safe(card.user_id, SHORT_LIMIT) if card.user_id else '(unknown)'}",
        "**Arguments:**",
        *_argument_lines(card.tool_args),
    ]
    if card.edited and card.approved_args is not None:
        lines += ["**Approved arguments** (edited by the approver):", *_argument_lines(card.approved_args)]
    lines.append(f"**Why:** {why}")
    if card.is_pending:
        if card.expires_at is not None:
            lines.append(f"**Expires:** {utc_text(card.expires_at)}")
        if card.approvers:
            lines.append("**Approvers:** " + ", ".join(_safe(who, SHORT_LIMIT) for who in card.approvers[:20]))
        if card.approvals_required > 1:
            progress = f"**Approvals:** {len(card.approved_by)} of {card.approvals_required}"
            if card.approved_by:
                progress += " — " + ", ".join(_safe(who, SHORT_LIMIT) for who in card.approved_by)
            lines.append(progress)
        if waiting := waiting_line(card, person=lambda who, _name: _safe(who, SHORT_LIMIT)):
            lines.append(f"**Waiting for:** {waiting}")
    if card.escalated:
        lines.append("⏫ **Escalated:** this request was passed on to further approvers.")
    if card.note:
        lines.append(f"🔔 {_safe(card.note, REASON_LIMIT)}")
    if not card.is_pending:
        lines.append(outcome_line(card))
    # The URL is the gateway's own (GATEWAY_PUBLIC_URL), not an agent's.
    lines.append(f"[Open the approval page]({card.url})")
    return cut("\n\n".join(lines), CONTENT_LIMIT)


def button_id(action: str, confirmation_id: str) -> str:
    """What a button calls back with: the action and the signed request id."""
    return f"{action}{BUTTON_ID_SEPARATOR}{sign_confirmation_id(confirmation_id)}"


def parse_button_id(value: str) -> tuple[str, str]:
    """(action, confirmation id) of a button id this gateway drew; CallbackError(400) otherwise."""
    action, separator, signed = value.partition(BUTTON_ID_SEPARATOR)
    if not separator or not signed:
        raise CallbackError(400, "the clicked button is not one of this gateway's")
    return action, unsign_confirmation_id(signed)


def buttons(card: CardView) -> list[dict[str, Any]]:
    """Approve, a button per offered scope, and Reject, while the request is pending."""
    if not card.is_pending:
        return []
    found = [{"text": "Approve", "color": "blue", "id": button_id(APPROVE_ACTION, card.confirmation_id), "request": True}]
    found += [
        {
            "text": cut(f"Approve {label}", 60),
            "color": "blue",
            "id": button_id(f"{GRANT_ACTION_PREFIX}{number}", card.confirmation_id),
            "request": True,
        }
        for number, label in enumerate(card.grant_options)
    ]
    found.append({"text": "Reject", "color": "gray", "id": button_id(REJECT_ACTION, card.confirmation_id), "request": True})
    return found


def card_params(card: CardView) -> dict[str, str]:
    """The template's `cardParamMap` for `card` (every value a string)."""
    full = {"order": ["msgTitle", "msgContent", "msgButtons"], "msgButtons": buttons(card)}
    title = f"{_TITLES.get(card.status, card.status.capitalize())}: {card.agent} · {card.tool_name}"
    if is_high(card_risk(card)):
        title = f"🔴 High risk · {title}"  # said first, where a notification shows it
    return {
        "flowStatus": FLOW_FINISHED,
        "msgTitle": cut(title, SHORT_LIMIT),
        "msgContent": card_markdown(card),
        "sys_full_json_obj": json.dumps(full, ensure_ascii=False),
    }
