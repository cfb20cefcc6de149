"""`approval_gate`: suspend the call until a human decides (CONTRACT §3b)."""

from __future__ import annotations

from hooks.base import AskSpec, Hook, HookContext, HookResult
from hooks.registry import register
from hooks.schema import HOOK_CONFIG_MODELS


@register
class ApprovalGate(Hook):
    """Invariant: a matching call never runs before enough approvers (or the timeout policy) allow it.

    Returns `ask` with the gate's spec; the service writes the request, its card
    and the tool-call record in one transaction. What happens next is the
    request's, driven by the spec:

    - `approvals_required` N: N distinct approvers must approve; any rejection
      rejects at once; cards show the approvals so far.
    - `timeout_seconds`: the expiry sweep applies `on_timeout` after that many
      seconds; `null` never expires.
    - `remind_after_seconds`: the approvers still to answer are pinged once more
      (`approvals.timers`, run by beat).
    - `escalate_after_seconds` + `escalate_to`: a card goes to the other channel
      and its approvers, the first card is marked escalated, and both may decide.
    - `allow_self_approval: false`: an approver whose id is the call's `user_id`
      cannot approve it.

    `when` and `tools` decide where the gate applies — except for a gate named by
    a policy's `ask_via`, which runs only when that policy asks.
    """

    kind = "approval_gate"
    events = HOOK_CONFIG_MODELS["approval_gate"].EVENTS
    config_model = HOOK_CONFIG_MODELS["approval_gate"]

    def run(self, ctx: HookContext) -> HookResult:
        required = self.config.approvals_required
        needs = "approval" if required == 1 else f"{required} approvals"
        reason = f"{ctx.tool_name} needs {needs} ({self.name})"
        return HookResult(decision="ask", reason=reason, ask=self.ask_spec(reason))

    def ask_spec(self, reason: str) -> AskSpec:
        c = self.config
        escalate = c.escalate_to
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
