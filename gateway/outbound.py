"""Signed outbound webhooks (Standard Webhooks: https://www.standardwebhooks.com/).

Everything the gateway POSTs on someone's behalf and signs goes through here:
the decision webhooks sent to an agent's `callback_url` (`approvals.webhooks`)
and the `webhook` hook kind (`hooks.builtin.webhook`). A leaf module: it knows
nothing of the gateway's models, hooks or channels.

Each POST carries `webhook-id`, `webhook-timestamp` and `webhook-signature`
(`v1,<base64 HMAC-SHA256 of "id.timestamp.body">` with the secret); receivers
verify with any Standard Webhooks library, e.g. Python's
`standardwebhooks.Webhook(secret).verify(body, headers)`.
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
from typing import Any

import httpx
from standardwebhooks.webhooks import Webhook

USER_AGENT = "approval-gateway-webhook/1"

# Worth another try later: the receiver is busy, rate-limiting or briefly broken.
TRANSIENT_STATUSES = frozenset({408, 425, 429})


class DeliveryFailed(Exception):
    """An outbound call that failed. Transient ones are retried; permanent ones are recorded and given up.

    `channels_ext.base.ChannelError` is the channel adapters' kind of it.
    """

    def __init__(self, message: str, *, permanent: bool = False, retry_after: float | None = None):
        super().__init__(message)
        self.message = message
        self.permanent = permanent
        self.retry_after = retry_after


def signed_headers(secret: str | bytes, body: str, *, message_id: str | None = None) -> dict[str, str]:
    """The Standard Webhooks headers for `body`. A `whsec_…` string is the base64 key; bytes are the raw key."""
    message_id = message_id or f"msg_{uuid.uuid4().hex}"
    now = dt.datetime.now(dt.timezone.utc)
    return {
        "content-type": "application/json",
        "user-agent": USER_AGENT,
        "webhook-id": message_id,
        "webhook-timestamp": str(int(now.timestamp())),
        "webhook-signature": Webhook(secret).sign(message_id, now, body),  # type: ignore[arg-type]
    }


def post_signed(
    url: str, payload: dict[str, Any], *, secret: str, timeout: float, message_id: str | None = None
) -> httpx.Response:
    """POST `payload` signed; only a 2xx answer counts as delivered.

    Raises DeliveryFailed: transient (retried with backoff) for network errors,
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
        raise DeliveryFailed(f"POST {url} failed: {exc.__class__.__name__}: {exc}") from None
    status = response.status_code
    if 200 <= status < 300:
        return response
    if status >= 500 or status in TRANSIENT_STATUSES:
        raise DeliveryFailed(f"POST {url} answered {status}", retry_after=retry_after(response))
    if 300 <= status < 400:
        raise DeliveryFailed(f"POST {url} answered a redirect ({status}); redirects are not followed", permanent=True)
    raise DeliveryFailed(f"POST {url} answered {status}", permanent=True)


def retry_after(response: httpx.Response) -> float | None:
    """`Retry-After` in seconds (only the delta form; capped at an hour), or None."""
    raw = response.headers.get("retry-after", "")
    try:
        return min(max(float(raw), 0.0), 3600.0)
    except ValueError:
        return None
