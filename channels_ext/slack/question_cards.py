"""Block Kit for a question's card and its answer modal (docs/asking.md).

A question that is one choice of a few (or yes / no) is answered with a button per option; one
choice of many with a select menu on the card; text, numbers, several choices and forms in a modal
(`views.open` with the click's `trigger_id`), one input block per field. Every button, option and
the modal carry the question's signed id. What a person picks or types is read back by
`answer_inputs` into the inputs `gateway_contract.answers.answer_from_inputs` turns into the answer, which
the gateway then checks against the question's schema. Pure functions, no I/O.
"""

from __future__ import annotations

from typing import Any

from gateway_contract import answers
from gateway_contract import CallbackError, CardView, sign_confirmation_id
from channels_ext.slack.cards import (
    FIELD_TEXT_LIMIT,
    HEADER_TEXT_LIMIT,
    SECTION_TEXT_LIMIT,
    SHORT_LIMIT,
    cut,
    escape,
    slack_date,
    slack_relative,
    user_label,
)

QUESTION_ACTIONS_BLOCK_ID = "question_actions"
OPTION_ACTION_PREFIX = "answer_option_"  # + the option's index (a button per option)
SELECT_ACTION_ID = "answer_select"  # a select menu of the options; each option's value: "<index>|<signed id>"
OPEN_ACTION_ID = "answer_open"  # opens the answer modal
MAX_BUTTONS = 5  # more options than this: a select menu
MAX_CHECKBOXES = 10  # Slack's checkboxes element holds 10 options; more: a multi-select menu
MODAL_CALLBACK_ID = "answer_question"
FIELD_BLOCK_PREFIX = "answer_"  # + the field's position
FIELD_ACTION_ID = "value"
YES, NO = "yes", "no"


def _plain(text: str) -> dict[str, Any]:
    return {"type": "plain_text", "text": text, "emoji": True}


def _option(text: str, value: str) -> dict[str, Any]:
    return {"text": _plain(cut(text, 75)), "value": value}


def answered_line(card: CardView) -> str:
    """How the question ended: "✅ Answered by <@U1> at …: *Acme*"."""
    if card.status == "answered":
        shown = escape(cut(answers.answer_text(card.answer, card.answer_schema), 1500))
        line = f"✅ Answered by {user_label(card.decided_by, card.decided_by_name)}"
        if card.decided_at is not None:
            line += f" at {slack_date(card.decided_at)}"
        return f"{line}:\n*{shown}*"
    icon = {"expired": "⌛", "cancelled": "🚫"}.get(card.status, "•")
    line = f"{icon} {escape(card.status.capitalize())}"
    if card.decision_reason:
        line += f" — {escape(cut(card.decision_reason, 500))}"
    return line


def question_fallback_text(card: CardView) -> str:
    subject = f"{escape(cut(card.agent, SHORT_LIMIT))} asks: {escape(cut(card.reason, 500))}"
    return cut(f"Question: {subject}" if card.is_pending else f"{answered_line(card)} — {subject}", 3000)


def question_blocks(card: CardView) -> list[dict[str, Any]]:
    """The message blocks of a question's card: its inputs while pending, the answer and who gave it after."""
    title = "Question answered" if card.status == "answered" else "Question"
    blocks: list[dict[str, Any]] = [{"type": "header", "text": _plain(cut(title, HEADER_TEXT_LIMIT))}]
    if not card.is_pending:
        blocks.append({"type": "section", "text": {"type": "mrkdwn", "text": cut(answered_line(card), SECTION_TEXT_LIMIT)}})
    if card.escalated:
        blocks.append({"type": "section", "text": {"type": "mrkdwn", "text": "⏫ *Escalated:* more people have been asked."}})
    if card.note:
        blocks.append({"type": "section", "text": {"type": "mrkdwn", "text": f"🔔 {escape(card.note)}"}})
    blocks.append({"type": "section", "text": {"type": "mrkdwn", "text": cut(f"*{escape(card.reason)}*", SECTION_TEXT_LIMIT)}})
    fields = [f"*Agent*\n{escape(cut(card.agent, SHORT_LIMIT))}", f"*For*\n{escape(cut(card.user_id, SHORT_LIMIT)) or '—'}"]
    if card.session_id:
        fields.append(f"*Session*\n{escape(cut(card.session_id, SHORT_LIMIT))}")
    blocks.append({"type": "section", "fields": [{"type": "mrkdwn", "text": cut(f, FIELD_TEXT_LIMIT)} for f in fields]})
    details = []
    if card.expires_at is not None:
        when = slack_date(card.expires_at)
        details.append(f"*Expires:* {when} ({slack_relative(card.expires_at)})" if card.is_pending else f"*Expires:* {when}")
    if card.approvers:
        details.append("*Who may answer:* " + ", ".join(user_label(u) for u in card.approvers[:20]))
    details.append(f"<{card.url}|Open in browser>")
    blocks.append({"type": "context", "elements": [{"type": "mrkdwn", "text": cut(" · ".join(details), 3000)}]})
    if card.is_pending:
        blocks.append(question_actions(card))
    return blocks


def question_actions(card: CardView) -> dict[str, Any]:
    """Buttons for a few options (or yes / no), a select menu for many, else an Answer button (modal)."""
    schema = card.answer_schema or {}
    signed = sign_confirmation_id(card.confirmation_id)
    (field,) = answers.fields(schema) if not answers.is_form(schema) else (None,)
    elements: list[dict[str, Any]]
    if field is not None and field.kind == "yesno":
        options = [("Yes", YES), ("No", NO)]
        elements = [
            {"type": "button", "action_id": f"{OPTION_ACTION_PREFIX}{value}", "text": _plain(text), "value": signed}
            for text, value in options
        ]
    elif field is not None and field.kind == "choice" and len(field.options) <= MAX_BUTTONS:
        elements = [
            {"type": "button", "action_id": f"{OPTION_ACTION_PREFIX}{i}", "text": _plain(cut(option, 75)), "value": signed}
            for i, option in enumerate(field.options)
        ]
    elif field is not None and field.kind == "choice":
        elements = [
            {
                "type": "static_select",
                "action_id": SELECT_ACTION_ID,
                "placeholder": _plain("Choose…"),
                "options": [_option(option, f"{i}|{signed}") for i, option in enumerate(field.options[:100])],
            }
        ]
    else:
        elements = [{"type": "button", "action_id": OPEN_ACTION_ID, "text": _plain("Answer…"), "style": "primary",
                     "value": signed}]  # fmt: skip
    return {"type": "actions", "block_id": QUESTION_ACTIONS_BLOCK_ID, "elements": elements}


def clicked_answer(card_schema: dict[str, Any], action_id: str, selected: str | None) -> Any:
    """The answer an option button or the select menu gives (before the gateway checks it)."""
    (field,) = answers.fields(card_schema)
    if action_id == SELECT_ACTION_ID:
        index = (selected or "").partition("|")[0]
    else:
        index = action_id.removeprefix(OPTION_ACTION_PREFIX)
    if field.kind == "yesno":
        return answers.answer_from_inputs(card_schema, {answers.SINGLE_FIELD: index})
    if not index.isdigit() or int(index) >= len(field.options):
        raise CallbackError(400, "the clicked option is not one of the question's")
    return field.options[int(index)]


def selected_question(action_id: str, value: str, selected: str | None) -> str:
    """The signed question id a click carries: the button's value, or the chosen option's."""
    if action_id == SELECT_ACTION_ID:
        return (selected or "").partition("|")[2]
    return value


def is_question_action(action_id: str) -> bool:
    return action_id in (SELECT_ACTION_ID, OPEN_ACTION_ID) or action_id.startswith(OPTION_ACTION_PREFIX)


def _field_element(field: answers.Field, initial: Any = None) -> dict[str, Any]:
    schema = field.schema
    if field.kind == "text":
        element: dict[str, Any] = {"type": "plain_text_input", "action_id": FIELD_ACTION_ID,
                                   "max_length": field.max_length, "multiline": (field.max_length or 0) > 150}  # fmt: skip
        if schema.get("minLength"):
            element["min_length"] = schema["minLength"]
        return element
    if field.kind == "number":
        element = {"type": "number_input", "action_id": FIELD_ACTION_ID, "is_decimal_allowed": not field.integer}
        for key, slack_key in (("minimum", "min_value"), ("maximum", "max_value")):
            if key in schema:
                element[slack_key] = str(schema[key])
        return element
    if field.kind == "choice":
        return {"type": "static_select", "action_id": FIELD_ACTION_ID, "placeholder": _plain("Choose…"),
                "options": [_option(o, o) for o in field.options[:100]]}  # fmt: skip
    if field.kind == "choices":
        kind = "checkboxes" if len(field.options) <= MAX_CHECKBOXES else "multi_static_select"
        element = {"type": kind, "action_id": FIELD_ACTION_ID, "options": [_option(o, o) for o in field.options[:100]]}
        if kind == "multi_static_select":
            element["placeholder"] = _plain("Choose…")
        return element
    return {"type": "radio_buttons", "action_id": FIELD_ACTION_ID, "options": [_option("Yes", YES), _option("No", NO)]}


def answer_modal(card: CardView, *, private_metadata: str) -> dict[str, Any]:
    """The modal that takes a question's answer: one input block per field (submitted as `view_submission`)."""
    blocks: list[dict[str, Any]] = [
        {"type": "section", "text": {"type": "mrkdwn", "text": cut(f"*{escape(card.reason)}*", SECTION_TEXT_LIMIT)}}
    ]
    for number, field in enumerate(answers.fields(card.answer_schema or {})):
        label = field.title or ("Your answer" if field.name == answers.SINGLE_FIELD else field.name)
        block: dict[str, Any] = {
            "type": "input",
            "block_id": f"{FIELD_BLOCK_PREFIX}{number}",
            "label": _plain(cut(label, 2000)),
            "element": _field_element(field),
            "optional": not field.required,
        }
        hint = field.schema.get("description")
        if field.kind == "number" and ("minimum" in field.schema or "maximum" in field.schema):
            bounds = f"from {field.schema.get('minimum', '−∞')} to {field.schema.get('maximum', '∞')}"
            hint = f"{hint} ({bounds})" if hint else bounds
        if hint:
            block["hint"] = _plain(cut(hint, 2000))
        blocks.append(block)
    return {
        "type": "modal",
        "callback_id": MODAL_CALLBACK_ID,
        "title": _plain("Answer"),
        "submit": _plain("Send answer"),
        "close": _plain("Cancel"),
        "private_metadata": private_metadata,
        "blocks": blocks,
    }


def answer_inputs(schema: dict[str, Any], values: dict[str, dict[str, dict[str, Any]]]) -> dict[str, Any]:
    """The modal's submitted state as inputs per field name (`answers.answer_from_inputs` reads them)."""
    inputs: dict[str, Any] = {}
    for number, field in enumerate(answers.fields(schema)):
        state = values.get(f"{FIELD_BLOCK_PREFIX}{number}", {}).get(FIELD_ACTION_ID)
        if not isinstance(state, dict):
            continue
        if "selected_options" in state:
            chosen = state["selected_options"] or []
            inputs[field.name] = [o.get("value") for o in chosen if isinstance(o, dict)]
        elif "selected_option" in state:
            option = state["selected_option"]
            inputs[field.name] = option.get("value") if isinstance(option, dict) else None
        else:
            inputs[field.name] = state.get("value")
    return inputs


def first_block_id() -> str:
    return f"{FIELD_BLOCK_PREFIX}0"
