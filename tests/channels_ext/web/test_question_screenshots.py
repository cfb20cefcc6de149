"""A question answered on its web page in headless Chromium, and screenshots for docs/asking.md: the web form,
the answered page, and the Slack modal and Feishu card drawn from the JSON the gateway sends (a plain
rendering of that JSON's inputs and texts, in the vendors' layout — not their own clients).

Written to a temporary folder on every run; to refresh the committed ones:

    GATEWAY_SCREENSHOT_DIR=docs/screenshots .venv/bin/pytest tests/channels_ext/web/test_question_screenshots.py
"""

from __future__ import annotations

import dataclasses
import html
import os
from pathlib import Path
from typing import Any

import pytest

from approvals import selectors
from approvals.models import ConfirmationRequest
from channels_ext.feishu.question_cards import render_question
from channels_ext.slack.question_cards import answer_modal
from tests.channels_ext.web.conftest import sign_in_from_the_link

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

ORDER = {
    "type": "object",
    "properties": {
        "vendor": {"type": "string", "enum": ["Acme", "Globex", "Initech"], "title": "Vendor"},
        "budget": {"type": "integer", "minimum": 1, "maximum": 50000, "title": "Budget (EUR)"},
        "tags": {"type": "array", "items": {"type": "string", "enum": ["hardware", "software", "services"]},
                 "title": "Categories"},
        "urgent": {"type": "boolean", "title": "Urgent"},
        "note": {"type": "string", "maxLength": 300, "title": "Note for the buyer"},
    },
    "required": ["vendor", "budget"],
}  # fmt: skip
QUESTION = "20 laptops for the new Berlin team: which vendor, and what budget?"

STYLE = """
body{font-family:-apple-system,Segoe UI,Helvetica,Arial,sans-serif;background:#f4f4f5;margin:0;padding:24px}
.frame{background:#fff;border-radius:10px;box-shadow:0 4px 18px rgba(0,0,0,.15);width:520px;margin:auto;overflow:hidden}
.top{padding:14px 18px;font-weight:700;font-size:18px;border-bottom:1px solid #ddd;display:flex;justify-content:space-between}
.body{padding:14px 18px}.blk{margin:12px 0}.label{font-weight:700;margin-bottom:6px}.hint{color:#666;font-size:13px}
.input{border:1px solid #aaa;border-radius:5px;padding:8px;color:#888;min-height:18px}
.opt{margin:4px 0}.btn{display:inline-block;border:1px solid #bbb;border-radius:5px;padding:6px 14px;margin:4px 6px 0 0}
.primary{background:#007a5a;color:#fff;border-color:#007a5a}.foot{padding:12px 18px;border-top:1px solid #ddd;text-align:right}
.header-orange{background:#ff8800;color:#fff}.md{white-space:pre-wrap;line-height:1.45}
"""


def e(text: Any) -> str:
    return html.escape(str(text))


def slack_modal_html(view: dict[str, Any]) -> str:
    """A Slack modal's Block Kit (title, section, input blocks, submit / close) as a page."""
    parts = []
    for block in view["blocks"]:
        if block["type"] == "section":
            parts.append(f'<div class="blk md">{e(block["text"]["text"].strip("*"))}</div>')
            continue
        element = block["element"]
        label = e(block["label"]["text"]) + (' <span class="hint">(optional)</span>' if block.get("optional") else "")
        kind = element["type"]
        if kind in ("checkboxes", "radio_buttons"):
            mark = "☐" if kind == "checkboxes" else "◯"
            inner = "".join(f'<div class="opt">{mark} {e(o["text"]["text"])}</div>' for o in element["options"])
        elif kind == "static_select":
            inner = f'<div class="input">{e(element["placeholder"]["text"])} ▾</div>'
        else:
            inner = '<div class="input"></div>'
        hint = f'<div class="hint">{e(block["hint"]["text"])}</div>' if block.get("hint") else ""
        parts.append(f'<div class="blk"><div class="label">{label}</div>{inner}{hint}</div>')
    return (
        f'<html><head><style>{STYLE}</style></head><body><div class="frame"><div class="top">{e(view["title"]["text"])}'
        f'<span>✕</span></div><div class="body">{"".join(parts)}</div><div class="foot"><span class="btn">'
        f'{e(view["close"]["text"])}</span><span class="btn primary">{e(view["submit"]["text"])}</span></div></div></body></html>'
    )


def feishu_card_html(card: dict[str, Any]) -> str:
    """A Feishu card JSON 2.0 (header, markdown, form with select / input / checker, buttons) as a page."""

    def element_html(el: dict[str, Any]) -> str:
        tag = el["tag"]
        if tag == "markdown":
            text = el["content"].replace("**", "")
            return f'<div class="blk md">{e(text)}</div>'
        if tag == "form":
            return "".join(element_html(child) for child in el["elements"])
        if tag in ("select_static", "multi_select_static"):
            return f'<div class="blk"><div class="input">{e(el["placeholder"]["content"])} ▾</div></div>'
        if tag == "input":
            label = e(el.get("label", {}).get("content", ""))
            hint = e(el.get("placeholder", {}).get("content", ""))
            return f'<div class="blk"><div class="label">{label}</div><div class="input">{hint}</div></div>'
        if tag == "checker":
            return f'<div class="blk opt">☐ {e(el["text"]["content"])}</div>'
        if tag == "button":
            style = "btn primary" if el.get("type") == "primary" else "btn"
            return f'<span class="{style}">{e(el["text"]["content"])}</span>'
        return ""

    header = card["header"]
    body = "".join(element_html(el) for el in card["body"]["elements"])
    return (
        f'<html><head><style>{STYLE}</style></head><body><div class="frame"><div class="top header-orange">'
        f'{e(header["title"]["content"])}<span style="font-weight:400;font-size:14px">{e(header["subtitle"]["content"])}'
        f'</span></div><div class="body">{body}</div></div></body></html>'
    )


def test_a_form_question_is_answered_in_the_browser_and_its_cards_are_drawn(agent, people, public_url, new_page, tmp_path):
    from playwright.sync_api import expect

    folder = Path(os.environ.get("GATEWAY_SCREENSHOT_DIR") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    body = {"question": QUESTION, "answer_schema": ORDER, "channel": "web", "approvers": ["alice"],
            "user_id": "u-42", "session_id": "s-4e8b", "default_answer": {"vendor": "Acme", "budget": 20000}}  # fmt: skip
    asked = agent.http.post("/api/v1/questions", json=body).json()

    page = new_page()
    sign_in_from_the_link(page, asked["url"], "alice")
    expect(page.locator("#question-text")).to_have_text(QUESTION)
    page.screenshot(path=folder / "question-page.png", full_page=True)

    page.get_by_label("Globex").check()
    page.locator('input[name="answer.budget"]').fill("60000")  # over the maximum: refused, the form kept
    page.get_by_label("hardware").check()
    page.get_by_role("button", name="Send answer").click()
    expect(page.locator("#answer-error")).to_contain_text("60000 is greater than the maximum of 50000")
    assert ConfirmationRequest.objects.get(pk=asked["id"]).status == "pending"
    page.locator('input[name="answer.budget"]').fill("24000")
    page.get_by_label("Yes").check()
    page.get_by_role("button", name="Send answer").click()
    expect(page.locator("#decision-text")).to_contain_text("Answered by web:alice")
    expect(page.locator("#answer")).to_contain_text("Vendor: Globex · Budget (EUR): 24000 · Categories: hardware")
    page.screenshot(path=folder / "question-page-answered.png", full_page=True)
    answered = agent.http.get(f"/api/v1/questions/{asked['id']}").json()
    assert answered["answer"] == {"vendor": "Globex", "budget": 24000, "tags": ["hardware"], "urgent": True}

    # The Slack modal and the Feishu card, drawn from the JSON the gateway sends for this question.
    card = selectors.card_view(ConfirmationRequest.objects.get(pk=asked["id"]))
    pending = dataclasses.replace(card, status="pending", answer=None)
    drawn = new_page()
    drawn.set_viewport_size({"width": 620, "height": 900})
    drawn.set_content(slack_modal_html(answer_modal(pending, private_metadata="{}")))
    drawn.screenshot(path=folder / "question-slack-modal.png", full_page=True)
    drawn.set_content(feishu_card_html(render_question(pending)))
    drawn.screenshot(path=folder / "question-feishu-card.png", full_page=True)

    for name in ("question-page", "question-page-answered", "question-slack-modal", "question-feishu-card"):
        assert (folder / f"{name}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
