"""An approver who edits the arguments: every agent-side way of asking runs the edit
(docs/approving.md) — `GatewayClient` and its `ToolGate`, which reports what ran, and
Claude Code's HTTP hook, which answers the edit as `updatedInput`."""

from __future__ import annotations

import pytest
import yaml

from approvals.models import ToolCall
from gateway_client import ToolGate
from tests.approved_call import EditingApprover
from tests.conftest import apply_config
from tests.gateway_client.conftest import coder_config, new_api_key
from tests.gateway_client.test_claude_code import HttpHook, hook_json, pre_tool_use

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def editable_key(transactional_db) -> str:
    """`coder`, whose Bash calls alice may edit before approving."""
    config = yaml.safe_load(coder_config())
    (gate,) = [h for h in config["agents"][0]["hooks"] if h["kind"] == "approval_gate"]
    gate["allow_edit"] = True
    apply_config(yaml.safe_dump(config))
    return new_api_key("coder")


def test_the_tool_gate_runs_what_the_approver_edited_and_reports_what_ran(live_gateway, editable_key, gateway_client):
    gate = ToolGate(gateway_client(live_gateway.url, editable_key, long_poll=2), session_id="s-edit")
    approver = EditingApprover({"command": "make test -k fast"})
    ran_with: list[dict] = []

    outcome = gate.call(tool_name="Bash", tool_args={"command": "make test"}, run=lambda args: ran_with.append(args) or "ok")
    approver.join()

    assert ran_with == [{"command": "make test -k fast"}]
    assert outcome.decision.tool_args == {"command": "make test -k fast"}
    assert outcome.decision.reason == "approved by web:alice with edited arguments: command"
    call = ToolCall.objects.get()
    assert (call.tool_args, call.confirmation.approved_args, call.ran_args) == (
        {"command": "make test"}, {"command": "make test -k fast"}, {"command": "make test -k fast"},
    )  # fmt: skip


def test_claude_code_gets_the_edit_as_updated_input(live_gateway, editable_key):
    hook = HttpHook(live_gateway.url, editable_key)
    approver = EditingApprover({"command": "rm -rf build/tmp"})

    answer = hook.answer(hook_json("Bash", {"command": "rm -rf build"}))
    approver.join()
    hook.http.close()

    reason = "approved by web:alice with edited arguments: command"
    assert answer == pre_tool_use("allow", reason, {"command": "rm -rf build/tmp"})
