"""The chat-channel adapter contract.

An adapter knows one chat product's wire protocol and nothing of the database:
it receives plain `CardView` snapshots to draw, returns `MessageRef`s to
store, and turns an inbound HTTP callback into `Callback`s that it hands to a
`decide` function supplied by the caller (which goes through
`approvals.services`). `ChannelError` is the only error that leaves
`post_card`/`update_card`; `CallbackError` the only one that leaves
`handle_callback`. A link (`open_connection`) brings clicks over an outbound
connection and hands them to the same `decide`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, ClassVar, Literal

from django.http import HttpRequest, HttpResponse
from django.utils.module_loading import import_string
from pydantic import BaseModel

from gateway_contract.cards import CardView
from gateway_contract.digest import DigestView
from gateway_contract.config import ChannelConfigBase, get_config_model
from gateway_contract.links import ChannelLink
from gateway_contract.registry import kind_spec
from gateway_utils.outbound import DeliveryFailed

# "answer": a question's answer (`Callback.answer`, docs/asking.md).
Decision = Literal["approve", "reject", "answer"]


@dataclasses.dataclass(frozen=True)
class MessageRef:
    """Where a posted card lives, in the channel's own terms (stored as JSON)."""

    data: dict[str, Any]


@dataclasses.dataclass(frozen=True)
class Callback:
    """A verified, parsed click: who decided what on which request."""

    confirmation_id: str
    decision: Decision
    actor: str  # channel-native user id (Slack U…, Feishu ou_…, web username); recorded channel-qualified
    actor_name: str = ""
    reason: str = ""
    # Vendor event id, when the vendor redelivers: a second click with it is a duplicate. A dry run
    # with one claims it too, so a redelivered tap that asks a question (Telegram's Reject…) asks once.
    dedupe_key: str = ""
    dry_run: bool = False  # only say what deciding would do (e.g. before opening a reject modal)
    edits: dict[str, Any] | None = None  # approve with these arguments changed: {path: new value}
    # Approve with arguments changed as the approver typed them in a form: {path: text}. The gateway
    # reads each text as the JSON type of the value it replaces, or the type the gate declares
    # (a number stays a number, text stays text); an empty text leaves the value unchanged.
    typed_edits: dict[str, str] | None = None
    grant: int | None = None  # approve for the scope at this index of the request's grant options
    whole_turn: bool = False  # decide the pending calls shown on this request's turn card
    # With `whole_turn`: the confirmation ids the clicked card showed (`CardView.shown_ids`), carried
    # by the button (signed) or bound to the drawn card. Only these are decided: a call that joined
    # the turn after the card was drawn stays pending and appears on the redrawn card.
    shown_ids: tuple[str, ...] | None = None
    # With decision "answer": a question's answer as JSON (read from the card's inputs by
    # `gateway_contract.answers.answer_from_inputs`); the gateway validates it against the question's schema.
    answer: Any = None
    # Or the answer as a form's inputs, {field name: text, list or bool}: the gateway reads them with the
    # question's schema (`answers.answer_from_inputs`), for a channel whose click carries no schema.
    answer_inputs: dict[str, Any] | None = None
    # A digest's "Approve these N" (docs/policies.md, "Risk"): the digest's id, with `shown_ids` the calls its
    # message offered (signed: `gateway_contract.signing.sign_digest_ids`). `confirmation_id` is the first of
    # them. Each is decided on its own, with every check; a call the digest did not show, never.
    digest_id: str = ""


@dataclasses.dataclass(frozen=True)
class DecisionOutcome:
    """What `decide(callback)` did, for the adapter to tell the clicker."""

    applied: bool  # True if this click was recorded (or, for a dry run, would be)
    # decided | recorded | would_apply | not_approver | self_approval | already_decided | not_found | duplicate
    # | edit_refused (an edit not allowed, not of the value's type, or refused by the agent's hooks) | grant_refused
    # | stale_card (a whole-turn click that names no calls: the card is redrawn)
    # | not_on_card (a whole-turn click naming calls its turn's card does not show)
    # | answer_refused (a question's answer that does not fit its schema) | not_a_question / is_a_question
    code: str
    message: str  # one sentence for the clicker
    card: CardView | None  # current state to redraw (None for not_found)


Decide = Callable[[Callback], DecisionOutcome]
# The card of one request as it is now, for a page that only shows it (nothing is recorded);
# None when there is no such request. Handed to `handle_link`, which gets no `decide`.
Show = Callable[[str], CardView | None]


class ChannelError(DeliveryFailed):
    """A failed call to a chat product. Transient ones are retried; permanent ones fail the request."""


class CallbackError(Exception):
    """An inbound callback refused before anything was changed (401/403/400)."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


class ChannelAdapter:
    """Base class: one instance per configured channel."""

    kind: ClassVar[str]
    config_model: ClassVar[type[ChannelConfigBase]]
    # Whether its messages carry links a person opens in a browser (e-mail): a GET or HEAD of
    # /channels/<name>/callback then reaches `handle_link`; for other kinds it is answered 405.
    opens_links: ClassVar[bool] = False

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

    def post_digest(self, digest: DigestView, *, idempotency_key: str) -> MessageRef:
        """Post one digest message (kinds with `ChannelKind.digests`): each call with its own Approve /
        Reject, and "Approve these N" bound to exactly the calls shown; raise ChannelError on failure."""
        raise NotImplementedError(f"{self.kind} channels do not send digests")

    def update_digest(self, digest: DigestView, ref: MessageRef) -> None:
        """Redraw a posted digest to show each call's state now; raise ChannelError on failure."""
        raise NotImplementedError(f"{self.kind} channels do not send digests")

    def handle_callback(self, request: HttpRequest, decide: Decide) -> HttpResponse:
        """Verify and parse an inbound callback, call `decide`, answer the vendor.

        Raise CallbackError for anything unauthenticated or malformed; nothing
        may be written before verification succeeds.
        """
        raise NotImplementedError

    def handle_link(self, request: HttpRequest, show: Show) -> HttpResponse:
        """A GET or HEAD of the callback URL (`opens_links`): a page that shows, never decides.

        Link previewers and mail scanners fetch every link they see, so what a GET
        may do is fixed here: it gets `show` (a read) and no `decide`; only a POST
        from the page it draws reaches `handle_callback`. Raise CallbackError for a
        link that is not one this channel made.
        """
        raise NotImplementedError

    # Whether `find_user_by_email` asks the vendor for an account by e-mail (the people directory).
    finds_people_by_email: ClassVar[bool] = False
    # Whether `send_direct` can message one person (the one-time link that ties an account to a person).
    sends_direct_messages: ClassVar[bool] = False

    def find_user_by_email(self, email: str) -> str | None:
        """The channel-native id of the vendor's account with this e-mail (Slack's `users.lookupByEmail`,
        Feishu's contact lookup); None if the vendor knows none. Raises ChannelError on failure."""
        raise NotImplementedError

    def send_direct(self, native_id: str, text: str) -> None:
        """Send `text` to the one person `native_id` (a direct message). Raises ChannelError on failure."""
        raise NotImplementedError

    def setup(self, callback_url: str) -> str:
        """Tell the vendor, through its API, how this channel's callbacks reach the gateway
        (`manage.py channel_setup`; Telegram's setWebhook). Returns one sentence saying what was
        done; raises ChannelError if the vendor refuses. Kinds that are set up in the vendor's
        console raise NotImplementedError, saying so."""
        raise NotImplementedError(
            f"{self.kind} channels are set up in the vendor's console, not by the gateway (docs/{self.kind}.md)"
        )

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
        touches the database itself (gateway_contract/links.py).
        """
        raise NotImplementedError(f"{self.kind} channels receive their clicks over HTTP only")


def get_adapter_class(kind: str) -> type[ChannelAdapter]:
    return import_string(kind_spec(kind).adapter)


def get_adapter(name: str, kind: str, config: dict[str, Any]) -> ChannelAdapter:
    cls = get_adapter_class(kind)
    return cls(name, get_config_model(kind).model_validate({"name": name, "kind": kind, **config}))
