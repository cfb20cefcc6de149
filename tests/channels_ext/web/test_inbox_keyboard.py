"""The inbox in real headless Chromium against the live gateway (docs/approving.md, "The inbox"): an
approver clears 100 mixed requests with the keyboard alone, the page does not refresh under a keyboard
session, and the inbox works on a phone's narrow screen."""

from __future__ import annotations

import time

import pytest

from approvals.models import ApproverResponse, ConfirmationEvent, ConfirmationRequest
from tests.channels_ext.web.conftest import PASSWORD, ask

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

# (tool of billing-bot, tool of deploy-bot) and the amounts the gates rate: 5, 50 low; 500, 700 medium; 5000 high.
TOOLS = {"billing-bot": ("pay", "refund"), "deploy-bot": ("ship", "rollback")}
AMOUNTS = (5, 50, 500, 700, 5000)
FINAL = {"approve": "approved", "reject": "rejected"}


def mixed_requests(bots, count: int) -> dict[str, str]:
    """`count` requests for alice from two agents, four tools and three risks, asked over HTTP: {id: agent}."""
    made = {}
    for n in range(count):
        agent = ("billing-bot", "deploy-bot")[n % 2]
        tool = TOOLS[agent][(n // 2) % 2]
        made[ask(bots[agent], tool, amount=AMOUNTS[n % len(AMOUNTS)], n=n)] = agent
    return made


def plan_for(row: ConfirmationRequest) -> str:
    """What the approver means to do with a request, by what it is: the risky undoing tools, and deploy-bot's
    medium rollbacks, are rejected; everything else is approved."""
    if row.risk == "high" and row.tool_name in ("refund", "rollback"):
        return "reject"
    if row.risk == "medium" and row.agent.name == "deploy-bot" and row.tool_name == "rollback":
        return "reject"
    return "approve"


def sign_in(page, url: str, username: str = "alice") -> None:
    page.goto(f"{url}/login/?next=/approvals/")
    page.fill("#id_username", username)
    page.fill("#id_password", PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(f"{url}/approvals/")


def press_and_wait(page, key: str) -> None:
    """A key that leaves the page (a decision, a grouping): wait for the next page to load."""
    with page.expect_navigation():
        page.keyboard.press(key)


def ids_in_first_group(page) -> list[str]:
    return page.eval_on_selector_all("#waiting tbody.group:first-of-type tr.row", "rows => rows.map(r => r.dataset.id)")


def checked(page) -> list[str]:
    return page.eval_on_selector_all('#waiting input[name="ids"]:checked', "boxes => boxes.map(b => b.closest('tr').dataset.id)")


def test_an_approver_clears_100_mixed_requests_with_the_keyboard_alone(bots, public_url, new_page):
    from playwright.sync_api import expect

    started = time.monotonic()
    made = mixed_requests(bots, 100)
    plan = {str(c.pk): plan_for(c) for c in ConfirmationRequest.objects.select_related("agent").filter(pk__in=made)}
    assert {"approve", "reject"} == set(plan.values())
    assert {c.risk for c in ConfirmationRequest.objects.filter(pk__in=made)} == {"low", "medium", "high"}
    reasons: dict[str, str] = {}
    page = new_page()
    sign_in(page, public_url)
    expect(page.locator("#waiting-count")).to_have_text("100 requests")

    for _ in ("agent", "tool", "risk"):  # g: group by the next way, until by risk
        press_and_wait(page, "g")
    assert page.url.endswith("/approvals/?group=risk")
    expect(page.locator("#waiting .group-head").first).to_contain_text("risk: high")

    # The first request on its own: focused (j), nothing selected, decided by one key.
    page.keyboard.press("j")
    first = page.locator("#waiting tr.row.focused").get_attribute("data-id")
    if plan[first] == "approve":
        press_and_wait(page, "a")
    else:
        page.keyboard.press("r")
        page.keyboard.type("never undo on a bot's say-so")
        reasons[first] = "never undo on a bot's say-so"
        press_and_wait(page, "Enter")
    expect(page.locator(".messages")).to_contain_text("1 request(s)")

    # Then group by group, riskiest first: pick the ones to reject (x), reject them with a reason typed
    # (r … Enter); then select what is left of the group (X) and approve it (a).
    rounds = 0
    while page.locator("#waiting tr.row").count():
        rounds += 1
        assert rounds < 12, "the inbox is not clearing"
        group = ids_in_first_group(page)
        risk = page.locator("#waiting tbody.group").first.get_attribute("data-group")
        rejects = [i for i, pk in enumerate(group) if plan[pk] == "reject"]
        page.keyboard.press("Escape")  # nothing selected,
        page.keyboard.press("Escape")  # nothing focused,
        page.keyboard.press("j")  # the group's first request
        if rejects:
            at = 0
            for index in rejects:
                for _ in range(index - at):
                    page.keyboard.press("j")
                at = index
                page.keyboard.press("x")
            assert sorted(checked(page)) == sorted(group[i] for i in rejects)  # what the page is about to post
            reason = f"too risky to allow ({risk})"
            page.keyboard.press("r")
            expect(page.locator("#batch-reason")).to_be_focused()
            page.keyboard.type(reason)
            reasons.update({group[i]: reason for i in rejects})
            press_and_wait(page, "Enter")
            expect(page.locator(".messages")).to_contain_text(f"Rejected {len(rejects)} request(s)")
        else:
            page.keyboard.press("X")
            assert sorted(checked(page)) == sorted(group)
            press_and_wait(page, "a")
            expect(page.locator(".messages")).to_contain_text(f"Approved {len(group)} request(s)")

    expect(page.locator("#nothing-waiting")).to_contain_text("Nothing is waiting for your decision.")
    # From the outside: each request ended as planned, decided by alice, exactly once.
    for pk, agent in made.items():
        seen = bots[agent].get(pk).json()
        assert seen["status"] == FINAL[plan[pk]], (pk, seen)
    for confirmation in ConfirmationRequest.objects.filter(pk__in=made):
        pk = str(confirmation.pk)
        assert (confirmation.decided_by, confirmation.decision_reason) == ("web:alice", reasons.get(pk, ""))
        assert ApproverResponse.objects.filter(confirmation_id=pk).count() == 1
        assert ConfirmationEvent.objects.filter(confirmation_id=pk, kind__in=("approved", "rejected")).count() == 1
    assert rounds <= 7  # batches, not a hundred round trips
    print(f"100 requests asked and cleared by keyboard in {time.monotonic() - started:.1f} s")


def test_the_keyboard_opens_a_request_shows_its_help_and_a_refresh_waits_for_the_session(bots, public_url, new_page):
    from playwright.sync_api import expect

    made = mixed_requests(bots, 3)
    page = new_page()
    page.clock.install()
    sign_in(page, public_url)

    page.keyboard.press("?")
    expect(page.locator("#help")).to_be_visible()
    page.keyboard.press("Escape")
    expect(page.locator("#help")).to_be_hidden()
    page.keyboard.press("j")
    page.keyboard.press("j")
    opened = page.locator("#waiting tr.row.focused").get_attribute("data-id")
    press_and_wait(page, "o")
    assert page.url == f"{public_url}/approvals/{opened}/"
    page.go_back()

    # The page refreshes itself to show new requests, but never under a keyboard session.
    page.evaluate("() => { window.sameDocument = true; }")
    page.keyboard.press("j")
    page.keyboard.press("x")
    page.clock.fast_forward("05:00")  # a selection holds the page however long
    assert page.evaluate("() => window.sameDocument") is True
    expect(page.locator('#waiting input[name="ids"]:checked')).to_have_count(1)
    page.keyboard.press("Escape")  # the selection cleared: the last key was just now
    page.clock.fast_forward("01:00")
    assert page.evaluate("() => window.sameDocument") is True
    late = ask(bots["billing-bot"], "pay", amount=1, n=99)
    with page.expect_navigation():
        page.clock.fast_forward("01:30")  # two idle minutes: it refreshes, and shows the new request
    expect(page.locator(f'#waiting tr.row[data-id="{late}"]')).to_have_count(1)
    assert set(made) < set(page.eval_on_selector_all("#waiting tr.row", "rows => rows.map(r => r.dataset.id)"))


def test_the_inbox_is_usable_on_a_phone(bots, public_url, browser):
    from playwright.sync_api import expect

    made = mixed_requests(bots, 5)
    risky = next(pk for pk in made if ConfirmationRequest.objects.get(pk=pk).risk == "high")
    calm = next(pk for pk in made if ConfirmationRequest.objects.get(pk=pk).risk == "low")
    context = browser.new_context(viewport={"width": 390, "height": 844}, is_mobile=True, has_touch=True, device_scale_factor=2)
    context.set_default_timeout(10_000)
    try:
        page = context.new_page()
        sign_in(page, public_url)

        assert page.evaluate("() => document.documentElement.scrollWidth") <= 390  # nothing to scroll sideways
        expect(page.locator("#waiting thead")).to_be_hidden()  # the table is a list of cards
        for pk in made:
            row = page.locator(f'#waiting tr.row[data-id="{pk}"]')
            box = row.bounding_box()
            assert box["x"] >= 0 and box["x"] + box["width"] <= 390
            pick = row.locator('input[name="ids"]')
            pick_box = pick.bounding_box()
            assert pick_box["width"] >= 24 and pick_box["height"] >= 24  # big enough for a thumb
            expect(row.locator("code.preview")).to_be_visible()
        approve = page.get_by_role("button", name="Approve selected")
        reject = page.get_by_role("button", name="Reject selected")
        expect(approve).to_be_in_viewport()  # the actions stay at hand under a long list
        expect(reject).to_be_in_viewport()

        page.locator(f'#waiting tr.row[data-id="{risky}"] input[name="ids"]').tap()
        reject.tap()  # no reason yet: asked for one, nothing decided
        assert page.locator("#batch-reason").evaluate("el => el.validationMessage").startswith("Say why you reject")
        page.locator("#batch-reason").tap()
        page.keyboard.type("not from a phone")
        with page.expect_navigation():
            reject.tap()
        expect(page.locator(".messages")).to_contain_text("Rejected 1 request(s)")
        page.locator(f'#waiting tr.row[data-id="{calm}"] input[name="ids"]').tap()
        with page.expect_navigation():
            page.get_by_role("button", name="Approve selected").tap()
        expect(page.locator(".messages")).to_contain_text("Approved 1 request(s)")
    finally:
        context.close()

    risky_row, calm_row = ConfirmationRequest.objects.get(pk=risky), ConfirmationRequest.objects.get(pk=calm)
    assert (risky_row.status, risky_row.decision_reason) == ("rejected", "not from a phone")
    assert (calm_row.status, calm_row.decided_by) == ("approved", "web:alice")
    assert ConfirmationRequest.objects.filter(pk__in=made, status="pending").count() == 3
