"""Each operation of the agent API as data: the HTTP calls it needs (`Call`) and the waiting logic of
`pre_tool_use` (`PreToolUseFlow`) and of `ask` (`AskFlow`), shared by the sync and async clients.

Each operation is written once, as a generator that yields the HTTP calls it
needs and receives their parsed JSON answers (or has the error thrown in).
The sync and async clients only differ in how they perform one call.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable, Generator
from typing import Any, Literal

from gateway_client.decisions import Answer, Decision
from gateway_client.errors import GatewayUnavailable

API_PREFIX = "/api/v1"


@dataclasses.dataclass(frozen=True)
class Call:
    method: str
    path: str
    json: dict[str, Any] | None = None
    params: dict[str, Any] | None = None
    hold: float = 0  # seconds the gateway may hold this request before answering
    resend: bool = False  # safe to send again after a lost response (idempotent)


Flow = Generator[Call, Any, Any]


def single(call: Call) -> Flow:
    return (yield call)


def canonical_json(value: Any) -> str:
    """The one JSON spelling of a value (sorted keys, no spaces): for keys and fingerprints."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def drop_none(**fields: Any) -> dict[str, Any]:
    return {k: v for k, v in fields.items() if v is not None}


class PreToolUseFlow:
    """The waiting logic of `pre_tool_use`, shared by both clients."""

    def __init__(
        self,
        *,
        body: dict[str, Any],
        deadline: float | None,
        long_poll: float,
        fail_open: bool,
        base_url: str,
        on_pending: Callable[[dict[str, Any]], None] | None = None,
    ):
        self.body = body
        self.deadline = deadline
        self.long_poll = long_poll
        self.fail_open = fail_open
        self.base_url = base_url
        self.on_pending = on_pending
        self.started = time.monotonic()

    def _hold(self) -> float | None:
        """Seconds to hold the next waiting request; None once the deadline has passed."""
        if self.deadline is None:
            return self.long_poll
        remaining = self.deadline - time.monotonic()
        return min(self.long_poll, remaining) if remaining > 0 else None

    def _ask(self, hold: float) -> Call:
        # wait_seconds is an integer in the contract; a shorter hold falls through to /wait.
        body = {**self.body, "wait_seconds": int(hold)}
        return Call("POST", f"{API_PREFIX}/hooks/pre-tool-use", json=body, hold=int(hold), resend=True)

    def flow(self) -> Flow:
        answer: dict[str, Any] | None = None
        try:
            # With on_pending the first ask is not held, so the caller learns at once that a
            # human is being asked (and which request to withdraw if it is cancelled).
            answer = yield self._ask(0 if self.on_pending is not None else self._hold() or 0)
            if answer["decision"] == "pending" and self.on_pending is not None:
                self.on_pending(answer)
            while answer["decision"] == "pending":
                hold = self._hold()
                if hold is None:
                    return self._still_pending(answer)
                state = yield Call(
                    "GET",
                    f"{API_PREFIX}/confirmations/{answer['confirmation_id']}/wait",
                    params={"timeout": round(hold, 3)},
                    hold=hold,
                    resend=True,
                )
                if state.get("status") != "pending":
                    # Final: ask again under the same key for the answer the gateway derives
                    # from it (on_timeout, the reason, the arguments to run with).
                    answer = yield self._ask(0)
        except GatewayUnavailable as exc:
            return self._unreachable(exc, answer)
        return Decision.from_answer(answer, idempotency_key=self.body["idempotency_key"])

    def _still_pending(self, answer: dict[str, Any]) -> Decision:
        waited = time.monotonic() - self.started
        return Decision(
            decision="deny",
            tool_args=answer.get("tool_args") or self.body["tool_args"],
            reason=(
                f"approval is still pending after {waited:.0f}s (confirmation {answer['confirmation_id']}); "
                "ask again with the same idempotency key to pick up the decision"
            ),
            confirmation_id=answer["confirmation_id"],
            hook_decisions=list(answer.get("hook_decisions") or []),
            side_effects=list(answer.get("side_effects") or []),
            idempotency_key=self.body["idempotency_key"],
            still_pending=True,
        )

    def _unreachable(self, exc: GatewayUnavailable, answer: dict[str, Any] | None) -> Decision:
        # Fail-open covers a gateway that never answered; once a human has been asked
        # (a pending request exists), losing the gateway must not bypass them.
        if self.fail_open and answer is None:
            decision: Literal["allow", "deny"] = "allow"
            reason = (
                f"allowed without approval: the gateway at {self.base_url} could not be reached ({exc}); "
                "fail_open is on"
            )
        else:
            decision = "deny"
            reason = f"denied: the gateway at {self.base_url} could not be reached ({exc}); failing closed"
        return Decision(
            decision=decision,
            tool_args=self.body["tool_args"],
            reason=reason,
            confirmation_id=(answer or {}).get("confirmation_id"),
            idempotency_key=self.body["idempotency_key"],
            unreachable=True,
        )


class AskFlow:
    """The waiting logic of `ask`: ask (held), then long-poll the question until it is final."""

    def __init__(self, *, body: dict[str, Any], deadline: float | None, long_poll: float, base_url: str):
        self.body = body
        self.deadline = deadline
        self.long_poll = long_poll
        self.base_url = base_url

    def _hold(self) -> float | None:
        if self.deadline is None:
            return self.long_poll
        remaining = self.deadline - time.monotonic()
        return min(self.long_poll, remaining) if remaining > 0 else None

    def flow(self) -> Flow:
        question: dict[str, Any] | None = None
        try:
            hold = int(self._hold() or 0)
            # Not resent after a lost response: a second POST would ask a second question.
            question = yield Call("POST", f"{API_PREFIX}/questions", json={**self.body, "wait_seconds": hold}, hold=hold)
            while question["status"] == "pending":
                hold = self._hold()
                if hold is None:
                    answer = Answer.from_question(question)
                    return dataclasses.replace(
                        answer, reason=f"question {question['id']} is still pending at the deadline; nobody answered yet"
                    )
                question = yield Call(
                    "GET", f"{API_PREFIX}/questions/{question['id']}/wait", params={"timeout": round(hold, 3)},
                    hold=hold, resend=True,
                )  # fmt: skip
        except GatewayUnavailable as exc:
            return Answer(
                question_id=(question or {}).get("id"),
                status="unreachable",
                reason=f"the gateway at {self.base_url} could not be reached ({exc})",
            )
        return Answer.from_question(question)
