"""`python manage.py channel_connections`: hold one outbound connection per channel that needs one.

A channel with `mode: socket` (Slack), `mode: long_connection` (Feishu/Lark) or
`mode: stream` (DingTalk) or `mode: polling` (Telegram) gets its clicks over a
connection the gateway opens to the vendor, so the gateway needs no public URL
(docs/slack.md §7, docs/feishu.md §7, docs/dingtalk.md, docs/telegram.md §6).

How it runs:
- Every `reload_seconds` the channels are re-read from the database, so a
  channel that `apply_config` adds, changes or removes is picked up without a
  restart (a changed channel's connection is closed and opened again).
- Each connection lives in a thread of its own (`_Holder`) that calls the
  adapter's link (`ChannelAdapter.open_connection`) again and again, with
  exponential backoff and jitter between attempts, logging every state change.
- A refused credential (ConnectionRefused) stops the whole process with a
  non-zero exit and a message naming the channel and the key to fix: retrying
  cannot help, and a supervisor restarting it shows the message each time.
  Run one process per channel (`--channel NAME`) to keep channels apart.
- Each connection's state, with a heartbeat, is written to `ChannelConnection`
  (channels_ext/models.py), where `/readyz` reads it.

Several processes may run at once, on one machine or several: the vendors hand
each event to one connection, and a click is decided exactly once anyway
(`services.confirmation_respond`: one conditional UPDATE, and a
`CallbackReceipt` per delivery id for redeliveries).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import random
import socket
import threading
import time
from datetime import timedelta

from django.db import close_old_connections
from django.utils import timezone

from approvals import selectors, services
from gateway_contract import Callback, ChannelAdapter, Decide, DecisionOutcome, get_adapter
from gateway_contract.links import (
    CONNECTED,
    CONNECTING,
    FAILED,
    RECONNECTING,
    STOPPED,
    ChannelLink,
    ConnectionRefused,
)
from channels_ext.models import ChannelConnection

logger = logging.getLogger(__name__)

STALE_ROWS_AFTER = timedelta(days=1)  # rows of processes long gone are pruned at start-up


def process_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def channels_needing_connections(only: set[str] | None = None) -> list[tuple[str, str]]:
    """(name, mode) of every configured channel whose clicks come over an outbound connection."""
    found = []
    for channel in selectors.channel_list():
        if only is not None and channel.name not in only:
            continue
        mode = channel.config.get("mode", "http") if isinstance(channel.config, dict) else "http"
        if mode != "http":
            found.append((channel.name, str(mode)))
    return found


@dataclasses.dataclass(frozen=True)
class Backoff:
    """Exponential backoff with jitter: `base`, 2×, 4× … up to `maximum` seconds, each × 0.5–1."""

    base: float = 1.0
    maximum: float = 60.0

    def delay(self, failures: int) -> float:
        ceiling = min(self.maximum, self.base * (2 ** min(failures, 30)))
        return ceiling * random.uniform(0.5, 1.0)


def decide_on(channel_name: str) -> Decide:
    """The `decide` a link gets: the same service the HTTP callback view calls."""

    def decide(callback: Callback) -> DecisionOutcome:
        close_old_connections()  # this runs in a long-lived thread: drop a connection the database closed
        try:
            return services.confirmation_respond(channel_name=channel_name, callback=callback)
        finally:
            close_old_connections()

    return decide


class _Holder:
    """Keeps one channel's link connected: a thread that reconnects with backoff and records its state."""

    def __init__(self, name: str, mode: str, fingerprint: str, link: ChannelLink, backoff: Backoff):
        self.name = name
        self.mode = mode
        self.fingerprint = fingerprint
        self.link = link
        self.backoff = backoff
        self.stop = threading.Event()
        self.refused: str | None = None
        self._lock = threading.Lock()
        self.state = CONNECTING
        self.detail = ""
        self.since = timezone.now()
        self.changed = True
        self._connected_this_attempt = False
        self.thread = threading.Thread(target=self._run, name=f"connection-{name}", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def snapshot(self) -> tuple[str, str, object]:
        with self._lock:
            self.changed = False
            return self.state, self.detail, self.since

    def report(self, state: str, detail: str) -> None:
        """A state change (from this thread or from the link's own threads): logged and recorded."""
        with self._lock:
            if (state, detail) == (self.state, self.detail):
                return
            if state != self.state:
                self.since = timezone.now()
            self.state, self.detail, self.changed = state, detail, True
            if state == CONNECTED:
                self._connected_this_attempt = True
        level = {FAILED: logging.ERROR, RECONNECTING: logging.WARNING}.get(state, logging.INFO)
        logger.log(level, "channel %s (%s): %s%s", self.name, self.mode, state, f" — {detail}" if detail else "")

    def _run(self) -> None:
        failures = 0
        while not self.stop.is_set():
            self._connected_this_attempt = False
            if failures == 0:
                self.report(CONNECTING, "")
            try:
                self.link.serve(self.stop, self.report)
                outcome = "the connection was lost"
            except ConnectionRefused as exc:
                self.refused = exc.message
                self.report(FAILED, exc.message)
                return
            except Exception as exc:
                outcome = f"the attempt failed ({type(exc).__name__}: {exc})"
            if self.stop.is_set():
                break
            if self._connected_this_attempt:
                failures = 0  # it worked for a while: start the backoff again from the bottom
            delay = self.backoff.delay(failures)
            failures += 1
            self.report(RECONNECTING, f"{outcome}; retrying in {delay:.1f} s")
            self.stop.wait(delay)
        self.report(STOPPED, "")


class ConnectionRunner:
    """The main loop of `manage.py channel_connections`."""

    def __init__(
        self,
        *,
        only: set[str] | None = None,
        reload_seconds: float = 10.0,
        heartbeat_seconds: float = 5.0,
        backoff: Backoff = Backoff(),
        process: str | None = None,
    ):
        self.only = only
        self.reload_seconds = reload_seconds
        self.heartbeat_seconds = heartbeat_seconds
        self.backoff = backoff
        self.process = process or process_id()
        self.holders: dict[str, _Holder] = {}
        self._retired: list[_Holder] = []
        self._problems: dict[str, str] = {}  # channel -> the config problem already logged

    def run(self, stop: threading.Event) -> None:
        """Hold the connections until `stop` is set. Raises ConnectionRefused when a vendor refuses a credential."""
        self._prune()
        next_reload = next_heartbeat = 0.0
        try:
            while not stop.is_set():
                now = time.monotonic()
                if now >= next_reload:
                    self._guarded(self._reconcile)
                    next_reload = now + self.reload_seconds
                refused = next((h for h in self.holders.values() if h.refused), None)
                if refused is not None:
                    self._guarded(lambda: self._record(force=True))
                    raise ConnectionRefused(refused.refused or "")
                if now >= next_heartbeat or any(h.changed for h in self.holders.values()):
                    self._guarded(lambda: self._record(force=now >= next_heartbeat))
                    if now >= next_heartbeat:
                        next_heartbeat = now + self.heartbeat_seconds
                stop.wait(0.1)
        finally:
            self._stop_all()

    # --- which connections ---------------------------------------------------------

    def _reconcile(self) -> None:
        wanted: dict[str, tuple[str, str, ChannelAdapter]] = {}
        configured = set()
        for channel in selectors.channel_list():
            configured.add(channel.name)
            if self.only is not None and channel.name not in self.only:
                continue
            fingerprint = hashlib.sha256(
                json.dumps([channel.kind, channel.config], sort_keys=True, default=str).encode()
            ).hexdigest()
            try:
                adapter = get_adapter(channel.name, channel.kind, channel.config)
            except Exception as exc:  # pydantic's ValidationError, an unknown kind
                if self._problems.get(channel.name) != fingerprint:
                    self._problems[channel.name] = fingerprint
                    logger.error(
                        "channel %s: its config is not valid, so it gets no connection "
                        "(`python manage.py check --database default` names the problem): %s",
                        channel.name,
                        type(exc).__name__,
                    )
                continue
            self._problems.pop(channel.name, None)
            if adapter.connection_mode != "http":
                wanted[channel.name] = (adapter.connection_mode, fingerprint, adapter)

        for name in list(self.holders):
            if name not in wanted:
                logger.info("channel %s: no longer configured for an outbound connection; closing it", name)
                self._retire(name)
                self._guarded(lambda: ChannelConnection.objects.filter(channel=name, process=self.process).delete())
        for name, (mode, fingerprint, adapter) in wanted.items():
            current = self.holders.get(name)
            if current is not None and current.fingerprint == fingerprint:
                continue
            if current is not None:
                logger.info("channel %s: its config changed; reconnecting with the new one", name)
                self._retire(name)
            holder = _Holder(name, mode, fingerprint, adapter.open_connection(decide_on(name)), self.backoff)
            self.holders[name] = holder
            holder.start()
        if self.only is not None:
            for name in sorted(self.only - set(wanted)):
                reason = "is not configured" if name not in configured else "does not use a connection mode"
                if self._problems.get(name) != reason:
                    self._problems[name] = reason
                    logger.warning("channel %s %s; nothing to hold for it", name, reason)
        if not wanted and self._problems.get("") != "none":
            self._problems[""] = "none"
            logger.info(
                "no channel uses a connection mode (socket, long_connection, stream, polling) yet; "
                "re-reading the channels every %g s",
                self.reload_seconds,
            )
        elif wanted:
            self._problems.pop("", None)

    def _retire(self, name: str) -> None:
        holder = self.holders.pop(name)
        holder.stop.set()
        self._retired.append(holder)

    def _stop_all(self) -> None:
        for name in list(self.holders):
            self._retire(name)
        deadline = time.monotonic() + 10
        for holder in self._retired:
            holder.thread.join(timeout=max(0.1, deadline - time.monotonic()))
        # A clean exit leaves no row behind; a refused credential leaves its `failed` row for /readyz.
        self._guarded(
            lambda: ChannelConnection.objects.filter(process=self.process).exclude(state=FAILED).delete()
        )

    # --- where /readyz sees them ------------------------------------------------------

    def _record(self, *, force: bool) -> None:
        now = timezone.now()
        for holder in list(self.holders.values()):
            if not (force or holder.changed):
                continue
            state, detail, since = holder.snapshot()
            ChannelConnection.objects.update_or_create(
                channel=holder.name,
                process=self.process,
                defaults={
                    "mode": holder.mode,
                    "state": state,
                    "detail": detail[:1000],
                    "since": since,
                    "heartbeat_at": now,
                    "heartbeat_seconds": self.heartbeat_seconds,
                },
            )

    def _prune(self) -> None:
        self._guarded(
            lambda: ChannelConnection.objects.filter(heartbeat_at__lt=timezone.now() - STALE_ROWS_AFTER).delete()
        )

    @staticmethod
    def _guarded(work) -> None:
        """Database work of the main loop: a database outage is logged, and the connections keep running."""
        close_old_connections()
        try:
            work()
        except Exception as exc:
            logger.warning("channel_connections: database work failed (%s: %s); trying again", type(exc).__name__, exc)
        finally:
            close_old_connections()
