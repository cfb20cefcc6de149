"""Digests (docs/policies.md, "Risk"; docs/slack.md, docs/feishu.md): the low-risk calls of one channel
gathered every N minutes into one message. What the config key says (`DigestConfig`), and what a digest
message shows (`DigestView`, `DigestItem`): the core draws it, each kind's `digest` module renders it.

A digest lists each call with its own Approve / Reject, and "Approve these N": a button that carries
exactly the ids the message shows, signed (`gateway_contract.signing.sign_digest_ids`), as a turn's
"Approve all" does. High-risk calls are never digested: each is posted at once.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

# What a digest may gather: never `high` (what nobody rated low enough is shown on its own, at once).
DIGESTIBLE_RISKS = ("low", "medium")
# Most calls one digest message lists (Slack: 50 blocks a message, two per call); more make more messages.
DIGEST_MAX_ITEMS = 20


class DigestConfig(BaseModel):
    """A channel's `digest:` key: which risks are gathered, and how often a digest is sent."""

    model_config = ConfigDict(extra="forbid")
    risks: list[str] = Field(
        default_factory=lambda: ["low"],
        min_length=1,
        description="the risks gathered into the digest: low and/or medium (never high)",
    )
    every_minutes: int = Field(10, ge=1, le=1440, description="how long the oldest gathered call waits at most")

    @field_validator("risks")
    @classmethod
    def _never_high(cls, risks: list[str]) -> list[str]:
        if "high" in risks:
            raise ValueError("high-risk calls are never digested: each is posted at once; use low and/or medium")
        unknown = [r for r in risks if r not in DIGESTIBLE_RISKS]
        if unknown:
            raise ValueError(f"unknown risk {unknown[0]!r}: a digest gathers low and/or medium")
        return sorted(set(risks), key=DIGESTIBLE_RISKS.index)


def digest_config(config: dict[str, Any] | None) -> DigestConfig | None:
    """A stored channel config's digest settings (validated when the config was applied); None: no digest."""
    raw = (config or {}).get("digest")
    return DigestConfig.model_validate(raw) if isinstance(raw, dict) else None


@dataclasses.dataclass(frozen=True)
class DigestItem:
    """One call a digest lists, as it is now."""

    confirmation_id: str
    agent: str
    tool_name: str
    tool_args: dict[str, Any]  # as stored (redacted)
    risk: str
    status: str
    url: str  # its web approval page
    expires_at: dt.datetime | None = None
    decided_by: str = ""
    decided_by_name: str = ""
    decision_reason: str = ""

    @property
    def is_pending(self) -> bool:
        return self.status == "pending"


@dataclasses.dataclass(frozen=True)
class DigestView:
    """Everything one digest message shows, at one moment: the calls it was sent with, in order."""

    digest_id: str
    channel: str
    items: tuple[DigestItem, ...]
    created_at: dt.datetime | None = None

    @property
    def shown_ids(self) -> tuple[str, ...]:
        """The calls this message shows: exactly those its "Approve these N" may decide."""
        return tuple(item.confirmation_id for item in self.items)

    @property
    def pending_items(self) -> tuple[DigestItem, ...]:
        return tuple(item for item in self.items if item.is_pending)

    def offered_ids(self) -> tuple[str, ...]:
        """The pending calls among those shown: what "Approve these N" offers and its button carries."""
        return tuple(item.confirmation_id for item in self.pending_items)
