"""`python manage.py channel_setup NAME`: the Telegram webhook set (or removed) through the Bot API."""

from __future__ import annotations

import io

import pytest
from django.core.management import CommandError, call_command

from tests.channels_ext.telegram.support import CHANNEL, WEBHOOK_SECRET, configure
from tests.conftest import apply_config
from tests.fakes.telegram_api import FakeTelegram

pytestmark = pytest.mark.django_db(transaction=True)

URL = f"https://gateway.example.com/channels/{CHANNEL}/callback"


def setup(*args: str) -> str:
    out = io.StringIO()
    call_command("channel_setup", *args, stdout=out)
    return out.getvalue().strip()


def test_it_sets_the_webhook_with_the_channels_secret_token(fake_telegram: FakeTelegram, settings):
    settings.GATEWAY_PUBLIC_URL = "https://gateway.example.com"
    configure(fake_telegram)

    said = setup(CHANNEL)

    assert said == f"Telegram POSTs the bot's updates to {URL}, with the channel's secret token."
    assert fake_telegram.webhook["url"] == URL
    assert fake_telegram.webhook["secret_token"] == WEBHOOK_SECRET
    assert fake_telegram.webhook["allowed_updates"] == ["callback_query", "message"]


def test_a_url_telegram_refuses_is_a_clear_error(fake_telegram: FakeTelegram):
    configure(fake_telegram)

    with pytest.raises(CommandError) as refused:
        setup(CHANNEL, "--url", "http://gateway.internal/channels/ops-telegram/callback")

    # (python-telegram-bot drops "Bad Request: " from Telegram's description and capitalizes the rest.)
    assert str(refused.value) == (
        f"channel '{CHANNEL}': telegram setWebhook failed: Bad webhook: an https url must be provided for webhook"
    )
    assert fake_telegram.webhook is None


def test_in_polling_mode_it_removes_the_webhook(fake_telegram: FakeTelegram):
    fake_telegram.webhook = {"url": URL}
    configure(fake_telegram, mode="polling")

    said = setup(CHANNEL)

    assert said == "Telegram's webhook is removed: `manage.py channel_connections` fetches the updates."
    assert fake_telegram.webhook is None


def test_kinds_set_up_in_the_vendors_console_say_so(fake_slack):
    apply_config(
        f"""
channels:
  - {{name: ops-slack, kind: slack, bot_token: xoxb-1-2-setup, signing_secret: s, channel_id: C1,
     api_base_url: "{fake_slack.base_url}"}}
"""
    )

    with pytest.raises(CommandError, match=r"^slack channels are set up in the vendor's console, not by the gateway"):
        setup("ops-slack")
    with pytest.raises(CommandError, match=r"^no channel named 'nope'"):
        setup("nope")
