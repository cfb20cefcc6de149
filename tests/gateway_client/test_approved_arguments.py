"""What runs is what was approved, through the agent-side client (docs/approving.md): `GatewayClient`
(which long-polls, then asks again with the same idempotency key), `ToolGate` (which runs the tool with
the answer) and the Claude Code hook command (a retried call is a repeat ask; the approved arguments are
its `updatedInput`). The arguments are the `command` hook's rewrite with the approver's edit and the
card a `redact` hook masked put back from the agent's own call (`tests.approved_call`)."""

from __future__ import annotations

import pytest

from approvals.models import ConfirmationRequest, ToolCall
from gateway_client import ToolGate
from tests.approved_call import APPROVED, PROPOSED, REASON, SHOWN, TOOL, EditingApprover, approve_with_edits, configure
from tests.gateway_client.test_claude_code import CommandHook, hook_json, pre_tool_use

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_client_answers_the_approved_arguments_after_its_long_poll(live_gateway, gateway_client):
    client = gateway_client(live_gateway.url, configure("payer"), long_poll=1)
    approver = EditingApprover()

    decision = client.pre_tool_use("s-client", TOOL, PROPOSED, on_pending=lambda answer: None)
    approver.join()

    assert (decision.decision, decision.reason, decision.tool_args) == ("allow", REASON, APPROVED)


def test_the_tool_gate_runs_the_approved_arguments_and_reports_them_masked(live_gateway, gateway_client):
    gate = ToolGate(gateway_client(live_gateway.url, configure("payer"), long_poll=1), session_id="s-gate")
    approver = EditingApprover()
    ran_with: list[dict] = []

    outcome = gate.call(tool_name=TOOL, tool_args=PROPOSED, run=lambda args: ran_with.append(args) or "paid")
    approver.join()

    assert ran_with == [APPROVED]
    assert (outcome.status, outcome.decision.reason) == ("ran", REASON)
    assert ToolCall.objects.get().ran_args == SHOWN  # what ran, as stored: the card masked


def test_claude_code_retrying_the_call_gets_the_approved_arguments_as_updated_input(
    live_gateway, transactional_db, tmp_path
):
    hook = CommandHook(live_gateway.url, configure("claude-code"), tmp_path / "state")
    call = hook_json(TOOL, PROPOSED, tool_use_id="toolu_11", session_id="cc-approved-1")

    pending = hook.answer(call, "--max-wait", "0.5")
    approve_with_edits(ConfirmationRequest.objects.get().pk)
    retried = hook.answer({**call, "tool_use_id": "toolu_12"}, "--max-wait", "5")  # Claude retries the same call

    assert pending["hookSpecificOutput"]["permissionDecision"] == "deny"
    assert retried == pre_tool_use("allow", REASON, APPROVED)
