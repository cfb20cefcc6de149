"""The contract between a channel adapter's outbound connection and the process that holds it.

A *link* is one channel's connection to its vendor (Slack Socket Mode, the
Feishu/Lark long connection). `python manage.py channel_connections`
(channels_ext/connections/runner.py) calls `serve` in a thread of its own,
again and again with backoff, for as long as the channel is configured.
Like `ChannelAdapter.handle_callback`, a link hands every click to the
`decide` function it was given and never touches the database itself.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine
from typing import Any, Protocol

# States a link reports, in the order a healthy connection goes through them.
CONNECTING = "connecting"
CONNECTED = "connected"
RECONNECTING = "reconnecting"
FAILED = "failed"  # credentials refused: the process stops
STOPPED = "stopped"

Report = Callable[[str, str], None]  # (state, one sentence of detail)


class ConnectionRefused(Exception):
    """The vendor refused the channel's credentials (or settings): retrying cannot fix it.

    `message` says which key to fix; it never contains a secret.
    """

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


class ChannelLink(Protocol):
    def serve(self, stop: threading.Event, report: Report) -> None:
        """Connect, then answer the vendor's events until the connection is lost or `stop` is set.

        Call `report(CONNECTED, detail)` once the vendor confirms the connection.
        Return when the connection is lost (the caller reconnects with backoff) or
        `stop` is set. Raise ConnectionRefused when the credentials are refused;
        any other exception is a failed attempt, retried with backoff.
        """
        ...


def run_on_own_loop(coroutine: Coroutine[Any, Any, None]) -> None:
    """Run a link's asyncio work on an event loop of this thread's own, then close the loop and the
    threads of its default executor (where a link decides clicks): each `serve` call starts clean."""
    loop = asyncio.new_event_loop()
    try:
        asyncio.set_event_loop(loop)
        loop.run_until_complete(coroutine)
    finally:
        try:
            loop.run_until_complete(loop.shutdown_default_executor())
        finally:
            asyncio.set_event_loop(None)
            loop.close()
