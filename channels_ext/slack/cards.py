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

from gateway_contract import CardView, actor_label, argument_value, sign_confirmation_id, sign_shown_ids, split_actor
from channels_ext.cardkit import RISK_ICONS, card_risk, is_high, risk_label, risk_word, waiting_line

ACTIONS_BLOCK_ID = "approval_actions"
APPROVE_ACTION_ID = "approve"
REJECT_ACTION_ID = "reject"
EDIT_BUTTON_ACTION_ID = "edit"  # opens the edit modal
GRANT_ACTION_PREFIX = "approve_grant_"  # + the index of the offered scope
APPROVE_ALL_ACTION_ID = "approve_all"  # the pending calls a turn's card lists (their ids signed in the value)
REJECT_ALL_ACTION_ID = "reject_all"
TURN_ACTIONS_BLOCK_ID = "turn_actions"
ITEM_BLOCK_PREFIX = "item_"  # + the call's position: its own Approve / Reject on a turn's card

REJECT_MODAL_CALLBACK_ID = "reject_reason"
REASON_BLOCK_ID = "reason"
REASON_ACTION_ID = "reason_input"
REASON_MAX_LENGTH = 1000

EDIT_MODAL_CALLBACK_ID = "edit_arguments"
EDIT_BLOCK_PREFIX = "edit_"  # + the path's position in the request's editable paths
EDIT_ACTION_ID = "value"
EDIT_VALUE_LIMIT = 3000  # plain_text_input's max_length
MAX_EDIT_FIELDS = 20
MAX_TURN_ITEMS = 15  # 50 blocks per message: two per call, and the rest of the card

# Slack's limits: section text 3000, section field 2000, header 150, fallback text 40000, button value 2000.
BUTTON_VALUE_LIMIT = 2000
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


def user_label(user: str, name: str = "") -> str:
    """A mention for a Slack user (a channel-qualified `slack:U…`, or a bare `U…` as gates list
    approvers); anyone else (a web user, the gateway) as plain text: "olga (web:olga)"."""
    kind, native = split_actor(user)
    if kind in ("slack", "") and is_slack_user_id(native):
        return f"<@{native}>"
    return escape(cut(actor_label(user, name), SHORT_LIMIT))


def slack_date(moment: dt.datetime) -> str:
    """A timestamp Slack shows in each reader's own time zone, with an ISO fallback."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.UTC)
    utc = moment.astimezone(dt.UTC)
    fallback = utc.strftime("%Y-%m-%d %H:%M UTC")
    return f"<!date^{int(utc.timestamp())}^{{date_short_pretty}} at {{time}}|{fallback}>"


def slack_relative(moment: dt.datetime) -> str:
    """The time until (or since) `moment` as each reader's client says it: "in 12 minutes"."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.UTC)
    utc = moment.astimezone(dt.UTC)
    return f"<!date^{int(utc.timestamp())}^{{ago}}|{utc.strftime('%Y-%m-%d %H:%M UTC')}>"


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
    if card.edited:
        line += " (edited)"
    if card.decided_by and card.status != "expired":
        shown = user_label(card.decided_by, card.decided_by_name)
        line += f" by {shown}" + (escape(card.behalf) if shown.startswith("<@") else "")
    if card.decided_at is not None:
        line += f" at {slack_date(card.decided_at)}"
    if card.decision_reason:
        line += f" — {escape(cut(card.decision_reason, 1000))}"
    return line


def risk_block(card: CardView) -> dict[str, Any]:
    """The card's risk on a line of its own, high in bold: "🔴 *Risk: high*" (a turn's: its riskiest call's)."""
    risk = card_risk(card)
    label = escape(risk_label(risk))
    if is_high(risk):
        label = f"{RISK_ICONS['high']} *Risk: high*"
        if card.is_pending or card.pending_items:
            label += " — read the arguments before approving"
    return _mrkdwn_section(label)


def fallback_text(card: CardView) -> str:
    """The plain `text` shown in notifications and by clients that cannot draw blocks (a high risk said first)."""
    subject = f"{escape(cut(card.agent, SHORT_LIMIT))} wants to run {escape(cut(card.tool_name, SHORT_LIMIT))}"
    high = "🔴 High risk. " if is_high(card_risk(card)) else ""
    if card.items:
        pending = len(card.pending_items)
        subject = f"{escape(cut(card.agent, SHORT_LIMIT))} wants to run {len(card.items)} calls of one turn"
        text = f"{high}Approval needed ({pending} pending): {subject}" if pending else f"Decided: {subject}"
        return cut(text, FALLBACK_TEXT_LIMIT)
    if card.is_pending:
        return cut(f"{high}Approval needed: {subject}", FALLBACK_TEXT_LIMIT)
    return cut(f"{outcome_line(card)}: {subject}", FALLBACK_TEXT_LIMIT)


def _details_lines(card: CardView) -> list[str]:
    lines = []
    why = f"*Why:* {escape(cut(card.reason, 1000))}" if card.reason else "*Why:* (no reason given)"
    if card.hook:
        why += f" _(hook `{escape(cut(card.hook, SHORT_LIMIT))}`)_"
    lines.append(why)
    if card.expires_at is not None and (card.is_pending or card.pending_items):
        # The time left: `{ago}` is drawn by each reader's client, so it stays true ("in 12 minutes").
        lines.append(f"*Expires:* {slack_date(card.expires_at)} ({slack_relative(card.expires_at)})")
    elif card.expires_at is not None:
        lines.append(f"*Expires:* {slack_date(card.expires_at)}")
    if card.approvals_required > 1:
        progress = f"*Approvals:* {len(card.approved_by)} of {card.approvals_required} approvals"
        if card.approved_by:
            progress += " (" + ", ".join(user_label(u) for u in card.approved_by[:20]) + ")"
        lines.append(progress)
    if waiting := waiting_line(card, person=user_label):
        lines.append(f"*Waiting for:* {waiting}")
    if card.approvers:
        shown = ", ".join(user_label(u) for u in card.approvers[:20])
        extra = f" and {len(card.approvers) - 20} more" if len(card.approvers) > 20 else ""
        lines.append(f"*Approvers:* {shown}{extra}")
    return lines


def _approved_args_section(card: CardView) -> dict[str, Any]:
    text, _ = format_args(card.approved_args or {}, limit=SECTION_TEXT_LIMIT - 200)
    text = text.replace("```", "`\u200b`\u200b`")
    return _mrkdwn_section(f"*Approved arguments* _(edited by the approver)_\n```{text}```")


def card_blocks(card: CardView) -> list[dict[str, Any]]:
    """The message blocks for `card`: buttons while pending, an outcome line after."""
    if card.items:
        return turn_blocks(card)
    title = "Approval needed" if card.is_pending else "Approval request"
    blocks: list[dict[str, Any]] = [{"type": "header", "text": _plain(cut(title, HEADER_TEXT_LIMIT))}]
    if not card.is_pending:
        blocks.append(_mrkdwn_section(outcome_line(card)))
    if card.escalated:
        blocks.append(_mrkdwn_section("⏫ *Escalated:* more approvers have been asked to decide."))
    if card.note:
        blocks.append(_mrkdwn_section(f"🔔 {escape(card.note)}"))
    blocks.append(risk_block(card))

    fields = [
        f"*Agent*\n{escape(cut(card.agent, SHORT_LIMIT))}",
        f"*Tool*\n`{escape(cut(card.tool_name, SHORT_LIMIT))}`",
        f"*End user*\n{escape(cut(card.user_id, SHORT_LIMIT)) or '—'}",
    ]
    if card.session_id:
        fields.append(f"*Session*\n{escape(cut(card.session_id, SHORT_LIMIT))}")
    blocks.append({"type": "section", "fields": [{"type": "mrkdwn", "text": cut(f, FIELD_TEXT_LIMIT)} for f in fields]})
    blocks.append(_args_section(card))
    if card.edited:
        blocks.append(_approved_args_section(card))
    blocks.append(_mrkdwn_section("\n".join(_details_lines(card))))
    blocks.append({"type": "context", "elements": [{"type": "mrkdwn", "text": f"<{card.url}|Open in browser>"}]})
    if card.is_pending:
        blocks.append(actions_block(card))
    return blocks


def _item_line(number: int, item: Any) -> str:
    args, _ = format_args(item.tool_args, limit=600)
    risk = risk_word(item.risk)
    line = f"*{number}.* {RISK_ICONS[risk]} `{escape(cut(item.tool_name, SHORT_LIMIT))}` {' · '.join(args.splitlines())}"
    line += f" _({risk} risk)_" if not is_high(risk) else " *(high risk)*"
    if not item.is_pending:
        icon = _OUTCOME_ICONS.get(item.status, "•")
        line += f"\n{icon} {escape(item.status.capitalize())}{' (edited)' if item.edited else ''}"
        if item.decided_by and item.status != "expired":
            line += f" by {user_label(item.decided_by, item.decided_by_name)}"
        if item.decision_reason:
            line += f" — {escape(cut(item.decision_reason, 300))}"
    return cut(line, SECTION_TEXT_LIMIT)


def turn_blocks(card: CardView) -> list[dict[str, Any]]:
    """A turn's card: the calls one agent turn made, each with its own Approve / Reject while
    pending, and Approve all / Reject all for the pending calls it lists — exactly those: their
    ids are signed into the buttons' value, so a call that joins the turn later stays pending."""
    pending = card.pending_items
    title = f"Approval needed: {len(pending)} of {len(card.items)} calls of one turn" if pending else "Calls of one turn"
    blocks: list[dict[str, Any]] = [{"type": "header", "text": _plain(cut(title, HEADER_TEXT_LIMIT))}]
    if card.escalated:
        blocks.append(_mrkdwn_section("⏫ *Escalated:* more approvers have been asked to decide."))
    if card.note:
        blocks.append(_mrkdwn_section(f"🔔 {escape(card.note)}"))
    blocks.append(risk_block(card))
    fields = [f"*Agent*\n{escape(cut(card.agent, SHORT_LIMIT))}", f"*End user*\n{escape(cut(card.user_id, SHORT_LIMIT)) or '—'}"]
    if card.session_id:
        fields.append(f"*Session*\n{escape(cut(card.session_id, SHORT_LIMIT))}")
    blocks.append({"type": "section", "fields": [{"type": "mrkdwn", "text": cut(f, FIELD_TEXT_LIMIT)} for f in fields]})
    for number, item in enumerate(card.items[:MAX_TURN_ITEMS], start=1):
        blocks.append(_mrkdwn_section(_item_line(number, item)))
        if item.is_pending:
            value = sign_confirmation_id(item.confirmation_id)
            blocks.append(
                {
                    "type": "actions",
                    "block_id": f"{ITEM_BLOCK_PREFIX}{number}",
                    "elements": [
                        {"type": "button", "action_id": APPROVE_ACTION_ID, "text": _plain(f"Approve {number}"), "value": value},
                        {"type": "button", "action_id": REJECT_ACTION_ID, "text": _plain(f"Reject {number}"), "value": value},
                    ],
                }
            )
    if len(card.items) > MAX_TURN_ITEMS:
        blocks.append(_mrkdwn_section(f"_… {len(card.items) - MAX_TURN_ITEMS} more calls: <{card.url}|see them all>_"))
    blocks.append(_mrkdwn_section("\n".join(_details_lines(card))))
    blocks.append({"type": "context", "elements": [{"type": "mrkdwn", "text": f"<{card.url}|Open in browser>"}]})
    offered = card.offered_ids(MAX_TURN_ITEMS)
    if len(offered) > 1:
        # The buttons carry the calls listed here, signed: the click decides these and no call that
        # joins the turn later (MAX_TURN_ITEMS ids fit well within BUTTON_VALUE_LIMIT).
        value = sign_shown_ids(card.confirmation_id, offered)
        which = f"all {len(offered)}" if len(offered) == len(pending) else f"the {len(offered)} listed"
        blocks.append(
            {
                "type": "actions",
                "block_id": TURN_ACTIONS_BLOCK_ID,
                "elements": [
                    {"type": "button", "action_id": APPROVE_ALL_ACTION_ID, "style": "primary",
                     "text": _plain(f"Approve {which}"), "value": value},
                    {"type": "button", "action_id": REJECT_ALL_ACTION_ID, "style": "danger",
                     "text": _plain(f"Reject {which}"), "value": value},
                ],
            }
        )  # fmt: skip
    return blocks


def actions_block(card: CardView) -> dict[str, Any]:
    """Approve and Reject buttons; each carries the signed confirmation id and nothing else."""
    value = sign_confirmation_id(card.confirmation_id)
    tool = escape(cut(card.tool_name, 100))
    scopes = [
        # The scope is stated on the button (Slack's limit for a button's text is 75 characters).
        {"type": "button", "action_id": f"{GRANT_ACTION_PREFIX}{n}", "text": _plain(cut(f"Approve {label}", 75)), "value": value}
        for n, label in enumerate(card.grant_options)
    ]
    edit = (
        [{"type": "button", "action_id": EDIT_BUTTON_ACTION_ID, "text": _plain("Edit, then approve…"), "value": value}]
        if card.editable_paths
        else []
    )
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
            *scopes,
            *edit,
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


def edit_modal(card: CardView, *, private_metadata: str) -> dict[str, Any]:
    """The modal where an approver changes the editable arguments (each shown as JSON; a new value
    keeps the type of the one it replaces) and approves (submitted as `view_submission`; blocks
    `edit_<n>` follow `card.editable_paths`)."""
    subject = f"*{escape(cut(card.agent, SHORT_LIMIT))}* wants to run `{escape(cut(card.tool_name, SHORT_LIMIT))}`."
    hint = (
        "Each value keeps its type: a number stays a number, text stays text (quotes optional). "
        "Approve runs the call with these values if the agent's policies allow them."
    )
    blocks: list[dict[str, Any]] = [_mrkdwn_section(f"{subject}\n{hint}")]
    for number, path in enumerate(card.editable_paths[:MAX_EDIT_FIELDS]):
        current = json.dumps(argument_value(card.tool_args, path), ensure_ascii=False)
        element: dict[str, Any] = {
            "type": "plain_text_input",
            "action_id": EDIT_ACTION_ID,
            "multiline": len(current) > 60,
            "max_length": EDIT_VALUE_LIMIT,
        }
        if len(current) <= EDIT_VALUE_LIMIT:
            element["initial_value"] = current
        blocks.append(
            {"type": "input", "block_id": f"{EDIT_BLOCK_PREFIX}{number}", "label": _plain(cut(path, 2000)), "element": element}
        )
    return {
        "type": "modal",
        "callback_id": EDIT_MODAL_CALLBACK_ID,
        "title": _plain("Edit, then approve"),
        "submit": _plain("Approve"),
        "close": _plain("Cancel"),
        "private_metadata": private_metadata,
        "blocks": blocks,
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
