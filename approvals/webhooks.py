"""The decision webhook: the final state of a request, POSTed signed to the agent's `callback_url`.

Signed like every outbound webhook (Standard Webhooks, `gateway.outbound`) with
the agent's `webhook_secret`; delivered from the outbox, so a failing receiver
is retried with backoff and each attempt is recorded (docs/waiting.md).
"""

from __future__ import annotations

import datetime as dt

from approvals import selectors
from approvals.models import ConfirmationRequest
from gateway.outbound import post_signed

TIMEOUT_SECONDS = 5


def send_decision_webhook(confirmation: ConfirmationRequest) -> None:
    """POST the final decision to the agent's `callback_url`; raises `DeliveryFailed`.

    The `webhook-id` is the same on every attempt (`msg_<confirmation id hex>`),
    so a receiver can drop a redelivery it has already handled; the timestamp and
    signature are fresh on each attempt, so a retry is never stale.
    """
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
        timeout=TIMEOUT_SECONDS,
        message_id=f"msg_{confirmation.pk.hex}",
    )
