"""The Django admin as the operator's console, through Django's test client against the
real database: finding requests, deciding them exactly once as the staff user, editing
hooks with the config validator, keys shown once, and audit rows that cannot change."""

from __future__ import annotations

import io
import threading

import httpx
import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.db import connection
from django.test import Client
from django.urls import reverse

from approvals.models import (
    Agent,
    AgentConfigVersion,
    ApiKey,
    ApproverResponse,
    Channel,
    ConfirmationEvent,
    ConfirmationRequest,
    Outbox,
    ToolCall,
)
from approvals import services
from gateway_contract import Callback
from tests.conftest import WEB_GATE_CONFIG, apply_config, decide

pytestmark = pytest.mark.django_db(transaction=True)

CHANGELIST = "/admin/approvals/confirmationrequest/"


@pytest.fixture
def olga(transactional_db) -> User:
    return User.objects.create_superuser("olga", "olga@example.com", "pw")


@pytest.fixture
def admin_client_as_olga(olga) -> Client:
    client = Client()
    client.force_login(olga)
    return client


def ask(agent, tool: str = "oa__purchase_pay", args: dict | None = None, **extra) -> ConfirmationRequest:
    body = agent.pre_tool_use(tool, args or {"amount": 1}, **extra).json()
    assert body["decision"] == "pending", body
    return ConfirmationRequest.objects.get(pk=body["confirmation_id"])


def ids_listed(response) -> set[str]:
    return {str(c.pk) for c in response.context["cl"].result_list}


def run_action(client: Client, action: str, confirmations, **extra):
    return client.post(
        CHANGELIST,
        {"action": action, "_selected_action": [str(c.pk) for c in confirmations], "index": "0", **extra},
        follow=True,
    )


# --------------------------------------------------------------------------- the list


def test_the_list_shows_status_agent_tool_age_and_channel(agent, admin_client_as_olga):
    confirmation = ask(agent)

    response = admin_client_as_olga.get(CHANGELIST)

    assert response.status_code == 200
    html = response.content.decode()
    for column in ("column-status_badge", "column-agent", "column-tool_name", "column-age", "column-channel"):
        assert column in html
    assert str(confirmation.pk)[:8] in html
    assert "purchasing-bot" in html and "oa__purchase_pay" in html


def test_the_list_filters_by_status_agent_tool_channel_and_date(agent, admin_client_as_olga):
    paid = ask(agent, "oa__purchase_pay", session_id="s-pay")
    deleted = ask(agent, "fs__delete", {"path": "/tmp/x"}, session_id="s-del")
    decide(deleted.pk, "approve", actor="alice")
    channel = Channel.objects.get(name="web")
    get = admin_client_as_olga.get

    assert ids_listed(get(CHANGELIST, {"status__exact": "approved"})) == {str(deleted.pk)}
    assert ids_listed(get(CHANGELIST, {"status__exact": "pending"})) == {str(paid.pk)}
    assert ids_listed(get(CHANGELIST, {"tool_name": "fs__delete"})) == {str(deleted.pk)}
    assert ids_listed(get(CHANGELIST, {"agent__id__exact": agent.agent.pk})) == {str(paid.pk), str(deleted.pk)}
    assert ids_listed(get(CHANGELIST, {"agent__id__exact": Agent.objects.get(name="other-bot").pk})) == set()
    assert ids_listed(get(CHANGELIST, {"channel__id__exact": channel.pk})) == {str(paid.pk), str(deleted.pk)}
    midnight = paid.created_at.replace(hour=0, minute=0, second=0, microsecond=0)
    assert ids_listed(get(CHANGELIST, {"created_at__gte": str(midnight)})) == {str(paid.pk), str(deleted.pk)}
    assert ids_listed(get(CHANGELIST, {"created_at__lt": str(midnight)})) == set()
    day = {"created_at__year": midnight.year, "created_at__month": midnight.month, "created_at__day": midnight.day}
    assert ids_listed(get(CHANGELIST, day)) == {str(paid.pk), str(deleted.pk)}


def test_search_finds_a_request_by_id_tool_session_or_user(agent, admin_client_as_olga):
    paid = ask(agent, "oa__purchase_pay", session_id="s-pay", user_id="u-anna")
    deleted = ask(agent, "fs__delete", {"path": "/x"}, session_id="s-del", user_id="u-ben")

    def search(term: str) -> set[str]:
        return ids_listed(admin_client_as_olga.get(CHANGELIST, {"q": term}))

    assert search(str(paid.pk)) == {str(paid.pk)}
    assert search("fs__delete") == {str(deleted.pk)}
    assert search("s-pay") == {str(paid.pk)}
    assert search("u-ben") == {str(deleted.pk)}
    assert search("nothing-like-this") == set()


# --------------------------------------------------------------------------- actions


def test_the_approve_action_decides_once_and_records_the_staff_user(agent, admin_client_as_olga):
    confirmation = ask(agent)

    first = run_action(admin_client_as_olga, "approve_selected", [confirmation])
    second = run_action(admin_client_as_olga, "approve_selected", [confirmation])

    assert "Approved 1 request as admin:olga." in first.content.decode()
    assert "Already approved by admin:olga." in second.content.decode()
    confirmation.refresh_from_db()
    # Channel-qualified, the name beside it: the admin and every answer say the same.
    assert (confirmation.status, confirmation.decided_by, confirmation.decided_by_name) == (
        "approved", "admin:olga", "olga"
    )  # fmt: skip
    approved = ConfirmationEvent.objects.get(confirmation=confirmation, kind="approved")
    assert (approved.actor, approved.channel) == ("admin:olga", "admin")
    assert list(ApproverResponse.objects.values_list("approver", "decision")) == [("admin:olga", "approve")]
    state = agent.wait(str(confirmation.pk), timeout=5).json()
    assert (state["decided_by"], state["decided_by_name"]) == ("admin:olga", "olga")
    listed = admin_client_as_olga.get(CHANGELIST).content.decode()
    assert "admin:olga" in listed


def test_two_operators_approving_at_once_decide_the_request_exactly_once(agent, olga):
    confirmation = ask(agent)
    User.objects.create_superuser("omar", "omar@example.com", "pw")
    clients = []
    for name in ("olga", "omar"):
        client = Client()
        client.force_login(User.objects.get(username=name))
        clients.append(client)
    start = threading.Barrier(2)

    def approve(client: Client) -> None:
        start.wait()
        try:
            run_action(client, "approve_selected", [confirmation])
        finally:
            connection.close()

    threads = [threading.Thread(target=approve, args=(c,)) for c in clients]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)

    confirmation.refresh_from_db()
    assert confirmation.status == "approved"
    assert ConfirmationEvent.objects.filter(confirmation=confirmation, kind="approved").count() == 1
    winner = ConfirmationEvent.objects.get(confirmation=confirmation, kind="approved").actor
    assert confirmation.decided_by == winner
    assert winner in {"admin:olga", "admin:omar"}


def test_the_reject_action_asks_for_a_reason_and_the_agent_receives_it(agent, admin_client_as_olga):
    confirmation = ask(agent)

    asked = run_action(admin_client_as_olga, "reject_selected", [confirmation])
    assert "Reject these pending request" in asked.content.decode()
    confirmation.refresh_from_db()
    assert confirmation.status == "pending"

    admin_client_as_olga.post(
        CHANGELIST,
        {"action": "reject_selected", "_selected_action": [str(confirmation.pk)], "apply": "yes", "reason": ""},
    )
    confirmation.refresh_from_db()
    assert confirmation.status == "pending"  # a reason is required

    done = admin_client_as_olga.post(
        CHANGELIST,
        {"action": "reject_selected", "_selected_action": [str(confirmation.pk)], "apply": "yes",
         "reason": "vendor not on the approved list"},
        follow=True,
    )  # fmt: skip

    assert "Rejected 1 request as admin:olga." in done.content.decode()
    confirmation.refresh_from_db()
    assert (confirmation.status, confirmation.decided_by) == ("rejected", "admin:olga")
    state = agent.wait(str(confirmation.pk), timeout=5).json()
    assert state["reason"] == "vendor not on the approved list"


def test_the_cancel_action_cancels_pending_requests_and_leaves_decided_ones(agent, admin_client_as_olga):
    waiting = ask(agent)
    approved = ask(agent, "fs__delete", {"path": "/x"})
    decide(approved.pk, "approve", actor="bob")

    response = admin_client_as_olga.post(
        CHANGELIST,
        {"action": "cancel_selected", "_selected_action": [str(waiting.pk), str(approved.pk)], "apply": "yes",
         "reason": "agent run aborted by ops"},
        follow=True,
    )  # fmt: skip

    html = response.content.decode()
    assert "Cancelled 1 request(s) as admin:olga." in html
    assert "1 request(s) were already decided; left unchanged." in html
    waiting.refresh_from_db()
    approved.refresh_from_db()
    assert (waiting.status, waiting.decided_by, waiting.decision_reason) == (
        "cancelled", "admin:olga", "agent run aborted by ops"
    )  # fmt: skip
    assert (approved.status, approved.decided_by) == ("approved", "web:bob")
    assert ConfirmationEvent.objects.get(confirmation=waiting, kind="cancelled").actor == "admin:olga"


def test_staff_without_the_change_permission_get_no_actions(agent, transactional_db):
    from django.contrib.auth.models import Permission

    confirmation = ask(agent)
    viewer = User.objects.create_user("vera", password="pw", is_staff=True)
    viewer.user_permissions.add(Permission.objects.get(codename="view_confirmationrequest"))
    client = Client()
    client.force_login(viewer)

    assert client.get(CHANGELIST).context["action_form"] is None
    run_action(client, "approve_selected", [confirmation])

    confirmation.refresh_from_db()
    assert confirmation.status == "pending"


# --------------------------------------------------------------------------- detail page


def test_the_detail_page_is_read_only_with_the_timeline_and_the_tool_call(agent, admin_client_as_olga):
    confirmation = ask(agent, args={"amount": 80000, "vendor": "ACME"}, user_id="u-42")
    decide(confirmation.pk, "approve", actor="alice")
    url = reverse("admin:approvals_confirmationrequest_change", args=[confirmation.pk])

    response = admin_client_as_olga.get(url)

    assert response.status_code == 200
    html = response.content.decode()
    assert 'name="_save"' not in html  # nothing to save: view only
    assert "History" in html and "agent:purchasing-bot" in html and "approved" in html
    assert "finance-gate" in html and "approval_gate" in html  # the ToolCall's hook decisions
    assert "&quot;vendor&quot;: &quot;ACME&quot;" in html
    assert reverse("approval-page", args=[confirmation.pk]) in html

    forged = admin_client_as_olga.post(url, {"status": "pending", "decided_by": "mallory"})
    assert forged.status_code == 403
    confirmation.refresh_from_db()
    assert (confirmation.status, confirmation.decided_by) == ("approved", "web:alice")


# --------------------------------------------------------------------------- audit rows


AUDIT_MODELS = [ConfirmationEvent, ApproverResponse, ToolCall, AgentConfigVersion, Outbox, ConfirmationRequest]


@pytest.mark.parametrize("model", AUDIT_MODELS, ids=lambda m: m.__name__)
def test_audit_rows_cannot_be_added_changed_or_deleted(agent, admin_client_as_olga, model):
    confirmation = ask(agent)
    decide(confirmation.pk, "approve", actor="alice")
    row = model.objects.first()
    assert row is not None
    name = f"admin:approvals_{model._meta.model_name}"
    before = model.objects.filter(pk=row.pk).values().get()

    assert admin_client_as_olga.get(reverse(f"{name}_change", args=[row.pk])).status_code == 200  # view only
    assert admin_client_as_olga.post(reverse(f"{name}_change", args=[row.pk]), {}).status_code == 403
    assert admin_client_as_olga.get(reverse(f"{name}_delete", args=[row.pk])).status_code == 403
    assert admin_client_as_olga.post(reverse(f"{name}_delete", args=[row.pk]), {"post": "yes"}).status_code == 403
    assert admin_client_as_olga.get(reverse(f"{name}_add")).status_code == 403
    listing = admin_client_as_olga.get(reverse(f"{name}_changelist")).content.decode()
    assert 'value="delete_selected"' not in listing
    assert model.objects.filter(pk=row.pk).values().get() == before


def test_tool_call_history_shows_each_hooks_decision(agent, admin_client_as_olga):
    agent.pre_tool_use("web__search", {"q": "weather"}, tool_call_id="call_ok")
    ask(agent)

    listing = admin_client_as_olga.get("/admin/approvals/toolcall/", {"decision__exact": "pending"})
    assert [c.tool_name for c in listing.context["cl"].result_list] == ["oa__purchase_pay"]
    call = ToolCall.objects.get(tool_name="oa__purchase_pay")
    html = admin_client_as_olga.get(reverse("admin:approvals_toolcall_change", args=[call.pk])).content.decode()
    assert "<td><code>finance-gate</code></td><td>approval_gate</td><td><strong>ask</strong></td>" in html


# --------------------------------------------------------------------------- agents and hooks


def agent_form(client: Client, agent_row: Agent, hooks_text: str, read_only: bool = False):
    data = {
        "hooks": hooks_text,
        "config_versions-TOTAL_FORMS": "0", "config_versions-INITIAL_FORMS": "0",
        "api_keys-TOTAL_FORMS": "0", "api_keys-INITIAL_FORMS": "0",
    }  # fmt: skip
    if read_only:
        data["read_only"] = "on"
    return client.post(reverse("admin:approvals_agent_change", args=[agent_row.pk]), data)


def test_the_hooks_editor_shows_the_current_hooks_as_yaml(agent, admin_client_as_olga):
    html = admin_client_as_olga.get(reverse("admin:approvals_agent_change", args=[agent.agent.pk])).content.decode()

    assert "- kind: approval_gate\n  name: finance-gate" in html
    assert "Hook configuration history" in html


def test_an_invalid_hook_config_is_refused_with_each_problem_and_the_old_version_stays(agent, admin_client_as_olga):
    bad = """
- kind: approval_gate
  tools: ["oa__*"]
  channel: web
- kind: approval_gate
  tools: ["fs__*"]
  channel: web
  timeout_seconds: 0
  colour: blue
- kind: approval_gate
  channel: nowhere
"""
    response = agent_form(admin_client_as_olga, agent.agent, bad)

    assert response.status_code == 200  # the form again, with its errors
    errors = response.context["adminform"].form.errors["hooks"]
    assert "hooks[1].timeout_seconds: must be > 0" in errors
    assert any(e.startswith("hooks[1].colour: unknown key") for e in errors)
    assert any(e.startswith("hooks[2].channel: unknown channel 'nowhere'") for e in errors)
    assert "hooks[1].timeout_seconds: must be &gt; 0" in response.content.decode()
    assert list(agent.agent.config_versions.values_list("version", flat=True)) == [1]
    assert agent.pre_tool_use("oa__purchase_pay", {"amount": 1}).json()["hook_decisions"][0]["hook"] == "finance-gate"


def test_broken_yaml_is_refused_with_where_it_broke(agent, admin_client_as_olga):
    response = agent_form(admin_client_as_olga, agent.agent, "- kind: approval_gate\n  tools: [oa__*\n")

    (error,) = response.context["adminform"].form.errors["hooks"]
    assert error.startswith("hooks: not valid YAML or JSON (line")
    assert agent.agent.config_versions.count() == 1


def test_a_valid_hook_change_is_a_new_config_version_that_takes_effect(agent, admin_client_as_olga):
    new = '[{"kind": "approval_gate", "name": "big-spend", "tools": ["oa__purchase_pay"], "channel": "web",' \
          ' "approvers": ["bob"], "timeout_seconds": 60}]'  # JSON is YAML too

    response = agent_form(admin_client_as_olga, agent.agent, new)

    assert response.status_code == 302
    latest = agent.agent.current_config
    assert (latest.version, latest.source) == (2, "admin:olga")
    assert latest.hooks[0]["name"] == "big-spend" and latest.hooks[0]["on_timeout"] == "deny"  # stored normalised
    body = agent.pre_tool_use("oa__purchase_pay", {"amount": 1}).json()
    assert body["hook_decisions"][0]["hook"] == "big-spend"
    assert ConfirmationRequest.objects.get(pk=body["confirmation_id"]).config_version == 2

    agent_form(admin_client_as_olga, agent.agent, new)  # saved again unchanged
    assert agent.agent.config_versions.count() == 2


def test_the_read_only_switch_is_set_from_the_form_and_from_the_list(agent, admin_client_as_olga):
    current = admin_client_as_olga.get(reverse("admin:approvals_agent_change", args=[agent.agent.pk]))
    hooks_text = current.context["adminform"].form["hooks"].value()

    agent_form(admin_client_as_olga, agent.agent, hooks_text, read_only=True)
    assert Agent.objects.get(pk=agent.agent.pk).read_only is True
    assert agent.agent.config_versions.count() == 1  # the hooks did not change

    admin_client_as_olga.post(
        "/admin/approvals/agent/", {"action": "read_only_off", "_selected_action": [agent.agent.pk], "index": "0"}
    )
    assert Agent.objects.get(pk=agent.agent.pk).read_only is False


def test_a_new_agent_is_created_with_its_first_hook_version(web_gate, admin_client_as_olga):
    response = admin_client_as_olga.post(
        reverse("admin:approvals_agent_add"),
        {"name": "support-bot", "hooks": "- {kind: approval_gate, tools: ['crm__*'], channel: web}",
         "config_versions-TOTAL_FORMS": "0", "config_versions-INITIAL_FORMS": "0",
         "api_keys-TOTAL_FORMS": "0", "api_keys-INITIAL_FORMS": "0"},
    )  # fmt: skip

    assert response.status_code == 302
    created = Agent.objects.get(name="support-bot")
    assert created.current_config.version == 1
    assert created.current_config.hooks[0]["tools"] == ["crm__*"]


# --------------------------------------------------------------------------- API keys and channels


def test_a_new_api_key_is_shown_once_works_and_only_its_hash_is_kept(live_gateway, web_gate, admin_client_as_olga):
    bot = Agent.objects.get(name="purchasing-bot")

    response = admin_client_as_olga.post(
        reverse("admin:approvals_apikey_add"), {"agent": bot.pk, "name": "laptop"}, follow=True
    )

    key = ApiKey.objects.get(name="laptop")
    (shown,) = [str(m) for m in response.context["messages"] if "New API key" in str(m)]
    raw = shown.split("<code>")[1].split("</code>")[0]
    assert raw.startswith(key.key_prefix)
    assert ApiKey.hash_key(raw) == key.key_hash
    answer = httpx.get(f"{live_gateway.url}/api/v1/confirmations/{bot.pk:032x}", headers={"Authorization": f"Bearer {raw}"})
    assert answer.status_code == 404  # signed in; the request does not exist

    for page in (reverse("admin:approvals_apikey_change", args=[key.pk]), "/admin/approvals/apikey/",
                 reverse("admin:approvals_agent_change", args=[bot.pk])):  # fmt: skip
        html = admin_client_as_olga.get(page).content.decode()
        assert raw not in html and key.key_hash not in html


def test_revoked_keys_stop_working(live_gateway, web_gate, admin_client_as_olga):
    from approvals import services

    key, raw = services.api_key_create(agent=Agent.objects.get(name="purchasing-bot"), name="old")

    admin_client_as_olga.post(
        "/admin/approvals/apikey/", {"action": "revoke_selected", "_selected_action": [key.pk], "index": "0"}
    )

    key.refresh_from_db()
    assert key.revoked_at is not None
    answer = httpx.get(f"{live_gateway.url}/api/v1/confirmations/x", headers={"Authorization": f"Bearer {raw}"})
    assert answer.status_code in (401, 403)


def test_channels_show_their_last_delivery_error_and_mask_secrets(transactional_db, admin_client_as_olga):
    apply_config(
        """
channels:
  - {name: ops-slack, kind: slack, bot_token: xoxb-1234567890-abcdefghijkl, signing_secret: 8f2b1c9d7e6a5f4b,
     channel_id: C0123456789}
"""
    )
    Channel.objects.filter(name="ops-slack").update(last_error="channel_not_found: C0123456789 is gone")

    listing = admin_client_as_olga.get("/admin/approvals/channel/").content.decode()
    detail = admin_client_as_olga.get(
        reverse("admin:approvals_channel_change", args=[Channel.objects.get(name="ops-slack").pk])
    ).content.decode()

    assert "channel_not_found: C0123456789 is gone" in listing
    for html in (listing, detail):
        assert "xoxb-1234567890-abcdefghijkl" not in html and "8f2b1c9d7e6a5f4b" not in html
        assert "••••••ijkl" in html  # enough to tell tokens apart
        assert "C0123456789" in html


# --------------------------------------------------------------------------- grants and edits


def test_grants_are_listed_and_revoked_in_the_admin_and_stop_at_once(agent, admin_client_as_olga):
    apply_config(
        WEB_GATE_CONFIG.replace(
            "timeout_seconds: 1800", "timeout_seconds: 1800\n        grants: [{scope: minutes, minutes: 15, args: any}]"
        )
    )
    confirmation = ask(agent)
    assert services.confirmation_respond(
        channel_name="web", callback=Callback(confirmation_id=str(confirmation.pk), decision="approve", actor="bob", grant=0)
    ).applied
    allowed = agent.pre_tool_use("oa__purchase_pay", {"amount": 7}).json()
    assert allowed["decision"] == "allow"

    listed = admin_client_as_olga.get("/admin/approvals/grant/").content.decode()
    assert "for 15 min (any arguments)" in listed and "web:bob" in listed and "live" in listed
    call = ToolCall.objects.get(grant__isnull=False)
    assert "for 15 min (any arguments)" in admin_client_as_olga.get(f"/admin/approvals/toolcall/{call.pk}/change/").content.decode()
    done = admin_client_as_olga.post(
        "/admin/approvals/grant/",
        {"action": "revoke_selected", "_selected_action": [str(call.grant_id)], "index": "0"},
        follow=True,
    )

    assert "Revoked 1 grant(s) as admin:olga." in done.content.decode()
    assert agent.pre_tool_use("oa__purchase_pay", {"amount": 7}).json()["decision"] == "pending"
    assert "revoked by admin:olga" in admin_client_as_olga.get("/admin/approvals/grant/").content.decode()


def test_an_edited_approval_shows_what_was_proposed_approved_and_ran(agent, admin_client_as_olga):
    apply_config(WEB_GATE_CONFIG.replace("timeout_seconds: 1800", "timeout_seconds: 1800\n        allow_edit: true"))
    confirmation = ask(agent, args={"amount": 80000}, tool_call_id="call-7")
    decide_edited = Callback(confirmation_id=str(confirmation.pk), decision="approve", actor="alice", edits={"amount": 800})
    assert services.confirmation_respond(channel_name="web", callback=decide_edited).message == "Approved with your edits."
    agent.http.post(
        "/api/v1/hooks/post-tool-use",
        json={"session_id": "s-1", "tool_call_id": "call-7", "tool_args": {"amount": 800}, "result": "paid"},
    )

    html = admin_client_as_olga.get(f"{CHANGELIST}{confirmation.pk}/change/").content.decode()

    labels = [html.index(label) for label in ("Proposed by the agent", "<strong>edited</strong> (amount)", "Ran (post-tool-use)")]
    assert labels == sorted(labels)  # proposed, approved, ran: in that order
    assert "&quot;amount&quot;: 80000" in html and "&quot;amount&quot;: 800\n" in html
    assert "web:alice" in html
    out = io.StringIO()
    call_command("describe_toolcall", "call-7", stdout=out)  # the audit's text form says the same
    text = out.getvalue()
    assert "decided        web:alice (alice)" in text and "approved       EDITED (amount)" in text
    assert text.index("Arguments proposed") < text.index("EDITED") < text.index("Ran with (post-tool-use")
