"""Slack end to end: the gateway over real HTTP, a real Celery worker, PostgreSQL and FakeSlack.

An agent asks over HTTP; the worker posts the card through slack-sdk to
FakeSlack; an approver's click arrives as a signed interactivity request
POSTed to /channels/ops-slack/callback; the worker redraws the card
(chat.update) and sends the ephemeral notes to the click's response_url,
which FakeSlack also serves. Nothing of ours is mocked.
"""

from __future__ import annotations

import math
import copy
import dataclasses
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client

from approvals import services
from approvals.models import (
    ApproverResponse,
    CallbackReceipt,
    Channel,
    ConfirmationEvent,
    ConfirmationRequest,
    Outbox,
)
from approvals.tasks import relay_outbox
from gateway_contract import sign_confirmation_id
from tests.conftest import AgentClient, apply_config, make_agent_client
from tests.fakes.slack_api import (
    FakeSlack,
    RecordedRequest,
    block_actions_payload,
    form_body,
    signed_slack_request,
    view_submission_payload,
)

from tests.support import wait_until

pytestmark = pytest.mark.django_db(transaction=True)

SIGNING_SECRET = "e2e0f9d8c7b6a5f4e3d2c1b0a9f8e7d6"
BOT_TOKEN = "xoxb-1111-2222-e2eTokenValue"
SLACK_CHANNEL_ID = "C0APPROVALS"
TOOL = "oa__purchase_pay"
WAIT = 20.0  # seconds any one step may take on a busy machine before the test fails


@dataclasses.dataclass(frozen=True)
class SlackUser:
    id: str
    name: str


ALICE = SlackUser("U0ALICE", "alice")
BOB = SlackUser("U0BOB", "bob")
MALLORY = SlackUser("U0MALLORY", "mallory")  # a member of the channel who is not an approver


def configure(fake_slack: FakeSlack, *, timeout_seconds: int = 1800, gate_keys: str = "") -> None:
    """The Slack channel and purchasing-bot's gate on TOOL; `gate_keys`: more of the gate's keys, as YAML lines."""
    apply_config(
        f"""
channels:
  - name: ops-slack
    kind: slack
    bot_token: {BOT_TOKEN}
    signing_secret: {SIGNING_SECRET}
    channel_id: {SLACK_CHANNEL_ID}
    api_base_url: {fake_slack.base_url}
agents:
  - name: purchasing-bot
    hooks:
      - kind: approval_gate
        name: finance-gate
        tools: ["{TOOL}"]
        channel: ops-slack
        approvers: ["{ALICE.id}", "{BOB.id}"]
        timeout_seconds: {timeout_seconds}
{gate_keys}"""
    )


@pytest.fixture
def slack_agent(fake_slack: FakeSlack, live_gateway, celery_worker) -> AgentClient:
    """purchasing-bot, whose oa__purchase_pay needs alice's or bob's approval in #approvals."""
    configure(fake_slack)
    return make_agent_client(live_gateway, "purchasing-bot")


@pytest.fixture
def background() -> Iterator[Callable[..., Future]]:
    """Run a blocking call (an agent waiting for its decision) in a thread."""
    with ThreadPoolExecutor(max_workers=2, thread_name_prefix="waiting-agent") as pool:
        yield pool.submit




@dataclasses.dataclass
class PostedCard:
    """The approval message as FakeSlack holds it."""

    request: RecordedRequest  # the chat.postMessage call
    channel: str
    ts: str

    def message(self, fake_slack: FakeSlack) -> dict[str, Any]:
        return copy.deepcopy(fake_slack.messages[(self.channel, self.ts)])

    def button(self, action_id: str) -> dict[str, Any]:
        (actions,) = [b for b in self.request.json["blocks"] if b["type"] == "actions"]
        (button,) = [e for e in actions["elements"] if e["action_id"] == action_id]
        return button


def posted_card(fake_slack: FakeSlack) -> PostedCard:
    """Wait for the worker to post the one card and to record the delivery, and return the card."""

    def card_posted() -> list[tuple[str, str]]:
        return list(fake_slack.messages)

    def delivery_recorded() -> bool:
        # Slack has the message a moment before the worker writes down how the post went.
        rows = Outbox.objects.filter(kind="card")
        return rows.exists() and not rows.filter(status="pending").exists()

    ((channel, ts),) = wait_until(card_posted, what="Slack to have the card")
    wait_until(delivery_recorded, what="the worker to record the card's delivery")
    successes = [c for c in fake_slack.calls("chat.postMessage") if c.json.get("channel") == channel]
    return PostedCard(request=successes[-1], channel=channel, ts=ts)


def block_text(blocks: list[dict[str, Any]]) -> str:
    """Every text the blocks show, one per line (section text, fields, context)."""
    texts = []
    for block in blocks:
        if "text" in block:
            texts.append(block["text"]["text"])
        texts.extend(field["text"] for field in block.get("fields", []))
        texts.extend(element.get("text", "") for element in block.get("elements", []) if block["type"] == "context")
    return "\n".join(texts)


def post_interaction(live_gateway, payload: dict[str, Any], *, timestamp: int | None = None) -> httpx.Response:
    """POST an interactivity request to the gateway exactly as Slack does: form body, signed headers."""
    body = form_body(payload)
    signature = signed_slack_request(SIGNING_SECRET, body, timestamp=timestamp)
    headers = {"Content-Type": "application/x-www-form-urlencoded", **signature}
    return httpx.post(f"{live_gateway.url}/channels/ops-slack/callback", content=body, headers=headers, timeout=WAIT)


def click(
    live_gateway, fake_slack: FakeSlack, card: PostedCard, user: SlackUser, action_id: str, *, note_to: str = "note"
) -> httpx.Response:
    """`user` presses a button on the card as Slack shows it now."""
    payload = block_actions_payload(
        action_id=action_id,
        value=card.button(action_id)["value"],
        user_id=user.id,
        user_name=user.name,
        trigger_id=f"trigger.{user.name}.{action_id}",
        response_url=fake_slack.response_url(note_to),
        channel_id=card.channel,
        message_ts=card.ts,
    )
    payload["message"] = card.message(fake_slack)
    return post_interaction(live_gateway, payload)


def notes_to(fake_slack: FakeSlack, name: str) -> list[dict[str, Any]]:
    """The messages the gateway posted to the response_url named `name`."""
    return [c.json for c in fake_slack.calls("response_url") if c.path == f"/response_url/{name}"]


def event_kinds(confirmation_id: str) -> list[str]:
    return list(ConfirmationEvent.objects.filter(confirmation_id=confirmation_id).values_list("kind", flat=True))


def card_updates(fake_slack: FakeSlack, card: PostedCard) -> list[dict[str, Any]]:
    updates = [c.json for c in fake_slack.calls("chat.update")]
    return [u for u in updates if (u["channel"], u["ts"]) == (card.channel, card.ts)]


def assert_buttons_gone(fake_slack: FakeSlack, card: PostedCard) -> dict[str, Any]:
    message = card.message(fake_slack)
    assert "edited" in message
    assert [b for b in message["blocks"] if b["type"] == "actions"] == []
    return message


# --------------------------------------------------------------------------- the card


def test_the_card_shows_the_call_and_carries_the_approve_and_reject_buttons(slack_agent, fake_slack):
    memo = "Quarterly restock of paper & toner, see <https://evil.example|this>. " * 20
    answer = slack_agent.pre_tool_use(TOOL, {"amount": 80000, "memo": memo}, user_id="u-42").json()
    assert answer["decision"] == "pending"

    card = posted_card(fake_slack)

    confirmation = ConfirmationRequest.objects.get(pk=answer["confirmation_id"])
    call = card.request
    assert call.headers["Authorization"] == f"Bearer {BOT_TOKEN}"
    assert call.json["channel"] == SLACK_CHANNEL_ID
    assert call.json["text"] == "Approval needed: purchasing-bot wants to run oa__purchase_pay"
    blocks = call.json["blocks"]
    assert blocks[0] == {"type": "header", "text": {"type": "plain_text", "text": "Approval needed", "emoji": True}}
    text = block_text(blocks)
    url = f"http://testserver.invalid/approvals/{confirmation.pk}/"
    assert "*Agent*\npurchasing-bot" in text
    assert "*Tool*\n`oa__purchase_pay`" in text
    assert "*End user*\nu-42" in text
    assert "amount = 80000" in text
    assert "memo = Quarterly restock of paper &amp; toner, see &lt;https://evil.example|this&gt;." in text
    assert f"_Arguments shortened — <{url}|see them all>_" in text
    assert "*Why:* oa__purchase_pay needs approval (finance-gate) _(hook `finance-gate`)_" in text
    assert f"*Expires:* <!date^{int(confirmation.expires_at.timestamp())}^" in text
    assert f"(<!date^{int(confirmation.expires_at.timestamp())}^{{ago}}|" in text  # the time left, drawn live
    assert "*Approvers:* <@U0ALICE>, <@U0BOB>" in text
    assert f"<{url}|Open in browser>" in text

    approve, reject = card.button("approve"), card.button("reject")
    assert (approve["style"], reject["style"]) == ("primary", "danger")
    assert approve["value"] == reject["value"] == sign_confirmation_id(str(confirmation.pk))
    assert reject["confirm"]["confirm"]["text"] == "Reject"
    assert "confirm" not in approve

    row = Outbox.objects.get(kind="card")
    assert (row.status, row.message_ref) == ("sent", {"channel": SLACK_CHANNEL_ID, "ts": card.ts})
    assert event_kinds(answer["confirmation_id"]) == ["created", "card_posted"]


# The approve, decline, late-click, expiry and cancel scenarios every channel shares are in
# tests/channels_ext/slack/test_contract.py (tests/channels_ext/contract.py); here: what is Slack's own.


# --------------------------------------------------------------------------- reject with a reason


def test_reject_opens_a_reason_modal_and_the_agent_receives_the_reason(
    slack_agent, fake_slack, live_gateway, background
):
    waiting = background(slack_agent.pre_tool_use, TOOL, {"amount": 80000}, wait_seconds=30)
    card = posted_card(fake_slack)

    response = click(live_gateway, fake_slack, card, BOB, "reject")

    assert response.status_code == 200
    (opened,) = fake_slack.calls("views.open")
    assert opened.json["trigger_id"] == "trigger.bob.reject"
    view = opened.json["view"]
    assert (view["type"], view["callback_id"]) == ("modal", "reject_reason")
    assert ConfirmationRequest.objects.get().status == "pending"  # the click alone decides nothing
    assert ApproverResponse.objects.count() == 0

    submission = view_submission_payload(
        private_metadata=view["private_metadata"], reason="Over budget this quarter", user_id=BOB.id, user_name=BOB.name
    )
    submitted = post_interaction(live_gateway, submission)

    assert (submitted.status_code, submitted.json()) == (200, {"response_action": "clear"})
    answer = waiting.result(timeout=WAIT).json()
    assert (answer["decision"], answer["reason"]) == ("deny", "rejected by bob (slack:U0BOB): Over budget this quarter")
    confirmation = ConfirmationRequest.objects.get()
    assert (confirmation.status, confirmation.decision_reason) == ("rejected", "Over budget this quarter")
    assert list(ApproverResponse.objects.values_list("approver", "decision", "reason")) == [
        (f"slack:{BOB.id}", "reject", "Over budget this quarter")
    ]

    wait_until(lambda: card_updates(fake_slack, card))
    message = assert_buttons_gone(fake_slack, card)
    assert message["text"].startswith(f"❌ Rejected by <@{BOB.id}> at <!date^")
    assert "— Over budget this quarter" in block_text(message["blocks"])


def test_a_reject_form_sent_without_a_reason_is_refused_in_the_form_and_decides_nothing(
    slack_agent, fake_slack, live_gateway
):
    slack_agent.pre_tool_use(TOOL, {"amount": 1})
    card = posted_card(fake_slack)
    click(live_gateway, fake_slack, card, BOB, "reject")
    (opened,) = fake_slack.calls("views.open")

    submission = view_submission_payload(private_metadata=opened.json["view"]["private_metadata"], reason="   ")
    response = post_interaction(live_gateway, submission)

    assert response.json() == {
        "response_action": "errors",
        "errors": {"reason": "Please say why you are rejecting this call."},
    }
    assert ConfirmationRequest.objects.get().status == "pending"
    assert ApproverResponse.objects.count() == 0


# --------------------------------------------------------------------------- clicks that change nothing


def test_a_non_approvers_clicks_change_nothing_and_they_are_told_why(slack_agent, fake_slack, live_gateway):
    confirmation_id = slack_agent.pre_tool_use(TOOL, {"amount": 80000}).json()["confirmation_id"]
    card = posted_card(fake_slack)

    approve = click(live_gateway, fake_slack, card, MALLORY, "approve", note_to="mallory-approve")
    reject = click(live_gateway, fake_slack, card, MALLORY, "reject", note_to="mallory-reject")

    assert (approve.status_code, reject.status_code) == (200, 200)
    why = {
        "response_type": "ephemeral",
        "replace_original": False,
        "text": "You are not one of the approvers of this request.",
    }
    assert wait_until(lambda: notes_to(fake_slack, "mallory-approve")) == [why]
    assert wait_until(lambda: notes_to(fake_slack, "mallory-reject")) == [why]
    assert fake_slack.calls("views.open") == []  # no reason form for someone who cannot reject
    confirmation = ConfirmationRequest.objects.get()
    assert (confirmation.status, confirmation.decided_by, confirmation.decided_at) == ("pending", "", None)
    assert ApproverResponse.objects.count() == 0
    assert event_kinds(confirmation_id) == ["created", "card_posted", "refused_click", "refused_click"]
    refused = ConfirmationEvent.objects.filter(kind="refused_click")
    assert {(e.actor, e.channel) for e in refused} == {(f"slack:{MALLORY.id}", "ops-slack")}  # both clicks in the trail
    assert fake_slack.calls("chat.update") == []


# --------------------------------------------------------------------------- signatures


def _unsigned(body: bytes, headers: dict[str, str]) -> tuple[bytes, dict[str, str]]:
    return body, {}


def _no_signature(body: bytes, headers: dict[str, str]) -> tuple[bytes, dict[str, str]]:
    return body, {"X-Slack-Request-Timestamp": headers["X-Slack-Request-Timestamp"]}


def _no_timestamp(body: bytes, headers: dict[str, str]) -> tuple[bytes, dict[str, str]]:
    return body, {"X-Slack-Signature": headers["X-Slack-Signature"]}


def _timestamp_not_a_number(body: bytes, headers: dict[str, str]) -> tuple[bytes, dict[str, str]]:
    return body, {**headers, "X-Slack-Request-Timestamp": "abc"}


def _signed_301_seconds_ago(body: bytes, headers: dict[str, str]) -> tuple[bytes, dict[str, str]]:
    return body, signed_slack_request(SIGNING_SECRET, body, timestamp=int(time.time()) - 301)


def _signed_301_seconds_ahead(body: bytes, headers: dict[str, str]) -> tuple[bytes, dict[str, str]]:
    return body, signed_slack_request(SIGNING_SECRET, body, timestamp=math.ceil(time.time()) + 301)


def _signed_with_another_secret(body: bytes, headers: dict[str, str]) -> tuple[bytes, dict[str, str]]:
    return body, signed_slack_request("not-" + SIGNING_SECRET, body)


def _body_changed_after_signing(body: bytes, headers: dict[str, str]) -> tuple[bytes, dict[str, str]]:
    # Slack signed Mallory's own click; she replays it with Alice's id in place of hers.
    mallorys_click = body.replace(ALICE.id.encode(), MALLORY.id.encode()).replace(b"alice", b"mallory")
    assert mallorys_click != body
    return body, signed_slack_request(SIGNING_SECRET, mallorys_click)


def _signature_not_hex(body: bytes, headers: dict[str, str]) -> tuple[bytes, dict[str, str]]:
    return body, {**headers, "X-Slack-Signature": "v0=" + "z" * 64}


def _signature_of_another_version(body: bytes, headers: dict[str, str]) -> tuple[bytes, dict[str, str]]:
    return body, {**headers, "X-Slack-Signature": headers["X-Slack-Signature"].replace("v0=", "v1=")}


def _signature_empty(body: bytes, headers: dict[str, str]) -> tuple[bytes, dict[str, str]]:
    return body, {**headers, "X-Slack-Signature": ""}


BAD_SIGNATURES = [
    _unsigned,
    _no_signature,
    _no_timestamp,
    _timestamp_not_a_number,
    _signed_301_seconds_ago,
    _signed_301_seconds_ahead,
    _signed_with_another_secret,
    _body_changed_after_signing,
    _signature_not_hex,
    _signature_of_another_version,
    _signature_empty,
]


@pytest.mark.parametrize("tamper", BAD_SIGNATURES, ids=lambda f: f.__name__.strip("_"))
def test_a_callback_that_is_not_signed_by_slack_is_refused_with_401_and_writes_nothing(
    slack_agent, fake_slack, live_gateway, caplog, tamper
):
    confirmation_id = slack_agent.pre_tool_use(TOOL, {"amount": 80000}).json()["confirmation_id"]
    card = posted_card(fake_slack)
    # Alice's approval: had the gateway taken it, the request would now be approved.
    payload = block_actions_payload(
        action_id="approve",
        value=card.button("approve")["value"],
        user_id=ALICE.id,
        user_name=ALICE.name,
        response_url=fake_slack.response_url("refused"),
        channel_id=card.channel,
        message_ts=card.ts,
    )
    alices_click = form_body(payload)
    body, headers = tamper(alices_click, signed_slack_request(SIGNING_SECRET, alices_click))

    response = httpx.post(
        f"{live_gateway.url}/channels/ops-slack/callback",
        content=body,
        headers={"Content-Type": "application/x-www-form-urlencoded", **headers},
        timeout=WAIT,
    )

    assert response.status_code == 401
    assert response.json()["error"]["code"] == "callback_refused"
    confirmation = ConfirmationRequest.objects.get()
    assert (confirmation.status, confirmation.decided_by) == ("pending", "")
    assert ApproverResponse.objects.count() == 0
    assert CallbackReceipt.objects.count() == 0
    assert event_kinds(confirmation_id) == ["created", "card_posted"]
    assert fake_slack.calls("views.open") == [] and fake_slack.calls("response_url") == []
    assert "callback refused on channel ops-slack" in caplog.text
    assert SIGNING_SECRET not in caplog.text
    signature = headers.get("X-Slack-Signature", "")
    assert len(signature) < 4 or signature not in caplog.text


def test_a_correctly_signed_click_299_seconds_old_is_still_accepted(slack_agent, fake_slack, live_gateway):
    slack_agent.pre_tool_use(TOOL, {"amount": 1})
    card = posted_card(fake_slack)
    payload = block_actions_payload(
        action_id="approve",
        value=card.button("approve")["value"],
        user_id=ALICE.id,
        user_name=ALICE.name,
        channel_id=card.channel,
        message_ts=card.ts,
    )

    response = post_interaction(live_gateway, payload, timestamp=math.ceil(time.time()) - 299)

    assert response.status_code == 200
    assert ConfirmationRequest.objects.get().status == "approved"


# --------------------------------------------------------------------------- delivery failures


def test_a_rate_limited_post_is_retried_after_retry_after_and_delivers_exactly_one_card(slack_agent, fake_slack):
    fake_slack.fail_next(
        "chat.postMessage", status=429, body={"ok": False, "error": "ratelimited"}, headers={"Retry-After": "1"}
    )

    confirmation_id = slack_agent.pre_tool_use(TOOL, {"amount": 80000}).json()["confirmation_id"]
    card = posted_card(fake_slack)

    first, second = fake_slack.calls("chat.postMessage")
    assert first.json == second.json
    assert second is card.request
    row = Outbox.objects.get(kind="card")
    # Sent: every post starts by claiming a *pending* row, so no duplicate can follow. Neither
    # beat's relay nor another run of the delivery task posts it again.
    assert row.status == "sent"
    assert services.outbox_due_ids() == []
    assert relay_outbox.apply().get() == 0
    assert services.outbox_deliver(outbox_id=row.pk).sent is False
    assert len(fake_slack.calls("chat.postMessage")) == 2
    assert list(fake_slack.messages) == [(card.channel, card.ts)]
    assert event_kinds(confirmation_id) == ["created", "card_posted"]
    assert Channel.objects.get(name="ops-slack").last_error == ""


def test_a_rate_limit_that_outlasts_the_sdk_retries_is_retried_by_the_delivery_task(slack_agent, fake_slack):
    # slack-sdk tries three times (two rate-limit retries); the outbox task waits Retry-After and tries again.
    fake_slack.fail_next(
        "chat.postMessage",
        status=429,
        body={"ok": False, "error": "ratelimited"},
        headers={"Retry-After": "1"},
        times=3,
    )

    confirmation_id = slack_agent.pre_tool_use(TOOL, {"amount": 80000}).json()["confirmation_id"]
    card = posted_card(fake_slack)

    assert len(fake_slack.calls("chat.postMessage")) == 4
    row = wait_until(lambda: Outbox.objects.filter(kind="card", status="sent").first())
    assert row.attempts == 2
    assert row.message_ref == {"channel": card.channel, "ts": card.ts}
    assert len(fake_slack.messages) == 1
    assert event_kinds(confirmation_id) == ["created", "card_posted"]


def test_a_server_error_is_retried_with_backoff_and_delivers_exactly_one_card(slack_agent, fake_slack):
    fake_slack.fail_next("chat.postMessage", status=500, body="<html>Internal Server Error</html>")

    confirmation_id = slack_agent.pre_tool_use(TOOL, {"amount": 80000}).json()["confirmation_id"]
    posted_card(fake_slack)

    assert len(fake_slack.calls("chat.postMessage")) == 2
    row = wait_until(lambda: Outbox.objects.filter(kind="card", status="sent").first())
    assert (row.attempts, row.last_error) == (2, "")
    assert len(fake_slack.messages) == 1
    assert event_kinds(confirmation_id) == ["created", "card_posted"]


@pytest.mark.parametrize("error", ["channel_not_found", "not_in_channel", "invalid_auth", "token_revoked"])
def test_a_permanent_slack_error_denies_the_waiting_agent_and_shows_in_the_admin(
    slack_agent, fake_slack, background, error
):
    fake_slack.fail_next("chat.postMessage", status=200, body={"ok": False, "error": error})

    waiting = background(slack_agent.pre_tool_use, TOOL, {"amount": 80000}, wait_seconds=30)

    answer = waiting.result(timeout=WAIT).json()
    failure = f"slack chat.postMessage failed: {error}"
    assert answer["decision"] == "deny"
    assert answer["reason"] == f"the approval card could not be delivered to channel ops-slack: {failure}"
    assert len(fake_slack.calls("chat.postMessage")) == 1  # permanent: never retried
    confirmation = ConfirmationRequest.objects.get()
    assert (confirmation.status, confirmation.decided_by) == ("rejected", "gateway")
    assert Outbox.objects.get(kind="card").status == "failed"
    assert event_kinds(answer["confirmation_id"]) == ["created", "card_failed", "rejected"]
    channel = Channel.objects.get(name="ops-slack")
    assert channel.last_error == failure and channel.last_error_at is not None

    operator = User.objects.create_user("operator", is_staff=True)
    operator.user_permissions.add(Permission.objects.get(codename="view_channel", content_type__app_label="approvals"))
    admin = Client()
    admin.force_login(operator)
    page = admin.get("/admin/approvals/channel/")

    assert page.status_code == 200
    assert failure in page.content.decode()
    assert BOT_TOKEN not in page.content.decode() and SIGNING_SECRET not in page.content.decode()


# --------------------------------------------------------------------------- the worker


def test_a_worker_started_from_the_gateway_app_knows_the_slack_tasks():
    """`celery -A gateway worker` must register the response_url task before consuming (a fresh process)."""
    script = (
        "from gateway.celery import app\n"
        "app.loader.import_default_modules()\n"
        "print(' '.join(sorted(app.tasks)))\n"
    )
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings"}

    root = Path(__file__).resolve().parents[3]
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=root, env=env, capture_output=True, text=True, timeout=60
    )

    assert done.returncode == 0, done.stderr
    assert "channels_ext.slack.tasks.send_response_url" in done.stdout.split()

