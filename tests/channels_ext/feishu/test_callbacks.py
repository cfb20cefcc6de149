"""Card callbacks: authentication first, then one decide() per click and an answer Feishu shows."""

from __future__ import annotations

import math
import hashlib
import json
import time
from typing import Any

import pytest
from django.http import HttpRequest, HttpResponse
from django.test import RequestFactory
from lark_oapi.core.utils import AESCipher

from gateway_contract import Callback, CallbackError, DecisionOutcome, get_adapter
from channels_ext.feishu.adapter import FeishuAdapter
from tests.channels_ext.feishu.test_cards import APPROVER, CONFIRMATION_ID, card_view, interactive_elements
from tests.fakes.feishu_api import (
    card_action_payload,
    encrypt_feishu,
    encrypted_body,
    load_fixture,
    signed_feishu_headers,
    unique_app_id,
    url_verification_payload,
)

TOKEN = "v-verification-token"
ENCRYPT_KEY = "encrypt-key-from-the-console"
CALLBACK_PATH = "/channels/finance-feishu/callback"


class RecordingDecide:
    """The adapter's injected decide(): records each Callback and answers one outcome."""

    def __init__(self, outcome: DecisionOutcome) -> None:
        self.outcome = outcome
        self.callbacks: list[Callback] = []

    def __call__(self, callback: Callback) -> DecisionOutcome:
        self.callbacks.append(callback)
        return self.outcome


APPROVED = DecisionOutcome(
    applied=True,
    code="decided",
    message="Approved.",
    card=card_view(status="approved", decided_by=APPROVER),
)


def feishu_adapter(encrypt_key: str = ENCRYPT_KEY) -> FeishuAdapter:
    adapter = get_adapter(
        "finance-feishu",
        "feishu",
        {
            "app_id": unique_app_id(),
            "app_secret": "app-secret",
            "verification_token": TOKEN,
            "encrypt_key": encrypt_key,
            "chat_id": "oc_5ad11d72b830411d72b836c20",
        },
    )
    assert isinstance(adapter, FeishuAdapter)
    return adapter


def callback_request(body: bytes, headers: dict[str, str] | None = None) -> HttpRequest:
    return RequestFactory().post(CALLBACK_PATH, data=body, content_type="application/json", headers=headers or {})


def encrypted_signed_request(payload: dict[str, Any], **signing: Any) -> HttpRequest:
    body = encrypted_body(ENCRYPT_KEY, payload)
    return callback_request(body, signed_feishu_headers(ENCRYPT_KEY, body, **signing))


def plain_request(payload: dict[str, Any]) -> HttpRequest:
    return callback_request(json.dumps(payload).encode())


def answer_of(response: HttpResponse) -> dict[str, Any]:
    assert response.status_code == 200
    assert response["Content-Type"].startswith("application/json")
    return json.loads(response.content)


def refused(adapter: FeishuAdapter, request: HttpRequest, decide: RecordingDecide | None = None) -> CallbackError:
    decide = decide or RecordingDecide(APPROVED)
    with pytest.raises(CallbackError) as caught:
        adapter.handle_callback(request, decide)
    assert decide.callbacks == []
    return caught.value


def test_the_encryption_helper_matches_feishus_scheme_and_the_sdks_decryptor() -> None:
    # Test vector from Feishu's encrypt-key documentation.
    assert AESCipher("test key").decrypt_str("P37w+VZImNgPEO1RBhJ6RtKl7n6zymIbEG1pReEzghk=") == "hello world"
    assert AESCipher("test key").decrypt_str(encrypt_feishu("test key", "hello world")) == "hello world"


# --- clicks --------------------------------------------------------------------


def test_an_encrypted_signed_approve_click_decides_as_the_clicker_with_the_event_id() -> None:
    decide = RecordingDecide(APPROVED)
    payload = card_action_payload(CONFIRMATION_ID, "approve", token=TOKEN, open_id=APPROVER, event_id="evt-1")

    feishu_adapter().handle_callback(encrypted_signed_request(payload), decide)

    assert decide.callbacks == [
        Callback(confirmation_id=CONFIRMATION_ID, decision="approve", actor=APPROVER, reason="", dedupe_key="evt-1")
    ]


def test_a_reject_submitted_from_the_form_carries_the_typed_reason() -> None:
    decide = RecordingDecide(APPROVED)
    payload = card_action_payload(CONFIRMATION_ID, "reject", token=TOKEN, reason="  Vendor is not approved ")

    feishu_adapter().handle_callback(encrypted_signed_request(payload), decide)

    [callback] = decide.callbacks
    assert callback.decision == "reject"
    assert callback.reason == "Vendor is not approved"


def test_a_click_is_answered_with_a_success_toast_and_the_redrawn_card_without_buttons() -> None:
    payload = card_action_payload(CONFIRMATION_ID, token=TOKEN)

    answer = answer_of(feishu_adapter().handle_callback(encrypted_signed_request(payload), RecordingDecide(APPROVED)))

    assert answer["toast"] == {"type": "success", "content": "Approved."}
    assert answer["card"]["type"] == "raw"
    assert answer["card"]["data"]["schema"] == "2.0"
    assert answer["card"]["data"]["header"]["template"] == "green"
    assert interactive_elements(answer["card"]["data"]) == []


def test_a_click_that_changes_nothing_gets_a_warning_toast_and_the_current_card() -> None:
    already = DecisionOutcome(
        applied=False,
        code="already_decided",
        message="Already rejected by someone else.",
        card=card_view(status="rejected", decided_by="ou_someone"),
    )
    payload = card_action_payload(CONFIRMATION_ID, token=TOKEN)

    answer = answer_of(feishu_adapter().handle_callback(encrypted_signed_request(payload), RecordingDecide(already)))

    assert answer["toast"] == {"type": "warning", "content": "Already rejected by someone else."}
    assert answer["card"]["data"]["header"]["template"] == "red"


def test_a_click_by_someone_who_may_not_approve_keeps_the_buttons_for_the_others() -> None:
    not_approver = DecisionOutcome(
        applied=False, code="not_approver", message="You are not an approver of this request.", card=card_view()
    )
    payload = card_action_payload(CONFIRMATION_ID, token=TOKEN, open_id="ou_outsider")

    answer = answer_of(feishu_adapter().handle_callback(encrypted_signed_request(payload), RecordingDecide(not_approver)))

    assert answer["toast"]["type"] == "warning"
    assert len(interactive_elements(answer["card"]["data"])) == 4


def test_a_click_on_an_unknown_request_gets_only_an_error_toast() -> None:
    gone = DecisionOutcome(applied=False, code="not_found", message="This request no longer exists.", card=None)
    payload = card_action_payload(CONFIRMATION_ID, token=TOKEN)

    answer = answer_of(feishu_adapter().handle_callback(encrypted_signed_request(payload), RecordingDecide(gone)))

    assert answer == {"toast": {"type": "error", "content": "This request no longer exists."}}


def test_a_plain_click_is_accepted_when_no_encrypt_key_is_configured_and_the_token_matches() -> None:
    decide = RecordingDecide(APPROVED)
    payload = card_action_payload(CONFIRMATION_ID, token=TOKEN)

    answer = answer_of(feishu_adapter(encrypt_key="").handle_callback(plain_request(payload), decide))

    assert [callback.confirmation_id for callback in decide.callbacks] == [CONFIRMATION_ID]
    assert answer["toast"]["type"] == "success"


def test_a_button_value_sent_as_a_json_string_is_understood() -> None:
    decide = RecordingDecide(APPROVED)
    signed = card_action_payload(CONFIRMATION_ID, token=TOKEN)["event"]["action"]["value"]
    payload = card_action_payload(CONFIRMATION_ID, token=TOKEN, value=json.dumps(signed))

    feishu_adapter().handle_callback(encrypted_signed_request(payload), decide)

    assert [callback.decision for callback in decide.callbacks] == ["approve"]


def test_a_button_value_this_gateway_did_not_sign_is_refused() -> None:
    payload = card_action_payload(
        CONFIRMATION_ID, token=TOKEN, value={"decision": "approve", "confirmation_id": CONFIRMATION_ID}
    )

    assert refused(feishu_adapter(), encrypted_signed_request(payload)).status == 400


def test_a_click_without_a_decision_is_refused() -> None:
    payload = card_action_payload(CONFIRMATION_ID, token=TOKEN, value={"decision": "maybe"})

    assert refused(feishu_adapter(), encrypted_signed_request(payload)).status == 400


def test_an_error_inside_decide_is_raised_rather_than_turned_into_a_vendor_500() -> None:
    def broken_decide(callback: Callback) -> DecisionOutcome:
        raise RuntimeError("database is down")

    payload = card_action_payload(CONFIRMATION_ID, token=TOKEN)

    with pytest.raises(RuntimeError, match="database is down"):
        feishu_adapter().handle_callback(encrypted_signed_request(payload), broken_decide)


# --- url verification and other events ------------------------------------------


def test_a_plain_url_verification_is_answered_with_the_challenge() -> None:
    payload = url_verification_payload(token=TOKEN, challenge="ajls384kdjx98XX")

    answer = answer_of(feishu_adapter(encrypt_key="").handle_callback(plain_request(payload), RecordingDecide(APPROVED)))

    assert answer == {"challenge": "ajls384kdjx98XX"}


def test_an_encrypted_url_verification_is_answered_although_feishu_does_not_sign_it() -> None:
    body = encrypted_body(ENCRYPT_KEY, url_verification_payload(token=TOKEN, challenge="c-123"))

    answer = answer_of(feishu_adapter().handle_callback(callback_request(body), RecordingDecide(APPROVED)))

    assert answer == {"challenge": "c-123"}


def test_a_url_verification_with_the_wrong_token_is_refused() -> None:
    payload = url_verification_payload(token="someone-elses-token")

    assert refused(feishu_adapter(encrypt_key=""), plain_request(payload)).status == 401


def test_another_event_type_gets_an_empty_200() -> None:
    payload = load_fixture("im_message_receive.json")
    payload["header"]["token"] = TOKEN

    response = feishu_adapter().handle_callback(encrypted_signed_request(payload), RecordingDecide(APPROVED))

    assert answer_of(response) == {}


# --- refusals --------------------------------------------------------------------


def test_a_plain_click_with_the_wrong_token_is_refused() -> None:
    payload = card_action_payload(CONFIRMATION_ID, token="someone-elses-token")

    assert refused(feishu_adapter(encrypt_key=""), plain_request(payload)).status == 401


def test_a_signed_click_with_the_wrong_token_is_refused() -> None:
    payload = card_action_payload(CONFIRMATION_ID, token="someone-elses-token")

    assert refused(feishu_adapter(), encrypted_signed_request(payload)).status == 401


def test_a_bad_signature_is_refused() -> None:
    body = encrypted_body(ENCRYPT_KEY, card_action_payload(CONFIRMATION_ID, token=TOKEN))
    headers = signed_feishu_headers("another-encrypt-key", body)

    error = refused(feishu_adapter(), callback_request(body, headers))

    assert error.status == 401
    assert "X-Lark-Signature" in error.message


def test_a_body_changed_after_signing_is_refused() -> None:
    body = encrypted_body(ENCRYPT_KEY, card_action_payload(CONFIRMATION_ID, token=TOKEN))
    headers = signed_feishu_headers(ENCRYPT_KEY, body)
    tampered = encrypted_body(ENCRYPT_KEY, card_action_payload(CONFIRMATION_ID, "reject", token=TOKEN))

    assert refused(feishu_adapter(), callback_request(tampered, headers)).status == 401


def test_a_timestamp_301_seconds_old_is_refused() -> None:
    payload = card_action_payload(CONFIRMATION_ID, token=TOKEN)

    error = refused(feishu_adapter(), encrypted_signed_request(payload, timestamp=int(time.time()) - 301))

    assert error.status == 401
    assert "X-Lark-Request-Timestamp" in error.message


def test_a_timestamp_301_seconds_ahead_is_refused() -> None:
    payload = card_action_payload(CONFIRMATION_ID, token=TOKEN)

    assert refused(feishu_adapter(), encrypted_signed_request(payload, timestamp=math.ceil(time.time()) + 301)).status == 401


def test_a_timestamp_299_seconds_old_is_accepted() -> None:
    decide = RecordingDecide(APPROVED)
    payload = card_action_payload(CONFIRMATION_ID, token=TOKEN)

    feishu_adapter().handle_callback(encrypted_signed_request(payload, timestamp=math.ceil(time.time()) - 299), decide)

    assert len(decide.callbacks) == 1


def test_a_timestamp_that_is_not_a_number_is_refused() -> None:
    payload = card_action_payload(CONFIRMATION_ID, token=TOKEN)

    assert refused(feishu_adapter(), encrypted_signed_request(payload, timestamp="yesterday")).status == 401


def test_garbage_ciphertext_is_refused_with_401_not_500() -> None:
    for garbage in ("not base64 at all!", "aGVsbG8gd29ybGQ=", encrypt_feishu("wrong key", '{"schema": "2.0"}')):
        body = json.dumps({"encrypt": garbage}).encode()

        error = refused(feishu_adapter(), callback_request(body, signed_feishu_headers(ENCRYPT_KEY, body)))

        assert error.status == 401


def test_an_encrypted_click_without_signature_headers_is_refused() -> None:
    body = encrypted_body(ENCRYPT_KEY, card_action_payload(CONFIRMATION_ID, token=TOKEN))

    error = refused(feishu_adapter(), callback_request(body))

    assert error.status == 401
    assert "not signed" in error.message


def test_an_unsigned_plain_click_is_refused_when_an_encrypt_key_is_configured() -> None:
    payload = card_action_payload(CONFIRMATION_ID, token=TOKEN)

    assert refused(feishu_adapter(), plain_request(payload)).status == 401


def test_an_encrypted_callback_is_refused_when_no_encrypt_key_is_configured() -> None:
    body = encrypted_body(ENCRYPT_KEY, card_action_payload(CONFIRMATION_ID, token=TOKEN))

    assert refused(feishu_adapter(encrypt_key=""), callback_request(body)).status == 401


def test_a_body_that_is_not_json_is_a_400() -> None:
    assert refused(feishu_adapter(encrypt_key=""), callback_request(b"<xml>no</xml>")).status == 400


def test_a_legacy_message_card_callback_is_refused_with_a_pointer_to_card_json_2() -> None:
    error = refused(feishu_adapter(encrypt_key=""), plain_request(load_fixture("legacy_card_action.json")))

    assert error.status == 400
    assert "card.action.trigger" in error.message
    assert "legacy" in error.message


def test_a_legacy_callback_signed_the_old_way_is_refused_with_the_same_pointer() -> None:
    body = encrypted_body(ENCRYPT_KEY, load_fixture("legacy_card_action.json"))
    stamp, nonce = str(int(time.time())), "n-1"
    headers = {
        "X-Lark-Request-Timestamp": stamp,
        "X-Lark-Request-Nonce": nonce,
        # JSON 1.0 card callbacks: hex SHA-1 of timestamp + nonce + verification token + body
        "X-Lark-Signature": hashlib.sha1((stamp + nonce + TOKEN).encode() + body).hexdigest(),
    }

    error = refused(feishu_adapter(), callback_request(body, headers))

    assert error.status == 400
    assert "card.action.trigger" in error.message
