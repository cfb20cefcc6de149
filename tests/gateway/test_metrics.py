"""`/metrics`: scraped over real HTTP from the live gateway after a scripted mix of calls, decisions,
expiries, hook failures and card deliveries, and parsed with prometheus_client's own parser.

The counters are per process and other tests in this process move them too: each check compares a
scrape after with one before, on labels (agents, channels) that only these tests use.
"""

from __future__ import annotations

import io
import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import pytest
from django.core.management import call_command
from prometheus_client.parser import text_string_to_metric_families

from approvals import services
from approvals.models import Agent, ConfirmationRequest, Outbox
from tests.conftest import apply_config, decide, make_agent_client
from tests.fakes.slack_api import FakeSlack
from tests.support import parked, wait_until

pytestmark = pytest.mark.django_db(transaction=True)

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "metrics-token-0123456789abcdef"

MIX_CONFIG = """
channels:
  - {name: metrics-web, kind: web}
agents:
  - name: metrics-bot
    hooks:
      - kind: policy
        rules:
          - {effect: deny, tools: ["danger__*"], reason: "never"}
      - kind: command
        name: missing
        event: pre_tool_use
        tools: ["flaky__*"]
        command: ["/nonexistent/metrics-hook"]
        on_error: fail_open
      - kind: command
        name: slow
        event: pre_tool_use
        tools: ["slow__*"]
        command: ["sleep", "5"]
        timeout_ms: 100
      - kind: approval_gate
        name: gate
        tools: ["pay__*"]
        channel: metrics-web
        timeout_seconds: 1800
      - kind: approval_gate
        name: quick
        tools: ["quick__*"]
        channel: metrics-web
        timeout_seconds: 1
"""


class Scrape:
    """One scrape of /metrics, parsed: sample values by name and labels."""

    def __init__(self, text: str) -> None:
        self.families = {
            family.name: family for family in text_string_to_metric_families(text)
        }
        self.samples = {}
        for family in self.families.values():
            for sample in family.samples:
                self.samples[(sample.name, tuple(sorted(sample.labels.items())))] = (
                    sample.value
                )

    def value(self, name: str, **labels: str) -> float:
        return self.samples.get((name, tuple(sorted(labels.items()))), 0.0)


def scrape(live_gateway) -> Scrape:
    response = httpx.get(
        f"{live_gateway.url}/metrics",
        headers={"Authorization": f"Bearer {TOKEN}"},
        timeout=10,
    )
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    return Scrape(response.text)


@pytest.fixture
def metrics_on(settings):
    settings.GATEWAY_METRICS_TOKEN = TOKEN


def test_metrics_are_off_without_a_token_and_refused_without_the_right_one(
    live_gateway, settings
):
    settings.GATEWAY_METRICS_TOKEN = ""
    off = httpx.get(
        f"{live_gateway.url}/metrics", headers={"Authorization": f"Bearer {TOKEN}"}
    )
    assert off.status_code == 404
    assert off.json()["error"]["code"] == "not_found"

    settings.GATEWAY_METRICS_TOKEN = TOKEN
    for headers in (
        {},
        {"Authorization": "Bearer wrong"},
        {"Authorization": f"Basic {TOKEN}"},
    ):
        refused = httpx.get(f"{live_gateway.url}/metrics", headers=headers)
        assert refused.status_code == 401, headers
        assert refused.json()["error"]["code"] == "unauthorized"
        assert refused.headers["www-authenticate"].startswith("Bearer")
        assert "gateway_tool_calls" not in refused.text
    assert scrape(live_gateway).families  # the right token


def test_a_scripted_mix_of_calls_and_decisions_shows_in_the_scrape(
    live_gateway, metrics_on
):
    apply_config(MIX_CONFIG)
    agent = make_agent_client(live_gateway, "metrics-bot")
    before = scrape(live_gateway)
    bot = {"agent": "metrics-bot"}

    for n in range(3):
        assert agent.pre_tool_use("fs__read", {"n": n}).json()["decision"] == "allow"
    assert agent.pre_tool_use("danger__drop", {}).json()["decision"] == "deny"
    assert (
        agent.pre_tool_use("flaky__call", {}).json()["decision"] == "allow"
    )  # fail_open: no opinion
    assert (
        agent.pre_tool_use("slow__call", {}).json()["decision"] == "deny"
    )  # timed out, fail_closed
    approved = agent.pre_tool_use("pay__invoice", {"amount": 1}).json()[
        "confirmation_id"
    ]
    rejected = agent.pre_tool_use("pay__invoice", {"amount": 2}).json()[
        "confirmation_id"
    ]
    expiring = agent.pre_tool_use("quick__thing", {}).json()["confirmation_id"]

    pending = scrape(live_gateway)
    assert pending.value("gateway_pending_requests", channel="metrics-web") == 3
    assert (
        pending.value("gateway_pending_oldest_age_seconds", channel="metrics-web") > 0
    )

    # An agent long-polls while alice approves: it is woken, and the wake is timed.
    answers = {}
    waiter = threading.Thread(
        target=lambda: answers.update(wait=agent.wait(approved, timeout=20).json())
    )
    waiter.start()
    wait_until(lambda: parked(approved), what="the agent to be waiting")
    decide(approved, "approve", channel="metrics-web")
    decide(rejected, "reject", channel="metrics-web")
    waiter.join(timeout=30)
    assert answers["wait"]["status"] == "approved"
    # The beat's sweep expires the quick one once its second is up.
    wait_until(services.confirmation_expire_due, what="the sweep to expire the request")
    assert ConfirmationRequest.objects.get(pk=expiring).status == "expired"
    call_command("verify_audit", stdout=io.StringIO())

    after = scrape(live_gateway)

    def delta(name: str, **labels: str) -> float:
        return after.value(name, **labels) - before.value(name, **labels)

    assert delta("gateway_tool_calls_total", **bot, decision="allow") == 4
    assert delta("gateway_tool_calls_total", **bot, decision="deny") == 2
    assert delta("gateway_tool_calls_total", **bot, decision="ask") == 3
    assert delta("gateway_tool_calls_total", **bot, decision="error") == 0
    web = {"channel": "metrics-web"}
    assert delta("gateway_decision_seconds_count", **web, outcome="approved") == 1
    assert delta("gateway_decision_seconds_count", **web, outcome="rejected") == 1
    assert delta("gateway_decision_seconds_count", **web, outcome="expired") == 1
    assert (
        delta("gateway_decision_seconds_bucket", **web, outcome="expired", le="5.0")
        == 1
    )  # expired at ~1 s
    # (~1 s: the deadline counts from the start of the ask, the wait from the row's `created_at`, set a few
    # ms later as it is inserted, so a sweep right at the deadline measures a little under 1 s)
    assert delta("gateway_decision_seconds_sum", **web, outcome="expired") >= 0.9
    assert delta("gateway_expiries_total", by="sweep") == 1
    assert after.value("gateway_pending_requests", **web) == 0
    assert after.value("gateway_pending_oldest_age_seconds", **web) == 0
    assert delta("gateway_agent_wake_seconds_count", via="long_poll") == 1
    assert delta("gateway_agent_wake_seconds_bucket", via="long_poll", le="5.0") == 1
    hook = {"kind": "command", "event": "pre_tool_use"}
    assert (
        delta(
            "gateway_hook_errors_total", **hook, error="exception", on_error="fail_open"
        )
        == 1
    )
    assert (
        delta(
            "gateway_hook_errors_total", **hook, error="timeout", on_error="fail_closed"
        )
        == 1
    )
    # 9 calls; 3 requests created; 3 decided: each request's created and decided events are entries too.
    assert delta("gateway_audit_appends_total", record="tool_call") == 9
    assert delta("gateway_audit_appends_total", record="event") >= 6
    assert after.value("gateway_audit_verify_ok", scope="all") == 1
    assert after.value("gateway_audit_verify_last_run_timestamp_seconds", scope="all") > 0


def test_card_deliveries_failures_and_the_channel_links_show_in_the_scrape(
    live_gateway, metrics_on, fake_slack: FakeSlack, celery_worker
):
    apply_config(
        f"""
channels:
  - name: metrics-slack
    kind: slack
    bot_token: xoxb-1111-2222-metricsToken
    signing_secret: 0123456789abcdef0123456789abcdef
    channel_id: C0METRICS
    api_base_url: {fake_slack.base_url}
  - name: metrics-socket
    kind: slack
    mode: socket
    app_token: xapp-1-A0METRICS-1-0123456789abcdef
    bot_token: xoxb-1111-2222-metricsToken
    signing_secret: 0123456789abcdef0123456789abcdef
    channel_id: C0METRICS
    api_base_url: {fake_slack.base_url}
agents:
  - name: metrics-slack-bot
    hooks:
      - kind: approval_gate
        tools: ["pay__*"]
        channel: metrics-slack
        timeout_seconds: 1800
"""
    )
    agent = make_agent_client(live_gateway, "metrics-slack-bot")
    before = scrape(live_gateway)

    delivered = agent.pre_tool_use("pay__invoice", {"amount": 1}).json()[
        "confirmation_id"
    ]
    wait_until(lambda: _sent(delivered), what="the card to be posted")
    fake_slack.fail_next(
        "chat.postMessage", body={"ok": False, "error": "channel_not_found"}
    )
    refused = agent.pre_tool_use("pay__invoice", {"amount": 2}).json()[
        "confirmation_id"
    ]
    wait_until(
        lambda: ConfirmationRequest.objects.get(pk=refused).status == "rejected",
        what="the request to fail closed",
    )

    after = scrape(live_gateway)
    slack = {"channel": "metrics-slack", "operation": "post"}

    def delta(name: str, **labels: str) -> float:
        return after.value(name, **labels) - before.value(name, **labels)

    assert delta("gateway_card_deliveries_total", **slack, outcome="sent") == 1
    assert delta("gateway_card_deliveries_total", **slack, outcome="failed") == 1
    assert (
        delta("gateway_card_delivery_errors_total", **slack, error="channel_not_found")
        == 1
    )
    # The failed card rejected its request: a decision on that channel, as any other.
    assert (
        delta(
            "gateway_decision_seconds_count",
            channel="metrics-slack",
            outcome="rejected",
        )
        == 1
    )
    assert after.value("gateway_pending_requests", channel="metrics-slack") == 1
    # No channel_connections process holds the socket-mode channel's link: it is down.
    link = {"channel": "metrics-socket", "mode": "socket"}
    assert ("gateway_channel_link_up", tuple(sorted(link.items()))) in after.samples
    assert after.value("gateway_channel_link_up", **link) == 0
    assert after.value("gateway_channel_link_processes", **link) == 0


def test_every_metric_follows_the_naming_conventions(live_gateway, metrics_on):
    """Units in the names, `_total` on counters, and no label that names one request, session or call."""
    result = scrape(live_gateway)
    ours = {
        name: family
        for name, family in result.families.items()
        if name.startswith("gateway_")
    }
    assert len(ours) >= 18
    for name, family in ours.items():
        assert family.documentation, name
        if family.type == "counter":
            assert all(
                s.name.endswith(("_total", "_created")) for s in family.samples
            ), name
        if family.type == "histogram":
            assert name.endswith("_seconds"), name
        for sample in family.samples:
            assert not {
                "session",
                "session_id",
                "request_id",
                "confirmation_id",
                "tool_call_id",
            } & set(sample.labels)


def _sent(confirmation_id: str) -> bool:
    return Outbox.objects.filter(
        confirmation_id=confirmation_id, kind="card", status="sent"
    ).exists()


def test_several_processes_count_into_one_scrape(transactional_db, tmp_path):
    """Two uvicorn servers and a `verify_audit` run share PROMETHEUS_MULTIPROC_DIR: either server's
    /metrics shows what all of them counted."""
    from django.db import connection

    apply_config("agents:\n  - name: multi-bot\n    hooks: []\n")
    _, key = services.api_key_create(agent=Agent.objects.get(name="multi-bot"))
    shared = tmp_path / "prometheus"
    shared.mkdir()
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("PYTEST", "OTEL_"))},
        "DJANGO_SETTINGS_MODULE": "gateway.settings",
        "DATABASE_URL": f"postgres://postgres@127.0.0.1:5432/{connection.settings_dict['NAME']}",
        "GATEWAY_VAR_DIR": str(tmp_path / "var"),
        "GATEWAY_METRICS_TOKEN": TOKEN,
        "GATEWAY_LOG_LEVEL": "WARNING",
        "PROMETHEUS_MULTIPROC_DIR": str(shared),
    }
    servers = [_Server(env) for _ in range(2)]
    try:
        for server in servers:
            server.wait_ready()
        for server, calls in zip(servers, (3, 2)):
            for n in range(calls):
                answer = httpx.post(
                    f"{server.url}/api/v1/hooks/pre-tool-use",
                    json={"session_id": "s-multi", "tool_name": "fs__read", "tool_args": {"n": n}},
                    headers={"Authorization": f"Bearer {key}"},
                    timeout=20,
                )
                assert answer.json()["decision"] == "allow", answer.text
        verified = subprocess.run(
            [sys.executable, "manage.py", "verify_audit"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert verified.returncode == 0, verified.stderr

        for server in servers:
            response = httpx.get(f"{server.url}/metrics", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=20)
            scraped = Scrape(response.text)
            assert scraped.value("gateway_tool_calls_total", agent="multi-bot", decision="allow") == 5
            assert scraped.value("gateway_audit_appends_total", record="tool_call") == 5
            assert scraped.value("gateway_audit_verify_ok", scope="all") == 1
        assert len(list(shared.glob("*.db"))) >= 3  # a file per process that counted
    finally:
        for server in servers:
            server.stop()


class _Server:
    """`uvicorn gateway.asgi:application` in a process of its own, on a free loopback port."""

    def __init__(self, env: dict[str, str]) -> None:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "uvicorn", "gateway.asgi:application", "--host", "127.0.0.1",
             "--port", str(self.port), "--lifespan", "off", "--log-level", "warning"],
            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip

    def wait_ready(self) -> None:
        def answers() -> bool:
            assert self.proc.poll() is None, self.proc.stderr.read()
            try:
                return httpx.get(f"{self.url}/healthz", timeout=2).status_code == 200
            except httpx.HTTPError:
                return False

        wait_until(answers, timeout=60, what=f"the server on port {self.port}")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def test_a_socket_mode_link_held_by_two_processes_is_up_and_counted(live_gateway, metrics_on, fake_slack: FakeSlack):
    """The real connection runner holds Slack Socket Mode (against a local fake) in two "processes"."""
    from tests.channels_ext.connections_support import (
        connection_state,
        running_connections,
    )
    from tests.fakes.slack_socket import FakeSocketMode

    app_token = "xapp-1-A111-1234567890-metricslink"
    socket_mode = FakeSocketMode(app_token).start()
    fake_slack.socket_mode = socket_mode
    apply_config(
        f"""
channels:
  - name: metrics-link
    kind: slack
    mode: socket
    app_token: {app_token}
    bot_token: xoxb-1111-2222-metricsLink
    signing_secret: 0123456789abcdef0123456789abcdef
    channel_id: C0LINK
    api_base_url: {fake_slack.base_url}
"""
    )
    link = {"channel": "metrics-link", "mode": "socket"}
    try:
        with running_connections(process="gw-a:1"), running_connections(process="gw-b:2"):
            wait_until(
                lambda: connection_state("metrics-link", "gw-a:1")
                == connection_state("metrics-link", "gw-b:2")
                == "connected",
                what="both processes to hold the link",
            )
            up = scrape(live_gateway)
        assert up.value("gateway_channel_link_up", **link) == 1
        assert up.value("gateway_channel_link_processes", **link) == 2
    finally:
        socket_mode.stop()
