"""Feishu / Lark API answers classed (docs/feishu.md): which failures are worth a retry (a rate limit, with
the reset time Feishu gives), which are permanent (credentials, permissions, a refused card), the hint a
person needs to fix one, and a revoked tenant token forgotten. The adapter's calls end here when they fail.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import lark_oapi as lark
from lark_oapi.core.token.manager import TokenManager

from gateway_contract import ChannelError

LOG_ID_HEADER = "X-Tt-Logid"
# https://open.feishu.cn/document/server-docs/api-call-guide/frequency-control
RATE_LIMIT_RESET_HEADER = "x-ogw-ratelimit-reset"

# 99991400: the API gateway's frequency limit (HTTP 429, or 400 on older APIs);
# 230020: the per-chat send limit of the IM API.
_RATE_LIMIT_CODES = frozenset({99991400, 230020})
# The tenant token was missing or refused: lark-oapi may be holding a revoked one.
TOKEN_REFUSED_CODES = frozenset({99991661, 99991663})
# Token endpoint: 10003 invalid app_id, 10014 app secret invalid.
_CREDENTIAL_CODES = frozenset({10003, 10014})
# Answers that retrying cannot change, even when Feishu sends them with HTTP 200.
_PERMANENT_CODES = frozenset({
    *TOKEN_REFUSED_CODES,
    *_CREDENTIAL_CODES,
    230001,  # invalid request parameter (e.g. an unknown chat_id, a malformed card)
    230002,  # the bot is not in the chat
    230006,  # the app's bot ability is not enabled
    230027,  # the app lacks a permission
    230099,  # the card JSON was refused
    99991672,  # the app lacks the API scope
})
_HINTS = {
    230002: "add the app's bot to the chat",
    230006: "enable the bot ability of the app and publish a version",
    230027: "grant the app the im:message:send_as_bot permission",
    99991672: "grant the app the im:message:send_as_bot permission",
    10003: "check the channel's app_id",
    10014: "check the channel's app_secret",
}


def _header(headers: Mapping[str, str] | None, name: str) -> str | None:
    # RawResponse.headers is a plain dict of the names as the server sent them.
    for key, value in (headers or {}).items():
        if key.lower() == name.lower():
            return value
    return None


def log_id(response: lark.BaseResponse) -> str:
    return _header(response.raw.headers if response.raw else None, LOG_ID_HEADER) or "-"


def _retry_after(response: lark.BaseResponse) -> float | None:
    raw = _header(response.raw.headers if response.raw else None, RATE_LIMIT_RESET_HEADER)
    try:
        seconds = float(raw) if raw is not None else None
    except ValueError:
        return None
    return seconds if seconds is not None and math.isfinite(seconds) and seconds >= 0 else None


def api_error(action: str, response: lark.BaseResponse) -> ChannelError:
    status = response.raw.status_code if response.raw else None
    code = response.code
    message = f"Feishu could not {action}: code {code}: {response.msg} (HTTP {status}, log id {log_id(response)})"
    if code in _HINTS:
        message += f"; {_HINTS[code]}"
    if status == 429 or code in _RATE_LIMIT_CODES:
        return ChannelError(message, retry_after=_retry_after(response), code=str(code))
    if code in _PERMANENT_CODES or (status is not None and 400 <= status < 500):
        return ChannelError(message, permanent=True, code=str(code))
    return ChannelError(message, code=str(code))


def token_error(app_id: str, code: int | None, msg: str | None) -> ChannelError:
    message = f"Feishu refused a tenant access token for app {app_id}: code {code}: {msg}"
    if code in _HINTS:
        message += f"; {_HINTS[code]}"
    return ChannelError(message, permanent=code in _CREDENTIAL_CODES, code=str(code))


def forget_tenant_token(app_id: str) -> None:
    # Key format of lark-oapi 1.7.5's TokenManager.get_self_tenant_token; an expiry
    # in the past makes LocalCache.get drop the entry.
    TokenManager.cache.set(f"self_tenant_token:{app_id}", "", 0)
