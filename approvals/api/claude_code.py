"""Claude Code's `type: "http"` hooks: `POST /api/v1/claude-code/hooks`.

Claude Code POSTs the same hook JSON a command hook reads on stdin (events
`PreToolUse` and `PermissionRequest`), with `Authorization: Bearer <api key>`
from the hook's `headers`. The view asks like `python -m
gateway_client.claude_code` does (`services.tool_call_pre`, the session and
`tool_use_id` as ids, an idempotency key derived from session + tool name +
canonical tool input) and answers with the same hook JSON
(`gateway_client.claude_code.answer_hook`).

Waiting: `?max_wait=N` seconds (default 20; at most, the default too, GATEWAY_WAIT_MAX_SECONDS)
for a human, then the still-pending deny (`?on_pending=ask` hands the call to
Claude Code's own prompt instead). This is an async view: the wait is
`approvals.waiting.wait_for_final` (the one waiting primitive), a coroutine, so a
waiting hook holds no thread. DRF has no async views, hence a plain Django view.

Claude Code treats a non-2xx answer, a timeout or a refused connection as a
*non-blocking* error: the call goes on without the gateway. So every hook
this view can read is answered 200, and a missing or revoked key, unreadable
input or a failure inside the gateway is a `deny` carrying the reason. A body
the gateway cannot read at all (not JSON, NaN, too large, too deep, not an
object) is answered 200 with an output that blocks whatever the event
(`blocked_output`), and any content type is taken (what Claude Code sends is
its own business; a 415 would let the call through). Only a readable hook of
another event than PreToolUse / PermissionRequest gets a 4xx (the contract's
error shape): such a hook gates nothing. An unreachable gateway cannot answer
at all: use the command hook where that must block.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

from asgiref.sync import sync_to_async
from django.conf import settings
from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from approvals import selectors, services
from approvals.api.auth import bearer_token
from approvals.api.errors import error_body
from approvals.api.parsing import json_loads
from approvals.errors import GatewayError, IdempotencyMismatch
from approvals.types import PreToolUseAnswer
from approvals.waiting import wait_for_final
from gateway_utils import tracing
from gateway_client.claude_code import (
    HookInput,
    UnsupportedEvent,
    answer_hook,
    blocked_output,
    hook_output,
    pending_reason,
)

logger = logging.getLogger("approvals.api.claude_code")

DEFAULT_MAX_WAIT = 20  # seconds; below the `timeout` the example settings give the http hook (30)
KEY_PREFIX = "claude-code-http"


class _Refused(Exception):
    """The API key is missing, unknown or revoked."""


def _max_wait(raw: str | None) -> float:
    if raw in (None, ""):
        return min(DEFAULT_MAX_WAIT, settings.GATEWAY_WAIT_MAX_SECONDS)  # the default never exceeds the maximum
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"max_wait must be a number of seconds, not {raw!r}") from None
    if not 0 <= value <= settings.GATEWAY_WAIT_MAX_SECONDS:
        raise ValueError(f"max_wait must be between 0 and {settings.GATEWAY_WAIT_MAX_SECONDS}")
    return value


def _ask(raw_key: str, hook: HookInput, user_id: str) -> tuple[Any, PreToolUseAnswer]:
    """Authenticate and run the pre-tool-use chain; (agent, answer)."""
    api_key = selectors.api_key_lookup(raw_key=raw_key)
    if api_key is None:
        raise _Refused("unknown or revoked API key" if raw_key else "missing 'Authorization: Bearer <api key>'")
    services.api_key_touch(api_key=api_key)
    # The fingerprint leaves out tool_use_id and cwd: a retried call has a new tool_use_id
    # and must still find the first ask (which keeps the first tool_use_id).
    identity = {
        "session_id": hook.session_id,
        "tool_name": hook.tool_name,
        "tool_args": hook.tool_input,
        "user_id": user_id,
    }
    ask = {
        **identity,
        "agent": api_key.agent,
        "tool_call_id": hook.tool_use_id,
        "metadata": {"source": "claude-code", **({"cwd": hook.cwd} if hook.cwd else {})},
        "fingerprint": services.request_fingerprint(identity),
    }
    key = hook.idempotency_key(prefix=KEY_PREFIX)
    try:
        return api_key.agent, services.tool_call_pre(**ask, idempotency_key=key)
    except IdempotencyMismatch:
        # The same call asked before for another user_id: ask anew rather than answer for someone else.
        return api_key.agent, services.tool_call_pre(
            **ask, idempotency_key=f"{key}:{hook.tool_use_id or uuid.uuid4().hex}"
        )


@csrf_exempt
@require_POST
async def claude_code_hook(request: HttpRequest) -> JsonResponse:
    """Answer one Claude Code PreToolUse / PermissionRequest hook, waiting up to `max_wait` seconds."""
    try:
        data = json_loads(request.body)
    except ValueError as exc:
        return JsonResponse(blocked_output(f"approval gateway: the hook input is not JSON the gateway reads: {exc}"))
    if not isinstance(data, dict):
        return JsonResponse(blocked_output("approval gateway: the hook input must be Claude Code's hook JSON object"))
    try:
        hook = HookInput.parse(data)
    except UnsupportedEvent as exc:
        return JsonResponse(error_body("unsupported_event", str(exc)), status=400)
    except ValueError as exc:
        return _deny(data["hook_event_name"], f"cannot read the hook input: {exc}")
    # The ask's span (when tracing is on), as for POST /api/v1/hooks/pre-tool-use.
    with tracing.tool_span(
        tool_name=hook.tool_name,
        tool_call_id=hook.tool_use_id,
        session_id=hook.session_id,
        context=tracing.extract(getattr(request, "scope", {}).get("headers", ())),
    ):
        return await _answer(request, hook)


async def _answer(request: HttpRequest, hook: HookInput) -> JsonResponse:
    def deny(reason: str) -> JsonResponse:
        return _deny(hook.event, reason)

    try:
        max_wait = _max_wait(request.GET.get("max_wait"))
    except ValueError as exc:
        return deny(str(exc))
    on_pending = "ask" if request.GET.get("on_pending") == "ask" else "deny"
    try:
        agent, answer = await sync_to_async(_ask)(
            bearer_token(request.headers.get("Authorization")), hook, request.GET.get("user_id", "")
        )
        reason, still_pending = answer.reason, False
        if answer.decision == "pending":
            confirmation = await wait_for_final(
                confirmation_id=answer.confirmation_id, agent_id=agent.pk, timeout=max_wait, via="claude_code"
            )
            if confirmation is not None and confirmation.is_final:
                answer = selectors.answer_for_confirmation(confirmation, tool_args=answer.tool_args)
                reason = answer.reason
            else:
                still_pending = True
                reason = pending_reason(answer.confirmation_id, url=selectors.confirmation_url(answer.confirmation_id))
    except _Refused as exc:
        return deny(str(exc))
    except GatewayError as exc:
        return deny(exc.message)
    except Exception:
        logger.exception("claude code hook failed for session %s", hook.session_id)
        return deny("the gateway failed while deciding; the call is not allowed (see the gateway log)")
    tracing.annotate({"gateway.decision": answer.decision})
    return JsonResponse(
        answer_hook(
            hook,
            decision=answer.decision,
            reason=reason,
            tool_args=answer.tool_args,
            still_pending=still_pending,
            on_pending=on_pending,
        )
    )


def _deny(event: str, reason: str) -> JsonResponse:
    return JsonResponse(hook_output(event, "deny", f"approval gateway: {reason}"))
