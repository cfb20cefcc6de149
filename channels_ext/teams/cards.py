"""Adaptive Cards (Universal Actions) for one confirmation request on Microsoft Teams.

Pure functions from a `CardView` to Adaptive Card JSON: no I/O. Every button is
an `Action.Execute` (https://learn.microsoft.com/microsoftteams/platform/task-modules-and-cards/cards/universal-actions-for-adaptive-cards/overview):
a click reaches the bot as an `invoke` activity named `adaptiveCard/action`
carrying the button's `verb` and its `data`, with the values of the card's
inputs merged into that data; the bot answers the invoke with the refreshed card,
which Teams shows the clicker at once, and the worker's redraw (PUT of the
activity) shows it to everyone.

Text from an agent or a user goes into `TextRun`s, which Teams never reads as
markdown: a tool argument cannot dress up a link or mention anyone.
"""

from __future__ import annotations

import json
import re
from typing import Any

from gateway_contract import CardItem, CardView, actor_label, argument_value, sign_confirmation_id, sign_shown_ids
from channels_ext.cardkit import OUTCOME_ICONS as _OUTCOME_ICONS
from channels_ext.cardkit import STATUS_TITLES as _TITLES
from channels_ext.cardkit import RISK_ICONS, card_risk, cut, is_high, outcome_sentence, risk_word, utc_text, value_text
from channels_ext.cardkit import waiting_line

ADAPTIVE_CARD_CONTENT_TYPE = "application/vnd.microsoft.card.adaptive"
CARD_VERSION = "1.4"  # Universal Actions need 1.4; Teams renders up to 1.5

APPROVE_VERB = "approve"
REJECT_VERB = "reject"
EDIT_VERB = "approve_edited"
GRANT_VERB_PREFIX = "approve_grant_"  # + the index of the offered scope
APPROVE_ALL_VERB = "approve_all"  # every pending call a turn's card showed
REJECT_ALL_VERB = "reject_all"
VERBS = frozenset({APPROVE_VERB, REJECT_VERB, EDIT_VERB, APPROVE_ALL_VERB, REJECT_ALL_VERB})

REASON_INPUT_ID = "reason"
REASON_MAX_LENGTH = 1000
EDIT_INPUT_PREFIX = "arg_"  # + the path's position in the request's editable paths
EDIT_VALUE_LIMIT = 2000
MAX_EDIT_FIELDS = 10
MAX_TURN_ITEMS = 15

ARG_VALUE_LIMIT = 300  # one argument's rendered value
SHORT_LIMIT = 200  # agent, tool, user, session and hook names
REASON_LIMIT = 1000

# TextBlock colours: https://adaptivecards.io/explorer/TextBlock.html
_WHITESPACE = re.compile(r"\s+")
_COLOURS = {"pending": "Warning", "approved": "Good", "rejected": "Attention", "expired": "Default", "cancelled": "Default"}
_RISK_COLOURS = {"low": "Good", "medium": "Warning", "high": "Attention"}


def _run(text: str, *, bold: bool = False, limit: int = REASON_LIMIT, colour: str = "") -> dict[str, Any]:
    # Newlines and runs of spaces become one space (a value stays on its line); the edges are kept.
    run: dict[str, Any] = {"type": "TextRun", "text": cut(_WHITESPACE.sub(" ", text), limit)}
    if bold:
        run["weight"] = "Bolder"
    if colour:
        run["color"] = colour
    return run


def line(*runs: dict[str, Any], element_id: str | None = None) -> dict[str, Any]:
    """One paragraph of TextRuns (no markdown is read in them)."""
    block: dict[str, Any] = {"type": "RichTextBlock", "inlines": list(runs)}
    if element_id:
        block["id"] = element_id
    return block


def labelled(label: str, value: str, *, limit: int = REASON_LIMIT) -> dict[str, Any]:
    """ "Label: value", the label bold."""
    return line(_run(f"{label}: ", bold=True), _run(value, limit=limit))


def _argument_lines(tool_args: dict[str, Any]) -> list[dict[str, Any]]:
    if not tool_args:
        return [line(_run("(no arguments)"))]
    return [
        line(_run(f"{cut(str(key), SHORT_LIMIT)} = ", bold=True), _run(value_text(value), limit=ARG_VALUE_LIMIT))
        for key, value in tool_args.items()
    ]


def risk_element(risk: str) -> dict[str, Any]:
    """ "🔴 Risk: high", coloured by the risk (high: Attention, red; medium: Warning; low: Good), bold when high."""
    word = risk_word(risk)
    return line(
        _run(f"{RISK_ICONS[word]} "),
        _run(f"Risk: {word}", bold=is_high(word), colour=_RISK_COLOURS[word]),
        element_id="risk",
    )


def outcome_text(card: CardView) -> str:
    """How a decided request ended: "✅ Approved by alice (teams:…) at 2026-… UTC — reason"."""
    return outcome_sentence(card, person=actor_label)


def _status_elements(card: CardView) -> list[dict[str, Any]]:
    elements: list[dict[str, Any]] = []
    if card.is_pending or card.pending_items:
        if card.expires_at is not None:
            elements.append(labelled("Expires", utc_text(card.expires_at)))
        if card.approvers:
            elements.append(labelled("Approvers", ", ".join(card.approvers[:20]), limit=SHORT_LIMIT * 4))
        if card.approvals_required > 1:
            progress = f"{len(card.approved_by)} of {card.approvals_required}"
            if card.approved_by:
                progress += " — " + ", ".join(card.approved_by)
            elements.append(labelled("Approvals", progress))
        if waiting := waiting_line(card, person=actor_label):
            elements.append(labelled("Waiting for", waiting, limit=SHORT_LIMIT * 4))
    if card.escalated:
        elements.append(line(_run("⏫ Escalated: ", bold=True), _run("this request was passed on to further approvers.")))
    if card.note:
        elements.append(line(_run(f"🔔 {card.note}")))
    if not card.is_pending and not card.items:
        elements.append(line(_run(outcome_text(card), bold=True, limit=REASON_LIMIT + 400), element_id="outcome"))
    return elements


def _execute(title: str, verb: str, data: dict[str, Any], *, style: str | None = None) -> dict[str, Any]:
    # Buttons carry the verb and a signed id (and which scope, edit or turn), nothing else.
    action: dict[str, Any] = {"type": "Action.Execute", "title": title, "verb": verb, "data": data}
    if style:
        action["style"] = style
    return action


def _reason_input() -> dict[str, Any]:
    return {
        "type": "Input.Text",
        "id": REASON_INPUT_ID,
        "placeholder": "Reason for rejecting (the agent is told)",
        "isMultiline": True,
        "maxLength": REASON_MAX_LENGTH,
    }


def _edit_card(card: CardView, signed: str) -> dict[str, Any]:
    """The form behind "Edit, then approve…": one input per editable argument (its value as JSON)."""
    paths = list(card.editable_paths[:MAX_EDIT_FIELDS])
    inputs = []
    for number, path in enumerate(paths):
        current = json.dumps(argument_value(card.tool_args, path), ensure_ascii=False)
        field: dict[str, Any] = {
            "type": "Input.Text",
            "id": f"{EDIT_INPUT_PREFIX}{number}",
            "label": cut(path, SHORT_LIMIT),
            "maxLength": EDIT_VALUE_LIMIT,
        }
        if len(current) <= EDIT_VALUE_LIMIT:
            field["value"] = current
        inputs.append(field)
    body = [line(_run("Each value is JSON (text needs quotes). Approve runs the call with these values.")), *inputs]
    submit = _execute("Approve with these values", EDIT_VERB, {"confirmation_id": signed, "edit": paths}, style="positive")
    return {"type": "AdaptiveCard", "body": body, "actions": [submit]}


def actions(card: CardView) -> list[dict[str, Any]]:
    """Approve, a button per offered scope, edit (where the gate allows it), and reject with a reason."""
    signed = sign_confirmation_id(card.confirmation_id)
    buttons = [_execute("Approve", APPROVE_VERB, {"confirmation_id": signed}, style="positive")]
    buttons += [
        _execute(cut(f"Approve {label}", 60), f"{GRANT_VERB_PREFIX}{number}", {"confirmation_id": signed, "grant": number})
        for number, label in enumerate(card.grant_options)
    ]
    if card.editable_paths:
        buttons.append({"type": "Action.ShowCard", "title": "Edit, then approve…", "card": _edit_card(card, signed)})
    reject = _execute("Reject", REJECT_VERB, {"confirmation_id": signed}, style="destructive")
    buttons.append(
        {"type": "Action.ShowCard", "title": "Reject…", "card": {"type": "AdaptiveCard", "body": [_reason_input()], "actions": [reject]}}
    )
    return buttons


def _item_elements(number: int, item: CardItem) -> list[dict[str, Any]]:
    args = "; ".join(f"{key} = {cut(value_text(value), ARG_VALUE_LIMIT)}" for key, value in item.tool_args.items())
    risk = risk_word(item.risk)
    runs = [
        _run(f"{number}. {RISK_ICONS[risk]} {cut(item.tool_name, SHORT_LIMIT)} ", bold=True),
        _run(f"({risk} risk)", bold=is_high(risk), colour=_RISK_COLOURS[risk]),
        _run(" — ", bold=True),
        _run(args or "(no arguments)"),
    ]
    if not item.is_pending:
        outcome = f" → {_OUTCOME_ICONS.get(item.status, 'ℹ️')} {item.status}"
        if item.edited:
            outcome += " (edited)"
        if item.decided_by and item.status != "expired":
            outcome += f" by {actor_label(item.decided_by, item.decided_by_name)}"
        runs.append(_run(outcome, limit=SHORT_LIMIT * 2))
    elements: list[dict[str, Any]] = [line(*runs)]
    if item.is_pending:
        signed = sign_confirmation_id(item.confirmation_id)
        elements.append(
            {
                "type": "ActionSet",
                "actions": [
                    _execute(f"Approve {number}", APPROVE_VERB, {"confirmation_id": signed}),
                    _execute(f"Reject {number}", REJECT_VERB, {"confirmation_id": signed}),
                ],
            }
        )
    return elements


def _turn_body(card: CardView) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """A turn's card: each call with its own Approve / Reject, one reason for any reject, and Approve all /
    Reject all bound to the calls this card shows (`CardView.shown_ids`, signed)."""
    body: list[dict[str, Any]] = [
        labelled("Agent", card.agent, limit=SHORT_LIMIT),
        labelled("End user", card.user_id or "(unknown)", limit=SHORT_LIMIT),
        line(_run("Calls of one turn:", bold=True)),
    ]
    for number, item in enumerate(card.items[:MAX_TURN_ITEMS], start=1):
        body.extend(_item_elements(number, item))
    if len(card.items) > MAX_TURN_ITEMS:
        body.append(line(_run(f"… {len(card.items) - MAX_TURN_ITEMS} more on the approval page")))
    body.extend(_status_elements(card))
    pending = card.pending_items
    if not pending:
        return body, []
    body.append(_reason_input())
    offered = card.offered_ids(MAX_TURN_ITEMS)
    if len(offered) < 2:
        return body, []
    # The buttons carry the calls listed here, signed with the turn's lead: the click decides these
    # and no call that joins the turn later (docs/approving.md).
    data = {
        "confirmation_id": sign_confirmation_id(card.confirmation_id),
        "shown": sign_shown_ids(card.confirmation_id, offered),
    }
    which = f"all {len(offered)}" if len(offered) == len(pending) else f"the {len(offered)} listed"
    return body, [
        _execute(f"Approve {which}", APPROVE_ALL_VERB, data, style="positive"),
        _execute(f"Reject {which}", REJECT_ALL_VERB, data, style="destructive"),
    ]


def render_card(card: CardView, *, told: str = "") -> dict[str, Any]:
    """The whole Adaptive Card for `card`: buttons while pending, the outcome after.

    `told` is a sentence for the one person who clicked (the invoke's answer is shown to them only).
    """
    pending = card.is_pending or bool(card.pending_items)
    if card.items:
        count = len(card.pending_items)
        title = f"Approval needed: {count} of {len(card.items)} calls" if count else "Calls of one turn"
    else:
        title = _TITLES.get(card.status, card.status.capitalize() or "Approval")
    body: list[dict[str, Any]] = [
        {
            "type": "TextBlock",
            "text": title,
            "weight": "Bolder",
            "size": "Medium",
            "wrap": True,
            "color": _COLOURS["pending"] if pending else _COLOURS.get(card.status, "Default") if not card.items else "Default",
        }
    ]
    if told:
        body.append(line(_run(f"ℹ️ {told}"), element_id="told"))
    body.append(risk_element(card_risk(card)))
    if card.items:
        turn_body, turn_actions = _turn_body(card)
        body.extend(turn_body)
        card_actions = turn_actions
    else:
        body.extend(
            [
                labelled("Agent", card.agent, limit=SHORT_LIMIT),
                labelled("Tool", card.tool_name, limit=SHORT_LIMIT),
                labelled("End user", card.user_id or "(unknown)", limit=SHORT_LIMIT),
            ]
        )
        if card.session_id:
            body.append(labelled("Session", card.session_id, limit=SHORT_LIMIT))
        body.append(line(_run("Arguments:", bold=True)))
        body.extend(_argument_lines(card.tool_args))
        if card.edited and card.approved_args is not None:
            body.append(line(_run("Approved arguments (edited by the approver):", bold=True), element_id="approved_args"))
            body.extend(_argument_lines(card.approved_args))
        why = card.reason or "(no reason given)"
        body.append(labelled("Why", f"{why} (hook: {card.hook})" if card.hook else why))
        body.extend(_status_elements(card))
        card_actions = actions(card) if card.is_pending else []
    card_actions.append({"type": "Action.OpenUrl", "title": "Open the approval page", "url": card.url})
    return {
        "type": "AdaptiveCard",
        "$schema": "http://adaptivecards.io/schemas/adaptive-card.json",
        "version": CARD_VERSION,
        "body": body,
        "actions": card_actions,
    }


def fallback_text(card: CardView) -> str:
    """The activity's text: what notifications and clients without cards show (a high risk said first)."""
    subject = f"{cut(card.agent, SHORT_LIMIT)} wants to run {cut(card.tool_name, SHORT_LIMIT)}"
    needed = "🔴 High risk. Approval needed" if is_high(card_risk(card)) else "Approval needed"
    if card.items:
        subject = f"{cut(card.agent, SHORT_LIMIT)} wants to run {len(card.items)} calls of one turn"
        return f"{needed}: {subject}" if card.pending_items else f"Decided: {subject}"
    return f"{needed}: {subject}" if card.is_pending else f"{outcome_text(card)}: {subject}"
