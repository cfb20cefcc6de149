"""7. proxy: what the MCP proxy (`gateway-mcp-proxy`, gateway_client.mcp_proxy) adds to an allowed
`tools/call` (docs/benchmarks.md).

Three ways to the same trivial upstream (bench/mcp_upstream.py, a stdio MCP server that answers at once),
measured in one run, each one call at a time after a warm-up:

- direct: an MCP client's `tools/call` straight to the upstream;
- through the proxy: the same call to `gateway-mcp-proxy --name web -- <upstream>`, which asks the gateway
  (pre-tool-use, allowed), runs the upstream and reports the result (post-tool-use);
- the gateway's own allowed call as the proxy makes it: `ToolGate.acall` of the same client library, in
  this process, with a tool that returns at once (pre-tool-use + post-tool-use, the client's own work).

The three ways take turns call by call (the order rotating), so each round's three calls see the same
moment of the machine; the proxy's own cost is the p50 (and p99) of each round's `through the proxy −
direct − the gateway's call` (target: ≤ 1 ms at p50). On a busy machine the gateway's round trip varies
by milliseconds from one moment to the next, which a difference of separately taken medians did not
cancel. Beside it, CPU time, which a busy machine hardly moves: the proxy process's own per call (read
from /proc; its upstream is a child process, not counted) against this process's for the gateway's
call, the same client library's work (`proxy_cpu_ms`). Then
8 calls at once through one proxy to the upstream's `slow` tool (100 ms each): calls run side by side when
they all answer in about the time of one alone, not 8 times it (the proxy does not serialize calls: under
2× one alone is the mark, the gateway's round trip included, which a busy machine stretches past 100 ms;
it was 2× 100 ms, failing a sitting whose one call alone took 125 ms); beside it, the same 8 through
the client library alone (the gateway's own share of answering 8 at once). The client speaks raw
newline-delimited JSON-RPC over the pipes, so its own cost is as small as an MCP client's can be.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from bench.harness import CLIENT_CPU, ROOT, Server, log, summary_ms

PROXY_TARGET_MS = 1.0
SLOW_SECONDS = 0.1
UPSTREAM = [sys.executable, str(ROOT / "bench" / "mcp_upstream.py")]


class StdioPeer:
    """An MCP server run as a child process, spoken to in JSON-RPC lines; answers matched by id."""

    def __init__(self, command: list[str], env: dict[str, str]) -> None:
        self.command, self.env = command, env
        self.ids = itertools.count(1)
        self.waiting: dict[int, asyncio.Future] = {}

    async def start(self) -> StdioPeer:
        def pin() -> None:
            if len(os.sched_getaffinity(0)) >= 2 or CLIENT_CPU in os.sched_getaffinity(0):
                os.sched_setaffinity(0, {CLIENT_CPU})  # the agent's side: on the client's core

        self.proc = await asyncio.create_subprocess_exec(
            *self.command, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, env=self.env,
            cwd=ROOT, limit=2**20, preexec_fn=pin,
        )  # fmt: skip
        self.reader = asyncio.create_task(self._read())
        await self.request("initialize", {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"},
        })  # fmt: skip
        self._send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        return self

    def _send(self, message: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(message).encode() + b"\n")

    async def _read(self) -> None:
        assert self.proc.stdout is not None
        while line := await self.proc.stdout.readline():
            message = json.loads(line)
            future = self.waiting.pop(message.get("id"), None) if "method" not in message else None
            if future is not None and not future.done():
                future.set_result(message)

    async def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        request_id = next(self.ids)
        future = self.waiting[request_id] = asyncio.get_running_loop().create_future()
        self._send({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
        answer = await asyncio.wait_for(future, 30)
        if "error" in answer or answer["result"].get("isError"):
            raise RuntimeError(f"{self.command[0]}: {method} failed: {answer}")
        return answer["result"]

    async def call(self, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        return await self.request("tools/call", {"name": tool, "arguments": arguments})

    async def stop(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            await asyncio.wait_for(self.proc.wait(), 10)
        except TimeoutError:
            self.proc.kill()
            await self.proc.wait()
        self.reader.cancel()


def process_cpu(pid: int) -> float:
    """Seconds of CPU (user + system) a process has used, from /proc (in clock ticks: 10 ms)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def timed(call, n: int) -> list[float]:
    times = []
    for i in range(n):
        t0 = time.perf_counter()
        await call(i)
        times.append(time.perf_counter() - t0)
    return times


async def part_proxy(gateway: Server, ids: dict[str, Any], *, calls: int = 400) -> dict[str, Any]:
    from gateway_client import AsyncGatewayClient, ToolGate

    url = f"http://127.0.0.1:{gateway.port}"
    env = {**os.environ, "GATEWAY_URL": url, "GATEWAY_API_KEY": ids["key"]}
    direct = await StdioPeer(UPSTREAM, env).start()
    proxy_cmd = [sys.executable, "-m", "gateway_client.mcp_proxy", "--name", "web", "--", *UPSTREAM]
    proxy = await StdioPeer(proxy_cmd, env).start()
    client = AsyncGatewayClient(url, ids["key"])
    gate = ToolGate(client, session_id="bench-proxy", key_prefix="bench")

    async def nothing(args: dict[str, Any]) -> str:
        return json.dumps(args)

    ways = {
        "direct": lambda i: direct.call("search", {"q": f"weather {i}"}),
        "proxy": lambda i: proxy.call("search", {"q": f"weather {i}"}),
        "gateway": lambda i: gate.acall(tool_name="web__search", tool_args={"q": f"weather {i}"}, run=nothing),
    }
    try:
        log(f"7. proxy: warm-up, then {calls} calls one at a time each way, in turns (direct, proxy, gateway)")
        for way in ways.values():
            await timed(way, 50)
        samples: dict[str, list[float]] = {name: [] for name in ways}
        order = list(ways)
        gateway_cpu, proxy_cpu = 0.0, process_cpu(proxy.proc.pid)
        for i in range(calls):  # turn by turn: a slow moment of the machine falls on every way alike
            for name in order[i % 3 :] + order[: i % 3]:
                cpu, t0 = time.process_time(), time.perf_counter()
                await ways[name](i)
                samples[name].append(time.perf_counter() - t0)
                if name == "gateway":
                    gateway_cpu += time.process_time() - cpu
        proxy_cpu = process_cpu(proxy.proc.pid) - proxy_cpu  # idle but for its own calls
        outcome = await gate.acall(tool_name="web__search", tool_args={"q": "check"}, run=nothing)
        assert outcome.status == "ran", outcome  # the calls above were allowed, not refused
        log(f"7. proxy: 8 calls at once through one proxy to a tool that takes {SLOW_SECONDS * 1000:.0f} ms")
        alone = await timed(lambda i: proxy.call("slow", {"seconds": SLOW_SECONDS}), 3)

        async def slow(args: dict[str, Any]) -> str:
            await asyncio.sleep(SLOW_SECONDS)
            return "done"

        together, gate_together = [], []
        for _ in range(5):
            t0 = time.perf_counter()
            await asyncio.gather(*(proxy.call("slow", {"seconds": SLOW_SECONDS, "n": n}) for n in range(8)))
            together.append(time.perf_counter() - t0)
            t0 = time.perf_counter()  # the same 8 through the client library alone: the gateway's share
            await asyncio.gather(*(gate.acall(tool_name="web__slow", tool_args={"n": n}, run=slow) for n in range(8)))
            gate_together.append(time.perf_counter() - t0)
    finally:
        await proxy.stop()
        await direct.stop()
    ms = {name: summary_ms(values) for name, values in samples.items()}
    each_round = summary_ms([p - d - g for p, d, g in zip(samples["proxy"], samples["direct"], samples["gateway"])])
    added = {q: round(each_round[q], 2) for q in ("p50", "p99")}
    eight = round(min(together) * 1000, 1)
    return {
        "calls": calls,
        "ms": ms,
        "proxy_adds_ms": added,
        "proxy_cpu_ms": {  # per call: the proxy process's, and this process's for the gateway's call
            "proxy": round(proxy_cpu / calls * 1000, 2),
            "gateway_call": round(gateway_cpu / calls * 1000, 2),
            "adds": round((proxy_cpu - gateway_cpu) / calls * 1000, 2),
        },
        "slow_alone_ms": round(min(alone) * 1000, 1),
        "eight_at_once_ms": eight,
        "eight_at_once_all_ms": [round(t * 1000, 1) for t in together],
        "eight_at_once_gateway_ms": round(min(gate_together) * 1000, 1),
        "serializes": eight >= 2 * min(alone) * 1000,  # the table says "< 2× one": one call alone, gateway included
        "met": added["p50"] <= PROXY_TARGET_MS and eight < 2 * min(alone) * 1000,
    }
