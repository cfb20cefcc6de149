"""Reads for `/readyz`: the state of each channel's outbound connection, across processes."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.utils import timezone

from gateway_contract.links import CONNECTED
from channels_ext.connections.runner import channels_needing_connections
from channels_ext.models import ChannelConnection

MIN_STALE_SECONDS = 10.0


def connection_states() -> dict[str, dict[str, Any]]:
    """For each channel in a connection mode: `state` (connected / connecting / reconnecting /
    failed / down), `mode`, `processes` holding it connected, `since`, and a `detail` sentence.

    A process whose heartbeat is older than three of its intervals counts as gone;
    with no live process the state is `down`.
    """
    needed = channels_needing_connections()
    if not needed:
        return {}
    now = timezone.now()
    rows: dict[str, list[ChannelConnection]] = {}
    for row in ChannelConnection.objects.filter(channel__in=[name for name, _ in needed]):
        fresh_for = timedelta(seconds=max(MIN_STALE_SECONDS, 3 * row.heartbeat_seconds))
        if row.heartbeat_at + fresh_for >= now or row.state == "failed":
            rows.setdefault(row.channel, []).append(row)
    states: dict[str, dict[str, Any]] = {}
    for name, mode in needed:
        live = rows.get(name, [])
        connected = [row for row in live if row.state == CONNECTED]
        if connected:
            first = min(connected, key=lambda row: row.since)
            states[name] = {
                "state": CONNECTED,
                "mode": mode,
                "processes": len(connected),
                "since": first.since.isoformat(),
                "detail": first.detail,
            }
        elif live:
            latest = max(live, key=lambda row: row.since)
            states[name] = {
                "state": latest.state,
                "mode": mode,
                "processes": 0,
                "since": latest.since.isoformat(),
                "detail": latest.detail,
            }
        else:
            states[name] = {
                "state": "down",
                "mode": mode,
                "processes": 0,
                "since": None,
                "detail": "no `python manage.py channel_connections` process is holding this connection",
            }
    return states
