"""How an agent's hooks compose, over the agent API: priority order, rewritten args flowing on,
the first deny ending the chain, on_error, and every decision recorded with its version."""

from __future__ import annotations

import json
import logging
import sys

import pytest

from approvals.models import ConfirmationRequest, ToolCall
from hooks.models import HookState
from tests.conftest import apply_config, make_agent_client

pytestmark = pytest.mark.django_db(transaction=True)


def command(name: str, script: str, **keys) -> str:
    """A command hook at pre_tool_use running `script` with this Python, as one YAML flow mapping."""
    fields = {"kind": "command", "name": name, "event": "pre_tool_use", "command": [sys.executable, "-c", script], **keys}
    return json.dumps(fields)


def agent_with(live_gateway, *hooks: str, name: str = "composed"):
    apply_config(
        "channels: [{name: web, kind: web}]\n"
        f"agents:\n  - name: {name}\n    hooks:\n" + "".join(f"      - {hook}\n" for hook in hooks)
    )
    return make_agent_client(live_gateway, name)


ALLOW = "import json; print(json.dumps({'decision': 'allow', 'reason': 'ok'}))"
CAP_AT_100 = (
    "import json,sys; e=json.load(sys.stdin); a=e['tool_input']; a['amount']=min(a['amount'],100); "
    "print(json.dumps({'tool_args': a, 'reason': 'capped'}))"
)
CRASH = "import sys; sys.stderr.write('kaput'); sys.exit(3)"
HANG = "import time; time.sleep(10)"


def test_hooks_run_in_priority_order_and_equal_priorities_in_file_order(live_gateway, transactional_db):
    agent = agent_with(
        live_gateway,
        '{kind: redact, name: fifth, priority: 300, keys: [password]}',
        '{kind: rate_limit, name: third, priority: 100, limit: 5, window_seconds: 60}',
        '{kind: readonly_guard, name: fourth, priority: 100}',
        '{kind: policy, name: second, priority: 10, rules: [{effect: allow, tools: ["t"], reason: fine}]}',
        '{kind: policy, name: first, priority: -5}',
    )

    body = agent.pre_tool_use("t", {}).json()

    assert [d["hook"] for d in body["hook_decisions"]] == ["first", "second", "third", "fourth", "fifth"]


def test_rewritten_args_flow_to_later_hooks_and_to_the_agent(live_gateway, transactional_db):
    agent = agent_with(
        live_gateway,
        '{kind: policy, name: limit, priority: 20, rules: [{effect: deny, tools: ["pay"], when: "args.amount > 100", reason: over 100}]}',
        command("cap", CAP_AT_100, priority=10),
    )

    body = agent.pre_tool_use("pay", {"amount": 5000, "to": "acme"}).json()

    assert body["decision"] == "allow"  # the policy saw 100, not 5000
    assert body["tool_args"] == {"amount": 100, "to": "acme"}
    assert ToolCall.objects.get().tool_args == {"amount": 100, "to": "acme"}


def test_the_first_deny_ends_the_chain(live_gateway, transactional_db):
    agent = agent_with(
        live_gateway,
        '{kind: policy, name: freeze, priority: 10, default: deny}',
        '{kind: rate_limit, name: counter, priority: 20, limit: 5, window_seconds: 60}',
        '{kind: approval_gate, name: gate, priority: 30, channel: web}',
    )

    body = agent.pre_tool_use("pay", {}).json()

    assert (body["decision"], body["reason"]) == ("deny", "no rule of freeze matched; default: deny")
    assert [d["hook"] for d in body["hook_decisions"]] == ["freeze"]
    assert not HookState.objects.exists()  # the rate limit never counted the call
    assert not ConfirmationRequest.objects.exists()  # the gate never asked


def test_a_later_deny_overrides_an_earlier_ask(live_gateway, transactional_db):
    agent = agent_with(
        live_gateway,
        '{kind: approval_gate, name: gate, priority: 10, channel: web}',
        '{kind: readonly_guard, name: guard, priority: 20}',
        name="read-only-gated",
    )
    body = agent.pre_tool_use("pay", {}, metadata={"read_only": True}).json()

    assert (body["decision"], body["confirmation_id"]) == ("deny", None)
    assert [d["decision"] for d in body["hook_decisions"]] == ["ask", "deny"]
    assert not ConfirmationRequest.objects.exists()


def test_fail_closed_turns_a_crash_into_a_deny_naming_the_hook(live_gateway, transactional_db):
    agent = agent_with(live_gateway, command("crashy", CRASH), '{kind: policy, name: later, priority: 200}')

    body = agent.pre_tool_use("pay", {}).json()

    assert (body["decision"], body["reason"]) == ("deny", "hook crashy failed: exited 3: kaput")
    assert [d["hook"] for d in body["hook_decisions"]] == ["crashy"]
    assert ToolCall.objects.get().decided_by_hook == "crashy"


def test_fail_closed_turns_a_timeout_into_a_deny_naming_the_hook(live_gateway, transactional_db):
    agent = agent_with(live_gateway, command("slow", HANG, timeout_ms=300))

    body = agent.pre_tool_use("pay", {}).json()

    assert (body["decision"], body["reason"]) == ("deny", "hook slow failed: timed out after 300 ms")


def test_fail_open_turns_a_crash_into_a_logged_no_op(live_gateway, transactional_db, caplog):
    agent = agent_with(
        live_gateway,
        command("flaky", CRASH, on_error="fail_open"),
        '{kind: policy, name: later, priority: 200, rules: [{effect: allow, tools: ["*"], reason: later says yes}]}',
    )

    with caplog.at_level(logging.WARNING, logger="hooks"):
        body = agent.pre_tool_use("pay", {}).json()

    assert (body["decision"], body["reason"]) == ("allow", "later says yes")
    assert body["side_effects"] == ["hook_error:flaky"]
    assert body["hook_decisions"][0] == {
        "hook": "flaky",
        "kind": "command",
        "decision": "none",
        "reason": "hook flaky failed: exited 3: kaput",
    }
    assert "hook flaky failed: exited 3: kaput (fail_open: ignored)" in caplog.text


def test_fail_open_turns_a_timeout_into_a_logged_no_op(live_gateway, transactional_db, caplog):
    agent = agent_with(live_gateway, command("slow", HANG, timeout_ms=300, on_error="fail_open"))

    with caplog.at_level(logging.WARNING, logger="hooks"):
        body = agent.pre_tool_use("pay", {}).json()

    assert body["decision"] == "allow"
    assert "hook slow failed: timed out after 300 ms (fail_open: ignored)" in caplog.text


def test_every_hooks_decision_is_recorded_on_the_tool_call_with_the_config_version(live_gateway, transactional_db):
    hooks = (
        '{kind: redact, name: mask, priority: 1, keys: [token]}',
        command("approve-all", ALLOW, priority=2),
        '{kind: rate_limit, name: rl, priority: 3, limit: 5, window_seconds: 60}',
        '{kind: approval_gate, name: gate, priority: 4, channel: web, tools: ["pay"]}',
        '{kind: readonly_guard, name: guard, priority: 5, tools: ["other"]}',
    )
    agent = agent_with(live_gateway, *hooks)
    agent_with(live_gateway, *hooks, '{kind: policy, name: v2-policy, priority: 0}')  # version 2

    body = agent.pre_tool_use("pay", {"token": "t"}).json()

    call = ToolCall.objects.get()
    assert call.config_version == 2
    assert (call.decision, call.decided_by_hook) == ("pending", "gate")
    assert call.hook_decisions == body["hook_decisions"]
    assert [(d["hook"], d["kind"], d["decision"]) for d in call.hook_decisions] == [
        ("v2-policy", "policy", "allow"),
        ("mask", "redact", "none"),
        ("approve-all", "command", "allow"),
        ("rl", "rate_limit", "none"),
        ("gate", "approval_gate", "ask"),
        # guard: its tools do not name "pay", so it did not run and has no entry
    ]
    confirmation = call.confirmation
    assert (confirmation.hook_name, confirmation.config_version) == ("gate", 2)
