"""The `slack` channel's config keys (docs/slack.md)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from channels_ext.base import ChannelConfigBase, secret


class SlackChannelConfig(ChannelConfigBase):
    kind: Literal["slack"]
    bot_token: str = secret(min_length=1)
    signing_secret: str = secret(min_length=1)
    channel_id: str = Field(min_length=1)
    api_base_url: str = "https://slack.com/api/"
