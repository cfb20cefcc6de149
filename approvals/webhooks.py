"""The decision webhook: the final state of a request, POSTed signed to the agent's `callback_url`.

Signed like every outbound webhook (Standard Webhooks, `gateway_utils.outbound`) with
the agent's `webhook_secret`; delivered from the outbox, so a failing receiver
is retried with backoff and each attempt is recorded (docs/waiting.md).
"""

from __future__ import annotations

import datetime as dt

from approvals import selectors
from approvals.models import ConfirmationRequest
from gateway_utils.outbound import post_signed

TIMEOUT_SECONDS = 5


def send_decision_webhook(confirmation: ConfirmationRequest) -> None:
    """POST the final decision to the agent's `callback_url`; raises `DeliveryFailed`.

    The `webhook-id` is the same on every attempt (`msg_<confirmation id hex>`),
    so a receiver can drop a redelivery it has already handled; the timestamp and
    signature are fresh on each attempt, so a retry is never stale.
    """
    if confirmation.kind == "question":
        _post(confirmation, {
            "type": "question.answered",
            "timestamp": dt.datetime.now(dt.timezone.utc).isoformat(),
            "question": selectors.question_as_dict(confirmation),
        })  # fmt: skip
        return
    tool_call = getattr(confirmation, "tool_call", None)
    answer, masked = selectors.decided_call(confirmation, tool_call)
    payload = {
        "type": "confirmation.decided",
        "timestamp": dt.datetime.now(dt.timezone.utc).isoformat(),
        "confirmation": selectors.confirmation_as_dict(confirmation),
        "decision": answer.decision,
        "reason": answer.reason,
        # What to run when allowed: the approved arguments as the gateway holds them; the values at
        # `masked_paths` are masks, to be taken from the agent's own call (docs/waiting.md).
        "tool_args": answer.tool_args if answer.decision == "allow" else None,
        "masked_paths": masked if answer.decision == "allow" else [],
        "tool_call_id": confirmation.tool_call_id,
        "session_id": confirmation.session_id,
        "tool_call": str(tool_call.pk) if tool_call else None,
    }
    _post(confirmation, payload)


def _post(confirmation: ConfirmationRequest, payload: dict) -> None:
    post_signed(
        confirmation.callback_url,
        payload,
        secret=confirmation.agent.webhook_secret,
        timeout=TIMEOUT_SECONDS,
        message_id=f"msg_{confirmation.pk.hex}",
    )
