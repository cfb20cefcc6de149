"""The approval page and inbox through Django's test client against the real database:
who may decide, what they see, exactly-once decisions, CSRF."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from approvals.models import ApproverResponse, ConfirmationEvent, ConfirmationRequest
from tests.channels_ext.web.conftest import PASSWORD, HeldCall
from tests.conftest import apply_config, decide, make_agent_client

pytestmark = pytest.mark.django_db(transaction=True)

LONG_NOTE = "Pay the quarterly invoice. " * 20


def pending(agent, **args) -> ConfirmationRequest:
    body = agent.pre_tool_use("oa__purchase_pay", args or {"amount": 80000}, user_id="u-42").json()
    assert body["decision"] == "pending"
    return ConfirmationRequest.objects.get(pk=body["confirmation_id"])


def signed_in(username: str, **kwargs) -> Client:
    client = Client(**kwargs)
    assert client.login(username=username, password=PASSWORD)
    return client


def page_url(confirmation: ConfirmationRequest) -> str:
    return reverse("approval-page", args=[confirmation.pk])


def test_a_signed_out_visitor_is_sent_to_the_sign_in_page(agent, people, client):
    confirmation = pending(agent)

    response = client.get(page_url(confirmation))

    assert response.status_code == 302
    assert response["Location"] == f"/login/?next={page_url(confirmation)}"
    assert client.get(response["Location"]).status_code == 200


def test_an_approver_who_is_not_staff_signs_in_on_the_gateways_own_page(agent, people, client):
    confirmation = pending(agent)

    response = client.post(
        f"/login/?next={page_url(confirmation)}",
        {"username": "alice", "password": PASSWORD, "next": page_url(confirmation)},
    )

    assert response.status_code == 302
    assert response["Location"] == page_url(confirmation)


def test_the_page_shows_what_an_approver_needs_to_decide(agent, people):
    confirmation = pending(agent, amount=80000, vendor="ACME", note=LONG_NOTE)

    html = signed_in("alice").get(page_url(confirmation)).content.decode()

    assert "purchasing-bot" in html  # agent
    assert "oa__purchase_pay" in html  # tool
    assert "u-42" in html  # end user
    assert "s-1" in html  # session
    assert "finance-gate" in html and "config version 1" in html  # why gated
    assert confirmation.reason in html
    assert '<span id="time-left">29' in html  # 29 minutes and some seconds of 1800
    assert "<code>vendor</code></th><td><pre>ACME</pre>" in html  # a short value is shown as it is
    assert "<details><summary>Pay the quarterly invoice." in html  # a long one is folded
    assert f"({len(LONG_NOTE)} characters)" in html
    assert 'name="decision" value="approve"' in html and 'name="decision" value="reject"' in html
    assert 'name="csrfmiddlewaretoken"' in html


def test_an_approval_is_recorded_with_the_approvers_username_and_shown(agent, people):
    confirmation = pending(agent)
    alice = signed_in("alice")

    response = alice.post(page_url(confirmation), {"decision": "approve", "reason": ""}, follow=True)

    confirmation.refresh_from_db()
    assert (confirmation.status, confirmation.decided_by) == ("approved", "web:alice")
    assert ApproverResponse.objects.get().approver == "web:alice"
    html = response.content.decode()
    assert "Approved." in html  # the message
    assert "<strong>Approved</strong> by web:alice at" in html
    assert 'name="decision"' not in html  # no buttons once decided


def test_a_decision_posted_for_a_request_that_does_not_exist_is_404_and_writes_nothing(agent, people):
    import uuid

    response = signed_in("alice").post(reverse("approval-page", args=[uuid.uuid4()]), {"decision": "approve"})

    assert response.status_code == 404
    assert not ApproverResponse.objects.exists() and not ConfirmationEvent.objects.exists()


def test_the_service_refuses_a_standing_judged_from_the_row_and_a_card_at_once():
    from approvals import services
    from gateway_contract import Callback

    with pytest.raises(ValueError, match="on_behalf draws no card"):
        services.confirmation_respond(
            callback=Callback(confirmation_id="x", decision="approve", actor="alice"),
            on_behalf=lambda confirmation: ("web", False),
        )


def test_a_second_click_is_told_the_request_was_already_decided_and_by_whom(agent, people):
    confirmation = pending(agent)
    signed_in("bob").post(page_url(confirmation), {"decision": "reject", "reason": "not this quarter"})

    response = signed_in("alice").post(page_url(confirmation), {"decision": "approve"}, follow=True)

    assert "Already rejected by web:bob: not this quarter" in response.content.decode()
    confirmation.refresh_from_db()
    assert (confirmation.status, confirmation.decided_by) == ("rejected", "web:bob")
    # (card delivery events depend on whether a worker is running; the decision trail does not)
    decisions = confirmation.events.exclude(kind__in=["card_posted", "card_updated"])
    assert list(decisions.values_list("kind", "actor")) == [
        ("created", "agent:purchasing-bot"),
        ("rejected", "web:bob"),
        ("late_click", "web:alice"),
    ]


def test_rejecting_without_a_reason_is_refused_and_changes_nothing(agent, people):
    confirmation = pending(agent)

    response = signed_in("alice").post(page_url(confirmation), {"decision": "reject", "reason": "  "})

    assert response.status_code == 400
    assert "Say why you reject this request" in response.content.decode()
    confirmation.refresh_from_db()
    assert confirmation.status == "pending"


def test_a_rejection_reason_reaches_the_waiting_agent(agent, people):
    held = HeldCall(agent, "oa__purchase_pay", {"amount": 80000})

    signed_in("alice").post(
        reverse("approval-page", args=[held.confirmation_id]), {"decision": "reject", "reason": "over budget"}
    )

    body = held.result()
    assert body["decision"] == "deny"
    assert body["reason"] == "rejected by web:alice: over budget"


def test_someone_who_is_not_an_approver_cannot_read_it_and_a_forged_post_changes_nothing(agent, people):
    confirmation = pending(agent)
    carol = signed_in("carol")

    assert carol.get(page_url(confirmation)).status_code == 404

    response = carol.post(page_url(confirmation), {"decision": "approve"}, follow=True)

    assert response.redirect_chain == [(reverse("approval-inbox"), 302)]  # not back to a page carol may not read
    assert "You are not one of the approvers of this request." in response.content.decode()
    confirmation.refresh_from_db()
    assert confirmation.status == "pending"
    refused = ConfirmationEvent.objects.get(kind="refused_click")
    assert refused.actor == "web:carol"
    assert not ApproverResponse.objects.exists()


def test_the_end_user_cannot_approve_a_call_made_on_their_own_behalf(agent, people):
    body = agent.pre_tool_use("oa__purchase_pay", {"amount": 5}, user_id="alice").json()
    confirmation = ConfirmationRequest.objects.get(pk=body["confirmation_id"])
    alice = signed_in("alice")

    assert 'name="decision"' not in alice.get(page_url(confirmation)).content.decode()
    alice.post(page_url(confirmation), {"decision": "approve"})

    confirmation.refresh_from_db()
    assert confirmation.status == "pending"


def test_staff_cannot_decide_a_call_made_on_their_own_behalf_either(agent, people):
    body = agent.pre_tool_use("oa__purchase_pay", {"amount": 5}, user_id="olga").json()
    confirmation = ConfirmationRequest.objects.get(pk=body["confirmation_id"])
    olga = signed_in("olga")

    html = olga.get(page_url(confirmation)).content.decode()
    assert "You cannot approve a call made on your own behalf." in html
    olga.post(page_url(confirmation), {"decision": "approve"})

    confirmation.refresh_from_db()
    assert confirmation.status == "pending"


def test_a_post_without_the_csrf_token_is_forbidden_and_changes_nothing(agent, people):
    confirmation = pending(agent)
    alice = signed_in("alice", enforce_csrf_checks=True)

    response = alice.post(page_url(confirmation), {"decision": "approve"})

    assert response.status_code == 403
    confirmation.refresh_from_db()
    assert confirmation.status == "pending"


def test_staff_with_the_change_permission_may_decide_any_request_as_themselves(agent, people):
    confirmation = pending(agent)
    olga = signed_in("olga")

    html = olga.get(page_url(confirmation)).content.decode()
    assert "as staff you may still decide" in html

    olga.post(page_url(confirmation), {"decision": "approve"})

    confirmation.refresh_from_db()
    assert (confirmation.status, confirmation.decided_by) == ("approved", "web:olga")
    assert confirmation.events.get(kind="approved").actor == "web:olga"


def test_staff_without_the_change_permission_only_look(agent, people):
    confirmation = pending(agent)
    sam = signed_in("sam")

    assert 'name="decision"' not in sam.get(page_url(confirmation)).content.decode()
    sam.post(page_url(confirmation), {"decision": "approve"})

    confirmation.refresh_from_db()
    assert confirmation.status == "pending"


def test_a_request_for_a_chat_channel_is_read_only_on_the_page_except_for_staff(live_gateway, people):
    apply_config(
        """
channels:
  - {name: ops-slack, kind: slack, bot_token: xoxb-test, signing_secret: s3cret, channel_id: C1,
     api_base_url: "http://127.0.0.1:9/api/"}
agents:
  - name: deploy-bot
    hooks:
      - {kind: approval_gate, tools: ["*"], channel: ops-slack, approvers: []}
"""
    )
    deployer = make_agent_client(live_gateway, "deploy-bot")
    confirmation = ConfirmationRequest.objects.get(
        pk=deployer.pre_tool_use("k8s__deploy", {"image": "web:2"}).json()["confirmation_id"]
    )
    carol = signed_in("carol")

    assert carol.get(page_url(confirmation)).status_code == 404  # no web approver: staff only
    html = signed_in("sam").get(page_url(confirmation)).content.decode()
    assert "This request is decided in the ops-slack channel, not on this page." in html
    carol.post(page_url(confirmation), {"decision": "approve"})
    confirmation.refresh_from_db()
    assert confirmation.status == "pending"

    signed_in("olga").post(page_url(confirmation), {"decision": "approve"})
    confirmation.refresh_from_db()
    assert (confirmation.status, confirmation.decided_by) == ("approved", "web:olga")


def test_the_inbox_lists_what_waits_for_the_signed_in_approver(agent, people):
    confirmation = pending(agent)

    alice_inbox = signed_in("alice").get(reverse("approval-inbox")).content.decode()
    carol_inbox = signed_in("carol").get(reverse("approval-inbox")).content.decode()

    assert page_url(confirmation) in alice_inbox.split('id="waiting"')[1]
    assert 'id="waiting"' not in carol_inbox
    assert "Nothing is waiting for your decision." in carol_inbox
    assert "other pending request" not in carol_inbox and "oa__purchase_pay" not in carol_inbox  # not hers to see
    assert "1 other pending request" in signed_in("sam").get(reverse("approval-inbox")).content.decode()  # staff look


def test_the_state_url_answers_the_requests_current_state_as_json(agent, people):
    confirmation = pending(agent)
    decide(confirmation.pk, "approve", actor="bob")

    assert signed_in("carol").get(reverse("approval-state", args=[confirmation.pk])).status_code == 404
    state = signed_in("alice").get(reverse("approval-state", args=[confirmation.pk])).json()

    assert state["status"] == "approved"
    assert state["decided_by"] == "web:bob"


def test_once_escalated_to_another_web_channel_its_approvers_decide_on_the_page(live_gateway, people):
    from django.contrib.auth import get_user_model
    from django.utils import timezone

    from approvals.tasks import run_timers

    get_user_model().objects.create_user("dave", password=PASSWORD)
    apply_config(
        """
channels: [{name: web, kind: web}, {name: managers, kind: web}]
agents:
  - name: escalating-bot
    hooks:
      - kind: approval_gate
        channel: web
        approvers: [alice]
        escalate_after_seconds: 600
        escalate_to: {channel: managers, approvers: [dave]}
"""
    )
    agent = make_agent_client(live_gateway, "escalating-bot")
    confirmation = ConfirmationRequest.objects.get(pk=agent.pre_tool_use("pay", {}).json()["confirmation_id"])
    assert 'value="approve"' not in signed_in("dave").get(page_url(confirmation)).content.decode()  # not yet escalated

    ConfirmationRequest.objects.filter(pk=confirmation.pk).update(escalate_at=timezone.now())
    run_timers.apply()
    signed_in("dave").post(page_url(confirmation), {"decision": "approve"})

    confirmation.refresh_from_db()
    assert (confirmation.status, confirmation.decided_by) == ("approved", "web:dave")
    assert ApproverResponse.objects.get().channel == "managers"
