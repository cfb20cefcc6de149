"""`python manage.py channel_setup NAME [--url URL]`: tell a channel's vendor, through its API, how the
channel's callbacks reach the gateway — where the vendor allows it (Telegram: setWebhook, or
deleteWebhook for `mode: polling`; docs/telegram.md §3). Kinds set up in the vendor's console
(Slack, Feishu) say so and exit non-zero."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.urls import reverse

from approvals import selectors
from gateway_contract import ChannelError


class Command(BaseCommand):
    help = (
        "Register a channel's callback URL with its vendor where the vendor's API allows it (Telegram's "
        "setWebhook with the channel's secret token; deleteWebhook in mode: polling)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name", help="the channel's name in the config file")
        parser.add_argument(
            "--url",
            help="the callback URL the vendor should call; default: GATEWAY_PUBLIC_URL/channels/NAME/callback",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        channel = selectors.channel_lookup(name=options["name"])
        if channel is None:
            raise CommandError(f"no channel named {options['name']!r}; apply the config file first")
        url = options["url"] or settings.GATEWAY_PUBLIC_URL + reverse("channel-callback", args=[channel.name])
        try:
            done = selectors.channel_adapter(channel).setup(url)
        except NotImplementedError as exc:
            raise CommandError(str(exc)) from None
        except ChannelError as exc:
            raise CommandError(f"channel {channel.name!r}: {exc.message}") from None
        self.stdout.write(done)
