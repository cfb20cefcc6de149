"""Argument types shared by the commands (`verify_audit`, `export_audit`, `simulate_config`, `suggest_policies`)."""

from __future__ import annotations

import argparse
import datetime as dt
import re

from django.core.management.base import CommandError
from django.utils import timezone
from django.utils.dateparse import parse_date, parse_datetime

from approvals.models import Agent, Team


def since_option(raw: str) -> dt.datetime:
    """An ISO 8601 date (`2026-05-01`, midnight UTC) or date and time; naive times are UTC."""
    value = parse_datetime(raw)
    if value is None:
        day = parse_date(raw)
        if day is None:
            raise argparse.ArgumentTypeError(f"not an ISO 8601 date or date-time: {raw!r}")
        value = dt.datetime.combine(day, dt.time())
    return value if timezone.is_aware(value) else value.replace(tzinfo=dt.timezone.utc)


_AGO = re.compile(r"(\d+)([dhm])")
_UNITS = {"d": "days", "h": "hours", "m": "minutes"}


def ago_or_since_option(raw: str) -> dt.datetime:
    """`7d`, `12h`, `30m` (that long ago), or what `since_option` reads."""
    match = _AGO.fullmatch(raw.strip())
    if match is None:
        try:
            return since_option(raw)
        except argparse.ArgumentTypeError:
            raise argparse.ArgumentTypeError(f"not a duration (7d, 12h, 30m) nor an ISO 8601 date: {raw!r}") from None
    return timezone.now() - dt.timedelta(**{_UNITS[match[2]]: int(match[1])})


def agent_by_name(name: str | None) -> Agent | None:
    """The agent `--agent NAME` names (None for all); a clear error for an unknown name."""
    if name is None:
        return None
    agent = Agent.objects.filter(name=name).first()
    if agent is None:
        known = ", ".join(Agent.objects.order_by("name").values_list("name", flat=True)) or "none"
        raise CommandError(f"no agent named {name!r}; known agents: {known}")
    return agent


def team_by_name(name: str | None) -> Team | None:
    """The team `--team NAME` names (None for all); a clear error for an unknown name."""
    if name is None:
        return None
    team = Team.objects.filter(name=name).first()
    if team is None:
        known = ", ".join(Team.objects.order_by("name").values_list("name", flat=True)) or "none"
        raise CommandError(f"no team named {name!r}; known teams: {known}")
    return team
