"""The Telegram approval message: HTML text and an inline keyboard, from a `CardView`.

Pure functions: no I/O, no SDK. The text uses Telegram's HTML parse mode
(https://core.telegram.org/bots/api#html-style); everything from an agent or a
user is cut, then escaped, so an argument cannot open a tag or dress up a link.
Telegram refuses a text over 4096 characters (as shown, tags aside): a card
drawn with the usual limits that would be longer is drawn again with compact
ones, which keep any card under it. The keyboard is rows of (label,
callback_data) with compact signed data (buttons.py).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import html
import json
import re
from typing import Any

from gateway_contract import CardItem, CardView, actor_label, split_actor
from channels_ext.telegram import buttons
from channels_ext.cardkit import RISK_ICONS, card_risk, is_high, risk_word, waiting_line

Keyboard = list[list[tuple[str, str]]]

TEXT_LIMIT = 4096  # https://core.telegram.org/bots/api#sendmessage, counted after the tags are parsed
SHORT_LIMIT = 200  # agent, tool, user and session names
REASON_LIMIT = 600
MAX_TURN_ITEMS = 10  # two buttons per call, and the rest of the card
MAX_APPROVERS_SHOWN = 20
_TAG = re.compile(r"<[^>]+>")


@dataclasses.dataclass(frozen=True)
class Limits:
    """How much of each part a card shows (characters, as the reader sees them)."""

    name: int = 200  # agent, tool, user, session, a person's label
    args: int = 1500  # all the arguments of one call
    arg_value: int = 300
    reason: int = 600  # why gated, a decision's reason, a note
    people: int = MAX_APPROVERS_SHOWN  # approvers and approvals listed
    item_name: int = 200  # one call of a turn: its tool, who decided it
    item_args: int = 300
    item_reason: int = 200


# Under COMPACT a request's card shows at most ~3400 characters, a turn's ~3700 (10 calls at ~230).
COMPACT = Limits(name=60, args=600, arg_value=200, reason=200, people=5, item_name=30, item_args=80, item_reason=40)


def visible_length(text: str) -> int:
    """How long Telegram counts an HTML text: without its tags, entities as one character."""
    return len(html.unescape(_TAG.sub("", text)))


_OUTCOME_ICONS = {"approved": "✅", "rejected": "❌", "expired": "⌛", "cancelled": "🚫"}


def cut(text: str, limit: int) -> str:
    """Shorten `text` to at most `limit` characters, ending with "…" when cut."""
    return text if len(text) <= limit else text[: max(limit - 1, 0)] + "…"


def esc(text: str, limit: int) -> str:
    """Cut (what the reader sees counts), then escape for Telegram's HTML."""
    return html.escape(cut(text, limit), quote=False)


def date_text(moment: dt.datetime) -> str:
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.UTC)
    return moment.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")


def is_user_id(native: str) -> bool:
    """Telegram users are numbers; a gate may list nothing else for a Telegram channel."""
    return native.isdigit() and len(native) <= 20


def person(actor_id: str, name: str = "", limit: int = SHORT_LIMIT) -> str:
    """Who, as HTML: a Telegram user as a mention ("alice (telegram:111)", linked to the user), anyone else as text."""
    kind, native = split_actor(actor_id)
    label = esc(actor_label(actor_id, name), limit)
    if kind in ("telegram", "") and is_user_id(native):
        return f'<a href="tg://user?id={native}">{label}</a>'
    return label


def _args(args: dict[str, Any], limit: int, value_limit: int, *, sep: str = "\n") -> str:
    """The arguments as `key = value` lines, cut to `limit` characters, then escaped."""
    if not args:
        return "(no arguments)"
    lines = []
    for key, value in args.items():
        rendered = (
            value
            if isinstance(value, str) and "\n" not in value
            else json.dumps(value, ensure_ascii=False, default=str)
        )
        lines.append(f"{key} = {cut(str(rendered), value_limit)}")
    return html.escape(cut(sep.join(lines), limit), quote=False)


def outcome_line(card: CardView | CardItem, limits: Limits = Limits()) -> str:
    """How a decided request ended, as HTML: "✅ <b>Approved</b> by alice (telegram:111) at … — why"."""
    line = f"{_OUTCOME_ICONS.get(card.status, '•')} <b>{card.status.capitalize()}</b>"
    if card.edited:
        line += " (edited)"
    if card.decided_by and card.status != "expired":
        line += f" by {person(card.decided_by, card.decided_by_name, limits.name)}"
    decided_at = getattr(card, "decided_at", None)
    if decided_at is not None:
        line += f" at {date_text(decided_at)}"
    if card.decision_reason:
        line += f" — {esc(card.decision_reason, limits.reason)}"
    return line


def risk_line(risk: str) -> str:
    """ "🔴 <b>Risk: high</b>" (the whole label bold when high), "🟢 <b>Risk:</b> low"."""
    word = risk_word(risk)
    return f"{RISK_ICONS[word]} <b>Risk: high</b>" if is_high(word) else f"{RISK_ICONS[word]} <b>Risk:</b> {word}"


def _details(card: CardView, now: dt.datetime | None, limits: Limits) -> list[str]:
    why = esc(card.reason, limits.reason) if card.reason else "(no reason given)"
    lines = [f"<b>Why:</b> {why}" + (f" <i>(hook {esc(card.hook, limits.name)})</i>" if card.hook else "")]
    if card.expires_at is not None:
        left = ""
        if card.is_pending or card.pending_items:
            minutes = int((card.expires_at - (now or dt.datetime.now(dt.UTC))).total_seconds() // 60)
            left = f" (in {minutes} minute{'s' if minutes != 1 else ''})" if minutes > 0 else " (in less than a minute)"
        lines.append(f"<b>Expires:</b> {date_text(card.expires_at)}{left}")
    if card.approvals_required > 1:
        progress = f"<b>Approvals:</b> {len(card.approved_by)} of {card.approvals_required}"
        if card.approved_by:
            progress += (
                " (" + ", ".join(person(who, limit=limits.name) for who in card.approved_by[: limits.people]) + ")"
            )
        lines.append(progress)
    if waiting := waiting_line(card, person=lambda who, _name: person(who, limit=limits.name), limit=limits.people):
        lines.append(f"<b>Waiting for:</b> {waiting}")
    if card.approvers:
        shown = ", ".join(person(who, limit=limits.name) for who in card.approvers[: limits.people])
        more = len(card.approvers) - limits.people
        lines.append(f"<b>Approvers:</b> {shown}" + (f" and {more} more" if more > 0 else ""))
    return lines


def card_text(card: CardView, *, now: dt.datetime | None = None) -> str:
    """The message's HTML: who wants to run what, why, until when; the outcome once decided."""
    drawn = _card_text(card, now, Limits())
    return drawn if visible_length(drawn) <= TEXT_LIMIT else _card_text(card, now, COMPACT)


def _card_text(card: CardView, now: dt.datetime | None, limits: Limits) -> str:
    if card.items:
        return _turn_text(card, now, limits)
    head = "<b>Approval needed</b>" if card.is_pending else outcome_line(card, limits)
    lines = [head, risk_line(card.risk), *_notes(card, limits)]
    lines.append(f"<b>{esc(card.agent, limits.name)}</b> wants to run <code>{esc(card.tool_name, limits.name)}</code>")
    who = f"<b>End user:</b> {esc(card.user_id, limits.name) or '—'}"
    if card.session_id:
        who += f" · <b>Session:</b> {esc(card.session_id, limits.name)}"
    lines += [who, f"<pre>{_args(card.tool_args, limits.args, limits.arg_value)}</pre>"]
    if card.edited:
        edited = _args(card.approved_args or {}, limits.args, limits.arg_value)
        lines.append(f"<b>Approved arguments</b> (edited by the approver):\n<pre>{edited}</pre>")
    lines += _details(card, now, limits)
    lines.append(f'<a href="{html.escape(card.url)}">Open in browser</a>')
    return "\n".join(lines)


def _notes(card: CardView, limits: Limits) -> list[str]:
    notes = ["⏫ <b>Escalated:</b> more approvers have been asked to decide."] if card.escalated else []
    return notes + ([f"🔔 {esc(card.note, limits.reason)}"] if card.note else [])


def _turn_text(card: CardView, now: dt.datetime | None, limits: Limits) -> str:
    """A turn's card: the calls one agent turn made, numbered, each with its outcome once decided."""
    pending = card.pending_items
    title = (
        f"Approval needed: {len(pending)} of {len(card.items)} calls of one turn" if pending else "Calls of one turn"
    )
    lines = [f"<b>{title}</b>", risk_line(card_risk(card)), *_notes(card, limits)]
    lines.append(
        f"<b>Agent:</b> {esc(card.agent, limits.name)} · <b>End user:</b> {esc(card.user_id, limits.name) or '—'}"
    )
    for number, item in enumerate(card.items[:MAX_TURN_ITEMS], start=1):
        args = _args(item.tool_args, limits.item_args, limits.arg_value, sep=" · ")
        risk = risk_word(item.risk)
        line = f"{number}. {RISK_ICONS[risk]} <code>{esc(item.tool_name, limits.item_name)}</code> ({risk} risk) {args}"
        if not item.is_pending:
            item_limits = dataclasses.replace(limits, name=limits.item_name, reason=limits.item_reason)
            line += f"\n    {outcome_line(item, item_limits)}"
        lines.append(line)
    if len(card.items) > MAX_TURN_ITEMS:
        lines.append(f"… {len(card.items) - MAX_TURN_ITEMS} more calls: see them in the browser")
    lines += _details(card, now, limits)
    lines.append(f'<a href="{html.escape(card.url)}">Open in browser</a>')
    return "\n".join(lines)


def shown_with_buttons(card: CardView) -> tuple[str, ...]:
    """The calls of a turn's card that get buttons (pending, within the cap): what its "all" buttons decide."""
    return tuple(item.confirmation_id for item in card.items[:MAX_TURN_ITEMS] if item.is_pending)


def keyboard(card: CardView, channel: str) -> Keyboard:
    """The buttons while something is pending; none once decided."""
    if card.items:
        return _turn_keyboard(card, channel)
    if not card.is_pending:
        return []

    def data(action: str) -> str:
        return buttons.button_data(channel, action, card.confirmation_id)

    rows: Keyboard = [[("✅ Approve", data(buttons.APPROVE)), ("❌ Reject…", data(buttons.REJECT))]]
    rows += [[(cut(f"Approve {label}", 60), data(str(n)))] for n, label in enumerate(card.grant_options[:10])]
    if card.editable_paths:
        rows.append([("✏️ Edit, then approve…", data(buttons.EDIT))])
    return rows


def _turn_keyboard(card: CardView, channel: str) -> Keyboard:
    rows: Keyboard = []
    for number, item in enumerate(card.items[:MAX_TURN_ITEMS], start=1):
        if item.is_pending:
            rows.append(
                [
                    (f"Approve {number}", buttons.button_data(channel, buttons.APPROVE, item.confirmation_id)),
                    (f"Reject {number}…", buttons.button_data(channel, buttons.REJECT, item.confirmation_id)),
                ]
            )
    shown = shown_with_buttons(card)
    if len(shown) > 1:
        rows.append(
            [
                (
                    f"✅ Approve all {len(shown)}",
                    buttons.button_data(channel, buttons.APPROVE_ALL, card.confirmation_id, shown),
                ),
                (
                    f"❌ Reject all {len(shown)}…",
                    buttons.button_data(channel, buttons.REJECT_ALL, card.confirmation_id, shown),
                ),
            ]
        )
    return rows


def reminder_text(card: CardView, note: str) -> str:
    """The reply under the card that pings the approvers still to answer (Telegram notifies on mentions)."""
    answered = {split_actor(who)[1] for who in card.approved_by}
    waiting = [who for who in card.approvers if who not in answered and is_user_id(who)]
    mentions = " ".join(person(who) for who in waiting[:MAX_APPROVERS_SHOWN])
    return f"🔔 {esc(note, REASON_LIMIT)}" + (f"\n{mentions}" if mentions else "")
