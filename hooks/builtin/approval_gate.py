"""`approval_gate`: suspend the call until a human decides (docs/reference/config.md)."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from django.conf import settings
from pydantic import Field, ValidationInfo, field_validator, model_validator

from hooks.base import AskSpec, EditType, Hook, HookContext, HookResult
from hooks.config import HookConfigBase, PositiveInt, Reference, Strict
from hooks.risk import Risk, RiskSetting, resolve_risk


# `group:NAME` and `person:EMAIL` approver entries (docs/approving.md, "People"); any other entry is
# a channel-native id. A malformed `group:` or `person:` entry is a mistake, not an id.
PEOPLE_ENTRY = re.compile(r"group:[-a-zA-Z0-9_]+|person:[^@\s:]+@[^@\s:]+")


def approver_entries(value: list[str]) -> list[str]:
    """A gate's (or an escalation's) `approvers`, checked: `group:` / `person:` entries well formed."""
    for number, entry in enumerate(value):
        if entry.startswith(("group:", "person:")) and not PEOPLE_ENTRY.fullmatch(entry):
            raise ValueError(f"item {number}: {entry!r} is neither group:NAME nor person:EMAIL")
        if not entry.strip() or len(entry) > 200:
            raise ValueError(f"item {number}: an approver is a non-empty id of at most 200 characters")
    return value


def _counted_approvers(approvers: list[str]) -> int | None:
    """How many approvers a list names, if it can be told from the config (no group, whose size is the directory's)."""
    return None if any(a.startswith("group:") for a in approvers) else len(approvers)


class EscalateTo(Strict):
    """Where a still-pending request goes after `escalate_after_seconds`."""

    channel: str = Field(min_length=1)
    approvers: list[str] = []

    @field_validator("approvers")
    @classmethod
    def _approver_entries(cls, value: list[str]) -> list[str]:
        return approver_entries(value)


# An argument path: keys joined by dots, e.g. `amount` or `shipping.address.city`.
ARG_PATH = r"^[^.\s][^.]*(\.[^.\s][^.]*)*$"
MAX_GRANT_MINUTES = 7 * 24 * 60


class GrantOffer(Strict):
    """A scope an approver may approve for, besides Approve once (docs/approving.md)."""

    scope: Literal["session", "minutes"] = Field(
        description="session: the rest of the agent's session; minutes: that many minutes from the approval."
    )
    minutes: int | None = Field(default=None, ge=1, le=MAX_GRANT_MINUTES, description="Required with scope: minutes.")
    args: Literal["same", "any"] = Field(
        default="same", description="same: only calls with the same arguments; any: any arguments of the same tool."
    )

    @model_validator(mode="after")
    def _minutes_with_scope(self) -> GrantOffer:
        if self.scope == "minutes" and self.minutes is None:
            raise ValueError("scope: minutes needs minutes")
        if self.scope == "session" and self.minutes is not None:
            raise ValueError("minutes is only for scope: minutes")
        return self


class ApprovalGateConfig(HookConfigBase):
    """Suspend the call until enough approvers decide in a chat channel."""

    kind: Literal["approval_gate"]
    event: Literal["pre_tool_use"] = "pre_tool_use"
    channel: str = Field(min_length=1, description="Name of a channel in this file.")
    approvers: list[str] = Field(
        default=[],
        description=(
            "Who may decide: channel-native user ids, `group:NAME` (the members of a group) and `person:EMAIL` "
            "(a person in the directory), each reached by their identities linked on the channel; empty = any member."
        ),
    )
    approvals_required: int = Field(default=1, ge=1)
    timeout_seconds: PositiveInt | None = Field(default=1800, description="null = never expires.")
    on_timeout: Literal["deny", "allow"] = "deny"
    remind_after_seconds: PositiveInt | None = None
    escalate_after_seconds: PositiveInt | None = None
    escalate_after_seconds_by_risk: dict[Risk, PositiveInt] | None = Field(
        default=None,
        description=(
            "Seconds before escalating a request of that risk, overriding escalate_after_seconds for it, e.g. "
            '{high: 30}; a risk it does not name escalates after escalate_after_seconds (or never without it). '
            'Needs escalate_to (docs/policies.md, "Risk").'
        ),
    )
    escalate_to: EscalateTo | None = Field(default=None, validate_default=True)
    allow_self_approval: bool = Field(
        default=False, description="false: the person the call is made for (its user_id) cannot approve it."
    )
    forbid_self_approval: bool | None = Field(
        default=None,
        description=(
            "The same rule said positively (true is the default): the person the call's user_id names — an id, "
            "an e-mail or a username, mapped to a person in the directory — cannot approve it on any channel. "
            "Give this or allow_self_approval, not both."
        ),
    )
    allow_edit: bool | list[Annotated[str, Field(pattern=ARG_PATH, max_length=200, min_length=1)]] = Field(
        default=False,
        description=(
            "Whether an approver may change the arguments and approve: true (any top-level argument) or a "
            "list of editable argument paths (`amount`, `shipping.city`). Masked (redacted) values are never editable."
        ),
    )
    edit_types: dict[Annotated[str, Field(pattern=ARG_PATH, max_length=200, min_length=1)], EditType] = Field(
        default={},
        description=(
            "The JSON type an edited value takes, per editable path: string, integer, number, boolean, object, "
            "array or any. Without it an edit keeps the type of the value it replaces (a number stays a number)."
        ),
    )
    grants: list[GrantOffer] = Field(
        default=[],
        max_length=4,
        description="Scopes an approver may approve for besides once: [{scope: session|minutes, minutes, args: same|any}].",
    )
    warn_before_seconds: PositiveInt | None = Field(
        default=None, description="Re-ping the approvers this many seconds before the deadline."
    )
    risk: RiskSetting = Field(
        default="medium", description='How risky the calls it asks about are (docs/policies.md, "Risk").'
    )

    @field_validator("approvers")
    @classmethod
    def _approver_entries(cls, value: list[str]) -> list[str]:
        return approver_entries(value)

    @field_validator("approvals_required")
    @classmethod
    def _at_most_the_approvers(cls, value: int, info: ValidationInfo) -> int:
        approvers = info.data.get("approvers")
        counted = _counted_approvers(approvers or [])
        if approvers and counted is not None and value > counted:
            raise ValueError(f"must be <= the number of approvers ({counted})")
        return value

    @model_validator(mode="after")
    def _one_self_approval_key(self) -> ApprovalGateConfig:
        if self.forbid_self_approval is not None:
            if "allow_self_approval" in self.model_fields_set and self.allow_self_approval == self.forbid_self_approval:
                raise ValueError("allow_self_approval and forbid_self_approval contradict each other: give one")
            self.allow_self_approval = not self.forbid_self_approval
        return self

    @field_validator("escalate_after_seconds_by_risk")
    @classmethod
    def _names_a_risk(cls, value: dict[str, int] | None) -> dict[str, int] | None:
        if value is not None and not value:
            raise ValueError("names no risk: give seconds per risk, e.g. {high: 30}, or leave it out")
        return value

    @field_validator("escalate_to")
    @classmethod
    def _with_escalate_after(cls, value: EscalateTo | None, info: ValidationInfo) -> EscalateTo | None:
        if "escalate_after_seconds" not in info.data or "escalate_after_seconds_by_risk" not in info.data:
            return value  # invalid itself, and reported there
        after, by_risk = info.data["escalate_after_seconds"], info.data["escalate_after_seconds_by_risk"]
        if value is None and after is not None:
            raise ValueError("is required when escalate_after_seconds is set")
        if value is None and by_risk:
            raise ValueError("is required when escalate_after_seconds_by_risk is set")
        if value is not None and after is None and not by_risk:
            raise ValueError("needs escalate_after_seconds or escalate_after_seconds_by_risk")
        return value

    @field_validator("allow_edit", mode="before")
    @classmethod
    def _true_false_or_paths(cls, value: Any) -> Any:
        # One clear message instead of one per member of the union.
        if isinstance(value, bool):
            return value
        if not isinstance(value, list):
            raise ValueError("must be true, false or a list of argument paths")
        for number, path in enumerate(value):
            if not isinstance(path, str) or not re.fullmatch(ARG_PATH, path) or len(path) > 200:
                raise ValueError(f"item {number}: {path!r} is not an argument path (keys joined by dots: `shipping.city`)")
        return value

    @field_validator("allow_edit", "grants")
    @classmethod
    def _one_approver_decides(cls, value, info: ValidationInfo):
        # With a quorum every approver would have to approve the same edit or scope.
        required = info.data.get("approvals_required", 1)
        if value and required != 1:
            raise ValueError(f"needs approvals_required: 1 (it is {required})")
        if isinstance(value, list) and info.field_name == "allow_edit" and len(set(value)) != len(value):
            raise ValueError("lists a path twice")
        return value

    @field_validator("edit_types")
    @classmethod
    def _of_editable_paths(cls, value: dict[str, str], info: ValidationInfo) -> dict[str, str]:
        if not value or "allow_edit" not in info.data:  # an invalid allow_edit is reported there
            return value
        allow_edit = info.data["allow_edit"]
        if allow_edit is False:
            raise ValueError("needs allow_edit (a type for an argument nobody may edit means nothing)")
        for path in value:
            if allow_edit is True and "." in path:
                raise ValueError(f"{path}: allow_edit: true makes only top-level arguments editable")
            if isinstance(allow_edit, list) and path not in allow_edit:
                raise ValueError(f"{path} is not in allow_edit ({', '.join(allow_edit)})")
        return value

    @field_validator("warn_before_seconds")
    @classmethod
    def _before_the_deadline(cls, value: int | None, info: ValidationInfo) -> int | None:
        if value is None or "timeout_seconds" not in info.data:
            return value
        timeout = info.data["timeout_seconds"]
        if timeout is None:
            raise ValueError("needs timeout_seconds (a request that never expires has no deadline to warn of)")
        if value >= timeout:
            raise ValueError(f"must be less than timeout_seconds ({timeout})")
        return value

    def deployment_problems(self) -> list[tuple[str, str]]:
        # Beat finds a due warning up to one timer interval late: a warning shorter than two intervals
        # could reach the approvers after the deadline (and is then never sent at all).
        interval = settings.GATEWAY_TIMERS_INTERVAL_SECONDS
        if self.warn_before_seconds is not None and self.warn_before_seconds < 2 * interval:
            return [(
                "warn_before_seconds",
                f"must be at least {2 * interval}: the timers that send warnings run every {interval} s "
                "(GATEWAY_TIMERS_INTERVAL_SECONDS), so a shorter warning could come after the deadline",
            )]  # fmt: skip
        return []

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
      `escalate_after_seconds_by_risk` (`{high: 30}`) overrides the time for the
      requests of a risk: the riskiest may reach more people sooner.
    - `forbid_self_approval: true` (the default; `allow_self_approval: false` says the
      same): the person the call's `user_id` names cannot approve it, under any
      identity linked to them.
    - `approvers` may name `group:NAME` and `person:EMAIL`: routed to their linked
      identities on the channel (and to anyone standing in for them) when asked.
    - `allow_edit`: an approver may change the arguments (all top-level ones, or
      the listed paths; never a masked value) and approve; the agent runs the edit,
      once the agent's pre-tool-use hooks have judged the edited call again. An
      edited value keeps the JSON type of the value it replaces, unless
      `edit_types` declares another for its path.
    - `grants`: besides Approve once, buttons that approve for the session or for
      N minutes (same arguments or any); later calls in that scope are allowed
      without asking, unless a deny rule says otherwise.
    - `warn_before_seconds`: the approvers are pinged once that long before the deadline.

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
        return HookResult(decision="ask", reason=reason, ask=self.ask_spec(reason, ctx))

    def ask_spec(self, reason: str, ctx: HookContext | None = None) -> AskSpec:
        """How this gate asks about the call in `ctx` (its risk computed over it); without a call, as configured."""
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
            escalate_after_seconds_by_risk=dict(c.escalate_after_seconds_by_risk or {}),
            escalate_channel=escalate.channel if escalate else None,
            escalate_approvers=tuple(escalate.approvers) if escalate else (),
            reason=reason,
            allow_edit=c.allow_edit if isinstance(c.allow_edit, bool) else tuple(c.allow_edit),
            edit_types=dict(c.edit_types),
            grants=tuple(offer.model_dump() for offer in c.grants),
            warn_before_seconds=c.warn_before_seconds,
            risk=resolve_risk(c.risk, ctx.cel_variables() if ctx is not None else None) or "medium",
        )
