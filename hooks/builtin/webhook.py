"""`webhook`: POST the event, signed, to a policy service and apply its answer (docs/reference/config.md).

How an OPA or in-house policy service plugs in: it receives the same JSON a
`command` hook gets on stdin and answers like one (`{"decision", "reason",
"tool_args"}` or Claude Code's `hookSpecificOutput`); see docs/policies.md.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Literal

import httpx
from pydantic import Field

from gateway_utils.outbound import USER_AGENT, OutboundRefused, guarded_client, signed_headers
from hooks.base import Hook, HookContext, HookResult
from hooks.builtin.external import event_payload, parse_answer
from hooks.config import Event, HookConfigBase, HttpUrl

# Requests run here so the caller waits at most `timeout_ms` in all (httpx's own
# timeouts are per phase: connect, write, each read). A request given up on still
# ends by its own httpx timeout.
_POOL = ThreadPoolExecutor(max_workers=16, thread_name_prefix="webhook-hook")


def signing_key(secret: str) -> str | bytes:
    """A `whsec_…` secret is base64 as Standard Webhooks defines it; any other string is the raw HMAC key."""
    return secret if secret.startswith("whsec_") else secret.encode()


def _post(url: str, body: str, headers: dict[str, str], timeout: float) -> httpx.Response:
    """POST through the outbound guard: the URL's address must be public or allowed (gateway_utils.outbound)."""
    with guarded_client(timeout=timeout) as client:
        return client.post(url, content=body, headers=headers)


class WebhookConfig(HookConfigBase):
    """POST the event, signed, to a URL; it answers like a command hook."""

    kind: Literal["webhook"]
    event: Event
    url: HttpUrl
    secret: str = ""
    timeout_ms: int = Field(default=3000, gt=0)

    def outbound_urls(self) -> list[tuple[str, str]]:
        return [("url", self.url)]


class WebhookHook(Hook):
    """Invariant: the service's verdict is applied, and the chain never waits on it past `timeout_ms`.

    The body is signed with the hook's `secret` like outbound decision webhooks
    (Standard Webhooks: `webhook-id`, `webhook-timestamp`, `webhook-signature`);
    with no secret it is sent unsigned. A 2xx with a JSON object: that answer.
    A 2xx with an empty body: no opinion. A timeout, a network error, another
    status or an unreadable body is the hook's error, handled by `on_error`.
    """

    kind = "webhook"
    events = WebhookConfig.EVENTS
    config_model = WebhookConfig
    config: WebhookConfig
    calls_out = True

    def run(self, ctx: HookContext) -> HookResult:
        c = self.config
        body = json.dumps(event_payload(ctx, self.name), separators=(",", ":"), default=str)
        if c.secret:
            headers = signed_headers(signing_key(c.secret), body)
        else:
            headers = {"content-type": "application/json", "user-agent": USER_AGENT}
        budget = c.timeout_ms / 1000
        future = _POOL.submit(_post, c.url, body, headers, budget)
        try:
            response = future.result(timeout=budget)
        except (FutureTimeout, httpx.TimeoutException):
            future.cancel()
            raise TimeoutError(f"no answer from {c.url} within {c.timeout_ms} ms") from None
        except OutboundRefused as exc:
            raise RuntimeError(f"POST {c.url} refused: {exc}") from None
        except httpx.HTTPError as exc:
            raise RuntimeError(f"POST {c.url} failed: {exc.__class__.__name__}: {exc}") from None
        if not response.is_success:
            raise RuntimeError(f"POST {c.url} answered {response.status_code}")
        text = response.text.strip()
        try:
            return parse_answer(json.loads(text) if text else None)
        except ValueError as exc:  # json.JSONDecodeError is a ValueError
            raise RuntimeError(f"unreadable answer from {c.url}: {exc}") from None
