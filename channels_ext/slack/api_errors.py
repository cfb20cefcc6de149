"""Slack Web API failures (raised by slack-sdk after its own retries) classed as permanent or transient."""

from __future__ import annotations

from typing import Any

from slack_sdk.errors import SlackApiError

from gateway_contract import ChannelError

# Errors that retrying cannot fix: bad credentials, a channel we cannot post to,
# a message we built wrong or can no longer edit.
PERMANENT_ERRORS = frozenset(
    {
        "invalid_auth",
        "not_authed",
        "account_inactive",
        "token_revoked",
        "channel_not_found",
        "not_in_channel",
        "is_archived",
        "missing_scope",
        "invalid_blocks",
        "msg_too_long",
        "no_text",
        "message_not_found",
        "cant_update_message",
        "edit_window_closed",
    }
)


def _header(headers: Any, name: str) -> str | None:
    for key, value in (headers or {}).items():
        if key.lower() == name.lower():
            return value[0] if isinstance(value, list) else value
    return None


def _retry_after(headers: Any) -> float | None:
    value = _header(headers, "Retry-After")
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


def api_error(method: str, err: SlackApiError) -> ChannelError:
    """Class a SlackApiError (raised after the SDK's own retries) as permanent or transient."""
    response = err.response
    status = response.status_code
    data = response.data if isinstance(response.data, dict) else {}
    code = str(data.get("error") or f"http_{status}")[:100]
    message = f"slack {method} failed: {code}"
    if status == 429:
        return ChannelError(message, retry_after=_retry_after(response.headers), code=code)
    if code in PERMANENT_ERRORS:
        return ChannelError(message, permanent=True, code=code)
    if 400 <= status < 500 and status != 408:
        # e.g. 404 from a wrong api_base_url: a configuration problem, not a blip.
        return ChannelError(message, permanent=True, code=code)
    return ChannelError(message, code=code)
