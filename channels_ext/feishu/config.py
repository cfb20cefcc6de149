"""The `feishu` channel's config keys (docs/feishu.md, docs/reference/config.md); Lark apps use the same keys.

`mode` says how card callbacks reach the gateway: `http` (the default) at
`/channels/<name>/callback`, checked with `verification_token` (and
`encrypt_key`); `long_connection` over Feishu/Lark's WebSocket, which
`manage.py channel_connections` holds (no public URL needed; docs/feishu.md §7).
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


class FeishuChannelConfig(ChannelConfigBase):
    kind: Literal["feishu"]
    mode: Literal["http", "long_connection"] = Field(
        "http",
        description="http: callbacks arrive at /channels/<name>/callback; long_connection: over Feishu's WebSocket",
    )
    app_id: str = Field(min_length=1)
    app_secret: str = secret(min_length=1)
    verification_token: str = secret(
        None,
        validate_default=True,
        description="Required with mode: http; unused with mode: long_connection.",
    )
    encrypt_key: str = secret("")  # empty = plain callbacks (mode: http)
    chat_id: str = Field(min_length=1)
    api_base_url: str = "https://open.feishu.cn"
    digest: DigestConfig | None = Field(
        None, description="gather calls of these risks into one card every N minutes (docs/feishu.md, Digests)"
    )

    @field_validator("verification_token", mode="before")
    @classmethod
    def _token_given_for_http(cls, value: Any, info: ValidationInfo) -> Any:
        return needed_in_mode(value, info, "http")

    @field_validator("verification_token")
    @classmethod
    def _token_not_blank_for_http(cls, value: str, info: ValidationInfo) -> str:
        return not_blank_in_mode(value, info, "http")
