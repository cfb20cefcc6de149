"""Screenshots for docs/web-and-admin.md, taken in the same headless Chromium as the browser tests.

They are written to a temporary folder on every run (so the pages are checked to render);
to refresh the committed ones:

    GATEWAY_SCREENSHOT_DIR=docs/screenshots .venv/bin/pytest tests/channels_ext/web/test_screenshots.py
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from django.contrib.auth.models import User

from approvals import services
from approvals.models import ConfirmationRequest
from tests.channels_ext.web.conftest import PASSWORD, sign_in_from_the_link
from tests.conftest import decide

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

INVOICE = {
    "vendor": "ACME Office Supplies",
    "invoice": "INV-2024-0117",
    "amount": 1250,
    "currency": "EUR",
    "lines": [
        {"item": "Ergonomic chair", "qty": 2, "unit_price": 450},
        {"item": "Standing desk", "qty": 1, "unit_price": 350},
    ],
    "note": "Quarterly furniture order for the Berlin office, approved in principle by the team lead; "
    "pay from the facilities budget.",
}


def a_few_requests(agent) -> str:
    """Requests in every state for the admin list; returns the pending invoice's id."""
    def ask(tool: str, args: dict, user: str, session: str) -> str:
        return agent.pre_tool_use(tool, args, user_id=user, session_id=session).json()["confirmation_id"]

    decide(ask("fs__delete", {"path": "/srv/reports/2023"}, "u-17", "s-7f3a"), "approve", actor="bob")
    decide(ask("oa__purchase_pay", {"amount": 98000, "vendor": "Globex"}, "u-42", "s-91c2"), "reject",
           actor="alice", reason="over the quarterly budget")  # fmt: skip
    cancelled = ask("fs__move", {"from": "/srv/a", "to": "/srv/b"}, "u-17", "s-7f3a")
    services.confirmation_cancel_by_staff(confirmation_id=cancelled, actor="olga", reason="agent run aborted")
    ask("fs__write", {"path": "/srv/notes.txt", "text": "hello"}, "u-08", "s-22d0")
    return ask("oa__purchase_pay", INVOICE, "u-42", "s-4e8b")


def test_it_takes_screenshots_of_the_approval_page_and_the_admin_list(
    agent, people, public_url, new_page, tmp_path
):
    from playwright.sync_api import expect

    folder = Path(os.environ.get("GATEWAY_SCREENSHOT_DIR") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    User.objects.create_superuser("admin", "admin@example.com", PASSWORD)
    invoice = a_few_requests(agent)
    link = agent.http.get(f"/api/v1/confirmations/{invoice}").json()["url"]

    page = new_page()
    sign_in_from_the_link(page, link, "alice")
    page.locator("#arguments details").first.evaluate("el => el.open = true")
    expect(page.locator("#status")).to_have_text("pending")
    page.screenshot(path=folder / "approval-page.png", full_page=True)

    page.fill("#reason", "")
    page.get_by_role("button", name="Approve").click()
    expect(page.locator("#decision-text")).to_contain_text("Approved by web:alice")
    page.screenshot(path=folder / "approval-page-approved.png", full_page=True)

    staff = new_page()
    staff.set_viewport_size({"width": 1600, "height": 800})
    staff.goto(f"{public_url}/admin/login/?next=/admin/approvals/confirmationrequest/")
    staff.fill("#id_username", "admin")
    staff.fill("#id_password", PASSWORD)
    staff.get_by_role("button", name="Log in").click()
    expect(staff.locator("#result_list")).to_be_visible()
    assert staff.locator("#result_list tbody tr").count() == ConfirmationRequest.objects.count() == 5
    staff.screenshot(path=folder / "admin-confirmation-list.png", full_page=True)

    staff.goto(f"{public_url}/admin/approvals/confirmationrequest/{invoice}/change/")
    expect(staff.locator("#content h2", has_text="History")).to_be_visible()
    staff.screenshot(path=folder / "admin-confirmation-detail.png", full_page=True)

    staff.goto(f"{public_url}/admin/approvals/agent/{agent.agent.pk}/change/")
    staff.fill("#id_hooks", "- kind: approval_gate\n  tools: [oa__purchase_pay]\n  channel: web\n  timeout_seconds: 0\n")
    staff.get_by_role("button", name="Save", exact=True).click()
    expect(staff.locator(".errorlist")).to_contain_text("hooks[0].timeout_seconds: must be > 0")
    staff.screenshot(path=folder / "admin-hooks-error.png", full_page=False)

    names = ("approval-page", "approval-page-approved", "admin-confirmation-list", "admin-confirmation-detail",
             "admin-hooks-error")  # fmt: skip
    for name in names:
        assert (folder / f"{name}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
