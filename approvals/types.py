"""Value types the approvals services produce and their callers share.

Kept apart from the services and selectors so that any module can name them
without importing the code that makes them.
"""

from __future__ import annotations

import dataclasses
from typing import Any

# Who the gateway itself is in `decided_by` and events: the expiry sweep, a card that
# could not be delivered.
SYSTEM_ACTOR = "gateway"


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
    unchanged: list[str] = dataclasses.field(default_factory=list)

    def lines(self) -> list[str]:
        out = []
        for label, names in (
            ("channels created", self.channels_created),
            ("channels updated", self.channels_updated),
            ("agents created", self.agents_created),
            ("agents with a new hook version", self.agents_new_version),
            ("unchanged", self.unchanged),
        ):
            if names:
                out.append(f"{label}: {', '.join(names)}")
        return out or ["nothing to apply"]


@dataclasses.dataclass
class TimersRun:
    """What one run of the beat timers did."""

    reminded: int = 0
    escalated: int = 0
    counters_purged: int = 0  # expired hook state (ended rate-limit windows, stale caches) deleted
