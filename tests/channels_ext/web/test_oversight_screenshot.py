"""A screenshot of the admin's oversight page for docs/web-and-admin.md, in the headless Chromium of the
browser tests: two weeks of answers and expiries, drawn as the page draws them.

Written to a temporary folder on every run (so the page is checked to render in a browser); to refresh
the committed one:

    GATEWAY_SCREENSHOT_DIR=docs/screenshots .venv/bin/pytest tests/channels_ext/web/test_oversight_screenshot.py
"""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.db.models import F

from approvals import services
from approvals.models import ApproverResponse, ConfirmationEvent, ConfirmationRequest
from tests.channels_ext.web.conftest import PASSWORD
from tests.conftest import decide
from tests.support import rewrite_request

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

# (days ago, tool, approver, decision, seconds after the card): a fortnight of a small team's answers.
ANSWERS = [
    (days, tool, who, decision, seconds)
    for days in range(13, -1, -1)
    for tool, who, decision, seconds in [
        ("oa__purchase_pay", "alice", "approve", 40 + 9 * (days % 5)),
        ("fs__delete", "bob", "approve" if days % 4 else "reject", 1.2 if days < 6 else 25 + days),
        ("fs__write", "alice" if days % 2 else "bob", "approve", 8 + 30 * (days % 3)),
    ]
    if not (tool == "fs__write" and days % 5 == 0)
]


def moved(confirmation_id: str, *, days: int, seconds: float = 0.0) -> None:
    """The request and its card `seconds` earlier, then everything of it `days` days earlier."""
    back = dt.timedelta(days=days, seconds=seconds)
    ConfirmationRequest.objects.filter(pk=confirmation_id).update(created_at=F("created_at") - back)
    ConfirmationEvent.objects.filter(confirmation_id=confirmation_id).update(created_at=F("created_at") - back)


def test_it_takes_a_screenshot_of_the_oversight_page(agent, people, public_url, new_page, tmp_path):
    from playwright.sync_api import expect

    folder = Path(os.environ.get("GATEWAY_SCREENSHOT_DIR") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    User.objects.create_superuser("admin", "admin@example.com", PASSWORD)
    for days, tool, who, decision, seconds in ANSWERS:
        pk = agent.pre_tool_use(tool, {"n": days}).json()["confirmation_id"]
        moved(pk, days=0, seconds=seconds)
        decide(pk, decision, actor=who, reason="" if decision == "approve" else "not this one")
        moved(pk, days=days)
        ApproverResponse.objects.filter(confirmation_id=pk).update(created_at=F("created_at") - dt.timedelta(days=days))
    for days in (9, 4, 4, 1):
        pk = agent.pre_tool_use("fs__delete", {"n": days}).json()["confirmation_id"]
        rewrite_request(pk, expires_at=ConfirmationRequest.objects.get(pk=pk).created_at)
        services.confirmation_expire_due()
        rewrite_request(pk, decided_at=ConfirmationRequest.objects.get(pk=pk).decided_at - dt.timedelta(days=days))

    staff = new_page()
    staff.set_viewport_size({"width": 1400, "height": 900})
    staff.goto(f"{public_url}/admin/login/?next=/admin/")
    staff.fill("#id_username", "admin")
    staff.fill("#id_password", PASSWORD)
    staff.get_by_role("button", name="Log in").click()
    staff.get_by_role("link", name="Is oversight real?").click()
    expect(staff.locator("figure.chart svg")).to_have_count(4)
    expect(staff.locator("#oversight-approvers tbody tr")).to_have_count(2)
    assert staff.locator("circle.point.p50").count() == 14
    staff.screenshot(path=folder / "admin-oversight.png", full_page=True)
    assert (folder / "admin-oversight.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
