"""The `teams` channel's config keys (docs/teams.md, docs/reference/config.md).

A Teams channel is an Azure Bot (single-tenant app registration) installed in a
team or a chat. Cards go to `conversation_id` through the Bot Connector service
at `service_url`; clicks (Adaptive Card `Action.Execute` invokes) arrive at
`/channels/<name>/callback`, the bot's messaging endpoint, each with a JWT that
Bot Framework signs and the gateway checks against `openid_metadata_url`. The
three URL keys have Microsoft's public cloud as defaults; tests point them at a
local fake.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from gateway_contract import ChannelConfigBase, secret

BOT_FRAMEWORK_OPENID_METADATA = "https://login.botframework.com/v1/.well-known/openidconfiguration"


def _https_or_loopback(value: str) -> str:
    """An https URL, or http on a loopback host (a local fake): never a token over plain HTTP elsewhere."""
    value = value.strip()
    for allowed in ("https://", "http://127.0.0.1", "http://localhost", "http://[::1]"):
        if value.startswith(allowed):
            return value
    raise ValueError("must be an https:// URL (http:// only for 127.0.0.1, localhost or [::1])")


class TeamsChannelConfig(ChannelConfigBase):
    kind: Literal["teams"]
    app_id: str = Field(min_length=1, description="The bot's Microsoft App ID (the app registration's client id).")
    app_password: str = secret(min_length=1, description="A client secret of that app registration.")
    tenant_id: str = Field(min_length=1, description="The Entra tenant of the app registration (single-tenant bot).")
    conversation_id: str = Field(
        min_length=1, description="Where cards are posted: a team channel's or a group chat's conversation id (19:…)."
    )
    service_url: str = Field(
        "https://smba.trafficmanager.net/teams/",
        description="The Bot Connector service of the conversation (the serviceUrl Teams sends the bot).",
    )
    login_url: str = Field(
        "https://login.microsoftonline.com",
        description="The Entra authority host the bot's token comes from (the tenant is appended).",
    )
    openid_metadata_url: str = Field(
        BOT_FRAMEWORK_OPENID_METADATA,
        description="Bot Framework's OpenID metadata: its issuer and the keys that sign incoming activities.",
    )

    @field_validator("service_url", "login_url", "openid_metadata_url")
    @classmethod
    def _secure_url(cls, value: str) -> str:
        return _https_or_loopback(value)
