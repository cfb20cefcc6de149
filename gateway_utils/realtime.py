"""Waking waiting agents: the only module that knows how a state change
reaches the processes that hold waiters.

- `notify_sql` is the statement a writer runs inside its deciding transaction:
  on PostgreSQL it issues `pg_notify`, which is delivered only if and when that
  transaction commits (so a waiter never hears of a change that did not happen).
  The payload is the request's new state as JSON when it fits in a
  notification (8000 bytes), else just its id: a woken waiter then has its
  answer without reading the database.
- Each server process runs one `Listener` task on its own autocommit psycopg
  connection (never a pooled one: LISTEN is session state), resolving the
  in-process `WaiterRegistry`: a dict of id -> set of futures; each future's
  result is the state that came with the notification (or None).
- NOTIFY is a hint, never the record: waiters re-check every few seconds, and
  all of them are re-checked after the listener reconnects. Without PostgreSQL
  (SQLite in `make run`) waiters poll.
- The same listener hears `notify_config_changed`: writes to what the hot path
  caches per process (API keys, agents, their hooks) announce themselves, and
  the caches that registered with `on_config_changed` drop what changed.
  `listening()` says whether this process hears them at all; a cache must not
  serve anything while it does not (a reconnect tells every cache to forget
  everything: changes may have been missed).

A leaf module: it knows channels, payloads and futures, not what a request is.
"""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import orjson
from django.conf import settings
from django.db import connection

logger = logging.getLogger("gateway_utils.realtime")

CHANNEL = "gateway_confirmation_changed"
CONFIG_CHANNEL = "gateway_config_changed"
EVERYTHING = "*"  # a config notification that concerns everything (and what a reconnect implies)
# PostgreSQL refuses a NOTIFY payload of 8000 bytes or more; keep a margin.
PAYLOAD_LIMIT = 7900

_config_callbacks: list[Callable[[str], None]] = []
_connected_listeners = 0


def notify_config_changed(what: str) -> None:
    """Tell every server process that `what` (e.g. `agent:12`) changed; delivered at commit."""
    if connection.vendor != "postgresql":
        return
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_notify(%s, %s)", [CONFIG_CHANNEL, what])


def on_config_changed(callback: Callable[[str], None]) -> None:
    """Call `callback(what)` on the event loop for every config notification (EVERYTHING after a reconnect)."""
    _config_callbacks.append(callback)


def listening() -> bool:
    """True while this process's listener is connected: config notifications reach it."""
    return _connected_listeners > 0


def _config_changed(what: str) -> None:
    for callback in _config_callbacks:
        try:
            callback(what)
        except Exception:
            logger.exception("a config-change callback failed for %r", what)


def notify_sql(select_payloads: str, params: list[Any]) -> None:
    """Queue one notification per row of `select_payloads` (a query yielding columns `id, payload`):
    the payload when it fits, else the bare id. Delivered at commit; nothing without PostgreSQL."""
    if connection.vendor != "postgresql":
        return
    with connection.cursor() as cursor:
        cursor.execute(notify_select(select_payloads), [CHANNEL, *params])


def notify_select(select_payloads: str, channel: str = "%s") -> str:
    """The SELECT of `notify_sql`, to ride on another statement (`channel`: the placeholder of
    the parameter that will hold `CHANNEL`). `select_payloads` is a plain SELECT (no LIMIT or OFFSET
    of its own): `OFFSET 0` keeps PostgreSQL from folding it into this one, which would build each
    payload twice — once to measure it, once to send it (the JSON of 5,000 requests: 346 → 184 ms)."""
    return (
        f"SELECT count(pg_notify({channel}, CASE WHEN octet_length(s.payload) < {PAYLOAD_LIMIT} "
        f"THEN s.payload ELSE s.id::text END)) FROM ({select_payloads} OFFSET 0) AS s"
    )


# A number of 19 digits or more is where orjson may read a payload otherwise than `json.loads` (an integer past
# 64 bits becomes a float): such a payload is read by `json.loads`. Found as a run of 19 "0"s once every ASCII
# digit is made "0" and every other byte " " (`bytes.translate`, ~1 µs for a payload; a pattern took 8). A run
# of digits inside a string — 19 of a MAC's hex digits in a row, now and then — sends it there too: slower,
# never wrong.
_DIGITS = bytes(0x30 if 0x30 <= byte <= 0x39 else 0x20 for byte in range(256))
_LONG_NUMBER = b"0" * 19


def parse_payload(payload: str) -> tuple[str, dict[str, Any] | None]:
    """(id, state or None) from a notification's payload: what `json.loads` makes of it (the state's MAC is
    checked against exactly those values), read by orjson in a third of the time where it makes the same —
    ten thousand woken at once are read one after another by the listener — else by `json.loads`."""
    if payload.startswith("{"):
        try:
            data = _json_object(payload)
            return str(data["id"]), data
        except (ValueError, KeyError, TypeError):
            logger.warning("unreadable notification payload %r", payload[:100])
    return payload, None


def _json_object(text: str) -> Any:
    if _LONG_NUMBER not in text.encode(errors="surrogatepass").translate(_DIGITS):
        try:
            return orjson.loads(text)
        except orjson.JSONDecodeError:  # what orjson refuses and `json.loads` reads (NaN, a lone surrogate, 1e400)
            pass
    return json.loads(text)


_done = asyncio.Future.done


class WaiterRegistry:
    """In-process map of confirmation id -> futures of the coroutines waiting on it.

    Lives on one event loop (the server's); a waiter costs one future and a set entry.
    """

    def __init__(self) -> None:
        self._waiters: dict[str, set[asyncio.Future[Any]]] = defaultdict(set)
        self._listener: Listener | None = None
        self._pause = CollectorPause()
        self.last_heard = 0.0  # (time.monotonic) when the listener last heard a change

    def register(self, confirmation_id: str) -> asyncio.Future[Any]:
        self._ensure_listener()
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._waiters[str(confirmation_id)].add(future)
        return future

    def unregister(self, confirmation_id: str, future: asyncio.Future[Any]) -> None:
        key = str(confirmation_id)
        waiters = self._waiters.get(key)
        if waiters is not None:
            waiters.discard(future)
            if not waiters:
                del self._waiters[key]

    def wake(self, confirmation_id: str, state: dict[str, Any] | None = None) -> int:
        """Resolve every waiter of this id with `state` (what the notification said, or None: read it)."""
        woken = 0
        for future in self._waiters.get(str(confirmation_id), ()):
            if not future.done():
                future.set_result(state)
                woken += 1
        if woken:
            self._pause.hold(future.get_loop())
        return woken

    def wake_all(self) -> None:
        for key in list(self._waiters):
            self.wake(key)

    def heard_within(self, seconds: float) -> bool:
        """Whether the listener heard a change in the last `seconds`."""
        return time.monotonic() - self.last_heard < seconds

    def registered_ids(self) -> list[str]:
        """Every id with at least one waiter (for the batched re-check in approvals.waiting)."""
        return list(self._waiters)

    def unwoken_ids(self) -> list[str]:
        """Every id with a waiter not woken yet (what the re-check looks at: one woken is already answering,
        or reading its row)."""
        # (`not all(map(done))`: the same as `any(not done)`, without a generator per id — 10,000 ids every
        # re-check, on the event loop)
        return [key for key, futures in self._waiters.items() if not all(map(_done, futures))]

    def is_waited(self, confirmation_id: str) -> bool:
        """Whether anyone waits on this id (`registered_ids` without copying every id)."""
        return str(confirmation_id) in self._waiters

    @property
    def count(self) -> int:
        return sum(len(v) for v in self._waiters.values())

    @property
    def push_enabled(self) -> bool:
        """True when wake-ups are pushed (PostgreSQL); False means waiters must poll."""
        return settings.IS_POSTGRES

    def ensure_listener(self) -> None:
        """Start this process's listener on the running loop, if it has none (PostgreSQL only)."""
        self._ensure_listener()

    def _ensure_listener(self) -> None:
        if not self.push_enabled:
            return
        loop = asyncio.get_running_loop()
        if self._listener is None or self._listener.loop is not loop or self._listener.task.done():
            self._listener = Listener(self, loop)


class CollectorPause:
    """Keeps Python's cyclic garbage collector from running while woken waiters are being answered.

    The objects of thousands of parked waiters (their connections, tasks, frames) are what a full
    collection walks: with 10,000 parked, one took 0.4–1.3 s of the one core, and the waiters'
    own allocations while they answer are what set it off. The collector is disabled from the first
    wake until an event-loop pass in which nothing was woken — by then every woken waiter has run —
    and for at most `MAX_SECONDS`, after which it is left alone for as long again. Objects freed by
    reference counting (almost all) are freed as ever; cycles wait until it is enabled again. If
    something else disabled the collector, it is left disabled."""

    MAX_SECONDS = 2.0

    def __init__(self) -> None:
        self.held_since: float | None = None
        self.free_until = 0.0  # after a pause that hit its cap: no new pause before this
        self.woken = False  # something was woken since the last check

    def hold(self, loop: asyncio.AbstractEventLoop) -> None:
        self.woken = True
        if self.held_since is not None or not gc.isenabled():
            return
        now = time.monotonic()
        if now < self.free_until:
            return
        gc.disable()
        self.held_since = now
        loop.call_soon(self._check, loop)

    def _check(self, loop: asyncio.AbstractEventLoop) -> None:
        assert self.held_since is not None
        held = time.monotonic() - self.held_since
        if self.woken and held < self.MAX_SECONDS:
            self.woken = False  # the waiters woken so far run before the next check
            loop.call_soon(self._check, loop)
            return
        if held >= self.MAX_SECONDS:
            self.free_until = time.monotonic() + held
        self.held_since = None
        gc.enable()


class Listener:
    """One LISTEN connection per process and event loop; reconnects forever."""

    def __init__(self, registry: WaiterRegistry, loop: asyncio.AbstractEventLoop):
        self.registry = registry
        self.loop = loop
        self.connected = asyncio.Event()
        self.task = loop.create_task(self._run(), name="gateway-listener")

    async def _run(self) -> None:
        import psycopg

        global _connected_listeners
        backoff = 0.5
        while True:
            try:
                async with await psycopg.AsyncConnection.connect(conninfo(), autocommit=True) as conn:
                    await conn.execute(f"LISTEN {CHANNEL}")
                    await conn.execute(f"LISTEN {CONFIG_CHANNEL}")
                    self.connected.set()
                    _connected_listeners += 1
                    backoff = 0.5
                    # Anything changed while we were not listening: caches forget, waiters re-check.
                    _config_changed(EVERYTHING)
                    self.registry.wake_all()
                    try:
                        async for notify in conn.notifies():
                            if notify.channel == CHANNEL:
                                self.registry.last_heard = time.monotonic()
                                self.registry.wake(*parse_payload(notify.payload))
                            else:
                                _config_changed(notify.payload)
                    finally:
                        _connected_listeners -= 1
                        _config_changed(EVERYTHING)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # connection lost, server restart…
                self.connected.clear()
                logger.warning("listener connection lost (%s); reconnecting in %.1fs", exc, backoff)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 10)


def conninfo() -> str:
    """The default database as a libpq connection string (for connections outside Django's pool): every
    host of a multi-host DATABASE_URL and its parameters (`target_session_attrs`, `sslmode`, …), with TCP
    keepalives so that a server gone silent (no FIN, e.g. a failed-over host) is noticed within a minute."""
    from psycopg import pq
    from psycopg.conninfo import make_conninfo

    libpq_keys = {option.keyword.decode() for option in pq.Conninfo.get_defaults()}
    params = {  # (not psycopg's own options, such as `prepare_threshold`)
        key: value
        for key, value in connection.get_connection_params().items()
        if key in libpq_keys and isinstance(value, (str, int)) and not isinstance(value, bool) and value != ""
    }
    params.setdefault("keepalives", 1)
    params.setdefault("keepalives_idle", 20)
    params.setdefault("keepalives_interval", 5)
    params.setdefault("keepalives_count", 4)
    return make_conninfo(**{k: str(v) for k, v in params.items()})


waiters = WaiterRegistry()
