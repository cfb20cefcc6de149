"""Card delivery through the outbox, the relay, the management commands, health and schema."""

from __future__ import annotations

import io

import httpx
import pytest
from django.core.management import CommandError, call_command

from approvals.models import Agent, AgentConfigVersion, Channel, ConfirmationEvent, Outbox
from approvals.tasks import relay_outbox
from tests.conftest import decide

from tests.support import wait_until

pytestmark = pytest.mark.django_db(transaction=True)




def test_a_card_row_survives_a_worker_that_never_ran_and_the_relay_sends_it(agent, settings):
    settings.GATEWAY_OUTBOX_RELAY_AFTER_SECONDS = 0
    agent.pre_tool_use("oa__purchase_pay", {"amount": 3})  # no worker is running: the queued task is never taken
    row = Outbox.objects.get()
    assert row.status == "pending"

    assert relay_outbox.apply().get() == 1

    row.refresh_from_db()
    assert row.status == "sent"
    assert row.message_ref["url"].endswith(f"/approvals/{row.confirmation_id}/")
    assert ConfirmationEvent.objects.filter(kind="card_posted").count() == 1
    assert relay_outbox.apply().get() == 0  # sent once, never again


def test_the_relay_leaves_fresh_rows_to_the_worker(agent, settings):
    settings.GATEWAY_OUTBOX_RELAY_AFTER_SECONDS = 60
    agent.pre_tool_use("oa__purchase_pay", {})

    assert relay_outbox.apply().get() == 0
    assert Outbox.objects.get().status == "pending"


def test_a_running_worker_delivers_the_card_and_the_redraw(agent, celery_worker):
    confirmation_id = agent.pre_tool_use("oa__purchase_pay", {}).json()["confirmation_id"]
    assert wait_until(lambda: Outbox.objects.filter(kind="card", status="sent").exists())

    decide(confirmation_id, "approve")

    assert wait_until(lambda: Outbox.objects.filter(kind="update", status="sent").exists())


def test_apply_config_is_idempotent_and_versions_hook_changes(transactional_db, tmp_path):
    path = tmp_path / "gateway.yaml"
    path.write_text(
        "channels: [{name: web, kind: web}]\n"
        "agents: [{name: bot, hooks: [{kind: approval_gate, channel: web}]}]\n"
    )
    call_command("apply_config", str(path), stdout=io.StringIO())
    call_command("apply_config", str(path), stdout=io.StringIO())
    assert AgentConfigVersion.objects.filter(agent__name="bot").count() == 1

    path.write_text(
        "channels: [{name: web, kind: web}]\n"
        "agents: [{name: bot, hooks: [{kind: approval_gate, channel: web, timeout_seconds: 60}]}]\n"
    )
    call_command("apply_config", str(path), stdout=io.StringIO())
    versions = AgentConfigVersion.objects.filter(agent__name="bot").order_by("version")
    assert [v.version for v in versions] == [1, 2]
    assert versions[1].hooks[0]["timeout_seconds"] == 60


def test_a_bad_config_file_names_each_problem_and_changes_nothing(transactional_db, tmp_path):
    good = tmp_path / "good.yaml"
    good.write_text("channels: [{name: web, kind: web}]\nagents: [{name: bot, hooks: []}]\n")
    call_command("apply_config", str(good), stdout=io.StringIO())
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "channels: [{name: web, kind: web}, {name: extra, kind: web}]\n"
        "agents:\n"
        "  - name: bot\n"
        "    hooks:\n"
        "      - {kind: approval_gate, channel: web}\n"
        "      - {kind: approval_gate, channel: web, timeout_seconds: 0}\n"
        "  - name: newbot\n"
        "    hooks: [{kind: nonsense}]\n"
    )
    stderr = io.StringIO()

    with pytest.raises(CommandError, match="nothing was changed"):
        call_command("apply_config", str(bad), stdout=io.StringIO(), stderr=stderr)

    assert "agents[0].hooks[1].timeout_seconds: must be > 0" in stderr.getvalue()
    assert "agents[1].hooks[0].kind" in stderr.getvalue()
    assert not Channel.objects.filter(name="extra").exists()
    assert not Agent.objects.filter(name="newbot").exists()
    assert AgentConfigVersion.objects.get(agent__name="bot").hooks == []


def test_create_api_key_prints_a_working_key_on_its_last_line(live_gateway, web_gate):
    out = io.StringIO()
    call_command("create_api_key", "purchasing-bot", stdout=out, stderr=io.StringIO())
    key = out.getvalue().strip().splitlines()[-1]

    response = httpx.post(
        f"{live_gateway.url}/api/v1/hooks/pre-tool-use",
        json={"session_id": "s", "tool_name": "web__search"},
        headers={"Authorization": f"Bearer {key}"},
    )

    assert response.json()["decision"] == "allow"
    assert key not in str(list(Agent.objects.get(name="purchasing-bot").api_keys.values()))  # only the hash is kept


def test_create_api_key_for_an_unknown_agent_fails_clearly(transactional_db):
    with pytest.raises(CommandError, match="no agent named 'ghost'"):
        call_command("create_api_key", "ghost", stdout=io.StringIO())


def test_health_readiness_and_the_openapi_schema(live_gateway, transactional_db):
    assert httpx.get(f"{live_gateway.url}/healthz").json() == {"status": "ok"}
    ready = httpx.get(f"{live_gateway.url}/readyz")
    assert ready.status_code == 200
    assert ready.json()["checks"] == {"database": "ok", "broker": "ok", "channel_layer": "ok"}
    schema = httpx.get(f"{live_gateway.url}/api/v1/schema/", headers={"accept": "application/json"})
    assert schema.status_code == 200
    assert "/api/v1/hooks/pre-tool-use" in schema.text
    assert httpx.get(f"{live_gateway.url}/api/v1/docs/").status_code == 200
