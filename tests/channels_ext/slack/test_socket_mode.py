"""Slack over Socket Mode, end to end: no public URL, no callback to the gateway.

The gateway over real HTTP for the agent, a real Celery worker, PostgreSQL,
FakeSlack for the Web API and FakeSocketMode for Socket Mode
(tests/fakes/slack_socket.py). The connection is held by the runner of
`manage.py channel_connections` with slack-sdk's real SocketModeClient: it
calls apps.connections.open, connects, gets `hello`, and acknowledges each
envelope. Clicks are envelopes FakeSocketMode sends; nothing of ours is mocked.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import pytest
from django.db import connection, transaction
from django.test import Client

from approvals.models import ApproverResponse, CallbackReceipt, ConfirmationEvent, ConfirmationRequest, Outbox
from tests.channels_ext.connections_support import connection_state, running_connections
from tests.conftest import AgentClient, apply_config, make_agent_client
from tests.fakes.slack_api import FakeSlack, block_actions_payload, view_submission_payload
from tests.fakes.slack_socket import FakeSocketMode
from tests.support import wait_until

pytestmark = pytest.mark.django_db(transaction=True)

APP_TOKEN = "xapp-1-A111-1234567890-socketmodee2e"
BOT_TOKEN = "xoxb-1111-2222-socketModeBot"
SLACK_CHANNEL_ID = "C0APPROVALS"
TOOL = "oa__purchase_pay"
ALICE, BOB, MALLORY = ("U0ALICE", "alice"), ("U0BOB", "bob"), ("U0MALLORY", "mallory")
WAIT = 20.0


def configure(fake_slack: FakeSlack) -> None:
    # No signing_secret: in Socket Mode nothing is signed; the connection is the authentication.
    apply_config(
        f"""
channels:
  - name: ops-slack
    kind: slack
    mode: socket
    app_token: {APP_TOKEN}
    bot_token: {BOT_TOKEN}
    channel_id: {SLACK_CHANNEL_ID}
    api_base_url: {fake_slack.base_url}
agents:
  - name: purchasing-bot
    hooks:
      - kind: approval_gate
        name: finance-gate
        tools: ["{TOOL}"]
        channel: ops-slack
        approvers: ["{ALICE[0]}", "{BOB[0]}"]
        timeout_seconds: 1800
"""
    )


@pytest.fixture
def socket_mode(fake_slack: FakeSlack) -> Iterator[FakeSocketMode]:
    fake = FakeSocketMode(APP_TOKEN).start()
    fake_slack.socket_mode = fake
    yield fake
    fake.stop()


@pytest.fixture
def background() -> Iterator[Callable[..., Future]]:
    with ThreadPoolExecutor(max_workers=4, thread_name_prefix="test-background") as pool:
        yield pool.submit


@dataclasses.dataclass
class SocketModeSlack:
    fake: FakeSlack
    socket: FakeSocketMode
    agent: AgentClient

    def card(self) -> dict[str, Any]:
        """The approval card the worker posted (its chat.postMessage body), once recorded as sent."""
        wait_until(lambda: Outbox.objects.filter(kind="card", status="sent").exists(), what="the card to be sent")
        return self.fake.calls("chat.postMessage")[-1].json

    def button_value(self, action_id: str) -> str:
        (actions,) = [b for b in self.card()["blocks"] if b["type"] == "actions"]
        return next(e["value"] for e in actions["elements"] if e["action_id"] == action_id)

    def click_payload(self, user: tuple[str, str], action_id: str, *, trigger: str | None = None) -> dict[str, Any]:
        """`user` pressing a button of the posted card, as Slack puts it in an envelope's payload."""
        value = self.button_value(action_id)  # waits for the card
        ts = next(iter(self.fake.messages))[1]
        return block_actions_payload(
            action_id=action_id,
            value=value,
            user_id=user[0],
            user_name=user[1],
            trigger_id=trigger or f"trigger.{user[1]}.{action_id}",
            response_url=self.fake.response_url(f"{user[1]}-{action_id}"),
            channel_id=SLACK_CHANNEL_ID,
            message_ts=ts,
        )

    def card_updates(self) -> list[dict[str, Any]]:
        return [c.json for c in self.fake.calls("chat.update")]


@pytest.fixture
def slack(fake_slack: FakeSlack, socket_mode: FakeSocketMode, live_gateway, celery_worker) -> Iterator[SocketModeSlack]:
    """ops-slack in Socket Mode, its connection held and open; an agent gated on it."""
    configure(fake_slack)
    with running_connections():
        wait_until(lambda: connection_state("ops-slack") == "connected", what="the Socket Mode connection")
        yield SocketModeSlack(fake_slack, socket_mode, make_agent_client(live_gateway, "purchasing-bot"))


def event_kinds(confirmation_id: str) -> list[str]:
    return list(ConfirmationEvent.objects.filter(confirmation_id=confirmation_id).values_list("kind", flat=True))


# --------------------------------------------------------------------------- clicks


def test_an_approve_click_over_socket_mode_is_acked_by_envelope_id_within_3_s_and_wakes_the_agent(slack, background):
    assert slack.socket.opened == 1 and slack.socket.connections == 1
    waiting = background(slack.agent.pre_tool_use, TOOL, {"amount": 80000}, wait_seconds=30)

    ack = slack.socket.deliver(slack.click_payload(ALICE, "approve"), envelope_id="env-approve-1")

    assert ack is not None and ack.envelope_id == "env-approve-1"
    assert ack.seconds < 3 and ack.payload is None  # a button click's answer is an empty ack
    answer = waiting.result(timeout=WAIT).json()
    assert (answer["decision"], answer["reason"]) == ("allow", "approved by alice (slack:U0ALICE)")
    confirmation = ConfirmationRequest.objects.get()
    assert (confirmation.status, confirmation.decided_by) == ("approved", "slack:U0ALICE")
    assert list(ApproverResponse.objects.values_list("approver", "decision")) == [("slack:U0ALICE", "approve")]
    (update,) = wait_until(slack.card_updates, what="the card to be redrawn")
    assert update["text"].startswith("✅ Approved by <@U0ALICE> at")
    assert [b for b in update["blocks"] if b["type"] == "actions"] == []


def test_a_redelivered_envelope_changes_nothing(slack):
    confirmation_id = slack.agent.pre_tool_use(TOOL, {"amount": 5}).json()["confirmation_id"]
    click = slack.click_payload(BOB, "approve")
    first = slack.socket.deliver(click, envelope_id="env-1")
    wait_until(slack.card_updates, what="the card to be redrawn")
    before = event_kinds(confirmation_id)

    # Slack did not see the ack in time and delivers the same interaction again.
    again = slack.socket.deliver(click, envelope_id="env-1")
    elsewhere = slack.socket.deliver(click, envelope_id="env-1-redelivered")

    assert first is not None and again is not None and elsewhere is not None
    assert (again.payload, elsewhere.payload) == (None, None)
    assert ConfirmationRequest.objects.get().status == "approved"
    assert ApproverResponse.objects.count() == 1
    assert event_kinds(confirmation_id) == before == ["created", "card_posted", "approved"]
    assert CallbackReceipt.objects.filter(channel="ops-slack").count() == 1
    assert len(slack.card_updates()) == 1
    assert slack.fake.calls("response_url") == []  # no note for a redelivery


def test_reject_opens_the_reason_form_and_its_submission_is_answered_in_the_ack(slack, background):
    waiting = background(slack.agent.pre_tool_use, TOOL, {"amount": 80000}, wait_seconds=30)
    slack.card()

    ack = slack.socket.deliver(slack.click_payload(BOB, "reject"))

    assert ack is not None and ack.payload is None
    (opened,) = slack.fake.calls("views.open")
    assert opened.json["trigger_id"] == "trigger.bob.reject"
    metadata = opened.json["view"]["private_metadata"]
    blank = slack.socket.deliver(view_submission_payload(private_metadata=metadata, reason=" ", user_id=BOB[0]))
    assert blank is not None and blank.payload == {
        "response_action": "errors",
        "errors": {"reason": "Please say why you are rejecting this call."},
    }
    assert ConfirmationRequest.objects.get().status == "pending"

    submitted = slack.socket.deliver(
        view_submission_payload(private_metadata=metadata, reason="Over budget", user_id=BOB[0], user_name="bob")
    )

    assert submitted is not None and submitted.payload == {"response_action": "clear"}
    answer = waiting.result(timeout=WAIT).json()
    assert (answer["decision"], answer["reason"]) == ("deny", "rejected by bob (slack:U0BOB): Over budget")
    (update,) = wait_until(slack.card_updates, what="the card to be redrawn")
    assert update["text"].startswith("❌ Rejected by <@U0BOB> at")


def test_a_non_approvers_click_changes_nothing_and_they_are_told_why(slack):
    confirmation_id = slack.agent.pre_tool_use(TOOL, {"amount": 1}).json()["confirmation_id"]
    slack.card()

    ack = slack.socket.deliver(slack.click_payload(MALLORY, "approve"))

    assert ack is not None and ack.payload is None
    (note,) = wait_until(lambda: slack.fake.calls("response_url"), what="the note to mallory")
    assert note.json["text"] == "You are not one of the approvers of this request."
    assert ConfirmationRequest.objects.get().status == "pending"
    assert event_kinds(confirmation_id) == ["created", "card_posted", "refused_click"]


# --------------------------------------------------------------------------- the connection


def test_a_dropped_connection_is_reestablished_and_a_click_after_it_still_works(slack, background):
    waiting = background(slack.agent.pre_tool_use, TOOL, {"amount": 7}, wait_seconds=30)
    click = slack.click_payload(ALICE, "approve")

    # TCP closed without a close frame: slack-sdk 3.47 alone would notice only after 5 failed pings (25 s).
    slack.socket.drop_connections()

    wait_until(lambda: slack.socket.accepted == 2 and slack.socket.connections == 1, timeout=10, what="a new session")
    wait_until(lambda: connection_state("ops-slack") == "connected", what="the runner to record it")
    ack = slack.socket.deliver(click)
    assert ack is not None
    assert waiting.result(timeout=WAIT).json()["decision"] == "allow"


def test_a_disconnect_message_from_slack_is_followed_by_a_new_connection_that_is_read_at_once(slack):
    slack.agent.pre_tool_use(TOOL, {"amount": 7})
    click = slack.click_payload(ALICE, "approve")

    slack.socket.send_disconnect("refresh_requested")

    wait_until(lambda: slack.socket.accepted == 2, timeout=10, what="a new session")
    # On the new session at once: slack-sdk alone reads it only after closing the old one (3 s).
    ack = slack.socket.deliver(click)
    assert ack is not None and ack.seconds < 2
    wait_until(lambda: ConfirmationRequest.objects.get().status == "approved")
    wait_until(lambda: slack.socket.connections == 1, what="the old session to be closed")
    assert slack.socket.opened == 2


def test_a_slow_decision_is_still_acked_within_3_s_and_completes_afterwards(slack):
    slack.agent.pre_tool_use(TOOL, {"amount": 9})
    click = slack.click_payload(ALICE, "approve")
    release = threading.Event()
    locked = threading.Event()

    def hold_the_request() -> None:
        # Another transaction holds the request's row: the click's decision has to wait for it.
        try:
            with transaction.atomic():
                ConfirmationRequest.objects.select_for_update().get()
                locked.set()
                release.wait(timeout=WAIT)
        finally:
            connection.close()

    holder = threading.Thread(target=hold_the_request)
    holder.start()
    try:
        assert locked.wait(timeout=WAIT)
        ack = slack.socket.deliver(click)
    finally:
        release.set()
        holder.join()

    assert ack is not None and ack.seconds < 3 and ack.payload is None
    wait_until(lambda: ConfirmationRequest.objects.get().status == "approved", what="the click to complete")
    assert ApproverResponse.objects.count() == 1


def test_two_connection_processes_decide_a_click_delivered_to_both_exactly_once(
    fake_slack, socket_mode, live_gateway, celery_worker, background
):
    configure(fake_slack)
    slack = SocketModeSlack(fake_slack, socket_mode, make_agent_client(live_gateway, "purchasing-bot"))
    with running_connections(process="gw-a:1"), running_connections(process="gw-b:2"):
        wait_until(
            lambda: connection_state("ops-slack", "gw-a:1") == connection_state("ops-slack", "gw-b:2") == "connected"
        )
        assert socket_mode.connections == 2
        confirmation_id = slack.agent.pre_tool_use(TOOL, {"amount": 3}).json()["confirmation_id"]
        click = slack.click_payload(ALICE, "approve")

        acks = [background(socket_mode.deliver, click, envelope_id="env-both", session=i) for i in (0, 1)]

        assert all(a.result(timeout=WAIT) is not None for a in acks)
        wait_until(slack.card_updates, what="the card to be redrawn")
    assert ApproverResponse.objects.count() == 1
    assert event_kinds(confirmation_id) == ["created", "card_posted", "approved"]
    assert len(slack.card_updates()) == 1


def test_the_http_callback_url_of_a_socket_mode_channel_refuses_every_request(fake_slack):
    configure(fake_slack)

    response = Client().post("/channels/ops-slack/callback", data=b"payload=%7B%7D", content_type="application/x-www-form-urlencoded")

    assert response.status_code == 403
    assert "Socket Mode" in response.json()["error"]["message"]
