"""Slack's interaction payloads, parsed strictly (docs/slack.md): the HTTP form that carries one, the
block_actions and view_submission shapes the adapter acts on, and what our modals carry from the click
to the submission in their private_metadata. Anything else is a CallbackError(400)."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import parse_qs

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from channels_ext.slack import cards
from gateway_contract import CallbackError, unsign_confirmation_id, unsign_shown_ids


class _Payload(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)


class _User(_Payload):
    id: str = Field(min_length=1)
    name: str = ""
    username: str = ""

    @property
    def display_name(self) -> str:
        return self.name or self.username


class _Action(_Payload):
    action_id: str
    value: str = ""
    selected_option: dict[str, Any] | None = None  # a select menu's choice


class _Container(_Payload):
    channel_id: str = ""
    message_ts: str = ""


class BlockActions(_Payload):
    user: _User
    actions: list[_Action] = Field(min_length=1)
    trigger_id: str = ""
    response_url: str = ""
    container: _Container = _Container()


class _ViewState(_Payload):
    values: dict[str, dict[str, dict[str, Any]]]


class _View(_Payload):
    callback_id: str = ""
    private_metadata: str = ""
    state: _ViewState


class ViewSubmission(_Payload):
    user: _User
    view: _View


class RejectMetadata(_Payload):
    """What the reject modal carries from the click to the submission."""

    confirmation: str = Field(min_length=1)  # the signed confirmation id, as on the button
    response_url: str = ""
    channel: str = ""
    ts: str = ""
    whole_turn: bool = False  # Reject all on a turn's card
    shown: str = ""  # with whole_turn: the Reject all button's value (the calls it decides, signed)


class AnswerMetadata(_Payload):
    """What the answer modal carries from the click to the submission."""

    question: str = Field(min_length=1)  # the signed question id, as on the button
    response_url: str = ""


class EditMetadata(_Payload):
    """What the edit modal carries from the click to the submission."""

    confirmation: str = Field(min_length=1)  # the signed confirmation id, as on the button
    paths: list[str] = Field(max_length=cards.MAX_EDIT_FIELDS)  # block edit_<n> holds the value of paths[n]
    response_url: str = ""


def parse(model: type[_Payload], data: Any, what: str) -> Any:
    try:
        return model.model_validate(data)
    except ValidationError as err:
        raise CallbackError(400, f"malformed Slack {what}: {err.error_count()} problem(s)") from None


def form_payload(body: bytes) -> dict[str, Any]:
    """The interaction payload of an HTTP request's body: a URL-encoded form of one JSON `payload` field."""
    try:
        form = parse_qs(
            body.decode("utf-8"), keep_blank_values=True, strict_parsing=True, errors="strict", max_num_fields=2
        )
    except ValueError:  # includes UnicodeDecodeError and too many fields
        raise CallbackError(400, "the body is not a URL-encoded form") from None
    if set(form) != {"payload"} or len(form["payload"]) != 1:
        raise CallbackError(400, "the form must hold exactly one `payload` field")
    try:
        payload = json.loads(form["payload"][0])
    except ValueError:
        raise CallbackError(400, "the `payload` field is not JSON") from None
    if not isinstance(payload, dict) or not isinstance(payload.get("type"), str):
        raise CallbackError(400, "the `payload` field is not a Slack interaction payload")
    return payload


def turn_button(value: str) -> tuple[str, tuple[str, ...] | None]:
    """(the turn's lead, the calls it decides) from an Approve all / Reject all button's value. A card
    drawn before these buttons carried the calls has the lead's signed id alone: no calls (None), so
    the click decides nothing and the card is redrawn (`Callback.shown_ids`)."""
    try:
        return unsign_shown_ids(value)
    except CallbackError:
        return unsign_confirmation_id(value), None


def grant_index(action_id: str) -> int | None:
    """The scope an `approve_grant_<n>` button approves for; None for any other button."""
    tail = action_id.removeprefix(cards.GRANT_ACTION_PREFIX)
    return int(tail) if tail != action_id and tail.isdigit() and len(tail) <= 2 else None


def view_callback_id(payload: dict[str, Any]) -> str | None:
    view = payload.get("view")
    return view.get("callback_id") if isinstance(view, dict) else None
