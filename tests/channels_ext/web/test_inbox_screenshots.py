"""The triage inbox in headless Chromium, grouped by risk with a keyboard session under way, on a desktop
and on a phone: docs/screenshots/inbox-triage.png and inbox-phone.png (docs/approving.md, "The inbox").

Written to a temporary folder on every run; to refresh the committed ones:

    GATEWAY_SCREENSHOT_DIR=docs/screenshots .venv/bin/pytest tests/channels_ext/web/test_inbox_screenshots.py
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.channels_ext.web.test_inbox_keyboard import sign_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

CALLS = [
    ("billing-bot", "pay", {"amount": 12500, "vendor": "Globex GmbH", "iban": "DE44 5001 0517 5407 3249 31"}),
    ("deploy-bot", "rollback", {"amount": 4200, "service": "checkout", "to": "v2.31.4", "reason": "p95 latency"}),
    ("billing-bot", "refund", {"amount": 310, "order": "SO-88412", "currency": "EUR"}),
    ("deploy-bot", "ship", {"amount": 640, "service": "search", "version": "v5.2.0", "canary": True}),
    ("billing-bot", "pay", {"amount": 45, "vendor": "ACME Office Supplies", "memo": "toner, A4 paper"}),
    ("deploy-bot", "ship", {"amount": 12, "service": "docs", "version": "v1.9.3"}),
]


def test_it_takes_screenshots_of_the_triage_inbox(bots, public_url, browser, tmp_path):
    from playwright.sync_api import expect

    folder = Path(os.environ.get("GATEWAY_SCREENSHOT_DIR") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    for agent, tool, args in CALLS:
        assert bots[agent].pre_tool_use(tool, args, user_id="u-42").json()["decision"] == "pending"

    for name, viewport in (("inbox-triage.png", {"width": 1100, "height": 760}), ("inbox-phone.png", {"width": 390, "height": 844})):
        context = browser.new_context(viewport=viewport, device_scale_factor=1)
        try:
            page = context.new_page()
            sign_in(page, public_url)
            page.goto(f"{public_url}/approvals/?group=risk")
            for key in ("j", "j", "x"):
                page.keyboard.press(key)
            expect(page.locator("#kbd-status")).to_have_text("1 selected")
            page.evaluate("() => window.scrollTo(0, 0)")
            page.screenshot(path=folder / name)
            assert (folder / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        finally:
            context.close()
