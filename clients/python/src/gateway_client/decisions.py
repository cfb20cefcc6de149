"""What the gateway's answers become: `Decision` (a pre-tool-use call's final answer) and `Answer` (a
question's outcome, docs/asking.md)."""

from __future__ import annotations

import dataclasses
from typing import Any, Literal


@dataclasses.dataclass(frozen=True)
class Decision:
    """The final answer to a pre-tool-use call.

    `decision` is `allow` (run the tool with `tool_args`), `deny` (do not run
    it; `reason` says why) or `skip` (the same idempotent call already
    completed: do not run it again, use `result`).
    """

    decision: Literal["allow", "deny", "skip"]
    tool_args: dict[str, Any]
    reason: str = ""
    confirmation_id: str | None = None
    result: Any = None
    hook_decisions: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    side_effects: list[str] = dataclasses.field(default_factory=list)
    idempotency_key: str | None = None
    still_pending: bool = False  # denied because nobody decided before the client's deadline
    unreachable: bool = False  # decided here, without the gateway (fail closed, or fail open)

    @property
    def allowed(self) -> bool:
        return self.decision == "allow"

    @property
    def denied(self) -> bool:
        return self.decision == "deny"

    @property
    def skipped(self) -> bool:
        return self.decision == "skip"

    @classmethod
    def from_answer(cls, answer: dict[str, Any], *, idempotency_key: str | None) -> Decision:
        return cls(
            decision=answer["decision"],
            tool_args=answer.get("tool_args") or {},
            reason=answer.get("reason") or "",
            confirmation_id=answer.get("confirmation_id"),
            result=answer.get("result"),
            hook_decisions=list(answer.get("hook_decisions") or []),
            side_effects=list(answer.get("side_effects") or []),
            idempotency_key=idempotency_key,
        )


@dataclasses.dataclass(frozen=True)
class Answer:
    """A question's outcome (docs/asking.md): `value` is the answer, typed as the schema says."""

    question_id: str | None
    status: str  # answered | expired | cancelled | rejected | pending (still, at the deadline) | unreachable
    value: Any = None  # the answer given, or the default once expired (`defaulted`)
    defaulted: bool = False
    answered_by: str | None = None  # channel-qualified: slack:U…, feishu:ou_…, web:<user>
    answered_by_name: str | None = None
    reason: str = ""
    url: str | None = None

    @property
    def answered(self) -> bool:
        """There is a value to use: a person's answer, or the default at expiry."""
        return self.status == "answered" or (self.defaulted and self.value is not None)

    @classmethod
    def from_question(cls, question: dict[str, Any]) -> Answer:
        return cls(
            question_id=question.get("id"),
            status=question.get("status", ""),
            value=question.get("answer"),
            defaulted=bool(question.get("defaulted")),
            answered_by=question.get("answered_by"),
            answered_by_name=question.get("answered_by_name"),
            reason=question.get("reason") or "",
            url=question.get("url"),
        )
