"""Teams beyond the contract: every token Bot Framework would not have signed is a 401 that changes nothing;
delivery failures (429 with Retry-After, a bot not in the conversation, a refused secret) are classed as
Slack's are; a turn's "Approve all" decides exactly the calls its card showed."""

from __future__ import annotations

import time

import pytest

from approvals.models import Channel, ConfirmationEvent, ConfirmationRequest
from tests.channels_ext.contract import request_state
from tests.channels_ext.teams.support import (
    ALICE,
    CHANNEL,
    CONVERSATION_ID,
    TOOL,
    deploy,
    executes,
    invoke_activity,
    pending_card,
    post_activity,
)
from tests.fakes.teams_api import BOT_NOT_IN_CONVERSATION, FakeTeams
from tests.support import wait_until

pytestmark = pytest.mark.django_db(transaction=True)

ACTIVITIES = f"/teams/v3/conversations/{CONVERSATION_ID}/activities"


@pytest.mark.parametrize(
    "token",
    [
        pytest.param(lambda fake: None, id="no token"),
        pytest.param(lambda fake: "not-a-jwt", id="not a JWT"),
        pytest.param(lambda fake: fake.activity_token(key=FakeTeams(app_id="a", app_password="b", tenant_id="c").signing_key), id="signed by another key"),
        pytest.param(
            lambda fake: fake.activity_token(key=FakeTeams(app_id="a", app_password="b", tenant_id="c").signing_key, kid="unknown"),
            id="signed by a key the metadata does not list",
        ),
        pytest.param(lambda fake: fake.activity_token(audience="another-bots-app-id"), id="another audience"),
        pytest.param(lambda fake: fake.activity_token(expires_in=-3600), id="expired an hour ago"),
        pytest.param(lambda fake: fake.activity_token(issuer="https://evil.example.com"), id="another issuer"),
        pytest.param(lambda fake: fake.activity_token(service_url="https://evil.example.com/teams/"), id="another serviceUrl"),
    ],
)
def test_a_click_whose_token_bot_framework_did_not_sign_for_this_bot_is_401_and_changes_nothing(
    live_gateway, fake_teams, celery_worker, token
):
    _, confirmation_id, buttons = pending_card(live_gateway, fake_teams)
    before = request_state(confirmation_id)
    events = ConfirmationEvent.objects.filter(confirmation_id=confirmation_id).count()

    response = post_activity(live_gateway, invoke_activity(fake_teams, "approve", buttons["approve"]["data"]), token(fake_teams))

    assert response.status_code == 401, response.text
    assert response.json()["error"]["code"] == "callback_refused"
    assert request_state(confirmation_id) == before
    assert ConfirmationEvent.objects.filter(confirmation_id=confirmation_id).count() == events


def test_a_signed_click_on_a_button_value_the_gateway_did_not_sign_is_refused(live_gateway, fake_teams, celery_worker):
    _, confirmation_id, _ = pending_card(live_gateway, fake_teams)
    before = request_state(confirmation_id)

    forged = {"confirmation_id": f"{confirmation_id}:not-our-signature"}
    response = post_activity(live_gateway, invoke_activity(fake_teams, "approve", forged), fake_teams.activity_token())

    assert response.status_code == 400
    assert request_state(confirmation_id) == before


def test_a_click_from_another_entra_tenant_is_refused_and_changes_nothing(live_gateway, fake_teams, celery_worker):
    _, confirmation_id, buttons = pending_card(live_gateway, fake_teams)
    before = request_state(confirmation_id)
    foreign = invoke_activity(fake_teams, "approve", buttons["approve"]["data"])
    foreign["channelData"] = {"tenant": {"id": "3c9a1f6e-0000-4000-8000-000000000bad"}}

    response = post_activity(live_gateway, foreign, fake_teams.activity_token())

    assert response.status_code == 403
    assert "another Entra tenant" in response.json()["error"]["message"]
    assert request_state(confirmation_id) == before


def test_activities_other_than_card_actions_are_acknowledged_and_ignored(live_gateway, fake_teams, celery_worker):
    _, confirmation_id, _ = pending_card(live_gateway, fake_teams)
    before = request_state(confirmation_id)
    update = invoke_activity(fake_teams, "approve", {})
    update["type"] = "conversationUpdate"
    del update["name"], update["value"]

    response = post_activity(live_gateway, update, fake_teams.activity_token())

    assert response.status_code == 200
    assert request_state(confirmation_id) == before


def test_a_rate_limited_post_is_retried_after_the_connectors_retry_after(live_gateway, fake_teams, celery_worker):
    fake_teams.fail_next(ACTIVITIES, status=429, headers={"Retry-After": "1"}, method="POST")
    started = time.monotonic()

    pending_card(live_gateway, fake_teams)

    posts = fake_teams.calls("POST", ACTIVITIES)
    assert len(posts) == 2  # the 429, then the card
    assert time.monotonic() - started >= 1  # not before Retry-After
    assert ConfirmationRequest.objects.get().status == "pending"


def test_a_bot_removed_from_the_conversation_fails_the_request_closed_and_says_why(live_gateway, fake_teams, celery_worker):
    fake_teams.fail_next(ACTIVITIES, status=403, body=BOT_NOT_IN_CONVERSATION, method="POST")
    agent = deploy(live_gateway, fake_teams)

    answer = agent.pre_tool_use(TOOL, {"amount": 80000}, wait_seconds=15).json()

    assert answer["decision"] == "deny"
    assert "not installed in the conversation" in answer["reason"]
    assert len(fake_teams.calls("POST", ACTIVITIES)) == 1  # permanent: not retried
    assert "HTTP 403" in Channel.objects.get(name=CHANNEL).last_error


def test_a_refused_app_password_is_permanent_and_names_the_keys_but_never_the_secret(live_gateway, fake_teams, celery_worker):
    secret = fake_teams.app_password
    agent = deploy(live_gateway, fake_teams)
    fake_teams.app_password = "the-secret-entra-knows-now"  # the secret was rotated in the Azure portal

    answer = agent.pre_tool_use(TOOL, {"amount": 80000}, wait_seconds=15).json()

    assert answer["decision"] == "deny"
    error = Channel.objects.get(name=CHANNEL).last_error
    assert "AADSTS7000215" in error and "check app_id, app_password, tenant_id and login_url" in error
    assert secret not in error and secret not in answer["reason"]
    assert not fake_teams.calls("POST", ACTIVITIES)


def test_approve_all_on_a_turns_card_decides_the_calls_the_card_showed(live_gateway, fake_teams, celery_worker):
    agent = deploy(live_gateway, fake_teams)
    turn = {"turn_id": "turn-1"}
    first = agent.pre_tool_use(TOOL, {"amount": 1}, tool_call_id="c1", **turn).json()
    second = agent.pre_tool_use(TOOL, {"amount": 2}, tool_call_id="c2", **turn).json()
    assert first["decision"] == second["decision"] == "pending"

    def turn_card():
        for activity in fake_teams.posted():
            buttons = {b["verb"]: b for b in executes(activity.card)}
            if "approve_all" in buttons:
                return buttons
        return None

    buttons = wait_until(turn_card, what="a card listing both calls with Approve all")
    response = post_activity(
        live_gateway, invoke_activity(fake_teams, "approve_all", buttons["approve_all"]["data"], who=ALICE), fake_teams.activity_token()
    )

    assert response.status_code == 200, response.text
    decided = ConfirmationRequest.objects.filter(pk__in=[first["confirmation_id"], second["confirmation_id"]])
    assert sorted(decided.values_list("status", flat=True)) == ["approved", "approved"]
    assert set(decided.values_list("decided_by", flat=True)) == {f"teams:{ALICE[0]}"}


def test_the_app_password_stays_out_of_the_admin_and_the_logs(live_gateway, fake_teams, celery_worker, caplog):
    from django.contrib.auth.models import Permission, User
    from django.test import Client

    caplog.set_level("DEBUG")
    fake_teams.fail_next(ACTIVITIES, status=403, body=BOT_NOT_IN_CONVERSATION, method="POST")
    deploy(live_gateway, fake_teams).pre_tool_use(TOOL, {"amount": 80000}, wait_seconds=15)
    operator = User.objects.create_user("operator", is_staff=True)
    operator.user_permissions.add(Permission.objects.get(codename="view_channel", content_type__app_label="approvals"))
    admin = Client()
    admin.force_login(operator)

    listing = admin.get("/admin/approvals/channel/").content.decode()
    detail = admin.get(f"/admin/approvals/channel/{Channel.objects.get(name=CHANNEL).pk}/change/").content.decode()

    assert "HTTP 403" in listing  # the channel's error is shown…
    assert fake_teams.app_id in detail  # …and its keys, but never the secret
    assert fake_teams.app_password not in listing + detail
    assert fake_teams.app_password not in caplog.text


def test_a_quorum_shows_its_progress_and_a_reminder_redraws_the_card_for_everyone(live_gateway, fake_teams, celery_worker):
    from approvals.tasks import run_timers
    from tests.channels_ext.teams.support import BOB, card_text

    _, confirmation_id, buttons = pending_card(
        live_gateway, fake_teams, gate_keys="        approvals_required: 2\n        remind_after_seconds: 1\n"
    )
    [activity] = fake_teams.posted()

    first = post_activity(live_gateway, invoke_activity(fake_teams, "approve", buttons["approve"]["data"]), fake_teams.activity_token())
    assert "Approvals: 1 of 2" in card_text(first.json()["value"])
    wait_until(lambda: run_timers.apply().get() and "🔔 Reminder" in card_text(activity.card), what="the reminder's redraw")
    second = post_activity(
        live_gateway, invoke_activity(fake_teams, "approve", buttons["approve"]["data"], who=BOB), fake_teams.activity_token()
    )

    assert second.status_code == 200
    assert ConfirmationRequest.objects.get(pk=confirmation_id).status == "approved"
    wait_until(lambda: "✅ Approved by" in card_text(activity.card), what="the decided card")
    # Each approval by its id; the last one, which decided, with its name too.
    assert f"by teams:{ALICE[0]}, Bob Example (teams:{BOB[0]}) at" in card_text(activity.card)
