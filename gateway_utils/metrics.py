"""The gateway's Prometheus metrics: what every process counts, and the exposition `/metrics` serves.

A leaf module (prometheus_client and the standard library only), so the services, the hooks'
chain runner and the waiting layer can record without importing each other. Each process counts
in memory; with `PROMETHEUS_MULTIPROC_DIR` set (before the process starts: prometheus_client reads
it at import) every ASGI server and Celery process writes its counts to files in that directory and
any server's `/metrics` adds them all up (prometheus_client's multi-process mode). docs/operating.md
("Metrics") lists every metric and when each moves.

Labels are low-cardinality on purpose: agent, channel and hook kind names come from the config file;
outcomes and errors from short fixed lists. A session, request or confirmation id is never a label.

What is true of the database at the time of a scrape (pending requests and their age, the state of
each channel's link) is read when scraped (`ScrapeCollector`), not counted: it is then right however
many processes there are, and after a restart.
"""

from __future__ import annotations

import asyncio
import bisect
import os
import threading
import time
import weakref
from collections.abc import Callable, Iterable

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.core import REGISTRY, GaugeMetricFamily, Metric
from prometheus_client.multiprocess import MultiProcessCollector

# `_created` series double the output and mean nothing in multi-process mode, which drops them anyway.
disable_created_metrics()

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

# Seconds a person takes: from a few seconds to a day.
HUMAN_BUCKETS = (1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 7200, 21600, 86400)
# Seconds an approver takes to answer: fine below 10 s, where a card cannot have been read
# (GATEWAY_OVERSIGHT_FAST_SECONDS, 3 by default, is counted exactly by `gateway_fast_decisions`).
ANSWER_BUCKETS = (1, 2, 3, 5, 10, 30, 60, 300, 1800, 3600, 21600, 86400)
# Tool names come from the agents' calls: the first this many distinct ones a process sees are labels,
# any later one is counted as "other", so an agent inventing names cannot grow the series without end.
MAX_TOOL_LABELS = 100
# Seconds from a decision's commit to its agent's wake-up: milliseconds, a poll period at worst.
WAKE_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)

TOOL_CALLS = Counter(
    "gateway_tool_calls",
    "Pre-tool-use calls answered, by agent and decision (allow, deny, ask, skip, error).",
    ["agent", "decision"],
)
REQUESTS = Counter(
    "gateway_requests",
    "Requests for a human created, by channel, kind (confirmation, question) and risk (low, medium, high).",
    ["channel", "kind", "risk"],
)
DECISION_SECONDS = Histogram(
    "gateway_decision_seconds",
    "Time from a confirmation request's creation to its decision, by channel and outcome "
    "(approved, rejected, expired, cancelled).",
    ["channel", "outcome"],
    buckets=HUMAN_BUCKETS,
)
TIME_TO_DECIDE = Histogram(
    "gateway_time_to_decide_seconds",
    "An approver's answer: seconds from the request's card being shown (posted; else the request's "
    "creation) to the answer, by tool, channel and decision (approve, reject, answer).",
    ["tool", "channel", "decision"],
    buckets=ANSWER_BUCKETS,
)
FAST_DECISIONS = Counter(
    "gateway_fast_decisions",
    "Approvers' answers given sooner after the card was shown than GATEWAY_OVERSIGHT_FAST_SECONDS "
    "(faster than it can be read), by tool and channel.",
    ["tool", "channel"],
)
EXPIRED_UNANSWERED = Counter(
    "gateway_expired_unanswered",
    "Requests that reached their deadline with nobody deciding, by tool and channel.",
    ["tool", "channel"],
)
WAKE_SECONDS = Histogram(
    "gateway_agent_wake_seconds",
    "Time from a decision (its timestamp, taken in the deciding transaction) to a waiting agent "
    "having it in hand, by how it waited (long_poll, pre_tool_use, websocket, claude_code).",
    ["via"],
    buckets=WAKE_BUCKETS,
)
CARD_DELIVERIES = Counter(
    "gateway_card_deliveries",
    "Card operations on a chat channel by channel, operation (post, update, remind) and outcome "
    "(sent, retrying, failed).",
    ["channel", "operation", "outcome"],
)
CARD_ERRORS = Counter(
    "gateway_card_delivery_errors",
    "Failed card operations by channel, operation and the vendor's error code (e.g. Slack's "
    "channel_not_found, Feishu's numeric code, connection_error).",
    ["channel", "operation", "error"],
)
WEBHOOK_DELIVERIES = Counter(
    "gateway_webhook_deliveries",
    "Decision webhooks (callback_url) by outcome (sent, retrying, failed).",
    ["outcome"],
)
REMINDERS = Counter(
    "gateway_reminders", "Reminders sent to a pending request's approvers."
)
WARNINGS = Counter(
    "gateway_deadline_warnings", "Warnings that a pending request's deadline is near."
)
ESCALATIONS = Counter(
    "gateway_escalations", "Pending requests escalated to their escalation channel."
)
EXPIRIES = Counter(
    "gateway_expiries",
    "Requests expired at their deadline, by what expired them (sweep: the beat task; waiter: a server holding an agent; click: an approver too late).",
    ["by"],
)
AUDIT_APPENDS = Counter(
    "gateway_audit_appends",
    "Entries appended to the tamper-evident record, by what they record.",
    ["record"],
)
# Labelled by scope (`all`; `partial` for --since / --agent) so that nothing is shown before a run.
AUDIT_VERIFY_OK = Gauge(
    "gateway_audit_verify_ok",
    "1 if the last `verify_audit` found the record intact, 0 if it found a bad entry; by scope (all, partial).",
    ["scope"],
    multiprocess_mode="mostrecent",
)
AUDIT_VERIFY_TIME = Gauge(
    "gateway_audit_verify_last_run_timestamp_seconds",
    "When `verify_audit` last finished (Unix time); by scope (all, partial).",
    ["scope"],
    multiprocess_mode="mostrecent",
)
HOOK_ERRORS = Counter(
    "gateway_hook_errors",
    "Hooks that raised or timed out, by hook kind, event, error (timeout, exception) and on_error.",
    ["kind", "event", "error", "on_error"],
)


def multiprocess() -> bool:
    """Whether this process writes its counts to PROMETHEUS_MULTIPROC_DIR."""
    return bool(
        os.environ.get("PROMETHEUS_MULTIPROC_DIR")
        or os.environ.get("prometheus_multiproc_dir")
    )


# --------------------------------------------------------------------------- recording


def tool_call_answered(*, agent: str, decision: str) -> None:
    """A pre-tool-use answered; `decision` as the agent got it ("pending" is counted as "ask")."""
    TOOL_CALLS.labels(agent, "ask" if decision == "pending" else decision).inc()


def request_created(*, channel: str, kind: str, risk: str) -> None:
    REQUESTS.labels(channel, kind, risk).inc()


def decided(*, channel: str, outcome: str, seconds: float) -> None:
    DECISION_SECONDS.labels(channel or "none", outcome).observe(max(0.0, seconds))


_tools_named: set[str] = set()
_tools_lock = threading.Lock()


def tool_label(tool: str) -> str:
    """`tool` as a label value: itself while this process has named fewer than MAX_TOOL_LABELS tools, else "other"."""
    if tool in _tools_named:
        return tool
    with _tools_lock:
        if len(_tools_named) < MAX_TOOL_LABELS:
            _tools_named.add(tool)
            return tool
    return "other"


def approver_answered(*, tool: str, channel: str, decision: str, seconds: float, fast_seconds: float) -> None:
    """An approver's answer, `seconds` after the card was shown; fast if under `fast_seconds`."""
    label, seconds = tool_label(tool), max(0.0, seconds)
    TIME_TO_DECIDE.labels(label, channel or "none", decision).observe(seconds)
    if seconds < fast_seconds:
        FAST_DECISIONS.labels(label, channel or "none").inc()


def expired_unanswered(*, tool: str, channel: str) -> None:
    EXPIRED_UNANSWERED.labels(tool_label(tool), channel or "none").inc()


def agent_woken(*, via: str, decided_at: float | None, loop: asyncio.AbstractEventLoop | None = None) -> None:
    """A waiting agent has a decision in hand; `decided_at` is its Unix time. Once per woken waiter, so on
    an event loop (`loop`: the running one, which the caller has — asking asyncio for it is a getpid each
    time) the waiters woken in one pass of it are written together, once the pass is over
    (`observe_many`): 10,000 answered at once were 20,000 writes to the metrics file, each under its lock."""
    if decided_at is None:
        return
    seconds = max(0.0, time.time() - decided_at)
    if loop is None:
        _wake_histogram(via).observe(seconds)
        return
    woken = _woken.get(loop)
    if woken is None:
        woken = _woken[loop] = []
        loop.call_soon(_observe_woken, loop)
    woken.append((via, seconds))


def _observe_woken(loop: asyncio.AbstractEventLoop) -> None:
    by_via: dict[str, list[float]] = {}
    for via, seconds in _woken.pop(loop, ()):
        by_via.setdefault(via, []).append(seconds)
    for via, values in by_via.items():
        observe_many(_wake_histogram(via), values)


def _wake_histogram(via: str) -> Histogram:
    histogram = _wake_seconds.get(via)  # (each way's histogram looked up once, not through `labels` every time)
    if histogram is None:
        histogram = _wake_seconds[via] = WAKE_SECONDS.labels(via)
    return histogram


def observe_many(histogram: Histogram, values: list[float]) -> None:
    """`histogram.observe(value)` for each of `values`, written as one addition to the sum and one to each
    bucket that gets any (what `observe` adds, by the same rule: the first bucket whose bound is not
    below the value). Through prometheus_client's own parts of a histogram; one by one if they differ."""
    try:
        total, buckets, bounds = histogram._sum, histogram._buckets, histogram._upper_bounds
    except AttributeError:
        for value in values:
            histogram.observe(value)
        return
    counts = [0] * len(buckets)
    for value in values:
        counts[bisect.bisect_left(bounds, value)] += 1
    total.inc(sum(values))
    for bucket, count in zip(buckets, counts):
        if count:
            bucket.inc(count)


_wake_seconds: dict[str, Histogram] = {}
_woken: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, list[tuple[str, float]]] = weakref.WeakKeyDictionary()


def card_delivery(
    *, channel: str, operation: str, outcome: str, error: str = ""
) -> None:
    CARD_DELIVERIES.labels(channel or "none", operation, outcome).inc()
    if outcome != "sent":
        CARD_ERRORS.labels(channel or "none", operation, error or "other").inc()


def audit_verified(*, ok: bool, partial: bool = False) -> None:
    scope = "partial" if partial else "all"
    AUDIT_VERIFY_OK.labels(scope).set(1 if ok else 0)
    AUDIT_VERIFY_TIME.labels(scope).set(time.time())


def hook_failed(*, kind: str, event: str, exc: BaseException, on_error: str) -> None:
    error = (
        "timeout"
        if isinstance(exc, TimeoutError) or "timeout" in type(exc).__name__.lower()
        else "exception"
    )
    HOOK_ERRORS.labels(kind, event, error, on_error).inc()


# --------------------------------------------------------------------------- exposition


class ScrapeCollector:
    """Gauges read when scraped: `read()` returns the families (it may query the database)."""

    def __init__(self, read: Callable[[], Iterable[Metric]]) -> None:
        self.read = read

    def collect(self) -> Iterable[Metric]:
        return self.read()


class _ThisProcess:
    """The default registry's metrics (this process's counts, its resources), in a scrape's registry."""

    def collect(self) -> Iterable[Metric]:
        return REGISTRY.collect()


def exposition(*scraped: Callable[[], Iterable[Metric]]) -> bytes:
    """The text exposition: every process's counts (or this one's), then what `scraped` read now."""
    registry = CollectorRegistry(auto_describe=False)
    if multiprocess():
        MultiProcessCollector(registry)
    else:
        registry.register(_ThisProcess())
    for read in scraped:
        registry.register(ScrapeCollector(read))
    return generate_latest(registry)


def gauge(
    name: str,
    documentation: str,
    labels: list[str],
    values: Iterable[tuple[list[str], float]],
) -> Metric:
    """A gauge family of labelled values, for a scrape-time read."""
    family = GaugeMetricFamily(name, documentation, labels=labels)
    for label_values, value in values:
        family.add_metric(label_values, value)
    return family
