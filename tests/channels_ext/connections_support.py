"""Running `channel_connections`' runner inside a test, and reading what it records."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

from channels_ext.connections.runner import Backoff, ConnectionRunner
from channels_ext.models import ChannelConnection

# Fast enough for tests: re-read channels 5× a second, report twice a second, reconnect within 0.5 s.
FAST = {"reload_seconds": 0.2, "heartbeat_seconds": 0.5, "backoff": Backoff(base=0.05, maximum=0.5)}


class RunningConnections:
    """A ConnectionRunner in a thread, as `manage.py channel_connections` runs it in its main thread."""

    def __init__(self, **options):
        self.runner = ConnectionRunner(**{**FAST, **options})
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name="channel-connections", daemon=True)

    def _run(self) -> None:
        try:
            self.runner.run(self.stop)
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            self.error = exc

    def finish(self) -> None:
        self.stop.set()
        self.thread.join(timeout=20)
        assert not self.thread.is_alive(), "the connection runner did not stop"


@contextlib.contextmanager
def running_connections(**options) -> Iterator[RunningConnections]:
    running = RunningConnections(**options)
    running.thread.start()
    try:
        yield running
    finally:
        running.finish()


def connection_state(channel: str, process: str | None = None) -> str | None:
    """The state a runner last recorded for `channel` (for its process, if given)."""
    rows = ChannelConnection.objects.filter(channel=channel)
    if process is not None:
        rows = rows.filter(process=process)
    return rows.values_list("state", flat=True).first()
