"""Config models for each channel kind (CONTRACT §3 `channels[]`).

Shared by the config-file validator, the admin and the adapters themselves.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

SLUG = r"^[a-z0-9][a-z0-9_-]*$"


class _ChannelBase(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(pattern=SLUG, max_length=64)


class WebChannelConfig(_ChannelBase):
    kind: Literal["web"]


class SlackChannelConfig(_ChannelBase):
    kind: Literal["slack"]
    bot_token: str = Field(min_length=1)
    signing_secret: str = Field(min_length=1)
    channel_id: str = Field(min_length=1)
    api_base_url: str = "https://slack.com/api/"


class FeishuChannelConfig(_ChannelBase):
    kind: Literal["feishu"]
    app_id: str = Field(min_length=1)
    app_secret: str = Field(min_length=1)
    verification_token: str = Field(min_length=1)
    encrypt_key: str = ""  # empty = plain callbacks
    chat_id: str = Field(min_length=1)
    api_base_url: str = "https://open.feishu.cn"


CHANNEL_CONFIG_MODELS: dict[str, type[_ChannelBase]] = {
    "web": WebChannelConfig,
    "slack": SlackChannelConfig,
    "feishu": FeishuChannelConfig,
}
