"""The approval page in real headless Chromium (Debian's, driven by Playwright) against the
live gateway: sign in, open the link, decide, and the waiting agent's HTTP call returns."""

from __future__ import annotations

import re

import pytest

from approvals import services
from approvals.models import ConfirmationRequest
from gateway_contract import Callback
from tests.channels_ext.web.conftest import PASSWORD, HeldCall, sign_in_from_the_link
from tests.conftest import WEB_GATE_CONFIG, apply_config, decide

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

def test_an_approver_signs_in_from_the_link_approves_and_the_waiting_agent_is_allowed(
    agent, people, public_url, new_page
):
    from playwright.sync_api import expect

    held = HeldCall(agent, "oa__purchase_pay", {"amount": 80000, "vendor": "ACME"}, user_id="u-42")
    link = held.link()
    assert link.startswith(public_url)
    page = new_page()

    sign_in_from_the_link(page, link, "alice")
    expect(page.locator("#status")).to_have_text("pending")
    expect(page.locator("#agent")).to_have_text("purchasing-bot")
    assert held.still_waiting()
    page.get_by_role("button", name="Approve").click()

    expect(page.locator("#status")).to_have_text("approved")
    expect(page.locator("#decision-text")).to_contain_text("Approved by web:alice at")
    body = held.result()
    assert body["decision"] == "allow"
    assert body["reason"] == "approved by web:alice"
    assert body["tool_args"] == {"amount": 80000, "vendor": "ACME"}


def test_an_approver_rejects_with_a_reason_and_the_waiting_agent_receives_it(agent, people, public_url, new_page):
    from playwright.sync_api import expect

    held = HeldCall(agent, "oa__purchase_pay", {"amount": 99000})
    page = new_page()
    sign_in_from_the_link(page, held.link(), "bob")

    page.get_by_role("button", name="Reject").click()  # no reason yet: the page asks for one
    assert page.locator("#reason").evaluate("el => el.validationMessage").startswith("Say why you reject")
    assert ConfirmationRequest.objects.get(pk=held.confirmation_id).status == "pending"
    page.fill("#reason", "over the quarterly budget")
    page.get_by_role("button", name="Reject").click()

    expect(page.locator("#status")).to_have_text("rejected")
    expect(page.locator("#decision-reason")).to_have_text("“over the quarterly budget”")
    body = held.result()
    assert body["decision"] == "deny"
    assert body["reason"] == "rejected by web:bob: over the quarterly budget"


def test_staff_who_may_not_decide_see_no_working_buttons(agent, people, public_url, new_page):
    """sam is staff without the right to decide: the page is read-only for him (and carol, who is
    neither staff nor an approver, does not see it at all: tests/channels_ext/web/test_who_may_see.py)."""
    from playwright.sync_api import expect

    held = HeldCall(agent, "oa__purchase_pay", {"amount": 5}, wait_seconds=10)
    page = new_page()
    sign_in_from_the_link(page, held.link(), "sam")

    expect(page.locator("#readonly")).to_contain_text("You are not one of the approvers of this request.")
    expect(page.get_by_role("button", name="Approve")).to_have_count(0)
    expect(page.get_by_role("button", name="Reject")).to_have_count(0)
    # Even a hand-made form with a valid CSRF token is refused by the gateway.
    page.evaluate(
        """() => {
        const form = document.createElement("form");
        form.method = "post";
        form.innerHTML = '<input name="decision" value="approve">';
        form.appendChild(document.querySelector("input[name=csrfmiddlewaretoken]").cloneNode());
        document.body.appendChild(form);
        form.submit();
    }"""
    )
    expect(page.locator(".messages")).to_contain_text("You are not one of the approvers of this request.")
    expect(page.locator("#status")).to_have_text("pending")
    assert ConfirmationRequest.objects.get(pk=held.confirmation_id).status == "pending"
    assert held.still_waiting()
    decide(held.confirmation_id, "reject", actor="alice", reason="test over")
    assert held.result()["decision"] == "deny"


def test_a_page_left_open_shows_a_decision_made_elsewhere_without_a_reload(agent, people, public_url, new_page):
    from playwright.sync_api import expect

    held = HeldCall(agent, "oa__purchase_pay", {"amount": 700})
    page = new_page()
    sign_in_from_the_link(page, held.link(), "alice")
    expect(page.get_by_role("button", name="Approve")).to_be_visible()
    page.evaluate("() => { window.sameDocument = true; }")

    decide(held.confirmation_id, "reject", actor="bob", reason="duplicate invoice")

    expect(page.locator("#status")).to_have_text("rejected")
    expect(page.locator("#changed")).to_have_text("This request was rejected by web:bob while this page was open.")
    expect(page.locator("#decision-text")).to_contain_text(re.compile(r"Rejected by web:bob at \d{4}-\d\d-\d\d"))
    expect(page.locator("#decision-reason")).to_have_text("“duplicate invoice”")
    expect(page.get_by_role("button", name="Approve")).to_have_count(0)
    assert page.evaluate("() => window.sameDocument") is True  # updated in place, not reloaded
    assert held.result()["reason"] == "rejected by web:bob: duplicate invoice"


def test_staff_sign_in_on_the_admin_login_and_decide_a_request_they_do_not_approve(
    agent, people, public_url, new_page
):
    from playwright.sync_api import expect

    held = HeldCall(agent, "oa__purchase_pay", {"amount": 123})
    link = held.link()
    page = new_page()
    page.goto(f"{public_url}/admin/login/?next={link.removeprefix(public_url)}")
    page.fill("#id_username", "olga")
    page.fill("#id_password", PASSWORD)
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url(link)

    expect(page.locator("#as-staff")).to_be_visible()
    page.get_by_role("button", name="Approve").click()

    expect(page.locator("#decision-text")).to_contain_text("Approved by web:olga")
    assert held.result()["reason"] == "approved by web:olga"


EDITS_AND_SCOPES = WEB_GATE_CONFIG.replace(
    "timeout_seconds: 1800",
    "timeout_seconds: 1800\n        allow_edit: [amount]\n        grants: [{scope: session, args: same}]",
)


def test_an_approver_edits_an_argument_and_the_waiting_agent_runs_the_edit(agent, people, public_url, new_page):
    from playwright.sync_api import expect

    apply_config(EDITS_AND_SCOPES)
    held = HeldCall(agent, "oa__purchase_pay", {"amount": 80000, "vendor": "ACME"}, user_id="u-42")
    page = new_page()
    sign_in_from_the_link(page, held.link(), "alice")
    expect(page.get_by_role("button", name="Approve for this session (same arguments)")).to_be_visible()

    page.get_by_text("Edit the arguments, then approve").click()
    assert page.locator("#edit-0").input_value() == "80000"
    expect(page.locator('textarea[name="edit.vendor"]')).to_have_count(0)  # only what the gate allows
    page.fill("#edit-0", "8,000")
    page.locator("#approve").click()  # not a whole number, as the amount was: refused, nothing decided
    expect(page.locator(".errorlist")).to_contain_text("The value for amount must be a whole number, like 1200; 8,000 is not.")
    assert page.locator("#edit-0").input_value() == "8,000"  # what was typed, kept
    assert ConfirmationRequest.objects.get(pk=held.confirmation_id).status == "pending"
    page.fill("#edit-0", "8000")
    expect(page.locator("#approve")).to_have_text("Approve with my edits")
    page.locator("#approve").click()

    expect(page.locator("#status")).to_have_text("approved")
    expect(page.locator("#edited-badge")).to_have_text("edited")
    expect(page.locator("#approved-arguments")).to_contain_text("8000")
    expect(page.locator("#arguments")).to_contain_text("80000")  # what the agent proposed, kept
    body = held.result()
    assert (body["decision"], body["tool_args"]) == ("allow", {"amount": 8000, "vendor": "ACME"})
    assert body["reason"] == "approved by web:alice with edited arguments: amount"


def test_the_inbox_approves_a_batch_and_revokes_a_grant(agent, people, public_url, new_page):
    from playwright.sync_api import expect

    apply_config(EDITS_AND_SCOPES)
    granted = agent.pre_tool_use("oa__purchase_pay", {"amount": 1}).json()["confirmation_id"]
    decide_for_session = Callback(confirmation_id=granted, decision="approve", actor="bob", grant=0)
    assert services.confirmation_respond(channel_name="web", callback=decide_for_session).applied
    batch = [agent.pre_tool_use("oa__purchase_pay", {"amount": n}).json()["confirmation_id"] for n in (2, 3)]
    page = new_page()
    page.goto(f"{public_url}/login/?next=/approvals/")
    page.fill("#id_username", "alice")
    page.fill("#id_password", PASSWORD)
    page.get_by_role("button", name="Sign in").click()

    page.locator("#select-all").check()
    page.get_by_role("button", name="Approve selected").click()

    expect(page.locator(".messages")).to_contain_text("Approved 2 request(s)")
    assert {ConfirmationRequest.objects.get(pk=pk).decided_by for pk in batch} == {"web:alice"}
    expect(page.locator("#grants")).to_contain_text("for this session (same arguments)")
    assert agent.pre_tool_use("oa__purchase_pay", {"amount": 1}).json()["decision"] == "allow"
    page.locator("#grants").get_by_role("button", name="Revoke").click()
    expect(page.locator(".messages")).to_contain_text("Revoked: oa__purchase_pay for this session (same arguments)")
    assert agent.pre_tool_use("oa__purchase_pay", {"amount": 1}).json()["decision"] == "pending"
