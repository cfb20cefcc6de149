"""Small pure helpers the channels' cards and click parsers share: text cut to a vendor's limit, times and
argument values as text, the value at an argument path, the edits an approver typed as JSON, and how a
card marks a call's risk.

No I/O and no vendor SDK: each channel's own module decides how its medium shows these (escaping is
the medium's business, and stays in its cards module).
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable, Mapping
from typing import Any

from gateway_contract import CallbackError, CardView, unsign_shown_ids

STATUS_TITLES = {
    "pending": "Approval needed",
    "approved": "Approved",
    "rejected": "Rejected",
    "expired": "Expired",
    "cancelled": "Cancelled",
}
OUTCOME_ICONS = {"approved": "✅", "rejected": "❌", "expired": "⌛", "cancelled": "🚫"}
# How every card marks a call's risk (docs/policies.md, "Risk"): the word, after a marker a reader
# tells apart at a glance; each medium adds its own colour, and high stands out (bold, red).
RISK_ICONS = {"low": "🟢", "medium": "🟡", "high": "🔴"}
_RISK_ORDER = ("low", "medium", "high")


def _as_is(text: str) -> str:
    return text


def cut(text: str, limit: int) -> str:
    """Shorten `text` to at most `limit` characters, ending with "…" when cut."""
    if len(text) <= limit:
        return text
    return text[: max(limit - 1, 0)] + "…"


def utc_text(moment: dt.datetime) -> str:
    """A timestamp as UTC text, for cards that cannot show each reader's own time zone."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.UTC)
    return moment.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")


def value_text(value: Any) -> str:
    """An argument's value as one line of text: a string as it is, anything else as JSON."""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)


def risk_word(risk: str) -> str:
    """A risk as cards show it: low, medium or high. Anything else (which the gateway never stores)
    is shown as high: a card never makes a call look safer than it may be."""
    return risk if risk in RISK_ICONS else "high"


def card_risk(card: CardView) -> str:
    """The risk a card shows in its head: the request's; on a turn's card the highest of its calls."""
    risks = [risk_word(card.risk), *(risk_word(item.risk) for item in card.items)]
    return max(risks, key=_RISK_ORDER.index)


def risk_label(risk: str) -> str:
    """ "🔴 Risk: high": the marker and the word, as plain text (each medium escapes and styles it)."""
    word = risk_word(risk)
    return f"{RISK_ICONS[word]} Risk: {word}"


def is_high(risk: str) -> bool:
    return risk_word(risk) == "high"


def deciders(card: CardView) -> tuple[tuple[str, str], ...]:
    """Who decided a request, as (channel-qualified id, display name): every approval of a quorum, or the one
    who rejected or cancelled; nobody for an expiry."""
    if card.status == "approved" and card.approved_by:
        return tuple((who, card.decided_by_name if who == card.decided_by else "") for who in card.approved_by)
    if card.decided_by and card.status in ("approved", "rejected", "cancelled"):
        return ((card.decided_by, card.decided_by_name),)
    return ()


def _behalf(card: CardView, actor: str, shown: str, text: Callable[[str], str]) -> str:
    """" on behalf of Ada" after the decider a medium shows by a mention (which drops the display name
    that says it); "" where the shown label carries it already, or the decision was no stand-in's."""
    if not card.on_behalf_of or actor != card.decided_by or card.behalf.strip() in shown:
        return ""
    return text(card.behalf)


def waiting_line(card: CardView, *, person: Callable[[str, str], str], limit: int = 20) -> str:
    """Who still has to answer a request that needs several approvals, "" when nobody is listed:
    "Bob, Carol" (people's names, or channel ids a medium shows as mentions)."""
    if not card.waiting_for or not card.is_pending:
        return ""
    shown = ", ".join(person(who, "") for who in card.waiting_for[:limit])
    more = len(card.waiting_for) - limit
    return shown + (f" and {more} more" if more > 0 else "")


def outcome_sentence(
    card: CardView,
    *,
    person: Callable[[str, str], str],
    text: Callable[[str], str] = _as_is,
    strong: Callable[[str], str] = _as_is,
) -> str:
    """How a decided request ended: "✅ Approved (edited) by <person>, <person> at 2026-… UTC — <reason>".

    Each medium says how a person is shown (a mention, a label), makes text safe (`text`) and stresses
    the outcome (`strong`).
    """
    sentence = f"{OUTCOME_ICONS.get(card.status, 'ℹ️')} {strong(text(card.status.capitalize()))}"
    if card.edited:
        sentence += " (edited)"
    who = deciders(card)
    if who:
        sentence += " by " + ", ".join(person(actor, name) + _behalf(card, actor, person(actor, name), text) for actor, name in who)
    if card.decided_at is not None:
        sentence += f" at {utc_text(card.decided_at)}"
    if card.decision_reason:
        sentence += f" — {text(card.decision_reason)}"
    return sentence


def typed_edits(paths: Any, typed: Mapping[str, Any], *, prefix: str, max_fields: int) -> dict[str, str] | None:
    """The arguments an approver changed in an edit form, as typed: input `<prefix><n>` holds the text for
    `paths[n]` (the gateway reads it as the JSON type of the value it replaces: `Callback.typed_edits`).

    None when the click carries no edit form; an input left empty leaves its value as it was. Raises
    CallbackError(400) for a form this gateway did not draw.
    """
    if paths is None:
        return None
    if not isinstance(paths, list) or len(paths) > max_fields or not all(isinstance(p, str) for p in paths):
        raise CallbackError(400, "the edit button's value does not list the argument paths")
    edits: dict[str, str] = {}
    for number, path in enumerate(paths):
        value = typed.get(f"{prefix}{number}")
        if value is None or value == "":
            continue  # left empty: unchanged
        if not isinstance(value, str):
            raise CallbackError(400, f"the value typed for {path} is not text")
        edits[path] = value
    return edits


def shown_ids(shown: Any, confirmation_id: str) -> tuple[str, ...] | None:
    """The calls a turn's Approve all / Reject all decides (its button's signed `shown`). A card drawn
    before the buttons carried them has none: None, so the click decides nothing and the card is
    redrawn (`Callback.shown_ids`). CallbackError(400) for a list edited or taken from another card."""
    if shown is None:
        return None
    if not isinstance(shown, str):
        raise CallbackError(400, "the button value's shown is not a signed list of calls")
    lead, ids = unsign_shown_ids(shown)
    if lead != confirmation_id:
        raise CallbackError(400, "the button value's list of calls belongs to another card")
    return ids
