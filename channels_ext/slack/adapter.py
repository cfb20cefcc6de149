"""The Slack channel: approval cards over the Web API, clicks over interactivity.

Outbound calls go through slack-sdk's `WebClient`. Clicks arrive one of two
ways (the channel's `mode`, docs/slack.md): as HTTP requests to
`/channels/<name>/callback`, verified with slack-sdk's `SignatureVerifier`
before anything is parsed, or over Socket Mode (channels_ext/slack/connection.py),
where the connection itself is the authentication. Both hand the interaction
payload to `handle_interaction`: the same parsing, the same `decide`, the same
answer (an HTTP body, or a Socket Mode ack's payload). The payloads' shapes are
channels_ext/slack/payloads.py's; a failed Web API call is classed in api_errors.py.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
from collections.abc import Callable
from http.client import HTTPException
from typing import Any, ClassVar

from django.http import HttpRequest, HttpResponse, JsonResponse
from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError, SlackClientError, SlackRequestError
from slack_sdk.http_retry import ConnectionErrorRetryHandler, RateLimitErrorRetryHandler
from slack_sdk.signature import SignatureVerifier
from slack_sdk.web import SlackResponse

from gateway_contract import (
    Callback,
    CallbackError,
    CardView,
    ChannelAdapter,
    ChannelError,
    Decide,
    DigestView,
    MessageRef,
    sign_confirmation_id,
    split_actor,
    unsign_confirmation_id,
    unsign_digest_ids,
)
from gateway_contract.links import ChannelLink
from gateway_contract import answers
from channels_ext.slack import cards, digest, question_cards
from channels_ext.slack.api_errors import api_error
from channels_ext.slack.config import SlackChannelConfig
from channels_ext.slack.connection import SlackSocketModeLink
from channels_ext.slack.payloads import (
    AnswerMetadata,
    BlockActions,
    EditMetadata,
    RejectMetadata,
    ViewSubmission,
    form_payload,
    grant_index,
    parse,
    turn_button,
    view_callback_id,
)
from channels_ext.slack.tasks import send_response_url

logger = logging.getLogger(__name__)


class SlackAdapter(ChannelAdapter):
    """Posts approval cards to one Slack channel and handles their button clicks."""

    kind = "slack"
    config_model = SlackChannelConfig
    config: SlackChannelConfig

    http_timeout: ClassVar[int] = 10
    # views.open must use the click's trigger_id within 3 s, inside Slack's own 3 s
    # answer budget: no rate-limit sleeps, a short timeout.
    # https://docs.slack.dev/interactivity/handling-user-interaction#modal_responses
    interactive_timeout: ClassVar[int] = 2

    @functools.cached_property
    def client(self) -> WebClient:
        """The Web API client for card posts and edits (retries connections and 429s)."""
        return WebClient(
            token=self.config.bot_token,
            base_url=self.config.api_base_url,
            timeout=self.http_timeout,
            # The default handlers retry only connection errors; a 429 would raise at once.
            retry_handlers=[ConnectionErrorRetryHandler(), RateLimitErrorRetryHandler(max_retry_count=2)],
        )

    @functools.cached_property
    def interactive_client(self) -> WebClient:
        """The Web API client for calls made while Slack waits for our answer."""
        return WebClient(
            token=self.config.bot_token,
            base_url=self.config.api_base_url,
            timeout=self.interactive_timeout,
            retry_handlers=[],
        )

    # --- outbound ---------------------------------------------------------

    def post_card(self, card: CardView, *, idempotency_key: str) -> MessageRef:
        """Post the approval card to the configured channel; return its channel and ts.

        Slack's chat.postMessage has no idempotency key, so `idempotency_key` is
        unused: the caller must store the returned ref and never post twice.
        """
        response = self._call(
            "chat.postMessage",
            lambda: self.client.chat_postMessage(
                channel=self.config.channel_id,
                text=_fallback(card),
                blocks=_blocks(card),
            ),
        )
        channel, ts = response.get("channel"), response.get("ts")
        if not isinstance(channel, str) or not isinstance(ts, str):
            raise ChannelError("slack chat.postMessage failed: the answer has no channel or ts")
        return MessageRef({"channel": channel, "ts": ts})

    def update_card(self, card: CardView, ref: MessageRef) -> None:
        """Redraw a posted card; once decided it loses its buttons and says the outcome."""
        channel, ts = self._locate(ref)
        self._call(
            "chat.update",
            lambda: self.client.chat_update(
                channel=channel,
                ts=ts,
                text=_fallback(card),
                blocks=_blocks(card),
            ),
        )

    def post_digest(self, view: DigestView, *, idempotency_key: str) -> MessageRef:
        """Post a digest message (docs/slack.md, "Digests"); like a card, never posted twice by the caller."""
        response = self._call(
            "chat.postMessage",
            lambda: self.client.chat_postMessage(
                channel=self.config.channel_id, text=digest.digest_fallback(view), blocks=digest.digest_blocks(view)
            ),
        )
        channel, ts = response.get("channel"), response.get("ts")
        if not isinstance(channel, str) or not isinstance(ts, str):
            raise ChannelError("slack chat.postMessage failed: the answer has no channel or ts")
        return MessageRef({"channel": channel, "ts": ts})

    def update_digest(self, view: DigestView, ref: MessageRef) -> None:
        """Redraw a posted digest: each call's state, buttons only for what is still pending."""
        channel, ts = self._locate(ref)
        self._call(
            "chat.update",
            lambda: self.client.chat_update(
                channel=channel, ts=ts, text=digest.digest_fallback(view), blocks=digest.digest_blocks(view)
            ),
        )

    def notify_approvers(self, card: CardView, ref: MessageRef, text: str) -> None:
        """Redraw the card with `text` as a note, then mention the waiting approvers in its thread.

        A chat.update notifies nobody; a thread reply with mentions does. With no
        Slack user ids to mention (any member may decide) the redraw is all.
        """
        self.update_card(dataclasses.replace(card, note=text), ref)
        answered = {split_actor(who)[1] for who in card.approved_by}  # slack:U… ids; approvers are listed as U…
        waiting = [u for u in card.approvers if u not in answered and cards.is_slack_user_id(u)]
        if not waiting:
            return
        channel, ts = self._locate(ref)
        mentions = " ".join(f"<@{u}>" for u in waiting[:20])
        self._call(
            "chat.postMessage",
            lambda: self.client.chat_postMessage(
                channel=channel, thread_ts=ts, text=f"{mentions} {cards.escape(text)}"
            ),
        )

    # --- people (docs/approving.md, "People") -------------------------------

    finds_people_by_email = True
    sends_direct_messages = True

    def find_user_by_email(self, email: str) -> str | None:
        """The Slack user id of the workspace member with this e-mail (`users.lookupByEmail`, which needs
        the `users:read.email` scope); None if no member has it."""
        try:
            response = self._call("users.lookupByEmail", lambda: self.client.users_lookupByEmail(email=email))
        except ChannelError as err:
            if err.message.endswith(": users_not_found"):
                return None
            raise
        user = response.get("user") or {}
        user_id = user.get("id") if isinstance(user, dict) else None
        return user_id if isinstance(user_id, str) and cards.is_slack_user_id(user_id) else None

    def send_direct(self, native_id: str, text: str) -> None:
        """A direct message from the app to one member (chat.postMessage to their user id opens the DM)."""
        if not cards.is_slack_user_id(native_id):
            raise ChannelError(f"{native_id!r} is not a Slack user id (U… or W…)", permanent=True)
        self._call("chat.postMessage", lambda: self.client.chat_postMessage(channel=native_id, text=cards.escape(text)))

    @staticmethod
    def _locate(ref: MessageRef) -> tuple[str, str]:
        channel, ts = ref.data.get("channel"), ref.data.get("ts")
        if not isinstance(channel, str) or not isinstance(ts, str) or not channel or not ts:
            raise ChannelError("slack message ref lacks channel or ts", permanent=True)
        return channel, ts

    @staticmethod
    def _call(method: str, send: Callable[[], SlackResponse]) -> SlackResponse:
        try:
            return send()
        except SlackApiError as err:
            error = api_error(method, err)
            logger.warning("%s (status %s)", error.message, err.response.status_code)
            raise error from None
        except SlackRequestError as err:
            # Raised before sending: an unusable base URL or proxy setting.
            raise ChannelError(f"slack {method} failed: bad request setup ({err})", permanent=True) from None
        except (OSError, HTTPException) as err:
            # URLError, refused/reset connections and timeouts are all OSErrors.
            logger.warning("slack %s failed: %s", method, type(err).__name__)
            raise ChannelError(
                f"slack {method} failed: connection error ({type(err).__name__})", code="connection_error"
            ) from None

    # --- inbound ----------------------------------------------------------

    def handle_callback(self, request: HttpRequest, decide: Decide) -> HttpResponse:
        """Verify a Slack interactivity request, act on it, and answer within Slack's 3 s.

        Handles Approve clicks, Reject clicks (which open a reason modal) and the
        modal's submission; anything else is acknowledged and ignored.
        """
        if self.config.mode != "http":
            raise CallbackError(
                403, f"this channel takes its clicks over Slack Socket Mode (mode: {self.config.mode}), not at this URL"
            )
        body = self._verified_body(request)
        answer = self.handle_interaction(form_payload(body), decide)
        return JsonResponse(answer) if answer is not None else HttpResponse(status=200)

    def handle_interaction(self, payload: dict[str, Any], decide: Decide, *, dedupe_key: str = "") -> dict[str, Any] | None:
        """Act on an authenticated interaction payload; return what Slack gets back (None: an empty 200 / ack).

        Called with the payload of a verified HTTP request, or of a Socket Mode
        envelope (whose ack carries the returned dict as its payload). `dedupe_key`
        names this delivery for `CallbackReceipt` when the transport can redeliver.
        Raises CallbackError(400) for a payload that is not a proper click.
        """
        kind = payload.get("type")
        if kind == "block_actions":
            return self._on_block_actions(parse(BlockActions, payload, "block_actions payload"), decide, dedupe_key)
        if kind == "view_submission" and view_callback_id(payload) == cards.REJECT_MODAL_CALLBACK_ID:
            return self._on_reject_submission(
                parse(ViewSubmission, payload, "view_submission payload"), decide, dedupe_key
            )
        if kind == "view_submission" and view_callback_id(payload) == cards.EDIT_MODAL_CALLBACK_ID:
            return self._on_edit_submission(parse(ViewSubmission, payload, "view_submission payload"), decide, dedupe_key)
        if kind == "view_submission" and view_callback_id(payload) == question_cards.MODAL_CALLBACK_ID:
            return self._on_answer_submission(
                parse(ViewSubmission, payload, "view_submission payload"), decide, dedupe_key
            )
        # Recognised but not ours to act on (view_closed, other views…): a 200 stops Slack showing an error.
        return None

    def open_connection(self, decide: Decide) -> ChannelLink:
        """The Socket Mode connection that brings this channel's clicks (mode: socket)."""
        return SlackSocketModeLink(self, decide)

    def _verified_body(self, request: HttpRequest) -> bytes:
        body = request.body
        verifier = SignatureVerifier(self.config.signing_secret)
        try:
            valid = verifier.is_valid_request(body, request.headers)
        except (ValueError, TypeError):
            # slack_sdk 3.47 raises instead of answering False: int() on a non-numeric
            # timestamp (ValueError), UTF-8 decoding of the body (UnicodeDecodeError), and
            # hmac.compare_digest on a non-ASCII signature (TypeError).
            valid = False
        if not valid:
            raise CallbackError(401, "Slack request signature is missing, stale or wrong")
        return body

    def _on_block_actions(self, payload: BlockActions, decide: Decide, dedupe_key: str) -> dict[str, Any] | None:
        action = payload.actions[0]
        action_id = action.action_id
        if question_cards.is_question_action(action_id):
            return self._on_question_click(payload, decide, dedupe_key)
        if action_id == digest.APPROVE_DIGEST_ACTION_ID:
            return self._on_digest_click(payload, decide, dedupe_key)
        grant = grant_index(action_id)
        known = (
            cards.APPROVE_ACTION_ID, cards.REJECT_ACTION_ID, cards.EDIT_BUTTON_ACTION_ID,
            cards.APPROVE_ALL_ACTION_ID, cards.REJECT_ALL_ACTION_ID,
        )  # fmt: skip
        if action_id not in known and grant is None:
            return None
        if not action.value:
            raise CallbackError(400, f"the {action_id} button carries no value")
        whole_turn = action_id in (cards.APPROVE_ALL_ACTION_ID, cards.REJECT_ALL_ACTION_ID)
        if whole_turn:
            confirmation_id, shown_ids = turn_button(action.value)
        else:
            confirmation_id, shown_ids = unsign_confirmation_id(action.value), None
        user = payload.user

        def click(decision: str, **more: Any) -> Callback:
            return Callback(
                confirmation_id=confirmation_id, decision=decision, actor=user.id, actor_name=user.display_name, **more
            )

        if action_id in (cards.APPROVE_ACTION_ID, cards.APPROVE_ALL_ACTION_ID) or grant is not None:
            outcome = decide(
                click("approve", dedupe_key=dedupe_key, grant=grant, whole_turn=whole_turn, shown_ids=shown_ids)
            )
            # A redelivery of a click already handled (same dedupe_key) gets no second note; a turn's
            # "all" always says what it did, since some calls may have been left as they were.
            if whole_turn or (not outcome.applied and not (dedupe_key and outcome.code == "duplicate")):
                self._tell_clicker(payload.response_url, cards.escape(outcome.message))
            return None

        if action_id == cards.EDIT_BUTTON_ACTION_ID:
            # Check first that an approval would count, so nobody edits for nothing.
            outcome = decide(click("approve", dry_run=True))
            if not outcome.applied or outcome.card is None:
                self._tell_clicker(payload.response_url, cards.escape(outcome.message))
                return None
            if not payload.trigger_id:
                raise CallbackError(400, "the edit click carries no trigger_id")
            paths = list(outcome.card.editable_paths[: cards.MAX_EDIT_FIELDS])
            if not paths:
                self._tell_clicker(payload.response_url, "This request's gate does not allow editing its arguments.")
                return None
            metadata = EditMetadata(
                confirmation=sign_confirmation_id(confirmation_id), paths=paths, response_url=payload.response_url
            )
            view = cards.edit_modal(outcome.card, private_metadata=metadata.model_dump_json())
            self._open_modal(payload, view, outcome.card, "the edit form")
            return None

        # Reject: check first that a rejection would count, so nobody types a reason for nothing.
        outcome = decide(click("reject", dry_run=True, whole_turn=whole_turn, shown_ids=shown_ids))
        if not outcome.applied:
            self._tell_clicker(payload.response_url, cards.escape(outcome.message))
            return None
        if not payload.trigger_id:
            raise CallbackError(400, "the reject click carries no trigger_id")
        metadata = RejectMetadata(
            confirmation=sign_confirmation_id(confirmation_id),
            response_url=payload.response_url,
            channel=payload.container.channel_id,
            ts=payload.container.message_ts,
            whole_turn=whole_turn,
            shown=action.value if whole_turn else "",
        )
        # `whole_turn` only when set: a single call's modal carries what it always did.
        dumped = metadata.model_dump_json(exclude=None if whole_turn else {"whole_turn", "shown"})
        self._open_modal(payload, cards.reject_modal(outcome.card, private_metadata=dumped), outcome.card, "the rejection form")
        return None

    def _on_digest_click(self, payload: BlockActions, decide: Decide, dedupe_key: str) -> None:
        """"Approve these N": the calls the button carries (signed with the digest's id), each decided on its own."""
        digest_id, shown_ids = unsign_digest_ids(payload.actions[0].value)
        if not digest_id or not shown_ids:
            raise CallbackError(400, "the digest button names no calls")
        outcome = decide(
            Callback(
                confirmation_id=shown_ids[0], decision="approve", actor=payload.user.id,
                actor_name=payload.user.display_name, dedupe_key=dedupe_key, digest_id=digest_id, shown_ids=shown_ids,
            )
        )  # fmt: skip
        self._tell_clicker(payload.response_url, cards.escape(outcome.message))

    def _on_question_click(self, payload: BlockActions, decide: Decide, dedupe_key: str) -> None:
        """An option button or the select menu answers at once; the Answer button opens the modal."""
        action = payload.actions[0]
        selected = action.selected_option.get("value") if action.selected_option else None
        signed = question_cards.selected_question(action.action_id, action.value, selected)
        if not signed:
            raise CallbackError(400, f"the {action.action_id} element carries no question")
        question_id = unsign_confirmation_id(signed)
        user = payload.user
        probe = decide(
            Callback(confirmation_id=question_id, decision="answer", actor=user.id, actor_name=user.display_name,
                     dry_run=True)
        )  # fmt: skip
        if probe.card is None or not probe.applied:
            self._tell_clicker(payload.response_url, cards.escape(probe.message))
            return None
        if action.action_id == question_cards.OPEN_ACTION_ID:
            if not payload.trigger_id:
                raise CallbackError(400, "the answer click carries no trigger_id")
            metadata = AnswerMetadata(question=signed, response_url=payload.response_url)
            view = question_cards.answer_modal(probe.card, private_metadata=metadata.model_dump_json())
            self._open_modal(payload, view, probe.card, "the answer form")
            return None
        answer = question_cards.clicked_answer(probe.card.answer_schema or {}, action.action_id, selected)
        outcome = decide(
            Callback(confirmation_id=question_id, decision="answer", actor=user.id, actor_name=user.display_name,
                     answer=answer, dedupe_key=dedupe_key)
        )  # fmt: skip
        if not outcome.applied and not (dedupe_key and outcome.code == "duplicate"):
            self._tell_clicker(payload.response_url, cards.escape(outcome.message))
        return None

    def _on_answer_submission(self, payload: ViewSubmission, decide: Decide, dedupe_key: str) -> dict[str, Any]:
        try:
            metadata_json = json.loads(payload.view.private_metadata)
        except ValueError:
            raise CallbackError(400, "the answer form's private_metadata is not JSON") from None
        metadata: AnswerMetadata = parse(AnswerMetadata, metadata_json, "answer form metadata")
        question_id = unsign_confirmation_id(metadata.question)
        user = payload.user
        # The schema is the question's as the gateway holds it (never the form's): read it without deciding.
        probe = decide(
            Callback(confirmation_id=question_id, decision="answer", actor=user.id, actor_name=user.display_name,
                     dry_run=True)
        )  # fmt: skip
        if probe.card is None or not probe.applied:
            return {"response_action": "errors", "errors": {question_cards.first_block_id(): probe.message[:500]}}
        schema = probe.card.answer_schema or {}
        inputs = question_cards.answer_inputs(schema, payload.view.state.values)
        outcome = decide(
            Callback(
                confirmation_id=question_id,
                decision="answer",
                actor=user.id,
                actor_name=user.display_name,
                answer=answers.answer_from_inputs(schema, inputs),
                dedupe_key=dedupe_key,
            )
        )
        if outcome.applied or (dedupe_key and outcome.code == "duplicate"):
            return {"response_action": "clear"}
        return {"response_action": "errors", "errors": {question_cards.first_block_id(): outcome.message[:500]}}

    def _open_modal(self, payload: BlockActions, view: dict[str, Any], card: CardView | None, what: str) -> None:
        try:
            self.interactive_client.views_open(trigger_id=payload.trigger_id, view=view)
        except (SlackClientError, OSError, HTTPException) as err:
            failure = api_error("views.open", err).message if isinstance(err, SlackApiError) else type(err).__name__
            logger.warning("slack views.open failed: %s", failure)
            where = f" or decide on the web page: <{card.url}|open it>" if card else ""
            self._tell_clicker(payload.response_url, f"Could not open {what}; please try again{where}.")

    def _on_edit_submission(self, payload: ViewSubmission, decide: Decide, dedupe_key: str) -> dict[str, Any]:
        try:
            metadata_json = json.loads(payload.view.private_metadata)
        except ValueError:
            raise CallbackError(400, "the edit form's private_metadata is not JSON") from None
        metadata: EditMetadata = parse(EditMetadata, metadata_json, "edit form metadata")
        confirmation_id = unsign_confirmation_id(metadata.confirmation)
        typed_edits: dict[str, str] = {}
        for number, path in enumerate(metadata.paths):
            block_id = f"{cards.EDIT_BLOCK_PREFIX}{number}"
            typed = payload.view.state.values.get(block_id, {}).get(cards.EDIT_ACTION_ID, {}).get("value")
            if typed is None:
                continue  # left empty by the approver: unchanged
            if not isinstance(typed, str):
                raise CallbackError(400, f"the edit form's {block_id} is not text")
            typed_edits[path] = typed  # read by the gateway as the type of the value it replaces
        outcome = decide(
            Callback(
                confirmation_id=confirmation_id,
                decision="approve",
                actor=payload.user.id,
                actor_name=payload.user.display_name,
                typed_edits=typed_edits,
                dedupe_key=dedupe_key,
            )
        )
        if outcome.applied:
            return {"response_action": "clear"}
        # A refused edit (an input outside the editable paths among them: the gateway's modal has none) is a
        # 200 with the errors in the modal, which stays open; any other answer shows only Slack's own error.
        first = f"{cards.EDIT_BLOCK_PREFIX}0"
        return {"response_action": "errors", "errors": {first: outcome.message[:500]}}

    def _on_reject_submission(self, payload: ViewSubmission, decide: Decide, dedupe_key: str) -> dict[str, Any]:
        try:
            metadata_json = json.loads(payload.view.private_metadata)
        except ValueError:
            raise CallbackError(400, "the reject form's private_metadata is not JSON") from None
        metadata: RejectMetadata = parse(RejectMetadata, metadata_json, "reject form metadata")
        confirmation_id = unsign_confirmation_id(metadata.confirmation)
        shown_ids = None
        if metadata.whole_turn and metadata.shown:
            lead, shown_ids = turn_button(metadata.shown)
            if lead != confirmation_id:
                raise CallbackError(400, "the reject form's list of calls belongs to another card")
        try:
            reason = payload.view.state.values[cards.REASON_BLOCK_ID][cards.REASON_ACTION_ID].get("value") or ""
        except KeyError:
            raise CallbackError(400, "the reject form has no reason field") from None
        if not isinstance(reason, str) or not reason.strip():
            return _view_errors("Please say why you are rejecting this call.")
        outcome = decide(
            Callback(
                confirmation_id=confirmation_id,
                decision="reject",
                actor=payload.user.id,
                actor_name=payload.user.display_name,
                reason=reason.strip(),
                dedupe_key=dedupe_key,
                whole_turn=metadata.whole_turn,
                shown_ids=shown_ids,
            )
        )
        if outcome.applied:
            if metadata.whole_turn:
                self._tell_clicker(metadata.response_url, cards.escape(outcome.message))
            return {"response_action": "clear"}
        return _view_errors(outcome.message)

    @staticmethod
    def _tell_clicker(response_url: str, text: str) -> None:
        """Queue an ephemeral note to the clicker; it goes out after our answer to Slack."""
        if not response_url:
            return
        payload = {"response_type": "ephemeral", "replace_original": False, "text": text}
        try:
            send_response_url.delay(response_url, payload)
        except Exception:
            # The click itself was handled; only the courtesy note is lost (broker down).
            logger.exception("could not queue the slack response_url note")


def _blocks(card: CardView) -> list[dict[str, Any]]:
    return question_cards.question_blocks(card) if card.is_question else cards.card_blocks(card)


def _fallback(card: CardView) -> str:
    return question_cards.question_fallback_text(card) if card.is_question else cards.fallback_text(card)


def _view_errors(message: str) -> dict[str, Any]:
    # https://docs.slack.dev/surfaces/modals#displaying_errors
    return {"response_action": "errors", "errors": {cards.REASON_BLOCK_ID: message[:500]}}
