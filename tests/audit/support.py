"""Records to audit: every kind of chained write, through the services every way in calls."""

from __future__ import annotations

from django.core.management import call_command
from django.core.management.base import CommandError

from approvals import services
from approvals.models import Agent
from tests.conftest import apply_config, decide

CONFIG = """
channels: [{name: web, kind: web}]
agents:
  - name: payer
    hooks:
      - {kind: approval_gate, name: pay-gate, tools: ["pay"], channel: web, approvers: [alice], timeout_seconds: 600}
      - {kind: policy, name: no-rm, rules: [{effect: deny, tools: ["rm"], reason: "never delete"}]}
      - {kind: retry_on_error, tools: ["flaky"], max_attempts: 3}
  - name: reader
    hooks: []
"""


def agents() -> tuple[Agent, Agent]:
    apply_config(CONFIG)
    return Agent.objects.get(name="payer"), Agent.objects.get(name="reader")


def some_history(agent: Agent, *, session: str = "s-1") -> dict[str, str]:
    """An allowed call that ran, a denied one, a gated one approved and run, one that failed and was retried."""
    ran = services.tool_call_pre(agent=agent, session_id=session, tool_name="ls", tool_args={"path": "/"}, tool_call_id=f"{session}-ls")
    services.hook_event_run(agent=agent, event="post_tool_use", session_id=session, tool_call_id=f"{session}-ls", result={"files": 3})
    denied = services.tool_call_pre(agent=agent, session_id=session, tool_name="rm", tool_args={"path": "/"}, tool_call_id=f"{session}-rm")
    gated = services.tool_call_pre(agent=agent, session_id=session, tool_name="pay", tool_args={"amount": 1e20, "n": 0.1}, tool_call_id=f"{session}-pay")
    if gated.confirmation_id:
        decide(gated.confirmation_id, "approve", actor="alice", reason="ok")
        services.hook_event_run(agent=agent, event="post_tool_use", session_id=session, tool_call_id=f"{session}-pay", result="paid")
    services.tool_call_pre(agent=agent, session_id=session, tool_name="flaky", tool_args={}, tool_call_id=f"{session}-flaky")
    services.hook_event_run(agent=agent, event="tool_error", session_id=session, tool_call_id=f"{session}-flaky", error="boom", attempt=1)
    return {"ran": ran.decision, "denied": denied.decision, "gated": gated.confirmation_id or ""}


def verify(*args: str) -> str:
    """`verify_audit`'s output; raises CommandError (the non-zero exit) with the first problem."""
    from io import StringIO

    out, err = StringIO(), StringIO()
    call_command("verify_audit", *args, stdout=out, stderr=err)
    return out.getvalue()


def verify_fails(*args: str) -> str:
    """The message `verify_audit` exits non-zero with."""
    try:
        verify(*args)
    except CommandError as exc:
        return str(exc)
    raise AssertionError("verify_audit passed, but it should have named a problem")


def verify_problems(*args: str) -> str:
    """Everything `verify_audit` names (its stderr), when it exits non-zero."""
    from io import StringIO

    out, err = StringIO(), StringIO()
    try:
        call_command("verify_audit", *args, stdout=out, stderr=err)
    except CommandError as exc:
        return err.getvalue() + str(exc)
    raise AssertionError("verify_audit passed, but it should have named a problem")
