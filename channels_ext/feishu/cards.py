"""Feishu/Lark card JSON 2.0 for one confirmation request.

Pure functions from a `CardView` to card JSON: no I/O. Every string that
comes from an agent or a user is escaped before it reaches the markdown
element, so a tool argument cannot mention everyone (`<at id=all></at>`),
recolour text or dress up a link. Card structure:
https://open.feishu.cn/document/feishu-cards/card-json-v2-structure
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import re
from typing import Any

from gateway_contract import CardView, actor_label, argument_value, sign_confirmation_id, sign_shown_ids, split_actor
from channels_ext.cardkit import OUTCOME_ICONS as _OUTCOME_ICONS
from channels_ext.cardkit import STATUS_TITLES as _TITLES
from channels_ext.cardkit import RISK_ICONS, card_risk, cut, is_high, outcome_sentence, risk_word, waiting_line
from channels_ext.cardkit import utc_text as format_time
from channels_ext.cardkit import value_text as _format_value

APPROVE_BUTTON_NAME = "approve"
REJECT_BUTTON_NAME = "reject"
REJECT_FORM_NAME = "reject_form"
# The reject form's input; Feishu returns what was typed in `event.action.form_value.reason`.
REASON_INPUT_NAME = "reason"
REASON_MAX_LENGTH = 1000
# Edit, then approve: a form with one input per editable argument (`arg_<n>`, JSON) and its submit button.
EDIT_FORM_NAME = "edit_form"
EDIT_INPUT_PREFIX = "arg_"
EDIT_BUTTON_NAME = "approve_edited"
EDIT_VALUE_LIMIT = 1000  # an input's max_length
MAX_EDIT_FIELDS = 10
GRANT_BUTTON_PREFIX = "approve_grant_"
MAX_TURN_ITEMS = 15

ARG_VALUE_LIMIT = 300  # one argument's rendered value
SHORT_LIMIT = 200  # agent, tool, user, hook names
REASON_LIMIT = 1000  # why gated, decision reason, note
DETAILS_LIMIT = 4000  # the agent/tool/arguments/user/why part of the markdown

# Header colours: https://open.feishu.cn/document/feishu-cards/card-json-v2-components/content-components/title
_TEMPLATES = {"pending": "orange", "approved": "green", "rejected": "red", "expired": "grey", "cancelled": "grey"}
# The risk's tag beside the title (`text_tag_list`; tag colours as the title component lists them).
_RISK_TAG_COLOURS = {"low": "green", "medium": "orange", "high": "red"}

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


def safe_text(text: str, limit: int) -> str:
    """Cut, then escape: the limit counts what the reader sees, not the escapes."""
    return escape(cut(" ".join(text.split()), limit))


def mention(user_id: str, name: str = "") -> str:
    """An `<at>` mention for a Feishu user (a channel-qualified `feishu:ou_…`, or a bare open_id as
    gates list approvers); anyone else (a web user, the gateway) as text: "olga (web:olga)"."""
    kind, native = split_actor(user_id)
    if kind in ("feishu", "") and _OPEN_ID.match(native):
        return f"<at id={native}></at>"
    return safe_text(actor_label(user_id, name), SHORT_LIMIT)


def argument_lines(tool_args: dict[str, Any]) -> list[str]:
    if not tool_args:
        return ["(no arguments)"]
    return [
        f"- {safe_text(str(key), SHORT_LIMIT)}: {safe_text(_format_value(value), ARG_VALUE_LIMIT)}"
        for key, value in tool_args.items()
    ]


def _details(card: CardView) -> str:
    """Agent, tool, arguments, end user and why — cut at a line boundary to `DETAILS_LIMIT`."""
    hook = f" (hook: {safe_text(card.hook, SHORT_LIMIT)})" if card.hook else ""
    why = safe_text(card.reason, REASON_LIMIT) if card.reason else "(no reason given)"
    lines = [
        risk_line(card_risk(card)),
        f"**Agent:** {safe_text(card.agent, SHORT_LIMIT)}",
        f"**Tool:** {safe_text(card.tool_name, SHORT_LIMIT)}",
        "**Arguments:**",
        *argument_lines(card.tool_args),
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


def risk_line(risk: str) -> str:
    """ "🔴 **Risk: high**" (high in red as well), "🟢 **Risk:** low": the card's first line."""
    word = risk_word(risk)
    if is_high(word):
        return f"{RISK_ICONS[word]} <font color='red'>**Risk: high**</font>"
    return f"{RISK_ICONS[word]} **Risk:** {word}"


def risk_tag(risk: str) -> dict[str, Any]:
    """The header's tag for a risk: "Risk: high" in red (medium orange, low green)."""
    word = risk_word(risk)
    return {"tag": "text_tag", "text": _plain(f"Risk: {word}"), "color": _RISK_TAG_COLOURS[word]}


def outcome_line(card: CardView) -> str:
    """How a decided request ended, e.g. "✅ **Approved** by <at id=ou_…></at> at …"."""
    return outcome_sentence(
        card, person=mention, text=lambda text: safe_text(text, REASON_LIMIT), strong=lambda text: f"**{text}**"
    )


def time_left(moment: dt.datetime, now: dt.datetime | None = None) -> str:
    """The time left until `moment` as the card is drawn ("about 25 min left"); cards are redrawn
    with a warning before the deadline (`warn_before_seconds`), which brings this up to date."""
    now = now or dt.datetime.now(dt.UTC)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.UTC)
    seconds = int((moment - now).total_seconds())
    if seconds <= 0:
        return "the deadline has passed"
    if seconds < 120:
        return f"{seconds} s left"
    if seconds < 7200:
        return f"about {seconds // 60} min left"
    return f"about {seconds // 3600} h {seconds % 3600 // 60} min left"


def _status_lines(card: CardView) -> list[str]:
    lines = []
    if card.edited and card.approved_args is not None:
        lines.append("**Approved arguments** (edited by the approver):")
        lines.extend(argument_lines(card.approved_args))
    if card.is_pending or card.pending_items:
        if card.expires_at is not None:
            lines.append(f"**Expires:** {format_time(card.expires_at)} ({time_left(card.expires_at)})")
        if card.approvers:
            lines.append("**Approvers:** " + " ".join(mention(who) for who in card.approvers))
        if card.approvals_required > 1:
            progress = f"**Approvals:** {len(card.approved_by)} of {card.approvals_required}"
            if card.approved_by:
                progress += " — " + ", ".join(mention(who) for who in card.approved_by)
            lines.append(progress)
        if waiting := waiting_line(card, person=mention):
            lines.append(f"**Waiting for:** {waiting}")
    if card.escalated:
        lines.append("⏫ **Escalated:** this request was passed on to further approvers.")
    if card.note:
        lines.append(f"🔔 {safe_text(card.note, REASON_LIMIT)}")
    if not card.is_pending:
        lines.append(outcome_line(card))
    return lines


def card_markdown(card: CardView) -> str:
    """The card's one markdown element: details, status lines and a link to the web page."""
    parts = [_details(card), *_status_lines(card), f"[Open the approval page]({card.url})"]
    return "\n".join(parts)


def _plain(text: str) -> dict[str, str]:
    return {"tag": "plain_text", "content": text}


def _callback(decision: str, confirmation_id: str, **more: Any) -> list[dict[str, Any]]:
    # Buttons carry the decision and a signed id (and which scope, edit or turn), nothing else.
    value = {"decision": decision, "confirmation_id": sign_confirmation_id(confirmation_id), **more}
    return [{"type": "callback", "value": value}]


def scope_buttons(card: CardView) -> list[dict[str, Any]]:
    """"Approve for this session …" / "Approve for 30 min …": the scopes the gate offers, stated on the buttons."""
    return [
        {
            "tag": "button",
            "name": f"{GRANT_BUTTON_PREFIX}{number}",
            "type": "primary",
            "text": _plain(cut(f"Approve {label}", 60)),
            "behaviors": _callback("approve", card.confirmation_id, grant=number),
        }
        for number, label in enumerate(card.grant_options)
    ]


def edit_form(card: CardView) -> dict[str, Any]:
    """A form with one input per editable argument (its value as JSON) and "Approve with these values".

    Feishu sends every input of the form in `action.form_value`, keyed by name; the button's
    value names the path of each `arg_<n>`.
    """
    paths = list(card.editable_paths[:MAX_EDIT_FIELDS])
    inputs = []
    for number, path in enumerate(paths):
        current = json.dumps(argument_value(card.tool_args, path), ensure_ascii=False)
        field: dict[str, Any] = {
            "tag": "input",
            "name": f"{EDIT_INPUT_PREFIX}{number}",
            "label": _plain(cut(path, SHORT_LIMIT)),
            "max_length": EDIT_VALUE_LIMIT,
            "width": "fill",
        }
        if len(current) <= EDIT_VALUE_LIMIT:
            field["default_value"] = current
        inputs.append(field)
    submit = {
        "tag": "button",
        "name": EDIT_BUTTON_NAME,
        "type": "primary",
        "text": _plain("Approve with these values"),
        "form_action_type": "submit",
        "behaviors": _callback("approve", card.confirmation_id, edit=paths),
    }
    return {"tag": "form", "name": EDIT_FORM_NAME, "elements": [*inputs, submit]}


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


def _item_line(number: int, item: Any) -> str:
    args = "; ".join(line.removeprefix("- ") for line in argument_lines(item.tool_args))
    risk = risk_word(item.risk)
    line = f"**{number}.** {RISK_ICONS[risk]} {safe_text(item.tool_name, SHORT_LIMIT)} ({risk} risk) — {args}"
    if not item.is_pending:
        line += f" → {_OUTCOME_ICONS.get(item.status, 'ℹ️')} {safe_text(item.status, SHORT_LIMIT)}"
        if item.edited:
            line += " (edited)"
        if item.decided_by and item.status != "expired":
            line += " by " + mention(item.decided_by, item.decided_by_name)
    return line


def turn_elements(card: CardView) -> list[dict[str, Any]]:
    """A turn's card: each call listed, Approve <n> for each pending one, Approve all, and one reject
    form (a reason, Reject <n> for each pending call, Reject all). "All" is the pending calls listed,
    signed into the buttons' value (`shown`), so a call that joins the turn later stays pending."""
    lines = [_item_line(n, item) for n, item in enumerate(card.items[:MAX_TURN_ITEMS], start=1)]
    if len(card.items) > MAX_TURN_ITEMS:
        lines.append(f"… {len(card.items) - MAX_TURN_ITEMS} more on the approval page")
    head = (
        f"{risk_line(card_risk(card))}\n"
        f"**Agent:** {safe_text(card.agent, SHORT_LIMIT)}\n"
        f"**End user:** {mention(card.user_id) if card.user_id else '(unknown)'}\n"
        f"**Calls of one turn:**"
    )
    # The deadline and who may decide while anything is pending; each call's outcome is on its own line.
    status = _status_lines(dataclasses.replace(card, status="pending", approved_args=None)) if card.pending_items else []
    markdown = "\n".join([head, *lines, *status, f"[Open the approval page]({card.url})"])
    elements: list[dict[str, Any]] = [{"tag": "markdown", "content": markdown}]
    numbered = [(n, item) for n, item in enumerate(card.items[:MAX_TURN_ITEMS], start=1) if item.is_pending]
    if not numbered:
        return elements
    approves = [
        {"tag": "button", "name": f"approve_{n}", "type": "default", "text": _plain(f"Approve {n}"),
         "behaviors": _callback("approve", item.confirmation_id)}
        for n, item in numbered
    ]  # fmt: skip
    rejects = [
        {"tag": "button", "name": f"reject_{n}", "type": "danger", "text": _plain(f"Reject {n}"),
         "form_action_type": "submit", "behaviors": _callback("reject", item.confirmation_id)}
        for n, item in numbered
    ]  # fmt: skip
    offered = card.offered_ids(MAX_TURN_ITEMS)
    if len(offered) > 1:
        # The value carries the calls listed here, signed: the click decides these and no call that
        # joins the turn later (`Callback.shown_ids`).
        shown = sign_shown_ids(card.confirmation_id, offered)
        which = f"all {len(offered)}" if len(offered) == len(card.pending_items) else f"the {len(offered)} listed"
        approves.append(
            {"tag": "button", "name": "approve_all", "type": "primary", "text": _plain(f"Approve {which}"),
             "behaviors": _callback("approve", card.confirmation_id, turn=True, shown=shown)}
        )  # fmt: skip
        rejects.append(
            {"tag": "button", "name": "reject_all", "type": "danger", "text": _plain(f"Reject {which}"),
             "form_action_type": "submit",
             "behaviors": _callback("reject", card.confirmation_id, turn=True, shown=shown)}
        )  # fmt: skip
    reason = {"tag": "input", "name": REASON_INPUT_NAME, "placeholder": _plain("Reason for rejecting"),
              "max_length": REASON_MAX_LENGTH, "width": "fill"}  # fmt: skip
    elements.extend(approves)
    elements.append({"tag": "form", "name": REJECT_FORM_NAME, "elements": [reason, *rejects]})
    return elements


def render_card(card: CardView) -> dict[str, Any]:
    """The whole card JSON 2.0 for `card`: buttons while pending, an outcome line after."""
    if card.items:
        pending = len(card.pending_items)
        title = f"Approval needed: {pending} of {len(card.items)} calls" if pending else "Calls of one turn"
        subject = cut(f"{card.agent} · one turn", SHORT_LIMIT)
        return card_frame(title, subject, "orange" if pending else "grey", turn_elements(card), risk=card_risk(card))
    title = _TITLES.get(card.status, card.status.capitalize() or "Approval")
    subject = cut(f"{card.agent} · {card.tool_name}", SHORT_LIMIT)
    elements: list[dict[str, Any]] = [{"tag": "markdown", "content": card_markdown(card)}]
    if card.is_pending:
        approve, reject_form = action_elements(card.confirmation_id)
        elements.extend([approve, *scope_buttons(card)])
        if card.editable_paths:
            elements.append(edit_form(card))
        elements.append(reject_form)
    return card_frame(title, subject, _TEMPLATES.get(card.status, "grey"), elements, risk=card.risk)


def card_frame(
    title: str, subject: str, template: str, elements: list[dict[str, Any]], *, risk: str | None = None
) -> dict[str, Any]:
    """The card around `elements`; with a `risk` (an approval's card, not a question's) its tag beside the
    title, and a high risk said first in the summary a notification shows."""
    header: dict[str, Any] = {"title": _plain(title), "subtitle": _plain(subject), "template": template}
    summary = f"{title}: {subject}"
    if risk is not None:
        header["text_tag_list"] = [risk_tag(risk)]
        summary = f"🔴 High risk · {summary}" if is_high(risk) else summary
    return {
        "schema": "2.0",
        # update_multi: one shared card that every reader sees redrawn when it is patched.
        "config": {"update_multi": True, "summary": {"content": cut(summary, SHORT_LIMIT)}},
        "header": header,
        "body": {"elements": elements},
    }
