"""What `make bench` prints and keeps: the table of targets beside their same-run references, and the
run's JSON in bench/results/."""

from __future__ import annotations

import json
import time
from typing import Any

from bench.harness import PEER, ROOT, TARGETS


def table(results: dict[str, Any]) -> str:
    rows = ["| Target | Measure | Result | Reference, same run | Target | Met |", "|---|---|---|---|---|---|"]
    mark = {True: "yes", False: "**no**"}
    if (a := results.get("allow")) is not None:
        p, b, m = a["pre_tool_use"], a["bare_reference"], a["minimal_view"]
        rows.append(
            f"| 1. allowed call | pre-tool-use (auth, hook chain, audited ToolCall), {a['concurrency']} connections: "
            f"req/s (p50 / p99) | {p['rps']:.0f} ({p['latency_ms']['p50']:.1f} / {p['latency_ms']['p99']:.1f} ms) "
            f"| bare Django async view: {b['rps']:.0f} ({b['latency_ms']['p50']:.1f} / {b['latency_ms']['p99']:.1f} ms) "
            f"| ≥ 70 % ({a['ratio'] * 100:.0f} %) | {mark[a['ratio'] >= TARGETS['allow_ratio']]} |"
        )
        pa, ba = a["alone_ms"]["pre_tool_use"], a["alone_ms"]["bare_reference"]
        rows.append(
            f"| | one call alone, p50 | {pa['p50']:.2f} ms | {ba['p50']:.2f} ms "
            f"| ≤ 2× ({a['alone_ratio']}×) | {mark[a['alone_ratio'] <= TARGETS['allow_single_p50_ratio']]} |"
        )
        rows.append(
            f"| | (second reference) minimal view inside the gateway, one ORM insert | {m['rps']:.0f} req/s "
            f"({m['latency_ms']['p50']:.1f} / {m['latency_ms']['p99']:.1f} ms) | | | |"
        )
    if (w := results.get("wake")) is not None:
        c, f = w["commit_to_answer_ms"], w["raw_floor_ms"]
        rows.append(
            f"| 2. wake | decision committed → waiting agent's long-poll answered, p50 / p99 "
            f"| {c['p50']:.2f} / {c['p99']:.2f} ms | raw NOTIFY → LISTEN: {f['p50']:.2f} / {f['p99']:.2f} ms "
            f"| p99 ≤ 2 ms and ≤ 5× floor ({w['p99_over_floor_p99']}×) | {mark[w['met']]} |"
        )
        s, r = w["click_sent_to_answer_ms"], w["click_round_trip_ms"]
        rows.append(
            f"| | signed Slack click sent → agent answered, p50 / p99 (the click's own answer: {r['p50']:.2f} / "
            f"{r['p99']:.2f} ms; agent first in {w['agent_answered_before_click_answered']} of {w['decisions']}) "
            f"| {s['p50']:.2f} / {s['p99']:.2f} ms | | (for reference) | |"
        )
    for c in results.get("crowd", []):
        t = c["commit_to_answer_ms"]
        rows.append(
            f"| 3. crowd | {c['waiters']:,} long-poll waiters decided in one transaction: answered correctly; "
            f"commit → answer p50 / p99 | {c['woken_correctly']:,} / {c['waiters']:,}; {t['p50']:.0f} / {t['p99']:.0f} ms "
            f"| {c['kib_per_waiter']:.1f} KiB and no thread per waiter ({c['threads_before']} → "
            f"{c['threads_with_waiters']} threads); {c['idle_cpu_with_waiters'] * 100:.0f} % of a core while held "
            f"| all; p99 ≤ 1 s | {mark[c['met']]} |"
        )
    for e in results.get("expiry", []):
        t = e["after_deadline_ms"]
        rows.append(
            f"| 4. expiry | {e['waiters']:,} waiters, deadlines one after another over {e['spread_s']:.0f} s: "
            f"answered `expired` after own deadline, p50 / p99 / max | {t['p50']:.0f} / {t['p99']:.0f} / {t['max']:.0f} ms "
            f"({e['expired_correctly']:,} / {e['waiters']:,}) | the beat sweep runs every 2 s | p99 ≤ 500 ms "
            f"| {mark[e['met']]} |"
        )
    if (c := results.get("create")) is not None:
        rows.append(
            f"| 5. create | pending requests (row, event, outbox, card delivered), {c['concurrency']} clients: /s, p50; "
            f"CPU each (server + worker); worker backlog drained after the run in "
            f"| {c['rps']:.0f} /s, {c['latency_ms']['p50']:.1f} ms; {c['server_cpu_ms_each']:.1f} + "
            f"{c['worker_cpu_ms_each']:.1f} ms; {c['drained_in_s']:.1f} s; "
            f"{c['postgres_sessions_opened_each']} PostgreSQL sessions opened per request "
            f"| peer (quoted): {PEER['create_rps']} /s, {PEER['create_p50_ms']:.0f} ms | ≥ 300 /s, no backlog "
            f"| {mark[c['met']]} |"
        )
    if (c := results.get("create_slack")) is not None:
        rows.append(
            f"| | the same on a Slack channel: each card posted by the worker to a local fake Slack API "
            f"| {c['rps']:.0f} /s, {c['latency_ms']['p50']:.1f} ms; {c['server_cpu_ms_each']:.1f} + "
            f"{c['worker_cpu_ms_each']:.1f} ms; backlog {c['backlog_at_end']} drained in {c['drained_in_s']:.1f} s "
            f"| | ≥ 300 /s, no backlog | {mark[c['met']]} |"
        )
    if (d := results.get("decide")) is not None:
        f = d["form_post_ms"]
        rows.append(
            f"| | an approver's decision (web page form POST) sent → answered, p50 / p99 | {f['p50']:.1f} / {f['p99']:.1f} ms "
            f"| peer's JSON POST (quoted): {PEER['decide_p50_ms']} ms | p50 ≤ 10 ms | {mark[d['met']]} |"
        )
        if (r := d.get("after_reading")) is not None:
            f = r["form_post_ms"]
            rows.append(
                f"| | the same decision after reading the page 0.2–0.8 s (the server idle meanwhile), p50 / p99; "
                f"server CPU a click | {f['p50']:.1f} / {f['p99']:.1f} ms; {r['server_cpu_ms_each']:.1f} ms "
                f"| right after the page: {d['server_cpu_ms_each']:.1f} ms | measured, no target | |"
            )
    if (g := results.get("growth")) is not None:
        e, f = g["empty"], g["full"]
        rows.append(
            f"| 6. growth | allowed call p99 (8 connections) with {g['tool_calls_added']:,} more ToolCall rows and "
            f"{g['pending_added']:,} pending requests | {f['allow']['latency_ms']['p99']:.1f} ms "
            f"({f['allow']['rps']:.0f} req/s) | empty: {e['allow']['latency_ms']['p99']:.1f} ms "
            f"({e['allow']['rps']:.0f} req/s) | within 20 % ({g['allow_p99_ratio']}×) "
            f"| {mark[g['allow_p99_ratio'] <= TARGETS['growth_ratio']]} |"
        )
        rows.append(
            f"| | expiry sweep with nothing due, p50 | {f['sweep_ms']['p50']:.2f} ms | empty: {e['sweep_ms']['p50']:.2f} ms "
            f"| within 20 % ({g['sweep_p50_ratio']}×) | {mark[g['sweep_p50_ratio'] <= TARGETS['growth_ratio']]} |"
        )
    if (x := results.get("proxy")) is not None:
        ms, added = x["ms"], x["proxy_adds_ms"]
        cpu = f" (CPU {c['adds']:.2f} ms a call)" if (c := x.get("proxy_cpu_ms")) else ""
        rows.append(
            f"| 7. MCP proxy | an allowed `tools/call` through `gateway-mcp-proxy` to a trivial upstream, p50 / p99; "
            f"what the proxy adds beyond the upstream and the gateway's own call | {ms['proxy']['p50']:.2f} / "
            f"{ms['proxy']['p99']:.2f} ms; adds {added['p50']:.2f} / {added['p99']:.2f} ms{cpu} "
            f"| upstream direct {ms['direct']['p50']:.2f} / {ms['direct']['p99']:.2f} ms; the gateway's call "
            f"(pre + post-tool-use, same client) {ms['gateway']['p50']:.2f} / {ms['gateway']['p99']:.2f} ms "
            f"| adds ≤ 1 ms p50 | {mark[added['p50'] <= 1.0]} |"
        )
        rows.append(
            f"| | 8 calls at once through one proxy to a tool taking {x['slow_alone_ms']:.0f} ms: all answered in "
            f"| {x['eight_at_once_ms']:.0f} ms | one alone: {x['slow_alone_ms']:.0f} ms; the 8 without the proxy: "
            f"{x['eight_at_once_gateway_ms']:.0f} ms | not serialized (< 2× one) "
            f"| {mark[not x['serializes']]} |"
        )
    if (i := results.get("idle")) is not None:
        c = i["cores"]
        rows.append(
            f"| 8. idle | server, worker and beat doing nothing for {i['seconds']:.0f} s: share of one core "
            f"| {i['total_cores']:.4f} (server {c['server']:.4f}, worker {c['worker']:.4f}, beat {c['beat']:.4f}) "
            f"| peer's server (quoted): 0.006 | ≤ 0.010 | {mark[i['met']]} |"
        )
    return "\n".join(rows)


def save_json(report: dict[str, Any]) -> str:
    """Keep the run's JSON as bench/results/<stamp>.json and latest.json; the stamp."""
    out_dir = ROOT / "bench" / "results"
    out_dir.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    (out_dir / f"{stamp}.json").write_text(json.dumps(report, indent=2))
    (out_dir / "latest.json").write_text(json.dumps(report, indent=2))
    return stamp
