"""The chat-channel adapter contract and its registry.

An adapter knows one chat product's wire protocol and nothing of the database:
it receives plain `CardView` snapshots to draw, returns `MessageRef`s to
store, and turns an inbound HTTP callback into `Callback`s that it hands to a
`decide` function supplied by the caller (which goes through
`approvals.services`). `ChannelError` is the only error that leaves
`post_card`/`update_card`; `CallbackError` the only one that leaves
`handle_callback`.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from django.core import signing
from django.http import HttpRequest, HttpResponse
from django.utils.module_loading import import_string
from pydantic import BaseModel

if TYPE_CHECKING:
    from channels_ext.connections.link import ChannelLink

# kind -> dotted path of the adapter class. Feeds the Channel model's choices;
# `get_adapter_class(kind)` is the only way to pick one.
ADAPTERS: dict[str, str] = {
    "web": "channels_ext.web.adapter.WebAdapter",
    "slack": "channels_ext.slack.adapter.SlackAdapter",
    "feishu": "channels_ext.feishu.adapter.FeishuAdapter",
}

Decision = Literal["approve", "reject"]


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
    decided_by: str = ""
    decided_at: dt.datetime | None = None
    decision_reason: str = ""
    escalated: bool = False  # this card was superseded by an escalation
    note: str = ""  # e.g. "Reminder: still waiting for your decision"

    @property
    def is_pending(self) -> bool:
        return self.status == "pending"


@dataclasses.dataclass(frozen=True)
class MessageRef:
    """Where a posted card lives, in the channel's own terms (stored as JSON)."""

    data: dict[str, Any]


@dataclasses.dataclass(frozen=True)
class Callback:
    """A verified, parsed click: who decided what on which request."""

    confirmation_id: str
    decision: Decision
    actor: str  # channel-native user id (Slack U…, Feishu ou_…, web username)
    actor_name: str = ""
    reason: str = ""
    dedupe_key: str = ""  # vendor event id, when the vendor redelivers
    dry_run: bool = False  # only say what deciding would do (e.g. before opening a reject modal)


@dataclasses.dataclass(frozen=True)
class DecisionOutcome:
    """What `decide(callback)` did, for the adapter to tell the clicker."""

    applied: bool  # True if this click was recorded (or, for a dry run, would be)
    code: str  # decided | recorded | would_apply | not_approver | self_approval | already_decided | not_found | duplicate
    message: str  # one sentence for the clicker
    card: CardView | None  # current state to redraw (None for not_found)


Decide = Callable[[Callback], DecisionOutcome]


class ChannelError(Exception):
    """A failed outbound call. Transient ones are retried; permanent ones fail the request."""

    def __init__(self, message: str, *, permanent: bool = False, retry_after: float | None = None):
        super().__init__(message)
        self.message = message
        self.permanent = permanent
        self.retry_after = retry_after


class CallbackError(Exception):
    """An inbound callback refused before anything was changed (401/403/400)."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


class ChannelAdapter:
    """Base class: one instance per configured channel."""

    kind: ClassVar[str]
    config_model: ClassVar[type[BaseModel]]

    def __init__(self, name: str, config: BaseModel):
        self.name = name
        self.config = config

    # Methods that subclasses must implement.
    def post_card(self, card: CardView, *, idempotency_key: str) -> MessageRef:
        """Post a new card; raise ChannelError on failure."""
        raise NotImplementedError

    def update_card(self, card: CardView, ref: MessageRef) -> None:
        """Redraw a posted card to show `card.status`; raise ChannelError on failure."""
        raise NotImplementedError

    def handle_callback(self, request: HttpRequest, decide: Decide) -> HttpResponse:
        """Verify and parse an inbound callback, call `decide`, answer the vendor.

        Raise CallbackError for anything unauthenticated or malformed; nothing
        may be written before verification succeeds.
        """
        raise NotImplementedError

    def notify_approvers(self, card: CardView, ref: MessageRef, text: str) -> None:
        """Re-ping pending approvers (reminders). Default: redraw the card with a note."""
        self.update_card(dataclasses.replace(card, note=text), ref)

    @property
    def connection_mode(self) -> str:
        """How clicks arrive: `http` (POSTs to /channels/<name>/callback), or the name of an
        outbound connection (`socket`, `long_connection`) that `manage.py channel_connections` holds."""
        return str(getattr(self.config, "mode", "http"))

    def open_connection(self, decide: Decide) -> ChannelLink:
        """The outbound connection that brings this channel's clicks when `connection_mode` is not http.

        Like `handle_callback`, the link hands every click to `decide` and never
        touches the database itself (channels_ext/connections/link.py).
        """
        raise NotImplementedError(f"{self.kind} channels receive their clicks over HTTP only")


def get_adapter_class(kind: str) -> type[ChannelAdapter]:
    try:
        return import_string(ADAPTERS[kind])
    except KeyError:
        raise ValueError(f"unknown channel kind {kind!r}; known: {', '.join(sorted(ADAPTERS))}") from None


def get_adapter(name: str, kind: str, config: dict[str, Any]) -> ChannelAdapter:
    cls = get_adapter_class(kind)
    return cls(name, cls.config_model.model_validate({"name": name, "kind": kind, **config}))


# Buttons carry a signed confirmation id so a forged value cannot name another request.
_SIGNER_SALT = "channels_ext.button"


def sign_confirmation_id(confirmation_id: str) -> str:
    return signing.Signer(salt=_SIGNER_SALT).sign(str(confirmation_id))


def unsign_confirmation_id(value: str) -> str:
    try:
        return signing.Signer(salt=_SIGNER_SALT).unsign(str(value))
    except signing.BadSignature:
        raise CallbackError(400, "the button value is not one this gateway signed") from None
