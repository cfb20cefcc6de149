"""6. growth: the allow path and the expiry sweep on the benchmark's database, then again after adding
1,000,000 ToolCall rows and 100,000 pending requests (docs/waiting.md#benchmark)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from bench.database import vacuum_analyze
from bench.harness import TARGETS, Server, closed_loop, combine, log, summary_ms
from bench.parts.allow import allow_targets


GROWTH_CHAIN = 999_999_999  # the agent id the added calls' audit entries are chained under (no such agent)


def fill_database(tool_calls: int, pending: int, *, agent_id: int, channel_id: int) -> float:
    """Add `tool_calls` audited calls and `pending` requests (deadlines an hour away) in bulk; seconds taken."""
    from django.db import connection

    from approvals.models import AuditEntry, ConfirmationRequest, ToolCall

    started = time.perf_counter()
    calls, requests = ToolCall._meta.db_table, ConfirmationRequest._meta.db_table
    entries = AuditEntry._meta.db_table
    with connection.cursor() as cursor:
        # Each call with its audit entry (on a chain of its own: the entries table and its indexes
        # grow as they would, while the benchmark agent's chain stays whole).
        cursor.execute(
            f"""WITH added AS (
                INSERT INTO {calls} (id, agent_id, session_id, turn_id, tool_call_id, tool_name, tool_args, user_id,
                    metadata, decision, reason, decided_by_hook, hook_decisions, config_version, request_fingerprint,
                    response, created_at, outcome)
                SELECT gen_random_uuid(), %s, 'grow-' || mod(g, 5000), '', 'c' || g, 'tool__' || mod(g, 40),
                    jsonb_build_object('n', g), 'u-' || mod(g, 300), '{{}}', 'allow', '', '', '[]', 1, '',
                    '{{}}', now() - make_interval(secs => g), ''
                FROM generate_series(1, %s) AS g
                RETURNING id, created_at)
            INSERT INTO {entries} (agent_id, seq, action, tool_call_id, event_id, content_hash, prev_hash,
                    entry_hash, key_id, created_at)
            SELECT %s, row_number() OVER (), 'asked', id, NULL, repeat('0', 64), repeat('0', 64), repeat('0', 64),
                'growth', created_at FROM added""",
            [agent_id, tool_calls, GROWTH_CHAIN],
        )
        cursor.execute(
            f"""INSERT INTO {requests} (id, agent_id, session_id, tool_name, tool_args, tool_call_id, user_id,
                    metadata, channel_id, approvers, approvals_required, allow_self_approval, status, reason,
                    hook_name, config_version, decided_by, decision_reason, expires_at, on_timeout,
                    escalate_approvers, callback_url, created_at, arg_edits, args_fingerprint, decided_by_name,
                    editable_paths, edit_types, grant_options, turn_id, approver_people, escalate_approver_people,
                    kind, decision_mac, risk)
                SELECT gen_random_uuid(), %s, 'grow', 'oa__pay', jsonb_build_object('n', g), '', '', '{{}}', %s,
                    '[]', 1, false, 'pending', '', 'pay-gate', 1, '', '',
                    now() + interval '1 hour' + make_interval(secs => mod(g, 3600)), 'deny', '[]', '', now(),
                    '{{}}', '', '', '[]', '{{}}', '[]', '', '{{}}', '{{}}', 'confirmation', '', 'medium'
                FROM generate_series(1, %s) AS g""",
            [agent_id, channel_id, pending],
        )
    vacuum_analyze()
    with connection.cursor() as cursor:
        # The million rows' pages written out now, not by a checkpoint in the middle of the measuring:
        # what is measured is the cost of a bigger database, not of having just filled one.
        cursor.execute("CHECKPOINT")
    return time.perf_counter() - started


def sweep_cost(rounds: int = 150) -> dict[str, float]:
    """The expiry sweep (what beat runs every 2 s) with nothing due: ms per run."""
    from approvals import services

    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        services.confirmation_expire_due()
        times.append(time.perf_counter() - t0)
    return summary_ms(times)


async def part_growth(gateway: Server, ids: dict[str, Any], *, seconds: float, concurrency: int,
                      tool_calls: int, pending: int) -> dict[str, Any]:  # fmt: skip
    target = allow_targets(ids)["pre_tool_use"]

    async def measure() -> dict[str, Any]:
        # Three rounds each side (their p99 over all of them): one round's p99 is a handful of samples,
        # and a single slow moment of the machine moved the ratio by a quarter.
        await closed_loop(gateway, *target, seconds=2, concurrency=concurrency)
        run = combine([await closed_loop(gateway, *target, seconds=seconds, concurrency=concurrency) for _ in range(3)])
        return {"allow": run, "sweep_ms": await asyncio.to_thread(sweep_cost)}

    log("6. growth: the allow path and the sweep on the benchmark's (small) database")
    empty = await measure()
    log(f"6. growth: adding {tool_calls:,} tool calls and {pending:,} pending requests")
    filled_in = await asyncio.to_thread(fill_database, tool_calls, pending, agent_id=ids["agent_id"],
                                        channel_id=ids["channel_id"])  # fmt: skip
    full = await measure()
    result = {
        "tool_calls_added": tool_calls,
        "pending_added": pending,
        "filled_in_s": round(filled_in, 1),
        "empty": empty,
        "full": full,
        "allow_p99_ratio": round(full["allow"]["latency_ms"]["p99"] / empty["allow"]["latency_ms"]["p99"], 2),
        "sweep_p50_ratio": round(full["sweep_ms"]["p50"] / empty["sweep_ms"]["p50"], 2),
    }
    result["met"] = result["allow_p99_ratio"] <= TARGETS["growth_ratio"] and result["sweep_p50_ratio"] <= TARGETS["growth_ratio"]
    return result
