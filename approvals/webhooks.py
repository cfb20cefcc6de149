"""Signed outbound webhooks (Standard Webhooks: https://www.standardwebhooks.com/).

Each POST carries `webhook-id`, `webhook-timestamp` and `webhook-signature`
(`v1,<base64 HMAC-SHA256 of "id.timestamp.body">` with the agent's secret);
receivers verify with any Standard Webhooks library, e.g. Python's
`standardwebhooks.Webhook(secret).verify(body, headers)`.
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
from typing import Any

import httpx
from standardwebhooks.webhooks import Webhook

from channels_ext.base import ChannelError

USER_AGENT = "approval-gateway-webhook/1"


def signed_headers(secret: str, body: str, *, message_id: str | None = None) -> dict[str, str]:
    message_id = message_id or f"msg_{uuid.uuid4().hex}"
    now = dt.datetime.now(dt.timezone.utc)
    return {
        "content-type": "application/json",
        "user-agent": USER_AGENT,
        "webhook-id": message_id,
        "webhook-timestamp": str(int(now.timestamp())),
        "webhook-signature": Webhook(secret).sign(message_id, now, body),
    }


def post_signed(url: str, payload: dict[str, Any], *, secret: str, timeout: float, message_id: str | None = None) -> httpx.Response:
    """POST `payload` signed; raise ChannelError (transient for 5xx/429/network, permanent for other 4xx)."""
    body = json.dumps(payload, separators=(",", ":"), default=str)
    try:
        response = httpx.post(url, content=body, headers=signed_headers(secret, body, message_id=message_id), timeout=timeout)
    except httpx.HTTPError as exc:
        raise ChannelError(f"POST {url} failed: {exc.__class__.__name__}: {exc}") from None
    if response.status_code >= 500 or response.status_code == 429:
        raise ChannelError(f"POST {url} answered {response.status_code}")
    if response.status_code >= 400:
        raise ChannelError(f"POST {url} answered {response.status_code}", permanent=True)
    return response


def send_decision_webhook(confirmation) -> None:
    """POST the final decision to the agent's `callback_url`."""
    from approvals import selectors

    tool_call = getattr(confirmation, "tool_call", None)
    answer = selectors.answer_for_confirmation(confirmation, tool_args=confirmation.tool_args)
    payload = {
        "type": "confirmation.decided",
        "confirmation": selectors.confirmation_as_dict(confirmation),
        "decision": answer.decision,
        "reason": answer.reason,
        "tool_call_id": confirmation.tool_call_id,
        "session_id": confirmation.session_id,
        "tool_call": str(tool_call.pk) if tool_call else None,
    }
    post_signed(
        confirmation.callback_url,
        payload,
        secret=confirmation.agent.webhook_secret,
        timeout=5,
        message_id=f"msg_{confirmation.pk.hex}",
    )
