"""`python manage.py channel_connections`: hold the outbound connections of channels in
mode `socket` (Slack Socket Mode), `long_connection` (Feishu/Lark), `stream` (DingTalk) or
`polling` (Telegram's getUpdates), so the gateway needs no public URL. See
channels_ext/connections/runner.py, docs/slack.md §7, docs/feishu.md §7, docs/dingtalk.md and
docs/telegram.md §6."""

from __future__ import annotations

import signal
import threading
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from gateway_contract.links import ConnectionRefused
from channels_ext.connections.runner import Backoff, ConnectionRunner, channels_needing_connections

EXIT_REFUSED = 2  # a vendor refused a channel's credentials


class Command(BaseCommand):
    help = (
        "Hold the outbound connections of channels with mode: socket (Slack), mode: long_connection "
        "(Feishu/Lark), mode: stream (DingTalk) or mode: polling (Telegram): one per channel, reconnecting "
        "with backoff, re-reading the channels as they change. "
        f"Exits {EXIT_REFUSED} when a vendor refuses a channel's credentials."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--channel",
            action="append",
            dest="channels",
            metavar="NAME",
            help="hold only this channel's connection (repeatable); default: every channel that needs one",
        )
        parser.add_argument(
            "--list",
            action="store_true",
            help="print the channels that need a connection (name and mode, one per line) and exit",
        )
        parser.add_argument("--reload-seconds", type=float, default=10.0, help="how often to re-read the channels")
        parser.add_argument("--heartbeat-seconds", type=float, default=5.0, help="how often to report for /readyz")
        parser.add_argument("--backoff-seconds", type=float, default=1.0, help="first delay before reconnecting")
        parser.add_argument("--max-backoff-seconds", type=float, default=60.0, help="longest delay before reconnecting")

    def handle(self, *args: Any, **options: Any) -> None:
        only = set(options["channels"]) if options["channels"] else None
        if options["list"]:
            for name, mode in channels_needing_connections(only):
                self.stdout.write(f"{name}\t{mode}")
            return
        for key in ("reload_seconds", "heartbeat_seconds", "backoff_seconds", "max_backoff_seconds"):
            if options[key] <= 0:
                raise CommandError(f"--{key.replace('_', '-')} must be > 0")
        stop = threading.Event()
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda *_: stop.set())
        runner = ConnectionRunner(
            only=only,
            reload_seconds=options["reload_seconds"],
            heartbeat_seconds=options["heartbeat_seconds"],
            backoff=Backoff(base=options["backoff_seconds"], maximum=options["max_backoff_seconds"]),
        )
        try:
            runner.run(stop)
        except ConnectionRefused as exc:
            raise CommandError(exc.message, returncode=EXIT_REFUSED) from None
