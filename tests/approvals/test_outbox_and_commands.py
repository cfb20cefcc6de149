"""Card delivery through the outbox, the relay, the management commands, health and schema."""

from __future__ import annotations

import datetime as dt
import io

import httpx
import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from approvals.models import Agent, AgentConfigVersion, Channel, ConfirmationEvent, ConfirmationRequest, Outbox
from approvals.tasks import relay_outbox, run_timers
from tests.conftest import apply_config, decide, make_agent_client
from tests.hooks.policy_support import deliver_outbox

from tests.support import rewrite_request, wait_until

pytestmark = pytest.mark.django_db(transaction=True)




SLACK_GATE = """
channels:
  - {name: web, kind: web}
  - {name: ops, kind: slack, bot_token: xoxb-1-2-outbox, signing_secret: outbox-secret, channel_id: C0OUTBOX,
     api_base_url: "%s"}
agents:
  - name: purchasing-bot
    hooks: [{kind: approval_gate, tools: ["oa__purchase_pay"], channel: ops, approvers: [], timeout_seconds: 600}]
"""


@pytest.fixture
def slack_agent(live_gateway, fake_slack):
    """purchasing-bot, whose oa__purchase_pay is asked on Slack: a card posted and redrawn through the outbox."""
    apply_config(SLACK_GATE % fake_slack.base_url)
    client = make_agent_client(live_gateway, "purchasing-bot")
    yield client
    client.http.close()


def test_a_card_row_survives_a_worker_that_never_ran_and_the_relay_sends_it(slack_agent, fake_slack, settings):
    settings.GATEWAY_OUTBOX_RELAY_AFTER_SECONDS = 0
    slack_agent.pre_tool_use("oa__purchase_pay", {"amount": 3})  # no worker is running: the queued task is never taken
    row = Outbox.objects.get()
    assert (row.kind, row.status) == ("card", "pending")

    assert relay_outbox.apply().get() == 1

    row.refresh_from_db()
    assert row.status == "sent"
    assert row.message_ref["channel"] == "C0OUTBOX" and row.message_ref["ts"]
    assert len(fake_slack.calls("chat.postMessage")) == 1
    assert ConfirmationEvent.objects.filter(kind="card_posted").count() == 1
    assert relay_outbox.apply().get() == 0  # sent once, never again


def test_the_relay_leaves_fresh_rows_to_the_worker(slack_agent, settings):
    settings.GATEWAY_OUTBOX_RELAY_AFTER_SECONDS = 60
    slack_agent.pre_tool_use("oa__purchase_pay", {})

    assert relay_outbox.apply().get() == 0
    assert Outbox.objects.get().status == "pending"


def test_a_running_worker_delivers_the_card_and_the_redraw(slack_agent, fake_slack, celery_worker):
    confirmation_id = slack_agent.pre_tool_use("oa__purchase_pay", {}).json()["confirmation_id"]
    assert wait_until(lambda: Outbox.objects.filter(kind="card", status="sent").exists())

    assert decide(confirmation_id, "approve", actor="U0ALICE", channel="ops").applied

    assert wait_until(lambda: Outbox.objects.filter(kind="update", status="sent").exists())
    assert len(fake_slack.calls("chat.update")) == 1


def test_a_reminder_and_a_warning_on_slack_are_rows_a_worker_delivers(live_gateway, fake_slack):
    """Unlike the web page, a Slack card is redrawn (with the note) by the worker for a reminder and a warning."""
    timers = "timeout_seconds: 600, remind_after_seconds: 60, warn_before_seconds: 120"
    apply_config(SLACK_GATE.replace("timeout_seconds: 600", timers) % fake_slack.base_url)
    agent = make_agent_client(live_gateway, "purchasing-bot")
    confirmation_id = agent.pre_tool_use("oa__purchase_pay", {}).json()["confirmation_id"]
    deliver_outbox()  # the card is posted
    past = timezone.now() - dt.timedelta(seconds=1)
    ConfirmationRequest.objects.filter(pk=confirmation_id).update(remind_at=past, warn_at=past)

    assert run_timers.apply().get() | {"counters_purged": 0} == {
        "reminded": 1, "warned": 1, "escalated": 0, "counters_purged": 0
    }  # fmt: skip

    rows = Outbox.objects.filter(kind="remind").order_by("pk")
    assert sorted(row.dedupe_key for row in rows) == [f"{confirmation_id}:remind", f"{confirmation_id}:warn"]
    deliver_outbox()
    assert set(Outbox.objects.values_list("status", flat=True)) == {"sent"}
    notes = sorted(str(call.data["blocks"]) for call in fake_slack.calls("chat.update"))
    assert len(notes) == 2 and "Deadline soon" in notes[0] and "Reminder" in notes[1]
    agent.http.close()


def test_a_warning_is_never_sent_after_the_deadline(live_gateway, fake_slack):
    """A timer that runs late drops the warning; a warning queued in time but delivered after the
    deadline sends nothing either (the deadline rides on its outbox row)."""
    apply_config(SLACK_GATE.replace("timeout_seconds: 600", "timeout_seconds: 600, warn_before_seconds: 120")
                 % fake_slack.base_url)  # fmt: skip
    agent = make_agent_client(live_gateway, "purchasing-bot")
    late_timer, late_worker = (agent.pre_tool_use("oa__purchase_pay", {"n": n}).json()["confirmation_id"] for n in (1, 2))
    deliver_outbox()  # both cards are posted
    now = timezone.now()
    # Beat ran late: the warning was due, and so was the deadline (not yet swept).
    rewrite_request(late_timer, 
        warn_at=now - dt.timedelta(seconds=30), expires_at=now - dt.timedelta(seconds=1)
    )
    ConfirmationRequest.objects.filter(pk=late_worker).update(warn_at=now - dt.timedelta(seconds=1))

    assert run_timers.apply().get()["warned"] == 1
    assert not Outbox.objects.filter(dedupe_key=f"{late_timer}:warn").exists()
    assert ConfirmationRequest.objects.get(pk=late_timer).status == "pending"  # the sweep's business, not the timer's

    # The worker comes to the other warning only after its deadline.
    rewrite_request(late_worker, expires_at=timezone.now() - dt.timedelta(seconds=1))
    deliver_outbox()

    assert Outbox.objects.get(dedupe_key=f"{late_worker}:warn").status == "sent"  # done with, not retried
    assert not [call for call in fake_slack.calls("chat.update") if "Deadline soon" in str(call.data)]
    assert not ConfirmationEvent.objects.filter(kind="warned", confirmation_id=late_timer).exists()
    agent.http.close()


def test_a_web_request_escalated_to_slack_has_its_slack_card_redrawn_when_decided_on_the_page(live_gateway, fake_slack):
    """The web page needs no redraw, but once the request has a card on Slack too, that card is redrawn."""
    apply_config(
        f"""
channels:
  - {{name: web, kind: web}}
  - {{name: ops, kind: slack, bot_token: xoxb-1-2-outbox, signing_secret: outbox-secret, channel_id: C0OUTBOX,
     api_base_url: "{fake_slack.base_url}"}}
agents:
  - name: purchasing-bot
    hooks: [{{kind: approval_gate, channel: web, approvers: [alice], escalate_after_seconds: 60,
              escalate_to: {{channel: ops, approvers: []}}}}]
"""
    )
    agent = make_agent_client(live_gateway, "purchasing-bot")
    confirmation_id = agent.pre_tool_use("deploy", {}).json()["confirmation_id"]
    ConfirmationRequest.objects.filter(pk=confirmation_id).update(escalate_at=timezone.now() - dt.timedelta(seconds=1))
    assert run_timers.apply().get()["escalated"] == 1
    deliver_outbox()  # the Slack card is posted
    assert len(fake_slack.calls("chat.postMessage")) == 1

    assert decide(confirmation_id, "approve", actor="alice").applied  # on the web page

    (redraw,) = Outbox.objects.filter(kind="update", dedupe_key=f"{confirmation_id}:update:approved")
    deliver_outbox()
    redraw.refresh_from_db()
    assert redraw.status == "sent"
    assert "Approved" in str(fake_slack.calls("chat.update")[-1].data)
    agent.http.close()


def test_the_web_page_is_its_own_card_no_worker_draws_or_redraws_it(agent):
    """The web channel's card is the request's page: recorded as posted in the request's own
    transaction, and no outbox row is written to draw it, redraw it or remind on it."""
    confirmation_id = agent.pre_tool_use("oa__purchase_pay", {}).json()["confirmation_id"]
    card = Outbox.objects.get()
    assert (card.kind, card.status, card.attempts) == ("card", "sent", 0)
    assert card.message_ref["url"].endswith(f"/approvals/{confirmation_id}/")
    assert list(ConfirmationEvent.objects.values_list("kind", flat=True)) == ["created", "card_posted"]

    decide(confirmation_id, "approve")

    assert list(Outbox.objects.values_list("kind", flat=True)) == ["card"]  # no redraw row
    assert ConfirmationRequest.objects.get(pk=confirmation_id).status == "approved"


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
