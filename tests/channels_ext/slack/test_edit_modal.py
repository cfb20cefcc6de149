"""Slack's edit modal takes inputs for the gate's editable arguments only (docs/slack.md §3): a submission
carrying an input for any other path was crafted (the modal the gateway opens has none), so it is refused in
the modal and decides nothing, even when that input holds the proposed value — and a legitimate edit still
approves. Submissions are signed with the channel's signing secret, as Slack signs them."""

from __future__ import annotations

import pytest

from approvals.models import ConfirmationEvent, ConfirmationRequest
from tests.channels_ext.contract import Told, pending, request_state
from tests.channels_ext.slack.test_contract import SlackDriver

pytestmark = pytest.mark.django_db(transaction=True)

PROPOSED = {"amount": 80000, "vendor": "ACME"}


@pytest.fixture
def driver(live_gateway, fake_slack, celery_worker) -> SlackDriver:
    return SlackDriver(live_gateway, fake_slack)


@pytest.mark.parametrize(
    "typed",
    [
        pytest.param({"vendor": "ACME"}, id="the proposed value of an argument the gate does not let change"),
        pytest.param({"amount": "8000", "vendor": '"ACME"'}, id="beside a legitimate edit"),
        pytest.param({"refund_to": "DE89370400440532013000"}, id="an argument the call does not have"),
    ],
)
def test_an_edit_modal_submission_with_an_input_outside_allow_edit_is_refused_and_decides_nothing(driver, typed):
    agent = driver.deploy(gate={"allow_edit": ["amount"]})
    confirmation_id = pending(agent, PROPOSED)
    card = driver.card(confirmation_id)
    before = request_state(confirmation_id)

    told = driver.edit(card, driver.approvers[0], typed)  # the modal's own inputs, plus one it never had

    outside = next(path for path in typed if path != "amount")
    # 200 with `response_action: errors`: Slack shows the error in the modal, which stays open (any other
    # answer is a generic "trouble connecting" there; Slack does not retry a view_submission).
    assert told.text == f"You may not change {outside}; the editable arguments are amount."
    assert request_state(confirmation_id) == before
    refused = ConfirmationEvent.objects.get(confirmation_id=confirmation_id, kind="refused_click")
    assert refused.actor == driver.approvers[0].decided_by
    driver.expect_open(card)

    assert driver.edit(card, driver.approvers[0], {"amount": "8000"}) == Told(taken=True, text=None)
    decided = ConfirmationRequest.objects.get(pk=confirmation_id)
    assert (decided.status, decided.approved_args) == ("approved", {"amount": 8000, "vendor": "ACME"})
    agent.http.close()
