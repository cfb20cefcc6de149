"""Telegram long polling: `getUpdates`, held by `manage.py channel_connections` (`mode: polling`).

No public URL is needed: the gateway asks Telegram for updates and each call
waits up to `poll_timeout_seconds` for one (https://core.telegram.org/bots/api#getupdates).
What this link does, and why:
- **The webhook goes first.** Telegram refuses getUpdates while the bot has a
  webhook; like python-telegram-bot's own polling, each session starts with
  `deleteWebhook` (pending updates are kept).
- **At least once, then exactly once.** A batch's updates are handled (each in a
  thread, since deciding touches the database) before the next call confirms them
  with `offset`; an update redelivered after a lost connection carries the same
  tap or message id, which `CallbackReceipt` turns into a no-op.
- **Lost connections** (a network error, a timeout, Telegram's 5xx) end the
  session; the runner reconnects with backoff. A refused token
  (`InvalidToken`: 401/404) raises ConnectionRefused, which stops the process
  with a message naming the key to fix. A 409 Conflict (another process polls
  the same bot: Telegram allows one) is retried with backoff and logged.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import Any, Protocol

from telegram import Bot
from telegram.error import Conflict, InvalidToken, NetworkError, TelegramError
from telegram.request import HTTPXRequest

from channels_ext.telegram.config import TelegramChannelConfig
from gateway_contract import CallbackError, Decide
from gateway_contract.links import CONNECTED, ConnectionRefused, Report

logger = logging.getLogger(__name__)


class PollingHost(Protocol):
    """What the link needs of its channel (the adapter hands itself, as slack-bolt hands its handler the app)."""

    name: str
    config: TelegramChannelConfig
    http_timeout: float

    def new_bot(self, request: HTTPXRequest) -> Bot: ...

    def scrub(self, text: str) -> str: ...

    def handle_update(self, data: Any, decide: Decide) -> None: ...

ALLOWED_UPDATES = ["callback_query", "message"]  # taps, and replies to the gateway's questions
WATCH_INTERVAL_SECONDS = 0.2


class TelegramPollingLink:
    """One Telegram channel's getUpdates long polling (gateway_contract/links.py's contract)."""

    def __init__(self, adapter: PollingHost, decide: Decide):
        self.adapter = adapter
        self.decide = decide

    @property
    def name(self) -> str:
        return self.adapter.name

    def serve(self, stop: threading.Event, report: Report) -> None:
        """Poll until the connection is lost or `stop` is set."""
        asyncio.run(self._serve(stop, report))

    async def _serve(self, stop: threading.Event, report: Report) -> None:
        timeout = self.adapter.http_timeout
        request = HTTPXRequest(connection_pool_size=1, connect_timeout=timeout, read_timeout=timeout)
        bot = self.adapter.new_bot(request)
        try:
            await self._call(bot.delete_webhook(drop_pending_updates=False), stop)
            offset: int | None = None
            wait = 0  # the first call returns at once: it tells whether the token and the bot work
            while not stop.is_set():
                updates = await self._call(
                    bot.get_updates(offset=offset, timeout=wait, allowed_updates=ALLOWED_UPDATES), stop
                )
                if updates is None:
                    return  # stopped
                if wait == 0:
                    report(CONNECTED, "long polling getUpdates")
                    wait = self.adapter.config.poll_timeout_seconds
                if updates:
                    await asyncio.gather(*(asyncio.to_thread(self._handle, update.to_dict()) for update in updates))
                    offset = updates[-1].update_id + 1
        finally:
            await request.shutdown()

    async def _call(self, call: Any, stop: threading.Event) -> Any:
        """Await a Bot API call while watching `stop`; None if stopped. Classes its failures for the runner."""
        task = asyncio.ensure_future(call)
        try:
            while not task.done():
                await asyncio.wait({task}, timeout=WATCH_INTERVAL_SECONDS)
                if stop.is_set() and not task.done():
                    task.cancel()
                    return None
            return task.result()
        except InvalidToken:
            raise ConnectionRefused(
                f"Telegram refused the bot token of channel {self.name!r}: check bot_token (ask @BotFather for the "
                "bot's token, or /revoke and use the new one) and run apply_config."
            ) from None
        except Conflict as err:
            raise ConnectionError(
                f"Telegram refused getUpdates: {self.adapter.scrub(err.message)[:200]} "
                "(only one process may poll a bot)"
            ) from None
        except (NetworkError, TelegramError) as err:
            raise ConnectionError(f"getUpdates failed: {self.adapter.scrub(err.message)[:200]}") from None

    def _handle(self, update: dict[str, Any]) -> None:
        try:
            self.adapter.handle_update(update, self.decide)
        except CallbackError as exc:
            logger.warning(
                "telegram channel %s: update %s refused: %s", self.name, update.get("update_id"), exc.message
            )
        except Exception:
            logger.exception("telegram channel %s: handling update %s failed", self.name, update.get("update_id"))
