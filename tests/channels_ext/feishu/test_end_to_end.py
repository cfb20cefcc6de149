"""Feishu end to end: the live gateway over HTTP, a real Celery worker, FakeFeishu, real callbacks.

Each test runs the path a deployment runs. An agent asks over HTTP; the worker
sends the card through lark-oapi to FakeFeishu; an approver's click arrives as
Feishu sends it (encrypted, signed) at `/channels/<name>/callback`, carrying
the button value read back from the card FakeFeishu received; the agent hears
the outcome; state changes patch the sent card.
"""

from __future__ import annotations

import dataclasses
import json
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from approvals.models import (
    ApproverResponse,
    CallbackReceipt,
    Channel,
    ConfirmationEvent,
    ConfirmationRequest,
    Outbox,
)
from gateway_contract import unsign_confirmation_id
from channels_ext.feishu.cards import escape
from tests.channels_ext.feishu.test_cards import interactive_elements, markdown_of
from tests.conftest import AgentClient, apply_config, make_agent_client
from tests.fakes.feishu_api import (
    BOT_NOT_IN_CHAT,
    HTML_502,
    MESSAGES_PATH,
    TOKEN_PATH,
    FakeFeishu,
    FakeMessage,
    card_action_payload,
    encrypted_body,
    load_fixture,
    signed_feishu_headers,
    unique_app_id,
    url_verification_payload,
)

from tests.support import wait_until

pytestmark = pytest.mark.django_db(transaction=True)

CHANNEL = "finance-feishu"
CHAT_ID = "oc_5ad11d72b830411d72b836c20"
APP_SECRET = "app-secret-e2e"
VERIFICATION_TOKEN = "v-verification-token-e2e"
ENCRYPT_KEY = "encrypt-key-from-the-console"
APPROVER = "ou_3c14f3a59eaf2825dbe25359f15211a2"
OTHER_APPROVER = "ou_84aad35d084aa403a838cf73ee18467"
OUTSIDER = "ou_0d1e2f3a4b5c6d7e8f9a0b1c2d3e4f5a"
TOOL = "oa__purchase_pay"
ARGS = {"amount": 80000, "vendor": "ACME Ltd"}
END_USER = "u-42"

# The channel exactly as docs/feishu.md tells people to write it; the agent part is filled per test.
CHANNELS_YAML = """
channels:
  - name: finance-feishu
    kind: feishu
    app_id: ${FEISHU_APP_ID}
    app_secret: ${FEISHU_APP_SECRET}
    verification_token: ${FEISHU_VERIFICATION_TOKEN}
    encrypt_key: ${FEISHU_ENCRYPT_KEY:-}
    chat_id: oc_5ad11d72b830411d72b836c20
    api_base_url: ${FEISHU_API_BASE_URL}
"""


def agents_yaml(timeout_seconds: int, gate_keys: str = "") -> str:
    """purchasing-bot's gate on TOOL; `gate_keys`: more of the gate's keys, as YAML lines."""
    return f"""
agents:
  - name: purchasing-bot
    hooks:
      - kind: approval_gate
        name: finance-gate
        tools: ["{TOOL}"]
        channel: {CHANNEL}
        approvers: ["{APPROVER}", "{OTHER_APPROVER}"]
        timeout_seconds: {timeout_seconds}
{gate_keys}"""




def click_payload(
    value: dict[str, Any],
    *,
    open_id: str = APPROVER,
    reason: str | None = None,
    event_id: str | None = None,
    token: str = VERIFICATION_TOKEN,
) -> dict[str, Any]:
    """The decrypted `card.action.trigger` Feishu sends for a click on a button carrying `value`."""
    return card_action_payload(
        "", value["decision"], token=token, open_id=open_id, reason=reason, event_id=event_id, value=value
    )


def button_values(card: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """decision -> the callback value of the button that sends it, anywhere in the card."""
    values: dict[str, dict[str, Any]] = {}
    for element in interactive_elements(card):
        for behavior in element.get("behaviors", []):
            if behavior.get("type") == "callback":
                values[behavior["value"]["decision"]] = behavior["value"]
    return values


@dataclasses.dataclass
class FeishuDeployment:
    """A Feishu channel on the live gateway, with FakeFeishu behind lark-oapi and a real worker."""

    fake: FakeFeishu
    agent: AgentClient
    callback_url: str
    app_id: str

    def ask(self, **extra: Any) -> httpx.Response:
        return self.agent.pre_tool_use(TOOL, ARGS, user_id=END_USER, **extra)

    def ask_pending(self) -> str:
        answer = self.ask().json()
        assert answer["decision"] == "pending", answer
        return answer["confirmation_id"]

    def posted_message(self) -> FakeMessage:
        """The one card FakeFeishu received, once the worker has recorded it as sent."""
        wait_until(lambda: Outbox.objects.filter(kind="card", status="sent").exists(), what="the card to be sent")
        [message] = self.fake.sent_messages()
        return message

    def settled(self) -> None:
        """Wait until the worker has done every queued card send and redraw."""
        wait_until(lambda: not Outbox.objects.filter(status="pending").exists(), what="the outbox to drain")

    def patched_card(self, message: FakeMessage, title: str) -> dict[str, Any]:
        """The card as last PATCHed onto `message`, once its header says `title`."""
        path = f"{MESSAGES_PATH}/{message.message_id}"

        def patched() -> dict[str, Any] | None:
            calls = self.fake.calls("PATCH", path)
            card = json.loads(calls[-1].json()["content"]) if calls else None
            return card if card and card["header"]["title"]["content"] == title else None

        return wait_until(patched, what=f"a PATCH of {path} showing {title!r}")

    def click(
        self,
        value: dict[str, Any],
        *,
        open_id: str = APPROVER,
        reason: str | None = None,
        event_id: str | None = None,
    ) -> httpx.Response:
        """A click on a button carrying `value`, as Feishu delivers it: encrypted and signed."""
        payload = click_payload(value, open_id=open_id, reason=reason, event_id=event_id)
        return self.post(encrypted_body(ENCRYPT_KEY, payload))

    def post(self, body: bytes, headers: dict[str, str] | None = None) -> httpx.Response:
        """POST a callback body; signed correctly unless `headers` are given."""
        if headers is None:
            headers = signed_feishu_headers(ENCRYPT_KEY, body)
        headers = {"Content-Type": "application/json", **headers}
        return httpx.post(self.callback_url, content=body, headers=headers, timeout=10)


@pytest.fixture
def deploy(
    live_gateway, celery_worker, fake_feishu: FakeFeishu, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Callable[..., FeishuDeployment]]:
    """Apply the Feishu channel and a gate on it; `timeout_seconds` sets the request's deadline."""

    def deploy_(timeout_seconds: int = 1800) -> FeishuDeployment:
        # lark-oapi caches tenant tokens process-wide by app_id: each test gets its own app.
        app_id = unique_app_id()
        monkeypatch.setenv("FEISHU_APP_ID", app_id)
        monkeypatch.setenv("FEISHU_APP_SECRET", APP_SECRET)
        monkeypatch.setenv("FEISHU_VERIFICATION_TOKEN", VERIFICATION_TOKEN)
        monkeypatch.setenv("FEISHU_ENCRYPT_KEY", ENCRYPT_KEY)
        # A trailing slash, as people paste it: the adapter strips it for lark-oapi.
        monkeypatch.setenv("FEISHU_API_BASE_URL", fake_feishu.domain + "/")
        apply_config(CHANNELS_YAML + agents_yaml(timeout_seconds))
        return FeishuDeployment(
            fake=fake_feishu,
            agent=make_agent_client(live_gateway, "purchasing-bot"),
            callback_url=f"{live_gateway.url}/channels/{CHANNEL}/callback",
            app_id=app_id,
        )

    yield deploy_
    # Let the worker finish this test's redraws while FakeFeishu still answers, so none spills into the next test.
    wait_until(lambda: not Outbox.objects.filter(status="pending").exists(), what="the outbox to drain at teardown")


def request_state(confirmation_id: str) -> dict[str, Any]:
    """What a click could change about one request: its decision, the responses and the queued work."""
    confirmation = ConfirmationRequest.objects.get(pk=confirmation_id)
    return {
        "decision": (
            confirmation.status,
            confirmation.decided_by,
            confirmation.decided_at,
            confirmation.decision_reason,
        ),
        "responses": sorted(
            ApproverResponse.objects.filter(confirmation_id=confirmation_id).values_list(
                "approver", "decision", "reason"
            )
        ),
        "outbox": sorted(Outbox.objects.filter(confirmation_id=confirmation_id).values_list("dedupe_key", "status")),
    }


def everything_written(confirmation_id: str) -> dict[str, Any]:
    """`request_state` plus the audit trail and callback receipts: any write at all shows here."""
    return {
        **request_state(confirmation_id),
        "events": list(ConfirmationEvent.objects.order_by("pk").values_list("kind", "actor", "message")),
        "receipts": sorted(CallbackReceipt.objects.values_list("channel", "key")),
    }


def toast_and_card(response: httpx.Response) -> tuple[dict[str, str], dict[str, Any]]:
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("application/json")
    answer = response.json()
    assert answer["card"]["type"] == "raw"
    return answer["toast"], answer["card"]["data"]


# --- the card ----------------------------------------------------------------------


def test_the_card_is_sent_to_the_chat_with_the_request_and_buttons_carrying_the_decision_and_a_signed_id(deploy):
    feishu = deploy()
    confirmation_id = feishu.ask_pending()

    message = feishu.posted_message()

    [token_call] = feishu.fake.calls("POST", TOKEN_PATH)
    assert token_call.json() == {"app_id": feishu.app_id, "app_secret": APP_SECRET}
    [send] = feishu.fake.calls("POST", MESSAGES_PATH)
    assert send.query == {"receive_id_type": "chat_id"}
    body = send.json()
    assert body["receive_id"] == CHAT_ID
    assert body["msg_type"] == "interactive"
    assert 0 < len(body["uuid"]) <= 50  # Feishu's idempotency key
    card = json.loads(body["content"])
    assert card["schema"] == "2.0"
    assert card["config"]["update_multi"] is True
    assert card["header"]["title"]["content"] == "Approval needed"
    markdown = markdown_of(card)
    page_url = feishu.agent.http.get(f"/api/v1/confirmations/{confirmation_id}").json()["url"]
    for expected in (
        "**Agent:** purchasing-bot",
        f"**Tool:** {escape(TOOL)}",
        "- amount: 80000",
        "- vendor: ACME Ltd",
        f"**End user:** {END_USER}",
        f"**Why:** {escape(f'{TOOL} needs approval (finance-gate)')} (hook: finance-gate)",
        "**Expires:** ",
        " min left)",  # the time left as the card was drawn
        f"**Approvers:** <at id={APPROVER}></at> <at id={OTHER_APPROVER}></at>",
        f"[Open the approval page]({page_url})",
    ):
        assert expected in markdown
    values = button_values(card)
    assert set(values) == {"approve", "reject"}
    for decision, value in values.items():
        assert set(value) == {"decision", "confirmation_id"}
        assert value["decision"] == decision
        assert value["confirmation_id"] != confirmation_id  # signed, not the bare id
        assert unsign_confirmation_id(value["confirmation_id"]) == confirmation_id
    assert message.chat_id == CHAT_ID
    assert Outbox.objects.get(kind="card").message_ref == {"message_id": message.message_id, "chat_id": CHAT_ID}


# --- deciding ----------------------------------------------------------------------
# The scenarios every channel shares (late clicks, non-approvers, expiry, cancel) are in
# tests/channels_ext/feishu/test_contract.py (tests/channels_ext/contract.py); here: what is Feishu's own.


def test_an_approvers_click_wakes_the_waiting_agent_with_allow_and_answers_with_a_toast_and_the_decided_card(deploy):
    feishu = deploy()
    answers: list[httpx.Response] = []
    waiting_agent = threading.Thread(target=lambda: answers.append(feishu.ask(wait_seconds=30)))
    waiting_agent.start()
    message = feishu.posted_message()
    assert waiting_agent.is_alive()  # held by the gateway, waiting for a human

    clicked_at = time.monotonic()
    response = feishu.click(button_values(message.card)["approve"])
    answered_in = time.monotonic() - clicked_at
    waiting_agent.join(timeout=5)

    assert not waiting_agent.is_alive(), "the waiting agent was not answered within 5 s of the click"
    [answer] = answers
    assert answer.json()["decision"] == "allow"
    assert answer.json()["reason"] == f"approved by feishu:{APPROVER}"
    assert answered_in < 3  # Feishu shows the clicker an error after 3 s
    toast, card = toast_and_card(response)
    assert toast == {"type": "success", "content": "Approved."}
    assert card["header"]["title"]["content"] == "Approved"
    assert card["header"]["template"] == "green"
    assert interactive_elements(card) == []
    assert f"✅ **Approved** by <at id={APPROVER}></at> at " in markdown_of(card)
    # The message in the chat is redrawn too, for everyone who did not click.
    assert interactive_elements(feishu.patched_card(message, "Approved")) == []


def test_a_reject_with_a_reason_delivers_the_reason_to_the_waiting_agent(deploy):
    feishu = deploy()
    confirmation_id = feishu.ask_pending()
    message = feishu.posted_message()
    waits: list[httpx.Response] = []
    waiting_agent = threading.Thread(target=lambda: waits.append(feishu.agent.wait(confirmation_id, timeout=30)))
    waiting_agent.start()

    response = feishu.click(button_values(message.card)["reject"], reason="Vendor is not on the approved list")
    waiting_agent.join(timeout=5)

    assert not waiting_agent.is_alive(), "the waiting agent was not answered within 5 s of the click"
    [waited] = waits
    assert waited.json()["status"] == "rejected"
    assert waited.json()["reason"] == "Vendor is not on the approved list"
    assert waited.json()["decided_by"] == f"feishu:{APPROVER}"
    toast, card = toast_and_card(response)
    assert toast == {"type": "success", "content": "Rejected."}
    assert card["header"]["template"] == "red"
    assert interactive_elements(card) == []
    assert "— Vendor is not on the approved list" in markdown_of(card)


# --- clicks that change nothing ----------------------------------------------------


def test_a_redelivered_event_with_the_same_event_id_writes_nothing_and_says_it_was_handled(deploy):
    feishu = deploy()
    confirmation_id = feishu.ask_pending()
    message = feishu.posted_message()
    body = encrypted_body(ENCRYPT_KEY, click_payload(button_values(message.card)["approve"], event_id=uuid.uuid4().hex))
    assert toast_and_card(feishu.post(body))[0]["content"] == "Approved."
    feishu.settled()
    before = everything_written(confirmation_id)

    redelivered = feishu.post(body)  # Feishu retries the same event: same body, same header.event_id

    toast, card = toast_and_card(redelivered)
    assert toast == {"type": "info", "content": "This click was already handled."}
    assert interactive_elements(card) == []
    assert everything_written(confirmation_id) == before  # not even an audit event


# --- refused callbacks -------------------------------------------------------------


def wrong_token(value: dict[str, Any]) -> tuple[bytes, dict[str, str]]:
    body = encrypted_body(ENCRYPT_KEY, click_payload(value, token="someone-elses-token"))
    return body, signed_feishu_headers(ENCRYPT_KEY, body)


def bad_signature(value: dict[str, Any]) -> tuple[bytes, dict[str, str]]:
    body = encrypted_body(ENCRYPT_KEY, click_payload(value))
    return body, signed_feishu_headers("another-apps-encrypt-key", body)


def stale_timestamp(value: dict[str, Any]) -> tuple[bytes, dict[str, str]]:
    body = encrypted_body(ENCRYPT_KEY, click_payload(value))
    return body, signed_feishu_headers(ENCRYPT_KEY, body, timestamp=int(time.time()) - 301)


def garbage_ciphertext(value: dict[str, Any]) -> tuple[bytes, dict[str, str]]:
    body = json.dumps({"encrypt": "bm90IGEgcmVhbCBjaXBoZXJ0ZXh0IGF0IGFsbCE="}).encode()
    return body, signed_feishu_headers(ENCRYPT_KEY, body)


@pytest.mark.parametrize("forge", [wrong_token, bad_signature, stale_timestamp, garbage_ciphertext])
def test_a_forged_or_stale_callback_is_refused_with_401_and_nothing_is_written(deploy, forge):
    feishu = deploy()
    confirmation_id = feishu.ask_pending()
    message = feishu.posted_message()
    before = everything_written(confirmation_id)

    response = feishu.post(*forge(button_values(message.card)["approve"]))

    assert response.status_code == 401
    assert response.json()["error"]["code"] == "callback_refused"
    assert everything_written(confirmation_id) == before
    assert ConfirmationRequest.objects.get(pk=confirmation_id).status == "pending"


def test_a_legacy_message_card_callback_is_refused_with_a_pointer_to_the_new_callback(deploy):
    feishu = deploy()
    confirmation_id = feishu.ask_pending()
    message = feishu.posted_message()
    legacy = load_fixture("legacy_card_action.json")
    legacy["action"]["value"] = button_values(message.card)["approve"]
    before = everything_written(confirmation_id)

    response = feishu.post(encrypted_body(ENCRYPT_KEY, legacy))

    assert response.status_code == 400
    assert "card.action.trigger" in response.json()["error"]["message"]
    assert everything_written(confirmation_id) == before


def test_the_encrypted_url_verification_handshake_is_answered_over_http(deploy):
    feishu = deploy()

    response = feishu.post(
        encrypted_body(ENCRYPT_KEY, url_verification_payload(token=VERIFICATION_TOKEN, challenge="c-42")), headers={}
    )

    assert response.status_code == 200
    assert response.json() == {"challenge": "c-42"}


# --- delivery failures -------------------------------------------------------------


def test_a_rate_limited_send_is_retried_after_the_reset_and_delivers_exactly_one_card(deploy):
    feishu = deploy()
    feishu.fake.fail_next(MESSAGES_PATH, method="POST")  # HTTP 429, code 99991400, x-ogw-ratelimit-reset: 1
    feishu.ask_pending()

    message = feishu.posted_message()

    sends = feishu.fake.calls("POST", MESSAGES_PATH)
    assert len(sends) == 2
    assert sends[0].json()["uuid"] == sends[1].json()["uuid"]
    assert feishu.fake.sent_messages() == [message]
    row = Outbox.objects.get(kind="card")
    assert (row.status, row.attempts) == ("sent", 2)
    assert row.message_ref["message_id"] == message.message_id
    assert ConfirmationEvent.objects.filter(kind="card_posted").count() == 1


def test_a_proxy_error_page_in_front_of_feishu_is_retried_and_then_delivers(deploy):
    feishu = deploy()
    feishu.fake.fail_next(MESSAGES_PATH, status=502, body=HTML_502, headers={}, method="POST")
    feishu.ask_pending()

    message = feishu.posted_message()

    assert len(feishu.fake.calls("POST", MESSAGES_PATH)) == 2
    assert feishu.fake.sent_messages() == [message]


def test_a_bot_that_is_not_in_the_chat_fails_the_request_closed_with_a_reason_naming_the_delivery_failure(deploy):
    feishu = deploy()
    feishu.fake.fail_next(MESSAGES_PATH, status=400, body=BOT_NOT_IN_CHAT, headers={}, method="POST")

    answer = feishu.ask(wait_seconds=20).json()

    assert answer["decision"] == "deny"
    assert answer["reason"].startswith(f"the approval card could not be delivered to channel {CHANNEL}: ")
    assert "code 230002" in answer["reason"]
    assert "add the app's bot to the chat" in answer["reason"]
    assert feishu.fake.sent_messages() == []
    assert len(feishu.fake.calls("POST", MESSAGES_PATH)) == 1  # permanent: not retried
    row = Outbox.objects.get(kind="card")
    assert row.status == "failed"
    assert "230002" in row.last_error
    channel = Channel.objects.get(name=CHANNEL)
    assert "230002" in channel.last_error
    assert ConfirmationRequest.objects.get(pk=answer["confirmation_id"]).decided_by == "gateway"
