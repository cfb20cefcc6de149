"""Changing policies: the JSON Schema endpoint, the staff API that validates and applies an agent's
hooks, and every invalid config refused alike by apply_config, the API and the admin — with the
path of the offending key, and the old config left in force."""

from __future__ import annotations

import io
import json
import textwrap

import httpx
import pytest
import yaml
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command
from django.test import Client
from django.urls import reverse

from approvals.models import Agent, AgentConfigVersion, ToolCall
from hooks.registry import KNOWN_KINDS
from tests.hooks.policy_support import EXAMPLES

pytestmark = pytest.mark.django_db(transaction=True)

GATE = {"kind": "approval_gate", "name": "g", "channel": "web"}

# (hooks, path of the problem under `hooks`, start of its message): each invalid-config case of issue 7.
INVALID = {
    "an unknown kind": (
        [{"kind": "approval_gat", "channel": "web"}],
        "[0].kind",
        "unknown hook kind 'approval_gat'; known kinds: approval_gate, policy",
    ),
    "an unknown key": (
        [{"kind": "policy", "rulez": []}],
        "[0].rulez",
        "unknown key; did you mean 'rules'?",
    ),
    "bad CEL in a hook's when": (
        [{"kind": "policy", "when": "args.amount >"}],
        "[0].when",
        "invalid CEL expression: column 14",
    ),
    "bad CEL in a rule's when": (
        [{"kind": "policy", "rules": [{"effect": "deny", "when": "amount > 5"}]}],
        "[0].rules[0].when",
        "unknown identifier 'amount'; a `when` expression may use tool, args, user, session, agent, metadata",
    ),
    "a bad regex": (
        [{"kind": "redact", "patterns": ["\\d{4", "(unclosed"]}],
        "[0].patterns[1]",
        "is not a valid regular expression: missing ), unterminated subpattern",
    ),
    "a policy that can ask with no ask_via": (
        [GATE, {"kind": "policy", "rules": [{"effect": "ask", "tools": ["pay"]}]}],
        "[1].ask_via",
        "is required when a rule or the default can ask: name an approval_gate of this agent",
    ),
    "an ask_via naming no gate": (
        [GATE, {"kind": "policy", "default": "ask", "ask_via": "finance"}],
        "[1].ask_via",
        "no approval_gate named 'finance' in this agent; its approval gates: g",
    ),
    "duplicate names": (
        [GATE, {**GATE, "tools": ["x"]}],
        "[1].name",
        "'g' is already used by ",
    ),
    "an event the kind does not support": (
        [{"kind": "rate_limit", "event": "post_tool_use", "limit": 1, "window_seconds": 1}],
        "[0].event",
        "must be 'pre_tool_use'",
    ),
    "a timeout that is not positive": (
        [{**GATE, "timeout_seconds": 0}],
        "[0].timeout_seconds",
        "must be > 0",
    ),
    "a gate on an unknown channel": (
        [{**GATE, "channel": "nowhere"}],
        "[0].channel",
        "unknown channel 'nowhere'; known channels: web",
    ),
}
CASES = pytest.mark.parametrize(("hooks", "path", "message"), list(INVALID.values()), ids=list(INVALID))


@pytest.fixture(autouse=True)
def fast_password_hashing(settings):
    """HTTP Basic checks the password on every request; the production hasher is slow on purpose."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def olga(transactional_db) -> User:
    """Staff."""
    return User.objects.create_user("olga", password="pw-olga", is_staff=True)


@pytest.fixture
def staff(live_gateway, olga) -> httpx.Client:
    return httpx.Client(base_url=live_gateway.url, auth=("olga", "pw-olga"), timeout=30)


def hooks_url(agent_name: str = "purchasing-bot") -> str:
    return f"/api/v1/agents/{agent_name}/hooks"


def assert_old_config_in_force(agent) -> None:
    """purchasing-bot still runs version 1: finance-gate asks for oa__purchase_pay."""
    assert list(AgentConfigVersion.objects.filter(agent=agent.agent).values_list("version", flat=True)) == [1]
    body = agent.pre_tool_use("oa__purchase_pay", {"amount": 1}).json()
    assert (body["decision"], body["hook_decisions"][0]["hook"]) == ("pending", "finance-gate")


# --- the JSON Schema --------------------------------------------------------------------------------


def test_the_json_schema_is_public_and_names_every_kind(live_gateway):
    response = httpx.get(f"{live_gateway.url}/api/v1/hooks/schema")

    assert response.status_code == 200
    schema = response.json()
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["title"] == "Gateway config"
    mapping = json.dumps(schema)
    for kind in KNOWN_KINDS:
        assert f'"const": "{kind}"' in mapping or f'"enum": ["{kind}"]' in mapping


def test_the_endpoint_serves_what_manage_py_hooks_schema_prints(live_gateway):
    out = io.StringIO()
    call_command("hooks_schema", stdout=out)

    assert httpx.get(f"{live_gateway.url}/api/v1/hooks/schema").json() == json.loads(out.getvalue())


# --- applying an agent's hooks -----------------------------------------------------------------------


NEW_HOOKS = [
    {"kind": "approval_gate", "name": "big-spend", "tools": ["oa__purchase_pay"], "channel": "web", "approvers": ["bob"]},
    {"kind": "policy", "name": "no-fs", "rules": [{"effect": "deny", "tools": ["fs__*"], "reason": "no files"}]},
]


def test_staff_apply_new_hooks_as_a_new_version_that_takes_effect(agent, staff):
    response = staff.put(hooks_url(), json={"hooks": NEW_HOOKS})

    assert response.status_code == 200
    body = response.json()
    assert (body["agent"], body["version"], body["changed"]) == ("purchasing-bot", 2, True)
    assert [hook["name"] for hook in body["hooks"]] == ["big-spend", "no-fs"]
    assert body["hooks"][0]["timeout_seconds"] == 1800  # stored normalised, defaults filled in
    version = AgentConfigVersion.objects.get(agent=agent.agent, version=2)
    assert version.source == "api:olga"

    assert agent.pre_tool_use("fs__delete", {}).json()["reason"] == "no files"
    pending = agent.pre_tool_use("oa__purchase_pay", {}).json()
    call = ToolCall.objects.get(confirmation_id=pending["confirmation_id"])
    assert (call.config_version, call.decided_by_hook) == (2, "big-spend")
    assert (call.confirmation.config_version, call.confirmation.hook_name) == (2, "big-spend")


def test_applying_the_same_hooks_again_is_no_new_version(agent, staff):
    staff.put(hooks_url(), json={"hooks": NEW_HOOKS})

    again = staff.put(hooks_url(), json={"hooks": NEW_HOOKS}).json()

    assert (again["version"], again["changed"]) == (2, False)
    assert AgentConfigVersion.objects.filter(agent=agent.agent).count() == 2


def test_tool_calls_keep_naming_the_version_that_decided_them(agent, staff):
    agent.pre_tool_use("fs__delete", {})  # version 1: finance-gate asks
    staff.put(hooks_url(), json={"hooks": NEW_HOOKS})
    agent.pre_tool_use("fs__delete", {})  # version 2: no-fs denies

    calls = ToolCall.objects.order_by("created_at")
    assert [(c.config_version, c.decided_by_hook, c.decision) for c in calls] == [
        (1, "finance-gate", "pending"),
        (2, "no-fs", "deny"),
    ]


def test_staff_read_an_agents_current_hooks_and_version(agent, staff):
    body = staff.get(hooks_url()).json()

    assert (body["agent"], body["version"], body["read_only"]) == ("purchasing-bot", 1, False)
    assert body["hooks"][0]["name"] == "finance-gate"


def test_an_unknown_agent_is_not_found(agent, staff):
    response = staff.put(hooks_url("nobody"), json={"hooks": []})

    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"


def test_a_body_without_exactly_a_hooks_list_is_refused(agent, staff):
    for body in ([], {"hooks": [], "extra": 1}, {"hook": []}):
        response = staff.put(hooks_url(), json=body)
        assert response.status_code == 400
    response = staff.put(hooks_url(), json={"hooks": {"kind": "policy"}})
    assert response.json()["error"]["details"] == [{"path": "hooks", "message": "must be a list"}]
    assert_old_config_in_force(agent)


def test_an_agent_cannot_change_its_own_policy_with_its_api_key(agent):
    response = agent.http.put(hooks_url(), json={"hooks": []})

    assert response.status_code == 401
    assert agent.http.get(hooks_url()).status_code == 401
    yaml_file = {"content-type": "application/yaml"}
    validate = agent.http.post("/api/v1/config/validate", content="agents: []", headers=yaml_file)
    assert validate.status_code == 401
    assert_old_config_in_force(agent)


def test_a_signed_in_user_who_is_not_staff_is_refused(agent, live_gateway):
    User.objects.create_user("nick", password="pw-nick")
    nick = httpx.Client(base_url=live_gateway.url, auth=("nick", "pw-nick"))

    assert nick.put(hooks_url(), json={"hooks": []}).status_code == 403
    assert_old_config_in_force(agent)


def test_no_credentials_or_a_wrong_password_are_refused(agent, live_gateway, olga):
    assert httpx.put(f"{live_gateway.url}{hooks_url()}", json={"hooks": []}).status_code == 401
    wrong = httpx.put(f"{live_gateway.url}{hooks_url()}", json={"hooks": []}, auth=("olga", "nope"))
    assert wrong.status_code == 401
    assert_old_config_in_force(agent)


def test_a_staff_session_may_apply_hooks_too(agent, olga):
    client = Client(enforce_csrf_checks=False)
    client.force_login(olga)

    response = client.put(hooks_url(), data=json.dumps({"hooks": NEW_HOOKS}), content_type="application/json")

    assert response.status_code == 200
    assert response.json()["version"] == 2


# --- validating a whole file -------------------------------------------------------------------------


def test_staff_validate_a_whole_file_without_applying_it(agent, staff):
    text = textwrap.dedent(
        """
        channels: [{name: web, kind: web}]
        agents:
          - name: new-bot
            hooks: [{kind: rate_limit, limit: 5, window_seconds: 60}]
        """
    )

    response = staff.post("/api/v1/config/validate", content=text, headers={"content-type": "application/yaml"})

    assert response.status_code == 200
    assert response.json() == {"valid": True, "channels": ["web"], "agents": ["new-bot"]}
    assert not Agent.objects.filter(name="new-bot").exists()


def test_a_file_sent_as_json_is_validated_the_same(agent, staff):
    response = staff.post("/api/v1/config/validate", json={"channels": [], "agents": [{"name": "a", "hooks": []}]})

    assert response.json()["agents"] == ["a"]


@CASES
def test_validating_a_file_names_each_problem_by_its_path(agent, staff, hooks, path, message):
    text = yaml.safe_dump({"channels": [{"name": "web", "kind": "web"}], "agents": [{"name": "x", "hooks": hooks}]})

    response = staff.post("/api/v1/config/validate", content=text, headers={"content-type": "application/yaml"})

    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "invalid_config"
    assert any(p["path"] == f"agents[0].hooks{path}" and p["message"].startswith(message) for p in error["details"]), error


# --- every invalid config, refused three ways ----------------------------------------------------------


@CASES
def test_apply_config_refuses_it_naming_the_key_and_changes_nothing(agent, tmp_path, hooks, path, message):
    config = {"channels": [{"name": "web", "kind": "web"}], "agents": [{"name": "purchasing-bot", "hooks": hooks}]}
    file = tmp_path / "bad.yaml"
    file.write_text(yaml.safe_dump(config))
    err = io.StringIO()

    with pytest.raises(CommandError, match="nothing was changed"):
        call_command("apply_config", str(file), stderr=err)

    lines = err.getvalue().splitlines()
    assert any(line.startswith(f"agents[0].hooks{path}: {message}") for line in lines), lines
    assert_old_config_in_force(agent)


@CASES
def test_the_api_refuses_it_with_400_naming_the_key_and_changes_nothing(agent, staff, hooks, path, message):
    response = staff.put(hooks_url(), json={"hooks": hooks})

    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "invalid_config"
    assert error["message"].endswith("nothing was changed")
    assert any(p["path"] == f"hooks{path}" and p["message"].startswith(message) for p in error["details"]), error
    assert_old_config_in_force(agent)


@CASES
def test_the_admin_refuses_it_naming_the_key_and_changes_nothing(agent, olga, hooks, path, message):
    olga.is_superuser = True
    olga.save()
    client = Client()
    client.force_login(olga)
    data = {
        "hooks": json.dumps(hooks),
        "config_versions-TOTAL_FORMS": "0", "config_versions-INITIAL_FORMS": "0",
        "api_keys-TOTAL_FORMS": "0", "api_keys-INITIAL_FORMS": "0",
    }  # fmt: skip

    response = client.post(reverse("admin:approvals_agent_change", args=[agent.agent.pk]), data)

    assert response.status_code == 200  # the form again, with its errors
    errors = response.context["adminform"].form.errors["hooks"]
    assert any(e.startswith(f"hooks{path}: {message}") for e in errors), errors
    assert_old_config_in_force(agent)


# --- the examples ----------------------------------------------------------------------------------


def test_every_example_policy_applies_with_apply_config_and_a_second_time_changes_nothing(transactional_db):
    files = sorted(EXAMPLES.glob("*.yaml"))
    assert {f.stem for f in files} >= {
        "approval_gate", "policy", "readonly_guard", "rate_limit", "redact", "command", "webhook",
    }  # fmt: skip
    for file in files:
        out = io.StringIO()
        call_command("apply_config", str(file), stdout=out)
        assert "agents created" in out.getvalue(), file.name
    for file in files:
        out = io.StringIO()
        call_command("apply_config", str(file), stdout=out)
        assert "agents with a new hook version" not in out.getvalue(), file.name
