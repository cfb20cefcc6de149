"""The hook contract: what a hook sees (`HookContext`), what it answers
(`HookResult`), and the base class every kind extends.

Hooks decide; they never touch the gateway's records. The services that run a
chain (`approvals.services`) record every hook's result and perform the
writes (tool-call record, confirmation request, outbox) in one transaction.
A hook that must remember something between calls (a rate-limit counter,
what was injected in a session) keeps it in the hooks' own store,
`hooks.state`.

What the core needs to know about a kind is asked of the kind, never
hard-coded by name: whether it can suspend a call for a human (`ask_spec`),
which hooks its asks are routed to (`ask_targets`), and the caps it puts on
retries (`retry_caps`).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import fnmatch
import json
from typing import Any, ClassVar, Literal, get_args

from pydantic import BaseModel

from hooks.cel import compile_expression, evaluate

EVENTS = (
    "session_start",
    "pre_turn",
    "pre_tool_use",
    "post_tool_use",
    "tool_error",
    "post_turn",
    "session_end",
)
# Deciding events stop at the first deny; observing events run every hook.
DECIDING_EVENTS = frozenset({"session_start", "pre_turn", "pre_tool_use"})

HookDecision = Literal["allow", "deny", "ask", "none"]

# Caps on a tool-error `retry`, whatever hook asked for it, unless a hook that ran
# for the error says otherwise (`Hook.retry_caps`; the tightest one wins).
DEFAULT_MAX_ATTEMPTS = 3
DEFAULT_MAX_TOTAL_SECONDS = 60.0


@dataclasses.dataclass
class HookContext:
    """What a hook can read. `tool_args` carries the rewrites of earlier hooks."""

    event: str
    agent: str
    session_id: str = ""
    user_id: str = ""
    metadata: dict[str, Any] = dataclasses.field(default_factory=dict)
    tool_name: str = ""
    tool_args: dict[str, Any] = dataclasses.field(default_factory=dict)
    tool_call_id: str = ""
    turn_id: str = ""
    agent_read_only: bool = False
    config_version: int = 0
    # post_tool_use / tool_error
    result: Any = None
    error: str = ""
    attempt: int = 1
    elapsed_seconds: float = 0.0
    now: dt.datetime | None = None  # injectable clock; None = timezone.now()
    # The call is judged, not made: an approver's edit judged again before the approval takes
    # (docs/policies.md, "Check only"). A kind with side effects only looks: a rate limit checks its
    # window without counting; `command` and `webhook` hooks are told (`check_only: true`).
    check_only: bool = False
    # values an outer level set (session → turn → tool call)
    session: dict[str, Any] = dataclasses.field(default_factory=dict)

    def cel_variables(self) -> dict[str, Any]:
        """The variables a `when` expression may use (docs/reference/config.md)."""
        return {
            "tool": self.tool_name,
            "args": self.tool_args,
            "user": self.user_id,
            "session": {"id": self.session_id, **self.session},
            "agent": self.agent,
            "metadata": self.metadata,
        }


def pre_tool_use_context(
    *, agent: str, tool_args: dict[str, Any], session: dict[str, Any], check_only: bool = False, **call: Any
) -> HookContext:
    """The context a tool call's pre-tool-use chain sees — when it is asked (`tool_call_pre`) and when
    an approver's edit of it is judged again (`check_only`). `session`: what outer levels said about
    the session (`hooks.state.session_values`); `call`: the other `HookContext` fields of the call."""
    return HookContext(
        event="pre_tool_use",
        agent=agent,
        tool_args=dict(tool_args),
        session={"user_id": "", "metadata": {}, "turn_id": "", **session},
        check_only=check_only,
        **call,
    )


def grant_label(option: dict[str, Any]) -> str:
    """How a grant's scope reads on a button and in the audit: "for this session (same arguments)".

    `option` is a gate's grant offer as stored: `{"scope": "session"|"minutes", "minutes", "args": "same"|"any"}`.
    """
    span = "for this session" if option.get("scope") == "session" else f"for {option.get('minutes')} min"
    args = "any arguments" if option.get("args") == "any" else "same arguments"
    return f"{span} ({args})"


# The JSON types (JSON Schema's names) an edited argument can be declared to take (the gate's
# `edit_types`); without a declaration an edit keeps the type of the value it replaces. `any`: any JSON.
EditType = Literal["string", "integer", "number", "boolean", "object", "array", "any"]
EDIT_TYPES: tuple[str, ...] = get_args(EditType)


@dataclasses.dataclass(frozen=True)
class AskSpec:
    """An approval gate's request to suspend the call until a human decides."""

    gate: str  # the approval_gate hook's name
    channel: str
    approvers: tuple[str, ...]
    approvals_required: int
    timeout_seconds: int | None
    on_timeout: Literal["deny", "allow"]
    allow_self_approval: bool = False
    remind_after_seconds: int | None = None
    escalate_after_seconds: int | None = None
    escalate_channel: str | None = None
    escalate_approvers: tuple[str, ...] = ()
    reason: str = ""
    # {risk: seconds}: a request of that risk escalates after these seconds instead (`escalation_seconds`).
    escalate_after_seconds_by_risk: dict[str, int] = dataclasses.field(default_factory=dict)
    # Edit, then approve: True (any top-level argument), or the editable argument paths.
    allow_edit: bool | tuple[str, ...] = False
    # {path: EditType} for editable paths whose new value may take another type than the proposed one.
    edit_types: dict[str, str] = dataclasses.field(default_factory=dict)
    # Approve for a scope: the offers, as `grant_label` reads them.
    grants: tuple[dict[str, Any], ...] = ()
    warn_before_seconds: int | None = None
    # How risky the call is: low | medium | high (hooks.risk; docs/policies.md, "Risk").
    risk: str = "medium"

    def escalation_seconds(self) -> int | None:
        """After how long a still-pending request of this call escalates (None: never): the gate's time for
        its risk, else its `escalate_after_seconds`. Read from the final spec, whose risk a policy may have
        set after the gate made it (hooks.chain), so the time always follows the risk the request carries."""
        return self.escalate_after_seconds_by_risk.get(self.risk, self.escalate_after_seconds)


_UNSET: Any = object()


@dataclasses.dataclass
class HookResult:
    """One hook's answer. `decision="none"` means no opinion."""

    decision: HookDecision = "none"
    reason: str = ""
    tool_args: dict[str, Any] | None = None  # rewritten args for later hooks and the agent
    result: Any = _UNSET  # rewritten tool result (post_tool_use)
    side_effects: list[str] = dataclasses.field(default_factory=list)
    ask: AskSpec | None = None
    ask_via: str = ""  # a policy's ask: the name of the approval_gate that should ask
    risk: str = ""  # a policy's ask: the risk its rule (or the policy) gives the call; "" = the gate's
    messages: list[dict[str, Any]] = dataclasses.field(default_factory=list)  # injected history
    action: str = ""  # tool_error: retry | recover | abort | raise
    delay_seconds: float = 0.0

    @property
    def rewrote_result(self) -> bool:
        return self.result is not _UNSET

    @classmethod
    def allow(cls, reason: str = "", **kw: Any) -> HookResult:
        return cls(decision="allow", reason=reason, **kw)

    @classmethod
    def deny(cls, reason: str, **kw: Any) -> HookResult:
        return cls(decision="deny", reason=reason, **kw)

    @classmethod
    def no_opinion(cls, **kw: Any) -> HookResult:
        return cls(decision="none", **kw)


def result_text(result: Any) -> str:
    """A tool result as the model reads it: a string as is, anything else as JSON."""
    if isinstance(result, str):
        return result
    return json.dumps(result, ensure_ascii=False, default=str)


def tool_matches(patterns: list[str] | tuple[str, ...], tool_name: str) -> bool:
    """`*` matches all; `server__*` a prefix; anything else an exact name."""
    for pattern in patterns:
        if pattern == "*" or pattern == tool_name:
            return True
        if pattern.endswith("*") and fnmatch.fnmatchcase(tool_name, pattern):
            return True
    return False


class Hook:
    """Base class for every hook kind.

    Subclasses set `kind`, `events` (the events the kind can run at; the first
    is its default) and `config_model`, and implement `run`. A kind is one
    module and one line in `hooks.registry.HOOK_KINDS`.
    """

    kind: ClassVar[str]
    events: ClassVar[tuple[str, ...]]
    config_model: ClassVar[type[BaseModel]]
    # True for a kind that reaches outside the gateway to decide (a program, a service): a replay of
    # recorded calls (docs/policies.md, "Trying a config on the past") does not call it, and takes
    # instead what the hook of its name answered when the call was recorded.
    calls_out: ClassVar[bool] = False

    def __init__(self, config: BaseModel):
        self.config = config
        self.name: str = config.name  # type: ignore[attr-defined]
        self.priority: int = config.priority  # type: ignore[attr-defined]
        self.event: str = config.event or self.events[0]  # type: ignore[attr-defined]
        self.on_error: str = config.on_error  # type: ignore[attr-defined]
        when = getattr(config, "when", None)
        self._when = compile_expression(when) if when else None

    def should_trigger(self, ctx: HookContext) -> bool:
        if ctx.event != self.event:
            return False
        tools = getattr(self.config, "tools", None) or ["*"]
        if ctx.tool_name and not tool_matches(tools, ctx.tool_name):
            return False
        if self._when is not None:
            return evaluate(self._when, ctx.cel_variables())
        return True

    def run(self, ctx: HookContext) -> HookResult:
        raise NotImplementedError

    def mask(self, args: dict[str, Any]) -> dict[str, Any]:
        """Override to mask what is stored, shown and logged (never what the agent gets)."""
        return args

    # --- what the chain runner asks of a kind ------------------------------------

    def ask_spec(self, reason: str, ctx: HookContext | None = None) -> AskSpec | None:
        """Override in a kind that can suspend a call for a human: how to ask about the call in `ctx`
        (None: as configured, with no call to judge). None: it cannot."""
        return None

    def ask_targets(self) -> frozenset[str]:
        """Names of the hooks this one routes its `ask`s to (they then run only when asked)."""
        return frozenset()

    def retry_caps(self) -> tuple[int, float] | None:
        """(max_attempts, max_total_seconds) this hook puts on a tool-error retry; None: no cap of its own."""
        return None

    @property
    def can_ask(self) -> bool:
        return type(self).ask_spec is not Hook.ask_spec
