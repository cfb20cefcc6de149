"""Claude Code hooks: `python -m gateway_client.claude_code` run as a real subprocess, and the
`type: "http"` form (POST /api/v1/claude-code/hooks), against the real gateway."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from django.urls import reverse

from approvals.models import ConfirmationRequest, ToolCall
from gateway_client.claude_code import REQUEST_TIMEOUT
from tests.conftest import apply_config, decide
from tests.gateway_client.conftest import new_api_key
from tests.support import parked

pytestmark = pytest.mark.django_db(transaction=True)

ROOT = Path(__file__).resolve().parents[2]


def hook_json(
    tool_name: str,
    tool_input: dict,
    *,
    event: str = "PreToolUse",
    tool_use_id: str = "toolu_01",
    session_id: str = "cc-session-1",
) -> dict:
    """What Claude Code sends a hook (the fields documented for PreToolUse / PermissionRequest)."""
    data = {
        "session_id": session_id,
        "transcript_path": "/home/dev/.claude/projects/demo/cc-session-1.jsonl",
        "cwd": "/home/dev/demo",
        "permission_mode": "default",
        "hook_event_name": event,
        "tool_name": tool_name,
        "tool_input": tool_input,
    }
    if event == "PreToolUse":
        data["tool_use_id"] = tool_use_id
    return data


class CommandHook:
    """Runs the hook command the way Claude Code does: JSON on stdin, env vars, a fresh process."""

    def __init__(self, url: str, api_key: str, state_dir: Path):
        self.env = {
            **os.environ,
            "GATEWAY_URL": url,
            "GATEWAY_API_KEY": api_key,
            "GATEWAY_CLAUDE_STATE_DIR": str(state_dir),
        }

    def run(self, payload: dict | str, *flags: str, **env: str) -> subprocess.CompletedProcess:
        stdin = payload if isinstance(payload, str) else json.dumps(payload)
        return subprocess.run(
            [sys.executable, "-m", "gateway_client.claude_code", *flags],
            input=stdin,
            capture_output=True,
            text=True,
            env={**self.env, **env},
            cwd="/",  # the installed package, from any directory
            timeout=90,
        )

    def answer(self, payload: dict, *flags: str) -> dict:
        done = self.run(payload, *flags)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)


class HttpHook:
    """Claude Code's `type: "http"` hook: the same JSON POSTed with the key in a header."""

    def __init__(self, url: str, api_key: str):
        self.http = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {api_key}"}, timeout=90)

    def post(self, payload: dict, **params) -> httpx.Response:
        return self.http.post("/api/v1/claude-code/hooks", json=payload, params=params)

    def answer(self, payload: dict, **params) -> dict:
        response = self.post(payload, **params)
        assert response.status_code == 200, response.text
        return response.json()


@pytest.fixture
def command(live_gateway, coder_key, tmp_path) -> CommandHook:
    return CommandHook(live_gateway.url, coder_key, tmp_path / "state")


@pytest.fixture
def http_hook(live_gateway, coder_key):
    hook = HttpHook(live_gateway.url, coder_key)
    yield hook
    hook.http.close()


def pre_tool_use(decision: str, reason: str, updated_input: dict | None = None) -> dict:
    output = {"hookEventName": "PreToolUse", "permissionDecision": decision, "permissionDecisionReason": reason}
    if updated_input is not None:
        output["updatedInput"] = updated_input
    return {"hookSpecificOutput": output}


# --------------------------------------------------------------------------- the command


def test_the_command_allows_an_ungated_tool_without_rewriting_it(command):
    assert command.answer(hook_json("Read", {"file_path": "/home/dev/demo/README.md"})) == pre_tool_use(
        "allow", "allowed by the gateway"
    )

    call = ToolCall.objects.get()
    assert (call.session_id, call.tool_call_id, call.tool_name) == ("cc-session-1", "toolu_01", "Read")
    assert call.metadata == {"source": "claude-code", "cwd": "/home/dev/demo"}


def test_the_command_denies_with_the_hooks_reason(command):
    assert command.answer(hook_json("Write", {"file_path": "a", "content": "b"})) == pre_tool_use(
        "deny", "writes are frozen"
    )


def test_the_command_waits_for_a_human_and_passes_on_the_rejection_and_its_reason(command, approver):
    approver.decides("reject", when=parked, reason="not on main")

    answer = command.answer(hook_json("Bash", {"command": "git push"}))

    assert answer == pre_tool_use("deny", "rejected by web:alice: not on main")


def test_the_command_allows_once_a_human_approves_during_the_wait(command, approver):
    approver.decides("approve", when=parked)

    assert command.answer(hook_json("Bash", {"command": "make test"})) == pre_tool_use("allow", "approved by web:alice")


def test_the_command_returns_the_rewritten_input_as_updated_input(command):
    answer = command.answer(hook_json("WebFetch", {"url": "http://example.com", "prompt": "summarise"}))

    assert answer == pre_tool_use(
        "allow", "allowed by the gateway", {"url": "https://example.com", "prompt": "summarise"}
    )


def test_a_call_still_pending_at_max_wait_is_denied_and_an_approval_meanwhile_is_honoured_on_retry(command):
    first = command.answer(hook_json("Bash", {"command": "make deploy"}, tool_use_id="toolu_01"), "--max-wait", "1")
    confirmation = ConfirmationRequest.objects.get()
    decide(confirmation.pk, "approve", actor="alice")
    retry = command.answer(hook_json("Bash", {"command": "make deploy"}, tool_use_id="toolu_02"), "--max-wait", "1")

    decision = first["hookSpecificOutput"]
    assert decision["permissionDecision"] == "deny"
    assert "still pending" in decision["permissionDecisionReason"]
    assert str(confirmation.pk) in decision["permissionDecisionReason"]
    assert "Retry the same call" in decision["permissionDecisionReason"]
    assert retry == pre_tool_use("allow", "approved by web:alice")
    assert ConfirmationRequest.objects.count() == 1  # the retry found the same request
    assert confirmation.tool_call_id == "toolu_01"


def test_another_call_in_the_session_is_a_new_request(command):
    command.answer(hook_json("Bash", {"command": "ls"}), "--max-wait", "0")
    command.answer(hook_json("Bash", {"command": "ls -la"}), "--max-wait", "0")
    command.answer(hook_json("Bash", {"command": "ls"}, session_id="cc-session-2"), "--max-wait", "0")

    assert ConfirmationRequest.objects.count() == 3


def test_still_pending_can_hand_the_call_to_claude_codes_own_prompt(command):
    answer = command.answer(hook_json("Bash", {"command": "ls"}), "--max-wait", "0", "--on-pending", "ask")

    assert answer["hookSpecificOutput"]["permissionDecision"] == "ask"
    assert "still pending" in answer["hookSpecificOutput"]["permissionDecisionReason"]


def test_the_command_blocks_with_exit_2_when_the_gateway_is_down(command, closed_port_url):
    done = command.run(hook_json("Read", {"file_path": "a"}), "--reconnect-for", "0.5", GATEWAY_URL=closed_port_url)

    assert done.returncode == 2
    assert done.stdout == ""
    assert "could not be reached" in done.stderr and "failing closed" in done.stderr


def test_the_command_blocks_with_exit_2_when_the_key_is_refused(command):
    done = command.run(hook_json("Read", {"file_path": "a"}), GATEWAY_API_KEY="gw_revoked")

    assert done.returncode == 2
    assert "401 unauthorized" in done.stderr and "unknown or revoked API key" in done.stderr


def test_the_command_blocks_with_exit_2_without_configuration_or_with_unreadable_input(command):
    unconfigured = command.run(hook_json("Read", {}), GATEWAY_URL="")
    unreadable = command.run("not json")

    assert unconfigured.returncode == 2 and "GATEWAY_URL" in unconfigured.stderr
    assert unreadable.returncode == 2 and "cannot read the hook input" in unreadable.stderr


def test_the_command_leaves_other_events_alone_with_a_non_blocking_error(command):
    done = command.run({"hook_event_name": "PostToolUse", "session_id": "s", "tool_name": "Read"})

    assert done.returncode == 1
    assert "unsupported hook event 'PostToolUse'" in done.stderr


def test_the_command_answers_the_permission_dialog_hook(command):
    allowed = command.answer(hook_json("Read", {"file_path": "a"}, event="PermissionRequest"))
    rewritten = command.answer(hook_json("WebFetch", {"url": "http://x.org"}, event="PermissionRequest"))
    denied = command.answer(hook_json("Write", {"file_path": "a"}, event="PermissionRequest"))

    assert allowed == {"hookSpecificOutput": {"hookEventName": "PermissionRequest", "decision": {"behavior": "allow"}}}
    assert rewritten["hookSpecificOutput"]["decision"] == {
        "behavior": "allow",
        "updatedInput": {"url": "https://x.org"},
    }
    assert denied == {
        "hookSpecificOutput": {
            "hookEventName": "PermissionRequest",
            "decision": {"behavior": "deny", "message": "writes are frozen"},
        }
    }


# --------------------------------------------------------------------------- the http form

SCENARIOS = {
    "allow": hook_json("Read", {"file_path": "README.md"}),
    "deny": hook_json("Write", {"file_path": "a", "content": "b"}),
    "rewrite": hook_json("WebFetch", {"url": "http://example.com"}),
    "permission-allow": hook_json("WebFetch", {"url": "http://example.com"}, event="PermissionRequest"),
    "permission-deny": hook_json("Write", {"file_path": "a"}, event="PermissionRequest"),
}


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_the_http_form_answers_exactly_like_the_command(command, http_hook, scenario):
    payload = SCENARIOS[scenario]

    assert http_hook.answer(payload) == command.answer(payload)


def test_the_http_form_waits_for_a_human_and_passes_on_the_approval(http_hook, approver):
    approver.decides("approve", when=parked)

    assert http_hook.answer(hook_json("Bash", {"command": "make test"})) == pre_tool_use("allow", "approved by web:alice")


def test_the_http_form_denies_while_pending_and_honours_an_approval_on_retry(http_hook):
    first = http_hook.answer(hook_json("Bash", {"command": "deploy"}, tool_use_id="toolu_01"), max_wait=1)
    confirmation = ConfirmationRequest.objects.get()
    decide(confirmation.pk, "approve")
    retry = http_hook.answer(hook_json("Bash", {"command": "deploy"}, tool_use_id="toolu_02"), max_wait=1)

    reason = first["hookSpecificOutput"]["permissionDecisionReason"]
    assert first["hookSpecificOutput"]["permissionDecision"] == "deny"
    assert "still pending" in reason and f"/approvals/{confirmation.pk}/" in reason
    assert retry == pre_tool_use("allow", "approved by web:alice")
    assert ConfirmationRequest.objects.count() == 1
    assert confirmation.tool_call_id == "toolu_01"


def test_the_http_form_denies_with_a_200_when_the_key_is_refused(live_gateway, coder_key):
    # Claude Code lets the call through on any non-2xx answer, so a refusal must be a deny.
    revoked = HttpHook(live_gateway.url, "gw_revoked")
    answer = revoked.answer(hook_json("Read", {"file_path": "a"}))
    revoked.http.close()
    missing = httpx.post(
        f"{live_gateway.url}/api/v1/claude-code/hooks", json=hook_json("Read", {}, event="PermissionRequest")
    )

    assert answer == pre_tool_use("deny", "approval gateway: unknown or revoked API key")
    assert missing.status_code == 200
    assert missing.json()["hookSpecificOutput"]["decision"]["behavior"] == "deny"
    assert ToolCall.objects.count() == 0


def test_the_http_form_denies_an_unreadable_hook_blocks_unreadable_input_and_refuses_what_is_not_a_hook(http_hook):
    bad_input = http_hook.answer({**hook_json("Bash", {}), "tool_input": "rm -rf /"})
    bad_wait = http_hook.answer(hook_json("Bash", {"command": "x"}), max_wait=3600)
    not_a_hook = http_hook.post({"hook_event_name": "Stop", "session_id": "s"})
    not_json = http_hook.http.post(
        "/api/v1/claude-code/hooks", content=b"<xml/>", headers={"content-type": "application/json"}
    )
    not_an_object = http_hook.http.post("/api/v1/claude-code/hooks", json=["PreToolUse"])

    assert bad_input == pre_tool_use(
        "deny", "approval gateway: cannot read the hook input: tool_input must be a JSON object"
    )
    assert bad_wait["hookSpecificOutput"]["permissionDecision"] == "deny"
    assert "max_wait must be between 0 and" in bad_wait["hookSpecificOutput"]["permissionDecisionReason"]
    assert not_a_hook.status_code == 400 and not_a_hook.json()["error"]["code"] == "unsupported_event"
    # Input the gateway cannot read: blocked whatever the event (a 4xx would let Claude Code run the call).
    for unreadable in (not_json, not_an_object):
        assert unreadable.status_code == 200
        assert (unreadable.json()["continue"], unreadable.json()["decision"]) == (False, "block")
    assert ToolCall.objects.count() == 0


# --------------------------------------------------------------------------- the shipped examples

EXAMPLES = ROOT / "examples" / "claude"


def only_hook(settings_file: str) -> dict:
    settings = json.loads((EXAMPLES / settings_file).read_text())
    [matcher] = settings["hooks"]["PreToolUse"]
    [hook] = matcher["hooks"]
    return hook


def test_the_example_command_hook_runs_as_written_and_answers_within_its_timeout(live_gateway, transactional_db):
    apply_config((EXAMPLES / "gateway.yaml").read_text())
    hook = only_hook("settings.json")
    # The command is found on the PATH, as after `pip install approval-gateway-client` (here: this venv's).
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    env = {**os.environ, "PATH": path, "GATEWAY_URL": live_gateway.url}
    env["GATEWAY_API_KEY"] = new_api_key("claude-code")
    assert hook["command"].startswith("gateway-claude-code ")
    assert "PYTHONPATH" not in hook["command"] and "GATEWAY_HOME" not in hook["command"]

    def run(tool_input: dict) -> dict:
        # Claude Code runs the command through a shell; --max-wait 0 here keeps the test short.
        done = subprocess.run(
            hook["command"] + " --max-wait 0",
            shell=True,
            input=json.dumps(hook_json("Bash", tool_input)),
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)["hookSpecificOutput"]

    listing = run({"command": "ls -la"})
    push = run({"command": "git push origin main"})

    assert listing["permissionDecision"] == "allow"
    assert push["permissionDecision"] == "deny" and "still pending" in push["permissionDecisionReason"]
    max_wait = float(re.search(r"--max-wait (\d+)", hook["command"]).group(1))
    assert max_wait + REQUEST_TIMEOUT + 5 <= hook["timeout"]  # answers before Claude Code gives up on it


def test_the_example_http_hook_points_at_this_route_and_waits_less_than_its_timeout(live_gateway, transactional_db):
    apply_config((EXAMPLES / "gateway.yaml").read_text())
    hook = only_hook("settings.http.json")
    url = urlsplit(hook["url"])
    max_wait = float(parse_qs(url.query)["max_wait"][0])
    key = new_api_key("claude-code")
    headers = {name: value.replace("$GATEWAY_API_KEY", key) for name, value in hook["headers"].items()}

    with httpx.Client(base_url=live_gateway.url, headers=headers) as http:
        edit = http.post(
            url.path,
            params={"max_wait": 0},
            json=hook_json(
                "Edit", {"file_path": "/repo/.github/workflows/ci.yml", "old_string": "a", "new_string": "b"}
            ),
        )

    assert url.path == reverse("api-claude-code-hooks")
    assert hook["allowedEnvVars"] == ["GATEWAY_API_KEY"]
    assert max_wait + 5 <= hook["timeout"]
    assert edit.json()["hookSpecificOutput"]["permissionDecision"] == "deny"
    assert ConfirmationRequest.objects.get().hook_name == "ci-config"
