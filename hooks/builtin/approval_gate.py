"""`approval_gate`: suspend the call until a human decides."""

from __future__ import annotations

from hooks.base import AskSpec, Hook, HookContext, HookResult
from hooks.registry import register
from hooks.schema import HOOK_CONFIG_MODELS


@register
class ApprovalGate(Hook):
    """Invariant: a matching call never runs before an approver (or the timeout policy) allows it.

    Returns `ask` with the gate's spec; the service writes the request, its card
    and the tool-call record in one transaction.
    """

    kind = "approval_gate"
    events = HOOK_CONFIG_MODELS["approval_gate"].EVENTS
    config_model = HOOK_CONFIG_MODELS["approval_gate"]

    def run(self, ctx: HookContext) -> HookResult:
        reason = f"{ctx.tool_name} needs approval ({self.name})"
        return HookResult(decision="ask", reason=reason, ask=self.ask_spec(reason))

    def ask_spec(self, reason: str) -> AskSpec:
        c = self.config
        escalate = getattr(c, "escalate_to", None)
        return AskSpec(
            gate=self.name,
            channel=c.channel,
            approvers=tuple(c.approvers),
            approvals_required=c.approvals_required,
            timeout_seconds=c.timeout_seconds,
            on_timeout=c.on_timeout,
            allow_self_approval=c.allow_self_approval,
            remind_after_seconds=c.remind_after_seconds,
            escalate_after_seconds=c.escalate_after_seconds,
            escalate_channel=escalate.channel if escalate else None,
            escalate_approvers=tuple(escalate.approvers) if escalate else (),
            reason=reason,
        )
