"""Claude Code headless (`claude -p`): `--on-pending defer` on the command hook, run as Claude Code runs
it (a fresh process, the hook JSON on stdin), with the approval given in (fake) Slack in between."""

from __future__ import annotations

import pytest

from approvals.models import ConfirmationRequest
from tests.gateway_client.test_claude_code import CommandHook, hook_json
from tests.integrations.conftest import Gateway, slack_gate

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_pending_call_is_deferred_and_the_resumed_session_gets_the_approval(gateway: Gateway, tmp_path):
    hook = CommandHook(gateway.url, gateway.configure("claude-code", [slack_gate(["Bash"])]), tmp_path / "state")
    call = hook_json("Bash", {"command": "make deploy"}, tool_use_id="toolu_07", session_id="cc-headless-1")

    deferred = hook.answer(call, "--max-wait", "0.5", "--on-pending", "defer")
    gateway.approver.approve()
    resumed = hook.answer(call, "--max-wait", "0.5", "--on-pending", "defer")  # `claude -p --resume` asks again

    confirmation = ConfirmationRequest.objects.get()
    assert deferred["hookSpecificOutput"] == {
        "hookEventName": "PreToolUse",
        "permissionDecision": "defer",
        "permissionDecisionReason": (
            f"Approval is pending in the gateway (request {confirmation.pk}); the call is deferred. "
            "Resume the session once a human has decided: claude -p --resume cc-headless-1"
        ),
    }
    assert resumed["hookSpecificOutput"]["permissionDecision"] == "allow"
    assert resumed["hookSpecificOutput"]["permissionDecisionReason"] == "approved by alice (slack:U0ALICE)"
    assert len(gateway.approver.cards()) == 1


def test_the_permission_dialog_hook_cannot_defer_and_denies_instead(quiet_gateway: Gateway, tmp_path):
    hook = CommandHook(quiet_gateway.url, quiet_gateway.configure("claude-code", [slack_gate(["Bash"])]), tmp_path)

    answer = hook.answer(
        hook_json("Bash", {"command": "ls"}, event="PermissionRequest"), "--max-wait", "0", "--on-pending", "defer"
    )

    decision = answer["hookSpecificOutput"]["decision"]
    assert decision["behavior"] == "deny"
    assert decision["message"].startswith("Approval is still pending in the gateway")
