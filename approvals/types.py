"""Value types the approvals services produce and their callers share.

Kept apart from the services and selectors so that any module can name them
without importing the code that makes them.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import Any

from django.db import models

# Who the gateway itself is in `decided_by` and events: the expiry sweep, a card that
# could not be delivered. Every other decider is channel-qualified (`slack:U…`, `web:alice`).
SYSTEM_ACTOR = "gateway"

# The side effect that marks an answer given to a repeat ask (an idempotency key seen before).
IDEMPOTENT_REPLAY = "idempotent_replay"


class Status(models.TextChoices):
    PENDING = "pending"
    APPROVED = "approved"
    REJECTED = "rejected"
    EXPIRED = "expired"
    CANCELLED = "cancelled"
    ANSWERED = "answered"  # a question's answer was given (docs/asking.md)


class RequestKind(models.TextChoices):
    CONFIRMATION = "confirmation"  # a tool call waiting for approve / reject
    QUESTION = "question"  # a question waiting for a typed answer (docs/asking.md)


class RiskLevel(models.TextChoices):
    """How risky a request's call is (hooks.risk; docs/policies.md, "Risk")."""

    LOW = "low"
    MEDIUM = "medium"
    HIGH = "high"


@dataclasses.dataclass
class PreToolUseAnswer:
    """The answer to a pre-tool-use call (docs/reference/api.md)."""

    decision: str  # allow | deny | pending | skip
    tool_args: dict[str, Any]
    reason: str = ""
    confirmation_id: str | None = None
    side_effects: list[str] = dataclasses.field(default_factory=list)
    hook_decisions: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    result: Any = None

    def as_dict(self) -> dict[str, Any]:
        data = {
            "decision": self.decision,
            "tool_args": self.tool_args,
            "reason": self.reason,
            "confirmation_id": self.confirmation_id,
            "side_effects": self.side_effects,
            "hook_decisions": self.hook_decisions,
        }
        if self.decision == "skip":
            data["result"] = self.result
        return data


@dataclasses.dataclass
class DeliveryResult:
    """What one attempt at an outbox row did."""

    sent: bool
    retry_in: float | None = None  # seconds, for a transient failure


@dataclasses.dataclass
class ApplySummary:
    """What applying a config file changed, for `apply_config` to print."""

    channels_created: list[str] = dataclasses.field(default_factory=list)
    channels_updated: list[str] = dataclasses.field(default_factory=list)
    agents_created: list[str] = dataclasses.field(default_factory=list)
    agents_new_version: list[str] = dataclasses.field(default_factory=list)
    agents_moved: list[str] = dataclasses.field(default_factory=list)  # to the team the file names
    unchanged: list[str] = dataclasses.field(default_factory=list)

    def lines(self) -> list[str]:
        out = []
        for label, names in (
            ("channels created", self.channels_created),
            ("channels updated", self.channels_updated),
            ("agents created", self.agents_created),
            ("agents with a new hook version", self.agents_new_version),
            ("agents moved to another team", self.agents_moved),
            ("unchanged", self.unchanged),
        ):
            if names:
                out.append(f"{label}: {', '.join(names)}")
        return out or ["nothing to apply"]


@dataclasses.dataclass
class TimersRun:
    """What one run of the beat timers did."""

    reminded: int = 0
    warned: int = 0  # warnings that the deadline is near (`warn_before_seconds`)
    escalated: int = 0
    counters_purged: int = 0  # expired hook state (ended rate-limit windows, stale caches) deleted


@dataclasses.dataclass(frozen=True)
class ConfirmationState:
    """One request's state as its waiting agent sees it: read from its row, or carried by the
    notification of a change (`services.records.changes_notify`), so a woken waiter need not read.

    `approved_by` is None when it was not read (the long-poll does not need it).
    """

    id: str
    agent_id: int
    status: str
    tool_name: str
    tool_args: dict[str, Any]
    reason: str
    decision_reason: str
    decided_by: str
    decided_at: dt.datetime | None
    expires_at: dt.datetime | None
    on_timeout: str
    approvals_required: int
    approved_by: tuple[str, ...] | None = None
    decided_by_name: str = ""
    arg_edits: dict[str, Any] = dataclasses.field(default_factory=dict)  # {path: value}, over the agent's args
    approved_args: dict[str, Any] | None = None  # the approved arguments as stored (redacted); None if not edited
    kind: str = "confirmation"  # or "question" (docs/asking.md)
    answer: Any = None  # a question's answer, once answered
    default_answer: Any = None  # what a question's agent gets if it expires unanswered
    risk: str = "medium"  # low | medium | high (docs/policies.md, "Risk")
    # Whether the row's `decision_mac` signs what it says (approvals.audit.decision_verifies): an agent
    # is never answered from a state that does not verify (`selectors.verified`).
    verified: bool = True

    @property
    def edited(self) -> bool:
        return bool(self.arg_edits)

    @property
    def pk(self) -> str:
        return self.id

    @property
    def is_final(self) -> bool:
        """Nothing more will change for the agent: decided — or not verifying, so answered at once as the
        gateway's rejection or cancellation (`selectors.verified`) instead of waited on."""
        return self.status != "pending" or not self.verified

    @classmethod
    def from_row(cls, row: Any, *, verified: bool, approved_by: list[str] | None = None) -> ConfirmationState:
        """The state of a `ConfirmationRequest` row; `verified`: whether its `decision_mac` signs it
        (read by `selectors.confirmation_state`)."""
        return cls(
            id=str(row.pk),
            agent_id=row.agent_id,
            status=row.status,
            tool_name=row.tool_name,
            tool_args=row.tool_args,
            reason=row.reason,
            decision_reason=row.decision_reason,
            decided_by=row.decided_by,
            decided_at=row.decided_at,
            expires_at=row.expires_at,
            on_timeout=row.on_timeout,
            approvals_required=row.approvals_required,
            approved_by=tuple(approved_by) if approved_by is not None else None,
            decided_by_name=row.decided_by_name,
            arg_edits=row.arg_edits or {},
            approved_args=row.approved_args,
            kind=row.kind,
            answer=row.answer,
            default_answer=row.default_answer,
            risk=row.risk,
            verified=verified,
        )

    @classmethod
    def from_payload(cls, data: dict[str, Any], *, verified: bool) -> ConfirmationState:
        """From the JSON a notification carries (`changes_notify`): what the MAC signs is read from what
        it signs (`signed`), so a state can verify only as a whole (`verified`: read by
        `selectors.confirmation_state_told`); the rest (who approved so far, the decider's name) from beside
        it. (A payload of an older gateway repeats the signed fields beside `signed`: `signed` wins.)"""
        signed = data.get("signed")
        # (What verified has every signed field in `signed`; what did not is read as it was ever read.)
        told = signed if verified else {**data, **signed} if isinstance(signed, dict) else data
        beside = data if verified else told
        return cls._of(
            id=str(told["id"]),
            agent_id=int(told["agent_id"]),
            status=told["status"],
            tool_name=told["tool_name"],
            tool_args=told["tool_args"],
            reason=told["reason"],
            decision_reason=told["decision_reason"],
            decided_by=told["decided_by"],
            decided_at=moment_from_iso(told["decided_at"]),
            expires_at=moment_from_iso(told["expires_at"]),
            on_timeout=told["on_timeout"],
            approvals_required=int(told["approvals_required"]),
            approved_by=tuple(beside["approved_by"]),
            decided_by_name=beside.get("decided_by_name") or "",
            arg_edits=told.get("arg_edits") or {},
            approved_args=told.get("approved_args"),
            kind=told.get("kind") or "confirmation",
            answer=told.get("answer"),
            default_answer=told.get("default_answer"),
            risk=told.get("risk") or "medium",
            verified=verified,
        )

    @classmethod
    def _of(cls, **fields: Any) -> ConfirmationState:
        """The state of every one of its fields' values, made without the frozen dataclass's `__init__`
        (one `object.__setattr__` per field): a woken waiter's state is made so, 10,000 at once."""
        if fields.keys() != _FIELDS:
            raise TypeError(f"a ConfirmationState needs all of {sorted(_FIELDS)}, not {sorted(fields)}")
        state = object.__new__(cls)
        state.__dict__.update(fields)
        return state


_FIELDS = frozenset(field.name for field in dataclasses.fields(ConfirmationState))


def moment_from_iso(value: str | None) -> dt.datetime | None:
    """A moment a notification carries (ISO 8601, or null)."""
    return dt.datetime.fromisoformat(value) if value else None
