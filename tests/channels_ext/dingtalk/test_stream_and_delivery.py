"""DingTalk beyond the contract: the Stream as `channel_connections` holds it — reconnecting with backoff after a
drop or DingTalk's `disconnect`, stopping with a clear error on a refused credential, acknowledging every callback
in time even when deciding is slow, shown by /readyz — and delivery failures classed as Slack's are."""

from __future__ import annotations

import time

import httpx
import pytest

from approvals.models import ApproverResponse, Channel, ConfirmationEvent, ConfirmationRequest, Outbox
from gateway_contract.links import ConnectionRefused
from channels_ext.dingtalk.cards import button_id, parse_button_id
from tests.channels_ext.connections_support import RunningConnections, connection_state, running_connections
from tests.channels_ext.contract import request_state
from tests.channels_ext.dingtalk.support import CHANNEL, MANAGER, TOOL, deploy
from tests.fakes.dingtalk_api import CREATE_AND_DELIVER_PATH, NO_PERMISSION, TOKEN_PATH, FakeDingTalk
from tests.support import rows_locked, wait_until

pytestmark = pytest.mark.django_db(transaction=True)

WAIT = 20.0


def posted_card(fake: FakeDingTalk):
    wait_until(lambda: Outbox.objects.filter(kind="card", status="sent").exists(), what="the card to be sent")
    [card] = fake.posted()
    return card, {parse_button_id(b["id"])[0]: b["id"] for b in card.buttons}


def test_the_stream_reconnects_after_a_drop_and_after_dingtalks_disconnect_and_clicks_still_decide(
    live_gateway, fake_dingtalk, celery_worker
):
    agent = deploy(live_gateway, fake_dingtalk)
    with running_connections():
        wait_until(lambda: connection_state(CHANNEL) == "connected", what="the Stream to connect")
        waiting = agent.pre_tool_use
        answer = waiting(TOOL, {"amount": 5}).json()
        card, buttons = posted_card(fake_dingtalk)

        fake_dingtalk.drop_connections()  # the network drops, no close frame
        wait_until(lambda: fake_dingtalk.accepted == 2 and fake_dingtalk.connections == 1, timeout=10, what="a new session")
        fake_dingtalk.send_system("disconnect")  # DingTalk asks for a new connection
        wait_until(lambda: fake_dingtalk.accepted == 3 and fake_dingtalk.connections == 1, timeout=10, what="another session")
        wait_until(lambda: connection_state(CHANNEL) == "connected", what="the runner to record it")

        ack = fake_dingtalk.deliver_card_callback(out_track_id=card.out_track_id, button_id=buttons["approve"], user_id=MANAGER)

    assert fake_dingtalk.endpoint_calls == 3  # each connection asked for its own endpoint and ticket
    assert ack is not None and ack.code == 200 and ack.response["message"] == "Approved."
    assert ConfirmationRequest.objects.get(pk=answer["confirmation_id"]).status == "approved"


def test_a_refused_credential_stops_the_runner_with_a_clear_error_that_names_the_keys_not_the_secret(
    live_gateway, fake_dingtalk
):
    secret = fake_dingtalk.client_secret
    deploy(live_gateway, fake_dingtalk)
    fake_dingtalk.client_secret = "rotated-in-the-developer-console"

    running = RunningConnections()
    running.thread.start()
    running.thread.join(timeout=WAIT)

    assert not running.thread.is_alive(), "a refused credential must stop the runner"
    assert isinstance(running.error, ConnectionRefused)
    assert "Check client_id and client_secret" in running.error.message
    assert fake_dingtalk.client_id in running.error.message and secret not in running.error.message
    assert connection_state(CHANNEL) == "failed"
    assert fake_dingtalk.endpoint_calls == 1  # not retried: retrying cannot fix it


def test_a_slow_decision_is_acknowledged_in_time_and_completes_afterwards(live_gateway, fake_dingtalk, celery_worker):
    agent = deploy(live_gateway, fake_dingtalk)
    agent.pre_tool_use(TOOL, {"amount": 9})
    card, buttons = posted_card(fake_dingtalk)

    with running_connections():
        wait_until(lambda: fake_dingtalk.connections, what="the Stream connection")
        with rows_locked(ConfirmationRequest.objects.all()):  # the click's decision has to wait for the lock
            ack = fake_dingtalk.deliver_card_callback(out_track_id=card.out_track_id, button_id=buttons["approve"], user_id=MANAGER)
        wait_until(lambda: ConfirmationRequest.objects.get().status == "approved", what="the click to complete")

    assert ack is not None and ack.code == 200 and ack.seconds < 3
    assert ack.response == {"message": "Received; the card will update in a moment."}
    wait_until(lambda: card.updates and card.params["msgTitle"].startswith("Approved:"), what="the card's redraw")


def test_a_button_id_the_gateway_did_not_sign_is_refused_in_the_ack_and_changes_nothing(
    live_gateway, fake_dingtalk, celery_worker
):
    agent = deploy(live_gateway, fake_dingtalk)
    confirmation_id = agent.pre_tool_use(TOOL, {"amount": 9}).json()["confirmation_id"]
    card, _ = posted_card(fake_dingtalk)
    before = request_state(confirmation_id)

    with running_connections():
        wait_until(lambda: fake_dingtalk.connections, what="the Stream connection")
        forged = f"approve|{confirmation_id}:not-our-signature"
        ack = fake_dingtalk.deliver_card_callback(out_track_id=card.out_track_id, button_id=forged, user_id=MANAGER)

    assert ack is not None and ack.code == 400
    assert request_state(confirmation_id) == before
    assert not ConfirmationEvent.objects.filter(confirmation_id=confirmation_id, kind__in=["approved", "refused_click"]).exists()


def test_readyz_shows_the_streams_state(live_gateway, fake_dingtalk):
    deploy(live_gateway, fake_dingtalk)
    down = httpx.get(f"{live_gateway.url}/readyz", timeout=10).json()["connections"][CHANNEL]
    assert (down["state"], down["mode"]) == ("down", "stream")

    with running_connections():
        wait_until(lambda: connection_state(CHANNEL) == "connected", what="the Stream to connect")
        up = httpx.get(f"{live_gateway.url}/readyz", timeout=10).json()["connections"][CHANNEL]

    assert (up["state"], up["mode"], up["processes"]) == ("connected", "stream", 1)
    assert fake_dingtalk.client_secret not in str(up)


def test_a_rate_limited_card_is_sent_again_after_retry_after(live_gateway, fake_dingtalk, celery_worker):
    fake_dingtalk.fail_next(CREATE_AND_DELIVER_PATH, status=429, headers={"Retry-After": "1"})
    agent = deploy(live_gateway, fake_dingtalk)
    started = time.monotonic()

    agent.pre_tool_use(TOOL, {"amount": 9})
    posted_card(fake_dingtalk)

    assert len(fake_dingtalk.calls("POST", CREATE_AND_DELIVER_PATH)) == 2
    assert time.monotonic() - started >= 1
    # Both attempts named the same card: a retry never makes a second one.
    first, second = (call.json()["outTrackId"] for call in fake_dingtalk.calls("POST", CREATE_AND_DELIVER_PATH))
    assert first == second


def test_an_app_without_the_card_permission_fails_the_request_closed_and_says_why(live_gateway, fake_dingtalk, celery_worker):
    fake_dingtalk.fail_next(CREATE_AND_DELIVER_PATH, status=403, body=NO_PERMISSION, headers={})
    agent = deploy(live_gateway, fake_dingtalk)

    answer = agent.pre_tool_use(TOOL, {"amount": 9}, wait_seconds=15).json()

    assert answer["decision"] == "deny"
    assert "Card.Instance.Write" in answer["reason"]
    assert len(fake_dingtalk.calls("POST", CREATE_AND_DELIVER_PATH)) == 1
    assert not ApproverResponse.objects.exists()


def test_a_refused_client_secret_is_permanent_and_never_shown(live_gateway, fake_dingtalk, celery_worker):
    secret = fake_dingtalk.client_secret
    agent = deploy(live_gateway, fake_dingtalk)
    fake_dingtalk.client_secret = "rotated-in-the-developer-console"

    answer = agent.pre_tool_use(TOOL, {"amount": 9}, wait_seconds=15).json()

    assert answer["decision"] == "deny"
    error = Channel.objects.get(name=CHANNEL).last_error
    assert "check client_id and client_secret" in error and secret not in error
    assert len(fake_dingtalk.calls("POST", TOKEN_PATH)) == 1
    assert not fake_dingtalk.calls("POST", CREATE_AND_DELIVER_PATH)


def test_a_card_carries_the_signed_request_on_each_button_and_nothing_else(live_gateway, fake_dingtalk, celery_worker):
    agent = deploy(live_gateway, fake_dingtalk, gate_keys='        grants: [{"scope": "session", "args": "same"}]\n')
    confirmation_id = agent.pre_tool_use(TOOL, {"amount": 9, "note": "<font color=red>[pay](http://evil)</font>"}).json()[
        "confirmation_id"
    ]

    card, buttons = posted_card(fake_dingtalk)

    assert list(buttons) == ["approve", "approve_grant_0", "reject"]
    assert buttons["approve"] == button_id("approve", confirmation_id)
    assert (card.template_id, card.callback_type) == ("382e4302-551d-4880-bf29-a30acfab2e71.schema", "STREAM")
    assert card.open_space_id == "dtv1.card//IM_GROUP.cidAbCdEf123=="
    assert "<font" not in card.params["msgContent"] and "\\[pay\\](http://evil)" in card.params["msgContent"]


def test_the_client_secret_stays_out_of_the_admin_and_the_logs(live_gateway, fake_dingtalk, celery_worker, caplog):
    from django.contrib.auth.models import Permission, User
    from django.test import Client

    caplog.set_level("DEBUG")
    agent = deploy(live_gateway, fake_dingtalk)
    with running_connections():
        wait_until(lambda: connection_state(CHANNEL) == "connected", what="the Stream to connect")
        agent.pre_tool_use(TOOL, {"amount": 9})
        card, buttons = posted_card(fake_dingtalk)
        fake_dingtalk.deliver_card_callback(out_track_id=card.out_track_id, button_id=buttons["reject"], user_id=MANAGER)
    operator = User.objects.create_user("operator", is_staff=True)
    operator.user_permissions.add(Permission.objects.get(codename="view_channel", content_type__app_label="approvals"))
    admin = Client()
    admin.force_login(operator)

    detail = admin.get(f"/admin/approvals/channel/{Channel.objects.get(name=CHANNEL).pk}/change/").content.decode()

    assert fake_dingtalk.client_id in detail
    assert fake_dingtalk.client_secret not in detail
    assert fake_dingtalk.client_secret not in caplog.text


def test_a_quorum_shows_its_progress_and_a_reminder_redraws_the_card_with_its_note(live_gateway, fake_dingtalk, celery_worker):
    from approvals.tasks import run_timers
    from tests.channels_ext.dingtalk.support import DIRECTOR

    agent = deploy(live_gateway, fake_dingtalk, gate_keys="        approvals_required: 2\n        remind_after_seconds: 1\n")
    confirmation_id = agent.pre_tool_use(TOOL, {"amount": 9}).json()["confirmation_id"]
    card, buttons = posted_card(fake_dingtalk)

    with running_connections():
        wait_until(lambda: fake_dingtalk.connections, what="the Stream connection")
        first = fake_dingtalk.deliver_card_callback(out_track_id=card.out_track_id, button_id=buttons["approve"], user_id=MANAGER)
        assert first is not None and "Approvals:** 1 of 2" in first.response["cardData"]["cardParamMap"]["msgContent"]
        wait_until(lambda: run_timers.apply().get() and "Reminder" in card.params["msgContent"], what="the reminder's redraw")
        assert "Approvals:** 1 of 2" in card.params["msgContent"]
        second = fake_dingtalk.deliver_card_callback(out_track_id=card.out_track_id, button_id=buttons["approve"], user_id=DIRECTOR)

    assert second is not None and second.code == 200
    assert ConfirmationRequest.objects.get(pk=confirmation_id).status == "approved"
    wait_until(lambda: card.params["msgTitle"].startswith("Approved:"), what="the decided card")
    assert f"by dingtalk:{MANAGER}, dingtalk:{DIRECTOR} at" in card.params["msgContent"]


def test_a_cards_risk_is_rated_over_the_call_said_first_and_kept_on_the_decided_card(live_gateway, fake_dingtalk, celery_worker):
    from tests.conftest import decide

    agent = deploy(live_gateway, fake_dingtalk, gate_keys="        risk: 'args.amount > 10000 ? \"high\" : \"low\"'\n")
    confirmation_id = agent.pre_tool_use(TOOL, {"amount": 20000}).json()["confirmation_id"]
    card, _ = posted_card(fake_dingtalk)

    assert card.params["msgTitle"].startswith("🔴 High risk · Approval needed: purchasing-bot")
    assert card.params["msgContent"].startswith("🔴 **Risk: high**\n\n**Agent:** purchasing-bot")

    assert decide(confirmation_id, "reject", actor=MANAGER, channel=CHANNEL, reason="too much").code == "decided"
    wait_until(lambda: "Rejected" in card.params["msgTitle"], what="the decided card")
    assert card.params["msgContent"].startswith("🔴 **Risk: high**")

    agent.pre_tool_use(TOOL, {"amount": 5})
    wait_until(lambda: len(fake_dingtalk.posted()) == 2, what="the second card")
    low = fake_dingtalk.posted()[1]
    assert low.params["msgTitle"].startswith("Approval needed:") and low.params["msgContent"].startswith("🟢 **Risk:** low")
