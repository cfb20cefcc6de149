"""Config models for each channel kind (CONTRACT §3 `channels[]`).

Shared by the config-file validator, the admin and the adapters themselves.
Keys that hold credentials carry `json_schema_extra={"secret": True}`.

`mode` says how a channel's clicks reach the gateway (docs/slack.md §7,
docs/feishu.md §7): `http` (the default) as signed callbacks to
`/channels/<name>/callback`; `socket` (Slack Socket Mode) or `long_connection`
(Feishu/Lark) over an outbound connection that `manage.py channel_connections`
holds, for gateways with no public URL. Keys that only one mode uses are
required in that mode and refused in the other, each error at the key's own
path (`channels[0].app_token: …`).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator
from pydantic_core import PydanticCustomError

SLUG = r"^[a-z0-9][a-z0-9_-]*$"
SECRET: dict[str, Any] = {"secret": True}


def _no_null_defaults(schema: dict[str, Any]) -> None:
    """JSON Schema: keys whose default is None (mode-dependent, see _needed_in_mode) show no `default: null`."""
    for prop in schema.get("properties", {}).values():
        if "default" in prop and prop["default"] is None:
            del prop["default"]


class _ChannelBase(BaseModel):
    model_config = ConfigDict(extra="forbid", json_schema_extra=_no_null_defaults)
    name: str = Field(pattern=SLUG, max_length=64)


def _needed_in_mode(value: Any, info: ValidationInfo, mode: str) -> Any:
    """Before-validator of a key that channels in `mode` must have and others may leave out.

    The key's default is None (not given): "is required" in `mode`, "" elsewhere. `mode`
    is declared before these keys, so `info.data` already holds it (absent if invalid).
    """
    if value is None:
        if info.data.get("mode") == mode:
            raise PydanticCustomError("missing", "Field required")
        return ""
    return value


def _not_blank_in_mode(value: str, info: ValidationInfo, mode: str) -> str:
    if info.data.get("mode") == mode and not value.strip():
        raise PydanticCustomError("string_too_short", "String should have at least 1 character", {"min_length": 1})
    return value


class WebChannelConfig(_ChannelBase):
    kind: Literal["web"]


class SlackChannelConfig(_ChannelBase):
    kind: Literal["slack"]
    mode: Literal["http", "socket"] = Field(
        "http",
        description="http: clicks arrive at /channels/<name>/callback; socket: over Slack Socket Mode (needs app_token)",
    )
    bot_token: str = Field(min_length=1, json_schema_extra=SECRET)
    signing_secret: str = Field(
        None,  # type: ignore[assignment]  # None = not given; see _needed_in_mode
        validate_default=True,
        description="Required with mode: http (it verifies every click); unused with mode: socket.",
        json_schema_extra=SECRET,
    )
    app_token: str = Field(
        None,  # type: ignore[assignment]
        validate_default=True,
        description="mode: socket only: an app-level token (xapp-…) with the connections:write scope.",
        json_schema_extra=SECRET,
    )
    channel_id: str = Field(min_length=1)
    api_base_url: str = "https://slack.com/api/"

    @field_validator("signing_secret", mode="before")
    @classmethod
    def _signing_secret_given_for_http(cls, value: Any, info: ValidationInfo) -> Any:
        return _needed_in_mode(value, info, "http")

    @field_validator("signing_secret")
    @classmethod
    def _signing_secret_not_blank_for_http(cls, value: str, info: ValidationInfo) -> str:
        return _not_blank_in_mode(value, info, "http")

    @field_validator("app_token", mode="before")
    @classmethod
    def _app_token_given_for_socket(cls, value: Any, info: ValidationInfo) -> Any:
        if value is None and info.data.get("mode") == "socket":
            raise ValueError("is required with `mode: socket`: an app-level token (xapp-…) with connections:write")
        return _needed_in_mode(value, info, "socket")

    @field_validator("app_token")
    @classmethod
    def _app_token_is_an_app_level_token(cls, value: str, info: ValidationInfo) -> str:
        mode = info.data.get("mode")
        if mode == "http" and value:
            raise ValueError("is used only with `mode: socket`; add `mode: socket` or remove app_token")
        if mode == "socket" and not value.strip().startswith("xapp-"):
            # Never echo the value: it may be a real bot token pasted in the wrong place.
            raise ValueError(
                "must be an app-level token starting with xapp- (Basic Information → App-Level Tokens, "
                "scope connections:write); a bot token (xoxb-…) is not accepted"
            )
        return value.strip()


class FeishuChannelConfig(_ChannelBase):
    kind: Literal["feishu"]
    mode: Literal["http", "long_connection"] = Field(
        "http",
        description="http: callbacks arrive at /channels/<name>/callback; long_connection: over Feishu's WebSocket",
    )
    app_id: str = Field(min_length=1)
    app_secret: str = Field(min_length=1, json_schema_extra=SECRET)
    verification_token: str = Field(
        None,  # type: ignore[assignment]
        validate_default=True,
        description="Required with mode: http; unused with mode: long_connection.",
        json_schema_extra=SECRET,
    )
    encrypt_key: str = Field("", json_schema_extra=SECRET)  # empty = plain callbacks (mode: http)
    chat_id: str = Field(min_length=1)
    api_base_url: str = "https://open.feishu.cn"

    @field_validator("verification_token", mode="before")
    @classmethod
    def _token_given_for_http(cls, value: Any, info: ValidationInfo) -> Any:
        return _needed_in_mode(value, info, "http")

    @field_validator("verification_token")
    @classmethod
    def _token_not_blank_for_http(cls, value: str, info: ValidationInfo) -> str:
        return _not_blank_in_mode(value, info, "http")


CHANNEL_CONFIG_MODELS: dict[str, type[_ChannelBase]] = {
    "web": WebChannelConfig,
    "slack": SlackChannelConfig,
    "feishu": FeishuChannelConfig,
}
