"""The chat-channel adapter contract and its registry.

An adapter knows one chat product's wire protocol and nothing of the database:
it receives plain `CardView` snapshots to draw, returns `MessageRef`s to
store, and turns an inbound HTTP callback into `Callback`s that it hands to a
`decide` function supplied by the caller (which goes through
`approvals.services`). `ChannelError` is the only error that leaves
`post_card`/`update_card`; `CallbackError` the only one that leaves
`handle_callback`.

A channel kind is one package (`channels_ext/<kind>/`: its config model, its
adapter, its cards) plus one line in `CHANNEL_KINDS`. Every list of kinds —
the Channel model's choices, the config file's schema, the system checks,
the admin's masking of secrets — is derived from that dict.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Callable, Sequence
from importlib.util import find_spec
from typing import Any, ClassVar, Literal

from django.core import signing
from django.http import HttpRequest, HttpResponse
from django.utils.module_loading import import_string
from pydantic import BaseModel, ConfigDict, Field, ValidationInfo
from pydantic_core import PydanticCustomError, PydanticUndefined

from channels_ext.connections.link import ChannelLink
from gateway.configfile import SLUG
from gateway.outbound import DeliveryFailed


@dataclasses.dataclass(frozen=True)
class ChannelKind:
    """Where a kind's two halves live, as dotted paths (imported when first needed)."""

    config: str  # its pydantic config model: light, imported to validate config files
    adapter: str  # its adapter class: may import a vendor SDK (lark-oapi takes seconds)
    # Its cards can list the calls of one turn (`CardView.items`) and decide them together;
    # if not, each call of a turn gets a card of its own.
    turn_cards: bool = True
    # Its card is the gateway's own page (`post_card` returns {"url": the request's page};
    # `update_card` and `notify_approvers` reach nothing outside): the gateway records such a
    # card as posted when the request is created and writes no outbox rows to draw or redraw it.
    draws_itself: bool = False
    # The vendor SDK its adapter imports when it is not one of the server's own requirements:
    # (module, the pinned requirement in requirements-channels.txt). A configured channel whose
    # SDK is missing fails the system check (channels_ext.E003) instead of its first delivery.
    requires: tuple[str, str] | None = None
    # Its cards can take a question's typed answer (docs/asking.md); a question to a channel of a
    # kind that cannot is refused when it is asked (400), naming the kind.
    questions: bool = False


CHANNEL_KINDS: dict[str, ChannelKind] = {
    "web": ChannelKind(
        "channels_ext.web.config.WebChannelConfig",
        "channels_ext.web.adapter.WebAdapter",
        draws_itself=True,
        questions=True,
    ),
    "slack": ChannelKind(
        "channels_ext.slack.config.SlackChannelConfig", "channels_ext.slack.adapter.SlackAdapter", questions=True
    ),
    "feishu": ChannelKind(
        "channels_ext.feishu.config.FeishuChannelConfig", "channels_ext.feishu.adapter.FeishuAdapter", questions=True
    ),
    "teams": ChannelKind(
        "channels_ext.teams.config.TeamsChannelConfig",
        "channels_ext.teams.adapter.TeamsAdapter",
        requires=("microsoft_agents.hosting.msteams", "microsoft-agents-hosting-msteams"),
    ),
    # DingTalk's general card template has one row of buttons and no inputs: one card per call.
    "dingtalk": ChannelKind(
        "channels_ext.dingtalk.config.DingTalkChannelConfig",
        "channels_ext.dingtalk.adapter.DingTalkAdapter",
        turn_cards=False,
        requires=("dingtalk_stream", "dingtalk-stream"),
    ),
    "telegram": ChannelKind(
        "channels_ext.telegram.config.TelegramChannelConfig",
        "channels_ext.telegram.adapter.TelegramAdapter",
        requires=("telegram", "python-telegram-bot"),
    ),
    "email": ChannelKind(
        "channels_ext.email.config.EmailChannelConfig", "channels_ext.email.adapter.EmailAdapter", turn_cards=False
    ),
}

# "answer": a question's answer (`Callback.answer`, docs/asking.md).
Decision = Literal["approve", "reject", "answer"]
# The prefixes of a channel-qualified approver id (`slack:U0123`): every channel kind, the
# Django admin, and `agent:` for an agent's own cancel. `gateway` (expiry) has none.
ACTOR_KINDS = frozenset({*CHANNEL_KINDS, "admin", "agent"})


# --------------------------------------------------------------------------- config models


def secret(default: Any = PydanticUndefined, **kwargs: Any) -> Any:
    """A config key that holds a secret (a token, a signing key): masked wherever a channel is shown."""
    return Field(default, json_schema_extra={"secret": True}, **kwargs)


def _no_null_defaults(schema: dict[str, Any]) -> None:
    """JSON Schema: keys whose default is None (mode-dependent, see `needed_in_mode`) show no `default: null`."""
    for prop in schema.get("properties", {}).values():
        if "default" in prop and prop["default"] is None:
            del prop["default"]


class ChannelConfigBase(BaseModel):
    """Keys every channel has; each kind adds its own. Unknown keys are errors."""

    model_config = ConfigDict(extra="forbid", json_schema_extra=_no_null_defaults)
    name: str = Field(pattern=SLUG, max_length=64)
    kind: str
    # The team the channel belongs to (docs/approving.md, "Teams"); left out: the default team.
    team: str = Field(default="default", pattern=SLUG, max_length=64)


def needed_in_mode(value: Any, info: ValidationInfo, mode: str) -> Any:
    """Before-validator of a key that channels in `mode` must have and others may leave out.

    The key's default is None (not given): "is required" in `mode`, "" elsewhere. `mode`
    is declared before these keys, so `info.data` already holds it (absent if invalid).
    """
    if value is None:
        if info.data.get("mode") == mode:
            raise PydanticCustomError("missing", "Field required")
        return ""
    return value


def not_blank_in_mode(value: str, info: ValidationInfo, mode: str) -> str:
    """After-validator: in `mode` the key must not be blank."""
    if info.data.get("mode") == mode and not value.strip():
        raise PydanticCustomError("string_too_short", "String should have at least 1 character", {"min_length": 1})
    return value


def secret_keys(model: type[BaseModel]) -> frozenset[str]:
    """The keys of a channel config model marked with `secret(...)`."""
    return frozenset(
        name
        for name, field in model.model_fields.items()
        if isinstance(field.json_schema_extra, dict) and field.json_schema_extra.get("secret")
    )


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
    # (channels_ext.answers), `answer` the answer given once `status` is "answered".
    kind: str = "confirmation"
    answer_schema: dict[str, Any] | None = None
    answer: Any = None

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
    # `channels_ext.answers.answer_from_inputs`); the gateway validates it against the question's schema.
    answer: Any = None
    # Or the answer as a form's inputs, {field name: text, list or bool}: the gateway reads them with the
    # question's schema (`answers.answer_from_inputs`), for a channel whose click carries no schema.
    answer_inputs: dict[str, Any] | None = None


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
        touches the database itself (channels_ext/connections/link.py).
        """
        raise NotImplementedError(f"{self.kind} channels receive their clicks over HTTP only")


def _kind(kind: str) -> ChannelKind:
    try:
        return CHANNEL_KINDS[kind]
    except KeyError:
        raise ValueError(f"unknown channel kind {kind!r}; known: {', '.join(sorted(CHANNEL_KINDS))}") from None


def draws_itself(kind: str) -> bool:
    """Whether a kind's card is the gateway's own page (`ChannelKind.draws_itself`)."""
    return _kind(kind).draws_itself


def self_drawing_kinds() -> list[str]:
    """The kinds whose card is the gateway's own page (`ChannelKind.draws_itself`), sorted."""
    return sorted(kind for kind, spec in CHANNEL_KINDS.items() if spec.draws_itself)


def asks_questions(kind: str) -> bool:
    """Whether a kind's cards take a question's answer (`ChannelKind.questions`)."""
    return _kind(kind).questions


def question_kinds() -> list[str]:
    """The kinds whose cards take a question's answer, sorted."""
    return sorted(kind for kind, spec in CHANNEL_KINDS.items() if spec.questions)


def has_turn_cards(kind: str) -> bool:
    """Whether a kind's cards list the calls of one turn (without importing its adapter)."""
    return _kind(kind).turn_cards


def missing_requirement(kind: str) -> str | None:
    """The requirement to install (`python-telegram-bot`) if a kind's vendor SDK is not importable; else None."""
    needed = _kind(kind).requires
    return needed[1] if needed is not None and find_spec(needed[0]) is None else None


def get_config_model(kind: str) -> type[ChannelConfigBase]:
    """The config model of a channel kind (without importing its adapter)."""
    return import_string(_kind(kind).config)


def get_adapter_class(kind: str) -> type[ChannelAdapter]:
    return import_string(_kind(kind).adapter)


def get_adapter(name: str, kind: str, config: dict[str, Any]) -> ChannelAdapter:
    cls = get_adapter_class(kind)
    return cls(name, get_config_model(kind).model_validate({"name": name, "kind": kind, **config}))


# Buttons carry a signed confirmation id so a forged value cannot name another request.
_SIGNER_SALT = "channels_ext.button"


def sign_confirmation_id(confirmation_id: str) -> str:
    return signing.Signer(salt=_SIGNER_SALT).sign(str(confirmation_id))


def unsign_confirmation_id(value: str) -> str:
    try:
        return signing.Signer(salt=_SIGNER_SALT).unsign(str(value))
    except signing.BadSignature:
        raise CallbackError(400, "the button value is not one this gateway signed") from None


# A turn's "Approve all" / "Reject all" carries the calls its card offered, signed together with the
# turn's lead: the click decides exactly those (`Callback.shown_ids`), a call that joined the turn
# later is not among them, and a list edited or taken from another card fails the signature or
# names calls that are not this card's (docs/approving.md).
_SHOWN_SIGNER_SALT = "channels_ext.turn_button"


def sign_shown_ids(confirmation_id: str, shown_ids: Sequence[str]) -> str:
    """`<lead id>;<id>,<id>…:<signature>`: about 37 characters per call (Slack's button value holds
    2000, so a card offers "all" for the 15 calls it lists at most)."""
    return signing.Signer(salt=_SHOWN_SIGNER_SALT).sign(f"{confirmation_id};{','.join(map(str, shown_ids))}")


def unsign_shown_ids(value: str) -> tuple[str, tuple[str, ...]]:
    """(the lead's id, the calls offered) from a value `sign_shown_ids` made; CallbackError(400) otherwise."""
    try:
        text = signing.Signer(salt=_SHOWN_SIGNER_SALT).unsign(str(value))
    except signing.BadSignature:
        raise CallbackError(400, "the list of calls this button decides is not one this gateway signed") from None
    lead, _, ids = text.partition(";")
    return lead, tuple(pk for pk in ids.split(",") if pk)
