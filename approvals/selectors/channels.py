"""The configured channels: found by name, listed, their adapters, what is pending on each (and whether
anything can fall due soon anywhere: `nothing_due_before`)."""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.db import DEFAULT_DB_ALIAS, connections, router
from django.db.models import Count, Min

from approvals.caches import cache
from approvals.models import Agent, Channel, ConfirmationRequest, Outbox, OutboxStatus, Status
from gateway_contract import ChannelAdapter, get_adapter


def channel_names() -> set[str]:
    """The names of the configured channels (approval gates may name these)."""
    return set(Channel.objects.values_list("name", flat=True))


def pending_by_channel() -> dict[str, tuple[int, dt.datetime | None]]:
    """Every channel's pending requests now: (how many, when the oldest was created). For /metrics."""
    pending: dict[str, tuple[int, dt.datetime | None]] = {name: (0, None) for name in channel_names()}
    rows = (
        ConfirmationRequest.objects.filter(status=Status.PENDING)
        .values("channel__name")
        .annotate(count=Count("pk"), oldest=Min("created_at"))
        .values_list("channel__name", "count", "oldest")
    )
    for name, count, oldest in rows:
        pending[name or ""] = (count, oldest)
    return pending


def nothing_due_before(moment: dt.datetime) -> bool:
    """No outbox row waits to be sent, retried or gathered into a digest, and no pending request has a
    deadline, reminder, warning or escalation before `moment`: nothing beat's tick could find due until
    then, unless something new happens (gateway_utils.tick_rest). A request pending for an hour, or with no
    deadline at all, keeps nothing awake. Index probes only (`outbox_due`, `outbox_held`,
    `cr_pending_expiry` and the timers' partial indexes)."""
    if Outbox.objects.filter(status__in=[OutboxStatus.PENDING, OutboxStatus.HELD]).exists():
        return False
    pending = ConfirmationRequest.objects.filter(status=Status.PENDING)
    return not (
        pending.filter(expires_at__lt=moment).exists()
        or pending.filter(remind_at__lt=moment).exists()
        or pending.filter(warn_at__lt=moment).exists()
        or pending.filter(escalate_at__lt=moment, escalated_at__isnull=True).exists()
    )


def channel_adapter(channel: Channel) -> ChannelAdapter:
    return get_adapter(channel.name, channel.kind, channel.config)


def channels_sending_direct_messages() -> list[str]:
    """The names of the configured channels whose adapter can send one person a link (`sends_direct_messages`)."""
    return [c.name for c in Channel.objects.order_by("name") if channel_adapter(c).sends_direct_messages]


def channel_lookup(*, name: str) -> Channel | None:
    """The channel named `name`; None if there is none."""
    return Channel.objects.filter(name=name).first()


def channel_of_agent(*, agent: Agent, name: str) -> Channel | None:
    """The channel named `name` (None if there is none), for a request of `agent`, whose hooks name it:
    cached per process while it hears changes, as of `agent.generation` like the hooks
    (`approvals.caches`: a changed channel bumps every agent's generation). Read, it cost every request
    created a query composed by the ORM (~0.3 ms of the server's CPU) and a round trip."""
    if not cache.active():
        return channel_lookup(name=name)

    def read() -> tuple[int, list[Any]] | None:
        generation = Agent.objects.filter(pk=agent.pk).values_list("generation", flat=True).first()
        channel = channel_lookup(name=name)  # (after the generation: a change between the two is seen next time)
        return None if channel is None else (generation, [getattr(channel, f.attname) for f in _CHANNEL_FIELDS])

    entry = cache.agent_channel(agent.pk, name, read)
    if entry is not None and entry[0] != agent.generation:  # cached under another generation than the caller's
        cache.forget(f"agent:{agent.pk}")
        entry = read()
    if entry is None:
        return None
    return Channel.from_db(DEFAULT_DB_ALIAS, None, entry[1])  # (a row of its own for each caller)


_CHANNEL_FIELDS = Channel._meta.concrete_fields


def channel_list() -> list[Channel]:
    """Every configured channel, by name."""
    return list(Channel.objects.order_by("name"))


def channel_configs(*, using: str) -> list[Channel]:
    """The channels configured in the database `using`, by name, for its system check (`channels_ext.checks`):
    [] where the router keeps them in another database or their table does not exist yet (`migrate` runs
    checks before it migrates: nothing is configured)."""
    if not router.allow_migrate_model(using, Channel):
        return []
    if Channel._meta.db_table not in connections[using].introspection.table_names():
        return []  # not migrated yet: nothing is configured
    # Only the columns every migration state has: `migrate` runs this before it adds newer ones
    # (an upgrade from an earlier release), so reading the whole model would fail there.
    return list(Channel.objects.using(using).only("pk", "name", "kind", "config").order_by("name"))
