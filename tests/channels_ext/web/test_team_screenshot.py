"""A team member signs in through the identity provider in headless Chromium and sees only their team's
requests: docs/screenshots/inbox-team-member.png (docs/approving.md, "Teams").

Written to a temporary folder on every run; to refresh the committed one:

    GATEWAY_SCREENSHOT_DIR=docs/screenshots .venv/bin/pytest tests/channels_ext/web/test_team_screenshot.py
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.oidc.provider import SUBJECTS

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_a_team_member_signed_in_through_the_provider_sees_only_their_teams_inbox(
    idp, teams, new_page, live_gateway, tmp_path
):
    from playwright.sync_api import expect

    folder = Path(os.environ.get("GATEWAY_SCREENSHOT_DIR") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    purchasing, lab = teams["purchasing"], teams["lab"]
    purchasing.pre_tool_use("oa__purchase_refund", {"order": "SO-88412", "amount": 310, "currency": "EUR"},
                            user_id="u-42", session_id="s-4e8b")  # fmt: skip
    purchasing.pre_tool_use("oa__vendor_add", {"vendor": "Globex GmbH", "iban": "DE44 5001 0517 5407 3249 31"},
                            user_id="u-17", session_id="s-91c2")  # fmt: skip
    lab.pre_tool_use("lab__dispose", {"batch": "B-2291"})

    page = new_page()
    page.goto(f"{live_gateway.url}/approvals/")
    page.get_by_role("link", name="Sign in with Example Corp SSO").click()
    page.locator("input[name=login]").fill(SUBJECTS["dana"])  # the provider's own login form
    page.locator("input[name=password]").fill("any password")
    page.locator("button[type=submit]").click()
    if "/interaction/" in page.url:  # its consent form
        page.locator("button[type=submit]").click()
    page.wait_for_url(f"{live_gateway.url}/approvals/")

    expect(page.locator(".who")).to_have_text("dana")
    expect(page.locator("#teams")).to_have_text("Requests of your team: payments")
    body = page.locator("main").inner_text()
    assert "oa__purchase_pay" in body and "oa__vendor_add" in body and "oa__purchase_refund" in body
    assert "lab__" not in body  # the research team's requests are not hers
    page.screenshot(path=folder / "inbox-team-member.png", full_page=True)
    assert (folder / "inbox-team-member.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
