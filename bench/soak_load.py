"""The load `bench/soak.py` puts on the gateways, all of it at once for the whole run (its docstring says
what each kind measures): paced allowed calls, web and Slack approvals, expiring asks, and re-polling
waiters; a Recorder of each kind's latencies and errors per minute."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import random
import re
import sys
import time
from typing import Any
from urllib.parse import urlencode

from bench.aioclient import Connection
from bench.harness import APPROVER, APPROVER_PASSWORD, SLACK_SIGNING_SECRET, Server, cookie_header, cookies, percentile

SLACK_USER = "USOAK1"
EXPIRY_SECONDS = 5
KINDS = ("allow", "web", "slack", "expiry", "reconnect")
# What each kind's latency is: see bench/soak.py's docstring; `reconnect` is the time beyond the round's timeout.


def log(message: str) -> None:
    print(f"[soak {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- the load


class Recorder:
    """Latencies and errors per kind and minute."""

    def __init__(self) -> None:
        self.started = time.monotonic()
        self.samples: dict[tuple[int, str], list[float]] = {}
        self.errors: dict[tuple[int, str], int] = {}
        self.error_messages: list[str] = []
        self.counts: dict[str, int] = {}

    def minute(self) -> int:
        return int((time.monotonic() - self.started) // 60)

    def ok(self, kind: str, seconds: float) -> None:
        self.samples.setdefault((self.minute(), kind), []).append(seconds)

    def count(self, what: str) -> None:
        self.counts[what] = self.counts.get(what, 0) + 1

    def error(self, kind: str, message: str) -> None:
        key = (self.minute(), kind)
        self.errors[key] = self.errors.get(key, 0) + 1
        if len(self.error_messages) < 50:
            self.error_messages.append(f"min {key[0]} {kind}: {message}")
            log(f"ERROR {kind}: {message}")

    def row(self, minute: int) -> dict[str, Any]:
        row: dict[str, Any] = {"minute": minute}
        for kind in KINDS:
            values = [v * 1000 for v in self.samples.get((minute, kind), [])]
            row[kind] = {
                "n": len(values),
                "p50": round(percentile(values, 50), 1) if values else None,
                "p99": round(percentile(values, 99), 1) if values else None,
                "max": round(max(values), 1) if values else None,
                "errors": self.errors.get((minute, kind), 0),
            }
        return row


class Gateways:
    """The servers behind the 'proxy': each new connection goes to the next one."""

    def __init__(self, servers: list[Server]) -> None:
        self.servers = servers
        self.turn = 0

    async def connection(self) -> Connection:
        self.turn += 1
        return await self.servers[self.turn % len(self.servers)].connection()


def _moment(value: str) -> float:
    return dt.datetime.fromisoformat(value).timestamp()


async def ask(gateways: Gateways, auth: dict[str, str], tool: str, **args: Any) -> dict[str, Any]:
    """One ask on a connection of its own (a keep-alive connection idle for 5 s is closed by uvicorn)."""
    conn = await gateways.connection()
    try:
        return await conn.json("POST", "/api/v1/hooks/pre-tool-use", headers=auth,
                               payload={"session_id": "soak", "tool_name": tool, "tool_args": args})  # fmt: skip
    finally:
        conn.close()


async def long_poll(gateways: Gateways, auth: dict[str, str], cid: str, timeout: float = 60) -> dict[str, Any]:
    """Wait for the request's final state as an agent does: re-poll on a pending answer."""
    while True:
        conn = await gateways.connection()
        try:
            status, body = await conn.request(
                "GET", f"/api/v1/confirmations/{cid}/wait?timeout={timeout}", headers=auth
            )
        finally:
            conn.close()
        if status != 200:
            raise RuntimeError(f"wait answered {status}: {body[:200]!r}")
        state = json.loads(body)
        if state["status"] != "pending":
            return state


async def allow_loop(gateways: Gateways, auth: dict[str, str], rec: Recorder, stop: float, rps: float) -> None:
    conn = await gateways.connection()
    body = json.dumps({"session_id": "soak-allow", "tool_name": "fs__read", "tool_args": {"path": "/tmp/x"}}).encode()
    headers = {"content-type": "application/json", **auth}
    interval = 4 / rps  # four of these loops
    next_at = time.monotonic()
    while time.monotonic() < stop:
        next_at += interval
        t0 = time.perf_counter()
        try:
            status, data = await conn.request("POST", "/api/v1/hooks/pre-tool-use", headers=headers, body=body)
            if status == 200 and json.loads(data)["decision"] == "allow":
                rec.ok("allow", time.perf_counter() - t0)
            else:
                rec.error("allow", f"{status} {data[:200]!r}")
        except (OSError, asyncio.IncompleteReadError) as exc:
            rec.error("allow", repr(exc))
            conn.close()
            conn = await gateways.connection()
        await asyncio.sleep(max(0.0, next_at - time.monotonic()))
    conn.close()


class WebApprover:
    """The approver on the web page: signed in once, then GET page + POST form per request."""

    CSRF = re.compile(r'name="csrfmiddlewaretoken" value="([^"]+)"')

    def __init__(self, server: Server) -> None:
        self.server = server
        self.jar: dict[str, str] = {}
        self.conn: Connection | None = None

    async def sign_in(self) -> None:
        self.conn = await self.server.connection()
        _, headers, body = await self.conn.request_full("GET", "/login/")
        cookies(headers, self.jar)
        token = self.CSRF.search(body.decode()).group(1)  # type: ignore[union-attr]
        form = urlencode({"username": APPROVER, "password": APPROVER_PASSWORD, "csrfmiddlewaretoken": token})
        status, headers, _ = await self.conn.request_full(
            "POST", "/login/", body=form.encode(),
            headers={"content-type": "application/x-www-form-urlencoded", "cookie": cookie_header(self.jar)},
        )  # fmt: skip
        assert status == 302, status
        cookies(headers, self.jar)

    async def approve(self, cid: str) -> None:
        assert self.conn is not None
        page = f"/approvals/{cid}/"
        status, headers, body = await self.conn.request_full(
            "GET", page, headers={"cookie": cookie_header(self.jar)}
        )
        if status != 200:
            raise RuntimeError(f"page answered {status}")
        cookies(headers, self.jar)
        token = self.CSRF.search(body.decode()).group(1)  # type: ignore[union-attr]
        form = urlencode({"decision": "approve", "reason": "", "csrfmiddlewaretoken": token}).encode()
        headers = {"content-type": "application/x-www-form-urlencoded", "cookie": cookie_header(self.jar),
                   "referer": f"http://127.0.0.1:{self.server.port}{page}"}  # fmt: skip
        status, answer_headers, _ = await self.conn.request_full("POST", page, headers=headers, body=form)
        if status != 302:
            raise RuntimeError(f"form POST answered {status}")
        cookies(answer_headers, self.jar)


async def web_loop(gateways: Gateways, auth: dict[str, str], rec: Recorder, stop: float, every: float) -> None:
    approver = WebApprover(gateways.servers[0])
    await approver.sign_in()
    i = 0
    while time.monotonic() < stop:
        i += 1
        started = time.monotonic()
        try:
            cid = (await ask(gateways, auth, "web__pay", i=i))["confirmation_id"]
            waiter = asyncio.ensure_future(long_poll(gateways, auth, cid))
            await asyncio.sleep(0.05)
            posted = time.perf_counter()
            await approver.approve(cid)
            state = await asyncio.wait_for(waiter, 60)
            if state["status"] == "approved":
                rec.ok("web", time.perf_counter() - posted)
            else:
                rec.error("web", f"final {state['status']}")
        except Exception as exc:
            rec.error("web", repr(exc)[:300])
            approver = WebApprover(gateways.servers[0])
            await approver.sign_in()
        await asyncio.sleep(max(0.0, every - (time.monotonic() - started)))


async def slack_loop(gateways: Gateways, auth: dict[str, str], rec: Recorder, stop: float, every: float,
                     fake_slack: Any) -> None:  # fmt: skip
    from gateway_contract import sign_confirmation_id
    from tests.fakes.slack_api import block_actions_payload, form_body, signed_slack_request

    i = 0
    while time.monotonic() < stop:
        i += 1
        started = time.monotonic()
        try:
            cards_before = len(fake_slack.calls("chat.postMessage"))
            cid = (await ask(gateways, auth, "slack__pay", i=i))["confirmation_id"]
            waiter = asyncio.ensure_future(long_poll(gateways, auth, cid))
            deadline = time.monotonic() + 30
            while len(fake_slack.calls("chat.postMessage")) <= cards_before:  # the worker delivered the card
                if time.monotonic() > deadline:
                    raise RuntimeError("no card delivered within 30 s")
                await asyncio.sleep(0.02)
            rec.count("cards delivered")
            payload = block_actions_payload(
                action_id="approve", value=sign_confirmation_id(cid), user_id=SLACK_USER,
                response_url=fake_slack.response_url("soak"), channel_id="C0SOAK",
            )  # fmt: skip
            body = form_body(payload)
            headers = {"content-type": "application/x-www-form-urlencoded",
                       **signed_slack_request(SLACK_SIGNING_SECRET, body)}  # fmt: skip
            clicker = await gateways.connection()
            posted = time.perf_counter()
            try:
                status, data = await clicker.request("POST", "/channels/slack/callback", headers=headers, body=body)
            finally:
                clicker.close()
            if status != 200:
                raise RuntimeError(f"click answered {status}: {data[:200]!r}")
            state = await asyncio.wait_for(waiter, 60)
            if state["status"] == "approved":
                rec.ok("slack", time.perf_counter() - posted)
            else:
                rec.error("slack", f"final {state['status']}")
        except Exception as exc:
            rec.error("slack", repr(exc)[:300])
        await asyncio.sleep(max(0.0, every - (time.monotonic() - started)))


async def expiry_loop(gateways: Gateways, auth: dict[str, str], rec: Recorder, stop: float, every: float) -> None:
    pending: set[asyncio.Task] = set()
    i = 0

    async def one(cid: str) -> None:
        try:
            conn = await gateways.connection()
            try:
                status, body = await conn.request("GET", f"/api/v1/confirmations/{cid}/wait?timeout=0", headers=auth)
            finally:
                conn.close()
            if status != 200:
                raise RuntimeError(f"wait answered {status}: {body[:200]!r}")
            expires_at = _moment(json.loads(body)["expires_at"])
            state = await asyncio.wait_for(long_poll(gateways, auth, cid), 60)
            if state["status"] == "expired":
                rec.ok("expiry", max(0.0, time.time() - expires_at))
            else:
                rec.error("expiry", f"final {state['status']}")
        except Exception as exc:
            rec.error("expiry", repr(exc)[:300])

    while time.monotonic() < stop:
        i += 1
        started = time.monotonic()
        try:
            cid = (await ask(gateways, auth, "quick__deploy", i=i))["confirmation_id"]
            task = asyncio.ensure_future(one(cid))
            pending.add(task)
            task.add_done_callback(pending.discard)
        except Exception as exc:
            rec.error("expiry", repr(exc)[:300])
        await asyncio.sleep(max(0.0, every - (time.monotonic() - started)))
    if pending:
        await asyncio.wait(pending, timeout=EXPIRY_SECONDS + 30)


async def reconnect_loop(gateways: Gateways, auth: dict[str, str], rec: Recorder, stop: float, cid: str,
                         seed: int) -> None:  # fmt: skip
    """One agent re-polling a request nobody decides: a new connection per round, some dropped early."""
    rng = random.Random(seed)
    while time.monotonic() < stop:
        conn = await gateways.connection()
        t0 = time.perf_counter()
        try:
            if rng.random() < 0.2:  # the agent goes away mid-wait
                conn.send("GET", f"/api/v1/confirmations/{cid}/wait?timeout=10", headers=auth)
                await asyncio.sleep(rng.uniform(0.05, 1.0))
                rec.count("waits dropped by the agent")
                continue
            status, body = await conn.request("GET", f"/api/v1/confirmations/{cid}/wait?timeout=2", headers=auth)
            if status == 200 and json.loads(body)["status"] == "pending":
                rec.ok("reconnect", max(0.0, time.perf_counter() - t0 - 2))  # beyond its 2 s timeout
            else:
                rec.error("reconnect", f"{status} {body[:200]!r}")
        except Exception as exc:
            rec.error("reconnect", repr(exc)[:300])
            await asyncio.sleep(0.5)
        finally:
            conn.close()
