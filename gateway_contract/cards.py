"""What a card shows: a plain snapshot of one request (`CardView`), drawn by each kind's cards, and who
decided in words people read (`actor_label`)."""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import Any

from gateway_contract.registry import ACTOR_KINDS


def split_actor(actor_id: str) -> tuple[str, str]:
    """`slack:U0123` -> ("slack", "U0123"); an id without a channel prefix (`gateway`) -> ("", id)."""
    kind, sep, native = actor_id.partition(":")
    return (kind, native) if sep and kind in ACTOR_KINDS else ("", actor_id)


def actor_label(actor_id: str, name: str = "") -> str:
    """Who, readable and unambiguous: "alice (slack:U0ALICE)"; the id alone when the name adds nothing."""
    if not actor_id:
        return name
    if not name or name in (actor_id, split_actor(actor_id)[1]):
        return actor_id  # `web:alice`, `gateway`, `agent:<name>`: the id says it all
    return f"{name} ({actor_id})"


def argument_value(args: Any, path: str) -> Any:
    """The value at a dotted argument path (`shipping.city`, `items.0`) of a card's arguments; None if absent.

    What an edit form shows as an editable argument's current value (the paths are `CardView.editable_paths`).
    """
    value = args
    for key in path.split("."):
        if isinstance(value, dict):
            value = value.get(key)
        elif isinstance(value, list) and key.isdigit() and int(key) < len(value):
            value = value[int(key)]
        else:
            return None
    return value


@dataclasses.dataclass(frozen=True)
class CardItem:
    """One call on a turn's card (several calls of one agent turn, shown and decided together)."""

    confirmation_id: str
    tool_name: str
    tool_args: dict[str, Any]  # as stored (redacted); the approved arguments once edited
    status: str
    decided_by: str = ""
    decided_by_name: str = ""
    decision_reason: str = ""
    edited: bool = False
    risk: str = "medium"  # this call's own (low | medium | high): a turn's calls may differ

    @property
    def is_pending(self) -> bool:
        return self.status == "pending"


@dataclasses.dataclass(frozen=True)
class CardView:
    """Everything a card shows about one confirmation request, at one moment."""

    confirmation_id: str
    agent: str
    tool_name: str
    tool_args: dict[str, Any]  # already redacted: safe to show
    user_id: str
    session_id: str
    reason: str  # why the call was gated (hook / rule reason)
    hook: str  # name of the hook that asked
    status: str  # pending | approved | rejected | expired | cancelled
    url: str  # the web approval page for this request
    expires_at: dt.datetime | None = None
    approvers: tuple[str, ...] = ()  # channel-native ids; empty = any member
    approvals_required: int = 1
    approved_by: tuple[str, ...] = ()  # approvals so far (quorum progress)
    decided_by: str = ""  # channel-qualified: slack:U…, feishu:ou_…, web:alice, gateway, agent:<name>
    decided_at: dt.datetime | None = None
    decision_reason: str = ""
    escalated: bool = False  # this card was superseded by an escalation
    note: str = ""  # e.g. "Reminder: still waiting for your decision"
    decided_by_name: str = ""
    approved_args: dict[str, Any] | None = None  # set when the approver edited the arguments
    editable_paths: tuple[str, ...] = ()  # argument paths an approver may change (empty: no editing)
    grant_options: tuple[str, ...] = ()  # labels of the scopes offered besides Approve once; index = choice
    items: tuple[CardItem, ...] = ()  # the calls of this request's turn shown on its card (empty: just this one)
    # Who has yet to answer a request that needs several approvals: people's names, or channel-native ids.
    waiting_for: tuple[str, ...] = ()
    # The decision was a stand-in's: the name of the person it was given for ("… on behalf of Alice").
    on_behalf_of: str = ""
    # A question (docs/asking.md): `reason` is its text, `answer_schema` what the answer must be
    # (gateway_contract.answers), `answer` the answer given once `status` is "answered".
    kind: str = "confirmation"
    answer_schema: dict[str, Any] | None = None
    answer: Any = None
    # How risky the call is (low | medium | high), as its gate or policy rated it: every card shows it.
    risk: str = "medium"

    @property
    def is_question(self) -> bool:
        return self.kind == "question"

    @property
    def edited(self) -> bool:
        return self.approved_args is not None

    @property
    def decider(self) -> str:
        """Who decided, for people: "alice (slack:U0ALICE)"."""
        return actor_label(self.decided_by, self.decided_by_name)

    @property
    def behalf(self) -> str:
        """" on behalf of Alice" after a stand-in's decision, for cards that mention the decider by id
        (whose display name, which says it too, they do not show); "" otherwise."""
        return f" on behalf of {self.on_behalf_of}" if self.on_behalf_of else ""

    @property
    def pending_items(self) -> tuple[CardItem, ...]:
        return tuple(item for item in self.items if item.is_pending)

    @property
    def shown_ids(self) -> tuple[str, ...]:
        """The requests this card shows (its turn's calls, or just itself): what a whole-turn click
        drawn from it may decide (`Callback.shown_ids`)."""
        return tuple(item.confirmation_id for item in self.items) or (self.confirmation_id,)

    def offered_ids(self, limit: int | None = None) -> tuple[str, ...]:
        """The pending calls among the first `limit` this card lists (all: None): what its "Approve all" /
        "Reject all" offer, and so what their buttons carry as `Callback.shown_ids` (`sign_shown_ids`)."""
        return tuple(item.confirmation_id for item in self.items[:limit] if item.is_pending)

    @property
    def is_pending(self) -> bool:
        return self.status == "pending"
