"""Per-process caches of what every tool call reads: the API key's agent, the agent's hooks, the
session's context (what session-start and the current turn said: `hooks.state`), and the channels the
agent's hooks send requests to.

They serve only while this process hears the database's change notifications
(`gateway_utils.realtime.listening()`): every service that changes a key, an agent or
its hooks calls `config_changed(agent_id)` inside its transaction, which bumps
the agent's `generation` and announces it (a changed channel: `channels_changed`, every agent's); `hooks.state.session_remember`
announces a session's new context the same way. The listener of every server
process hears it at commit and drops those entries, and a listener that
(re)connects makes every cache forget everything. A process that does not
listen (a Celery worker, a management command, SQLite) reads the database
every time.

A change made behind the services' back (an incident runbook revoking a key in
SQL) is announced to nobody. So no entry is served once it is older than
GATEWAY_CACHE_MAX_AGE_SECONDS (5): such a change takes effect within that
bound, the next call reading the database again (docs/architecture.md).

Two races, both closed:
- between a change's commit and its notification being heard, a call could
  be served from what was cached before: the call is recorded only if the
  agent's generation is still the one it was served under and the session's
  context still the one it saw (the allowed call's one statement carries both
  conditions; `services.tool_calls`); if not, the entries are dropped and the
  call is served afresh (its hooks run again: a counting hook, such as a rate
  limit, counts that call twice — only ever inside that window of a
  millisecond or so);
- a fill races an invalidation (a reader missed, read the database, and a
  change was announced before it stored what it read): an entry is stored
  only if no invalidation happened since its read began.
"""

from __future__ import annotations

import collections
import dataclasses
import datetime as dt
import threading
import time
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from django.conf import settings
from django.db.models import F

from approvals.models import Agent
from gateway_utils import realtime
from hooks.state import SESSION_CHANGED_PREFIX, session_changed

SESSION_ENTRIES = 20_000  # sessions' contexts kept per process, the least recently used dropped first

T = TypeVar("T")


@dataclasses.dataclass(frozen=True)
class KeyHolder:
    """Who a live API key belongs to: what the hot path needs to serve its agent, as of `generation`."""

    key_id: int
    agent_id: int
    agent_name: str
    agent_read_only: bool
    generation: int
    agent_team_id: int  # (an Agent built from the holder without its team would read the default team)


@dataclasses.dataclass(frozen=True)
class _Entry(Generic[T]):
    """A cached value and when it was read (`time.monotonic()`)."""

    value: T
    read_at: float

    def fresh(self) -> bool:
        """Whether it may still be served: younger than GATEWAY_CACHE_MAX_AGE_SECONDS."""
        return time.monotonic() - self.read_at < settings.GATEWAY_CACHE_MAX_AGE_SECONDS


class _Cache:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._generation = 0
        self._keys: dict[str, _Entry[KeyHolder]] = {}  # key hash -> holder
        self._hooks: dict[int, _Entry[Any]] = {}  # agent id -> (generation, version, hooks)
        self._sessions: collections.OrderedDict[str, _Entry[Any]] = collections.OrderedDict()  # -> stored
        self._channels: dict[tuple[int, str], _Entry[Any]] = {}  # (agent id, name) -> (generation, row)
        self.last_used: dict[int, dt.datetime] = {}  # key id -> last time written to the key's row

    def forget(self, what: str) -> None:
        with self._lock:
            self._generation += 1
            if what.startswith("agent:") and what[6:].isdigit():
                agent_id = int(what[6:])
                self._hooks.pop(agent_id, None)
                for key_hash in [h for h, entry in self._keys.items() if entry.value.agent_id == agent_id]:
                    del self._keys[key_hash]
                for named in [named for named in self._channels if named[0] == agent_id]:
                    del self._channels[named]
            elif what.startswith(SESSION_CHANGED_PREFIX):
                self._sessions.pop(what, None)
            else:
                self._keys.clear()
                self._hooks.clear()
                self._sessions.clear()
                self._channels.clear()

    def _get(self, table: dict[Any, _Entry[T]], key: Any, read: Callable[[], T | None]) -> T | None:
        if not realtime.listening():
            return read()
        found = table.get(key)
        if found is not None and found.fresh():
            return found.value
        with self._lock:
            generation = self._generation
        read_at = time.monotonic()  # before the read: its age counts from what the database said then
        value = read()
        if value is not None:
            with self._lock:
                if generation == self._generation and realtime.listening():
                    table[key] = _Entry(value, read_at)
        return value

    def active(self) -> bool:
        """Whether the caches serve in this process (it hears change notifications)."""
        return realtime.listening()

    def peek_key_holder(self, key_hash: str) -> KeyHolder | None:
        """A cached holder, without reading the database (None on a miss, a stale entry, or while not listening)."""
        found = self._keys.get(key_hash) if realtime.listening() else None
        return found.value if found is not None and found.fresh() else None

    def key_holder(self, key_hash: str, read: Callable[[], KeyHolder | None]) -> KeyHolder | None:
        return self._get(self._keys, key_hash, read)

    def agent_hooks(self, agent_id: int, read: Callable[[], Any]) -> Any:
        return self._get(self._hooks, agent_id, read)

    def agent_channel(self, agent_id: int, name: str, read: Callable[[], Any]) -> Any:
        """A channel the agent's hooks name, as of the agent's generation it was read under."""
        return self._get(self._channels, (agent_id, name), read)

    def peek_session_context(self, agent: str, session_id: str) -> tuple[Any] | None:
        """`(stored,)` if a session's context is cached and fresh, else None (no database read)."""
        found = self._sessions.get(session_changed(agent, session_id)) if realtime.listening() else None
        return (found.value,) if found is not None and found.fresh() else None

    def session_context(self, agent: str, session_id: str, read: Callable[[], Any]) -> Any:
        """A session's stored context (None if nothing was said about it), `read` on a miss."""
        if not realtime.listening():
            return read()
        key = session_changed(agent, session_id)
        with self._lock:
            found = self._sessions.get(key)
            if found is not None and found.fresh():
                self._sessions.move_to_end(key)
                return found.value
            generation = self._generation
        read_at = time.monotonic()
        value = read()
        with self._lock:
            if generation == self._generation and realtime.listening():
                self._sessions[key] = _Entry(value, read_at)
                self._sessions.move_to_end(key)
                if len(self._sessions) > SESSION_ENTRIES:
                    self._sessions.popitem(last=False)
        return value


cache = _Cache()
realtime.on_config_changed(cache.forget)


class StaleCache(Exception):
    """A call was served from a cache that a committed change had made stale: serve it afresh."""


def channels_changed() -> None:
    """Inside a writing transaction that changed a channel: requests name channels through their agents'
    hooks, so every agent's generation is bumped (a call served from the caches meanwhile is recorded
    only under its agent's current generation), and every server process forgets everything."""
    Agent.objects.update(generation=F("generation") + 1)
    realtime.notify_config_changed(realtime.EVERYTHING)


def config_changed(agent_id: int) -> None:
    """Inside a writing transaction that changed what a tool call reads of an agent (a key, its read-only
    switch, its hooks): bump the agent's generation, and have every server process forget its entries."""
    Agent.objects.filter(pk=agent_id).update(generation=F("generation") + 1)
    realtime.notify_config_changed(f"agent:{agent_id}")
