"""`approval_gate`: suspend the call until a human decides (docs/reference/config.md)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, ValidationInfo, field_validator

from hooks.base import AskSpec, Hook, HookContext, HookResult
from hooks.config import HookConfigBase, PositiveInt, Reference, Strict


class EscalateTo(Strict):
    """Where a still-pending request goes after `escalate_after_seconds`."""

    channel: str = Field(min_length=1)
    approvers: list[str] = []


class ApprovalGateConfig(HookConfigBase):
    """Suspend the call until enough approvers decide in a chat channel."""

    kind: Literal["approval_gate"]
    event: Literal["pre_tool_use"] = "pre_tool_use"
    channel: str = Field(min_length=1, description="Name of a channel in this file.")
    approvers: list[str] = Field(default=[], description="Channel-native user ids; empty = any member.")
    approvals_required: int = Field(default=1, ge=1)
    timeout_seconds: PositiveInt | None = Field(default=1800, description="null = never expires.")
    on_timeout: Literal["deny", "allow"] = "deny"
    remind_after_seconds: PositiveInt | None = None
    escalate_after_seconds: PositiveInt | None = None
    escalate_to: EscalateTo | None = Field(default=None, validate_default=True)
    allow_self_approval: bool = Field(
        default=False, description="false: an approver whose id equals the call's user_id cannot approve it."
    )

    @field_validator("approvals_required")
    @classmethod
    def _at_most_the_approvers(cls, value: int, info: ValidationInfo) -> int:
        approvers = info.data.get("approvers")
        if approvers and value > len(approvers):
            raise ValueError(f"must be <= the number of approvers ({len(approvers)})")
        return value

    @field_validator("escalate_to")
    @classmethod
    def _with_escalate_after(cls, value: EscalateTo | None, info: ValidationInfo) -> EscalateTo | None:
        if "escalate_after_seconds" not in info.data:  # invalid itself, and reported there
            return value
        escalates = info.data["escalate_after_seconds"] is not None
        if escalates and value is None:
            raise ValueError("is required when escalate_after_seconds is set")
        if not escalates and value is not None:
            raise ValueError("needs escalate_after_seconds")
        return value

    def references(self) -> list[Reference]:
        references = [Reference("channel", "channel", self.channel)]
        if self.escalate_to is not None:
            references.append(Reference("escalate_to.channel", "channel", self.escalate_to.channel))
        return references


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
    events = ApprovalGateConfig.EVENTS
    config_model = ApprovalGateConfig
    config: ApprovalGateConfig

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
