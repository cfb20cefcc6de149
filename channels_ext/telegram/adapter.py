"""The Telegram channel: approval messages with an inline keyboard, through python-telegram-bot.

Outbound calls go through python-telegram-bot's `Bot` (Bot API methods
sendMessage, editMessageText, answerCallbackQuery). Updates arrive one of two
ways (the channel's `mode`, docs/telegram.md): as webhook POSTs to
`/channels/<name>/callback`, checked against the secret token Telegram sends in
`X-Telegram-Bot-Api-Secret-Token` before anything is parsed, or by long polling
`getUpdates` (channels_ext/telegram/connection.py), where the bot token is the
authentication. Both hand the update to `handle_update`, which takes taps and
replies from the configured chat only (a card forwarded elsewhere keeps its
buttons, and a bot gets the taps of every chat it is in).

What Telegram lacks, and how the card makes up for it:
- **64 bytes of button data**: buttons carry compact signed data (buttons.py).
- **No forms**: Reject… and Edit… send a question the approver answers by
  replying (Telegram's ForceReply). The question carries, in a link's URL
  fragment, a token signed for that approver and that request (`prompt_token`);
  only their reply to it decides. Bots in privacy mode still receive replies to
  their own messages.

python-telegram-bot is asynchronous; each outbound call runs on an event loop of
its own (`asyncio.run`), from the worker's or the view's thread. The bot token is
part of every Bot API URL: it is scrubbed from every message this module logs or
raises, and the SDK's and httpx's own loggers are kept from writing URLs.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hmac
import json
import logging
import os
import re
from collections.abc import Awaitable, Callable
from typing import Any, ClassVar, TypeVar

from django.core import signing
from django.http import HttpRequest, HttpResponse
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from telegram import (
    Bot,
    ForceReply,
    InlineKeyboardButton,
    InlineKeyboardMarkup,
    LinkPreviewOptions,
    MessageEntity,
    ReplyParameters,
    User,
)
from telegram.constants import ParseMode
from telegram.error import BadRequest, ChatMigrated, Forbidden, InvalidToken, RetryAfter, TelegramError
from telegram.request import HTTPXRequest

from gateway_contract import (
    Callback,
    CallbackError,
    CardView,
    ChannelAdapter,
    ChannelError,
    Decide,
    DecisionOutcome,
    MessageRef,
    argument_value,
)
from gateway_contract.links import ChannelLink
from channels_ext.telegram import buttons, cards
from channels_ext.telegram.config import TelegramChannelConfig
from channels_ext.telegram.connection import ALLOWED_UPDATES, TelegramPollingLink

logger = logging.getLogger(__name__)

T = TypeVar("T")

# python-telegram-bot 22 reports time periods (RetryAfter.retry_after) as timedeltas when this is set,
# and warns on every 429 otherwise (its documented switch, read when the value is used).
os.environ.setdefault("PTB_TIMEDELTA", "true")

SECRET_HEADER = "X-Telegram-Bot-Api-Secret-Token"
ANSWER_LIMIT = 200  # answerCallbackQuery's text
REASON_MAX_LENGTH = 1000
PROMPT_SALT = "channels_ext.telegram.prompt"
PROMPT_MAX_AGE_SECONDS = 24 * 3600
PROMPT_MARK = "#gw="  # the question's link: <card url>#gw=<prompt token>
NOT_THE_CHAT = "These buttons work only in the chat the gateway posted the request to."
NO_PREVIEW = LinkPreviewOptions(is_disabled=True)
# Bot API answers meaning the message is already as asked (a redraw that changes nothing).
_NOT_MODIFIED = "message is not modified"
_TOKEN = re.compile(r"\d{1,20}:[A-Za-z0-9_-]{10,}")


class _UrlFilter(logging.Filter):
    """httpx logs each request's URL at INFO, and the Bot API's URLs hold the bot token."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if _TOKEN.search(message):
            record.msg, record.args = _TOKEN.sub("<bot token>", message), ()
        return True


logging.getLogger("httpx").addFilter(_UrlFilter())
# The SDK logs its base URL (with the token) and every call's parameters at DEBUG.
logging.getLogger("telegram").setLevel(logging.INFO)


class _Payload(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True, populate_by_name=True)


class _User(_Payload):
    id: int
    is_bot: bool = False
    first_name: str = ""
    last_name: str = ""
    username: str = ""

    @property
    def display_name(self) -> str:
        full = " ".join(part for part in (self.first_name, self.last_name) if part)
        return full or self.username or str(self.id)


class _Chat(_Payload):
    id: int
    username: str = ""  # a public group's or channel's


class _Entity(_Payload):
    type: str
    url: str = ""


class _Button(_Payload):
    callback_data: str = ""


class _Markup(_Payload):
    inline_keyboard: list[list[_Button]] = []


class _Replied(_Payload):
    """The message a reply answers (Telegram sends it without its own reply)."""

    message_id: int
    sender: _User | None = Field(None, alias="from")
    entities: list[_Entity] = []


class _Message(_Payload):
    message_id: int
    chat: _Chat
    sender: _User | None = Field(None, alias="from")
    text: str = ""
    reply_to_message: _Replied | None = None
    reply_markup: _Markup | None = None


class _CallbackQuery(_Payload):
    id: str = Field(min_length=1)
    sender: _User = Field(alias="from")
    data: str = ""
    message: _Message | None = None  # absent or without a chat when Telegram no longer has it


class _Update(_Payload):
    update_id: int
    callback_query: _CallbackQuery | None = None
    message: _Message | None = None


@dataclasses.dataclass(frozen=True)
class Prompt:
    """A question the gateway asked one approver (Reject…'s reason, Edit…'s values)."""

    confirmation_id: str
    user: str  # the Telegram user id it is for
    kind: str  # reason | edit
    shown: tuple[str, ...] | None  # a whole turn's reject: the calls its card showed


def prompt_token(channel: str, prompt: Prompt) -> str:
    data = [prompt.confirmation_id, prompt.user, prompt.kind, list(prompt.shown) if prompt.shown is not None else None]
    return signing.dumps(data, salt=f"{PROMPT_SALT}:{channel}", compress=True)


def read_prompt(channel: str, token: str) -> Prompt | None:
    """The question a token names, if this gateway asked it on `channel` within a day; None if not."""
    try:
        data = signing.loads(token, salt=f"{PROMPT_SALT}:{channel}", max_age=PROMPT_MAX_AGE_SECONDS)
    except signing.BadSignature:  # (SignatureExpired too)
        return None
    if not (isinstance(data, list) and len(data) == 4 and data[2] in ("reason", "edit")):
        return None
    return Prompt(str(data[0]), str(data[1]), data[2], tuple(data[3]) if isinstance(data[3], list) else None)


def _parse(model: type[_Payload], data: Any, what: str) -> Any:
    try:
        return model.model_validate(data)
    except ValidationError as err:
        raise CallbackError(400, f"malformed Telegram {what}: {err.error_count()} problem(s)") from None


def _utf16(text: str) -> int:
    """A length as Telegram counts entity offsets: in UTF-16 code units."""
    return len(text.encode("utf-16-le")) // 2


def _markup(rows: cards.Keyboard) -> InlineKeyboardMarkup | None:
    if not rows:
        return None
    return InlineKeyboardMarkup(
        [[InlineKeyboardButton(label, callback_data=data) for label, data in row] for row in rows]
    )


class TelegramAdapter(ChannelAdapter):
    """Posts approval messages to one Telegram chat and handles their buttons and the replies to its questions."""

    kind = "telegram"
    config_model = TelegramChannelConfig
    config: TelegramChannelConfig

    http_timeout: ClassVar[float] = 10.0

    # --- the Bot API ---------------------------------------------------------------

    def scrub(self, text: str) -> str:
        """`text` without the bot token (SDK messages and URLs may carry it)."""
        return _TOKEN.sub("<bot token>", text.replace(self.config.bot_token, "<bot token>"))

    def new_bot(self, request: HTTPXRequest) -> Bot:
        return Bot(
            self.config.bot_token, base_url=self.config.api_base_url, request=request, get_updates_request=request
        )

    def call(self, method: str, send: Callable[[Bot], Awaitable[T]]) -> T:
        """Run one Bot API call on a loop of its own; every failure leaves as a classed ChannelError."""

        async def run() -> T:
            request = HTTPXRequest(
                connection_pool_size=2,
                connect_timeout=self.http_timeout,
                read_timeout=self.http_timeout,
                write_timeout=self.http_timeout,
            )
            try:
                return await send(self.new_bot(request))
            finally:
                await request.shutdown()

        try:
            return asyncio.run(run())
        except TelegramError as err:
            if isinstance(err, BadRequest) and _NOT_MODIFIED in err.message.lower():
                return None  # type: ignore[return-value]  # an edit to what the message already shows
            error = self.api_error(method, err)
            logger.warning("telegram channel %s: %s", self.name, error.message)
            raise error from None

    def api_error(self, method: str, err: TelegramError) -> ChannelError:
        """Class a Bot API failure: flood control and network trouble are transient; a refused token,
        a chat the bot cannot write to and a request Telegram rejects are permanent."""
        description = self.scrub(err.message)[:200]
        message = f"telegram {method} failed: {description}"
        if isinstance(err, RetryAfter):
            after = err.retry_after  # a timedelta (PTB_TIMEDELTA above); a number if the environment says otherwise
            seconds = after if isinstance(after, int | float) else after.total_seconds()
            return ChannelError(
                f"telegram {method} failed: flood control (retry after {seconds:g} s)", retry_after=float(seconds)
            )
        if isinstance(err, InvalidToken):
            return ChannelError(
                f"telegram {method} failed: the bot token was refused (check bot_token)", permanent=True
            )
        if isinstance(err, ChatMigrated):
            return ChannelError(
                f"telegram {method} failed: the group became a supergroup; set chat_id to {err.new_chat_id}",
                permanent=True,
            )
        if isinstance(err, Forbidden | BadRequest):
            return ChannelError(message, permanent=True)
        return ChannelError(message)  # NetworkError, TimedOut, 5xx

    # --- outbound -------------------------------------------------------------------

    def post_card(self, card: CardView, *, idempotency_key: str) -> MessageRef:
        """Send the approval message; return its chat and message id.

        The Bot API has no idempotency key, so `idempotency_key` is unused: the
        caller stores the ref and never posts twice.
        """
        message = self.call(
            "sendMessage",
            lambda bot: bot.send_message(
                chat_id=self.config.chat_id,
                text=cards.card_text(card),
                parse_mode=ParseMode.HTML,
                reply_markup=_markup(cards.keyboard(card, self.name)),
                link_preview_options=NO_PREVIEW,
            ),
        )
        return MessageRef({"chat_id": message.chat_id, "message_id": message.message_id})

    def update_card(self, card: CardView, ref: MessageRef) -> None:
        """Edit the message to the request's state; once decided it loses its buttons."""
        chat_id, message_id = self._locate(ref)
        self.call(
            "editMessageText",
            lambda bot: bot.edit_message_text(
                text=cards.card_text(card),
                chat_id=chat_id,
                message_id=message_id,
                parse_mode=ParseMode.HTML,
                reply_markup=_markup(cards.keyboard(card, self.name)),
                link_preview_options=NO_PREVIEW,
            ),
        )

    def notify_approvers(self, card: CardView, ref: MessageRef, text: str) -> None:
        """Redraw the message with `text` as a note, then reply under it mentioning the approvers still to answer."""
        self.update_card(dataclasses.replace(card, note=text), ref)
        chat_id, message_id = self._locate(ref)
        self.call(
            "sendMessage",
            lambda bot: bot.send_message(
                chat_id=chat_id,
                text=cards.reminder_text(card, text),
                parse_mode=ParseMode.HTML,
                reply_parameters=ReplyParameters(message_id, allow_sending_without_reply=True),
                link_preview_options=NO_PREVIEW,
            ),
        )

    @staticmethod
    def _locate(ref: MessageRef) -> tuple[int | str, int]:
        chat_id, message_id = ref.data.get("chat_id"), ref.data.get("message_id")
        if not isinstance(chat_id, int | str) or not isinstance(message_id, int) or chat_id == "":
            raise ChannelError("telegram message ref lacks chat_id or message_id", permanent=True)
        return chat_id, message_id

    # --- inbound --------------------------------------------------------------------

    def handle_callback(self, request: HttpRequest, decide: Decide) -> HttpResponse:
        """A webhook delivery: check Telegram's secret token header, then handle the update.

        Answers 200 to anything authenticated, handled or not, so Telegram does not redeliver it.
        """
        if self.config.mode != "http":
            raise CallbackError(
                403, f"this channel takes its updates by long polling (mode: {self.config.mode}), not at this URL"
            )
        given = request.headers.get(SECRET_HEADER, "")
        if not given or not hmac.compare_digest(given.encode(), self.config.webhook_secret.encode()):
            raise CallbackError(401, f"the {SECRET_HEADER} header is missing or wrong")
        try:
            data = json.loads(request.body)
        except ValueError:
            raise CallbackError(400, "the body is not JSON") from None
        self.handle_update(data, decide)
        return HttpResponse(status=200)

    def handle_update(self, data: Any, decide: Decide) -> None:
        """Act on one authenticated update (a webhook body, or one of getUpdates' results).

        A button tap (`callback_query`) or a reply to one of the gateway's questions;
        anything else is ignored. Raises CallbackError(400) for an update that is not one.
        """
        update: _Update = _parse(_Update, data, "update")
        if update.callback_query is not None:
            self._on_tap(update.callback_query, decide)
        elif update.message is not None and update.message.reply_to_message is not None:
            self._on_reply(update.message, decide)

    def open_connection(self, decide: Decide) -> ChannelLink:
        """The getUpdates long polling that brings this channel's updates (mode: polling)."""
        return TelegramPollingLink(self, decide)

    def setup(self, callback_url: str) -> str:
        """`mode: http`: set the bot's webhook to `callback_url`, with the channel's secret token;
        `mode: polling`: remove any webhook (Telegram refuses getUpdates while one is set)."""
        if self.config.mode == "polling":
            self.call("deleteWebhook", lambda bot: bot.delete_webhook(drop_pending_updates=False))
            return "Telegram's webhook is removed: `manage.py channel_connections` fetches the updates."
        self.call(
            "setWebhook",
            lambda bot: bot.set_webhook(
                callback_url, secret_token=self.config.webhook_secret, allowed_updates=ALLOWED_UPDATES
            ),
        )
        return f"Telegram POSTs the bot's updates to {callback_url}, with the channel's secret token."

    def _in_the_chat(self, message: _Message | None) -> bool:
        """Whether a tap's or a reply's message is in the configured chat: a card forwarded to another chat,
        or a chat the bot was added to later, keeps its buttons, and the bot gets those taps too."""
        return message is not None and self.config.is_the_chat(message.chat.id, message.chat.username)

    def _on_tap(self, query: _CallbackQuery, decide: Decide) -> None:
        if not self._in_the_chat(query.message):
            # Answered (the webhook gets 200), not refused with an error status: Telegram would redeliver it.
            logger.warning("telegram channel %s: tap refused: not in the channel's chat", self.name)
            self._answer(query.id, NOT_THE_CHAT, alert=True)
            return
        peeked = buttons.peek(query.data)
        shown = self._shown_on(query.message) if peeked and peeked[0] in buttons.WHOLE_TURN else ()
        try:
            button = buttons.read_button(self.name, query.data, shown)
        except buttons.BadButton as exc:
            # Answered, not refused with an error status: Telegram would redeliver it.
            logger.warning("telegram channel %s: tap refused: %s", self.name, exc)
            self._answer(query.id, "This button is not one this gateway made.", alert=True)
            return
        user = query.sender
        click = Callback(
            confirmation_id=button.confirmation_id,
            decision=button.decision,
            actor=str(user.id),
            actor_name=user.display_name,
            dedupe_key=f"telegram:tap:{query.id}",
            grant=button.grant,
            whole_turn=button.whole_turn,
            shown_ids=tuple(shown) if button.whole_turn else None,
        )
        # Reject… and Edit… ask a question, after a dry run that claims the tap's id (`Callback.dedupe_key`):
        # the same tap redelivered (same update, same query) is a duplicate and asks nothing a second time.
        if button.action == buttons.EDIT:
            outcome = decide(dataclasses.replace(click, dry_run=True))
            if outcome.applied and outcome.card is not None and not outcome.card.editable_paths:
                outcome = dataclasses.replace(
                    outcome, applied=False, message="This request's gate does not allow editing."
                )
            self._ask(query, outcome, user, "edit", None)
        elif button.decision == "reject":
            outcome = decide(dataclasses.replace(click, dry_run=True))
            self._ask(query, outcome, user, "reason", click.shown_ids)
        else:
            outcome = decide(click)
            self._answer(query.id, outcome.message or "Approved.", alert=not outcome.applied)

    def _shown_on(self, message: _Message | None) -> tuple[str, ...]:
        """The calls a tapped turn's card showed with buttons, read from its own keyboard."""
        if message is None or message.reply_markup is None:
            return ()
        found = []
        for row in message.reply_markup.inline_keyboard:
            for button in row:
                peeked = buttons.peek(button.callback_data)
                if peeked and peeked[0] == buttons.APPROVE:
                    found.append(peeked[1])
        return tuple(found)

    def _ask(self, query: _CallbackQuery, outcome: DecisionOutcome, user: _User, kind: str, shown: Any) -> None:
        """Reject… or Edit…: if the answer could count, ask for the reason or the values (ForceReply)."""
        if not outcome.applied or outcome.card is None or query.message is None:
            self._answer(query.id, outcome.message or "Open the request in the browser to answer.", alert=True)
            return
        card = outcome.card
        token = prompt_token(self.name, Prompt(card.confirmation_id, str(user.id), kind, shown))
        name = user.display_name
        if kind == "reason":
            what = f"the {len(shown)} pending calls of this turn" if shown else cards.cut(card.tool_name, 100)
            question = (
                f"{name}, why are you rejecting {what}? Reply to this message with your reason; the agent is told it."
            )
            placeholder, answer = "Your reason", "Reply to my message below with your reason."
        else:
            current = {path: argument_value(card.tool_args, path) for path in card.editable_paths}
            question = (
                f"{name}, reply to this message with the new values as JSON, then the call is approved with them. "
                f"Editable: {', '.join(card.editable_paths)}. "
                f"Now: {cards.cut(json.dumps(current, ensure_ascii=False), 1500)}"
            )
            placeholder, answer = '{"amount": 100}', "Reply to my message below with the new values."
        link = "Open in browser"
        text = f"{question}\n{link}"
        entities = [
            MessageEntity(MessageEntity.TEXT_MENTION, 0, _utf16(name), user=User(user.id, name, is_bot=False)),
            MessageEntity(
                MessageEntity.TEXT_LINK, _utf16(question) + 1, _utf16(link), url=f"{card.url}{PROMPT_MARK}{token}"
            ),
        ]
        self._answer(query.id, answer, alert=False)
        self.call(
            "sendMessage",
            lambda bot: bot.send_message(
                chat_id=query.message.chat.id,
                text=text,
                entities=entities,
                reply_markup=ForceReply(selective=True, input_field_placeholder=placeholder),
                reply_parameters=ReplyParameters(query.message.message_id, allow_sending_without_reply=True),
                link_preview_options=NO_PREVIEW,
            ),
        )

    def _on_reply(self, message: _Message, decide: Decide) -> None:
        replied = message.reply_to_message
        if not self._in_the_chat(message):
            return  # another chat: nothing is said there
        if (
            replied is None
            or replied.sender is None
            or replied.sender.id != self.config.bot_id
            or message.sender is None
        ):
            return  # not a reply to this bot
        token = next((e.url.split(PROMPT_MARK, 1)[1] for e in replied.entities if PROMPT_MARK in e.url), None)
        if token is None:
            return  # a reply to the card or to a note: not an answer to a question
        prompt = read_prompt(self.name, token)
        if prompt is None:
            self._reply(message, "This question has expired or is not one this gateway asked; tap the button again.")
            return
        user = message.sender
        if str(user.id) != prompt.user:
            self._reply(message, "This question was for someone else; tap the card's button to answer yourself.")
            return
        click = Callback(
            confirmation_id=prompt.confirmation_id,
            decision="reject" if prompt.kind == "reason" else "approve",
            actor=str(user.id),
            actor_name=user.display_name,
            dedupe_key=f"telegram:reply:{message.chat.id}:{message.message_id}",
            whole_turn=prompt.shown is not None,
            shown_ids=prompt.shown,
        )
        text = message.text.strip()
        if prompt.kind == "reason":
            if not text:
                self._reply(message, "Please say why you are rejecting this call: reply with your reason.")
                return
            outcome = decide(dataclasses.replace(click, reason=text[:REASON_MAX_LENGTH]))
        else:
            try:
                edits = json.loads(text)
            except ValueError as exc:
                self._reply(
                    message, f'That is not valid JSON ({exc.msg}); reply with an object such as {{"amount": 100}}.'
                )
                return
            if not isinstance(edits, dict) or not edits:
                self._reply(message, 'Reply with a JSON object of the values to change, such as {"amount": 100}.')
                return
            # A value given as text ("9000") is read as the type of the value it replaces, like a typed
            # form field; any other JSON value must already be of that type (Callback.typed_edits).
            typed = {path: value for path, value in edits.items() if isinstance(value, str)}
            values = {path: value for path, value in edits.items() if not isinstance(value, str)}
            outcome = decide(dataclasses.replace(click, edits=values or None, typed_edits=typed or None))
        self._reply(message, outcome.message or "Done.")

    def _answer(self, query_id: str, text: str, *, alert: bool) -> None:
        """Answer a tap (Telegram shows a spinner until it is answered); a failure loses only the note."""
        try:
            self.call(
                "answerCallbackQuery",
                lambda bot: bot.answer_callback_query(query_id, text=cards.cut(text, ANSWER_LIMIT), show_alert=alert),
            )
        except ChannelError:
            pass  # logged by call(); e.g. a redelivered tap whose query was answered already

    def _reply(self, message: _Message, text: str) -> None:
        try:
            self.call(
                "sendMessage",
                lambda bot: bot.send_message(
                    chat_id=message.chat.id,
                    text=text,
                    reply_parameters=ReplyParameters(message.message_id, allow_sending_without_reply=True),
                    link_preview_options=NO_PREVIEW,
                ),
            )
        except ChannelError:
            pass  # logged by call(); the decision stands, only the note is lost
