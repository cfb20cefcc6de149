"""DingTalk channel: cards through DingTalk's card API, clicks over its Stream connection (docs/dingtalk.md).

Outbound, with the app's access token (`POST /v1.0/oauth2/accessToken`, cached
until five minutes before it expires, as dingtalk-stream caches it):
- `POST /v1.0/card/instances/createAndDeliver` creates the card (its
  `outTrackId` derived from the delivery's idempotency key) with
  `callbackType: STREAM` and delivers it to the group;
- `PUT /v1.0/card/instances` redraws it for everyone.
dingtalk-stream reads its OpenAPI host once, from the DINGTALK_OPENAPI_ENDPOINT
environment variable, for the whole process; each channel here has its own
`api_base_url`, so these calls are made with `requests` (the SDK's own HTTP
client) in the SDK's request shapes.

Inbound: a click arrives on the Stream connection (channels_ext/dingtalk/connection.py)
as a CALLBACK message on topic `/v1.0/card/instances/callback`; the connection is
the authentication. `answer_card_callback` parses it, decides, and returns the ack's
code and response: the refreshed card, which DingTalk draws at once.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import time
from typing import Any

import requests
from django.http import HttpRequest, HttpResponse
from dingtalk_stream import CardCallbackMessage

from gateway_contract import (
    Callback,
    CallbackError,
    CardView,
    ChannelAdapter,
    ChannelError,
    Decide,
    DecisionOutcome,
    MessageRef,
)
from gateway_contract.links import ChannelLink
from channels_ext.dingtalk import cards
from channels_ext.dingtalk.config import DingTalkChannelConfig
from channels_ext.dingtalk.connection import DingTalkStreamLink

logger = logging.getLogger(__name__)

TOKEN_PATH = "/v1.0/oauth2/accessToken"
CREATE_AND_DELIVER_PATH = "/v1.0/card/instances/createAndDeliver"
CARD_INSTANCES_PATH = "/v1.0/card/instances"
TOKEN_HEADER = "x-acs-dingtalk-access-token"
HTTP_TIMEOUT_SECONDS = 10
TOKEN_MARGIN_SECONDS = 300  # renewed five minutes before it expires, as dingtalk-stream does
OUT_TRACK_ID_LENGTH = 64

# Error codes DingTalk answers a rate limit with (besides HTTP 429).
_RATE_LIMIT_MARKERS = ("QpsLimit", "Throttling", "FlowControl")

_tokens: dict[str, tuple[float, str]] = {}  # credential fingerprint -> (expires at, access token)
_tokens_lock = threading.Lock()


class DingTalkAdapter(ChannelAdapter):
    """Posts approval cards to one DingTalk group and answers the clicks that come over its Stream."""

    kind = "dingtalk"
    config_model = DingTalkChannelConfig
    config: DingTalkChannelConfig

    # --- outbound ---------------------------------------------------------

    def post_card(self, card: CardView, *, idempotency_key: str) -> MessageRef:
        """Create the card and deliver it to the group; DingTalk keeps one card per `outTrackId`."""
        out_track_id = out_track_id_for(idempotency_key)
        body = {
            "cardTemplateId": self.config.card_template_id,
            "outTrackId": out_track_id,
            "callbackType": "STREAM",
            "cardData": {"cardParamMap": cards.card_params(card)},
            "openSpaceId": f"dtv1.card//IM_GROUP.{self.config.open_conversation_id}",
            "imGroupOpenSpaceModel": {"supportForward": False},
            "imGroupOpenDeliverModel": {"robotCode": self.config.client_id},
            "userIdType": 1,  # userId (not unionId) in callbacks
        }
        answer = self._call("POST", CREATE_AND_DELIVER_PATH, body, "send the card")
        failed = [
            result
            for result in (answer.get("result") or {}).get("deliverResults") or []
            if isinstance(result, dict) and result.get("success") is False
        ]
        if failed:
            raise ChannelError(
                f"DingTalk created the card but could not deliver it to the group: {failed[0].get('errorMsg') or 'no reason'}"
                "; check open_conversation_id and that the app's robot is in the group",
                permanent=True,
            )
        return MessageRef({"out_track_id": out_track_id})

    def update_card(self, card: CardView, ref: MessageRef) -> None:
        """Redraw a posted card for everyone."""
        out_track_id = ref.data.get("out_track_id")
        if not isinstance(out_track_id, str) or not out_track_id:
            raise ChannelError(f"DingTalk message reference {ref.data!r} has no out_track_id", permanent=True)
        body = {
            "outTrackId": out_track_id,
            "cardData": {"cardParamMap": cards.card_params(card)},
            "cardUpdateOptions": {"updateCardDataByKey": True},
        }
        self._call("PUT", CARD_INSTANCES_PATH, body, "update the card")

    def _call(self, method: str, path: str, body: dict[str, Any], action: str) -> dict[str, Any]:
        response = self._send(method, path, body, action, self._access_token())
        if response.status_code == 401:
            # A token DingTalk no longer takes (the secret was reset): forget it and try once more.
            self._forget_token()
            response = self._send(method, path, body, action, self._access_token())
        if response.status_code >= 300:
            raise _api_error(action, response)
        try:
            answer = response.json()
        except ValueError:
            raise ChannelError(f"DingTalk answered '{action}' with a body that is not JSON") from None
        if isinstance(answer, dict) and answer.get("success") is False:
            raise ChannelError(f"DingTalk could not {action}: {answer.get('errorMsg') or answer}", permanent=True)
        return answer if isinstance(answer, dict) else {}

    def _send(self, method: str, path: str, body: dict[str, Any], action: str, token: str) -> requests.Response:
        try:
            return requests.request(
                method,
                self.config.api_base_url + path,
                json=body,
                headers={TOKEN_HEADER: token, "Content-Type": "application/json", "Accept": "application/json"},
                timeout=HTTP_TIMEOUT_SECONDS,
            )
        except requests.RequestException as exc:
            raise ChannelError(f"Could not reach DingTalk to {action}: {type(exc).__name__}") from None

    def _fingerprint(self) -> str:
        return hashlib.sha256(
            json.dumps([self.config.api_base_url, self.config.client_id, self.config.client_secret]).encode()
        ).hexdigest()

    def _forget_token(self) -> None:
        with _tokens_lock:
            _tokens.pop(self._fingerprint(), None)

    def _access_token(self) -> str:
        key = self._fingerprint()
        with _tokens_lock:
            cached = _tokens.get(key)
        if cached is not None and time.time() < cached[0]:
            return cached[1]
        try:
            response = requests.post(
                self.config.api_base_url + TOKEN_PATH,
                json={"appKey": self.config.client_id, "appSecret": self.config.client_secret},
                timeout=HTTP_TIMEOUT_SECONDS,
            )
        except requests.RequestException as exc:
            raise ChannelError(f"Could not reach DingTalk for an access token: {type(exc).__name__}") from None
        if response.status_code == 429 or response.status_code >= 500:
            raise _api_error("get an access token", response)
        try:
            answer = response.json()
            token, expires_in = str(answer["accessToken"]), int(answer["expireIn"])
        except (ValueError, KeyError, TypeError):
            raise ChannelError(
                f"DingTalk refused an access token for app {self.config.client_id} "
                f"(HTTP {response.status_code}: {_error_code(response)}); check client_id and client_secret",
                permanent=True,
            ) from None
        with _tokens_lock:
            _tokens[key] = (time.time() + expires_in - TOKEN_MARGIN_SECONDS, token)
        return token

    # --- inbound ----------------------------------------------------------

    def handle_callback(self, request: HttpRequest, decide: Decide) -> HttpResponse:
        raise CallbackError(
            403, "a DingTalk channel takes its clicks over the Stream connection (manage.py channel_connections), not at this URL"
        )

    def open_connection(self, decide: Decide) -> ChannelLink:
        """The Stream connection that brings this channel's card callbacks."""
        return DingTalkStreamLink(self, decide)

    def answer_card_callback(self, data: dict[str, Any], decide: Decide, *, delivery_id: str = "") -> tuple[int, dict[str, Any]]:
        """A card callback from the Stream, decided: the ack's code and its response.

        The response is the card as it is now (`cardData`, drawn at once for everyone) and
        `message`, the sentence for the clicker. A click that is not on one of our buttons is
        acknowledged with its CallbackError's status and changes nothing.
        """
        try:
            callback = parse_card_callback(data, delivery_id=delivery_id)
        except CallbackError as exc:
            logger.warning("dingtalk channel %s: click refused: %s", self.name, exc.message)
            return exc.status, {"message": exc.message}
        return 200, click_answer(decide(callback))


# --------------------------------------------------------------------- helpers


def out_track_id_for(idempotency_key: str) -> str:
    """The card's `outTrackId`: the same for every retry of one delivery."""
    return "gw-" + hashlib.sha256(idempotency_key.encode()).hexdigest()[: OUT_TRACK_ID_LENGTH - 3]


def parse_card_callback(data: dict[str, Any], *, delivery_id: str = "") -> Callback:
    """A Stream card callback (`CardCallbackMessage`'s fields) as a Callback; CallbackError(400) if it is not ours."""
    if not isinstance(data, dict):
        raise CallbackError(400, "the card callback is not a JSON object")
    try:
        message = CardCallbackMessage.from_dict(data)
    except (ValueError, TypeError):
        raise CallbackError(400, "the card callback's content is not JSON") from None
    private = message.content.get("cardPrivateData") if isinstance(message.content, dict) else None
    action_ids = private.get("actionIds") if isinstance(private, dict) else None
    if not isinstance(action_ids, list) or not action_ids or not isinstance(action_ids[0], str):
        raise CallbackError(400, "the card callback names no button")
    action, confirmation_id = cards.parse_button_id(action_ids[0])
    grant = _grant_index(action)
    if action not in (cards.APPROVE_ACTION, cards.REJECT_ACTION) and grant is None:
        raise CallbackError(400, f"the button action {action[:50]!r} is not one of this gateway's")
    if not message.user_id:
        raise CallbackError(400, "the card callback names no userId")
    decision = "reject" if action == cards.REJECT_ACTION else "approve"
    # A card template with an input named `reason` sends what was typed in it (docs/dingtalk.md).
    params = private.get("params") if isinstance(private.get("params"), dict) else {}
    typed = params.get(cards.REASON_PARAM)
    return Callback(
        confirmation_id=confirmation_id,
        decision=decision,
        actor=message.user_id,
        reason=typed.strip()[: cards.REASON_LIMIT] if decision == "reject" and isinstance(typed, str) else "",
        dedupe_key=f"dingtalk:message:{delivery_id}" if delivery_id else "",
        grant=grant,
    )


def _grant_index(action: str) -> int | None:
    tail = action.removeprefix(cards.GRANT_ACTION_PREFIX)
    return int(tail) if tail != action and tail.isdigit() and len(tail) <= 2 else None


def click_answer(outcome: DecisionOutcome) -> dict[str, Any]:
    """The ack's response to a click: the card as it is now (when there is one) and what the clicker is told."""
    answer: dict[str, Any] = {"message": outcome.message or ("Done." if outcome.applied else "Nothing was changed.")}
    if outcome.card is not None:
        answer["cardData"] = {"cardParamMap": cards.card_params(outcome.card)}
        answer["cardUpdateOptions"] = {"updateCardDataByKey": True}
    return answer


def _error_code(response: requests.Response) -> str:
    try:
        answer = response.json()
    except ValueError:
        return "not JSON"
    if isinstance(answer, dict):
        return str(answer.get("code") or answer.get("errcode") or "no code")[:100]
    return "no code"


def _api_error(action: str, response: requests.Response) -> ChannelError:
    """Class a DingTalk answer: a rate limit waits (Retry-After when given), other 4xx are permanent, 5xx transient."""
    code = _error_code(response)
    message = f"DingTalk could not {action}: HTTP {response.status_code}, code {code}"
    if response.status_code == 429 or any(marker in code for marker in _RATE_LIMIT_MARKERS):
        raw = response.headers.get("Retry-After")
        try:
            retry_after = max(0.0, float(raw)) if raw is not None else None
        except ValueError:
            retry_after = None
        return ChannelError(message, retry_after=retry_after)
    if response.status_code in (401, 403):
        return ChannelError(message + "; check the app's permissions (Card.Instance.Write) and credentials", permanent=True)
    if 400 <= response.status_code < 500 and response.status_code != 408:
        return ChannelError(message, permanent=True)
    return ChannelError(message)
