"""Posting and redrawing cards through the real lark-oapi client against FakeFeishu."""

from __future__ import annotations

import json
from typing import Any

import lark_oapi as lark
import pytest

from gateway_contract import ChannelError, MessageRef, get_adapter, unsign_confirmation_id
from channels_ext.feishu.adapter import FeishuAdapter
from tests.channels_ext.feishu.test_cards import APPROVER, CONFIRMATION_ID, card_view, interactive_elements
from tests.fakes.feishu_api import (
    APP_SECRET_INVALID,
    BOT_NOT_IN_CHAT,
    CARD_UPDATE_PATH,
    HTML_502,
    INVALID_ACCESS_TOKEN,
    MESSAGES_PATH,
    TOKEN_PATH,
    FakeFeishu,
    unique_app_id,
)

APP_SECRET = "app-secret-that-must-never-be-echoed"
CHAT_ID = "oc_5ad11d72b830411d72b836c20"


def feishu_adapter(api_base_url: str, **config: Any) -> FeishuAdapter:
    adapter = get_adapter(
        "finance-feishu",
        "feishu",
        {
            "app_id": unique_app_id(),
            "app_secret": APP_SECRET,
            "verification_token": "v-token",
            "chat_id": CHAT_ID,
            "api_base_url": api_base_url,
            **config,
        },
    )
    assert isinstance(adapter, FeishuAdapter)
    return adapter


def post(adapter: FeishuAdapter, key: str = "confirmation-7d1f0a52") -> MessageRef:
    return adapter.post_card(card_view(), idempotency_key=key)


def test_a_card_is_sent_to_the_configured_chat_as_an_interactive_message(fake_feishu: FakeFeishu) -> None:
    ref = post(feishu_adapter(fake_feishu.domain))

    [sent] = fake_feishu.calls("POST", MESSAGES_PATH)
    assert sent.query == {"receive_id_type": "chat_id"}
    assert sent.headers["authorization"].startswith("Bearer t-")
    assert sent.headers["content-type"].startswith("application/json")
    body = sent.json()
    assert body["receive_id"] == CHAT_ID
    assert body["msg_type"] == "interactive"
    assert body["uuid"] == "confirmation-7d1f0a52"
    card = json.loads(body["content"])  # the card travels as a JSON string
    assert card["schema"] == "2.0"
    approve = next(element for element in interactive_elements(card) if element.get("name") == "approve")
    assert unsign_confirmation_id(approve["behaviors"][0]["value"]["confirmation_id"]) == CONFIRMATION_ID
    assert ref == MessageRef({"message_id": fake_feishu.sent_messages()[0].message_id, "chat_id": CHAT_ID})


def test_the_token_request_sends_the_app_credentials(fake_feishu: FakeFeishu) -> None:
    adapter = feishu_adapter(fake_feishu.domain)

    post(adapter)

    [token_call] = fake_feishu.calls("POST", TOKEN_PATH)
    assert token_call.json() == {"app_id": adapter.config.app_id, "app_secret": APP_SECRET}


def test_an_idempotency_key_longer_than_50_characters_is_hashed_to_fit(fake_feishu: FakeFeishu) -> None:
    post(feishu_adapter(fake_feishu.domain), key="confirmation-" + "k" * 80)

    [sent] = fake_feishu.calls("POST", MESSAGES_PATH)
    assert len(sent.json()["uuid"]) == 50
    assert "kkkk" not in sent.json()["uuid"]


def test_posting_twice_with_one_key_leaves_one_message(fake_feishu: FakeFeishu) -> None:
    adapter = feishu_adapter(fake_feishu.domain)

    assert post(adapter) == post(adapter)
    assert len(fake_feishu.sent_messages()) == 1


def test_a_trailing_slash_on_the_api_base_url_is_accepted(fake_feishu: FakeFeishu) -> None:
    post(feishu_adapter(fake_feishu.domain + "/"))

    assert len(fake_feishu.sent_messages()) == 1


@pytest.mark.parametrize("api_base_url", ["https://open.feishu.cn", "https://open.larksuite.com/"])
def test_the_client_is_built_for_both_feishu_and_lark(api_base_url: str) -> None:
    client = feishu_adapter(api_base_url).client

    assert client.config.domain == api_base_url.rstrip("/")


def test_an_unusable_api_base_url_is_a_permanent_error() -> None:
    with pytest.raises(ChannelError) as caught:
        post(feishu_adapter("http://feishu.example.com"))

    assert caught.value.permanent


def test_updating_a_decided_card_patches_the_message_and_removes_the_buttons(fake_feishu: FakeFeishu) -> None:
    adapter = feishu_adapter(fake_feishu.domain)
    ref = post(adapter)

    adapter.update_card(card_view(status="approved", decided_by=APPROVER), ref)

    [patch] = fake_feishu.calls("PATCH", MESSAGES_PATH)
    assert patch.path == f"{MESSAGES_PATH}/{ref.data['message_id']}"
    card = json.loads(patch.json()["content"])
    assert card["config"]["update_multi"] is True
    assert card["header"]["template"] == "green"
    assert interactive_elements(card) == []
    assert fake_feishu.messages[ref.data["message_id"]].card == card


def test_a_reminder_redraws_the_card_with_the_note(fake_feishu: FakeFeishu) -> None:
    adapter = feishu_adapter(fake_feishu.domain)
    ref = post(adapter)

    adapter.notify_approvers(card_view(), ref, "Reminder: still waiting for your decision")

    card = fake_feishu.messages[ref.data["message_id"]].card
    assert "Reminder: still waiting for your decision" in card["body"]["elements"][0]["content"]


def test_a_rate_limit_is_transient_and_says_when_to_retry(fake_feishu: FakeFeishu) -> None:
    fake_feishu.fail_next(MESSAGES_PATH, headers={"x-ogw-ratelimit-reset": "7"})

    with pytest.raises(ChannelError) as caught:
        post(feishu_adapter(fake_feishu.domain))

    assert not caught.value.permanent
    assert caught.value.retry_after == 7.0
    assert "99991400" in caught.value.message


def test_the_rate_limit_code_on_an_old_api_answering_http_400_is_still_transient(fake_feishu: FakeFeishu) -> None:
    fake_feishu.fail_next(MESSAGES_PATH, status=400, headers={"x-ogw-ratelimit-reset": "3"})

    with pytest.raises(ChannelError) as caught:
        post(feishu_adapter(fake_feishu.domain))

    assert not caught.value.permanent
    assert caught.value.retry_after == 3.0


def test_a_bot_outside_the_chat_is_permanent_and_names_the_code_message_and_log_id(fake_feishu: FakeFeishu) -> None:
    fake_feishu.fail_next(MESSAGES_PATH, status=400, body=BOT_NOT_IN_CHAT, headers={"X-Tt-Logid": "20250101ABCDEF0123"})

    with pytest.raises(ChannelError) as caught:
        post(feishu_adapter(fake_feishu.domain))

    assert caught.value.permanent
    message = caught.value.message
    assert "230002" in message
    assert "Bot/User can NOT be out of the chat." in message
    assert "log id 20250101ABCDEF0123" in message


def test_an_invalid_app_secret_is_permanent_and_never_echoes_the_secret(fake_feishu: FakeFeishu) -> None:
    fake_feishu.fail_next(TOKEN_PATH, status=400, body=APP_SECRET_INVALID, headers={})

    with pytest.raises(ChannelError) as caught:
        post(feishu_adapter(fake_feishu.domain))

    assert caught.value.permanent
    assert "10014" in caught.value.message
    assert "app secret invalid" in caught.value.message
    assert APP_SECRET not in caught.value.message
    assert APP_SECRET not in repr(caught.value.__cause__)
    assert fake_feishu.calls("POST", MESSAGES_PATH) == []


def test_an_html_502_from_a_gateway_is_transient(fake_feishu: FakeFeishu) -> None:
    fake_feishu.fail_next(MESSAGES_PATH, status=502, body=HTML_502, headers={})

    with pytest.raises(ChannelError) as caught:
        post(feishu_adapter(fake_feishu.domain))

    assert not caught.value.permanent


def test_a_json_5xx_is_transient(fake_feishu: FakeFeishu) -> None:
    fake_feishu.fail_next(MESSAGES_PATH, status=500, body={"code": 1500, "msg": "internal error"}, headers={})

    with pytest.raises(ChannelError) as caught:
        post(feishu_adapter(fake_feishu.domain))

    assert not caught.value.permanent
    assert caught.value.retry_after is None


def test_an_html_502_from_the_token_endpoint_is_transient(fake_feishu: FakeFeishu) -> None:
    fake_feishu.fail_next(TOKEN_PATH, status=502, body=HTML_502, headers={})

    with pytest.raises(ChannelError) as caught:
        post(feishu_adapter(fake_feishu.domain))

    assert not caught.value.permanent


def test_a_rate_limited_token_endpoint_is_transient(fake_feishu: FakeFeishu) -> None:
    fake_feishu.fail_next(TOKEN_PATH)

    with pytest.raises(ChannelError) as caught:
        post(feishu_adapter(fake_feishu.domain))

    assert not caught.value.permanent


def test_an_unreachable_feishu_is_transient() -> None:
    with FakeFeishu() as gone:
        domain = gone.domain  # the port is closed once the server stops

    with pytest.raises(ChannelError) as caught:
        post(feishu_adapter(domain))

    assert not caught.value.permanent


def test_a_cached_token_feishu_no_longer_accepts_is_replaced_once(fake_feishu: FakeFeishu) -> None:
    adapter = feishu_adapter(fake_feishu.domain)
    post(adapter, key="first")
    fake_feishu.fail_next(MESSAGES_PATH, status=400, body=INVALID_ACCESS_TOKEN, headers={})

    post(adapter, key="second")

    assert len(fake_feishu.calls("POST", TOKEN_PATH)) == 2
    assert len(fake_feishu.sent_messages()) == 2


def test_a_token_refused_even_when_fresh_is_permanent(fake_feishu: FakeFeishu) -> None:
    fake_feishu.fail_next(MESSAGES_PATH, status=400, body=INVALID_ACCESS_TOKEN, headers={}, times=2)

    with pytest.raises(ChannelError) as caught:
        post(feishu_adapter(fake_feishu.domain))

    assert caught.value.permanent
    assert "99991663" in caught.value.message


def test_the_fake_takes_delayed_card_updates_made_through_the_sdks_generic_request(fake_feishu: FakeFeishu) -> None:
    # lark-oapi 1.7.5 has no typed method for /interactive/v1/card/update.
    client = feishu_adapter(fake_feishu.domain).client
    request = (
        lark.BaseRequest.builder()
        .http_method(lark.HttpMethod.POST)
        .uri(CARD_UPDATE_PATH)
        .token_types({lark.AccessTokenType.TENANT})
        .headers({"Content-Type": "application/json; charset=utf-8"})
        .body({"token": "c-295ee57216a5dc9de90fefd0aadb4b1d7d337bc", "card": {"schema": "2.0"}})
        .build()
    )

    response = client.request(request)

    assert response.success()
    [update] = fake_feishu.calls("POST", CARD_UPDATE_PATH)
    assert update.json()["token"].startswith("c-")
