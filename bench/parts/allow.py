"""1. allow: the allowed pre-tool-use call (auth, hook chain, audited ToolCall) against the bare Django
reference, 8 connections, closed loop; and one call alone (docs/waiting.md#benchmark)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from bench.harness import BENCH_ENV, TARGETS, Server, closed_loop, combine, log, sequential, summary_ms


def allow_targets(ids: dict[str, Any]) -> dict[str, tuple[str, dict[str, str], bytes]]:
    call = {"session_id": "bench-allow", "tool_name": "web__search", "tool_args": {"q": "weather"}}
    return {
        "pre_tool_use": (
            "/api/v1/hooks/pre-tool-use",
            {"authorization": f"Bearer {ids['key']}", "content-type": "application/json"},
            json.dumps(call).encode(),
        ),
        "bare_reference": (f"/bare/insert?agent={ids['agent_id']}", {"content-type": "application/json"},
                           json.dumps(call).encode()),  # fmt: skip
        "minimal_view": (f"/bench/insert?agent={ids['agent_id']}", {"content-type": "application/json"},
                         json.dumps(call).encode()),  # fmt: skip
    }


async def part_allow(gateway: Server, bare: Server, ids: dict[str, Any], *, seconds: float, concurrency: int,
                     rounds: int = 2) -> dict[str, Any]:  # fmt: skip
    from approvals.models import ToolCall

    targets = allow_targets(ids)
    servers = {"pre_tool_use": gateway, "bare_reference": bare, "minimal_view": gateway}
    log(f"1. allow: warm-up, then {rounds} x {seconds:.0f} s of each endpoint, interleaved, {concurrency} connections")
    for name, target in targets.items():
        await closed_loop(servers[name], *target, seconds=2, concurrency=concurrency)
    before = await asyncio.to_thread(lambda: ToolCall.objects.filter(tool_name="web__search").count())
    runs: dict[str, list[dict]] = {name: [] for name in targets}
    for _ in range(rounds):
        for name, target in targets.items():
            runs[name].append(await closed_loop(servers[name], *target, seconds=seconds, concurrency=concurrency))
    after = await asyncio.to_thread(lambda: ToolCall.objects.filter(tool_name="web__search").count())
    log("1. allow: one call alone, 400 sequential calls each")
    alone = {name: summary_ms(await sequential(servers[name], *targets[name], n=400)) for name in targets}
    result: dict[str, Any] = {name: combine(runs[name]) for name in targets}
    result["alone_ms"] = alone
    result["concurrency"], result["seconds_per_round"] = concurrency, seconds
    written = after - before
    result["audit_rows_written"] = written
    # Every pre-tool-use call and every bare-reference request inserts one row with this tool name
    # (the minimal view's rows are `bench__insert`).
    result["audit_rows_match"] = written == result["pre_tool_use"]["requests"] + result["bare_reference"]["requests"]
    result["ratio"] = round(result["pre_tool_use"]["rps"] / result["bare_reference"]["rps"], 3)
    result["metrics"] = await asyncio.to_thread(scraped_allowed_calls, gateway)
    result["alone_ratio"] = round(alone["pre_tool_use"]["p50"] / alone["bare_reference"]["p50"], 2)
    result["met"] = (
        result["ratio"] >= TARGETS["allow_ratio"]
        and result["alone_ratio"] <= TARGETS["allow_single_p50_ratio"]
        and result["pre_tool_use"]["errors"] == 0
    )
    return result


def scraped_allowed_calls(gateway: Server) -> dict[str, Any]:
    """With metrics on: the allowed calls /metrics counted (every one the server answered, warm-up included)."""
    if "PROMETHEUS_MULTIPROC_DIR" not in BENCH_ENV:
        return {"on": False}
    import httpx
    from prometheus_client.parser import text_string_to_metric_families

    response = httpx.get(f"http://127.0.0.1:{gateway.port}/metrics", headers={"authorization": f"Bearer {BENCH_ENV['GATEWAY_METRICS_TOKEN']}"})
    counted = sum(
        sample.value
        for family in text_string_to_metric_families(response.text)
        if family.name == "gateway_tool_calls"
        for sample in family.samples
        if sample.labels.get("decision") == "allow"
    )
    return {"on": True, "multiprocess": True, "allowed_calls_counted": counted}
