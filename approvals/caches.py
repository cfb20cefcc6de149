"""Per-process caches of what every tool call reads: the API key's agent, and the agent's hooks.

They serve only while this process hears the database's change notifications
(`gateway.realtime.listening()`): every service that changes a key, an agent or
its hooks calls `config_changed(agent_id)` inside its transaction, which bumps
the agent's `generation` and announces it; the listener of every server
process hears it at commit and drops that agent's entries, and a listener that
(re)connects makes every cache forget everything. A process that does not
listen (a Celery worker, a management command, SQLite) reads the database
every time.

Two races, both closed:
- between a change's commit and its notification being heard, a call could
  be served from what was cached before: the call is recorded only if the
  agent's generation is still the one it was served under (the allowed
  call's one INSERT carries that condition; `services.tool_calls`); if not,
  the entries are dropped and the call is served afresh;
- a fill races an invalidation (a reader missed, read the database, and a
  change was announced before it stored what it read): an entry is stored
  only if no invalidation happened since its read began.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from django.db.models import F

from approvals.models import Agent
from gateway import realtime

T = TypeVar("T")


@dataclasses.dataclass(frozen=True)
class KeyHolder:
    """Who a live API key belongs to: what the hot path needs to serve its agent, as of `generation`."""

    key_id: int
    agent_id: int
    agent_name: str
    agent_read_only: bool
    generation: int


class _Cache:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._generation = 0
        self._keys: dict[str, KeyHolder] = {}  # key hash -> holder
        self._hooks: dict[int, Any] = {}  # agent id -> (generation, version, hooks)
        self.last_used: dict[int, dt.datetime] = {}  # key id -> last time written to the key's row

    def forget(self, what: str) -> None:
        with self._lock:
            self._generation += 1
            if what.startswith("agent:") and what[6:].isdigit():
                agent_id = int(what[6:])
                self._hooks.pop(agent_id, None)
                for key_hash in [h for h, holder in self._keys.items() if holder.agent_id == agent_id]:
                    del self._keys[key_hash]
            else:
                self._keys.clear()
                self._hooks.clear()

    def _get(self, table: dict[Any, T], key: Any, read: Callable[[], T | None]) -> T | None:
        if not realtime.listening():
            return read()
        found = table.get(key)
        if found is not None:
            return found
        with self._lock:
            generation = self._generation
        value = read()
        if value is not None:
            with self._lock:
                if generation == self._generation and realtime.listening():
                    table[key] = value
        return value

    def active(self) -> bool:
        """Whether the caches serve in this process (it hears change notifications)."""
        return realtime.listening()

    def peek_key_holder(self, key_hash: str) -> KeyHolder | None:
        """A cached holder, without reading the database (None on a miss, or while not listening)."""
        return self._keys.get(key_hash) if realtime.listening() else None

    def key_holder(self, key_hash: str, read: Callable[[], KeyHolder | None]) -> KeyHolder | None:
        return self._get(self._keys, key_hash, read)

    def agent_hooks(self, agent_id: int, read: Callable[[], Any]) -> Any:
        return self._get(self._hooks, agent_id, read)


cache = _Cache()
realtime.on_config_changed(cache.forget)


class StaleCache(Exception):
    """A call was served from a cache that a committed change had made stale: serve it afresh."""


def config_changed(agent_id: int) -> None:
    """Inside a writing transaction that changed what a tool call reads of an agent (a key, its read-only
    switch, its hooks): bump the agent's generation, and have every server process forget its entries."""
    Agent.objects.filter(pk=agent_id).update(generation=F("generation") + 1)
    realtime.notify_config_changed(f"agent:{agent_id}")
