"""The `telegram` channel's config keys (docs/telegram.md, docs/reference/config.md).

`mode` says how button taps reach the gateway: `http` (the default) as
Telegram's webhook POSTs to `/channels/<name>/callback`, each checked against
`webhook_secret` (Telegram's `X-Telegram-Bot-Api-Secret-Token` header); or
`polling`, where `manage.py channel_connections` long-polls `getUpdates` (no
public URL needed; docs/telegram.md §6).
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import Field, ValidationInfo, field_validator

from gateway_contract import ChannelConfigBase, needed_in_mode, not_blank_in_mode, secret

_BOT_TOKEN = re.compile(r"\d{1,20}:[A-Za-z0-9_-]{10,200}")
# https://core.telegram.org/bots/api#setwebhook: 1-256 characters, A-Z, a-z, 0-9, _ and -.
_WEBHOOK_SECRET = re.compile(r"[A-Za-z0-9_-]{1,256}")


class TelegramChannelConfig(ChannelConfigBase):
    kind: Literal["telegram"]
    mode: Literal["http", "polling"] = Field(
        "http",
        description="http: taps arrive as webhook POSTs to /channels/<name>/callback; polling: by getUpdates "
        "long polling in `manage.py channel_connections` (no public URL)",
    )
    bot_token: str = secret(min_length=1, description="The token @BotFather gave the bot (123456789:AA…).")
    chat_id: str = Field(
        min_length=1,
        description="Where cards are posted: a user's numeric id (a private chat with the bot), a group's id "
        "(-100…), or a channel's @username.",
    )
    webhook_secret: str = secret(
        None,  # None = not given; see needed_in_mode
        validate_default=True,
        description="mode: http only: the secret_token the webhook was set with (1-256 of A-Z a-z 0-9 _ -).",
    )
    api_base_url: str = Field(
        "https://api.telegram.org/bot",
        description="The Bot API root the token is appended to; a local Bot API server's, or the tests' fake.",
    )
    poll_timeout_seconds: int = Field(25, ge=1, le=50, description="mode: polling: how long one getUpdates waits.")

    @field_validator("bot_token")
    @classmethod
    def _a_bot_token(cls, value: str) -> str:
        if not _BOT_TOKEN.fullmatch(value.strip()):
            # Never echo the value: it is a secret even when it is malformed.
            raise ValueError("must be a bot token as @BotFather gives it: digits, a colon, then the secret")
        return value.strip()

    @field_validator("chat_id", mode="before")
    @classmethod
    def _chat_id_as_text(cls, value: Any) -> Any:
        return (
            str(value) if isinstance(value, int) and not isinstance(value, bool) else value
        )  # YAML reads -100… as a number

    @field_validator("webhook_secret", mode="before")
    @classmethod
    def _secret_given_for_http(cls, value: Any, info: ValidationInfo) -> Any:
        return needed_in_mode(value, info, "http")

    @field_validator("webhook_secret")
    @classmethod
    def _secret_shape(cls, value: str, info: ValidationInfo) -> str:
        value = not_blank_in_mode(value, info, "http")
        if info.data.get("mode") == "http" and not _WEBHOOK_SECRET.fullmatch(value):
            raise ValueError("must be 1-256 characters of A-Z, a-z, 0-9, _ and - (Telegram's secret_token)")
        return value

    def is_the_chat(self, chat_id: int, username: str = "") -> bool:
        """Whether a chat (an update's `chat.id`, and its `username` if public) is the one cards go to."""
        wanted = self.chat_id.strip()
        if wanted.startswith("@"):
            return bool(username) and username.casefold() == wanted[1:].casefold()
        return str(chat_id) == wanted

    @property
    def bot_id(self) -> int:
        """The bot's own user id: the token's part before the colon (its messages are `from` it)."""
        return int(self.bot_token.split(":", 1)[0])
