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


# Worth another try later: the receiver is busy, rate-limiting or briefly broken.
TRANSIENT_STATUSES = frozenset({408, 425, 429})


def post_signed(url: str, payload: dict[str, Any], *, secret: str, timeout: float, message_id: str | None = None) -> httpx.Response:
    """POST `payload` signed; only a 2xx answer counts as delivered.

    Raises ChannelError: transient (retried with backoff) for network errors,
    5xx, 408, 425 and 429 (honouring `Retry-After`); permanent for other 4xx and
    for redirects, which are not followed (a signed body must not be replayed
    to wherever a 3xx points).
    """
    body = json.dumps(payload, separators=(",", ":"), default=str)
    try:
        response = httpx.post(
            url,
            content=body,
            headers=signed_headers(secret, body, message_id=message_id),
            timeout=timeout,
            follow_redirects=False,
        )
    except httpx.HTTPError as exc:
        raise ChannelError(f"POST {url} failed: {exc.__class__.__name__}: {exc}") from None
    status = response.status_code
    if 200 <= status < 300:
        return response
    if status >= 500 or status in TRANSIENT_STATUSES:
        raise ChannelError(f"POST {url} answered {status}", retry_after=_retry_after(response))
    if 300 <= status < 400:
        raise ChannelError(f"POST {url} answered a redirect ({status}); redirects are not followed", permanent=True)
    raise ChannelError(f"POST {url} answered {status}", permanent=True)


def _retry_after(response: httpx.Response) -> float | None:
    """`Retry-After` in seconds (only the delta form; capped at an hour), or None."""
    raw = response.headers.get("retry-after", "")
    try:
        return min(max(float(raw), 0.0), 3600.0)
    except ValueError:
        return None


def send_decision_webhook(confirmation) -> None:
    """POST the final decision to the agent's `callback_url`.

    The `webhook-id` is the same on every attempt (`msg_<confirmation id hex>`),
    so a receiver can drop a redelivery it has already handled; the timestamp and
    signature are fresh on each attempt, so a retry is never stale.
    """
    from approvals import selectors

    tool_call = getattr(confirmation, "tool_call", None)
    answer = selectors.answer_for_confirmation(confirmation, tool_args=confirmation.tool_args)
    payload = {
        "type": "confirmation.decided",
        "timestamp": dt.datetime.now(dt.timezone.utc).isoformat(),
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
