"""The `dingtalk` channel's config keys (docs/dingtalk.md, docs/reference/config.md).

A DingTalk channel is an internal app with a robot, added to one group chat.
Cards go to that group through DingTalk's card API (`api_base_url`); clicks come
back over the app's Stream connection, which `manage.py channel_connections`
holds (`mode: stream`, the only mode: no public URL is involved).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from gateway_contract import ChannelConfigBase, secret

# DingTalk's general card template (title, markdown, a row of buttons that call back over the Stream),
# as dingtalk-stream's own card classes use it: no template of one's own needs building.
GENERAL_CARD_TEMPLATE = "382e4302-551d-4880-bf29-a30acfab2e71.schema"


class DingTalkChannelConfig(ChannelConfigBase):
    kind: Literal["dingtalk"]
    mode: Literal["stream"] = Field(
        "stream", description="stream: clicks arrive over DingTalk's Stream connection (manage.py channel_connections)"
    )
    client_id: str = Field(min_length=1, description="The app's Client ID (AppKey); also its robot's robotCode.")
    client_secret: str = secret(min_length=1, description="The app's Client Secret (AppSecret).")
    open_conversation_id: str = Field(
        min_length=1, description="The group chat cards are posted to (its openConversationId, cid…)."
    )
    card_template_id: str = Field(GENERAL_CARD_TEMPLATE, min_length=1, description="The card template cards are drawn with.")
    api_base_url: str = Field("https://api.dingtalk.com", description="DingTalk's OpenAPI; tests point it at a local fake.")

    @field_validator("api_base_url")
    @classmethod
    def _bare_origin(cls, value: str) -> str:
        value = value.strip().rstrip("/")
        if not value.startswith(("https://", "http://127.0.0.1", "http://localhost", "http://[::1]")):
            raise ValueError("must be an https:// URL (http:// only for 127.0.0.1, localhost or [::1])")
        return value
