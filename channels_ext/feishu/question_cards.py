"""Feishu/Lark card JSON 2.0 for a question (docs/asking.md).

One choice of a few (or yes / no) is a button per option, each carrying its answer; anything else is
a form container with one component per field — `select_static` for a choice, `multi_select_static`
for several, `checker` for yes / no, `input` for text and numbers — and a submit button. Feishu sends
the form's inputs in `action.form_value`, keyed by component name (`a_<field>`); the gateway reads
them with the question's schema (`Callback.answer_inputs`) and checks the answer. Pure, no I/O.
https://open.feishu.cn/document/feishu-cards/card-json-v2-components/containers/form-container
"""

from __future__ import annotations

from typing import Any

from gateway_contract import answers
from gateway_contract import CardView, sign_confirmation_id
from channels_ext.cardkit import cut
from channels_ext.cardkit import utc_text as format_time
from channels_ext.feishu.cards import REASON_LIMIT, SHORT_LIMIT, card_frame, mention, time_left
from channels_ext.feishu.cards import safe_text as safe

ANSWER_FORM_NAME = "answer_form"
ANSWER_BUTTON_NAME = "send_answer"
OPTION_BUTTON_PREFIX = "answer_option_"
INPUT_PREFIX = "a_"  # + the field's name: what `form_value` is keyed by
MAX_BUTTONS = 5
_TEMPLATES = {"pending": "orange", "answered": "green", "expired": "grey", "cancelled": "grey"}


def _plain(text: str) -> dict[str, str]:
    return {"tag": "plain_text", "content": text}


def _answer_value(confirmation_id: str, **more: Any) -> list[dict[str, Any]]:
    return [{"type": "callback", "value": {"decision": "answer", "confirmation_id": sign_confirmation_id(confirmation_id),
                                           **more}}]  # fmt: skip


def outcome_line(card: CardView) -> str:
    if card.status == "answered":
        shown = safe(answers.answer_text(card.answer, card.answer_schema), REASON_LIMIT)
        when = f" at {format_time(card.decided_at)}" if card.decided_at else ""
        return f"✅ **Answered** by {mention(card.decided_by.partition(':')[2] or card.decided_by, card.decided_by_name)}{when}: **{shown}**"
    icon = {"expired": "⌛", "cancelled": "🚫"}.get(card.status, "•")
    why = f" — {safe(card.decision_reason, REASON_LIMIT)}" if card.decision_reason else ""
    return f"{icon} **{card.status.capitalize()}**{why}"


def question_markdown(card: CardView) -> str:
    lines = [f"**{safe(card.reason, 2000)}**", f"**Agent:** {safe(card.agent, SHORT_LIMIT)}"]
    if card.user_id:
        lines.append(f"**For:** {mention(card.user_id)}")
    if card.is_pending and card.expires_at is not None:
        lines.append(f"**Expires:** {format_time(card.expires_at)} ({time_left(card.expires_at)})")
    if card.is_pending and card.approvers:
        lines.append("**Who may answer:** " + " ".join(mention(who) for who in card.approvers))
    if card.escalated:
        lines.append("⏫ **Escalated:** more people have been asked.")
    if card.note:
        lines.append(f"🔔 {safe(card.note, REASON_LIMIT)}")
    if not card.is_pending:
        lines.append(outcome_line(card))
    lines.append(f"[Open the question's page]({card.url})")
    return "\n".join(lines)


def _component(field: answers.Field) -> dict[str, Any]:
    name = f"{INPUT_PREFIX}{field.name}"
    label = _plain(cut(field.title or "Your answer", 100))
    if field.kind in ("choice", "choices"):
        tag = "select_static" if field.kind == "choice" else "multi_select_static"
        return {"tag": tag, "name": name, "placeholder": _plain(cut(field.title or "Choose…", 100)), "width": "fill",
                "required": field.required, "options": [{"text": _plain(cut(o, 100)), "value": o} for o in field.options]}  # fmt: skip
    if field.kind == "yesno":
        return {"tag": "checker", "name": name, "checked": False, "text": {"tag": "plain_text", "content": cut(field.title or "Yes", 100)}}
    component: dict[str, Any] = {"tag": "input", "name": name, "label": label, "width": "fill", "required": field.required}
    if field.kind == "text":
        component["max_length"] = field.max_length
        if (field.max_length or 0) > 150:
            component["input_type"] = "multiline_text"
    else:
        bounds = [f"≥ {field.schema['minimum']}" if "minimum" in field.schema else "",
                  f"≤ {field.schema['maximum']}" if "maximum" in field.schema else ""]  # fmt: skip
        component["placeholder"] = _plain(" ".join(b for b in bounds if b) or "a number")
    return component


def question_elements(card: CardView) -> list[dict[str, Any]]:
    """Buttons for a few options (or yes / no); otherwise a form with one component per field."""
    schema = card.answer_schema or {}
    fields = answers.fields(schema)
    single = fields[0] if not answers.is_form(schema) else None
    if single is not None and single.kind == "yesno":
        return [
            {"tag": "button", "name": f"{OPTION_BUTTON_PREFIX}{n}", "type": "primary" if value else "default",
             "text": _plain(text), "behaviors": _answer_value(card.confirmation_id, answer=value)}
            for n, (text, value) in enumerate((("Yes", True), ("No", False)))
        ]  # fmt: skip
    if single is not None and single.kind == "choice" and len(single.options) <= MAX_BUTTONS:
        return [
            {"tag": "button", "name": f"{OPTION_BUTTON_PREFIX}{n}", "type": "default", "text": _plain(cut(option, 60)),
             "behaviors": _answer_value(card.confirmation_id, answer=option)}
            for n, option in enumerate(single.options)
        ]  # fmt: skip
    submit = {
        "tag": "button",
        "name": ANSWER_BUTTON_NAME,
        "type": "primary",
        "text": _plain("Send answer"),
        "form_action_type": "submit",
        "behaviors": _answer_value(card.confirmation_id, form=True),
    }
    return [{"tag": "form", "name": ANSWER_FORM_NAME, "elements": [*(_component(f) for f in fields), submit]}]


def render_question(card: CardView) -> dict[str, Any]:
    """The whole card for a question: its inputs while pending, the answer and who gave it after."""
    title = {"pending": "Question", "answered": "Question answered"}.get(card.status, f"Question {card.status}")
    elements: list[dict[str, Any]] = [{"tag": "markdown", "content": question_markdown(card)}]
    if card.is_pending:
        elements.extend(question_elements(card))
    return card_frame(title, cut(f"{card.agent} asks", SHORT_LIMIT), _TEMPLATES.get(card.status, "grey"), elements)


def form_inputs(form_value: dict[str, Any]) -> dict[str, Any]:
    """`action.form_value` as inputs per field name (the gateway reads them with the question's schema)."""
    return {key[len(INPUT_PREFIX):]: value for key, value in form_value.items() if key.startswith(INPUT_PREFIX)}
