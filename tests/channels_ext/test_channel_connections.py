"""`python manage.py channel_connections`: refused credentials, picking up config changes, /readyz, `make run`.

The refusals run the real command as a subprocess against the test database,
with slack-sdk's and lark-oapi's real clients talking to the local fakes.
"""

from __future__ import annotations

import datetime as dt
import io
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.management import call_command
from django.db import connection
from django.test import Client
from django.utils import timezone

from channels_ext.models import ChannelConnection
from tests.channels_ext.connections_support import connection_state, running_connections
from approvals.models import ConfirmationRequest, Outbox
from tests.conftest import apply_config, make_agent_client
from tests.fakes.feishu_api import FakeFeishu, unique_app_id
from tests.fakes.feishu_ws import FakeLongConnection
from tests.fakes.slack_api import FakeSlack, block_actions_payload
from tests.fakes.slack_socket import FakeSocketMode
from tests.support import wait_until

pytestmark = pytest.mark.django_db(transaction=True)

ROOT = Path(__file__).resolve().parents[2]
APP_TOKEN = "xapp-1-A111-1234567890-commandtests"
WRONG_APP_TOKEN = "xapp-1-A111-1234567890-revokedtoken"
FEISHU_SECRET = "feishu-secret-command-tests"
WRONG_FEISHU_SECRET = "feishu-secret-that-was-reset"


def slack_channel(fake: FakeSlack, *, app_token: str = APP_TOKEN, channel_id: str = "C0APPROVALS") -> str:
    return f"""
  - name: ops-slack
    kind: slack
    mode: socket
    app_token: {app_token}
    bot_token: xoxb-1111-2222-commandtests
    channel_id: {channel_id}
    api_base_url: {fake.base_url}
"""


def feishu_channel(fake: FakeFeishu, app_id: str, *, app_secret: str = FEISHU_SECRET) -> str:
    return f"""
  - name: finance-feishu
    kind: feishu
    mode: long_connection
    app_id: {app_id}
    app_secret: {app_secret}
    chat_id: oc_5ad11d72b830411d72b836c20
    api_base_url: {fake.domain}
"""


@pytest.fixture
def socket_mode(fake_slack: FakeSlack):
    fake = FakeSocketMode(APP_TOKEN).start()
    fake_slack.socket_mode = fake
    yield fake
    fake.stop()


def command_environment() -> dict[str, str]:
    """This test's database (and the test settings' Redis and broker) for a fresh process."""
    db = connection.settings_dict
    return {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "DATABASE_URL": f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}",
    }


def run_command(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """`manage.py channel_connections …` in a fresh process, on this test's database."""
    return subprocess.run(
        [sys.executable, "manage.py", "channel_connections", *args],
        cwd=ROOT,
        env=command_environment(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def readyz() -> dict:
    response = Client().get("/readyz")
    assert response.status_code == 200  # connection states never make the server unready
    return response.json()


# --------------------------------------------------------------------------- refused credentials


def test_a_refused_slack_app_token_stops_the_process_with_a_clear_message(fake_slack, socket_mode):
    apply_config("channels:" + slack_channel(fake_slack, app_token=WRONG_APP_TOKEN))

    done = run_command()

    assert done.returncode == 2, done.stderr
    assert (
        "CommandError: Slack refused the app-level token of channel 'ops-slack' (apps.connections.open: "
        "invalid_auth): the app-level token is not valid; create one under Basic Information → App-Level Tokens "
        "(scope connections:write), set it as app_token and run apply_config."
    ) in done.stderr
    assert WRONG_APP_TOKEN not in done.stdout + done.stderr
    assert socket_mode.opened == 0
    failed = readyz()["connections"]["ops-slack"]
    assert (failed["state"], failed["mode"]) == ("failed", "socket")
    assert failed["detail"].startswith("Slack refused the app-level token of channel 'ops-slack'")


def test_refused_feishu_app_credentials_stop_the_process_with_a_clear_message(fake_feishu):
    app_id = unique_app_id()
    fake_feishu.long_connection = ws = FakeLongConnection(app_id, FEISHU_SECRET).start()
    try:
        apply_config("channels:" + feishu_channel(fake_feishu, app_id, app_secret=WRONG_FEISHU_SECRET))

        done = run_command()
    finally:
        ws.stop()

    assert done.returncode == 2, done.stderr
    assert (
        f"CommandError: Feishu refused the long connection of channel 'finance-feishu' (app {app_id}): "
        "1000040346: app_secret is invalid. Check app_id and app_secret"
    ) in done.stderr
    assert WRONG_FEISHU_SECRET not in done.stdout + done.stderr
    assert ws.endpoint_calls == 1 and ws.accepted == 0
    assert readyz()["connections"]["finance-feishu"]["state"] == "failed"


def test_the_command_holds_the_connection_decides_a_click_and_stops_cleanly_on_sigterm(
    fake_slack, socket_mode, live_gateway, celery_worker
):
    apply_config(
        "channels:"
        + slack_channel(fake_slack)
        + """
agents:
  - name: purchasing-bot
    hooks:
      - {kind: approval_gate, tools: ["oa__purchase_pay"], channel: ops-slack, approvers: ["U0ALICE"]}
"""
    )
    agent = make_agent_client(live_gateway, "purchasing-bot")
    process = subprocess.Popen(
        [sys.executable, "manage.py", "channel_connections", "--heartbeat-seconds", "0.5"],
        cwd=ROOT,
        env=command_environment(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_until(lambda: connection_state("ops-slack") == "connected", what="the command to connect")
        agent.pre_tool_use("oa__purchase_pay", {"amount": 12})
        wait_until(lambda: Outbox.objects.filter(kind="card", status="sent").exists(), what="the card")
        (posted,) = fake_slack.calls("chat.postMessage")
        value = next(e["value"] for b in posted.json["blocks"] if b["type"] == "actions" for e in b["elements"])
        ts = next(iter(fake_slack.messages))[1]

        ack = socket_mode.deliver(
            block_actions_payload(value=value, user_id="U0ALICE", user_name="alice", channel_id="C0APPROVALS", message_ts=ts)
        )

        assert ack is not None and ack.seconds < 3
        assert ConfirmationRequest.objects.get().status == "approved"
        wait_until(lambda: fake_slack.calls("chat.update"), what="the worker to redraw the card")
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=20) == 0
    finally:
        if process.poll() is None:
            process.kill()
    _, stderr = process.communicate()
    assert "channel ops-slack (socket): connected — Socket Mode session open" in stderr
    assert "channel ops-slack (socket): stopped" in stderr
    assert not ChannelConnection.objects.exists()  # a clean stop leaves no row behind
    assert APP_TOKEN not in stderr


# --------------------------------------------------------------------------- which channels


def test_list_names_the_channels_that_need_a_connection(fake_slack, fake_feishu):
    apply_config(
        "channels:"
        + slack_channel(fake_slack)
        + feishu_channel(fake_feishu, unique_app_id())
        + "  - {name: web, kind: web}\n"
        + "  - {name: http-slack, kind: slack, bot_token: xoxb-1, signing_secret: s, channel_id: C1}\n"
    )

    everything, only_one = io.StringIO(), io.StringIO()
    call_command("channel_connections", "--list", stdout=everything)
    call_command("channel_connections", "--list", "--channel", "ops-slack", stdout=only_one)

    assert everything.getvalue().splitlines() == ["finance-feishu\tlong_connection", "ops-slack\tsocket"]
    assert only_one.getvalue().splitlines() == ["ops-slack\tsocket"]


def test_make_run_starts_channel_connections_only_when_a_channel_needs_it(fake_slack):
    from gateway import launcher as make_run  # what `make run` (scripts/run.py) and `approval-gateway run` run

    env = command_environment()
    apply_config("channels:\n  - {name: web, kind: web}\n")
    assert make_run.channels_needing_connections(env) == []

    apply_config("channels:" + slack_channel(fake_slack))

    assert make_run.channels_needing_connections(env) == ["ops-slack"]


def test_channels_added_changed_and_switched_to_http_by_apply_config_are_picked_up_without_a_restart(
    fake_slack, socket_mode
):
    with running_connections():
        wait_until(lambda: ChannelConnection.objects.exists() is False)
        assert socket_mode.opened == 0

        apply_config("channels:" + slack_channel(fake_slack))
        wait_until(lambda: connection_state("ops-slack") == "connected", what="the new channel's connection")
        assert (socket_mode.opened, socket_mode.connections) == (1, 1)

        apply_config("channels:" + slack_channel(fake_slack, channel_id="C0OTHER"))
        wait_until(lambda: socket_mode.opened == 2, what="a reconnection with the changed config")
        wait_until(lambda: socket_mode.connections == 1 and connection_state("ops-slack") == "connected")

        apply_config(
            "channels:\n  - {name: ops-slack, kind: slack, bot_token: xoxb-1, signing_secret: s, channel_id: C1}\n"
        )
        wait_until(lambda: socket_mode.connections == 0, what="the connection to be closed")
        wait_until(lambda: connection_state("ops-slack") is None, what="its row to go")


# --------------------------------------------------------------------------- /readyz


def test_readyz_shows_each_connection_and_says_down_when_no_process_holds_it(fake_slack, socket_mode, fake_feishu):
    app_id = unique_app_id()
    fake_feishu.long_connection = ws = FakeLongConnection(app_id, FEISHU_SECRET).start()
    try:
        apply_config("channels:" + slack_channel(fake_slack) + feishu_channel(fake_feishu, app_id))
        assert {name: s["state"] for name, s in readyz()["connections"].items()} == {
            "ops-slack": "down",
            "finance-feishu": "down",
        }

        with running_connections():
            wait_until(lambda: connection_state("ops-slack") == connection_state("finance-feishu") == "connected")
            body = readyz()

        after = readyz()
    finally:
        ws.stop()

    assert body["status"] == "ok"
    slack, feishu = body["connections"]["ops-slack"], body["connections"]["finance-feishu"]
    assert (slack["state"], slack["mode"], slack["processes"]) == ("connected", "socket", 1)
    assert slack["detail"] == "Socket Mode session open (Slack counts 1 connection(s) for this app)"
    assert (feishu["state"], feishu["mode"], feishu["processes"]) == ("connected", "long_connection", 1)
    assert after["connections"]["ops-slack"]["state"] == "down"  # a clean stop leaves no live row
    assert "channel_connections" in after["connections"]["ops-slack"]["detail"]


def test_readyz_counts_a_process_whose_heartbeat_stopped_as_down(fake_slack):
    apply_config("channels:" + slack_channel(fake_slack))
    a_minute_ago = timezone.now() - dt.timedelta(minutes=1)
    ChannelConnection.objects.create(
        channel="ops-slack",
        process="killed-host:4242",
        mode="socket",
        state="connected",
        since=a_minute_ago,
        heartbeat_at=a_minute_ago,
        heartbeat_seconds=5,
    )

    assert readyz()["connections"]["ops-slack"]["state"] == "down"
