"""Whether oversight is real (docs/web-and-admin.md, "Oversight"): per day, per approver and per tool,
how long people take to answer, how often they approve, how many answers came faster than a card can
be read, and how many requests expired with nobody deciding.

An *answer* is one approver's response (`ApproverResponse`: approve, reject, or a question's answer),
so a quorum of two is two answers, each timed. Its *time to decide* runs from when its request's
card was shown — the first `card_posted` event before the answer — or, if no card was recorded
(a chat channel still delivering, a staff decision in the admin), from the request's creation.
A *fast* answer took less than `GATEWAY_OVERSIGHT_FAST_SECONDS`. The *approval rate* is approvals
among approvals and rejections (a question's answers are neither). *Expired* requests reached
their deadline without a decision (a quorum short of its count among them).

The percentiles are PostgreSQL's `percentile_cont` over the intervals themselves; on another
database (SQLite under `make run`) the same interpolation is made here over the durations read.
Models only: the requests and responses of the user's teams (`teams.of_teams`).
"""

from __future__ import annotations

import datetime as dt
import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from django.db import connection
from django.db.models import (
    Aggregate,
    Count,
    DurationField,
    ExpressionWrapper,
    F,
    Max,
    Min,
    OuterRef,
    Q,
    QuerySet,
    Subquery,
    Value,
)
from django.db.models.functions import Coalesce, TruncDate
from django.utils import timezone

from approvals.models import (
    ApproverResponse,
    Channel,
    ConfirmationEvent,
    ConfirmationRequest,
    EventKind,
    Person,
    Status,
)
from approvals.selectors.people import people_memo, person_of
from approvals.selectors.teams import of_teams

WINDOWS = (7, 30, 90)  # the days a page may show (`?days=`)
DEFAULT_WINDOW = 30
PERCENTILES = {"p50": 0.5, "p90": 0.9}


@dataclass(frozen=True)
class Figures:
    """The figures of one group of answers (a day's, an approver's, a tool's, all of them)."""

    answers: int = 0
    approved: int = 0
    rejected: int = 0
    fast: int = 0
    expired: int = 0
    p50: float | None = None  # seconds; None without answers
    p90: float | None = None

    @property
    def approval_rate(self) -> float | None:
        """Approvals among approvals and rejections (0..1); None when there were neither."""
        judged = self.approved + self.rejected
        return self.approved / judged if judged else None


@dataclass(frozen=True)
class Line:
    """One row of figures: `key` is the day (ISO date), the person key or the tool; `label` what to read;
    for an approver, `identities`: those they answered under (`web:alice`, `slack:U0ALICE`)."""

    key: str
    label: str
    figures: Figures
    identities: tuple[str, ...] = ()


@dataclass(frozen=True)
class Oversight:
    days: int
    since: dt.datetime  # the first day's start, in the server's time zone
    fast_seconds: int
    total: Figures
    daily: list[Line] = field(default_factory=list)  # every day of the window, oldest first
    approvers: list[Line] = field(default_factory=list)  # most answers first
    tools: list[Line] = field(default_factory=list)


class _Percentile(Aggregate):
    """PostgreSQL's `percentile_cont(fraction) WITHIN GROUP (ORDER BY expression)`, over intervals."""

    function = "percentile_cont"
    template = "%(function)s(%(fraction)s) WITHIN GROUP (ORDER BY %(expressions)s)"

    def __init__(self, expression: Any, fraction: float) -> None:
        super().__init__(expression, fraction=float(fraction), output_field=DurationField())


def percentile(values: list[float], fraction: float) -> float | None:
    """`percentile_cont`'s linear interpolation over `values` (for a database without it)."""
    if not values:
        return None
    ordered = sorted(values)
    position = fraction * (len(ordered) - 1)
    low, high = math.floor(position), math.ceil(position)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def card_shown_at(*, confirmation_id: Any, created_at: dt.datetime, before: dt.datetime | None = None) -> dt.datetime:
    """When a request's card was first shown (its first `card_posted` up to `before`), else its creation:
    where an answer's time to decide starts, for the metric observed at the answer as for this page."""
    posted = ConfirmationEvent.objects.filter(confirmation_id=confirmation_id, kind=EventKind.CARD_POSTED)
    if before is not None:
        posted = posted.filter(created_at__lte=before)
    first = posted.aggregate(first=Min("created_at"))["first"]
    return first or created_at


def oversight_figures(*, user: Any, days: int = DEFAULT_WINDOW, fast_seconds: int = 3, now: dt.datetime | None = None) -> Oversight:
    """The figures of the last `days` days (today included) of the requests of `user`'s teams."""
    now = now or timezone.now()
    tz = timezone.get_current_timezone()
    first_day = timezone.localtime(now, tz).date() - dt.timedelta(days=days - 1)
    since = dt.datetime.combine(first_day, dt.time.min, tzinfo=tz)
    answers = _answers(user=user, since=since)
    expired = of_teams(
        ConfirmationRequest.objects.filter(status=Status.EXPIRED, decided_at__gte=since), user, path="agent__team"
    )

    by_day = _grouped(answers, TruncDate("created_at", tzinfo=tz), fast_seconds=fast_seconds)
    expired_by_day = dict(
        expired.annotate(day=TruncDate("decided_at", tzinfo=tz)).values("day").annotate(n=Count("id")).values_list("day", "n")
    )
    daily = []
    for offset in range(days):
        day = first_day + dt.timedelta(days=offset)
        figures = _with_expired(by_day.get(day, Figures()), expired_by_day.get(day, 0))
        daily.append(Line(key=day.isoformat(), label=day.isoformat(), figures=figures))

    by_tool = _grouped(answers, F("confirmation__tool_name"), fast_seconds=fast_seconds)
    expired_by_tool = dict(expired.values("tool_name").annotate(n=Count("id")).values_list("tool_name", "n"))
    tools = [
        Line(key=tool, label=tool, figures=_with_expired(by_tool.get(tool, Figures()), expired_by_tool.get(tool, 0)))
        for tool in set(by_tool) | set(expired_by_tool)
    ]

    by_person = _grouped(answers, F("person"), fast_seconds=fast_seconds)
    expired_by_person = _expired_by_person(expired)
    names = _names(answers, set(by_person) | set(expired_by_person))
    identities: dict[str, set[str]] = defaultdict(set)
    for person, identity in answers.values_list("person", "approver").distinct():
        identities[person].add(identity)
    approvers = [
        Line(
            key=key,
            label=names.get(key, key),
            figures=_with_expired(by_person.get(key, Figures()), expired_by_person.get(key, 0)),
            identities=tuple(sorted(identities.get(key, ()))),
        )
        for key in set(by_person) | set(expired_by_person)
    ]

    total = _grouped(answers, None, fast_seconds=fast_seconds).get(None, Figures())
    return Oversight(
        days=days,
        since=since,
        fast_seconds=fast_seconds,
        total=_with_expired(total, sum(expired_by_day.values())),
        daily=daily,
        approvers=sorted(approvers, key=lambda line: (-line.figures.answers, -line.figures.expired, line.label)),
        tools=sorted(tools, key=lambda line: (-line.figures.answers, -line.figures.expired, line.key)),
    )


# --------------------------------------------------------------------------- reads


def _answers(*, user: Any, since: dt.datetime) -> QuerySet:
    """The answers given since `since` to requests of `user`'s teams, each with `wait`: its time to decide."""
    first_card = (
        ConfirmationEvent.objects.filter(
            confirmation_id=OuterRef("confirmation_id"),
            kind=EventKind.CARD_POSTED,
            created_at__lte=OuterRef("created_at"),
        )
        .order_by()
        .values("confirmation_id")
        .annotate(first=Min("created_at"))
        .values("first")[:1]
    )
    shown = Coalesce(Subquery(first_card), F("confirmation__created_at"))
    answers = ApproverResponse.objects.filter(created_at__gte=since).order_by()
    return of_teams(answers, user, path="confirmation__agent__team").alias(
        wait=ExpressionWrapper(F("created_at") - shown, output_field=DurationField())
    )


def _grouped(answers: QuerySet, by: Any, *, fast_seconds: int) -> dict[Any, Figures]:
    """The answers' figures per value of `by` (an expression; None: all together)."""
    counts = {
        "answers": Count("id"),
        "approved": Count("id", filter=Q(decision="approve")),
        "rejected": Count("id", filter=Q(decision="reject")),
        "fast": Count("id", filter=Q(wait__lt=dt.timedelta(seconds=fast_seconds))),
    }
    native = connection.vendor == "postgresql"
    if native:
        counts |= {name: _Percentile("wait", fraction) for name, fraction in PERCENTILES.items()}
    # All together: grouped by a constant, which Django leaves out of GROUP BY (one row, even of none).
    grouped = answers.annotate(group=by if by is not None else Value(0))
    rows = [row for row in grouped.values("group").annotate(**counts).values("group", *counts) if row["answers"]]
    waits: dict[Any, list[float]] = defaultdict(list)
    if not native:
        for group, wait in grouped.annotate(waited=F("wait")).values_list("group", "waited"):
            waits[group].append(max(0.0, wait.total_seconds()))
    figures = {}
    for row in rows:
        if native:
            spread = {name: _seconds(row[name]) for name in PERCENTILES}
        else:
            spread = {name: percentile(waits[row["group"]], fraction) for name, fraction in PERCENTILES.items()}
        figures[row["group"] if by is not None else None] = Figures(
            answers=row["answers"], approved=row["approved"], rejected=row["rejected"], fast=row["fast"], **spread
        )
    return figures


def _seconds(value: dt.timedelta | None) -> float | None:
    return None if value is None else max(0.0, value.total_seconds())


def _with_expired(figures: Figures, expired: int) -> Figures:
    return Figures(**{**figures.__dict__, "expired": expired})


def _expired_by_person(expired: QuerySet) -> dict[str, int]:
    """How many expired requests each person was an approver of: the people a gate named (`group:`,
    `person:`, as kept on the request) and the channel-native ids it listed, as `person_of` keys them —
    and, for a request escalated before it expired, those of its escalation too."""
    kinds = dict(Channel.objects.values_list("pk", "kind"))
    counted: dict[str, int] = defaultdict(int)
    rows = expired.values_list(
        "channel_id", "approvers", "approver_people",
        "escalated_at", "escalate_channel_id", "escalate_approvers", "escalate_approver_people",
    )  # fmt: skip
    with people_memo():
        for row in rows.iterator(chunk_size=2000):
            channel_id, approvers, routed, escalated_at, escalated_to, escalated_approvers, escalated_routed = row
            people = _approvers_of(kinds.get(channel_id, ""), approvers, routed)
            if escalated_at is not None:
                people |= _approvers_of(kinds.get(escalated_to, ""), escalated_approvers, escalated_routed)
            for key in people:
                counted[key] += 1
    return counted


def _approvers_of(kind: str, approvers: list[Any] | None, routed: dict[str, Any] | None) -> set[str]:
    """The person keys of one approver list: the people it routed to, and its channel-native ids."""
    people = set((routed or {}).get("people") or {})
    for native in approvers or []:
        if isinstance(native, str) and ":" not in native and kind:
            people.add(person_of(f"{kind}:{native}"))
    return people


def _names(answers: QuerySet, keys: Iterable[str]) -> dict[str, str]:
    """Each person key's name: the directory's for `person:<id>`, else a name they answered under."""
    names = dict(answers.values("person").annotate(name=Max("approver_name")).values_list("person", "name"))
    directory = [int(key.split(":", 1)[1]) for key in keys if key.startswith("person:") and key.split(":", 1)[1].isdigit()]
    for pk, name in Person.objects.filter(pk__in=directory).values_list("pk", "display_name"):
        names[f"person:{pk}"] = name
    return {key: name for key, name in names.items() if name}
