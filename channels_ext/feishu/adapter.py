"""Feishu / Lark channel (docs/feishu.md; keys and callbacks in docs/reference/).

Cards go out through lark-oapi's client (`im.v1.message.create` / `patch`).
Card callbacks (`card.action.trigger`, card JSON 2.0) arrive one of two ways
(the channel's `mode`):
- `http`: POSTed to `/channels/<name>/callback`, authenticated here — replay
  window, signature, decryption, verification token — and then handed to
  lark-oapi's event dispatcher, which types the event and serialises our answer;
- `long_connection`: over lark-oapi's WebSocket client
  (channels_ext/feishu/connection.py), which the connection itself
  authenticates; `answer_connection_event` takes the frame's payload.
Both end in `answer_card_action`: the same parsing, the same `decide`, the
same answer (a toast and the redrawn card). Works for Feishu (open.feishu.cn)
and Lark (open.larksuite.com) alike.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import hashlib
import hmac
import json
import logging
import time
import re
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import lark_oapi as lark
import requests
from django.http import HttpRequest, HttpResponse, JsonResponse
from lark_oapi.api.contact.v3 import BatchGetIdUserRequest, BatchGetIdUserRequestBody, BatchGetIdUserResponse
from lark_oapi.api.im.v1 import (
    CreateMessageRequest,
    CreateMessageRequestBody,
    CreateMessageResponse,
    PatchMessageRequest,
    PatchMessageRequestBody,
    PatchMessageResponse,
)
from lark_oapi.core.exception import (
    NoAuthorizationException,
    ObtainAccessTokenException,
    UnmarshalException,
)
from lark_oapi.core.utils import AESCipher
from lark_oapi.event.callback.model.p2_card_action_trigger import (
    P2CardActionTrigger,
    P2CardActionTriggerResponse,
)

from gateway_contract import (
    Callback,
    CallbackError,
    CardView,
    ChannelAdapter,
    ChannelError,
    Decide,
    DecisionOutcome,
    DigestView,
    MessageRef,
    unsign_confirmation_id,
    unsign_digest_ids,
)
from channels_ext.cardkit import shown_ids, typed_edits
from gateway_contract.links import ChannelLink
from channels_ext.feishu import question_cards
from channels_ext.feishu.cards import EDIT_INPUT_PREFIX, MAX_EDIT_FIELDS, REASON_INPUT_NAME
from channels_ext.feishu.cards import render_card as render_approval_card
from channels_ext.feishu.api_errors import TOKEN_REFUSED_CODES, api_error, forget_tenant_token, log_id, token_error
from channels_ext.feishu.config import FeishuChannelConfig
from channels_ext.feishu.digest import render_digest
from channels_ext.feishu.connection import FeishuLongConnectionLink

# Feishu keeps a `uuid` for an hour to de-duplicate sends, and allows at most 50 characters.
# https://open.feishu.cn/document/server-docs/im-v1/message/create
UUID_MAX_LENGTH = 50
# lark-oapi has no replay window at all; we refuse callbacks older than 5 minutes (docs/reference/api.md).
MAX_CLOCK_SKEW_SECONDS = 300
HTTP_TIMEOUT_SECONDS = 10

CARD_ACTION_EVENT = "card.action.trigger"
URL_VERIFICATION = "url_verification"

TIMESTAMP_HEADER = "X-Lark-Request-Timestamp"
NONCE_HEADER = "X-Lark-Request-Nonce"
SIGNATURE_HEADER = "X-Lark-Signature"
# A Feishu user's open_id, as the contact and message APIs take it.
_OPEN_ID = re.compile(r"^ou_[0-9A-Za-z]+$")

LEGACY_CALLBACK_MESSAGE = (
    "This is a legacy message-card callback (card JSON 1.0, the 'message card request URL'). "
    "This gateway only accepts card JSON 2.0 callbacks: in the Feishu/Lark developer console, "
    "open Events & Callbacks > Callback configuration, subscribe to card.action.trigger and set "
    "this URL as the callback request URL."
)

Response = TypeVar("Response", bound=lark.BaseResponse)
logger = logging.getLogger(__name__)


class FeishuAdapter(ChannelAdapter):
    """Posts approval cards to one Feishu/Lark group chat and takes the clicks on them."""

    kind = "feishu"
    config_model = FeishuChannelConfig
    config: FeishuChannelConfig

    # ----------------------------------------------------------------- outbound

    @functools.cached_property
    def client(self) -> lark.Client:
        """This channel's lark-oapi client; a bad `api_base_url` is a permanent ChannelError."""
        try:
            return (
                lark.Client.builder()
                .app_id(self.config.app_id)
                .app_secret(self.config.app_secret)
                # lark-oapi 1.7.5 accepts only a bare origin: no path, no trailing slash.
                .domain(self.config.api_base_url.rstrip("/"))
                .timeout(HTTP_TIMEOUT_SECONDS)
                .log_level(lark.LogLevel.WARNING)
                .build()
            )
        except ValueError as exc:
            raise ChannelError(f"Feishu channel {self.name!r} has an unusable api_base_url: {exc}", permanent=True) from exc

    def post_card(self, card: CardView, *, idempotency_key: str) -> MessageRef:
        """Send the card to the configured chat; Feishu de-duplicates on `idempotency_key` for an hour."""
        return self._send_card(render_card(card), idempotency_key)

    def update_card(self, card: CardView, ref: MessageRef) -> None:
        """Redraw a posted card in place (`PATCH /im/v1/messages/{message_id}`)."""
        self._patch_card(render_card(card), ref)

    def post_digest(self, view: DigestView, *, idempotency_key: str) -> MessageRef:
        """Send a digest card (docs/feishu.md, "Digests"), de-duplicated as a card is."""
        return self._send_card(render_digest(view), idempotency_key)

    def update_digest(self, view: DigestView, ref: MessageRef) -> None:
        """Redraw a posted digest in place: each call's state, buttons only for what is still pending."""
        self._patch_card(render_digest(view), ref)

    def _send_card(self, content: dict[str, Any], idempotency_key: str) -> MessageRef:
        body = (
            CreateMessageRequestBody.builder()
            .receive_id(self.config.chat_id)
            .msg_type("interactive")
            .content(json.dumps(content, ensure_ascii=False))
            .uuid(feishu_uuid(idempotency_key))
            .build()
        )

        def send() -> CreateMessageResponse:
            request = CreateMessageRequest.builder().receive_id_type("chat_id").request_body(body).build()
            return self.client.im.v1.message.create(request)

        response = self._call("send the card", send)
        message = response.data
        if message is None or not message.message_id:
            raise ChannelError(f"Feishu accepted the card but returned no message_id (log id {log_id(response)})")
        return MessageRef({"message_id": message.message_id, "chat_id": message.chat_id or self.config.chat_id})

    def _patch_card(self, content: dict[str, Any], ref: MessageRef) -> None:
        message_id = ref.data.get("message_id")
        if not message_id:
            raise ChannelError(f"Feishu message reference {ref.data!r} has no message_id", permanent=True)
        body = PatchMessageRequestBody.builder().content(json.dumps(content, ensure_ascii=False)).build()

        def send() -> PatchMessageResponse:
            request = PatchMessageRequest.builder().message_id(message_id).request_body(body).build()
            return self.client.im.v1.message.patch(request)

        self._call("update the card", send)

    # ------------------------------------------------------------------ people (docs/approving.md, "People")

    finds_people_by_email = True
    sends_direct_messages = True

    def find_user_by_email(self, email: str) -> str | None:
        """The open_id of the tenant's user with this e-mail (`contact.v3.user.batch_get_id`, which
        needs the app's contact permission to read user IDs by e-mail); None if Feishu knows none."""
        body = BatchGetIdUserRequestBody.builder().emails([email]).include_resigned(False).build()

        def send() -> BatchGetIdUserResponse:
            request = BatchGetIdUserRequest.builder().user_id_type("open_id").request_body(body).build()
            return self.client.contact.v3.user.batch_get_id(request)

        response = self._call("look up a user by e-mail", send)
        for user in (response.data.user_list if response.data else None) or []:
            if (user.email or "").lower() == email.lower() and user.user_id and _OPEN_ID.match(user.user_id):
                return user.user_id
        return None

    def send_direct(self, native_id: str, text: str) -> None:
        """A text message from the app to one user, by open_id (`im.v1.message.create`, receive_id_type open_id)."""
        if not _OPEN_ID.match(native_id):
            raise ChannelError(f"{native_id!r} is not a Feishu open_id (ou_…)", permanent=True)
        body = (
            CreateMessageRequestBody.builder()
            .receive_id(native_id)
            .msg_type("text")
            .content(json.dumps({"text": text}, ensure_ascii=False))
            .build()
        )

        def send() -> CreateMessageResponse:
            request = CreateMessageRequest.builder().receive_id_type("open_id").request_body(body).build()
            return self.client.im.v1.message.create(request)

        self._call("send a direct message", send)

    def _call(self, action: str, send: Callable[[], Response]) -> Response:
        response = self._send(action, send)
        if response.code in TOKEN_REFUSED_CODES:
            # lark-oapi caches a tenant token process-wide for its whole lifetime and never
            # drops one Feishu has revoked (e.g. after the app secret was reset): forget it
            # and try once more with a fresh token before calling the credentials bad.
            forget_tenant_token(self.config.app_id)
            response = self._send(action, send)
        if not response.success():
            raise api_error(action, response)
        return response

    def _send(self, action: str, send: Callable[[], Response]) -> Response:
        # lark-oapi returns API failures as responses but raises for token failures and
        # for bodies that are not JSON, and never retries: map each to one ChannelError.
        try:
            return send()
        except ObtainAccessTokenException as exc:
            raise token_error(self.config.app_id, exc.code, exc.msg) from exc
        except NoAuthorizationException as exc:
            raise ChannelError(f"Feishu channel {self.name!r}: {exc.msg}", permanent=True) from exc
        except requests.RequestException as exc:
            raise ChannelError(
                f"Could not reach Feishu to {action}: {type(exc).__name__}: {exc}", code="connection_error"
            ) from exc
        except (ValueError, UnmarshalException) as exc:
            # An HTML error page from a gateway in front of Feishu makes the SDK raise JSONDecodeError.
            raise ChannelError(f"Feishu answered '{action}' with a body that is not Feishu JSON: {exc}") from exc

    # ------------------------------------------------------------------ inbound

    def handle_callback(self, request: HttpRequest, decide: Decide) -> HttpResponse:
        """Authenticate a Feishu callback, decide a click, and answer with a toast and the redrawn card.

        Raises CallbackError(401) for anything unsigned, badly signed, stale,
        undecryptable or carrying the wrong verification token, and
        CallbackError(400) for malformed or legacy (card JSON 1.0) payloads;
        `decide` is only called after all of that passed.
        """
        if self.config.mode != "http":
            raise CallbackError(
                403, f"this channel takes its callbacks over the Feishu long connection (mode: {self.config.mode}), "
                "not at this URL",
            )
        outer = _json_object(request.body, "the callback body")
        if _is_legacy_card_action(outer):
            raise CallbackError(400, LEGACY_CALLBACK_MESSAGE)
        payload = self._authenticated_payload(request, outer)
        if _is_legacy_card_action(payload):
            raise CallbackError(400, LEGACY_CALLBACK_MESSAGE)
        self._check_verification_token(payload)

        if payload.get("type") == URL_VERIFICATION:
            return JsonResponse({"challenge": str(payload.get("challenge", ""))})
        event_type = _event_type(payload)
        if event_type == CARD_ACTION_EVENT:
            return self._answer_card_action(request, payload, decide)
        if event_type is None:
            raise CallbackError(400, "the body is not a Feishu event or callback this gateway recognises")
        return JsonResponse({})  # a recognised event we do not use: 200 so Feishu does not retry

    def _authenticated_payload(self, request: HttpRequest, outer: dict[str, Any]) -> dict[str, Any]:
        """The callback's plaintext, once its signature, age and encryption have been checked."""
        encrypt_key = self.config.encrypt_key
        if not encrypt_key:
            # Plain callbacks: Feishu does not sign them, the verification token is the only check.
            if "encrypt" in outer:
                raise CallbackError(401, "the callback is encrypted but this channel has no encrypt_key configured")
            return outer

        timestamp = request.headers.get(TIMESTAMP_HEADER)
        nonce = request.headers.get(NONCE_HEADER)
        signature = request.headers.get(SIGNATURE_HEADER)
        if timestamp is None or nonce is None or signature is None:
            return self._unsigned_url_verification(outer)
        _check_timestamp(timestamp)
        signed = (timestamp + nonce + encrypt_key).encode() + request.body
        if not _digest_matches(hashlib.sha256(signed).hexdigest(), signature):
            legacy = (timestamp + nonce + self.config.verification_token).encode() + request.body
            if _digest_matches(hashlib.sha1(legacy).hexdigest(), signature):
                raise CallbackError(400, LEGACY_CALLBACK_MESSAGE)
            raise CallbackError(401, f"the {SIGNATURE_HEADER} header does not match the body")
        return self._decrypt(outer) if "encrypt" in outer else outer

    def _unsigned_url_verification(self, outer: dict[str, Any]) -> dict[str, Any]:
        # Feishu does not sign the url_verification handshake (lark-oapi skips the signature
        # for it too); with an encrypt key configured, everything else must be signed. Every
        # failure here gets the same answer, so an unsigned request learns nothing about
        # whether its ciphertext decrypted.
        refused = CallbackError(
            401, f"the callback is not signed ({SIGNATURE_HEADER} headers missing) but an encrypt_key is configured"
        )
        try:
            payload = self._decrypt(outer) if "encrypt" in outer else outer
        except CallbackError:
            raise refused from None
        if payload.get("type") != URL_VERIFICATION:
            raise refused
        return payload

    def _decrypt(self, outer: dict[str, Any]) -> dict[str, Any]:
        encrypted = outer.get("encrypt")
        if not isinstance(encrypted, str) or not encrypted:
            raise CallbackError(401, "the callback's encrypt field is empty")
        try:
            plaintext = AESCipher(self.config.encrypt_key).decrypt_str(encrypted)
        except ValueError:  # bad base64, length, padding or UTF-8
            raise CallbackError(401, "the callback could not be decrypted with this channel's encrypt_key") from None
        return _json_object(plaintext.encode(), "the decrypted callback")

    def _check_verification_token(self, payload: dict[str, Any]) -> None:
        if payload.get("schema") == "2.0":
            header = payload.get("header")
            token = header.get("token") if isinstance(header, dict) else None
        else:  # url_verification and v1 events carry it at the top level
            token = payload.get("token")
        expected = self.config.verification_token
        if not isinstance(token, str) or not hmac.compare_digest(token.encode(), expected.encode()):
            raise CallbackError(401, "the callback's verification token does not match this channel's")

    def _answer_card_action(self, request: HttpRequest, payload: dict[str, Any], decide: Decide) -> HttpResponse:
        payload = _with_decoded_values(payload)
        parse_card_action(payload)  # a click that is not on one of our buttons is a 400 before anything else
        failures: list[Exception] = []

        def on_card_action(_event: P2CardActionTrigger) -> P2CardActionTriggerResponse:
            try:
                return P2CardActionTriggerResponse(self.answer_card_action(payload, decide))
            except Exception as exc:
                failures.append(exc)  # re-raised below: the dispatcher would turn it into a 500 body
                raise

        # The dispatcher gets the plaintext authenticated above (hence no encrypt key here;
        # it still checks the token): lark-oapi 1.7.5 answers every failure with HTTP 500,
        # has no replay window, and its typed model rejects a button value sent as a string.
        dispatcher = (
            lark.EventDispatcherHandler.builder("", self.config.verification_token)
            .register_p2_card_action_trigger(on_card_action)
            .build()
        )
        raw = lark.RawRequest()
        raw.uri = request.path
        raw.body = json.dumps(payload).encode()
        raw.headers = dict(request.headers)  # lark reads exact-case names, e.g. X-Request-Id
        answer = dispatcher.do(raw)
        if failures:
            raise failures[0]
        if answer.status_code != 200 or answer.content is None:
            raise CallbackError(400, "the card.action.trigger payload does not have the shape Feishu documents")
        return HttpResponse(answer.content, content_type="application/json; charset=utf-8")

    def answer_card_action(self, payload: dict[str, Any], decide: Decide, *, dedupe_key: str = "") -> dict[str, Any]:
        """An authenticated `card.action.trigger` click, decided: the toast and the redrawn card to answer with.

        The event's `header.event_id` de-duplicates redeliveries; `dedupe_key` is
        the transport's own delivery id, used when the payload has no event_id.
        Raises CallbackError(400) for a click that is not on one of our buttons.
        """
        payload = _with_decoded_values(payload)
        callback = parse_card_action(payload)
        if not callback.dedupe_key and dedupe_key:
            callback = dataclasses.replace(callback, dedupe_key=dedupe_key)
        outcome = decide(callback)
        if payload["event"]["action"]["value"].get("in_digest") is True:
            # A button of a digest card: answered with a toast alone — the request's own card would replace
            # the digest on the clicker's screen; the digest is redrawn through the outbox.
            outcome = dataclasses.replace(outcome, card=None)
        return click_answer(outcome)

    def answer_connection_event(self, body: bytes, decide: Decide, *, delivery_id: str = "") -> dict[str, Any] | None:
        """A payload from the long connection (an EVENT or a CARD frame): what to answer in its response frame.

        A card click gets a toast and the redrawn card; a click we cannot act on
        gets an error toast (Feishu shows error 200340 for an empty answer); any
        other event gets None (acknowledged, nothing to say).
        """
        try:
            payload = _json_object(body, "the frame's payload")
            if _is_legacy_card_action(payload):
                raise CallbackError(400, LEGACY_CALLBACK_MESSAGE)
            if _event_type(payload) != CARD_ACTION_EVENT:
                return None
            return self.answer_card_action(payload, decide, dedupe_key=delivery_id)
        except CallbackError as exc:
            logger.warning("feishu channel %s: click refused: %s", self.name, exc.message)
            return {"toast": {"type": "error", "content": f"This click cannot be handled: {exc.message}"[:200]}}

    def open_connection(self, decide: Decide) -> ChannelLink:
        """The long connection that brings this channel's card callbacks (mode: long_connection)."""
        return FeishuLongConnectionLink(self, decide)


# --------------------------------------------------------------------- helpers


def render_card(card: CardView) -> dict[str, Any]:
    """The card JSON for `card`: a question's (`question_cards`) or an approval's."""
    return question_cards.render_question(card) if card.is_question else render_approval_card(card)


def feishu_uuid(idempotency_key: str) -> str:
    """The `uuid` Feishu de-duplicates a send on: the key itself, or its hash if too long."""
    if len(idempotency_key) <= UUID_MAX_LENGTH:
        return idempotency_key
    return hashlib.sha256(idempotency_key.encode()).hexdigest()[:UUID_MAX_LENGTH]


def parse_card_action(payload: dict[str, Any]) -> Callback:
    """A verified `card.action.trigger` payload as a Callback; CallbackError(400) if it is not ours."""
    header = payload.get("header") if isinstance(payload.get("header"), dict) else {}
    event = _member(payload, "event")
    action = _member(event, "action")
    value = _member(action, "value")
    decision = value.get("decision")
    if decision not in ("approve", "reject", "answer"):
        raise CallbackError(400, "the button value carries no approve/reject decision")
    signed_id = value.get("confirmation_id")
    if not isinstance(signed_id, str):
        raise CallbackError(400, "the button value carries no confirmation_id")
    confirmation_id = unsign_confirmation_id(signed_id)
    operator = _member(event, "operator")
    actor = operator.get("open_id")
    if not isinstance(actor, str) or not actor:
        raise CallbackError(400, "the callback names no operator open_id")
    form_value = action.get("form_value") if isinstance(action.get("form_value"), dict) else {}
    if decision == "answer":  # a question's option button carries its answer; its form, the inputs
        return Callback(
            confirmation_id=confirmation_id,
            decision="answer",
            actor=actor,
            dedupe_key=str(header.get("event_id") or ""),
            answer=value.get("answer"),
            answer_inputs=question_cards.form_inputs(form_value) if value.get("form") is True else None,
        )
    if value.get("digest") is not None:  # a digest's "Approve these N": the calls it carries, signed
        digest_id, ids = unsign_digest_ids(str(value["digest"]))
        if decision != "approve" or not ids or ids[0] != confirmation_id:
            raise CallbackError(400, "the digest button's value does not name the calls it approves")
        return Callback(
            confirmation_id=confirmation_id, decision="approve", actor=actor, dedupe_key=str(header.get("event_id") or ""),
            digest_id=digest_id, shown_ids=ids,
        )  # fmt: skip
    reason = ""
    if decision == "reject":
        typed = form_value.get(REASON_INPUT_NAME)
        reason = typed.strip() if isinstance(typed, str) else ""
    grant = value.get("grant")
    if grant is not None and (isinstance(grant, bool) or not isinstance(grant, int) or not 0 <= grant < 100):
        raise CallbackError(400, "the button value's grant is not a scope number")
    whole_turn = value.get("turn") is True
    shown = shown_ids(value.get("shown"), confirmation_id) if whole_turn else None
    return Callback(
        confirmation_id=confirmation_id,
        decision=decision,
        actor=actor,
        reason=reason,
        dedupe_key=str(header.get("event_id") or ""),
        grant=grant if decision == "approve" else None,
        typed_edits=(
            typed_edits(value.get("edit"), form_value, prefix=EDIT_INPUT_PREFIX, max_fields=MAX_EDIT_FIELDS)
            if decision == "approve"
            else None
        ),
        whole_turn=whole_turn,
        shown_ids=shown,
    )


def click_answer(outcome: DecisionOutcome) -> dict[str, Any]:
    """The synchronous answer to a click: always a toast, plus the redrawn card when there is one.

    Never a bare `{}`: Feishu shows the clicker error 200340 for that.
    https://open.feishu.cn/document/feishu-cards/card-callback-communication
    """
    message = outcome.message or ("Done." if outcome.applied else "Nothing was changed.")
    answer: dict[str, Any] = {"toast": {"type": _toast_type(outcome), "content": message}}
    if outcome.card is not None:
        answer["card"] = {"type": "raw", "data": render_card(outcome.card)}
    return answer


def _toast_type(outcome: DecisionOutcome) -> str:
    if outcome.applied:
        return "info" if outcome.code == "would_apply" else "success"
    if outcome.code == "duplicate":
        return "info"
    if outcome.code == "not_found":
        return "error"
    return "warning"  # not an approver, self-approval, already decided, expired


def _json_object(body: bytes, what: str) -> dict[str, Any]:
    try:
        parsed = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        raise CallbackError(400, f"{what} is not valid JSON") from None
    if not isinstance(parsed, dict):
        raise CallbackError(400, f"{what} is not a JSON object")
    return parsed


def _member(container: Mapping[str, Any], key: str) -> dict[str, Any]:
    value = container.get(key)
    if not isinstance(value, dict):
        raise CallbackError(400, f"the card.action.trigger payload has no {key!r} object")
    return value


def _with_decoded_values(payload: dict[str, Any]) -> dict[str, Any]:
    """A copy whose `action.value` / `action.form_value` are objects even if sent as JSON strings."""
    payload = copy.deepcopy(payload)
    action = payload.get("event", {}).get("action") if isinstance(payload.get("event"), dict) else None
    if not isinstance(action, dict):
        return payload
    for key in ("value", "form_value"):
        if isinstance(action.get(key), str):
            try:
                action[key] = json.loads(action[key])
            except ValueError:
                raise CallbackError(400, f"action.{key} is a string that is not JSON") from None
    return payload


def _is_legacy_card_action(payload: Mapping[str, Any]) -> bool:
    """The flat JSON 1.0 card callback: open_message_id and action at the top level."""
    return "schema" not in payload and "open_message_id" in payload and "action" in payload


def _event_type(payload: Mapping[str, Any]) -> str | None:
    if payload.get("schema") == "2.0":
        header = payload.get("header")
        event_type = header.get("event_type") if isinstance(header, dict) else None
        return event_type if isinstance(event_type, str) and event_type else None
    if payload.get("type") == "event_callback" and isinstance(payload.get("event"), dict):
        return str(payload["event"].get("type") or "event_callback")  # a v1 event
    return None


def _check_timestamp(raw: str) -> None:
    try:
        sent_at = int(raw)
    except ValueError:
        raise CallbackError(401, f"{TIMESTAMP_HEADER} is not a unix time in seconds") from None
    if abs(time.time() - sent_at) > MAX_CLOCK_SKEW_SECONDS:
        raise CallbackError(401, f"{TIMESTAMP_HEADER} is more than {MAX_CLOCK_SKEW_SECONDS} s away from now")


def _digest_matches(expected_hex: str, received: str) -> bool:
    return hmac.compare_digest(expected_hex.encode(), received.strip().lower().encode())
