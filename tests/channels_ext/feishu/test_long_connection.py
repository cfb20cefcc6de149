"""Feishu over the long connection, end to end: no public URL, no callback to the gateway.

The gateway over real HTTP for the agent, a real Celery worker, PostgreSQL,
FakeFeishu for the Open API and FakeLongConnection for the long connection
(tests/fakes/feishu_ws.py). The connection is held by the runner of
`manage.py channel_connections` with lark-oapi's real WebSocket client: it asks
the endpoint, connects, pings, and answers each data frame. Clicks are
`card.action.trigger` events FakeLongConnection sends, in EVENT frames (the
supported route) and in CARD frames (which lark-oapi alone drops unanswered).
"""

from __future__ import annotations

import dataclasses
import json
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import pytest
from django.db import connection, transaction
from django.test import Client

from approvals.models import ApproverResponse, CallbackReceipt, ConfirmationEvent, ConfirmationRequest, Outbox
from channels_ext.models import ChannelConnection
from tests.channels_ext.connections_support import connection_state, running_connections
from tests.channels_ext.feishu.test_end_to_end import button_values, click_payload
from tests.conftest import AgentClient, apply_config, make_agent_client
from tests.fakes.feishu_api import MESSAGES_PATH, FakeFeishu, FakeMessage, unique_app_id
from tests.fakes.feishu_ws import FakeLongConnection
from tests.support import wait_until

pytestmark = pytest.mark.django_db(transaction=True)

CHANNEL = "finance-feishu"
CHAT_ID = "oc_5ad11d72b830411d72b836c20"
APP_SECRET = "app-secret-long-connection"
APPROVER = "ou_3c14f3a59eaf2825dbe25359f15211a2"
OUTSIDER = "ou_0d1e2f3a4b5c6d7e8f9a0b1c2d3e4f5a"
TOOL = "oa__purchase_pay"
WAIT = 20.0


def configure(fake: FakeFeishu, app_id: str) -> None:
    # No verification_token or encrypt_key: the connection itself authenticates what arrives.
    apply_config(
        f"""
channels:
  - name: {CHANNEL}
    kind: feishu
    mode: long_connection
    app_id: {app_id}
    app_secret: {APP_SECRET}
    chat_id: {CHAT_ID}
    api_base_url: {fake.domain}
agents:
  - name: purchasing-bot
    hooks:
      - kind: approval_gate
        name: finance-gate
        tools: ["{TOOL}"]
        channel: {CHANNEL}
        approvers: ["{APPROVER}"]
        timeout_seconds: 1800
"""
    )


@pytest.fixture
def background() -> Iterator[Callable[..., Future]]:
    with ThreadPoolExecutor(max_workers=2, thread_name_prefix="test-background") as pool:
        yield pool.submit


@dataclasses.dataclass
class LongConnectionFeishu:
    fake: FakeFeishu
    ws: FakeLongConnection
    agent: AgentClient

    def posted_message(self) -> FakeMessage:
        """The one card FakeFeishu received, once the worker has recorded it as sent."""
        wait_until(lambda: Outbox.objects.filter(kind="card", status="sent").exists(), what="the card to be sent")
        [message] = self.fake.sent_messages()
        return message

    def click(self, decision: str, *, open_id: str = APPROVER, reason: str | None = None, event_id: str | None = None):
        """The `card.action.trigger` event a click on the posted card's `decision` button makes."""
        value = button_values(self.posted_message().card)[decision]
        return click_payload(value, open_id=open_id, reason=reason, event_id=event_id, token="")

    def patches(self, message: FakeMessage) -> list[dict[str, Any]]:
        return [json.loads(c.json()["content"]) for c in self.fake.calls("PATCH", f"{MESSAGES_PATH}/{message.message_id}")]

    def patched_title(self, message: FakeMessage, title: str) -> dict[str, Any]:
        def patched() -> dict[str, Any] | None:
            cards = self.patches(message)
            return cards[-1] if cards and cards[-1]["header"]["title"]["content"] == title else None

        return wait_until(patched, what=f"the card to be redrawn as {title!r}")


@pytest.fixture
def feishu(fake_feishu: FakeFeishu, live_gateway, celery_worker) -> Iterator[LongConnectionFeishu]:
    """finance-feishu on the long connection, held and open; an agent gated on it."""
    app_id = unique_app_id()  # lark-oapi caches tenant tokens per app_id, process-wide
    ws = FakeLongConnection(app_id, APP_SECRET).start()
    fake_feishu.long_connection = ws
    configure(fake_feishu, app_id)
    try:
        with running_connections():
            wait_until(lambda: connection_state(CHANNEL) == "connected", what="the long connection")
            yield LongConnectionFeishu(fake_feishu, ws, make_agent_client(live_gateway, "purchasing-bot"))
            wait_until(lambda: not Outbox.objects.filter(status="pending").exists(), what="the outbox to drain")
    finally:
        ws.stop()


def event_kinds(confirmation_id: str) -> list[str]:
    return list(ConfirmationEvent.objects.filter(confirmation_id=confirmation_id).values_list("kind", flat=True))


# --------------------------------------------------------------------------- clicks


def test_a_click_in_an_event_frame_is_answered_within_3_s_with_a_toast_and_the_decided_card(feishu, background):
    waiting = background(feishu.agent.pre_tool_use, TOOL, {"amount": 80000}, wait_seconds=30)
    click = feishu.click("approve")

    answer = feishu.ws.deliver(click, frame_type="event")

    assert answer is not None and answer.code == 200 and answer.seconds < 3
    assert answer.data["toast"] == {"type": "success", "content": "Approved."}
    assert answer.data["card"]["type"] == "raw"
    assert answer.data["card"]["data"]["header"]["title"]["content"] == "Approved"
    assert "biz_rt" in answer.headers  # the handler's time, as lark-oapi reports it
    result = waiting.result(timeout=WAIT).json()
    assert (result["decision"], result["reason"]) == ("allow", f"approved by feishu:{APPROVER}")
    assert list(ApproverResponse.objects.values_list("approver", "decision")) == [(f"feishu:{APPROVER}", "approve")]
    feishu.patched_title(feishu.posted_message(), "Approved")  # and the card is updated afterwards


def test_a_click_in_a_card_frame_is_answered_too_though_lark_oapi_alone_drops_those(feishu, background):
    waiting = background(feishu.agent.pre_tool_use, TOOL, {"amount": 80000}, wait_seconds=30)
    click = feishu.click("reject", reason="Not this quarter")

    answer = feishu.ws.deliver(click, frame_type="card")

    assert answer is not None and answer.code == 200 and answer.seconds < 3
    assert answer.data["toast"] == {"type": "success", "content": "Rejected."}
    result = waiting.result(timeout=WAIT).json()
    assert (result["decision"], result["reason"]) == ("deny", f"rejected by feishu:{APPROVER}: Not this quarter")
    feishu.patched_title(feishu.posted_message(), "Rejected")


def test_a_redelivered_event_changes_nothing(feishu):
    confirmation_id = feishu.agent.pre_tool_use(TOOL, {"amount": 5}).json()["confirmation_id"]
    click = feishu.click("approve", event_id="ev-redelivered-1")
    message = feishu.posted_message()
    first = feishu.ws.deliver(click)
    feishu.patched_title(message, "Approved")
    wait_until(lambda: not Outbox.objects.filter(status="pending").exists(), what="the outbox to drain")

    again = feishu.ws.deliver(click)  # the same event, in a new frame
    as_card = feishu.ws.deliver(click, frame_type="card")

    assert first is not None and again is not None and as_card is not None
    assert again.data["toast"] == as_card.data["toast"] == {"type": "info", "content": "This click was already handled."}
    assert ConfirmationRequest.objects.get().status == "approved"
    assert ApproverResponse.objects.count() == 1
    assert event_kinds(confirmation_id) == ["created", "card_posted", "approved"]
    assert list(CallbackReceipt.objects.values_list("channel", "key")) == [(CHANNEL, "ev-redelivered-1")]
    assert len(feishu.patches(message)) == 1


def test_clicks_that_cannot_decide_change_nothing_and_the_toast_says_why(feishu):
    confirmation_id = feishu.agent.pre_tool_use(TOOL, {"amount": 1}).json()["confirmation_id"]
    forged = click_payload({"decision": "approve", "confirmation_id": "not-signed"}, open_id=APPROVER, token="")

    outsider = feishu.ws.deliver(feishu.click("approve", open_id=OUTSIDER))
    unsigned = feishu.ws.deliver(forged)

    assert outsider is not None and outsider.data["toast"] == {
        "type": "warning",
        "content": "You are not one of the approvers of this request.",
    }
    assert unsigned is not None and unsigned.code == 200
    assert unsigned.data == {
        "toast": {"type": "error", "content": "This click cannot be handled: the button value is not one this gateway signed"}
    }
    assert ConfirmationRequest.objects.get().status == "pending"
    assert event_kinds(confirmation_id) == ["created", "card_posted", "refused_click"]


# --------------------------------------------------------------------------- the connection


def test_the_start_up_self_test_says_card_callbacks_can_arrive(feishu):
    detail = ChannelConnection.objects.get(channel=CHANNEL).detail

    assert detail.startswith("long connection open (conn_id ")
    assert (
        "self-test: lark-oapi 1.7.5 by itself answers event frames (it drops card frames: larksuite/oapi-sdk-python "
        "issue 126); the gateway answers event and card frames: card clicks can be answered"
    ) in detail
    assert feishu.ws.endpoint_calls == 1 and feishu.ws.connections == 1
    wait_until(lambda: feishu.ws.pings >= 1, what="a ping")  # lark-oapi's own ping loop runs


def test_a_dropped_long_connection_is_reestablished_and_a_click_after_it_still_works(feishu, background):
    waiting = background(feishu.agent.pre_tool_use, TOOL, {"amount": 7}, wait_seconds=30)
    click = feishu.click("approve")

    feishu.ws.drop_connections()

    wait_until(lambda: feishu.ws.accepted == 2 and feishu.ws.connections == 1, timeout=10, what="a new session")
    wait_until(lambda: connection_state(CHANNEL) == "connected", what="the runner to record it")
    assert feishu.ws.endpoint_calls == 2
    answer = feishu.ws.deliver(click)
    assert answer is not None and answer.data["toast"]["content"] == "Approved."
    assert waiting.result(timeout=WAIT).json()["decision"] == "allow"


def test_a_slow_decision_is_answered_within_3_s_and_completes_afterwards(feishu):
    feishu.agent.pre_tool_use(TOOL, {"amount": 9})
    click = feishu.click("approve")
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
        answer = feishu.ws.deliver(click)
    finally:
        release.set()
        holder.join()

    assert answer is not None and answer.code == 200 and answer.seconds < 3
    assert answer.data == {"toast": {"type": "info", "content": "Received; the card will update in a moment."}}
    wait_until(lambda: ConfirmationRequest.objects.get().status == "approved", what="the click to complete")
    feishu.patched_title(feishu.posted_message(), "Approved")


def test_the_http_callback_url_of_a_long_connection_channel_refuses_every_request(fake_feishu):
    configure(fake_feishu, unique_app_id())

    response = Client().post(f"/channels/{CHANNEL}/callback", data={"challenge": "x"}, content_type="application/json")

    assert response.status_code == 403
    assert "long connection" in response.json()["error"]["message"]
