"""The `feishu` channel's config keys (docs/feishu.md); Lark apps use the same keys."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from channels_ext.base import ChannelConfigBase, secret


class FeishuChannelConfig(ChannelConfigBase):
    kind: Literal["feishu"]
    app_id: str = Field(min_length=1)
    app_secret: str = secret(min_length=1)
    verification_token: str = secret(min_length=1)
    encrypt_key: str = secret("")  # empty = plain callbacks
    chat_id: str = Field(min_length=1)
    api_base_url: str = "https://open.feishu.cn"
