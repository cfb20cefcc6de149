"""The `slack` channel's config keys (docs/slack.md, docs/reference/config.md).

`mode` says how clicks reach the gateway: `http` (the default) as signed
requests to `/channels/<name>/callback`, verified with `signing_secret`;
`socket` over Slack Socket Mode, which `manage.py channel_connections` holds
with the app-level `app_token` (no public URL needed; docs/slack.md §7). Keys
that only one mode uses are required in that mode and refused in the other,
each error at the key's own path (`channels[0].app_token: …`).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, ValidationInfo, field_validator

from gateway_contract import (
    ChannelConfigBase,
    DigestConfig,
    needed_in_mode,
    not_blank_in_mode,
    secret,
)


class SlackChannelConfig(ChannelConfigBase):
    kind: Literal["slack"]
    mode: Literal["http", "socket"] = Field(
        "http",
        description="http: clicks arrive at /channels/<name>/callback; socket: over Slack Socket Mode (needs app_token)",
    )
    bot_token: str = secret(min_length=1)
    signing_secret: str = secret(
        None,  # None = not given; see needed_in_mode
        validate_default=True,
        description="Required with mode: http (it verifies every click); unused with mode: socket.",
    )
    app_token: str = secret(
        None,
        validate_default=True,
        description="mode: socket only: an app-level token (xapp-…) with the connections:write scope.",
    )
    channel_id: str = Field(min_length=1)
    api_base_url: str = "https://slack.com/api/"
    digest: DigestConfig | None = Field(
        None, description="gather calls of these risks into one message every N minutes (docs/slack.md, Digests)"
    )

    @field_validator("signing_secret", mode="before")
    @classmethod
    def _signing_secret_given_for_http(cls, value: Any, info: ValidationInfo) -> Any:
        return needed_in_mode(value, info, "http")

    @field_validator("signing_secret")
    @classmethod
    def _signing_secret_not_blank_for_http(cls, value: str, info: ValidationInfo) -> str:
        return not_blank_in_mode(value, info, "http")

    @field_validator("app_token", mode="before")
    @classmethod
    def _app_token_given_for_socket(cls, value: Any, info: ValidationInfo) -> Any:
        if value is None and info.data.get("mode") == "socket":
            raise ValueError("is required with `mode: socket`: an app-level token (xapp-…) with connections:write")
        return needed_in_mode(value, info, "socket")

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
